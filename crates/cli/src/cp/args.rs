//! `cp`'s command line, read as GNU cp 9.1 reads its own (see [`crate::getopt`]): GNU's
//! options with GNU's defaults, checks and words, and cacheless's own options beside them.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use cacheless::digest::Algo;
use cacheless::{BackendKind, Mode, Reflink, Sparse};
use cacheless_cp::{Attr, BackupKind, CpOptions, Deref, Link, Target};

use crate::common;
use crate::getopt::{self, argmatch, Found, HasArg, LongOpt};

/// Ids of the long options without a short one (above any letter).
mod id {
    pub const ATTRIBUTES_ONLY: u32 = 256;
    pub const COPY_CONTENTS: u32 = 257;
    pub const NO_PRESERVE: u32 = 258;
    pub const PARENTS: u32 = 259;
    pub const PRESERVE: u32 = 260;
    pub const REFLINK: u32 = 261;
    pub const SPARSE: u32 = 262;
    pub const STRIP_TRAILING_SLASHES: u32 = 263;
    pub const REMOVE_DESTINATION: u32 = 264;
    pub const BACKUP: u32 = 265;
    pub const CONTEXT: u32 = 266;
    pub const HELP: u32 = 267;
    pub const VERSION: u32 = 268;
    pub const DEBUG: u32 = 300;
    pub const INPLACE: u32 = 301;
    pub const VERIFY: u32 = 302;
    pub const VERIFY_ALGO: u32 = 303;
    pub const BWLIMIT: u32 = 304;
    pub const THREADS: u32 = 305;
    pub const NO_SYNC: u32 = 306;
    pub const MODE: u32 = 307;
    pub const BACKEND: u32 = 308;
    pub const BLOCK_SIZE: u32 = 309;
    pub const QUEUE_DEPTH: u32 = 310;
    pub const MEMORY: u32 = 311;
    pub const JSON: u32 = 312;
    pub const PART_SIZE: u32 = 313;
    pub const CONCURRENCY: u32 = 314;
    pub const NO_SIGN_REQUEST: u32 = 315;
    pub const ENDPOINT_URL: u32 = 316;
    pub const REGION: u32 = 317;
    pub const CA_BUNDLE: u32 = 318;
    pub const RETRIES: u32 = 319;
    pub const READ_TIMEOUT: u32 = 320;
}

/// GNU cp's short options (getopt's string).
const SHORTS: &str = "abdfHilLnprst:uvxPRS:TZ";

const fn gnu(name: &'static str, has_arg: HasArg, id: u32) -> LongOpt {
    LongOpt { name, has_arg, id, prefix: true }
}
const fn own(name: &'static str, has_arg: HasArg, id: u32) -> LongOpt {
    LongOpt { name, has_arg, id, prefix: false }
}
const fn c(l: u8) -> u32 {
    l as u32
}

