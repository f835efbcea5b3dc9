//! One drill in progress: the [`Session`] keeps the snapshots (buffered while an action runs, so the next
//! step judges what was really seen), the steps' reports, the figures they measured, and what its report
//! is made of. The steps themselves are in `steps`, `remediate` and `verify`.

use std::collections::VecDeque;
use std::future::Future;

use lab_model::Snapshot;
use lab_runtime::state::now_ms;

use super::{Event, Guard, Lab, Observer, Options, PROGRESS_EVERY_MS, SnapshotSource};
use crate::judge::{Detection, PreFault, Recovery, StepsLost};
use lab_drill_file::spec::{Drill, Verify};
use lab_reports::report::{
    CleanupReport, DrillReport, Failure, Figures, Point, RemediationReport, StepName, StepReport, Verdict,
};

/// One drill in progress: its snapshots, its steps and what they saw.
pub struct Session<'a, S: SnapshotSource> {
    pub(super) lab: Lab,
    pub(super) source: &'a mut S,
    pub(super) observer: &'a dyn Observer,
    pub(super) options: &'a Options,
    pub(super) guard: Guard,
    pub(super) started_ms: u64,
    pub(super) buffer: VecDeque<Snapshot>,
    pub(super) last: Option<Snapshot>,
    pub(super) baseline: Option<PreFault>,
    /// The job's ranks when its baseline was measured: the accelerators a slowdown leaves idle.
    pub(super) baseline_ranks: Option<usize>,
    pub(super) steps: Vec<StepReport>,
    pub(super) remediations: Vec<RemediationReport>,
    pub(super) timeline: Vec<Point>,
    pub(super) lost: StepsLost,
    pub(super) inject_ms: Option<u64>,
    /// When the latest injection started: a chained drill's later expect steps time their fault from it.
    pub(super) fault_ms: Option<u64>,
    /// When the latest injection's proof passed: the fault is in place from then on.
    pub(super) in_place_ms: Option<u64>,
    /// The remediations run so far, with who ran them: the change log of a later bundle tells their
    /// changes from the others'.
    pub(super) fixes: Vec<lab_incident::bundle::FixBy>,
    pub(super) detection: Option<Detection>,
    pub(super) lowest_pct: Option<f64>,
    pub(super) fault_pcts: Vec<f64>,
    pub(super) remediation_start_ms: Option<u64>,
    pub(super) mitigated_ms: Option<u64>,
    pub(super) recovery: Option<Recovery>,
    pub(super) failure: Option<Failure>,
    pub(super) retried: Vec<String>,
    /// What earlier remediations tried and how their verification failed, for the next bundle.
    pub(super) attempts: Vec<serde_json::Value>,
    /// Every bundle handed out, whole (before any evidence level cut it), for a recording.
    pub(super) full_bundles: Vec<serde_json::Value>,
    /// For a recording: the lab from the detection to the first remediation, and the ranks' processes.
    pub(super) replay: lab_agents::record::ReplayData,
    /// The faults this drill injected, in order.
    pub(super) injected: Vec<lab_faults::Fault>,
    /// The snapshots the last verification judged, what it was asked, from when, and its step's index.
    pub(super) verify_snaps: Vec<Snapshot>,
    pub(super) verify_ctx: Option<(Verify, u64, usize)>,
    /// The lab's steady state measured after the cleanup.
    pub(super) after: Option<PreFault>,
    pub(super) cleanup: CleanupReport,
}

impl<S: SnapshotSource> std::fmt::Debug for Session<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("lab", &self.lab.name)
            .field("steps", &self.steps.len())
            .finish_non_exhaustive()
    }
}

