//! Running fault drills against a live lab: they pass only when the job's own signals recover.
//!
//! A drill file (`lab_drill_file`) names a fault to inject, what the golden signals must show, how to
//! remediate (a command, an agent, or the lab's own clear) and what "recovered" means: throughput and step
//! time back within a tolerance of the baseline measured just before the fault, for a number of
//! consecutive training steps. Ready is never the test. The [`engine`] runs a drill, takes its decisions
//! from the pure judges in [`judge`] (with [`history`], [`commits`] and [`checkpoint_first`]), always
//! clears what it injected and checks the steady state after its own cleanup, and produces the typed report
//! that `lab_reports` renders. Before a remediation it writes the incident bundle (`lab_incident`); an
//! agent asked for a plan is run through the harness in `lab_agents`.

pub mod checkpoint_first;
pub mod commits;
pub mod engine;
pub mod error;
pub mod history;
pub mod judge;

pub use engine::{Event, Flow, Guard, Lab, Observer, Options, Session, SnapshotSource, Ticking, run_drill};
pub use error::DrillError;
pub use lab_drill_file::error as spec_error;
pub use lab_drill_file::{Drill, Loaded, builtin, resolve, spec};
pub use lab_incident::Bundle;
pub use lab_reports::{DrillReport, RunReport, Verdict, html, junit, recording, report};
pub use {lab_agents as agent, lab_incident as incident};
