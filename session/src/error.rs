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
    #[error(transparent)]
    Load(#[from] lab_drills::spec_error::LoadError),
    /// `lab up` could not learn the job's normal rate: what the job looked like at the end, and whether
    /// the lab was kept to look at.
    #[error(
        "training did not settle into a steady rate within {} s: {seen}. {}",
        .after.as_secs(),
        retain_hint(.retained)
    )]
    NoBaseline {
        after: Duration,
        seen: Box<lab_telemetry::Unsettled>,
        retained: bool,
    },
    /// Clearing faults before `lab down` took too long.
    #[error("timed out")]
    Timeout,
    /// A built-in drill does not have the shape the demo needs.
    #[error("{0}")]
    Demo(String),
    #[error("cannot keep the baseline")]
    SaveBaseline(#[source] serde_json::Error),
    /// The MCP server cannot serve (another agent is connected, an approval that cannot be read).
    #[error("{0}")]
    Mcp(String),
    #[error("cannot encode the live snapshot")]
    Encode(#[source] serde_json::Error),
    /// A rule file given to `lab up --rules` (or kept by the lab) cannot be evaluated.
    #[error(transparent)]
    Rules(#[from] lab_telemetry::RuleError),
    /// The lab's kept rule files cannot be read.
    #[error("cannot read the rule files the lab keeps in {}: `lab down`, then `lab up --rules` again", .path.display())]
    KeptRules {
        path: std::path::PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot encode the report")]
    EncodeReport(#[source] serde_json::Error),
    #[error(transparent)]
    Report(#[from] lab_reports::ReportError),
    #[error("cannot find the lab binary for the MCP server")]
    NoBinary(#[source] std::io::Error),
    /// A recording cannot be replayed (it cannot be read, the agent cannot be run).
    #[error("{0}")]
    Replay(String),
    /// What was asked does not fit (a flag for another runtime, a fix a drill does not have, a recording
    /// folder of another kind); nothing was changed.
    #[error("{0}")]
    Invalid(String),
    /// A report or recording could not be written.
    #[error("cannot write the {what} to {}", .path.display())]
    Write {
        what: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The façade's result.
pub type Result<T> = std::result::Result<T, SessionError>;

/// Where to look next when `lab up` found no baseline: the lab if it was kept, else how to keep it.
fn retain_hint(retained: &bool) -> &'static str {
    if *retained {
        "The lab is kept (--retain): see `lab status`, and the ranks' logs"
    } else {
        "The lab was taken down; `lab up --retain` keeps it to look at (`lab status`, the ranks' logs)"
    }
}
