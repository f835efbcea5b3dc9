//! Errors from parsing the lab's quantities and names.

/// A value given by a user (a CPU quantity, a duration, a role name) could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A CPU quantity such as `150m`, `0.4` or `2`.
    #[error("{input:?} is not a CPU quantity: use millicores like 150m, or cores like 0.4 or 2")]
    Cpu { input: String },
    /// A duration such as `300ms`, `1.5s` or `2m`.
    #[error("{input:?} is not a duration: use a number with a unit, like 300ms, 1.5s or 2m")]
    Duration { input: String },
    /// A fault's name or parameters (`lab fault inject`, a drill file's `inject:`).
    #[error("{0}")]
    Fault(String),
}
