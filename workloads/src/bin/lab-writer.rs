//! `lab-writer`: the application beside the lab's database: small transactions committed on the primary,
//! reads on a connection of their own, and their golden signals on `/metrics`. The work is in
//! [`lab_workloads::writer::run`].

use std::process::ExitCode;

use clap::Parser;
use lab_model::format::error_chain;
use lab_workloads::writer::{self, WriterOptions};

/// Commits small transactions on the lab's PostgreSQL primary at a steady rate and reads beside them;
/// exports commits per second, commit latency (p50, p99, the age of the commit in flight) and reads per
/// second. A commit waits as long as the server takes, as an application's would.
///
/// Exit codes: 2 bad flags or a metrics address that cannot be bound.
#[derive(Debug, Parser)]
#[command(name = "lab-writer", version, max_term_width = 110)]
struct Cli {
    /// The primary, HOST:PORT (127.0.0.1:5432, or a name such as db-0.db:5432, looked up at each connect).
    #[arg(long, env = "LAB_DB_PRIMARY")]
    primary: String,

    /// The database user (trusted on loopback).
    #[arg(long, default_value = "postgres")]
    user: String,

    /// Commits per second.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,

    /// Where /metrics, /readyz and /healthz are served, ADDR:PORT.
    #[arg(long, env = "LAB_METRICS_LISTEN", default_value = "127.0.0.1:9410")]
    metrics_listen: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let opts = WriterOptions {
        primary: cli.primary,
        user: cli.user,
        rate: cli.rate,
        metrics_listen: cli.metrics_listen,
    };
    match writer::run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lab-writer: {}", error_chain(&e));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
