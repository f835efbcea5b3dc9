//! Running a drill against a live lab: a [`Session`] takes snapshots from a [`SnapshotSource`], acts through
//! the fault engine and the runtime, and hands every decision to the pure judges in [`crate::judge`].
//!
//! Snapshots keep coming while an action runs (an injection, a remediation command): they are buffered and
//! the next step reads them, so a detection during a slow injection, or a recovery during a long
//! remediation, is timed from what was really seen. Whatever the drill injected is cleared at the end, and
//! the steady state is checked after that cleanup; a [`Guard`] does the same on an interrupt.

use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lab_faults::{Fault, FaultError, Ledger};
use lab_model::Snapshot;
use lab_model::status::LabStatus;
use lab_runtime::Runtime;
use lab_runtime::state::now_ms;
use nix::sys::signal::Signal;
use tracing::Instrument as _;

use crate::bundle::Bundle;
use crate::command::{self, CommandSpec, GroupSlot};
use crate::judge::{
    Detection, ExpectTracker, Outcome, PreFault, Recovery, RecoveryTracker, SteadyAgain, SteadyWindow,
    StepsLost, fmt_s,
};
use crate::report::{
    CleanupReport, DrillReport, Failure, Figures, Point, RemediationReport, StepName, StepReport, Verdict,
};
use crate::spec::{Drill, Expect, Remediate, Requirements, Step, Verify};

/// Where snapshots come from: the telemetry driver in a live run, a list in a test.
pub trait SnapshotSource: Send {
    /// The next snapshot (about once a second).
    fn next(&mut self) -> impl Future<Output = Snapshot> + Send;

    /// Makes the golden-signal rules compare throughput with the drill's pre-fault baseline from now on.
    /// The baseline learned at `lab up` may be stale on a machine whose load changed since; a drill judges
    /// against the job's normal of a moment ago.
    fn rebase(&mut self, _pre: &PreFault) {}
}

/// The telemetry driver, ticking once a second.
#[derive(Debug)]
pub struct Ticking {
    driver: lab_telemetry::Driver,
    every: tokio::time::Interval,
}

impl Ticking {
    /// Ticks `driver` every `interval`.
    pub fn new(driver: lab_telemetry::Driver, interval: Duration) -> Self {
        let mut every = tokio::time::interval(interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Ticking { driver, every }
    }
}

impl SnapshotSource for Ticking {
    async fn next(&mut self) -> Snapshot {
        self.every.tick().await;
        self.driver.tick().await
    }

    fn rebase(&mut self, pre: &PreFault) {
        let c = self.driver.collector_mut();
        let job = lab_model::snapshot::Baseline {
            samples_per_s: pre.samples_per_s,
            step_seconds: pre.step_seconds,
            learned_at_ms: now_ms(),
        };
        let b = match c.baseline() {
            Some(b) => lab_telemetry::LearnedBaseline { job, ..b.clone() },
            None => lab_telemetry::LearnedBaseline {
                job,
                storage_p50: std::collections::BTreeMap::new(),
            },
        };
        c.restore_baseline(b);
    }
}

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
    /// Where incident bundles are written.
    pub bundle_dir: PathBuf,
    /// Set in a remediation command's environment (`LAB_NAME`, `LAB_STATE_DIR`).
    pub command_env: Vec<(String, String)>,
    /// Put first on a remediation command's `PATH`.
    pub command_path: Option<PathBuf>,
}

/// Clears what a drill injected, and ends its remediation command, when the drill is interrupted.
#[derive(Debug, Clone)]
pub struct Guard {
    lab: Lab,
    since_ms: Arc<Mutex<Option<u64>>>,
    group: GroupSlot,
}

impl Guard {
    /// A guard for drills on `lab`.
    pub fn new(lab: Lab) -> Self {
        Guard {
            lab,
            since_ms: Arc::default(),
            group: GroupSlot::default(),
        }
    }

    fn arm(&self, since_ms: u64) {
        *self.since_ms.lock().unwrap_or_else(|p| p.into_inner()) = Some(since_ms);
    }

