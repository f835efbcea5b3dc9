//! The remediation step: the incident bundle written first, then the command (the run's `--remediate`, or
//! the step's) with its output passed on as it comes, or the lab's own clear of what the drill injected;
//! the changes made meanwhile are read back from the ledger.

use std::path::PathBuf;
use std::sync::Arc;

use lab_runtime::state::now_ms;

use super::guard::clear_ours;
use super::{Event, Session, SnapshotSource};
use crate::checkpoint_first::LastCheckpoint;
use lab_agents::EvidenceLevel;
use lab_agents::command::{self, CommandSpec};
use lab_drill_file::spec::Remediate;
use lab_incident::bundle::Bundle;
use lab_reports::report::{RemediationReport, StepName, StepReport, Verdict};

impl<S: SnapshotSource> Session<'_, S> {
    /// Writes the incident bundle of the latest snapshot, cut to `level`, with what was tried before and
    /// what the runtime says of the lab's database (`db`, when it has one); returns its path and the whole
    /// bundle (for a recording).
    pub(super) fn write_bundle(
        &mut self,
        level: EvidenceLevel,
        db: Option<&lab_model::db::DbStatus>,
    ) -> Result<PathBuf, String> {
        let snap = self.last.as_ref().ok_or("no snapshot yet")?;
        let mut bundle = Bundle::from_snapshot(snap);
        if let Some(d) = db {
            bundle.set_database(d);
        }
        // Who made each change and what the job's throughput did after it, from this drill's own record.
        let start = self.started_ms;
        let series: Vec<(u64, f64)> = self
            .timeline
            .iter()
            .filter_map(|p| Some((start + (p.t_s * 1000.0) as u64, p.samples_per_s?)))
            .collect();
        let normal = self.baseline.map(|b| b.samples_per_s);
        bundle.annotate_changes(&self.fixes, &series, normal);
        let mut full = serde_json::to_value(&bundle).map_err(|e| e.to_string())?;
        if let Some(o) = full.as_object_mut() {
            o.insert(
                "previous_attempts".into(),
                serde_json::Value::Array(self.attempts.clone()),
            );
        }
        let cut = lab_agents::evidence::limit(&full, level);
        std::fs::create_dir_all(&self.options.bundle_dir)
            .map_err(|e| format!("cannot create {}: {e}", self.options.bundle_dir.display()))?;
        let path = self
            .options
            .bundle_dir
            .join(format!("incident-{}.json", snap.at_ms));
        let bytes = serde_json::to_vec_pretty(&cut).map_err(|e| e.to_string())?;
        lab_runtime::state::write_atomic(&path, &bytes).map_err(|e| e.to_string())?;
        self.full_bundles.push(full);
        Ok(path)
    }

    /// Remediates: runs the command (the run's `--remediate`, else the step's), or clears what the drill
    /// injected when there is none.
    pub async fn remediate(&mut self, spec: &Remediate) -> StepReport {
        self.keep_processes().await;
        // `--remediate` once per remediate step gives this step its own; once, every step's.
        let nth = self.fixes.len();
        let command = (self.options.remediate_each.get(nth).cloned())
            .or_else(|| self.options.remediate.clone())
            .or_else(|| spec.command.clone());
        let what = command.clone().unwrap_or_else(|| "the lab's own clear".into());
        if let Some(agent) = self.options.mcp_agent.clone() {
            return self
                .remediate_with_mcp_agent(&agent, spec.checkpoint_before_fix)
                .await;
        }
        if let Some(agent) = self.options.agent.clone() {
            return self
                .remediate_with_agent(&agent, spec.checkpoint_before_fix)
                .await;
        }
        let started = self.start(StepName::Remediate, &what);
        self.remediation_start_ms = Some(started);
        let last_checkpoint = self.last_checkpoint();
        let db = self.lab.runtime.database().await.ok();
        let bundle = match self.write_bundle(EvidenceLevel::Full, db.as_ref()) {
            Ok(p) => Some(p),
            Err(e) => {
                return self.finish(
                    StepName::Remediate,
                    started,
                    false,
                    format!("cannot write the incident bundle: {e}"),
                    vec![],
                    Verdict::Error,
                );
            }
        };
        let mut report = RemediationReport {
            truth: Some(self.truth()),
            command: command.clone(),
            bundle: bundle.as_ref().map(|p| p.display().to_string()),
            exit_code: None,
            timed_out: false,
            duration_s: 0.0,
            stdout: String::new(),
            stderr: String::new(),
            changes: Vec::new(),
            agent: None,
            mcp: None,
        };
        let (ok, summary) = match command {
            Some(cmd) => {
                let mut env = self.options.command_env.clone();
                // Its changes carry who made them, so the next bundle tells them from a fault's.
                env.push((
                    lab_model::change::CHANGE_BY_ENV.into(),
                    lab_incident::bundle::FixBy::Remediation.tag(nth + 1),
                ));
                if let Some(b) = &bundle {
                    env.push(("LAB_INCIDENT_BUNDLE".into(), b.display().to_string()));
                }
                let spec = CommandSpec {
                    command: cmd,
                    timeout: spec.timeout,
                    env,
                    path_first: self.options.command_path.clone(),
                };
                let observer = self.observer;
                let group = self.guard.group.clone();
                // Lines go to the observer from the reader tasks; they need an owned sink.
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, bool)>();
                let sink: command::LineSink = Arc::new(move |l: &str, e| {
                    let _ = tx.send((l.to_string(), e));
                });
                let run = async move {
                    let out = command::run(&spec, sink, &group).await;
                    (out, spec.timeout)
                };
                let (out, timeout) = {
                    let mut run = std::pin::pin!(run);
                    loop {
                        tokio::select! {
                            out = &mut run => break out,
                            Some((line, stderr)) = rx.recv() => {
                                observer.event(&Event::Output { line: &line, stderr });
                            }
                            s = self.source.next() => {
                                self.record(&s);
                                self.buffer.push_back(s);
                            }
                        }
                    }
                };
                while let Ok((line, stderr)) = rx.try_recv() {
                    observer.event(&Event::Output { line: &line, stderr });
                }
                match out {
                    Ok(o) => {
                        report.exit_code = o.exit_code;
                        report.timed_out = o.timed_out;
                        report.duration_s = o.duration.as_secs_f64();
                        report.stdout = o.stdout.clone();
                        report.stderr = o.stderr.clone();
                        if o.timed_out {
                            (
                                false,
                                format!(
                                    "the command did not finish within {:.0} s and was stopped",
                                    timeout.as_secs_f64()
                                ),
                            )
                        } else if o.exit_code == Some(0) {
                            (
                                true,
                                format!("the command exited 0 after {:.1} s", o.duration.as_secs_f64()),
                            )
                        } else {
                            (
                                false,
                                format!(
                                    "the command failed ({}){}",
                                    o.exit_code
                                        .map_or("ended by a signal".into(), |c| format!("exit {c}")),
                                    o.stderr
                                        .lines()
                                        .last()
                                        .map_or(String::new(), |l| format!(": {l}"))
                                ),
                            )
                        }
                    }
                    Err(e) => (false, e.to_string()),
                }
            }
            None => {
                let mut lab = self.lab.clone();
                lab.ledger = lab
                    .ledger
                    .acting_for(lab_incident::bundle::FixBy::Remediation.tag(nth + 1));
                let since = self.started_ms;
                let result = self.during(async move { clear_ours(&lab, since).await }).await;
                match result {
                    Ok(cleared) if cleared.is_empty() => (true, "nothing left to clear".to_string()),
                    Ok(cleared) => (true, format!("cleared {}", cleared.join(", "))),
                    Err(e) => (false, format!("the lab's clear failed: {e}")),
                }
            }
        };
        let end = now_ms();
        super::session::past_ms(end);
        self.fixes.push(lab_incident::bundle::FixBy::Remediation);
        report.changes = self.changes_between(started, end);
        if report.duration_s == 0.0 {
            report.duration_s = end.saturating_sub(started) as f64 / 1000.0;
        }
        self.mitigated_ms = Some(end);
        let mut ev = report.changes.clone();
        let (ok, summary) = match self.checkpoint_first(
            ok && spec.checkpoint_before_fix,
            started,
            end,
            last_checkpoint,
        ) {
            Some(Ok(saved)) => {
                ev.insert(0, saved);
                (ok, summary)
            }
            Some(Err(why)) if report.command.is_none() => (
                false,
                format!(
                    "{why} (the lab's own clear saves none: give the step a command, or run the drill with \
                     --remediate or --agent)"
                ),
            ),
            Some(Err(why)) => (false, why),
            None => (ok, summary),
        };
        if let Some(b) = &report.bundle {
            ev.push(format!("incident bundle: {b}"));
        }
        self.remediations.push(report);
        self.finish(StepName::Remediate, started, ok, summary, ev, Verdict::Fail)
    }

    /// The job's last checkpoint as the latest snapshot reports it.
    pub(super) fn last_checkpoint(&self) -> LastCheckpoint {
        let t = self.last.as_ref().map(|s| &s.training);
        LastCheckpoint {
            step: t.and_then(|t| t.checkpoint_step),
            at_ms: t.and_then(|t| t.checkpoint_at_ms),
        }
    }

    /// When `required`, whether a checkpoint was saved on request after the fault was detected and before
    /// the first change of the remediation that ran from `started` to `end` (`Ok`: which one).
    pub(super) fn checkpoint_first(
        &self,
        required: bool,
        started: u64,
        end: u64,
        last: LastCheckpoint,
    ) -> Option<Result<String, String>> {
        if !required {
            return None;
        }
        let detected = self
            .detection
            .as_ref()
            .map(|d| d.at_ms)
            .or(self.inject_ms)
            .unwrap_or(self.started_ms)
            // Snapshots are stamped when taken; the remediation cannot start before what it answers.
            .min(started);
        let changes: Vec<lab_model::ChangeRecord> = match self.lab.ledger.read() {
            Ok(d) => d
                .changes
                .into_iter()
                .filter(|c| c.at_ms >= detected && c.at_ms <= end)
                .collect(),
            Err(e) => return Some(Err(format!("cannot read the change log: {e}"))),
        };
        Some(crate::checkpoint_first::judge(detected, started, &changes, last))
    }

    pub(super) fn changes_between(&self, from: u64, to: u64) -> Vec<String> {
        self.lab
            .ledger
            .read()
            .map(|d| {
                d.changes
                    .iter()
                    .filter(|c| c.at_ms >= from && c.at_ms <= to)
                    .map(lab_model::ChangeRecord::line)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// After a verification, adds its word to the lab's record of verified fixes per cause class (earned
    /// autonomy): the class the agent of the last remediation named, verified or not.
    pub fn record_verification(&mut self, verified: bool) {
        let Some(path) = self.options.approval_state.clone() else {
            return;
        };
        let Some(r) = self.remediations.last() else { return };
        let class = match (r.agent.as_ref().and_then(|a| a.plan.as_ref()), r.mcp.as_ref()) {
            (Some(p), _) => Some(p.cause.clone()),
            (None, Some(m)) => Some(m.conclusion().cause),
            (None, None) => None,
        };
        let Some(class) = class.filter(|c| lab_agents::plan::causes().contains(&c.as_str())) else {
            return;
        };
        let mut state = lab_agents::approval::EarnedState::load(&path).unwrap_or_default();
        state.record(&class, verified, &lab_model::clock::rfc3339(now_ms()));
        if let Err(e) = state.save(&path) {
            tracing::warn!("cannot keep the record of verified fixes: {e}");
        }
    }

    /// After a failed verification, lets a further remediation try again: the failure stays in the steps
    /// and the evidence, the next bundle says what was tried and how it failed (`previous_attempts`), and
    /// the next verification decides the verdict.
    pub fn retry(&mut self) {
        if let Some(f) = &self.failure
            && f.step == StepName::Verify
        {
            self.retried
                .push(format!("an earlier remediation did not hold: {}", f.reason));
            let tried = self.remediations.last();
            let commands: Vec<String> = match tried {
                Some(r) => match (r.agent.as_ref().and_then(|a| a.plan.as_ref()), r.mcp.as_ref()) {
                    (Some(p), _) => p.commands.iter().map(lab_agents::PlanCommand::line).collect(),
                    (None, Some(m)) => m
                        .acts()
                        .filter(|a| a.approved)
                        .map(|a| a.argv.join(" "))
                        .collect(),
                    (None, None) => vec![r.command.clone().unwrap_or_else(|| "the lab's own clear".into())],
                },
                None => vec![],
            };
            self.attempts.push(serde_json::json!({
                "at": lab_model::clock::rfc3339(now_ms()),
                "commands": commands,
                "changes": tried.map(|r| r.changes.clone()).unwrap_or_default(),
                "verification": f.reason,
                "evidence": f.evidence,
            }));
            self.failure = None;
        }
    }
}
