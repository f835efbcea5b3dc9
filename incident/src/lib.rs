//! The incident bundle: what a real system would show of a lab's incident — the wiring (pods, their
//! containers and resources against their templates, the rank → server edges), the change log, the firing
//! golden signals, per-dependency latency, each rank's own figures and the database beside the job — cut to
//! an [`EvidenceLevel`] for an agent under test. It never names the injected fault ([`redact`]).

pub mod bundle;
pub mod database;
pub mod evidence;
pub mod redact;

pub use bundle::{Bundle, FixBy};
pub use evidence::EvidenceLevel;
