//! The `lab` command's log through `tracing`: events and step spans on stderr at the level `-v` asks for
//! (`RUST_LOG` overrides it; coloured on a terminal unless `NO_COLOR` is set), and the local supervisor's
//! events in the lab's `supervisor.log`.

use std::fs::OpenOptions;
use std::io::IsTerminal as _;
use std::path::Path;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

/// The filter `-v` given `verbose` times stands for: warnings only, then info (each step's span as it
/// closes, with its time), debug, and trace. Below debug the Kubernetes client's own log is left out: it
/// logs every refused request (a pod proxy answering 503 while a rank restarts) as an error, which the lab
/// reads, retries or reports in its own words.
fn level(verbose: u8) -> &'static str {
    match verbose {
        0 => "warn,kube_client=off",
        1 => "info,kube_client=off",
        2 => "debug",
        _ => "trace",
    }
}

/// `RUST_LOG` when it is set and valid, else `default`.
fn filter(default: &str) -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
}

/// Sends the command's events to stderr. At the default level nothing is written unless something warns,
/// so a command's own output is the same as without a subscriber.
pub fn init(verbose: u8) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(level(verbose)))
        .with_span_events(FmtSpan::CLOSE)
        // Colour only on a terminal, and never with NO_COLOR set.
        .with_ansi(lab_session::colour_for(std::io::stderr().is_terminal()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// Sends the supervisor's events to `log` (appended to, since every start of the supervisor adds to it),
/// from info up unless `RUST_LOG` says otherwise. The supervisor runs detached, so a file is where a person
/// reads what it did.
///
/// # Errors
/// When the log file cannot be opened.
pub fn init_supervisor(log: &Path) -> std::io::Result<()> {
    let file = OpenOptions::new().create(true).append(true).open(log)?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter("info"))
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_v_is_one_level_more() {
        assert_eq!(
            [0, 1, 2, 3, 9].map(level),
            [
                "warn,kube_client=off",
                "info,kube_client=off",
                "debug",
                "trace",
                "trace"
            ]
        );
        for l in [0, 1, 2, 3].map(level) {
            assert!(EnvFilter::try_new(l).is_ok(), "{l}");
        }
    }
}
