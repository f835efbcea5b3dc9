//! A drill run's report: one typed value ([`report`]) fanned out to its readers — JSON (the value itself),
//! JUnit XML for CI ([`junit`]), a self-contained HTML page with the timeline chart ([`html`]), and the
//! recording a replay reads ([`recording`]).

mod agent_html;
pub mod error;
mod escape;
pub mod html;
pub mod junit;
pub mod recording;
pub mod report;

pub use error::ReportError;
pub use report::{DrillReport, RunReport, Verdict};
