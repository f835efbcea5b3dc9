//! The baseline learned at `lab up`, kept in the lab's folder, and the telemetry driver that starts from it.

use std::path::PathBuf;
use std::sync::Arc;

use lab_faults::Ledger;
use lab_runtime::Runtime;
use lab_telemetry::{Collector, CollectorConfig, Driver, DriverConfig, LearnedBaseline, RuleSet};

use crate::error::{Result, SessionError};

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
///
/// # Errors
/// [`SessionError::SaveBaseline`] or [`SessionError::Runtime`] when the file cannot be written.
pub fn save_baseline(name: &str, b: &LearnedBaseline) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(b).map_err(SessionError::SaveBaseline)?;
    lab_runtime::state::write_atomic(&baseline_path(name), &bytes)?;
    Ok(())
}

/// A telemetry driver for the lab, reading its ledger, evaluating `rules`, starting from the saved
/// baseline.
pub fn driver(name: &str, rt: Arc<dyn Runtime>, ledger: Ledger, rules: Arc<RuleSet>) -> Driver {
    let mut collector = Collector::with_rules(CollectorConfig::default(), rules);
    if let Some(b) = load_baseline(name) {
        collector.restore_baseline(b);
    }
    Driver::new(
        Arc::new(crate::RuntimeSource(rt)),
        Arc::new(move || ledger.view()),
        collector,
        DriverConfig::default(),
    )
}
