//! Running a drill against a live lab: a [`Session`] takes snapshots from a [`SnapshotSource`], acts through
//! the fault engine and the runtime, and hands every decision to the pure judges in [`crate::judge`].
//!
//! Snapshots keep coming while an action runs (an injection, a remediation command): they are buffered and
//! the next step reads them, so a detection during a slow injection, or a recovery during a long
//! remediation, is timed from what was really seen. Whatever the drill injected is cleared at the end, and
//! the steady state is checked after that cleanup; a [`Guard`] does the same on an interrupt.
//!
//! The parts: `source` (where snapshots come from), `observe` (events for a display), `session` (a drill
//! in progress), its steps in `steps`, `remediate` and `verify`, the `guard` that clears on an
//! interrupt, `fit` (whether a lab can run a drill) and `evidence` (what a verdict cites).

mod evidence;
mod fit;
mod guard;
mod interactive;
mod observe;
mod propose;
mod remediate;
mod session;
mod source;
mod steps;
mod verify;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lab_faults::Ledger;
use lab_runtime::Runtime;
use tracing::Instrument as _;

pub use self::evidence::evidence;
pub use self::fit::unsuitable;
pub use self::guard::Guard;
pub use self::interactive::{ATTEMPT_ENV, CONFIG_ENV, SERVER_ENV, SERVER_NAME};
pub use self::observe::{Event, Flow, Observer, Silent};
pub use self::session::Session;
pub use self::source::{SnapshotSource, Ticking};
use lab_drill_file::spec::{Drill, Step};
use lab_reports::report::{DrillReport, StepName};

/// The lab a drill runs against.
#[derive(Debug, Clone)]
pub struct Lab {
    pub name: String,
    pub runtime: Arc<dyn Runtime>,
    pub ledger: Ledger,
}

/// Settings of a run, shared by its drills.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Replaces the command of every remediate step (`--remediate`).
    pub remediate: Option<String>,
    /// Replaces the command of each remediate step in turn (`--remediate` given once per remediate step);
    /// when set, it has one command per remediate step of every drill run (the CLI checks).
    pub remediate_each: Vec<String>,
    /// Where incident bundles are written.
    pub bundle_dir: PathBuf,
    /// Set in a remediation command's environment (`LAB_NAME`, `LAB_STATE_DIR`).
    pub command_env: Vec<(String, String)>,
    /// Put first on a remediation command's `PATH`.
    pub command_path: Option<PathBuf>,
    /// Ask this agent for a plan at each remediation instead of running a command (`--agent`).
    pub agent: Option<lab_agents::AgentOptions>,
    /// Let this agent investigate and act through the lab's MCP server at each remediation (`--mcp-agent`).
    pub mcp_agent: Option<lab_agents::mcp::McpAgentOptions>,
    /// How many tries an agent gets at each incident (0 and 1: one); after a failed verification it is
    /// asked again with the failure as context.
    pub attempts: u32,
    /// Where the lab keeps its record of verified fixes per cause class (earned autonomy).
    pub approval_state: Option<PathBuf>,
    /// Keep what a replay serves (`--record`): the lab from the detection to the first remediation, the
    /// ranks' processes.
    pub keep_for_replay: bool,
}

impl Options {
    /// Whether an agent (a planner or an interactive one) remediates.
    pub fn has_agent(&self) -> bool {
        self.agent.is_some() || self.mcp_agent.is_some()
    }
}

impl Options {
    /// Sets the remediation commands given on the command line (`--remediate`, in order): none keeps each
    /// step's own; one replaces every remediate step's command; more give each remediate step its own, in
    /// order, and then every drill run must have exactly that many remediate steps.
    ///
    /// # Errors
    /// A message naming the drill whose remediate steps do not match the commands given; nothing is set.
    pub fn set_remediate(&mut self, given: &[String], drills: &[&Drill]) -> Result<(), String> {
        if let Some(empty) = given.iter().position(|c| c.trim().is_empty()) {
            return Err(format!(
                "--remediate number {} is empty: give a command, or leave it out to use the drill's own",
                empty + 1
            ));
        }
        match given {
            [] => {}
            [one] => self.remediate = Some(one.clone()),
            many => {
                for d in drills {
                    let steps = d.steps.iter().filter(|s| matches!(s, Step::Remediate(_))).count();
                    if steps != many.len() {
                        return Err(format!(
                            "--remediate is given {} times, but drill {} has {steps} remediate step{}: give it once \
                             (for every remediate step) or once per remediate step, in order",
                            many.len(),
                            d.name,
                            if steps == 1 { "" } else { "s" }
                        ));
                    }
                }
                self.remediate_each = many.to_vec();
            }
        }
        Ok(())
    }
}

