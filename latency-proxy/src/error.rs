//! Errors from the latency proxy.

/// What went wrong in the proxy.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A delay setting is out of range.
    #[error("invalid delay: {0}")]
    InvalidDelay(String),
    /// A socket could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// Any other I/O failure.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}
