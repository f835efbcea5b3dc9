//! Errors from running the console.

/// The console could not take over or drive the terminal.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// Raw mode or the alternate screen could not be set up, e.g. stdout is not a terminal.
    #[error(
        "cannot take over the terminal: run `lab console` in an interactive terminal, or use `lab status`"
    )]
    Setup(#[source] std::io::Error),
    /// Drawing or reading input failed.
    #[error("terminal I/O failed")]
    Io(#[source] std::io::Error),
}
