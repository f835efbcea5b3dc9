//! The vocabulary that crosses every boundary of the lab.
//!
//! Runtimes produce [`status::PodStatus`] values, telemetry turns metric samples into a
//! [`snapshot::Snapshot`], faults write [`change::ChangeRecord`]s, and the console, `lab status` and the
//! drill engine read only these types. Nothing here does I/O, save finding PostgreSQL's programs
//! ([`db::find_pg_bin`]).

pub mod actions;
pub mod cgroup;
pub mod change;
pub mod checkpoint;
pub mod clock;
pub mod db;
pub mod error;
pub mod expo;
pub mod fault;
pub mod format;
pub mod jobs;
pub mod labels;
pub mod metrics;
pub mod names;
pub mod quantity;
pub mod scrape;
pub mod snapshot;
pub mod status;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod verdict;
pub mod version;

pub use change::ChangeRecord;
pub use error::ParseError;
pub use fault::{Fault, FaultKind};
pub use quantity::{CfsQuota, Millicores, parse_duration};
pub use snapshot::Snapshot;
pub use status::{Phase, PodStatus, Resources, Role};
pub use verdict::Verdict;
