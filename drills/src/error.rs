//! Errors from loading, validating and running drills.

use std::path::PathBuf;

/// A drill file that does not parse or does not make sense, with where in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct SpecError {
    /// 1-based line (1 when the parser gave no position: the error is about the whole document).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong, with the path to the key (e.g. `steps[1].expect: unknown field ...`).
    pub message: String,
}

/// What went wrong outside a drill's own verdict: a file that cannot be read or parsed, a lab that cannot
/// run it, or the machinery around a step.
#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    /// The drill file cannot be read.
    #[error("{path}: cannot read the drill file")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The drill file is not a valid drill; printed as `FILE:LINE:COL: message`.
    #[error("{origin}:{spec}")]
    Spec { origin: String, spec: SpecError },
    /// Neither a file nor a built-in drill has that name.
    #[error("no drill file or built-in drill named {0:?}: `lab drill list` shows the built-in ones")]
    NotFound(String),
    /// The lab cannot run the drill as it is (another runtime, size or seed, or a fault already injected).
    #[error("{0}")]
    Unsuitable(String),
    /// A fault action (inject, clear, a remediation command of the lab) failed.
    #[error("{what}")]
    Fault {
        what: String,
        #[source]
        source: lab_faults::FaultError,
    },
    /// The runtime could not be reached.
    #[error("{what}")]
    Runtime {
        what: String,
        #[source]
        source: lab_runtime::RuntimeError,
    },
    /// A report, bundle or command could not be written or started.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The report could not be serialised.
    #[error("cannot encode the {what}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The JUnit report could not be written.
    #[error("cannot write the JUnit report")]
    Xml(#[source] std::io::Error),
}

impl DrillError {
    /// An I/O error with what was being done.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DrillError {
        let what = what.into();
        move |source| DrillError::Io { what, source }
    }
}
