//! What several commands share: the running lab, its telemetry driver with the learned baseline, and a
//! snapshot taken over a short window.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lab_faults::Ledger;
use lab_model::Snapshot;
use lab_runtime::Runtime;
use lab_telemetry::{Collector, CollectorConfig, Driver, DriverConfig, LearnedBaseline};

/// The file in the lab's directory that keeps the baseline learned at `lab up`.
fn baseline_path(name: &str) -> PathBuf {
    lab_runtime::state::lab_dir(name).join("baseline.json")
}

/// The baseline learned at `lab up`, if any.
pub fn load_baseline(name: &str) -> Option<LearnedBaseline> {
    std::fs::read(baseline_path(name))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// Keeps a learned baseline for later commands.
pub fn save_baseline(name: &str, b: &LearnedBaseline) -> anyhow::Result<()> {
    let bytes = serde_json::to_vec_pretty(b)?;
    lab_runtime::state::write_atomic(&baseline_path(name), &bytes)?;
    Ok(())
}

/// A telemetry driver for the lab, reading its ledger, starting from the saved baseline.
pub fn driver(name: &str, rt: Arc<dyn Runtime>) -> Driver {
    let ledger = Ledger::of_lab(name);
    let mut collector = Collector::new(CollectorConfig::default());
    if let Some(b) = load_baseline(name) {
        collector.restore_baseline(b);
    }
    Driver::new(
        rt,
        Arc::new(move || ledger.view()),
        collector,
        DriverConfig::default(),
    )
}

/// Watches the lab for `window` and returns the last snapshot (rates need at least two scrapes).
/// On a terminal, a line on stderr says how long it watches, and is wiped before the answer.
pub async fn snapshot(name: &str, rt: Arc<dyn Runtime>, window: Duration) -> Snapshot {
    let mut d = driver(name, rt);
    let ticks = (window.as_secs_f64().max(1.0)).ceil() as u32 + 1;
    let tty = std::io::stderr().is_terminal();
    if tty {
        eprint!(
            "watching lab {name:?} for {} s (--window) …",
            ticks.saturating_sub(1)
        );
    }
    let mut every = tokio::time::interval(Duration::from_secs(1));
    let mut last = None;
    for _ in 0..ticks {
        every.tick().await;
        last = Some(d.tick().await);
    }
    if tty {
        eprint!("\r\x1b[2K");
    }
    last.expect("at least one tick")
}