/// GNU cp 9.1's long options (matched by prefix), then cacheless's (spelt out only).
const LONGS: &[LongOpt] = &[
    gnu("archive", HasArg::No, c(b'a')),
    gnu("attributes-only", HasArg::No, id::ATTRIBUTES_ONLY),
    gnu("backup", HasArg::Optional, id::BACKUP),
    gnu("copy-contents", HasArg::No, id::COPY_CONTENTS),
    gnu("dereference", HasArg::No, c(b'L')),
    gnu("force", HasArg::No, c(b'f')),
    gnu("interactive", HasArg::No, c(b'i')),
    gnu("link", HasArg::No, c(b'l')),
    gnu("no-clobber", HasArg::No, c(b'n')),
    gnu("no-dereference", HasArg::No, c(b'P')),
    gnu("no-preserve", HasArg::Required, id::NO_PRESERVE),
    gnu("no-target-directory", HasArg::No, c(b'T')),
    gnu("one-file-system", HasArg::No, c(b'x')),
    gnu("parents", HasArg::No, id::PARENTS),
    gnu("path", HasArg::No, id::PARENTS),
    gnu("preserve", HasArg::Optional, id::PRESERVE),
    gnu("recursive", HasArg::No, c(b'R')),
    gnu("remove-destination", HasArg::No, id::REMOVE_DESTINATION),
    gnu("sparse", HasArg::Required, id::SPARSE),
    gnu("reflink", HasArg::Optional, id::REFLINK),
    gnu("strip-trailing-slashes", HasArg::No, id::STRIP_TRAILING_SLASHES),
    gnu("suffix", HasArg::Required, c(b'S')),
    gnu("symbolic-link", HasArg::No, c(b's')),
    gnu("target-directory", HasArg::Required, c(b't')),
    gnu("update", HasArg::No, c(b'u')),
    gnu("verbose", HasArg::No, c(b'v')),
    gnu("context", HasArg::Optional, id::CONTEXT),
    gnu("help", HasArg::No, id::HELP),
    gnu("version", HasArg::No, id::VERSION),
    own("debug", HasArg::No, id::DEBUG),
    own("inplace", HasArg::No, id::INPLACE),
    own("verify", HasArg::No, id::VERIFY),
    own("verify-algo", HasArg::Required, id::VERIFY_ALGO),
    own("bwlimit", HasArg::Required, id::BWLIMIT),
    own("threads", HasArg::Required, id::THREADS),
    own("no-sync", HasArg::No, id::NO_SYNC),
    own("mode", HasArg::Required, id::MODE),
    own("backend", HasArg::Required, id::BACKEND),
    own("block-size", HasArg::Required, id::BLOCK_SIZE),
    own("queue-depth", HasArg::Required, id::QUEUE_DEPTH),
    own("memory", HasArg::Required, id::MEMORY),
    own("json", HasArg::No, id::JSON),
    own("part-size", HasArg::Required, id::PART_SIZE),
    own("concurrency", HasArg::Required, id::CONCURRENCY),
    own("no-sign-request", HasArg::No, id::NO_SIGN_REQUEST),
    own("endpoint-url", HasArg::Required, id::ENDPOINT_URL),
    own("region", HasArg::Required, id::REGION),
    own("ca-bundle", HasArg::Required, id::CA_BUNDLE),
    own("retries", HasArg::Required, id::RETRIES),
    own("read-timeout", HasArg::Required, id::READ_TIMEOUT),
];

/// Whether `--interactive` or `--no-clobber` was given last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interactive {
    #[default]
    Unspecified,
    Ask,
    No,
}

/// What the command line asks for: the copy job's options, set as GNU's options are read, and
/// what only the command line has.
#[derive(Debug, Default)]
pub struct CpArgs {
    /// GNU's options and cacheless's that the copy job takes (its I/O and transfer settings
    /// are the defaults here: see the fields below).
    pub cp: CpOptions,
    /// `-i` or `-n`, whichever came last.
    pub interactive: Interactive,
    pub strip_trailing_slashes: bool,
    pub target_directory: Option<PathBuf>,
    pub no_target_directory: bool,
    pub verbose: bool,
    pub debug: bool,
    pub mode: Option<Mode>,
    pub backend: Option<BackendKind>,
    pub block_size: Option<usize>,
    pub queue_depth: Option<usize>,
    pub memory: Option<usize>,
    pub json: bool,
    /// `--verify-algo` was given (a URL is verified against its ETag: no other checksum).
    pub verify_algo: bool,
    /// Transfers to and from URLs.
    pub remote: crate::remote::RemoteFlags,
    /// The operands (sources, then the destination unless `-t`).
    pub files: Vec<PathBuf>,
}

/// How the command line ends without a copy.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    /// `--help`.
    Help,
    /// `--version`.
    Version,
    /// A usage error: the message (none where the parser printed nothing), and whether GNU
    /// follows it with "Try '... --help'" (it does not for `die` messages).
    Usage(Option<String>, bool),
    /// A bad word for an option: GNU's message and the list of valid words.
    Invalid(String),
}