impl<'a, S: SnapshotSource> Session<'a, S> {
    /// A session on `lab`; `guard` clears what it injects if the caller is interrupted.
    pub fn new(
        lab: Lab,
        source: &'a mut S,
        observer: &'a dyn Observer,
        options: &'a Options,
        guard: Guard,
    ) -> Self {
        let started_ms = now_ms();
        guard.arm(started_ms);
        Session {
            lab,
            source,
            observer,
            options,
            guard,
            started_ms,
            buffer: VecDeque::new(),
            last: None,
            baseline: None,
            baseline_ranks: None,
            steps: Vec::new(),
            remediations: Vec::new(),
            timeline: Vec::new(),
            lost: StepsLost::default(),
            inject_ms: None,
            fault_ms: None,
            in_place_ms: None,
            fixes: Vec::new(),
            detection: None,
            lowest_pct: None,
            fault_pcts: Vec::new(),
            remediation_start_ms: None,
            mitigated_ms: None,
            recovery: None,
            failure: None,
            retried: Vec::new(),
            attempts: Vec::new(),
            full_bundles: Vec::new(),
            replay: Default::default(),
            injected: Vec::new(),
            verify_snaps: Vec::new(),
            verify_ctx: None,
            after: None,
            cleanup: CleanupReport::default(),
        }
    }

    /// The latest snapshot seen.
    pub fn last_snapshot(&self) -> Option<&Snapshot> {
        self.last.as_ref()
    }

    /// The pre-fault baseline, once measured.
    pub fn baseline(&self) -> Option<PreFault> {
        self.baseline
    }

    /// Whether a step has failed so far.
    pub fn failed(&self) -> bool {
        self.failure.is_some()
    }

    pub(super) fn rel_s(&self, ms: u64) -> f64 {
        ms.saturating_sub(self.started_ms) as f64 / 1000.0
    }

    pub(super) fn record(&mut self, s: &Snapshot) {
        let t = &s.training;
        self.timeline.push(Point {
            t_s: self.rel_s(s.at_ms),
            samples_per_s: t.samples_per_s,
            pct: match (t.samples_per_s, self.baseline) {
                (Some(v), Some(b)) => Some((b.pct(v) * 10.0).round() / 10.0),
                _ => None,
            },
            step_seconds: crate::judge::step_time(s),
            step: crate::judge::job_step(s),
            ranks_ready: s.status.ranks_ready(),
            firing: s.alerts.iter().map(|a| a.rule.clone()).collect(),
            read_p50_ms: s
                .storage
                .iter()
                .filter_map(|v| Some((v.name.clone(), (v.client_p50? * 1e4).round() / 10.0)))
                .collect(),
            throttled: s
                .ranks
                .iter()
                .filter_map(|r| Some((r.name.clone(), (r.throttled? * 1e3).round() / 1e3)))
                .collect(),
            compute: s
                .ranks
                .iter()
                .filter_map(|r| Some((r.name.clone(), (r.compute? * 1e3).round() / 1e3)))
                .collect(),
            world_size: t.world_size,
        });
        if self.inject_ms.is_some() {
            self.lost.push(s);
        }
        self.keep_moment(s);
        self.last = Some(s.clone());
    }

    /// For a recording: the lab as a bundle about once a second from the detection until the first
    /// remediation starts (after it, the lab shows what that remediation did, which a replayed agent did not).
    fn keep_moment(&mut self, s: &Snapshot) {
        const MOST: usize = 60;
        let (Some(d), None) = (self.detection.as_ref(), self.remediation_start_ms) else {
            return;
        };
        if !self.options.keep_for_replay || self.replay.moments.len() >= MOST {
            return;
        }
        let t_s = s.at_ms.saturating_sub(d.at_ms) as f64 / 1000.0;
        if self.replay.moments.last().is_some_and(|m| t_s - m.t_s < 1.0) {
            return;
        }
        if let Ok(bundle) = serde_json::to_value(lab_incident::Bundle::from_snapshot(s)) {
            self.replay.moments.push(lab_agents::record::Moment {
                t_s: (t_s * 10.0).round() / 10.0,
                bundle,
            });
        }
    }

    /// For a recording: what runs in each rank's CPU limit, once, as the first remediation starts.
    pub(super) async fn keep_processes(&mut self) {
        if !self.options.keep_for_replay || !self.replay.processes.is_empty() {
            return;
        }
        let ranks: Vec<u32> = self
            .last
            .as_ref()
            .map(|s| s.ranks.iter().map(|r| r.rank).collect())
            .unwrap_or_default();
        for r in ranks {
            if let Ok(p) = self.lab.runtime.rank_processes(r).await
                && let Ok(v) = serde_json::to_value(p)
            {
                self.replay.processes.insert(
                    lab_model::names::rank(r),
                    serde_json::json!({"rank": lab_model::names::rank(r), "processes": v}),
                );
            }
        }
    }

