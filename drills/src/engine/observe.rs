//! What a running drill tells a display: the [`Event`]s as they happen, and the [`Observer`] that
//! receives them and may end a drill's plan early.

use lab_model::Snapshot;

use lab_reports::report::{DrillReport, StepName, StepReport};

/// What happens, for a live display.
#[derive(Debug)]
pub enum Event<'a> {
    DrillStarted {
        name: &'a str,
        origin: &'a str,
        description: Option<&'a str>,
    },
    StepStarted {
        step: StepName,
        what: &'a str,
    },
    /// Where a long step stands, about every ten seconds.
    Progress {
        step: StepName,
        elapsed_s: f64,
        text: &'a str,
    },
    /// A line of a remediation command's output.
    Output {
        line: &'a str,
        stderr: bool,
    },
    StepFinished(&'a StepReport),
    DrillFinished(&'a DrillReport),
}

/// Whether [`run_drill`] goes on to the drill's next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on as the drill says.
    Continue,
    /// End the drill's plan here (the cleanup still runs): the demo stops a plan whose first fix held.
    Stop,
}

/// Receives events as they happen.
pub trait Observer: Send + Sync {
    fn event(&self, e: &Event<'_>);

    /// After each step [`run_drill`] ran, with the latest snapshot: whether to go on. Lets a display show
    /// the lab beside a step, and a scripted story end its plan early.
    fn after_step(&self, _report: &StepReport, _last: Option<&Snapshot>) -> Flow {
        Flow::Continue
    }
}

/// An observer that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Observer for Silent {
    fn event(&self, _: &Event<'_>) {}
}