    fn disarm(&self) {
        *self.since_ms.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Ends a running remediation command and clears every fault injected since the current drill began.
    /// Returns one line per thing done or failed.
    pub async fn abort(&self) -> Vec<String> {
        let mut out = Vec::new();
        let pg = *self.group.lock().unwrap_or_else(|p| p.into_inner());
        if pg.is_some() {
            command::signal_group(pg, Signal::SIGKILL);
            out.push("stopped the remediation command".to_string());
        }
        let Some(since) = *self.since_ms.lock().unwrap_or_else(|p| p.into_inner()) else {
            return out;
        };
        let ids: Vec<String> = match self.lab.ledger.read() {
            Ok(d) => d
                .active()
                .filter(|e| e.injected_at_ms >= since)
                .map(|e| e.id.clone())
                .collect(),
            Err(e) => {
                out.push(format!(
                    "cannot read the fault ledger: {e}; run `lab fault clear --all`"
                ));
                return out;
            }
        };
        for id in ids {
            match lab_faults::clear(self.lab.runtime.as_ref(), &self.lab.ledger, &id).await {
                Ok(_) => out.push(format!("cleared {id}")),
                Err(e) => out.push(format!("could not clear {id}: {e}; run `lab fault clear --all`")),
            }
        }
        self.disarm();
        out
    }
}

/// Why a lab cannot run a drill as it is, if it cannot.
pub fn unsuitable(drill: &Drill, status: &LabStatus, lab_seed: Option<u64>) -> Option<String> {
    let req: &Requirements = &drill.runtime;
    if !req.kinds.contains(&status.runtime) {
        let kinds: Vec<String> = req.kinds.iter().map(ToString::to_string).collect();
        return Some(format!(
            "this drill runs on the {} runtime; the lab runs on {}",
            kinds.join(" or "),
            status.runtime
        ));
    }
    let checks = [
        ("ranks", req.ranks, status.ranks_desired, "--ranks"),
        (
            "storage servers",
            req.storage_servers,
            status.storage_servers,
            "--storage-servers",
        ),
        ("GPUs", req.gpus, status.gpus_capacity, "--gpus"),
    ];
    for (what, want, have, flag) in checks {
        if let Some(want) = want
            && want != have
        {
            return Some(format!(
                "this drill needs {want} {what}; the lab has {have}: `lab down`, then `lab up {flag} {want}`"
            ));
        }
    }
    if req.cpu_limits
        && let Some(p) = status.ranks().find(|p| p.resources.cpu_live.is_none())
    {
        let why = status
            .notes
            .first()
            .cloned()
            .unwrap_or_else(|| format!("{}'s limit cannot be read", p.name));
        return Some(format!("this drill needs enforced CPU limits: {why}"));
    }
    if let Some(seed) = lab_seed
        && seed != drill.seed
    {
        return Some(format!(
            "this drill is written for dataset seed {}; the lab was started with --seed {seed}: `lab down`, then `lab up --seed {}`",
            drill.seed, drill.seed
        ));
    }
    None
}

/// The window over which the lab must be steady again after a drill's cleanup.
const STEADY_AGAIN_WINDOW: Duration = Duration::from_secs(10);

/// How often a long step reports where it stands.
const PROGRESS_EVERY_MS: u64 = 10_000;
/// How long the lab may take to become steady after its warm-up.
const SETTLE_EXTRA: Duration = Duration::from_secs(180);

/// One drill in progress: its snapshots, its steps and what they saw.
pub struct Session<'a, S: SnapshotSource> {
    lab: Lab,
    source: &'a mut S,
    observer: &'a dyn Observer,
    options: &'a Options,
    guard: Guard,
    started_ms: u64,
    buffer: VecDeque<Snapshot>,
    last: Option<Snapshot>,
    baseline: Option<PreFault>,
    steps: Vec<StepReport>,
    remediations: Vec<RemediationReport>,
    timeline: Vec<Point>,
    lost: StepsLost,
    inject_ms: Option<u64>,
    detection: Option<Detection>,
    lowest_pct: Option<f64>,
    fault_pcts: Vec<f64>,
    remediation_start_ms: Option<u64>,
    mitigated_ms: Option<u64>,
    recovery: Option<Recovery>,
    failure: Option<Failure>,
    retried: Vec<String>,
    /// The snapshots the last verification judged, what it was asked, from when, and its step's index.
    verify_snaps: Vec<Snapshot>,
    verify_ctx: Option<(Verify, u64, usize)>,
    /// The lab's steady state measured after the cleanup.
    after: Option<PreFault>,
    cleanup: CleanupReport,
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
            steps: Vec::new(),
            remediations: Vec::new(),
            timeline: Vec::new(),
            lost: StepsLost::default(),
            inject_ms: None,
            detection: None,
            lowest_pct: None,
            fault_pcts: Vec::new(),
            remediation_start_ms: None,
            mitigated_ms: None,
            recovery: None,
            failure: None,
            retried: Vec::new(),
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