    pub(super) async fn next(&mut self) -> Snapshot {
        if let Some(s) = self.buffer.pop_front() {
            return s;
        }
        let s = self.source.next().await;
        self.record(&s);
        s
    }

    /// Runs `fut` while snapshots keep coming; they are kept for the next step.
    pub(super) async fn during<T>(&mut self, fut: impl Future<Output = T>) -> T {
        let mut fut = std::pin::pin!(fut);
        loop {
            tokio::select! {
                out = &mut fut => return out,
                s = self.source.next() => {
                    self.record(&s);
                    self.buffer.push_back(s);
                }
            }
        }
    }

    pub(super) fn start(&self, step: StepName, what: &str) -> u64 {
        self.observer.event(&Event::StepStarted { step, what });
        let t = now_ms();
        past_ms(t);
        now_ms()
    }

    pub(super) fn finish(
        &mut self,
        step: StepName,
        started: u64,
        ok: bool,
        summary: String,
        evidence: Vec<String>,
        verdict_if_failed: Verdict,
    ) -> StepReport {
        let r = StepReport {
            step,
            ok,
            started_s: self.rel_s(started),
            duration_s: now_ms().saturating_sub(started) as f64 / 1000.0,
            summary: summary.clone(),
            evidence: evidence.clone(),
        };
        if !ok && self.failure.is_none() {
            self.failure = Some(Failure {
                step,
                verdict: verdict_if_failed,
                reason: format!("{step}: {summary}"),
                evidence,
            });
        }
        self.steps.push(r.clone());
        self.observer.event(&Event::StepFinished(&r));
        r
    }

    pub(super) fn progress(&self, step: StepName, started: u64, last: &mut u64, at_ms: u64, text: &str) {
        if at_ms.saturating_sub(*last) >= PROGRESS_EVERY_MS {
            *last = at_ms;
            self.observer.event(&Event::Progress {
                step,
                elapsed_s: at_ms.saturating_sub(started) as f64 / 1000.0,
                text,
            });
        }
    }

    /// The report of the drill.
    pub fn into_report(self, drill: &Drill, origin: &str) -> DrillReport {
        let inject = self.inject_ms;
        let rel = |ms: Option<u64>| ms.zip(inject).map(|(m, i)| m.saturating_sub(i) as f64 / 1000.0);
        let figures = Figures {
            time_to_detect_s: rel(self.detection.as_ref().map(|d| d.at_ms)),
            time_to_mitigate_s: rel(self.mitigated_ms),
            time_to_baseline_s: rel(self.recovery.as_ref().map(|r| r.back_at_ms)),
            steps_lost: self.lost.lost(),
            lowest_throughput_pct: self.lowest_pct.map(|p| (p * 10.0).round() / 10.0),
            fault_throughput_pct: median(&self.fault_pcts).map(|p| (p * 10.0).round() / 10.0),
        };
        let secs = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1} s"));
        let (verdict, reason, evidence) = match self.failure {
            Some(f) => (f.verdict, f.reason, f.evidence),
            None => (
                Verdict::Pass,
                format!(
                    "detected in {}, mitigated at {}, back to baseline at {}, {} steps lost",
                    secs(figures.time_to_detect_s),
                    secs(figures.time_to_mitigate_s),
                    secs(figures.time_to_baseline_s),
                    figures.steps_lost
                ),
                self.retried
                    .iter()
                    .cloned()
                    .chain(
                        self.steps
                            .iter()
                            .filter(|s| s.step != StepName::Check)
                            .map(|s| format!("{}: {}", s.step, s.summary)),
                    )
                    .collect(),
            ),
        };
        let mut remediations = self.remediations;
        let held = fixes_held(&self.steps);
        score_plans(&mut remediations, &held, figures.time_to_baseline_s, inject);
        let agent = summarize(&remediations, &held, &figures);
        let ranks = self.baseline_ranks.unwrap_or(0);
        let started_ms = self.started_ms;
        let idle = inject.map(|i| {
            let from = i.saturating_sub(started_ms) as f64 / 1000.0;
            let to = figures.time_to_baseline_s.map_or(f64::INFINITY, |b| from + b);
            lab_reports::report::idle_accelerator_s(&self.timeline, from, to, ranks)
        });
        let runtime = self.last.as_ref().map_or_else(
            || self.lab.runtime.kind().to_string(),
            |s| s.status.runtime.to_string(),
        );
        DrillReport {
            name: drill.name.clone(),
            origin: origin.to_string(),
            description: drill.description.clone(),
            faults: drill.faults(),
            seed: drill.seed,
            lab: self.lab.name.clone(),
            runtime,
            started_at: lab_model::clock::rfc3339(self.started_ms),
            duration_s: now_ms().saturating_sub(self.started_ms) as f64 / 1000.0,
            verdict,
            reason,
            evidence,
            figures,
            baseline: self.baseline,
            steady_after: self.after,
            steps: self.steps,
            remediations,
            cleanup: self.cleanup,
            timeline: self.timeline,
            agent,
            idle_accelerator_s: idle,
            full_bundles: self.full_bundles,
            replay: self.replay,
        }
    }
}