/// Reads `args` (without the program and subcommand names).
pub fn parse(args: &[OsString]) -> Result<CpArgs, Stop> {
    let (found, operands) = getopt::parse(args, SHORTS, LONGS).map_err(|e| Stop::Usage(Some(e.0), true))?;
    let mut a = CpArgs { files: operands.into_iter().map(PathBuf::from).collect(), ..CpArgs::default() };
    let mut make_backups = false;
    let mut version_control: Option<OsString> = None;
    let mut suffix: Option<OsString> = None;
    let mut verify_algo = Algo::Xxh3;
    let mut verify = false;
    let (mut hard, mut symbolic) = (false, false);
    for Found { id, arg } in found {
        let arg_ref = arg.as_deref();
        match id {
            id::SPARSE => a.cp.copy.sparse = choose("--sparse", arg_ref, &[("never", Sparse::Never), ("auto", Sparse::Auto), ("always", Sparse::Always)])?,
            id::REFLINK => {
                a.cp.copy.reflink = match arg_ref {
                    None => Reflink::Always,
                    Some(v) => choose("--reflink", Some(v), &[("auto", Reflink::Auto), ("always", Reflink::Always), ("never", Reflink::Never)])?,
                }
            }
            x if x == c(b'a') => a.cp = std::mem::take(&mut a.cp).archive(),
            x if x == c(b'b') => make_backups = true,
            id::BACKUP => {
                make_backups = true;
                if arg.is_some() {
                    version_control = arg;
                }
            }
            id::ATTRIBUTES_ONLY => a.cp.attributes_only = true,
            id::COPY_CONTENTS => a.cp.copy_contents = true,
            x if x == c(b'd') => {
                a.cp.preserve.links = true;
                a.cp.deref = Deref::Never;
            }
            x if x == c(b'f') => a.cp.force = true,
            x if x == c(b'H') => a.cp.deref = Deref::CommandLine,
            x if x == c(b'i') => a.interactive = Interactive::Ask,
            x if x == c(b'l') => hard = true,
            x if x == c(b'L') => a.cp.deref = Deref::Always,
            x if x == c(b'n') => a.interactive = Interactive::No,
            x if x == c(b'P') => a.cp.deref = Deref::Never,
            id::NO_PRESERVE => preserve_list(&mut a, arg_ref.unwrap_or_default(), false)?,
            id::PRESERVE if arg.is_some() => {
                preserve_list(&mut a, arg_ref.unwrap_or_default(), true)?;
            }
            x if x == id::PRESERVE || x == c(b'p') => {
                a.cp.preserve.ownership = true;
                a.cp.preserve.mode = true;
                a.cp.preserve.timestamps = true;
                a.cp.require_preserve = true;
            }
            id::PARENTS => a.cp.parents = true,
            x if x == c(b'r') || x == c(b'R') => a.cp.recursive = true,
            id::REMOVE_DESTINATION => a.cp.remove_destination = true,
            id::STRIP_TRAILING_SLASHES => a.strip_trailing_slashes = true,
            x if x == c(b's') => symbolic = true,
            x if x == c(b't') => {
                if a.target_directory.is_some() {
                    return Err(Stop::Usage(Some("multiple target directories specified".into()), false));
                }
                a.target_directory = arg.map(PathBuf::from);
            }
            x if x == c(b'T') => a.no_target_directory = true,
            x if x == c(b'u') => a.cp.update = true,
            x if x == c(b'v') => a.verbose = true,
            x if x == c(b'x') => a.cp.one_file_system = true,
            x if x == c(b'Z') => {}
            id::CONTEXT => {
                if arg.is_some() {
                    crate::cp::warn("warning: ignoring --context; it requires an SELinux-enabled kernel");
                }
            }
            x if x == c(b'S') => {
                make_backups = true;
                suffix = arg;
            }
            id::HELP => return Err(Stop::Help),
            id::VERSION => return Err(Stop::Version),
            id::DEBUG => {
                a.debug = true;
                a.verbose = true;
            }
            id::INPLACE => a.cp.inplace = true,
            id::VERIFY => verify = true,
            id::VERIFY_ALGO => {
                verify_algo = own_value("--verify-algo", arg_ref)?;
                a.verify_algo = true;
            }
            id::BWLIMIT => {
                let rate = bounded("--bwlimit", arg_ref, |s| cacheless::limits::parse_rate("--bwlimit", s))?;
                a.cp.copy.rate = rate.map(|r| std::sync::Arc::new(cacheless::RateLimit::new(r)));
            }
            id::THREADS => a.cp.threads = Some(bounded("--threads", arg_ref, common::parse_threads)?),
            id::NO_SYNC => a.cp.durability = cacheless::Durability::Off { write_back: None },
            id::MODE => a.mode = Some(own_value("--mode", arg_ref)?),
            id::BACKEND => a.backend = Some(own_value("--backend", arg_ref)?),
            id::BLOCK_SIZE => a.block_size = Some(bounded("--block-size", arg_ref, common::parse_block_size)?),
            id::QUEUE_DEPTH => a.queue_depth = Some(bounded("--queue-depth", arg_ref, common::parse_queue_depth)?),
            id::MEMORY => a.memory = Some(bounded("--memory", arg_ref, common::parse_memory)?),
            id::JSON => a.json = true,
            id::PART_SIZE => a.remote.part_size = Some(bounded("--part-size", arg_ref, crate::remote::parse_part_size)?),
            id::CONCURRENCY => a.remote.concurrency = Some(bounded("--concurrency", arg_ref, crate::remote::parse_concurrency)?),
            id::NO_SIGN_REQUEST => a.remote.no_sign_request = true,
            id::ENDPOINT_URL => a.remote.endpoint_url = arg.map(|v| v.to_string_lossy().into_owned()),
            id::REGION => a.remote.region = arg.map(|v| v.to_string_lossy().into_owned()),
            id::CA_BUNDLE => a.remote.ca_bundle = arg.map(PathBuf::from),
            id::RETRIES => a.remote.retries = Some(bounded("--retries", arg_ref, crate::remote::parse_retries)?),
            id::READ_TIMEOUT => a.remote.read_timeout = Some(bounded("--read-timeout", arg_ref, crate::remote::parse_read_timeout)?),
            _ => return Err(Stop::Usage(None, true)),
        }
    }
    if hard && symbolic {
        return Err(Stop::Usage(Some("cannot make both hard and symbolic links".into()), true));
    }
    a.cp.link = if hard {
        Link::Hard
    } else if symbolic {
        Link::Symbolic
    } else {
        Link::Copy
    };
    a.cp.copy.verify = verify.then_some(verify_algo);
    if a.interactive == Interactive::No {
        a.cp.update = false;
    }
    if make_backups && a.interactive == Interactive::No {
        return Err(Stop::Usage(Some("options --backup and --no-clobber are mutually exclusive".into()), true));
    }
    if a.cp.copy.reflink == Reflink::Always && a.cp.copy.sparse != Sparse::Auto {
        return Err(Stop::Usage(Some("--reflink can be used only with --sparse=auto".into()), true));
    }
    if make_backups {
        let kind = backup_kind(version_control)?;
        let suffix = suffix.or_else(|| std::env::var_os("SIMPLE_BACKUP_SUFFIX"));
        // gnulib: a suffix that is empty or holds a slash is not used.
        let suffix = suffix.filter(|s| !s.is_empty() && !s.as_encoded_bytes().contains(&b'/')).map(|s| s.to_string_lossy().into_owned());
        if let Some(kind) = kind {
            a.cp.backup = Some((kind, suffix.unwrap_or_else(|| "~".into())));
        }
    }
    Ok(a)
}

