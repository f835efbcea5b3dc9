//! Telemetry: scrapes the ranks and storage servers, keeps short time series, evaluates the rule file the
//! lab ships to Prometheus (the golden-signal rules, and a team's own), and builds a
//! [`Snapshot`](lab_model::Snapshot) once a tick.
//!
//! The core is pure and clock-free: [`Collector::observe`] takes the runtime's status and the raw scrape
//! texts of one tick and returns a whole snapshot. [`Driver`] is the thin async shell that fetches those
//! through a [`driver::Source`] (a runtime, adapted by the façade), with a timeout on every call so a hung or garbage target never
//! stalls a tick. The metrics text reader ([`expo::parse`]) is the lab's own and never panics.
//!
//! The rules are written once, in `manifests/rules/golden-signals.yaml` (see `docs/telemetry.md`):
//! [`rules`] loads and evaluates it on [`promql`], the lab's PromQL parser and evaluator, which
//! [`query`] opens to others.

pub mod baseline;
pub mod collector;
pub mod describe;
pub mod driver;
pub mod error;
pub use lab_model::{expo, labels};
pub mod promql;
pub mod query;
pub mod rules;
pub mod store;
pub mod template;
pub mod views;

pub use baseline::LearnedBaseline;
pub use collector::{Collector, CollectorConfig};
pub use driver::{Driver, DriverConfig, Ledger, NoLedger, Query, QueryAsk, Source, SourceError, Unsettled};
pub use error::{ParseError, Position, QueryError, RuleError, ScrapeError};
pub use query::QueryResult;
pub use rules::RuleSet;