/// For each remediate step, in order, whether the verification that judged it passed: the last verify
/// step before the next remediate step (a re-judgment after the cleanup comes last, and decides).
pub(super) fn fixes_held(steps: &[StepReport]) -> Vec<bool> {
    let mut held = Vec::new();
    for s in steps {
        match s.step {
            StepName::Remediate => held.push(false),
            StepName::Verify => {
                if let Some(h) = held.last_mut() {
                    *h = s.ok;
                }
            }
            _ => {}
        }
    }
    held
}

/// Scores each agent's plan (and each interactive agent's attempt) once the verifications are known: one
/// that ran is fixed when the verification of its remediation passed (in a chained drill, each fault's own),
/// else it failed.
fn score_plans(
    remediations: &mut [RemediationReport],
    held: &[bool],
    back_s: Option<f64>,
    inject: Option<u64>,
) {
    use lab_agents::score::{score, score_conclusion};
    use lab_agents::{Mitigation, PlanOutcome};
    for (i, r) in remediations.iter_mut().enumerate() {
        let fixed = held.get(i).copied().unwrap_or(false);
        if let Some(a) = r.agent.as_mut()
            && let (Some(plan), Some(truth)) = (a.plan.as_ref(), a.truth.as_ref())
        {
            let m = match a.outcome {
                PlanOutcome::Ran if fixed => Mitigation::Fixed,
                PlanOutcome::Ran => Mitigation::Failed,
                _ => Mitigation::NotRun,
            };
            a.score = Some(score(plan, truth, m, a.plan_at_s, back_s));
        }
        if let Some(m) = r.mcp.as_mut()
            && let Some(truth) = m.truth.clone()
        {
            let ran = m.acts().any(|a| a.approved);
            let mitigation = match (ran, fixed) {
                (_, true) => Mitigation::Fixed,
                (true, false) => Mitigation::Failed,
                (false, false) => Mitigation::NotRun,
            };
            // When it knew: its diagnosis, else its first act.
            let known = m
                .calls
                .iter()
                .find(|c| c.tool == "diagnose" || c.act.is_some())
                .map(|c| c.at_ms);
            let at = known
                .zip(inject)
                .map(|(k, i)| k.saturating_sub(i) as f64 / 1000.0);
            m.score = Some(score_conclusion(&m.conclusion(), &truth, mitigation, at, back_s));
        }
    }
}

