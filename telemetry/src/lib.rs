//! Telemetry: scrapes the ranks and storage servers, keeps short time series, learns the job's baseline,
//! and evaluates the four golden-signal rules into a [`Snapshot`](lab_model::Snapshot) once a tick.
//!
//! The core is pure and clock-free: [`Collector::observe`] takes the runtime's status and the raw scrape
//! texts of one tick and returns a whole snapshot. [`Driver`] is the thin async shell that fetches those
//! through a [`driver::Source`] (a runtime, adapted by the façade), with a timeout on every call so a hung or garbage target never
//! stalls a tick. The metrics text reader ([`expo::parse`]) is the lab's own and never panics.
//!
//! The rules mirror `manifests/rules/golden-signals.yaml` (see `docs/telemetry.md`); [`promql`] holds the
//! Prometheus semantics both sides share.

pub mod collector;
pub mod driver;
pub mod error;
pub mod expo;
pub mod labels;
pub mod promql;
pub mod rules;
pub mod signals;
pub mod store;

pub use collector::{Collector, CollectorConfig};
pub use driver::{Driver, DriverConfig, Ledger, NoLedger, Source, SourceError, Unsettled};
pub use error::{ParseError, ScrapeError};
pub use rules::LearnedBaseline;
