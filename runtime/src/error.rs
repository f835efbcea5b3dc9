//! Errors from the runtimes.

use std::path::PathBuf;

/// What went wrong while standing up, inspecting or changing the lab.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// No lab of that name is running.
    #[error("no lab named {name:?} is running: start one with `lab up`")]
    NotRunning { name: String },
    /// A lab of that name already runs.
    #[error(
        "a lab named {name:?} is already running ({runtime}): stop it with `lab down`, or pick another --name"
    )]
    AlreadyRunning { name: String, runtime: String },
    /// A tool the runtime needs is missing.
    #[error("{tool} not found: {hint}")]
    MissingTool { tool: String, hint: String },
    /// A user-supplied value is out of range.
    #[error("{0}")]
    InvalidInput(String),
    /// A role instance that was asked for does not exist.
    #[error("{0} does not exist in this lab")]
    NoSuchInstance(String),
    /// A condition was not reached in time.
    #[error("timed out after {seconds:.0} s waiting for {what}")]
    Timeout { what: String, seconds: f64 },
    /// The lab's state directory could not be read or written.
    #[error("lab state at {path}: {what}")]
    State {
        path: PathBuf,
        what: String,
        #[source]
        source: Option<std::io::Error>,
    },
    /// An I/O operation failed.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A step of bringing the lab up failed.
    #[error("{step}: {message}")]
    Step { step: String, message: String },
    /// The Kubernetes API refused or failed a request.
    #[error("kubernetes: {0}")]
    Kube(String),
    /// A Kubernetes API request failed; `code` is the HTTP status when the API server answered.
    #[error("kubernetes: {what}: {hint}")]
    KubeApi {
        what: String,
        code: Option<u16>,
        hint: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Anything else, with its message.
    #[error("{0}")]
    Other(String),
}

impl RuntimeError {
    /// An I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        RuntimeError::Io {
            what: what.into(),
            source,
        }
    }
}