/// The agent's whole incident in one line of figures, from its remediations (the last one decides).
fn summarize(
    remediations: &[RemediationReport],
    held: &[bool],
    figures: &Figures,
) -> Option<lab_reports::report::AgentSummary> {
    let with_agent: Vec<(usize, &RemediationReport)> = remediations
        .iter()
        .enumerate()
        .filter(|(_, r)| r.agent.is_some() || r.mcp.is_some())
        .collect();
    let (last_i, last) = *with_agent.last()?;
    let mitigated = held.get(last_i).copied().unwrap_or(false);
    let incident_to_fix_s = match (mitigated, figures.time_to_baseline_s, figures.time_to_detect_s) {
        (true, Some(b), Some(d)) => Some(((b - d).max(0.0) * 10.0).round() / 10.0),
        _ => None,
    };
    let mut s = lab_reports::report::AgentSummary {
        protocol: String::new(),
        agent: last.command.clone().unwrap_or_default(),
        evidence: lab_agents::EvidenceLevel::Full,
        detected: false,
        localized: false,
        cause: false,
        mitigated,
        attempts: with_agent.len() as u32,
        incident_to_fix_s,
        tool_calls: 0,
        declined: 0,
        refused: 0,
        harmful: Vec::new(),
    };
    // What the agent concluded is its latest attempt that named a cause: a later attempt that found nothing
    // left to fix (the job already back, or slowed by something else) does not undo it.
    let concluding = with_agent
        .iter()
        .rev()
        .find(|(_, r)| {
            let cause = r
                .agent
                .as_ref()
                .and_then(|a| a.score.as_ref().map(|s| s.cause_named.clone()))
                .or_else(|| {
                    r.mcp
                        .as_ref()
                        .and_then(|m| m.score.as_ref().map(|s| s.cause_named.clone()))
                });
            cause.is_some_and(|c| c != "unknown" && c != "none")
        })
        .map_or(last_i, |(i, _)| *i);
    for (i, r) in &with_agent {
        let concludes = *i == concluding;
        if let Some(a) = &r.agent {
            s.protocol = "plan".into();
            s.evidence = a.evidence;
            s.tool_calls += a.plan.as_ref().map_or(0, |p| p.commands.len());
            s.declined += a.commands.iter().filter(|c| !c.approved).count();
            s.refused += usize::from(a.outcome == lab_agents::PlanOutcome::Refused);
            if let (Some(p), Some(t)) = (&a.plan, &a.truth) {
                s.harmful.extend(
                    a.commands
                        .iter()
                        .filter(|c| c.approved && c.exit_code == Some(0))
                        .filter(|c| touches_only_healthy(&c.argv, t))
                        .map(|c| c.argv.join(" ")),
                );
                let _ = p;
            }
            if let Some(sc) = a.score.as_ref().filter(|_| concludes) {
                s.detected = sc.detection;
                s.localized = sc.precision == Some(1.0) && sc.recall == 1.0;
                s.cause = sc.cause;
            }
        }
        if let Some(m) = &r.mcp {
            s.protocol = "mcp".into();
            s.evidence = m.evidence;
            s.tool_calls += m.calls.len();
            s.declined += m.declined();
            s.refused += m.refused();
            if let Some(t) = &m.truth {
                s.harmful.extend(m.harmful(t));
            }
            if let Some(sc) = m.score.as_ref().filter(|_| concludes) {
                s.detected = sc.detection;
                s.localized = sc.precision == Some(1.0) && sc.recall == 1.0;
                s.cause = sc.cause;
            }
        }
    }
    Some(s)
}

/// Whether a plan's command names a component that was not at fault and none that was (`lab restart rank 2`
/// when storage-1 was slow): read from its arguments, as a plan's commands carry no change records of
/// their own.
fn touches_only_healthy(argv: &[String], truth: &lab_agents::Truth) -> bool {
    let named: Vec<String> = match argv
        .iter()
        .skip(1)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["restart", "rank", n, ..] | ["resize", "rank", n, ..] | ["rank", "stop", n, ..] => {
            vec![format!("rank-{n}")]
        }
        ["storage", "drain", n, ..] => vec![format!("storage-{n}")],
        ["db", "delete-pod", p, ..] => vec![(*p).to_string()],
        _ => Vec::new(),
    };
    !named.is_empty() && !named.iter().any(|n| truth.components.contains(n))
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Waits (at most a millisecond) until the wall clock has passed `t`, so that what is recorded from now on
/// never shares a millisecond with what was recorded until `t`: a fix's window (its start to its end, in
/// ms) then holds the fix's own changes, never one recorded just before or just after it.
pub(super) fn past_ms(t: u64) {
    while now_ms() <= t {
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}