/// `--preserve=LIST` / `--no-preserve=LIST`: GNU's words (abbreviations allowed, as GNU's
/// argmatch allows them), each applied as the copy job applies it.
fn preserve_list(a: &mut CpArgs, list: &OsStr, on: bool) -> Result<(), Stop> {
    let what = if on { "--preserve" } else { "--no-preserve" };
    for w in list.as_encoded_bytes().split(|&b| b == b',') {
        let w = <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(w);
        let attr = choose(what, Some(w), &Attr::WORDS)?;
        a.cp.set_preserve(attr, on).map_err(|e| Stop::Usage(Some(e), false))?;
    }
    Ok(())
}

/// GNU's backup type from `--backup=CONTROL` or `$VERSION_CONTROL` (default existing);
/// `None`: no backups (`none`, `off`).
pub(crate) fn backup_kind(control: Option<OsString>) -> Result<Option<BackupKind>, Stop> {
    let words = [
        ("none", None),
        ("off", None),
        ("simple", Some(BackupKind::Simple)),
        ("never", Some(BackupKind::Simple)),
        ("existing", Some(BackupKind::Existing)),
        ("nil", Some(BackupKind::Existing)),
        ("numbered", Some(BackupKind::Numbered)),
        ("t", Some(BackupKind::Numbered)),
    ];
    let (value, what) = match control {
        Some(v) => (v, "backup type".to_string()),
        None => match std::env::var_os("VERSION_CONTROL").filter(|v| !v.is_empty()) {
            Some(v) => (v, "$VERSION_CONTROL".to_string()),
            None => return Ok(Some(BackupKind::Existing)),
        },
    };
    match argmatch(&value, &words) {
        Ok(k) => Ok(k),
        Err(ambiguous) => Err(invalid(&what, &value, ambiguous, &words.iter().map(|(n, v)| (*n, *v)).collect::<Vec<_>>())),
    }
}

