//! `lab-reader`: a job of another team that reads hard from one storage server (the noisy neighbour of
//! the `competing-job` fault). Flags map onto [`ReaderOptions`]; the work is in
//! [`lab_workloads::reader::run`].

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lab_model::format::error_chain;
use lab_workloads::reader::{self, ReaderOptions};

/// A job of another team sharing the lab's storage: it reads the whole needles one storage server holds,
/// over and over, from several connections at once, straight to the server (not through the ranks'
/// path). It is not a rank and trains nothing.
///
/// Exit codes: 2 bad flags, 3 no dataset (or nothing on that server) within --startup-timeout.
#[derive(Debug, Parser)]
#[command(name = "lab-reader", version, max_term_width = 110)]
struct Cli {
    /// The SeaweedFS master, HOST:PORT.
    #[arg(long, env = "LAB_MASTER")]
    master: String,

    /// The storage server to read from, by its rack name (storage-1).
    #[arg(long, env = "LAB_READER_SERVER")]
    server: String,

    /// The dataset whose needles it reads.
    #[arg(long, env = "LAB_DATASET", default_value = "lab-train")]
    dataset: String,

    /// Connections reading at once.
    #[arg(long, env = "LAB_READER_THREADS", default_value_t = lab_model::jobs::DEFAULT_THREADS)]
    threads: u32,

    /// Reads per second across all connections [default: as fast as the server answers].
    #[arg(long, env = "LAB_READER_RATE")]
    rate: Option<f64>,

    /// Where /metrics, /readyz and /healthz are served, ADDR:PORT.
    #[arg(long, env = "LAB_METRICS_LISTEN", default_value = "0.0.0.0:9400")]
    metrics_listen: String,

    /// Bound on each storage request.
    #[arg(long, default_value = "30s", value_parser = duration)]
    storage_timeout: Duration,

    /// How long to wait for the dataset before giving up.
    #[arg(long, default_value = "120s", value_parser = duration)]
    startup_timeout: Duration,
}

fn duration(s: &str) -> Result<Duration, String> {
    lab_model::parse_duration(s).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let opts = ReaderOptions {
        master: cli.master,
        dataset: cli.dataset,
        server: cli.server,
        threads: cli.threads,
        rate: cli.rate,
        metrics_listen: cli.metrics_listen,
        timeout: cli.storage_timeout,
        startup_timeout: cli.startup_timeout,
    };
    if let Err(e) = reader::validate(&opts) {
        eprintln!("lab-reader: {}", error_chain(&e));
        return ExitCode::from(2);
    }
    match reader::run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lab-reader: {}", error_chain(&e));
            ExitCode::from(3)
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
