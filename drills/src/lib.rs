//! Replayable fault drills that pass only when the job's own signals recover.
//!
//! A drill file ([`spec`]) names a fault to inject, what the golden signals must show, how to remediate
//! (a command, or the lab's own clear) and what "recovered" means: throughput and step time back within a
//! tolerance of the baseline measured just before the fault, for a number of consecutive training steps.
//! Ready is never the test. The [`engine`] runs a drill against a live lab, takes its decisions from the
//! pure judges in [`judge`], always clears what it injected and checks the steady state after its own
//! cleanup, and produces a [`report`] (JSON), [`junit`] XML and an [`html`] page. Before a remediation it writes the
//! incident [`bundle`]: the evidence a real system would show, without naming the injected fault.

pub mod agent;
pub mod builtin;
pub mod bundle;
pub mod checkpoint_first;
pub mod command;
pub mod commits;
pub mod database;
pub mod engine;
pub mod error;
pub mod history;
pub mod html;
pub mod judge;
pub mod junit;
pub mod report;
pub mod spec;

pub use builtin::{Loaded, resolve};
pub use bundle::Bundle;
pub use engine::{Event, Flow, Guard, Lab, Observer, Options, Session, SnapshotSource, Ticking, run_drill};
pub use error::{DrillError, SpecError};
pub use report::{DrillReport, RunReport, Verdict};
pub use spec::Drill;
