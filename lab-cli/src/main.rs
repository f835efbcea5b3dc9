//! The `lab` command: parses arguments and hands them to the library crates; see `cli.rs` for the flags.

mod cli;
mod cmd;
mod logging;
mod out;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if let cli::Command::Supervise { dir } = &cli.command {
        let log = lab_runtime::local::spec::Paths::new(dir).supervisor_log();
        if let Err(e) = logging::init_supervisor(&log) {
            eprintln!("supervisor: cannot open its log {}: {e}", log.display());
        }
        return match lab_runtime::local::supervisor::run(dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("supervisor: {e}");
                ExitCode::FAILURE
            }
        };
    }
    logging::init(cli.verbose);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(cmd::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", lab_model::format::error_chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}
