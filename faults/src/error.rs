//! Errors from injecting, clearing and remediating.

use lab_runtime::RuntimeError;

/// What went wrong with a fault or a remediation.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// The request is not valid for this lab; nothing was changed.
    #[error("{0}")]
    Invalid(String),
    /// A fault of this kind is already injected.
    #[error("{kind} is already injected as {id} ({target}): clear it first with `lab fault clear {id}`")]
    AlreadyInjected {
        kind: String,
        id: String,
        target: String,
    },
    /// No fault with that id (or kind) is in the ledger.
    #[error("no injected fault {0:?}: `lab fault status` lists them")]
    NotFound(String),
    /// The fault was applied but the measurement did not show its effect; it was rolled back.
    #[error("{fault} did not take effect: {why} (rolled back)")]
    NotProven { fault: String, why: String },
    /// Clearing did not restore the state from before.
    #[error("clearing {id} did not restore the state from before: {why}")]
    NotRestored { id: String, why: String },
    /// The runtime refused or failed an action.
    #[error("{what}")]
    Runtime {
        what: String,
        #[source]
        source: RuntimeError,
    },
    /// The job did not do what it was asked in time (a checkpoint); nothing was changed.
    #[error("{0}")]
    NotAnswered(String),
    /// The ledger could not be read or written.
    #[error("fault ledger {path}: {what}")]
    Ledger { path: String, what: String },
}

impl From<lab_model::ParseError> for FaultError {
    fn from(e: lab_model::ParseError) -> Self {
        FaultError::Invalid(e.to_string())
    }
}

impl FaultError {
    /// A runtime error with what was being done.
    pub fn runtime(what: impl Into<String>) -> impl FnOnce(RuntimeError) -> FaultError {
        let what = what.into();
        move |source| FaultError::Runtime { what, source }
    }
}
