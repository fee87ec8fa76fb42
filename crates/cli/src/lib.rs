//! The `cacheless` command line: read, write, copy and extract big data without filling the
//! page cache. The `cacheless` binary and the Python package's `cacheless` console script both
//! run [`run`].
#![deny(unsafe_code)]

mod bench;
mod cat;
mod clean;
mod common;
mod cp;
mod evict;
mod extract;
mod getopt;
mod hash;
mod info;
mod pack;
mod remote;
mod ui;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

use clap::{Parser, Subcommand};
use common::CommonOpts;

/// Read, write, copy and extract big data at direct-I/O speed without filling the page cache.
///
/// Every command picks the best mechanism per file (O_DIRECT, RWF_DONTCACHE, write-behind, or
/// buffered for files already cached) and says which with -v or --json.
#[derive(Parser, Debug)]
#[command(name = "cacheless", version, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    common: CommonOpts,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// What the kernel and each path's filesystem support, residency, and what auto would do.
    Info(info::InfoArgs),
    /// Stream files to standard output.
    Cat(cat::CatArgs),
    /// Copy files and trees as GNU cp does (its options, results and messages), off the page cache: reflinks, holes kept, many files at once, verified from the disk on request; durable and atomic per file.
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Cp(cp::CpCmd),
    /// Print checksums like sha256sum.
    Hash(hash::HashArgs),
    /// Drop files' pages from the page cache (no root needed).
    Evict(evict::EvictArgs),
    /// Unpack a tar archive (zstd, gzip, xz, lz4, bzip2 or plain) safely, without filling the cache.
    #[command(disable_help_flag = true)]
    Extract(extract::ExtractArgs),
    /// Create a tar archive (zstd in parallel frames, gzip, xz, lz4, bzip2 or plain) without filling the cache.
    Pack(pack::PackArgs),
    /// Measure throughput, CPU, reclaim and page-cache growth of each mode, fio-style.
    Bench(bench::BenchArgs),
    /// List and remove the temporaries that killed or crashed jobs left under folders (never a running job's).
    Clean(clean::CleanArgs),
    /// The quick built-in comparison of every mode (what `cacheless bench` does with no arguments).
    Demo,
    /// A helper process of `cacheless bench --scenario pressure|neighbour`, started by the benchmark itself.
    #[command(name = "bench-helper", hide = true)]
    BenchHelper {
        /// `hold FREE MAX PARENT`, `reread FILE PARENT`, or `fetch URL` (bench/remote.sh: an object
        /// fetched and dropped).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Many files in flight need descriptors: the soft RLIMIT_NOFILE is raised to the hard limit
/// for this process (the library sizes what it holds open to whatever the limit is).
fn raise_nofile() {
    cacheless::sys::raise_nofile_limit();
}

/// The command line with `--` put after the `cp` subcommand where cp's arguments hold one, so
/// that clap, which takes the first `--` after it as its own, hands them over whole:
/// `cacheless cp -- -f g` copies the file `-f` to `g`, as `cp -- -f g` does.
fn cp_operands_kept(mut args: Vec<OsString>) -> Vec<OsString> {
    // The subcommand: the first word that is neither an option nor the value of one.
    let cmd = <Cli as clap::CommandFactory>::command();
    let takes_value = |a: &std::ffi::OsStr| {
        let a = a.to_string_lossy();
        cmd.get_arguments().any(|o| {
            o.get_action().takes_values() && (o.get_long().is_some_and(|l| a == format!("--{l}")) || o.get_short().is_some_and(|c| a == format!("-{c}")))
        })
    };
    let mut i = 1;
    while i < args.len() {
        let a = args[i].as_encoded_bytes();
        if a == b"--" || !a.starts_with(b"-") {
            break;
        }
        i += if takes_value(&args[i]) { 2 } else { 1 };
    }
    // Only where cp's own arguments hold a `--`: elsewhere clap reads the options every
    // command takes after `cp` too (and refuses a bad value as a usage error).
    if args.get(i).is_some_and(|a| a == "cp") && args[i + 1..].iter().any(|a| a == "--") {
        args.insert(i + 1, "--".into());
    }
    args
}

/// A command's exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitCode(pub u8);

impl ExitCode {
    /// 0.
    pub const SUCCESS: ExitCode = ExitCode(0);
}

impl From<u8> for ExitCode {
    fn from(code: u8) -> ExitCode {
        ExitCode(code)
    }
}

/// The program that runs this command line again, when it is not this executable (the Python
/// package's console script: this executable is the interpreter).
static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// The program that runs this command line again (the helpers of `cacheless bench`), where it
/// is not this executable.
pub(crate) fn program() -> Option<PathBuf> {
    PROGRAM.get().cloned()
}

/// Runs the command line `args` (the program's name first, as `std::env::args_os` gives it)
/// and returns its exit status, standard output flushed. `program`: the program that runs this
/// command line again, where it is not this executable. Messages go to standard error and
/// output to standard output, as the binary writes them.
pub fn run(args: Vec<OsString>, program: Option<PathBuf>) -> ExitCode {
    if let Some(p) = program {
        let _ = PROGRAM.set(p);
    }
    let code = run_args(args);
    use std::io::Write;
    let _ = std::io::stdout().flush();
    code
}

fn run_args(args: Vec<OsString>) -> ExitCode {
    // Run through a link named `cp`, cacheless is cp: GNU cp's command line and messages.
    let mut argv = args.clone().into_iter();
    if let Some(argv0) = argv.next() {
        if std::path::Path::new(&argv0).file_name() == Some(std::ffi::OsStr::new("cp")) {
            if let Err(msg) = cacheless::check_disabled() {
                eprintln!("cp: {msg}");
                return ExitCode::from(1);
            }
            raise_nofile();
            let rest: Vec<OsString> = argv.collect();
            return cp::run_as_cp(&argv0, &rest);
        }
    }
    use clap::{CommandFactory, FromArgMatches};
    // Parsed once; extract reads where its `-C`s stand among the member names from the matches.
    let matches = Cli::command().get_matches_from(cp_operands_kept(args));
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Err(msg) = cacheless::check_disabled() {
        eprintln!("error: {msg}");
        return ExitCode::from(2);
    }
    raise_nofile();
    // The transfers' flags mean nothing where no operand is a URL: refused, naming the flag,
    // rather than ignored (cp checks its own, among its operands).
    let urls: Option<Vec<&std::path::Path>> = match &cli.cmd {
        Cmd::Info(a) => Some(a.paths.iter().map(|p| p.as_path()).collect()),
        Cmd::Cat(a) => Some(a.files.iter().map(|p| p.as_path()).collect()),
        Cmd::Hash(a) => Some(a.files.iter().map(|p| p.as_path()).collect()),
        Cmd::Extract(a) => Some(vec![a.archive.as_path()]),
        Cmd::Pack(a) => Some(vec![a.output.as_path()]),
        Cmd::Evict(_) | Cmd::Bench(_) | Cmd::Clean(_) | Cmd::Demo => Some(Vec::new()),
        Cmd::Cp(_) | Cmd::BenchHelper { .. } => None,
    };
    if let Some(operands) = urls {
        if let Some(flag) = cli.common.remote.given().filter(|_| !operands.iter().any(|p| remote::is_remote(p))) {
            eprintln!("error: {flag} applies to s3:// and http(s):// URLs, and no operand is one\n\nFor more information, try '--help'.");
            return ExitCode::from(2);
        }
    }
    let r = match &cli.cmd {
        Cmd::Info(a) => info::run(a, &cli.common),
        Cmd::Cat(a) => cat::run(a, &cli.common),
        Cmd::Cp(a) => return cp::run(a, &cli.common),
        Cmd::Hash(a) => hash::run(a, &cli.common),
        Cmd::Evict(a) => evict::run(a, &cli.common),
        Cmd::Extract(a) => extract::run(a, &cli.common, matches.subcommand_matches("extract")),
        Cmd::Pack(a) => pack::run(a, &cli.common),
        Cmd::Bench(a) => bench::run(a, &cli.common),
        Cmd::Clean(a) => clean::run(a, &cli.common),
        Cmd::Demo => bench::run_default(&cli.common),
        Cmd::BenchHelper { args } if args.first().is_some_and(|a| a == "fetch") && args.len() == 2 => {
            remote::discard(std::path::Path::new(&args[1]), &cli.common.io(), &cli.common.remote).map(|_| ExitCode::SUCCESS).map_err(anyhow::Error::new)
        }
        Cmd::BenchHelper { args } => return bench::helper(args),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            if ui::is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            if let Some(ui::UsageError(msg)) = e.downcast_ref::<ui::UsageError>() {
                eprintln!("error: {msg}\n\nFor more information, try '--help'.");
                return ExitCode::from(2);
            }
            ui::print_error(&e);
            ExitCode::from(1)
        }
    }
}
