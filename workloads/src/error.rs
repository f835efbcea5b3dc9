//! The errors of the training job's library: what failed, chained to why, and what to do next.

use std::io;
use std::time::Duration;

/// A result whose error is a [`WorkloadError`].
pub type Result<T, E = WorkloadError> = std::result::Result<T, E>;

/// Everything the rank, the seeder and their parts can fail with.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// A TCP connection could not be made.
    #[error("cannot connect to {what} at {addr}")]
    Connect {
        what: String,
        addr: String,
        #[source]
        source: io::Error,
    },

    /// Reading or writing an established connection failed.
    #[error("i/o with {what} at {addr} failed")]
    Io {
        what: String,
        addr: String,
        #[source]
        source: io::Error,
    },

    /// A peer did not answer within the allowed time.
    #[error("{what} at {addr} did not answer within {:.1} s", after.as_secs_f64())]
    Timeout {
        what: String,
        addr: String,
        after: Duration,
    },

    /// An HTTP server answered with an unexpected status.
    #[error("{addr} answered HTTP {status} to {method} {path}: {body}")]
    HttpStatus {
        addr: String,
        method: String,
        path: String,
        status: u16,
        body: String,
    },

    /// A peer spoke something other than the protocol expected.
    #[error("{what} at {addr} sent something unexpected: {detail}")]
    Protocol {
        what: String,
        addr: String,
        detail: String,
    },

    /// The SeaweedFS master refused or could not do what was asked.
    #[error("seaweedfs master {master}: {detail}")]
    Master { master: String, detail: String },

    /// Stored data failed its checksum or does not have the expected shape.
    #[error("{what} failed verification: {detail}")]
    Checksum { what: String, detail: String },

    /// The dataset's manifest is not in SeaweedFS.
    #[error(
        "dataset {dataset:?} has no manifest in SeaweedFS at {master}: seed it first with \
         `lab-seeder --master {master} --dataset {dataset} --ranks N --seed S`"
    )]
    NoManifest { dataset: String, master: String },

    /// A flag, a manifest or a message carried a value the job cannot work with.
    #[error("invalid {what}: {detail}")]
    Invalid { what: String, detail: String },

    /// A rank waited longer than the watchdog allows, at rendezvous or at the collective.
    #[error("watchdog: {detail}")]
    Watchdog { detail: String },

    /// A peer's connection closed in the middle of the collective.
    #[error("rank {peer} closed the connection at {during}")]
    PeerClosed {
        peer: u32,
        during: String,
        #[source]
        source: Option<io::Error>,
    },

    /// The ranks disagree about the job (world size, model size, dataset) or about the model itself.
    #[error("{detail}")]
    Mismatch { detail: String },

    /// A database pod's data folder could not be prepared, or its server not started.
    #[error("{detail}")]
    Database { detail: String },

    /// A rank stopped training; the message says why and what the job does next.
    #[error("{message}")]
    Stopped { message: String, exit_code: u8 },
}

impl WorkloadError {
    /// An [`WorkloadError::Invalid`] with the given parts.
    pub fn invalid(what: impl Into<String>, detail: impl Into<String>) -> Self {
        WorkloadError::Invalid {
            what: what.into(),
            detail: detail.into(),
        }
    }

    /// A [`WorkloadError::Protocol`] with the given parts.
    pub fn protocol(what: impl Into<String>, addr: impl Into<String>, detail: impl Into<String>) -> Self {
        WorkloadError::Protocol {
            what: what.into(),
            addr: addr.into(),
            detail: detail.into(),
        }
    }

    /// Wraps an I/O error, telling a timeout apart from other failures.
    pub fn io(what: impl Into<String>, addr: impl Into<String>, source: io::Error, after: Duration) -> Self {
        let (what, addr) = (what.into(), addr.into());
        match source.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                WorkloadError::Timeout { what, addr, after }
            }
            _ => WorkloadError::Io { what, addr, source },
        }
    }

    /// The process exit code for this error: 2 for bad flags or data shape, 3 for a watchdog timeout, 4 when
    /// a peer went away, misbehaved or disagreed, 5 for storage that cannot be read or written.
    pub fn exit_code(&self) -> u8 {
        match self {
            WorkloadError::Invalid { .. } => 2,
            WorkloadError::Watchdog { .. } => 3,
            WorkloadError::PeerClosed { .. }
            | WorkloadError::Mismatch { .. }
            | WorkloadError::Protocol { .. } => 4,
            WorkloadError::Stopped { exit_code, .. } => *exit_code,
            _ => 5,
        }
    }

    /// True when retrying the same operation later may succeed (the network or a server was briefly
    /// unavailable), false when the input itself is wrong.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            WorkloadError::Connect { .. }
                | WorkloadError::Io { .. }
                | WorkloadError::Timeout { .. }
                | WorkloadError::HttpStatus { .. }
                | WorkloadError::Master { .. }
        )
    }
}
