//! The `cacheless` binary: the command line of [`cacheless_cli`].

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(cacheless_cli::run(std::env::args_os().collect(), None).0)
}
