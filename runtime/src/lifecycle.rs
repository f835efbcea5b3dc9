//! Bringing a lab up and down as an ordered list of named steps, each reported with ✓ or ✗ and its time.

use std::time::Duration;

use lab_model::Millicores;
use serde::{Deserialize, Serialize};

/// What every runtime needs to know to stand the lab up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpOptions {
    /// The lab's name; two labs with different names can run side by side.
    pub name: String,
    /// Training ranks (default 4).
    pub ranks: u32,
    /// SeaweedFS volume servers (default 3).
    pub storage_servers: u32,
    /// Counted GPUs on the node (default 4); each rank needs one.
    pub gpus: u32,
    /// Each rank's CPU limit (default 400m).
    pub cpu: Millicores,
    /// The dataset's seed.
    pub seed: u64,
    /// How long a rank waits at the collective or at rendezvous before its watchdog fails it.
    #[serde(with = "humantime_secs")]
    pub watchdog: Duration,
    /// Keep what was created when a step fails (for debugging), instead of tearing it down.
    pub retain: bool,
    /// How long to wait for training to reach a steady baseline.
    #[serde(with = "humantime_secs")]
    pub baseline_timeout: Duration,
    /// Also run the optional database beside the job: a PostgreSQL primary, a streaming standby and a
    /// writer (local runtime only).
    #[serde(default)]
    pub database: bool,
}

impl Default for UpOptions {
    fn default() -> Self {
        UpOptions {
            name: "lab".to_string(),
            ranks: 4,
            storage_servers: 3,
            gpus: 4,
            cpu: Millicores(400),
            seed: 42,
            watchdog: Duration::from_secs(120),
            retain: false,
            baseline_timeout: Duration::from_secs(180),
            database: false,
        }
    }
}

/// Receives the progress of a lifecycle: one line per step for a person, or events for a machine.
pub trait Progress: Send + Sync {
    /// A step begins.
    fn step_started(&self, step: &str);
    /// A step ended, successfully or not, after `elapsed`; `detail` adds a short explanation.
    fn step_finished(&self, step: &str, ok: bool, elapsed: Duration, detail: Option<&str>);
    /// Something a person should read (a fallback taken, a tool missing but optional).
    fn note(&self, message: &str);
}

/// A [`Progress`] that says nothing (for tests and `--json`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Quiet;

impl Progress for Quiet {
    fn step_started(&self, _: &str) {}
    fn step_finished(&self, _: &str, _: bool, _: Duration, _: Option<&str>) {}
    fn note(&self, _: &str) {}
}

/// Runs `f` as a named step, reporting it to `progress`.
///
/// # Errors
/// Whatever `f` returns.
pub async fn step<T, E, F>(progress: &dyn Progress, name: &str, f: F) -> Result<T, E>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    use tracing::Instrument as _;
    progress.step_started(name);
    let start = std::time::Instant::now();
    let r = f.instrument(tracing::info_span!("step", name)).await;
    match &r {
        Ok(_) => progress.step_finished(name, true, start.elapsed(), None),
        Err(e) => progress.step_finished(name, false, start.elapsed(), Some(&e.to_string())),
    }
    r
}

mod humantime_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Duration::try_from_secs_f64(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}
