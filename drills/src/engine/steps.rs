//! The steps before a remediation: check that the lab fits the drill, measure the job's normal, inject
//! the fault and prove it, and wait for the golden signals to catch it.

use std::time::Duration;

use lab_faults::Fault;
use lab_runtime::state::now_ms;

use super::evidence::evidence;
use super::fit::{unknown_alerts, unsuitable};
use super::{SETTLE_EXTRA, Session, SnapshotSource};
use crate::judge::{ExpectTracker, Outcome, SteadyWindow, fmt_s, unsteady_now};
use lab_drill_file::spec::{Drill, Expect};
use lab_reports::report::{StepName, StepReport, Verdict};

/// How long the check step waits for a lab that is not steady when the drill begins: a rank restarting
/// after a crash loop waits out a restart backoff of up to 30 s, then for its peers.
const STEADY_CHECK_WITHIN: Duration = Duration::from_secs(60);

/// Why the lab's pods say it is not whole (a rank not Running and Ready, a storage server not Ready), if
/// they do.
fn not_whole(st: &lab_model::status::LabStatus) -> Option<String> {
    let mut why = st.inconsistencies();
    let (ready, total) = st.servers_ready();
    if ready != total {
        why.push(format!("{ready}/{total} storage servers Ready"));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

impl<S: SnapshotSource> Session<'_, S> {
    /// Checks that the lab can run `drill`, nothing is injected already, and the lab is steady (waiting a
    /// while for it when it is not yet, as after a drill whose fault restarted the ranks).
    pub async fn check_lab(&mut self, drill: &Drill) -> StepReport {
        let started = self.start(StepName::Check, "the lab fits the drill");
        let result = async {
            let st = self
                .lab
                .runtime
                .status()
                .await
                .map_err(|e| format!("cannot read the lab's status: {e}"))?;
            let seed = lab_runtime::state::read_record(&self.lab.name)
                .ok()
                .flatten()
                .and_then(|r| r.config.get("seed").and_then(serde_json::Value::as_u64));
            if let Some(why) = unsuitable(drill, &st, seed) {
                return Err(why);
            }
            if let Some(known) = self.source.alert_names() {
                unknown_alerts(drill, &known)?;
            }
            let active: Vec<String> = self
                .lab
                .ledger
                .read()
                .map_err(|e| e.to_string())?
                .active()
                .map(|e| format!("{} ({})", e.id, e.fault))
                .collect();
            if !active.is_empty() {
                return Err(format!(
                    "the lab already has {} injected: clear it with `lab fault clear --all` first",
                    active.join(", ")
                ));
            }
            Ok(format!(
                "{} runtime, {} ranks, {} storage servers, {} GPUs{}",
                st.runtime,
                st.ranks_desired,
                st.storage_servers,
                st.gpus_capacity,
                seed.map_or(String::new(), |s| format!(", seed {s}"))
            ))
        }
        .await;
        let result = match result {
            Ok(fits) => self.steady_first(started).await.map(|note| fits + &note),
            Err(e) => Err(e),
        };
        match result {
            Ok(s) => self.finish(StepName::Check, started, true, s, vec![], Verdict::Error),
            Err(e) => {
                let ev = self.last.as_ref().map(evidence).unwrap_or_default();
                self.finish(StepName::Check, started, false, e, ev, Verdict::Error)
            }
        }
    }

    /// Waits, at most [`STEADY_CHECK_WITHIN`], for a lab that is not steady (a previous drill's rank still
    /// restarting after its crash loop, or waiting for its peers) to be steady again: every rank Running and
    /// Ready, and the newest moment the lab was seen in steady. A lab that looks steady costs nothing (no
    /// snapshot is taken here). Returns what to add to the step's summary, or why the lab is not steady.
    async fn steady_first(&mut self, started: u64) -> Result<String, String> {
        let now = lab_runtime::state::now_ms();
        let st = self
            .lab
            .runtime
            .status()
            .await
            .map_err(|e| format!("cannot read the lab's status: {e}"))?;
        let recent = self.source.recent();
        let seen = recent
            .newest()
            .filter(|p| now.saturating_sub(p.at_ms) <= crate::history::FRESH_MS)
            .and_then(|p| p.unsteady.clone());
        let Some(first) = not_whole(&st).or(seen) else {
            return Ok(String::new());
        };
        let mut last_progress = started;
        loop {
            let s = self.next().await;
            let why = not_whole(&s.status).or_else(|| unsteady_now(&s));
            let waited = s.at_ms.saturating_sub(started) as f64 / 1000.0;
            match why {
                None => {
                    return Ok(format!(
                        "; the lab was not steady when the drill began ({first}): steady again after {waited:.0} s"
                    ));
                }
                Some(why) if waited > STEADY_CHECK_WITHIN.as_secs_f64() => {
                    return Err(format!(
                        "the lab is not steady after what ran before this drill: {why} ({waited:.0} s after the \
                         check began): wait until `lab status` shows every rank Running, Ready and training \
                         with no alert firing, then run the drill again"
                    ));
                }
                Some(why) => self.progress(StepName::Check, started, &mut last_progress, s.at_ms, &why),
            }
        }
    }

    /// Watches for `warmup`, then measures the pre-fault baseline over a steady `window`.
    pub async fn settle(&mut self, warmup: Duration, window: Duration) -> StepReport {
        let started = self.start(StepName::Baseline, "warm up, then measure the job's normal");
        let mut steady = SteadyWindow::new(window.as_millis() as u64);
        // The moments the lab was already steady through (since its last change and the warm-up) count:
        // a lab that has been steady for the whole window needs no new wait.
        let past = self.source.recent().usable(started, warmup.as_millis() as u64);
        let from_past = past.first().map(|p| p.at_ms);
        for p in &past {
            let _ = steady.push_point(p);
        }
        let warm_until = if from_past.is_some() {
            started
        } else {
            started + warmup.as_millis() as u64
        };
        let deadline = warm_until + (window + SETTLE_EXTRA).as_millis() as u64;
        let mut last_progress = started;
        // A run's first ticks have no rate yet (a rate needs two scrapes): not a sign of an unsteady lab.
        let mut priming = 3;
        loop {
            let s = self.next().await;
            if s.at_ms < warm_until {
                continue;
            }
            if from_past.is_some() && priming > 0 && s.training.samples_per_s.is_none() {
                priming -= 1;
                continue;
            }
            priming = 0;
            match steady.push(&s) {
                Outcome::Done(b) => {
                    self.baseline = Some(b);
                    self.baseline_ranks = self.last.as_ref().map(|s| s.status.ranks_ready().1);
                    self.source.rebase(&b);
                    let learned = b.learned.map_or(String::new(), |l| {
                        format!(
                            " (the rules compared with {:.0} samples/s, {} until now)",
                            l.samples_per_s,
                            fmt_s(l.step_seconds)
                        )
                    });
                    let watched = from_past.filter(|at| *at < started).map_or(String::new(), |at| {
                        format!(
                            ", {:.0} s of it already watched before the drill",
                            (started - at).min(window.as_millis() as u64) as f64 / 1000.0
                        )
                    });
                    let summary = format!(
                        "{:.0} samples/s, step {} over {:.0} s{watched}{learned}",
                        b.samples_per_s,
                        fmt_s(b.step_seconds),
                        b.window_s
                    );
                    return self.finish(StepName::Baseline, started, true, summary, vec![], Verdict::Error);
                }
                Outcome::Pending(why) | Outcome::Failed(why) => {
                    if s.at_ms > deadline {
                        let summary = format!(
                            "the lab is not at a steady state before the drill: {why} (after {:.0} s)",
                            s.at_ms.saturating_sub(started) as f64 / 1000.0
                        );
                        return self.finish(
                            StepName::Baseline,
                            started,
                            false,
                            summary,
                            evidence(&s),
                            Verdict::Error,
                        );
                    }
                    self.progress(StepName::Baseline, started, &mut last_progress, s.at_ms, &why);
                }
            }
        }
    }

    /// Injects `fault` and proves it took effect.
    pub async fn inject(&mut self, fault: Fault) -> StepReport {
        let what = fault.to_string();
        let started = self.start(StepName::Inject, &what);
        if self.inject_ms.is_none()
            && let Some(before) = &self.last
        {
            // Steps lost count from the job as it was just before the first injection: a fault that
            // restarts every rank at once leaves no rank reporting in the snapshots right after it.
            self.lost.push(before);
        }
        self.inject_ms.get_or_insert(started);
        self.fault_ms = Some(started);
        self.in_place_ms = None;
        self.injected.push(fault.clone());
        let lab = self.lab.clone();
        let result = self
            .during(async move { lab_faults::inject(lab.runtime.as_ref(), &lab.ledger, fault).await })
            .await;
        match result {
            Ok(done) => {
                self.in_place_ms = Some(now_ms());
                let summary = done.entry.proof.clone().unwrap_or(what);
                let ev = done.changes.iter().map(lab_model::ChangeRecord::line).collect();
                self.finish(StepName::Inject, started, true, summary, ev, Verdict::Error)
            }
            Err(e) => self.finish(
                StepName::Inject,
                started,
                false,
                format!("could not inject {what}: {}", lab_model::format::error_chain(&e)),
                vec![],
                Verdict::Error,
            ),
        }
    }

    /// Waits for the expected signals.
    pub async fn expect(&mut self, spec: &Expect) -> StepReport {
        let started = self.start(StepName::Expect, "the golden signals catch it");
        let (Some(base), Some(from)) = (self.baseline, self.fault_ms) else {
            return self.finish(
                StepName::Expect,
                started,
                false,
                "nothing to expect: no baseline or no injection before this step".into(),
                vec![],
                Verdict::Error,
            );
        };
        let mut tracker =
            ExpectTracker::new(spec.clone(), base, from).in_place_from(self.in_place_ms.unwrap_or(from));
        let mut last_progress = started;
        // In a chained drill the figures keep the lowest throughput of every fault.
        let lowest_before = self.lowest_pct;
        loop {
            let s = self.next().await;
            let outcome = tracker.push(&s);
            self.lowest_pct = match (lowest_before, tracker.lowest_pct()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => b.or(a),
            };
            // The fault's steady effect: throughput from detection to the end of the hold.
            if let Some(met) = tracker.met_at()
                && s.at_ms >= met
                && let Some(v) = s.training.samples_per_s
            {
                self.fault_pcts.push(base.pct(v));
            }
            match outcome {
                Outcome::Done(d) => {
                    let after = self.rel_from_inject(d.at_ms);
                    let mut summary = format!("detected {after:.1} s after the injection:");
                    for seen in &d.seen {
                        summary.push_str(&format!(
                            " {} at +{:.1} s;",
                            seen.what,
                            self.rel_from_inject(seen.at_ms)
                        ));
                    }
                    if let Some((r, t)) = d.ranks_ready_min {
                        summary.push_str(&format!(" Kubernetes: {r}/{t} ranks Ready throughout"));
                    }
                    let summary = summary.trim_end_matches(';').to_string();
                    let ev = d
                        .seen
                        .iter()
                        .map(|s| format!("{}: {}", s.what, s.detail))
                        .collect();
                    // The report's figures time the first fault; each expect step's summary times its own.
                    self.detection.get_or_insert(d);
                    return self.finish(StepName::Expect, started, true, summary, ev, Verdict::Fail);
                }
                Outcome::Failed(why) => {
                    return self.finish(StepName::Expect, started, false, why, evidence(&s), Verdict::Fail);
                }
                Outcome::Pending(text) => {
                    self.progress(StepName::Expect, started, &mut last_progress, s.at_ms, &text);
                }
            }
        }
    }

    pub(super) fn rel_from_inject(&self, ms: u64) -> f64 {
        ms.saturating_sub(self.fault_ms.unwrap_or(self.started_ms)) as f64 / 1000.0
    }
}
