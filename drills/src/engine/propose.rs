//! The remediation step with an agent (`--agent`): the bundle cut to the evidence level, the agent asked
//! for a plan, the plan checked, each command approved and run as argv (no shell), and the ledger's truth
//! kept for the score. A plan that is refused, an agent that crashes or does not finish, and a declined
//! command each end the step with its own verdict before anything else runs.

use std::sync::Arc;

use lab_model::change::ChangeSource;
use lab_runtime::state::now_ms;

use super::{Event, Session, SnapshotSource};
use lab_agents::command::{self, CommandSpec};
use lab_agents::{AgentOptions, AgentReport, PlanOutcome, RanCommand, Truth, plan};
use lab_reports::report::{RemediationReport, StepName, StepReport, Verdict};

impl<S: SnapshotSource> Session<'_, S> {
    /// Asks the agent for a plan and runs it as approved.
    /// With `checkpoint_first`, the plan must save a checkpoint (`lab checkpoint`) before its first change.
    pub(super) async fn remediate_with_agent(
        &mut self,
        agent: &AgentOptions,
        checkpoint_first: bool,
    ) -> StepReport {
        let what = format!("ask `{}` for a plan ({} evidence)", agent.command, agent.evidence);
        let started = self.start(StepName::Remediate, &what);
        self.remediation_start_ms = Some(started);
        let last_checkpoint = self.last_checkpoint();
        let db = self.lab.runtime.database().await.ok();
        let bundle = match self.write_bundle(agent.evidence, db.as_ref()) {
            Ok(p) => p,
            Err(e) => {
                let why = format!("cannot write the incident bundle: {e}");
                return self.finish(StepName::Remediate, started, false, why, vec![], Verdict::Error);
            }
        };
        let mut env = self.options.command_env.clone();
        env.push(("LAB_INCIDENT_BUNDLE".into(), bundle.display().to_string()));
        env.push(("LAB_EVIDENCE".into(), agent.evidence.to_string()));
        let spec = CommandSpec {
            command: agent.command.clone(),
            timeout: agent.timeout,
            env,
            path_first: self.options.command_path.clone(),
        };
        let group = self.guard.group.clone();
        let quiet: command::LineSink = Arc::new(|_: &str, _| {});
        let out = {
            let spec = spec.clone();
            self.during(async move { command::run(&spec, quiet, &group).await })
                .await
        };
        let mut report = AgentReport {
            agent: agent.command.clone(),
            evidence: agent.evidence,
            exit_code: None,
            timed_out: false,
            duration_s: 0.0,
            outcome: PlanOutcome::AgentFailed,
            problem: None,
            plan: None,
            commands: Vec::new(),
            plan_at_s: None,
            truth: Some(self.truth()),
            score: None,
        };
        let mut stdout = String::new();
        let mut stderr = String::new();
        let (ok, summary, verdict) = match out {
            Err(e) => (
                false,
                format!("the agent could not be started: {e}"),
                Verdict::Fail,
            ),
            Ok(o) => {
                report.exit_code = o.exit_code;
                report.timed_out = o.timed_out;
                report.duration_s = o.duration.as_secs_f64();
                report.plan_at_s = Some(self.rel_from_inject(now_ms()));
                stdout = o.stdout.clone();
                stderr = o.stderr.clone();
                if o.timed_out {
                    let why = format!(
                        "the agent did not answer within {:.0} s and was stopped; nothing was changed",
                        agent.timeout.as_secs_f64()
                    );
                    (false, why, Verdict::Fail)
                } else if o.exit_code != Some(0) {
                    let code = o
                        .exit_code
                        .map_or("ended by a signal".into(), |c| format!("exit {c}"));
                    let last = o
                        .stderr
                        .lines()
                        .last()
                        .map_or(String::new(), |l| format!(": {l}"));
                    (
                        false,
                        format!("the agent failed ({code}){last}; nothing was changed"),
                        Verdict::Fail,
                    )
                } else {
                    match plan::parse(&o.stdout) {
                        Err(e) => {
                            report.outcome = PlanOutcome::Refused;
                            (
                                false,
                                format!("the plan was refused: {e}; nothing was changed"),
                                Verdict::Fail,
                            )
                        }
                        Ok(p) => {
                            self.show_plan(&p);
                            report.plan = Some(p.clone());
                            self.run_plan(&p, agent, &spec, &mut report).await
                        }
                    }
                }
            }
        };
        let end = now_ms();
        super::session::past_ms(end);
        let mut saved = None;
        let (ok, summary, verdict) =
            match self.checkpoint_first(ok && checkpoint_first, started, end, last_checkpoint) {
                Some(Ok(s)) => {
                    saved = Some(s);
                    (ok, summary, verdict)
                }
                Some(Err(why)) => (false, format!("the agent's plan: {why}"), Verdict::Fail),
                None => (ok, summary, verdict),
            };
        if !ok {
            report.problem = Some(summary.clone());
        }
        self.fixes.push(lab_incident::bundle::FixBy::Agent);
        let changes = self.changes_between(started, end);
        self.mitigated_ms = Some(end);
        let mut ev: Vec<String> = saved.into_iter().chain(changes.iter().cloned()).collect();
        ev.push(format!(
            "incident bundle ({} evidence): {}",
            agent.evidence,
            bundle.display()
        ));
        self.remediations.push(RemediationReport {
            truth: Some(self.truth()),
            command: Some(agent.command.clone()),
            bundle: Some(bundle.display().to_string()),
            exit_code: report.exit_code,
            timed_out: report.timed_out,
            duration_s: end.saturating_sub(started) as f64 / 1000.0,
            stdout,
            stderr,
            changes,
            agent: Some(report),
            mcp: None,
        });
        self.finish(StepName::Remediate, started, ok, summary, ev, verdict)
    }

    fn show_plan(&self, p: &lab_agents::Plan) {
        let head = format!(
            "plan: anomaly {}, blames [{}], cause {}{}",
            if p.anomaly { "yes" } else { "no" },
            p.blame.join(", "),
            p.cause,
            if p.summary.is_empty() {
                String::new()
            } else {
                format!(" — {}", p.summary)
            }
        );
        self.observer.event(&Event::Output {
            line: &head,
            stderr: false,
        });
        for (i, c) in p.commands.iter().enumerate() {
            let line = format!("  {}. {}   ({})", i + 1, c.line(), c.reason);
            self.observer.event(&Event::Output {
                line: &line,
                stderr: false,
            });
        }
    }

    /// Runs the plan's commands in order, each once approved; stops at the first declined or failed one.
    async fn run_plan(
        &mut self,
        p: &lab_agents::Plan,
        agent: &AgentOptions,
        spec: &CommandSpec,
        report: &mut AgentReport,
    ) -> (bool, String, Verdict) {
        let n = p.commands.len();
        for (i, c) in p.commands.iter().enumerate() {
            let d = agent.approval.decide(&c.line(), &c.reason, Some(&p.cause)).await;
            let (approved, by) = (d.approved, d.by);
            let mut ran = RanCommand {
                argv: c.argv.clone(),
                approved,
                decided_by: by.clone(),
                exit_code: None,
                timed_out: false,
                duration_s: 0.0,
                stdout: String::new(),
                stderr: String::new(),
            };
            if !approved {
                report.commands.push(ran);
                report.outcome = PlanOutcome::Declined;
                let why = format!(
                    "command {} of {n} (`{}`) was declined ({by}); {} ran before it",
                    i + 1,
                    c.line(),
                    i
                );
                return (false, why, Verdict::Declined);
            }
            let mut one = spec.clone();
            one.command = c.line();
            one.env.push((
                lab_model::change::CHANGE_BY_ENV.into(),
                lab_incident::bundle::FixBy::Agent.tag(self.fixes.len() + 1),
            ));
            let group = self.guard.group.clone();
            let argv = c.argv.clone();
            let quiet: command::LineSink = Arc::new(|_: &str, _| {});
            let out = self
                .during(async move { command::run_argv(&argv, &one, quiet, &group).await })
                .await;
            let failed = match out {
                Ok(o) => {
                    ran.exit_code = o.exit_code;
                    ran.timed_out = o.timed_out;
                    ran.duration_s = o.duration.as_secs_f64();
                    ran.stdout = o.stdout.clone();
                    ran.stderr = o.stderr.clone();
                    for l in o.stdout.lines().chain(o.stderr.lines()) {
                        self.observer.event(&Event::Output {
                            line: l,
                            stderr: false,
                        });
                    }
                    (!o.succeeded()).then(|| {
                        let last = o.stderr.lines().last().unwrap_or("").to_string();
                        if o.timed_out {
                            "did not finish in time".to_string()
                        } else {
                            format!("failed: {last}")
                        }
                    })
                }
                Err(e) => Some(format!("could not start: {e}")),
            };
            report.commands.push(ran);
            if let Some(why) = failed {
                report.outcome = PlanOutcome::CommandFailed;
                return (
                    false,
                    format!(
                        "command {} of {n} (`{}`) {why}; the rest did not run",
                        i + 1,
                        c.line()
                    ),
                    Verdict::Fail,
                );
            }
        }
        report.outcome = PlanOutcome::Ran;
        let s = if n == 0 {
            "the agent proposed no command".to_string()
        } else {
            format!("the agent's plan ran: {n} commands, each exited 0")
        };
        (true, s, Verdict::Fail)
    }

    /// What the ledger says this drill injected and is still in: the targets of those injections' change
    /// records. In a chained drill a fault fixed and verified earlier is not this incident's cause.
    pub(super) fn truth(&self) -> Truth {
        let since = self.started_ms;
        let data = self.lab.ledger.read().ok();
        let active: Vec<&lab_faults::ledger::Entry> = data
            .as_ref()
            .map(|d| d.active().filter(|e| e.injected_at_ms >= since).collect())
            .unwrap_or_default();
        let ours = |id: &Option<String>| {
            active.is_empty() || active.iter().any(|e| id.as_deref() == Some(e.id.as_str()))
        };
        let targets: Vec<String> = data
            .as_ref()
            .map(|d| {
                d.changes
                    .iter()
                    .filter(|c| c.at_ms >= since && c.source == ChangeSource::Fault)
                    .filter(|c| c.note.as_deref() != Some("cleared"))
                    .filter(|c| ours(&c.fault_id))
                    .map(|c| c.target.clone())
                    .collect()
            })
            .unwrap_or_default();
        let faults: Vec<lab_faults::Fault> = if active.is_empty() {
            self.injected.clone()
        } else {
            active.iter().map(|e| e.fault.clone()).collect()
        };
        Truth::of(&faults, &targets)
    }
}
