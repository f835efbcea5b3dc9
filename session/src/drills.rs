//! Running drills against the opened lab through the one drill runner ([`lab_drills::run_drill`]), with
//! an interrupt that ends a remediation command and clears what the drill injected.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lab_drills::engine::{Guard, Observer, Options, Ticking};
use lab_drills::report::{DrillReport, RunReport};
use lab_drills::{Loaded, run_drill};

use crate::Lab;

/// How a run of drills ended.
#[derive(Debug)]
pub enum Ran {
    /// Every drill ran (or was skipped, said so in its report).
    Finished(RunReport),
    /// Interrupted; the lines say what was stopped and cleared.
    Interrupted(Vec<String>),
}

/// `drills` with each one `n` times in a row (`lab drill run --repeat N`): its runs sit together in the
/// report, and [`RunReport`]'s stats give each drill's pass rate and the spread of its figures.
pub fn repeated(drills: &[Loaded], n: u32) -> Vec<Loaded> {
    drills
        .iter()
        .flat_map(|l| std::iter::repeat_n(l.clone(), n.max(1) as usize))
        .collect()
}

impl Lab {
    /// The options a drill run needs: where bundles go, and what a remediation command is told.
    /// `remediate` replaces every remediate step's command (`--remediate`).
    pub fn drill_options(&self, remediate: Option<String>) -> Options {
        Options {
            remediate,
            remediate_each: Vec::new(),
            bundle_dir: lab_runtime::state::lab_dir(&self.name).join("incidents"),
            command_env: vec![
                ("LAB_NAME".into(), self.name.clone()),
                (
                    "LAB_STATE_DIR".into(),
                    lab_runtime::state::base_dir().display().to_string(),
                ),
            ],
            command_path: std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(PathBuf::from)),
            agent: None,
            mcp_agent: None,
            attempts: 1,
            approval_state: Some(crate::mcp::approval_state_path(&self.name)),
            keep_for_replay: false,
        }
    }

    /// Runs `drills` in order, each reporting to `observer`. A drill that could not clean up leaves the lab
    /// in an unknown state: the drills after it are reported as not run. If `interrupt` completes first,
    /// the running drill's command is stopped and its faults cleared.
    pub async fn run_drills(
        &self,
        drills: &[Loaded],
        options: &Options,
        observer: &dyn Observer,
        interrupt: impl Future<Output = ()>,
    ) -> Ran {
        let lab = self.drill_lab();
        let mut source = Ticking::new(self.driver(), Duration::from_secs(1))
            .with_watched(crate::live::history_path(&self.name));
        let guard = Guard::new(lab.clone());
        let started_ms = lab_runtime::state::now_ms();
        let clock = Instant::now();
        let runtime_kind = self.runtime.kind().to_string();
        let all = async {
            let mut reports: Vec<DrillReport> = Vec::new();
            for l in drills {
                if let Some(prev) = reports.iter().find(|r| r.cleanup_failed()) {
                    reports.push(DrillReport::not_run(
                        &l.drill,
                        &l.origin,
                        &self.name,
                        &runtime_kind,
                        format!("not run: drill {} could not clean up after itself", prev.name),
                    ));
                    continue;
                }
                let r = run_drill(&lab, &mut source, observer, options, &guard, &l.drill, &l.origin).await;
                reports.push(r);
            }
            reports
        };
        tokio::select! {
            r = all => Ran::Finished(RunReport::new(&self.name, started_ms, clock.elapsed().as_secs_f64(), r)),
            () = interrupt => Ran::Interrupted(guard.abort().await),
        }
    }
}