    fn rel_s(&self, ms: u64) -> f64 {
        ms.saturating_sub(self.started_ms) as f64 / 1000.0
    }

    fn record(&mut self, s: &Snapshot) {
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
        self.last = Some(s.clone());
    }

    async fn next(&mut self) -> Snapshot {
        if let Some(s) = self.buffer.pop_front() {
            return s;
        }
        let s = self.source.next().await;
        self.record(&s);
        s
    }

    /// Runs `fut` while snapshots keep coming; they are kept for the next step.
    async fn during<T>(&mut self, fut: impl Future<Output = T>) -> T {
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

    fn start(&self, step: StepName, what: &str) -> u64 {
        self.observer.event(&Event::StepStarted { step, what });
        now_ms()
    }

    fn finish(
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

    fn progress(&self, step: StepName, started: u64, last: &mut u64, at_ms: u64, text: &str) {
        if at_ms.saturating_sub(*last) >= PROGRESS_EVERY_MS {
            *last = at_ms;
            self.observer.event(&Event::Progress {
                step,
                elapsed_s: at_ms.saturating_sub(started) as f64 / 1000.0,
                text,
            });
        }
    }

    /// Checks that the lab can run `drill` and nothing is injected already.
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
        match result {
            Ok(s) => self.finish(StepName::Check, started, true, s, vec![], Verdict::Error),
            Err(e) => self.finish(StepName::Check, started, false, e, vec![], Verdict::Error),
        }
    }

    /// Watches for `warmup`, then measures the pre-fault baseline over a steady `window`.
    pub async fn settle(&mut self, warmup: Duration, window: Duration) -> StepReport {
        let started = self.start(StepName::Baseline, "warm up, then measure the job's normal");
        let warm_until = started + warmup.as_millis() as u64;
        let deadline = warm_until + (window + SETTLE_EXTRA).as_millis() as u64;
        let mut steady = SteadyWindow::new(window.as_millis() as u64);
        let mut last_progress = started;
        loop {
            let s = self.next().await;
            if s.at_ms < warm_until {
                continue;
            }
            match steady.push(&s) {
                Outcome::Done(b) => {
                    self.baseline = Some(b);
                    self.source.rebase(&b);
                    let learned = b.learned.map_or(String::new(), |l| {
                        format!(
                            " (the rules compared with {:.0} samples/s, {} until now)",
                            l.samples_per_s,
                            fmt_s(l.step_seconds)
                        )
                    });
                    let summary = format!(
                        "{:.0} samples/s, step {} over {:.0} s{learned}",
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
        self.inject_ms.get_or_insert(started);
        let lab = self.lab.clone();
        let result = self
            .during(async move { lab_faults::inject(lab.runtime.as_ref(), &lab.ledger, fault).await })
            .await;
        match result {
            Ok(done) => {
                let summary = done.entry.proof.clone().unwrap_or(what);
                let ev = done.changes.iter().map(lab_model::ChangeRecord::line).collect();
                self.finish(StepName::Inject, started, true, summary, ev, Verdict::Error)
            }
            Err(e) => self.finish(
                StepName::Inject,
                started,
                false,
                format!("could not inject {what}: {e}"),
                vec![],
                Verdict::Error,
            ),
        }
    }

    /// Waits for the expected signals.
    pub async fn expect(&mut self, spec: &Expect) -> StepReport {
        let started = self.start(StepName::Expect, "the golden signals catch it");
        let (Some(base), Some(from)) = (self.baseline, self.inject_ms) else {
            return self.finish(
                StepName::Expect,
                started,
                false,
                "nothing to expect: no baseline or no injection before this step".into(),
                vec![],
                Verdict::Error,
            );
        };
        let mut tracker = ExpectTracker::new(spec.clone(), base, from);
        let mut last_progress = started;
        loop {
            let s = self.next().await;
            let outcome = tracker.push(&s);
            self.lowest_pct = tracker.lowest_pct();
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
                    self.detection = Some(d);
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

    fn rel_from_inject(&self, ms: u64) -> f64 {
        ms.saturating_sub(self.inject_ms.unwrap_or(self.started_ms)) as f64 / 1000.0
    }

    /// Writes the incident bundle of the latest snapshot; returns its path.
    fn write_bundle(&self) -> Result<PathBuf, String> {
        let snap = self.last.as_ref().ok_or("no snapshot yet")?;
        let bundle = Bundle::from_snapshot(snap);
        std::fs::create_dir_all(&self.options.bundle_dir)
            .map_err(|e| format!("cannot create {}: {e}", self.options.bundle_dir.display()))?;
        let path = self
            .options
            .bundle_dir
            .join(format!("incident-{}.json", snap.at_ms));
        let bytes = serde_json::to_vec_pretty(&bundle).map_err(|e| e.to_string())?;
        lab_runtime::state::write_atomic(&path, &bytes).map_err(|e| e.to_string())?;
        Ok(path)
    }

    /// Remediates: runs the command (the run's `--remediate`, else the step's), or clears what the drill
    /// injected when there is none.
    pub async fn remediate(&mut self, spec: &Remediate) -> StepReport {
        let command = self.options.remediate.clone().or_else(|| spec.command.clone());
        let what = command.clone().unwrap_or_else(|| "the lab's own clear".into());
        let started = self.start(StepName::Remediate, &what);
        self.remediation_start_ms = Some(started);
        let bundle = match self.write_bundle() {
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
            command: command.clone(),
            bundle: bundle.as_ref().map(|p| p.display().to_string()),
            exit_code: None,
            timed_out: false,
            duration_s: 0.0,
            stdout: String::new(),
            stderr: String::new(),
            changes: Vec::new(),
        };
        let (ok, summary) = match command {
            Some(cmd) => {
                let mut env = self.options.command_env.clone();
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
                let lab = self.lab.clone();
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
        report.changes = self.changes_between(started, end);
        if report.duration_s == 0.0 {
            report.duration_s = end.saturating_sub(started) as f64 / 1000.0;
        }
        self.mitigated_ms = Some(end);
        let mut ev = report.changes.clone();
        if let Some(b) = &report.bundle {
            ev.push(format!("incident bundle: {b}"));
        }
        self.remediations.push(report);
        self.finish(StepName::Remediate, started, ok, summary, ev, Verdict::Fail)
    }

    fn changes_between(&self, from: u64, to: u64) -> Vec<String> {
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

    /// After a failed verification, lets a further remediation try again: the failure stays in the steps
    /// and the evidence, and the next verification decides the verdict.
    pub fn retry(&mut self) {
        if let Some(f) = &self.failure
            && f.step == StepName::Verify
        {
            self.retried
                .push(format!("an earlier remediation did not hold: {}", f.reason));
            self.failure = None;
        }
    }

    /// Verifies the job is back at its pre-fault baseline on its own signals.
    pub async fn verify(&mut self, spec: &Verify) -> StepReport {
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

    /// Clears whatever the drill injected, then checks that the job is back at its baseline.
    pub async fn cleanup(&mut self, deadline: Duration) -> StepReport {
        let started = self.start(
            StepName::Cleanup,
            "clear what the drill injected, then check the steady state",
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
    /// shows the machine got slower during the drill (by more than the tolerance), judges that
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

    fn cleanup_failed(&mut self, started: u64, why: String) -> StepReport {
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
        let runtime = self.last.as_ref().map_or_else(
            || self.lab.runtime.kind().to_string(),
            |s| s.status.runtime.to_string(),
        );
        DrillReport {
            name: drill.name.clone(),
            origin: origin.to_string(),
            description: drill.description.clone(),
            faults: crate::report::injected(drill),
            seed: drill.seed,
            lab: self.lab.name.clone(),
            runtime,
            started_at: crate::bundle::rfc3339(self.started_ms),
            duration_s: now_ms().saturating_sub(self.started_ms) as f64 / 1000.0,
            verdict,
            reason,
            evidence,
            figures,
            baseline: self.baseline,
            steady_after: self.after,
            steps: self.steps,
            remediations: self.remediations,
            cleanup: self.cleanup,
            timeline: self.timeline,
        }
    }
}

/// Clears every fault injected into `lab` since `since_ms`; returns the ids cleared.
async fn clear_ours(lab: &Lab, since_ms: u64) -> Result<Vec<String>, FaultError> {
    let ids: Vec<String> = lab
        .ledger
        .read()?
        .active()
        .filter(|e| e.injected_at_ms >= since_ms)
        .map(|e| e.id.clone())
        .collect();
    let mut done = Vec::new();
    for id in ids {
        if let Some(e) = lab_faults::clear(lab.runtime.as_ref(), &lab.ledger, &id).await? {
            done.push(format!("{} ({})", e.id, e.fault));
        }
    }
    Ok(done)
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Lines that say what the job and Kubernetes show in `s`: the evidence behind a verdict.
pub fn evidence(s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let st = &s.status;
    let (ready, total) = st.ranks_ready();
    let mut k = format!(
        "Kubernetes: {ready}/{total} ranks Running and Ready; ranks asked for {}, world size configured {}",
        st.ranks_desired, st.world_size
    );
    for p in st.ranks().filter(|p| !p.is_running_ready()) {
        k.push_str(&format!(
            "; {} {}{}",
            p.name,
            p.phase,
            p.reason.as_ref().map_or(String::new(), |r| format!(" ({r})"))
        ));
    }
    let restarted: Vec<String> = st
        .ranks()
        .filter(|p| p.restarts > 0)
        .map(|p| format!("{} {}", p.name, p.restarts))
        .collect();
    if !restarted.is_empty() {
        k.push_str(&format!("; restarts: {}", restarted.join(", ")));
    }
    out.push(k);
    let t = &s.training;
    out.push(format!(
        "training: {} samples/s, step time {}, step {}, world size reported {}",
        t.samples_per_s.map_or("unknown".into(), |v| format!("{v:.0}")),
        crate::judge::step_time(s).map_or("unknown".into(), fmt_s),
        t.step,
        t.world_size.map_or("?".into(), |w| w.to_string())
    ));
    let waiting: Vec<&str> = s
        .ranks
        .iter()
        .filter(|r| r.waiting_for_peers)
        .map(|r| r.name.as_str())
        .collect();
    if !waiting.is_empty() {
        out.push(format!(
            "{} waiting at rendezvous for peers that have not joined",
            waiting.join(", ")
        ));
    }
    for p in st.ranks().filter(|p| p.resources.drifted()) {
        out.push(format!(
            "{} CPU limit live {} against template {}",
            p.name,
            p.resources.cpu_live.map_or("?".into(), |m| m.to_string()),
            p.resources.cpu_template.map_or("?".into(), |m| m.to_string())
        ));
    }
    for a in &s.alerts {
        out.push(format!("firing: {} ({}): {}", a.rule, a.signal, a.summary));
    }
    for v in s.storage.iter().filter(|v| v.outlier) {
        out.push(format!(
            "{} read p50 {} (baseline {})",
            v.name,
            v.client_p50.map_or("?".into(), fmt_s),
            v.baseline_p50.map_or("?".into(), fmt_s)
        ));
    }
    let straggler = s
        .alerts
        .iter()
        .any(|a| a.signal != lab_model::snapshot::GoldenSignal::Throughput);
    let slower = match (s.training.pct_of_baseline, crate::judge::step_time(s)) {
        (Some(p), Some(_)) => p < 90.0,
        _ => false,
    };
    if slower && !straggler && waiting.is_empty() {
        // Said as a hint, not a verdict: a busier machine and a fault that left no signal look alike.
        out.push(
            "no latency, error or saturation signal fires: every rank is slower alike, which is also what \
             other heavy work on this machine looks like"
                .into(),
        );
    }
    out
}

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
            while let Some(step) = drill.steps.get(i) {
                let step_span = tracing::info_span!("step", drill = %drill.name, step = step.key());
                let r = match step {
                    Step::Inject(f) => s.inject(f.clone()).instrument(step_span).await,
                    Step::Expect(e) => s.expect(e).instrument(step_span).await,
                    Step::Remediate(r) => s.remediate(r).instrument(step_span).await,
                    Step::Verify(v) => s.verify(v).instrument(step_span).await,
                };
                i += 1;
                if observer.after_step(&r, s.last_snapshot()) == Flow::Stop {
                    break;
                }
                if !r.ok {
                    // A verification that fails sends the incident back when the drill has a further
                    // remediation, as the seed's pipeline did; the last verification decides.
                    let next_fix = drill.steps[i..]
                        .iter()
                        .position(|s| matches!(s, Step::Remediate(_)));
                    match (step, next_fix) {
                        (Step::Verify(_), Some(j)) => {
                            s.retry();
                            i += j;
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

#[cfg(test)]
mod tests {
    use lab_model::Millicores;

    use super::*;
    use crate::judge::tests::snap;

    fn drill(text: &str) -> Drill {
        crate::spec::parse(text).unwrap()
    }

    #[test]
    fn a_lab_that_does_not_fit_is_told_what_to_do() {
        let d = drill(
            "name: x\nseed: 42\nruntime:\n  kinds: [kind]\n  ranks: 4\nsteps:\n  - inject:\n      kind: slow-storage\n  - remediate:\n  - verify:\n",
        );
        let s = snap(0, Some(1.0), Some(1.0), 1);
        assert!(
            unsuitable(&d, &s.status, Some(42))
                .unwrap()
                .contains("runs on the kind runtime")
        );
        let d = drill(
            "name: x\nseed: 42\nruntime:\n  ranks: 8\n  cpu_limits: true\nsteps:\n  - inject:\n      kind: slow-storage\n  - remediate:\n  - verify:\n",
        );
        assert!(
            unsuitable(&d, &s.status, Some(42))
                .unwrap()
                .contains("needs 8 ranks; the lab has 4: `lab down`, then `lab up --ranks 8`")
        );
        let d = drill(
            "name: x\nseed: 42\nruntime:\n  cpu_limits: true\nsteps:\n  - inject:\n      kind: slow-storage\n  - remediate:\n  - verify:\n",
        );
        let mut st = s.status.clone();
        st.notes = vec!["CPU limits are not enforced: no cgroups".into()];
        assert!(unsuitable(&d, &st, None).unwrap().contains("no cgroups"));
        for p in &mut st.pods {
            p.resources.cpu_live = Some(Millicores(400));
        }
        assert_eq!(unsuitable(&d, &st, None), None);
        assert!(unsuitable(&d, &st, Some(7)).unwrap().contains("lab up --seed 42"));
    }

    #[test]
    fn evidence_reads_the_stalled_job() {
        let mut s = snap(0, Some(0.0), None, 300);
        s.status.ranks_desired = 5;
        s.status.world_size = 5;
        let mut p = lab_model::PodStatus::new("rank-4", lab_model::Role::Rank, Some(4));
        p.reason = Some("Insufficient gpu".into());
        s.status.pods.push(p);
        for r in &mut s.ranks {
            r.waiting_for_peers = true;
        }
        let ev = evidence(&s);
        assert!(ev[0].contains("4/5 ranks Running and Ready; ranks asked for 5, world size configured 5; rank-4 Pending (Insufficient gpu)"), "{ev:?}");
        assert!(
            ev.iter()
                .any(|l| l.starts_with("rank-0, rank-1, rank-2, rank-3 waiting at rendezvous")),
            "{ev:?}"
        );
    }
}

#[cfg(test)]
mod session_tests;
