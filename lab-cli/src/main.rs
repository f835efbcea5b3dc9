//! The `lab` command: parses arguments and hands them to the lab's façade (`lab_session`) and its console;
//! see `cli.rs` for the flags, `exit.rs` for how it ends and `out.rs` for how it prints.

mod cli;
mod cmd;
mod env;
mod exit;
mod formats;
mod logging;
mod out;

use std::process::ExitCode;

use clap::FromArgMatches;

use crate::exit::Exit;

fn main() -> ExitCode {
    // clap prints help and usage errors itself and exits 0 or 2 (`Exit::Usage`).
    let cli = match cli::Cli::from_arg_matches(&cli::command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let cli::Command::Supervise { dir } = &cli.command {
        let log = lab_session::supervisor_log(dir);
        if let Err(e) = logging::init_supervisor(&log) {
            eprintln!("supervisor: cannot open its log {}: {e}", log.display());
        }
        return match lab_session::supervise(dir) {
            Ok(()) => Exit::Passed.into(),
            Err(e) => {
                eprintln!("supervisor: {e}");
                Exit::Error.into()
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
            return Exit::Error.into();
        }
    };
    let status = match rt.block_on(cmd::run(cli)) {
        Ok(status) => status,
        Err(e) => {
            let status = exit::of_error(&e);
            eprintln!("error: {}", lab_session::error_chain(e.as_ref()));
            status
        }
    };
    out::finish(status).into()
}