/// The word `arg` names among `choices`, or GNU's complaint.
fn choose<T: Copy + PartialEq>(what: &str, arg: Option<&OsStr>, choices: &[(&str, T)]) -> Result<T, Stop> {
    let arg = arg.unwrap_or_default();
    argmatch(arg, choices).map_err(|ambiguous| invalid(what, arg, ambiguous, choices))
}

/// gnulib's `argmatch_invalid` and `argmatch_valid`: the complaint, then the valid words
/// (synonyms on one line).
fn invalid<T: Copy + PartialEq>(what: &str, arg: &OsStr, ambiguous: bool, choices: &[(&str, T)]) -> Stop {
    let first = if ambiguous {
        format!("ambiguous argument {} for {}", cacheless::quote::quote(arg), quote_plain(what))
    } else {
        format!("invalid argument {} for {}", cacheless::quote::quote(arg), quote_plain(what))
    };
    let mut list = String::from("Valid arguments are:");
    let mut last: Option<T> = None;
    for (n, v) in choices {
        if last == Some(*v) {
            list.push_str(&format!(", {}", quote_plain(n)));
        } else {
            list.push_str(&format!("\n  - {}", quote_plain(n)));
        }
        last = Some(*v);
    }
    Stop::Invalid(format!("{first}\n{list}"))
}

/// GNU's `quote` of a word it knows to be plain.
fn quote_plain(s: &str) -> String {
    format!("'{s}'")
}

/// A value of one of cacheless's own options.
fn own_value<T: std::str::FromStr>(what: &str, arg: Option<&OsStr>) -> Result<T, Stop>
where
    T::Err: std::fmt::Display,
{
    let s = arg.unwrap_or_default().to_string_lossy();
    s.parse::<T>().map_err(|e| Stop::Usage(Some(format!("invalid value '{s}' for '{what}': {e}")), true))
}

/// A value of one of cacheless's own options (`200M`, `8`), read and held to its bounds by
/// `parse` (the parsers of the flags every command takes: `crate::common`).
fn bounded<T>(what: &str, arg: Option<&OsStr>, parse: impl Fn(&str) -> Result<T, String>) -> Result<T, Stop> {
    let s = arg.unwrap_or_default().to_string_lossy();
    parse(&s).map_err(|e| Stop::Usage(Some(format!("invalid value '{s}' for '{what}': {e}")), true))
}

/// What `-t`/`-T` and the operands make of the destination.
pub fn target(a: &CpArgs) -> Target {
    if a.no_target_directory {
        Target::File
    } else if a.target_directory.is_some() {
        Target::Directory
    } else {
        Target::Auto
    }
}
