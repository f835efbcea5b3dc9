//! `lab-beside`: run inside a rank's container through `exec` (Kubernetes), to see and act on what runs
//! beside the rank there. Subcommands map onto [`lab_workloads::beside`].

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use lab_model::format::error_chain;
use lab_workloads::beside;
use nix::sys::signal::Signal;

/// What runs beside a rank inside its container: list it, start a CPU hog there, hold the rank's training
/// thread still, signal a process. The lab runs it through `exec`; its output is meant for the lab.
///
/// Exit codes: 0 done, 1 refused or failed (the reason on stderr), 2 bad arguments.
#[derive(Debug, Parser)]
#[command(name = "lab-beside", version, max_term_width = 110)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Every live process in this container's cgroup (sharing its CPU limit), as JSON.
    Procs,
    /// Start a CPU hog here, detached; prints its pid.
    Hog,
    /// Hold the rank's training thread (its main thread) in a ptrace stop; prints the holder's pid. The
    /// thread runs again when the holder is killed.
    Hold {
        /// The rank's pid.
        #[arg(long)]
        pid: u32,
    },
    /// Send a signal to a process of this container.
    Signal {
        #[arg(long)]
        pid: u32,
        #[arg(long, value_enum)]
        signal: Sig,
    },
    /// The hog itself (started by `hog`).
    #[command(hide = true)]
    Spin,
    /// The holder itself (started by `hold`).
    #[command(hide = true, name = "hold-run")]
    HoldRun { pid: u32 },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Sig {
    Kill,
    Term,
    Cont,
    /// `lab-rank`'s "your accelerator failed now".
    Usr1,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Procs => beside::list().map(|p| println!("{}", serde_json::to_string(&p).unwrap_or_default())),
        Cmd::Hog => beside::start_hog().map(|pid| println!("{pid}")),
        Cmd::Hold { pid } => beside::hold(pid, Duration::from_secs(5)).map(|h| println!("{h}")),
        Cmd::Signal { pid, signal } => beside::signal(
            pid,
            match signal {
                Sig::Kill => Signal::SIGKILL,
                Sig::Term => Signal::SIGTERM,
                Sig::Cont => Signal::SIGCONT,
                Sig::Usr1 => Signal::SIGUSR1,
            },
        ),
        Cmd::Spin => beside::spin(),
        Cmd::HoldRun { pid } => beside::hold_run(pid),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lab-beside: {}", error_chain(&e));
            ExitCode::from(1)
        }
    }
}
