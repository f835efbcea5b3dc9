//! The lab's faults as data: each one a serialisable value with an inject, a clear and a proof that it
//! took effect, recorded in a ledger of change records that clearing reads to restore exactly what was
//! there before.
//!
//! Faults act on a lab only through the [`lab_runtime::Runtime`] actions, so the same fault values work on
//! the local runtime and on Kubernetes. Remediation commands (`lab scale`, `lab resize`, ...) live here
//! too: they are the same actions, written into the same ledger as changes a person or an agent made.

pub mod checkpoint;
pub mod db;
pub mod drain;
pub mod engine;
pub mod error;
pub mod jobs;
pub mod kinds;
pub mod ledger;
pub mod remediate;

pub use engine::{Injected, clear, clear_all, inject, inject_for};
pub use error::FaultError;
/// The catalogue of faults is data the whole lab speaks: it lives in `lab_model`.
pub use lab_model::fault as catalog;
pub use lab_model::{Fault, FaultKind};
pub use ledger::{Entry, FaultPhase, Ledger};
