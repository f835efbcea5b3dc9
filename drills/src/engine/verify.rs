//! The steps after a remediation: verify the job is back on its own signals, clear what the drill
//! injected and check the steady state after that, and judge a failed verification again against that
//! steady state when the machine itself got slower during the drill.

use std::time::Duration;

use lab_runtime::state::now_ms;

use super::evidence::evidence;
use super::guard::clear_ours;
use super::{Event, STEADY_AGAIN_WINDOW, Session, SnapshotSource};
use crate::commits::CommitsRecovery;
use crate::judge::{Outcome, RecoveryTracker, SteadyAgain, fmt_s};
use lab_drill_file::spec::{Verify, VerifyJob};
use lab_reports::report::{CleanupReport, Failure, StepName, StepReport, Verdict};

impl<S: SnapshotSource> Session<'_, S> {
    /// Verifies the job is back at its pre-fault baseline on its own signals: the training job's, or the
    /// database writer's when the drill is about it.
    pub async fn verify(&mut self, spec: &Verify) -> StepReport {
        if spec.job == VerifyJob::Writer {
            return self.verify_writer(spec).await;
        }
        let what = format!(
            "throughput and step time within {:.0}% of the baseline for {} steps, within {:.0} s",
            spec.within_pct,
            spec.consecutive_steps,
            spec.deadline.as_secs_f64()
        );
        let started = self.start(StepName::Verify, &what);
        let Some(base) = self.baseline else {
            return self.finish(
                StepName::Verify,
                started,
                false,
                "nothing to verify against: no baseline".into(),
                vec![],
                Verdict::Error,
            );
        };
        let from = self.mitigated_ms.unwrap_or(started);
        let mut tracker = RecoveryTracker::new(spec, base, from);
        let mut last_progress = started;
        self.verify_snaps.clear();
        self.verify_ctx = Some((spec.clone(), from, self.steps.len()));
        loop {
            let s = self.next().await;
            self.verify_snaps.push(s.clone());
            match tracker.push(&s) {
                Outcome::Done(r) => {
                    let summary = format!(
                        "back {:.1} s after the remediation: throughput {:.0}% of the baseline, step {} for {} steps in a row",
                        r.back_at_ms.saturating_sub(from) as f64 / 1000.0,
                        r.pct,
                        fmt_s(r.step_seconds),
                        r.steps
                    );
                    self.recovery = Some(r);
                    return self.finish(StepName::Verify, started, true, summary, vec![], Verdict::Fail);
                }
                Outcome::Failed(why) => {
                    return self.finish(StepName::Verify, started, false, why, evidence(&s), Verdict::Fail);
                }
                Outcome::Pending(text) => {
                    self.progress(StepName::Verify, started, &mut last_progress, s.at_ms, &text);
                }
            }
        }
    }

    /// Verifies the database writer's commits per second are back at their pre-fault baseline.
    async fn verify_writer(&mut self, spec: &Verify) -> StepReport {
        let what = format!(
            "the writer's commits per second within {:.0}% of the baseline for {:.0} s, within {:.0} s",
            spec.within_pct,
            spec.hold.as_secs_f64(),
            spec.deadline.as_secs_f64()
        );
        let started = self.start(StepName::Verify, &what);
        let Some(base) = self.baseline.and_then(|b| b.commits_per_s).filter(|c| *c > 0.0) else {
            return self.finish(
                StepName::Verify,
                started,
                false,
                "nothing to verify against: the writer committed nothing before the fault (is the lab's database running? `lab db status`)".into(),
                vec![],
                Verdict::Error,
            );
        };
        let from = self.mitigated_ms.unwrap_or(started);
        let mut tracker = CommitsRecovery::new(spec, base, from);
        let mut last_progress = started;
        // The rejudgment after the cleanup is about the training job's pace; it has nothing to say here.
        self.verify_snaps.clear();
        self.verify_ctx = None;
        loop {
            let s = self.next().await;
            match tracker.push(&s) {
                Outcome::Done(r) => {
                    let summary = format!(
                        "the writer's commits back {:.1} s after the remediation: {:.0}% of the pre-fault {:.1} commits/s for {:.0} s in a row",
                        r.back_at_ms.saturating_sub(from) as f64 / 1000.0,
                        r.pct,
                        base,
                        r.verified_at_ms.saturating_sub(r.back_at_ms) as f64 / 1000.0
                    );
                    self.recovery = Some(r);
                    return self.finish(StepName::Verify, started, true, summary, vec![], Verdict::Fail);
                }
                Outcome::Failed(why) => {
                    return self.finish(StepName::Verify, started, false, why, evidence(&s), Verdict::Fail);
                }
                Outcome::Pending(text) => {
                    self.progress(StepName::Verify, started, &mut last_progress, s.at_ms, &text);
                }
            }
        }
    }

    /// Clears whatever the drill injected, then checks that the job is back at its baseline.
    pub async fn cleanup(&mut self, deadline: Duration) -> StepReport {
        let started = self.start(
            StepName::Cleanup,
            "clear what the drill injected (and move back what it drained), then check the steady state",
        );
        let lab = self.lab.clone();
        let since = self.started_ms;
        let cleared = self.during(async move { clear_ours(&lab, since).await }).await;
        let cleared = match cleared {
            Ok(c) => c,
            Err(e) => {
                self.cleanup = CleanupReport {
                    ok: false,
                    cleared: vec![],
                    steady: false,
                    summary: format!("CLEANUP FAILED: {e}"),
                };
                return self.cleanup_failed(started, format!("could not clear what the drill injected: {e}; the lab may still carry it: run `lab fault clear --all` and check `lab status`"));
            }
        };
        let still: Vec<String> = self
            .lab
            .ledger
            .read()
            .map(|d| {
                d.active()
                    .filter(|e| e.injected_at_ms >= since)
                    .map(|e| e.id.clone())
                    .collect()
            })
            .unwrap_or_default();
        if !still.is_empty() {
            return self.cleanup_failed(
                started,
                format!(
                    "still injected after clearing: {}; run `lab fault clear --all`",
                    still.join(", ")
                ),
            );
        }
        self.guard.disarm();
        let cleared_text = if cleared.is_empty() {
            "nothing left injected".to_string()
        } else {
            format!("cleared {}", cleared.join(", "))
        };
        let Some(base) = self.baseline else {
            self.cleanup = CleanupReport {
                ok: true,
                cleared,
                steady: false,
                summary: cleared_text.clone(),
            };
            return self.finish(
                StepName::Cleanup,
                started,
                true,
                cleared_text,
                vec![],
                Verdict::Fail,
            );
        };
        let mut tracker = SteadyAgain::new(
            base,
            STEADY_AGAIN_WINDOW.as_millis() as u64,
            now_ms(),
            deadline.as_millis() as u64,
        );
        let mut last_progress = started;
        loop {
            let s = self.next().await;
            match tracker.push(&s) {
                Outcome::Done(w) => {
                    self.after = Some(w);
                    let summary = format!(
                        "{cleared_text}; steady again: {:.0} samples/s ({:.0}% of the pre-fault baseline), step {}",
                        w.samples_per_s,
                        base.pct(w.samples_per_s),
                        fmt_s(w.step_seconds)
                    );
                    self.cleanup = CleanupReport {
                        ok: true,
                        cleared,
                        steady: true,
                        summary: summary.clone(),
                    };
                    return self.finish(StepName::Cleanup, started, true, summary, vec![], Verdict::Fail);
                }
                Outcome::Failed(why) => {
                    self.cleanup.cleared = cleared.clone();
                    return self.cleanup_failed(started, format!("{cleared_text}, but the lab is {why}"));
                }
                Outcome::Pending(text) => {
                    self.progress(StepName::Cleanup, started, &mut last_progress, s.at_ms, &text);
                }
            }
        }
    }

    /// After the cleanup: when the last verification failed and the lab's steady state after the cleanup
    /// shows the machine got slower during the drill (by more than half the tolerance), judges that
    /// verification's snapshots again against the steady state after the cleanup — the job's normal as
    /// measured closest to them. A remediation that left a fault in place stays far below that normal too.
    /// Returns the new verification step, if there was one to judge.
    pub fn rejudge(&mut self) -> Option<StepReport> {
        let (spec, from, index) = self.verify_ctx.clone()?;
        let (base, after) = (self.baseline?, self.after?);
        let failed = self.steps.get(index).is_some_and(|r| !r.ok);
        let ours = self.failure.as_ref().is_some_and(|f| f.step == StepName::Verify);
        if !failed || !ours || !self.cleanup.ok {
            return None;
        }
        let outcome = crate::judge::rejudge(&spec, base, after, from, &self.verify_snaps)?;
        let started = self.start(
            StepName::Verify,
            "again, against the steady state after the cleanup: this machine got slower during the drill",
        );
        let context = format!(
            "the lab's steady state after the cleanup was {:.0} samples/s, step {} ({:.0}% of the pre-fault baseline of {:.0} samples/s)",
            after.samples_per_s,
            fmt_s(after.step_seconds),
            base.pct(after.samples_per_s),
            base.samples_per_s
        );
        match outcome {
            Outcome::Done(r) => {
                let summary = format!(
                    "back {:.1} s after the remediation at the lab's normal of the moment: throughput {:.0}% of the steady state after the cleanup, step {} for {} steps in a row",
                    r.back_at_ms.saturating_sub(from) as f64 / 1000.0,
                    r.pct,
                    fmt_s(r.step_seconds),
                    r.steps
                );
                if let Some(Failure { reason, .. }) = self.failure.take() {
                    self.retried.push(format!(
                        "against the pre-fault baseline, {reason}; but {context}, and the job was back at that"
                    ));
                }
                self.recovery = Some(r);
                Some(self.finish(
                    StepName::Verify,
                    started,
                    true,
                    summary,
                    vec![context],
                    Verdict::Fail,
                ))
            }
            Outcome::Failed(why) | Outcome::Pending(why) => {
                let summary = format!("not back at the lab's normal of the moment either: {why}");
                let r = StepReport {
                    step: StepName::Verify,
                    ok: false,
                    started_s: self.rel_s(started),
                    duration_s: 0.0,
                    summary,
                    evidence: vec![context],
                };
                self.steps.push(r.clone());
                self.observer.event(&Event::StepFinished(&r));
                Some(r)
            }
        }
    }

    pub(super) fn cleanup_failed(&mut self, started: u64, why: String) -> StepReport {
        self.cleanup.ok = false;
        self.cleanup.steady = false;
        self.cleanup.summary = format!("CLEANUP FAILED: {why}");
        let ev = self.last.as_ref().map(evidence).unwrap_or_default();
        let r = self.finish(
            StepName::Cleanup,
            started,
            false,
            format!("CLEANUP FAILED: {why}"),
            ev,
            Verdict::Fail,
        );
        // A failed cleanup outranks whatever the drill concluded: the lab is not as the drill found it.
        match &mut self.failure {
            Some(f) if f.step != StepName::Cleanup => {
                f.reason.push_str(&format!("; and CLEANUP FAILED: {why}"));
            }
            _ => {}
        }
        r
    }
}
