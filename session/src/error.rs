//! What can go wrong behind the façade; each variant keeps the crate's own error as its source.

use std::time::Duration;

/// An operation on the lab failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Runtime(#[from] lab_runtime::RuntimeError),
    #[error(transparent)]
    Fault(#[from] lab_faults::FaultError),
    #[error(transparent)]
    Drill(#[from] lab_drills::DrillError),
    /// `lab up` could not learn the job's normal rate.
    #[error(
        "training did not settle into a steady rate within {} s: see `lab status`, and the ranks' logs",
        .0.as_secs()
    )]
    NoBaseline(Duration),
    /// Clearing faults before `lab down` took too long.
    #[error("timed out")]
    Timeout,
    /// A built-in drill does not have the shape the demo needs.
    #[error("{0}")]
    Demo(String),
    #[error("cannot keep the baseline")]
    SaveBaseline(#[source] serde_json::Error),
    #[error("cannot encode the live snapshot")]
    Encode(#[source] serde_json::Error),
}

/// The façade's result.
pub type Result<T> = std::result::Result<T, SessionError>;