/// The window over which the lab must be steady again after a drill's cleanup.
const STEADY_AGAIN_WINDOW: Duration = Duration::from_secs(6);

/// How often a long step reports where it stands.
const PROGRESS_EVERY_MS: u64 = 10_000;
/// How long the lab may take to become steady after its warm-up.
const SETTLE_EXTRA: Duration = Duration::from_secs(180);

/// Runs one drill from start to end: check, baseline, its steps until one fails, then the cleanup.
pub async fn run_drill<S: SnapshotSource>(
    lab: &Lab,
    source: &mut S,
    observer: &dyn Observer,
    options: &Options,
    guard: &Guard,
    drill: &Drill,
    origin: &str,
) -> DrillReport {
    observer.event(&Event::DrillStarted {
        name: &drill.name,
        origin,
        description: drill.description.as_deref(),
    });
    let mut s = Session::new(lab.clone(), source, observer, options, guard.clone());
    let span = |step: StepName| tracing::info_span!("step", drill = %drill.name, step = %step);
    let check = s.check_lab(drill).instrument(span(StepName::Check)).await;
    if check.ok {
        let base = s
            .settle(drill.warmup, drill.baseline)
            .instrument(span(StepName::Baseline))
            .await;
        if base.ok && observer.after_step(&base, s.last_snapshot()) == Flow::Continue {
            let mut i = 0;
            // The remediate step of the incident in hand, and how many tries it has had: an agent gets
            // `attempts` of them, each verified, each after the first told how the one before failed.
            let mut fix_at: Option<usize> = None;
            let mut tries = 0;
            while let Some(step) = drill.steps.get(i) {
                let step_span = tracing::info_span!("step", drill = %drill.name, step = step.key());
                let r = match step {
                    Step::Inject(f) => {
                        tries = 0;
                        s.inject(f.clone()).instrument(step_span).await
                    }
                    Step::Expect(e) => s.expect(e).instrument(step_span).await,
                    Step::Remediate(r) => {
                        fix_at = Some(i);
                        tries += 1;
                        s.remediate(r).instrument(step_span).await
                    }
                    Step::Verify(v) => {
                        let r = s.verify(v).instrument(step_span).await;
                        s.record_verification(r.ok);
                        r
                    }
                };
                i += 1;
                if observer.after_step(&r, s.last_snapshot()) == Flow::Stop {
                    break;
                }
                if !r.ok {
                    // A verification that fails sends the incident back when the drill has a further
                    // remediation of the same incident, as the seed's pipeline did, or when an agent has
                    // tries left; the last verification decides. A remediation after a further injection
                    // belongs to the next incident: a chained drill whose first fix failed stops there.
                    let next_fix = next_fix_of_this_incident(&drill.steps[i..]);
                    let again = options.has_agent() && tries < options.attempts.max(1);
                    match (step, next_fix, fix_at) {
                        (Step::Verify(_), Some(j), _) => {
                            s.retry();
                            i += j;
                        }
                        (Step::Verify(_), None, Some(at)) if again => {
                            s.retry();
                            i = at;
                        }
                        _ => break,
                    }
                }
            }
        }
        s.cleanup(drill.cleanup_deadline)
            .instrument(span(StepName::Cleanup))
            .await;
        s.rejudge();
    } else {
        guard.disarm();
    }
    let report = s.into_report(drill, origin);
    observer.event(&Event::DrillFinished(&report));
    report
}

/// The index in `rest` of the next remediate step, if no injection comes before it.
fn next_fix_of_this_incident(rest: &[Step]) -> Option<usize> {
    rest.iter()
        .take_while(|s| !matches!(s, Step::Inject(_)))
        .position(|s| matches!(s, Step::Remediate(_)))
}

#[cfg(test)]
mod chain_tests;
#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod test_job;
