//! Errors from running a command someone else wrote (an agent, a remediation).

/// A command could not be started.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct CommandError {
    pub what: String,
    #[source]
    pub source: std::io::Error,
}

impl CommandError {
    /// An I/O error with what was being done.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CommandError {
        let what = what.into();
        move |source| CommandError { what, source }
    }
}
