//! The decisions of a drill, as pure functions of snapshots: is the lab steady (and at what baseline), has
//! the fault been detected, is the job back, how many steps were lost.
//!
//! Every tracker takes snapshots one at a time and reads the time from the snapshot itself, so a test can
//! replay a synthetic sequence and get the same verdicts a live run would.

use std::collections::{BTreeMap, VecDeque};

use lab_model::Snapshot;
use lab_model::snapshot::GoldenSignal;
use lab_model::status::Phase;
use serde::Serialize;

pub use crate::history::{SteadyPoint, unsteady_now};
use lab_drill_file::spec::{Expect, Verify};
pub use lab_model::format::fmt_s;
pub use lab_model::snapshot::{job_step, step_time};
pub use lab_reports::report::PreFault;

/// Where a tracker stands after a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<T> {
    /// Not decided yet; the text says what is awaited.
    Pending(String),
    /// Decided: what was seen.
    Done(T),
    /// Decided against: why.
    Failed(String),
}

/// How far the throughput of a steady window may wander (relative standard deviation).
pub const STEADY_MAX_VARIATION: f64 = 0.12;

/// One moment in a steady window: when, samples per second, step time, the writer's commits per second.
type WindowPoint = (u64, Option<f64>, Option<f64>, Option<f64>);

/// Finds a window over which the lab is steady: every rank Running and Ready and training, no golden
/// signal firing, and throughput that does not wander.
#[derive(Debug)]
pub struct SteadyWindow {
    window_ms: u64,
    points: VecDeque<WindowPoint>,
}

impl SteadyWindow {
    /// A window of `window_ms`.
    pub fn new(window_ms: u64) -> Self {
        SteadyWindow {
            window_ms,
            points: VecDeque::new(),
        }
    }

    /// Adds a snapshot; `Done` once the last window was steady.
    pub fn push(&mut self, s: &Snapshot) -> Outcome<PreFault> {
        self.push_point(&SteadyPoint::of(s))
    }

    /// Adds one moment (a snapshot's, or one the lab's own watch kept); `Done` once the last window was
    /// steady.
    pub fn push_point(&mut self, p: &SteadyPoint) -> Outcome<PreFault> {
        self.points
            .push_back((p.at_ms, p.samples_per_s, p.step_seconds, p.commits_per_s));
        while self
            .points
            .front()
            .is_some_and(|(at, ..)| p.at_ms.saturating_sub(*at) > self.window_ms)
        {
            self.points.pop_front();
        }
        // Anything wrong now restarts the window: the lab must be steady over all of it.
        if let Some(why) = &p.unsteady {
            self.points.clear();
            return Outcome::Pending(why.clone());
        }
        let covered = self
            .points
            .front()
            .map_or(0, |(at, ..)| p.at_ms.saturating_sub(*at));
        // Snapshots come about once a second: a window is covered when its first point is a tick from its start.
        if covered + 1_000 < self.window_ms {
            return Outcome::Pending(format!(
                "measuring the baseline ({:.0} of {:.0} s)",
                covered as f64 / 1000.0,
                self.window_ms as f64 / 1000.0
            ));
        }
        let samples: Vec<f64> = self.points.iter().filter_map(|p| p.1).collect();
        let steps: Vec<f64> = self.points.iter().filter_map(|p| p.2).collect();
        if samples.len() < 3 || steps.len() < 3 {
            return Outcome::Pending("too few measurements in the window".into());
        }
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let var = samples.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / samples.len() as f64;
        let cv = var.sqrt() / mean;
        if cv > STEADY_MAX_VARIATION {
            let (lo, hi) = min_max(&samples);
            return Outcome::Pending(format!(
                "throughput still wanders between {lo:.0} and {hi:.0} samples/s"
            ));
        }
        // One over the mean rate, not the mean of the step times: the job's mean step over the window.
        let step_seconds = steps.len() as f64 / steps.iter().map(|v| 1.0 / v).sum::<f64>();
        let commits: Vec<f64> = self.points.iter().filter_map(|p| p.3).collect();
        let commits_per_s = (!commits.is_empty()).then(|| commits.iter().sum::<f64>() / commits.len() as f64);
        Outcome::Done(PreFault {
            samples_per_s: mean,
            step_seconds,
            window_s: self.window_ms as f64 / 1000.0,
            learned: p.learned,
            commits_per_s,
        })
    }
}

/// After a drill's cleanup the lab must be steady again (every rank Ready, training, no latency, error or
/// saturation signal, a rate that does not wander) at no less than this share of the pre-fault baseline:
/// the throughput rule's own threshold. Anything a fault leaves behind stalls or halves the job, or fires a
/// signal; a machine that got busier in the meantime does not make a cleanup fail.
pub const STEADY_AGAIN_MIN_PCT: f64 = 50.0;

/// Waits for the lab to be steady again after a cleanup, within a deadline.
#[derive(Debug)]
pub struct SteadyAgain {
    window: SteadyWindow,
    baseline: PreFault,
    from_ms: u64,
    deadline_ms: u64,
    last: String,
}

impl SteadyAgain {
    /// Measured over windows of `window_ms`, from `from_ms`, for at most `deadline_ms`.
    pub fn new(baseline: PreFault, window_ms: u64, from_ms: u64, deadline_ms: u64) -> Self {
        SteadyAgain {
            window: SteadyWindow::new(window_ms),
            baseline,
            from_ms,
            deadline_ms,
            last: "no measurement yet".into(),
        }
    }

    /// Adds a snapshot; `Done` with the steady window's figures.
    pub fn push(&mut self, s: &Snapshot) -> Outcome<PreFault> {
        if s.at_ms < self.from_ms {
            return Outcome::Pending("waiting for the cleanup".into());
        }
        match self.window.push(s) {
            Outcome::Done(w) => {
                let pct = self.baseline.pct(w.samples_per_s);
                if pct >= STEADY_AGAIN_MIN_PCT {
                    return Outcome::Done(w);
                }
                self.last = format!(
                    "steady, but at {pct:.0}% of the pre-fault baseline ({:.0} of {:.0} samples/s)",
                    w.samples_per_s, self.baseline.samples_per_s
                );
            }
            Outcome::Pending(why) | Outcome::Failed(why) => self.last = why,
        }
        if s.at_ms - self.from_ms > self.deadline_ms {
            return Outcome::Failed(format!(
                "not steady {:.0} s after the cleanup: {}",
                self.deadline_ms as f64 / 1000.0,
                self.last
            ));
        }
        Outcome::Pending(self.last.clone())
    }
}

/// Judges a failed verification's snapshots again, against the lab's steady state after the cleanup
/// (`after`), when that steady state is below the pre-fault baseline by more than half the tolerance;
/// `None` when it is not (the pre-fault baseline stands).
///
/// Half, not all of it: on a small machine a pre-fault window caught at a fast moment sits 10–20 % above
/// the job's normal, and a job back at that normal then fails a 20 % tolerance by a few points (measured on
/// a 2-core kind lab: 82 % after the cleanup, 72–83 % during the verification). A remediation that left
/// its fault in place stays far below the normal after the cleanup too, and is still judged against it.
pub fn rejudge(
    spec: &Verify,
    pre: PreFault,
    after: PreFault,
    from_ms: u64,
    snaps: &[Snapshot],
) -> Option<Outcome<Recovery>> {
    if after.samples_per_s >= pre.samples_per_s * (1.0 - spec.within_pct / 200.0) {
        return None;
    }
    let mut tracker = RecoveryTracker::new(spec, after, from_ms).with_clean_signals();
    let mut outcome = Outcome::Pending("no snapshot to judge".into());
    for s in snaps {
        outcome = tracker.push(s);
        if !matches!(outcome, Outcome::Pending(_)) {
            break;
        }
    }
    Some(outcome)
}

/// A signal seen after the injection.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Seen {
    /// What: the golden signal's name, or `throughput-drop`.
    pub what: String,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// The alert's rule and target, or the measured drop.
    pub detail: String,
}

/// What the expect step saw.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Detection {
    /// When every expectation was first met, ms since the Unix epoch.
    pub at_ms: u64,
    pub seen: Vec<Seen>,
    /// Ranks Running and Ready over the step: the fewest seen, out of how many.
    pub ranks_ready_min: Option<(usize, usize)>,
}

/// Watches for the expected signals after an injection.
#[derive(Debug)]
pub struct ExpectTracker {
    spec: Expect,
    started_ms: u64,
    baseline: PreFault,
    fired: BTreeMap<GoldenSignal, Seen>,
    /// Expected alerts seen, by their place in the spec's list.
    named: BTreeMap<usize, Seen>,
    drop: Option<Seen>,
    lowest_pct: Option<f64>,
    ready_min: Option<(usize, usize)>,
    met_at: Option<u64>,
    /// When the fault was in place (its injection's proof passed).
    in_place_ms: u64,
}

impl ExpectTracker {
    /// Expectations counted from `started_ms` (the start of the injection). Ready is held to account from
    /// the detection on, through the hold: what Kubernetes says while the signals say the job is broken
    /// (a fault may restart ranks on its way in, as a rollout does; see [`Self::in_place_from`]).
    pub fn new(spec: Expect, baseline: PreFault, started_ms: u64) -> Self {
        ExpectTracker {
            spec,
            started_ms,
            baseline,
            fired: BTreeMap::new(),
            named: BTreeMap::new(),
            drop: None,
            lowest_pct: None,
            ready_min: None,
            met_at: None,
            in_place_ms: started_ms,
        }
    }

    /// The fault was in place from `ms` on (its injection's proof passed then): Ready is held to account,
    /// and the hold counted, only from then, though the detection may come earlier. A fault that restarts
    /// every rank on its way in (unplaceable-rank's new world size) stops the job at once, so its signals
    /// fire while the ranks still come back one by one, which on Kubernetes takes longer than the
    /// detection (each pod made again once the one below it is Ready); the snapshots of the injection
    /// reach this tracker first, and "2/3 ranks Ready" there is the way in, not Kubernetes' view of the
    /// fault.
    #[must_use]
    pub fn in_place_from(mut self, ms: u64) -> Self {
        self.in_place_ms = ms.max(self.started_ms);
        self
    }

    /// The lowest throughput seen, as a percentage of the pre-fault baseline.
    pub fn lowest_pct(&self) -> Option<f64> {
        self.lowest_pct
    }

    /// When every expectation was first met, if they have been.
    pub fn met_at(&self) -> Option<u64> {
        self.met_at
    }

    /// Adds a snapshot.
    pub fn push(&mut self, s: &Snapshot) -> Outcome<Detection> {
        if s.at_ms < self.started_ms {
            return Outcome::Pending("waiting for the injection".into());
        }
        let elapsed = s.at_ms - self.started_ms;
        for a in &s.alerts {
            if self.spec.signals.contains(&a.signal) && !self.fired.contains_key(&a.signal) {
                self.fired.insert(
                    a.signal,
                    Seen {
                        what: a.signal.to_string(),
                        at_ms: s.at_ms,
                        detail: format!("{} on {}: {}", a.rule, a.target, a.summary),
                    },
                );
            }
        }
        for (i, want) in self.spec.alerts.iter().enumerate() {
            if self.named.contains_key(&i) {
                continue;
            }
            if let Some(a) = s
                .alerts
                .iter()
                .find(|a| a.rule == want.rule && a.target == want.target)
            {
                self.named.insert(
                    i,
                    Seen {
                        what: want.to_string(),
                        at_ms: s.at_ms,
                        detail: format!("{} on {}: {}", a.rule, a.target, a.summary),
                    },
                );
            }
        }
        if let Some(v) = s.training.samples_per_s {
            let pct = self.baseline.pct(v);
            self.lowest_pct = Some(self.lowest_pct.map_or(pct, |l: f64| l.min(pct)));
            if let Some(limit) = self.spec.throughput_below_pct
                && pct < limit
                && self.drop.is_none()
            {
                self.drop = Some(Seen {
                    what: "throughput-drop".into(),
                    at_ms: s.at_ms,
                    detail: format!(
                        "throughput {pct:.0}% of the pre-fault baseline ({v:.0} of {:.0} samples/s), under {limit:.0}%",
                        self.baseline.samples_per_s
                    ),
                });
            }
        }
        let missing = self.missing();
        if missing.is_empty() {
            let at = *self.met_at.get_or_insert(s.at_ms);
            if s.at_ms < self.in_place_ms {
                return Outcome::Pending("detected; the fault is still going in".into());
            }
            if let Some(want) = self.spec.ranks_ready {
                let (ready, total) = s.status.ranks_ready();
                if self.ready_min.is_none_or(|(r, _)| ready < r) {
                    self.ready_min = Some((ready, total));
                }
                if ready < want as usize {
                    return Outcome::Failed(format!(
                        "Kubernetes' view changed while the job was broken, {:.0} s after the injection: {ready}/{total} ranks Running and Ready, the drill expects {want} to stay Ready ({})",
                        elapsed as f64 / 1000.0,
                        not_ready(s)
                    ));
                }
            }
            if s.at_ms.saturating_sub(at.max(self.in_place_ms)) >= self.spec.hold.as_millis() as u64 {
                return Outcome::Done(self.detection(at));
            }
            return Outcome::Pending("detected; watching the fault's effect".into());
        }
        if elapsed > self.spec.within.as_millis() as u64 {
            return Outcome::Failed(format!(
                "not detected within {:.0} s of the injection: {}",
                self.spec.within.as_secs_f64(),
                self.describe_missing(&missing, s)
            ));
        }
        Outcome::Pending(format!("waiting for: {}", missing.join(", ")))
    }

    fn missing(&self) -> Vec<String> {
        let mut m: Vec<String> = self
            .spec
            .signals
            .iter()
            .filter(|g| !self.fired.contains_key(g))
            .map(|g| format!("{g} alert"))
            .collect();
        m.extend(
            self.spec
                .alerts
                .iter()
                .enumerate()
                .filter(|(i, _)| !self.named.contains_key(i))
                .map(|(_, a)| a.to_string()),
        );
        if let Some(limit) = self.spec.throughput_below_pct
            && self.drop.is_none()
        {
            m.push(format!("throughput under {limit:.0}%"));
        }
        m
    }

    fn describe_missing(&self, missing: &[String], s: &Snapshot) -> String {
        let firing: Vec<String> = s
            .alerts
            .iter()
            .map(|a| format!("{} on {}", a.rule, a.target))
            .collect();
        let mut out = format!("missing {}", missing.join(", "));
        out.push_str(&format!(
            " (firing now: {}",
            if firing.is_empty() {
                "nothing".to_string()
            } else {
                firing.join(", ")
            }
        ));
        if let Some(l) = self.lowest_pct {
            out.push_str(&format!("; lowest throughput {l:.0}% of the pre-fault baseline"));
        }
        out.push(')');
        out
    }

    fn detection(&self, at_ms: u64) -> Detection {
        let mut seen: Vec<Seen> = self.fired.values().cloned().collect();
        seen.extend(self.named.values().cloned());
        seen.extend(self.drop.clone());
        seen.sort_by_key(|s| s.at_ms);
        Detection {
            at_ms,
            seen,
            ranks_ready_min: self.ready_min,
        }
    }
}

fn not_ready(s: &Snapshot) -> String {
    let list: Vec<String> = s
        .status
        .ranks()
        .filter(|p| !p.is_running_ready())
        .map(|p| {
            let mut t = format!("{} {}", p.name, p.phase);
            if p.phase == Phase::Running {
                t.push_str(", not Ready");
            }
            if let Some(r) = &p.reason {
                t.push_str(&format!(": {r}"));
            }
            t
        })
        .collect();
    if list.is_empty() {
        "every rank present is Ready".into()
    } else {
        list.join("; ")
    }
}

/// The job back at its baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recovery {
    /// When the run of good steps that passed began, ms since the Unix epoch.
    pub back_at_ms: u64,
    /// When the run reached its length.
    pub verified_at_ms: u64,
    /// Steps in the run.
    pub steps: u64,
    /// Throughput at the end, percent of the pre-fault baseline.
    pub pct: f64,
    /// Step time at the end, seconds.
    pub step_seconds: f64,
}

/// Decides whether the job's own signals are back: throughput and step time within a tolerance of the
/// pre-fault baseline for a number of consecutive training steps, reached before a deadline.
#[derive(Debug)]
pub struct RecoveryTracker {
    from_ms: u64,
    deadline_ms: u64,
    tolerance: f64,
    steps: u64,
    baseline: PreFault,
    run: Option<(u64, u64)>,
    best: u64,
    last: String,
    /// The last snapshot had the job's signals back while its desired state disagreed with itself.
    unwhole: bool,
    /// A snapshot with an errors or latency alert firing is not back ([`Self::with_clean_signals`]).
    clean_signals: bool,
}

impl RecoveryTracker {
    /// Counting from `from_ms` (the end of the remediation).
    pub fn new(spec: &Verify, baseline: PreFault, from_ms: u64) -> Self {
        RecoveryTracker {
            from_ms,
            deadline_ms: spec.deadline.as_millis() as u64,
            tolerance: spec.within_pct / 100.0,
            steps: spec.consecutive_steps,
            baseline,
            run: None,
            best: 0,
            last: "no measurement yet".into(),
            unwhole: false,
            clean_signals: false,
        }
    }

    /// Also requires that no errors or latency alert fires: the second look against the lab's steady state
    /// after the cleanup ([`rejudge`]) assumes the machine got slower, and a slower machine makes no rank
    /// crash and no dependency answer late. (Throughput alerts are against the baseline learned at `lab
    /// up`, and saturation can show a busy machine's uneven share; neither is required clear.)
    #[must_use]
    pub fn with_clean_signals(mut self) -> Self {
        self.clean_signals = true;
        self
    }

    /// Whether a snapshot's throughput and step time are within the tolerance, and how they read.
    fn judge(&self, s: &Snapshot) -> (bool, String) {
        let b = &self.baseline;
        let t = &s.training;
        let thr = t.samples_per_s.map(|v| (v, b.pct(v)));
        let thr_ok = thr.is_some_and(|(v, _)| v >= b.samples_per_s * (1.0 - self.tolerance));
        let step = step_time(s);
        let step_ok = step.is_some_and(|v| v <= b.step_seconds * (1.0 + self.tolerance));
        let text = format!(
            "throughput {} of the pre-fault baseline ({} of {:.0} samples/s), step time {} (baseline {})",
            thr.map_or("unknown".into(), |(_, p)| format!("{p:.0}%")),
            thr.map_or("?".into(), |(v, _)| format!("{v:.0}")),
            b.samples_per_s,
            step.map_or("unknown".into(), fmt_s),
            fmt_s(b.step_seconds),
        );
        (thr_ok && step_ok, text)
    }

    /// Adds a snapshot.
    pub fn push(&mut self, s: &Snapshot) -> Outcome<Recovery> {
        if s.at_ms < self.from_ms {
            return Outcome::Pending("waiting for the remediation to end".into());
        }
        let step = job_step(s);
        let (signals_ok, text) = self.judge(s);
        // The job's signals back is not enough: the desired state must agree with itself too.
        let mut whole = s.status.inconsistencies();
        if self.clean_signals {
            whole.extend(
                s.alerts
                    .iter()
                    .filter(|a| matches!(a.signal, GoldenSignal::Errors | GoldenSignal::Latency))
                    .map(|a| format!("{} fires on {}", a.rule, a.target)),
            );
        }
        let ok = signals_ok && whole.is_empty();
        self.last = if signals_ok && !whole.is_empty() {
            format!("{text}, but the job is not whole: {}", whole.join("; "))
        } else {
            text
        };
        self.unwhole = signals_ok && !whole.is_empty();
        match (ok, step) {
            (true, Some(step)) => {
                let (since, first) = match self.run {
                    // A step counter that went back means the job restarted: a new run begins.
                    Some((since, first)) if step >= first => (since, first),
                    _ => (s.at_ms, step),
                };
                self.run = Some((since, first));
                let done = step - first;
                self.best = self.best.max(done);
                if done >= self.steps {
                    let t = &s.training;
                    return Outcome::Done(Recovery {
                        back_at_ms: since,
                        verified_at_ms: s.at_ms,
                        steps: done,
                        pct: t.samples_per_s.map_or(0.0, |v| self.baseline.pct(v)),
                        step_seconds: step_time(s).unwrap_or(0.0),
                    });
                }
            }
            _ => self.run = None,
        }
        if s.at_ms - self.from_ms > self.deadline_ms {
            let (ready, total) = s.status.ranks_ready();
            let ready_note = if ready == total && total > 0 {
                format!(
                    ", while Kubernetes shows {ready}/{total} ranks Running and Ready (Ready is not fixed)"
                )
            } else {
                String::new()
            };
            if self.unwhole {
                return Outcome::Failed(format!(
                    "the job's signals are back {:.0} s after the remediation but the job is not whole: {}",
                    self.deadline_ms as f64 / 1000.0,
                    self.last
                ));
            }
            return Outcome::Failed(format!(
                "the job is not back {:.0} s after the remediation: {}; the longest run within {:.0}% was {} of {} steps{ready_note}",
                self.deadline_ms as f64 / 1000.0,
                self.last,
                self.tolerance * 100.0,
                self.best,
                self.steps
            ));
        }
        let progress = self
            .run
            .and_then(|(_, first)| step.map(|s| s.saturating_sub(first)))
            .unwrap_or(0);
        Outcome::Pending(format!(
            "{}; {progress} of {} steps in a row",
            self.last, self.steps
        ))
    }
}

/// Counts training steps lost: every time the job's step goes back (a restart from a checkpoint), the
/// steps between the highest reached and where it resumed were lost.
#[derive(Debug, Default)]
pub struct StepsLost {
    high: Option<u64>,
    lost: u64,
    counter_first: Option<u64>,
    counter_last: u64,
}

impl StepsLost {
    /// Adds a snapshot.
    pub fn push(&mut self, s: &Snapshot) {
        let Some(step) = job_step(s) else {
            // No rank reports (every rank restarting, a tick before the first scrape): the job's counter
            // reads 0 here, which is not its value. Taken as the first, it would count every step the job
            // lost before the drill.
            return;
        };
        match self.high {
            // Ranks of a synchronous job are at most a step apart; one step back is a rank not scraped.
            Some(h) if step + 1 < h => {
                self.lost += h - step;
                self.high = Some(step);
            }
            Some(h) if step > h => self.high = Some(step),
            None => self.high = Some(step),
            _ => {}
        }
        let c = s.training.steps_lost;
        self.counter_first.get_or_insert(c);
        self.counter_last = c;
    }

    /// Steps lost: from the step going back, or from the job's own counter, whichever saw more.
    pub fn lost(&self) -> u64 {
        let counted = self
            .counter_first
            .map_or(0, |f| self.counter_last.saturating_sub(f));
        self.lost.max(counted)
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(*x), hi.max(*x))
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;

    use lab_model::status::{PodStatus, Role};

    pub use lab_model::testing::{T0, alert, snap};

    pub fn base() -> PreFault {
        PreFault {
            samples_per_s: 400.0,
            step_seconds: 0.3,
            window_s: 20.0,
            learned: None,
            commits_per_s: None,
        }
    }

    #[test]
    fn a_steady_window_gives_the_baseline() {
        let mut w = SteadyWindow::new(10_000);
        let mut out = Outcome::Pending(String::new());
        for t in 0..=10 {
            let v = if t % 2 == 0 { 390.0 } else { 410.0 };
            out = w.push(&snap(t, Some(v), Some(0.3), t * 3));
            if t < 9 {
                assert!(matches!(out, Outcome::Pending(_)), "{t}: {out:?}");
            }
        }
        let Outcome::Done(b) = out else { panic!("{out:?}") };
        assert!((b.samples_per_s - 400.0).abs() < 2.0, "{b:?}");
        assert!((b.step_seconds - 0.3).abs() < 1e-9, "{b:?}");
    }

    #[test]
    fn a_firing_alert_or_a_rank_not_ready_restarts_the_window() {
        let mut w = SteadyWindow::new(5_000);
        for t in 0..5 {
            w.push(&snap(t, Some(400.0), Some(0.3), t));
        }
        let mut s = snap(5, Some(400.0), Some(0.3), 5);
        alert(&mut s, GoldenSignal::Saturation, "LabRanksWaitingAtCollective");
        assert!(matches!(w.push(&s), Outcome::Pending(m) if m.contains("LabRanksWaitingAtCollective")));
        let mut s = snap(6, Some(400.0), Some(0.3), 6);
        s.status.pods[2].ready = false;
        assert!(matches!(w.push(&s), Outcome::Pending(m) if m.contains("3/4")));
        // The window starts over: five more good seconds are needed.
        for t in 7..11 {
            assert!(
                matches!(w.push(&snap(t, Some(400.0), Some(0.3), t)), Outcome::Pending(_)),
                "{t}"
            );
        }
        assert!(matches!(
            w.push(&snap(12, Some(400.0), Some(0.3), 12)),
            Outcome::Done(_)
        ));
    }

    #[test]
    fn a_throughput_alert_against_a_stale_baseline_does_not_block_the_drill() {
        // The rules compared with a baseline learned when the machine was quieter; the drill measures its
        // own and rebases them on it.
        let mut w = SteadyWindow::new(3_000);
        let mut last = Outcome::Pending(String::new());
        for t in 0..5 {
            let mut s = snap(t, Some(400.0), Some(0.3), t);
            alert(&mut s, GoldenSignal::Throughput, "LabTrainingThroughputLow");
            last = w.push(&s);
        }
        assert!(matches!(last, Outcome::Done(_)), "{last:?}");
    }

    #[test]
    fn steady_again_tolerates_a_busier_machine_but_not_a_stalled_job() {
        let mut a = SteadyAgain::new(base(), 5_000, T0, 20_000);
        let mut last = Outcome::Pending(String::new());
        for t in 0..8 {
            // 70% of the pre-fault rate, steady: the machine is busier, the job is fine.
            last = a.push(&snap(t, Some(280.0), Some(0.4), t * 2));
        }
        assert!(
            matches!(last, Outcome::Done(w) if (w.samples_per_s - 280.0).abs() < 1e-9),
            "{last:?}"
        );

        let mut a = SteadyAgain::new(base(), 5_000, T0, 10_000);
        for t in 0..=10 {
            last = a.push(&snap(t, Some(60.0), Some(2.0), t));
        }
        assert!(
            matches!(&last, Outcome::Pending(m) if m.contains("15% of the pre-fault")),
            "{last:?}"
        );
        let Outcome::Failed(why) = a.push(&snap(11, Some(60.0), Some(2.0), 11)) else {
            panic!()
        };
        assert!(
            why.starts_with("not steady 10 s after the cleanup: steady, but at 15%"),
            "{why}"
        );
    }

    #[test]
    fn a_named_alert_is_met_only_by_its_rule_on_its_target() {
        use lab_drill_file::spec::ExpectedAlert;
        let mut spec = expect(vec![GoldenSignal::Saturation], None, Some(4));
        spec.alerts = vec![ExpectedAlert {
            rule: "LabRankHung".into(),
            target: "rank-1".into(),
        }];
        let mut tr = ExpectTracker::new(spec, base(), T0);
        let on = |t: u64, target: &str| {
            let mut s = snap(t, Some(0.0), None, 100);
            alert(&mut s, GoldenSignal::Saturation, "LabRankHung");
            s.alerts[0].target = target.into();
            s
        };
        // The saturation signal is met, but by the wrong rank: still waiting, and the wait says for what.
        let Outcome::Pending(why) = tr.push(&on(1, "rank-2")) else {
            panic!()
        };
        assert!(why.contains("LabRankHung on rank-1"), "{why}");
        let Outcome::Done(d) = tr.push(&on(2, "rank-1")) else {
            panic!()
        };
        assert!(
            d.seen
                .iter()
                .any(|s| s.detail.starts_with("LabRankHung on rank-1")),
            "{:?}",
            d.seen
        );
        // Past the deadline without it: the failure names what was missing and what fired instead.
        let mut spec = expect(vec![], None, None);
        spec.alerts = vec![ExpectedAlert {
            rule: "LabRankComputeSlow".into(),
            target: "rank-2".into(),
        }];
        let mut tr = ExpectTracker::new(spec, base(), T0);
        let Outcome::Failed(why) = tr.push(&on(40, "rank-2")) else {
            panic!()
        };
        assert!(
            why.contains("missing LabRankComputeSlow on rank-2") && why.contains("LabRankHung on rank-2"),
            "{why}"
        );
    }

    /// `secs + 1` snapshots of a job at `samples` per second and `step_s` per step, `per_s` steps a second.
    fn training(secs: u64, samples: f64, step_s: f64, per_s: u64) -> Vec<Snapshot> {
        (0..=secs)
            .map(|t| snap(t, Some(samples), Some(step_s), 100 + t * per_s))
            .collect()
    }

    /// The lab's steady state after the cleanup at `samples` per second.
    fn lab_at(samples: f64) -> PreFault {
        PreFault {
            samples_per_s: samples,
            ..base()
        }
    }

    #[test]
    fn a_machine_that_got_slower_is_judged_against_the_lab_after_the_cleanup() {
        let spec = verify(15.0, 10, 30);
        // The fix worked, but the machine lost a third of its capacity: the job runs at 66% of the
        // pre-fault rate, and so does the lab after the cleanup.
        let snaps = training(20, 265.0, 0.45, 3);
        let after = PreFault {
            samples_per_s: 270.0,
            step_seconds: 0.45,
            ..base()
        };
        let Some(Outcome::Done(r)) = rejudge(&spec, base(), after, T0, &snaps) else {
            panic!()
        };
        assert_eq!(r.back_at_ms, T0);
        // A fix that left the fault in place stays far below the lab's normal after the cleanup.
        let stuck = training(32, 190.0, 0.6, 2);
        assert!(matches!(
            rejudge(&spec, base(), after, T0, &stuck),
            Some(Outcome::Failed(_))
        ));
        // When the lab after the cleanup is where it was before, the pre-fault baseline stands.
        let same = lab_at(380.0);
        assert_eq!(rejudge(&spec, base(), same, T0, &stuck), None);
    }

    #[test]
    fn the_second_look_does_not_pass_a_job_whose_rank_still_crashes() {
        // rank-crash's trap on kind: the lab after the cleanup was itself at 62 % of the pre-fault
        // baseline, the job under the trap at 61 %, crashing every 150 steps (a run of 100 fits between
        // two crashes). A slower machine makes no rank crash: with LabRankCrashLooping firing the job
        // is not back, even at the lab's normal of the moment.
        let spec = verify(20.0, 100, 90);
        let after = lab_at(248.0);
        let crashing: Vec<Snapshot> = (0..=100)
            .map(|t| {
                let mut s = snap(t, Some(244.0), Some(0.3), 100 + t * 3);
                alert(&mut s, GoldenSignal::Errors, "LabRankCrashLooping");
                s
            })
            .collect();
        let Some(Outcome::Failed(why)) = rejudge(&spec, base(), after, T0, &crashing) else {
            panic!()
        };
        assert!(why.contains("LabRankCrashLooping fires on"), "{why}");
        // The same pace with the signals clear: the machine got slower, the job is back at its normal.
        let clean = training(100, 244.0, 0.3, 3);
        assert!(matches!(
            rejudge(&spec, base(), after, T0, &clean),
            Some(Outcome::Done(_))
        ));
    }

    #[test]
    fn a_baseline_caught_at_a_fast_moment_is_judged_again_from_half_the_tolerance() {
        // A 15 % tolerance: the pre-fault window (400) was fast, the lab's normal after the cleanup is 88 %
        // of it, within the tolerance but below half of it; the fixed job runs at 84 % of the pre-fault
        // baseline, 96 % of that normal.
        let spec = verify(15.0, 10, 30);
        let after = lab_at(352.0);
        let back = training(20, 338.0, 0.3, 3);
        assert!(matches!(
            rejudge(&spec, base(), after, T0, &back),
            Some(Outcome::Done(_))
        ));
        // A fault left in place (the job at 60 %) fails against that normal too.
        let stuck = training(32, 240.0, 0.5, 2);
        assert!(matches!(
            rejudge(&spec, base(), after, T0, &stuck),
            Some(Outcome::Failed(_))
        ));
        // At 93 % of it, above half the tolerance (92.5 %), the pre-fault baseline stands.
        let close = lab_at(372.0);
        assert_eq!(rejudge(&spec, base(), close, T0, &stuck), None);
    }

    #[test]
    fn a_wandering_rate_is_not_steady() {
        let mut w = SteadyWindow::new(5_000);
        let mut last = Outcome::Pending(String::new());
        for t in 0..8 {
            let v = if t % 2 == 0 { 200.0 } else { 400.0 };
            last = w.push(&snap(t, Some(v), Some(0.3), t));
        }
        assert!(matches!(last, Outcome::Pending(m) if m.contains("wanders")));
    }

    fn expect(signals: Vec<GoldenSignal>, below: Option<f64>, ready: Option<u32>) -> Expect {
        Expect {
            within: Duration::from_secs(30),
            signals,
            alerts: Vec::new(),
            throughput_below_pct: below,
            ranks_ready: ready,
            hold: Duration::ZERO,
        }
    }

    #[test]
    fn detection_needs_every_signal_and_the_drop() {
        let mut e = ExpectTracker::new(
            expect(vec![GoldenSignal::Latency], Some(50.0), Some(4)),
            base(),
            T0,
        );
        assert!(matches!(
            e.push(&snap(1, Some(380.0), Some(0.3), 1)),
            Outcome::Pending(_)
        ));
        let mut s = snap(5, Some(300.0), Some(0.5), 2);
        alert(&mut s, GoldenSignal::Latency, "LabStorageReadLatencyHigh");
        assert!(matches!(e.push(&s), Outcome::Pending(m) if m.contains("throughput under 50%")));
        let Outcome::Done(d) = e.push(&snap(8, Some(36.0), Some(3.0), 3)) else {
            panic!()
        };
        assert_eq!(d.at_ms, T0 + 8_000);
        assert_eq!(d.seen.len(), 2);
        assert_eq!(d.seen[0].what, "latency");
        assert!(d.seen[1].detail.contains("9%"), "{:?}", d.seen[1]);
        assert_eq!(d.ranks_ready_min, Some((4, 4)));
    }

    #[test]
    fn a_hold_keeps_watching_after_detection() {
        let mut spec = expect(vec![], Some(50.0), None);
        spec.hold = Duration::from_secs(5);
        let mut e = ExpectTracker::new(spec, base(), T0);
        assert!(matches!(
            e.push(&snap(2, Some(40.0), Some(3.0), 1)),
            Outcome::Pending(_)
        ));
        assert!(matches!(
            e.push(&snap(4, Some(20.0), Some(3.0), 1)),
            Outcome::Pending(_)
        ));
        let Outcome::Done(d) = e.push(&snap(7, Some(30.0), Some(3.0), 2)) else {
            panic!()
        };
        assert_eq!(
            d.at_ms,
            T0 + 2_000,
            "detection is when it was met, not when the hold ended"
        );
        assert_eq!(e.lowest_pct(), Some(5.0));
    }

    #[test]
    fn no_detection_in_time_fails_with_what_was_missing() {
        let mut e = ExpectTracker::new(
            expect(vec![GoldenSignal::Saturation], Some(50.0), None),
            base(),
            T0,
        );
        for t in 1..=30 {
            assert!(matches!(
                e.push(&snap(t, Some(300.0), Some(0.4), t)),
                Outcome::Pending(_)
            ));
        }
        let Outcome::Failed(why) = e.push(&snap(31, Some(300.0), Some(0.4), 31)) else {
            panic!()
        };
        assert!(
            why.contains("missing saturation alert, throughput under 50%"),
            "{why}"
        );
        assert!(why.contains("lowest throughput 75%"), "{why}");
    }

    #[test]
    fn ready_dropping_fails_the_expectation_but_not_before_detection() {
        let mut e = ExpectTracker::new(expect(vec![GoldenSignal::Throughput], None, Some(4)), base(), T0);
        let mut s = snap(2, Some(100.0), None, 1);
        s.status.pods[1].ready = false;
        assert!(
            matches!(e.push(&s), Outcome::Pending(_)),
            "a fault may restart ranks while it goes in"
        );
        let mut s = snap(6, Some(100.0), None, 1);
        alert(&mut s, GoldenSignal::Throughput, "LabTrainingThroughputLow");
        s.status.pods[1].ready = false;
        s.status.pods[1].reason = Some("CrashLoopBackOff".into());
        let Outcome::Failed(why) = e.push(&s) else {
            panic!()
        };
        assert!(
            why.contains("3/4 ranks") && why.contains("rank-1 Running, not Ready: CrashLoopBackOff"),
            "{why}"
        );
    }

    #[test]
    fn ready_is_held_to_account_once_the_fault_is_in_place() {
        // The job stops as the injection starts (every rank restarted for a new world size), so the
        // signals fire at +4 s while the ranks still come back one by one; the proof passes at +10 s.
        let mut spec = expect(vec![GoldenSignal::Throughput], None, Some(4));
        spec.hold = Duration::from_secs(2);
        let mut e = ExpectTracker::new(spec, base(), T0).in_place_from(T0 + 10_000);
        let mut s = snap(4, Some(0.0), None, 1);
        alert(&mut s, GoldenSignal::Throughput, "LabTrainingThroughputLow");
        s.status.pods.truncate(3);
        s.status.pods[2].ready = false;
        s.status.pods[2].reason = Some("ContainerCreating".into());
        assert!(
            matches!(e.push(&s), Outcome::Pending(m) if m.contains("still going in")),
            "the way in is not judged"
        );
        let mut s = snap(11, Some(0.0), None, 1);
        alert(&mut s, GoldenSignal::Throughput, "LabTrainingThroughputLow");
        assert!(
            matches!(e.push(&s), Outcome::Pending(_)),
            "the hold counts from the fault in place, not from the detection"
        );
        let mut s = snap(12, Some(0.0), None, 1);
        alert(&mut s, GoldenSignal::Throughput, "LabTrainingThroughputLow");
        let Outcome::Done(d) = e.push(&s) else { panic!() };
        assert_eq!(d.at_ms, T0 + 4_000, "detected when the signals fired");
        assert_eq!(d.ranks_ready_min, Some((4, 4)));
        // Once in place, a rank that drops is Kubernetes' view of the fault, and fails the expectation.
        let mut spec = expect(vec![GoldenSignal::Throughput], None, Some(4));
        spec.hold = Duration::from_secs(5);
        let mut e = ExpectTracker::new(spec, base(), T0).in_place_from(T0 + 10_000);
        let mut s = snap(11, Some(0.0), None, 1);
        alert(&mut s, GoldenSignal::Throughput, "LabTrainingThroughputLow");
        s.status.pods[3].ready = false;
        assert!(matches!(e.push(&s), Outcome::Failed(why) if why.contains("3/4 ranks")));
    }

    fn verify(pct: f64, steps: u64, deadline: u64) -> Verify {
        Verify {
            job: lab_drill_file::spec::VerifyJob::Training,
            within_pct: pct,
            consecutive_steps: steps,
            hold: lab_drill_file::spec::defaults::VERIFY_HOLD,
            deadline: Duration::from_secs(deadline),
        }
    }

    #[test]
    fn recovery_needs_consecutive_good_steps() {
        let mut r = RecoveryTracker::new(&verify(20.0, 10, 60), base(), T0);
        assert!(matches!(
            r.push(&snap(1, Some(100.0), Some(1.0), 100)),
            Outcome::Pending(_)
        ));
        assert!(matches!(
            r.push(&snap(2, Some(350.0), Some(0.32), 103)),
            Outcome::Pending(_)
        ));
        assert!(matches!(
            r.push(&snap(3, Some(360.0), Some(0.31), 106)),
            Outcome::Pending(_)
        ));
        // One bad tick breaks the run.
        assert!(matches!(
            r.push(&snap(4, Some(200.0), Some(0.31), 109)),
            Outcome::Pending(_)
        ));
        assert!(matches!(
            r.push(&snap(5, Some(390.0), Some(0.3), 112)),
            Outcome::Pending(_)
        ));
        assert!(matches!(
            r.push(&snap(7, Some(395.0), Some(0.3), 118)),
            Outcome::Pending(_)
        ));
        let Outcome::Done(rec) = r.push(&snap(8, Some(420.0), Some(0.29), 122)) else {
            panic!()
        };
        assert_eq!(rec.back_at_ms, T0 + 5_000);
        assert_eq!(rec.steps, 10);
        assert!((rec.pct - 105.0).abs() < 1e-9);
    }

    #[test]
    fn a_restart_from_a_checkpoint_starts_the_run_over() {
        let mut r = RecoveryTracker::new(&verify(20.0, 5, 60), base(), T0);
        r.push(&snap(1, Some(400.0), Some(0.3), 100));
        r.push(&snap(2, Some(400.0), Some(0.3), 103));
        assert!(matches!(
            r.push(&snap(3, Some(400.0), Some(0.3), 90)),
            Outcome::Pending(_)
        ));
        assert!(matches!(
            r.push(&snap(4, Some(400.0), Some(0.3), 94)),
            Outcome::Pending(_)
        ));
        assert!(matches!(
            r.push(&snap(5, Some(400.0), Some(0.3), 95)),
            Outcome::Done(_)
        ));
    }

    #[test]
    fn a_stalled_job_fails_verification_with_its_figures() {
        let mut r = RecoveryTracker::new(&verify(20.0, 30, 10), base(), T0);
        for t in 0..=10 {
            assert!(
                matches!(r.push(&snap(t, Some(0.0), None, 500)), Outcome::Pending(_)),
                "{t}"
            );
        }
        let Outcome::Failed(why) = r.push(&snap(11, Some(0.0), None, 500)) else {
            panic!()
        };
        assert!(why.contains("not back 10 s after the remediation"), "{why}");
        assert!(
            why.contains("throughput 0% of the pre-fault baseline (0 of 400 samples/s), step time unknown"),
            "{why}"
        );
        assert!(why.contains("0 of 30 steps"), "{why}");
        assert!(
            why.ends_with("while Kubernetes shows 4/4 ranks Running and Ready (Ready is not fixed)"),
            "{why}"
        );
    }

    #[test]
    fn ready_alone_is_not_recovery() {
        // Every rank Ready, no alert firing, but the job trains at half its rate: not back.
        let mut r = RecoveryTracker::new(&verify(20.0, 5, 5), base(), T0);
        let mut last = Outcome::Pending(String::new());
        for t in 0..=6 {
            last = r.push(&snap(t, Some(200.0), Some(0.6), 100 + t * 2));
        }
        assert!(matches!(last, Outcome::Failed(_)), "{last:?}");
    }

    #[test]
    fn signals_back_with_a_rank_still_pending_is_not_recovery() {
        // The over-scaled fault "fixed" by setting the world size back to 4 alone: four ranks train at
        // their baseline, but a fifth is still asked for and Pending, and will break the job the moment
        // a GPU frees up. The verdict names that part.
        let unwhole = |t: u64, step: u64| {
            let mut s = snap(t, Some(400.0), Some(0.3), step);
            let mut p = PodStatus::new(lab_model::names::rank(4), Role::Rank, Some(4));
            p.reason = Some("Insufficient gpu".into());
            s.status.pods.push(p);
            s.status.ranks_desired = 5;
            s
        };
        let mut r = RecoveryTracker::new(&verify(20.0, 5, 5), base(), T0);
        let mut last = Outcome::Pending(String::new());
        for t in 0..=6 {
            last = r.push(&unwhole(t, 100 + t * 10));
        }
        let Outcome::Failed(why) = last else {
            panic!("{last:?}")
        };
        assert!(why.contains("signals are back"), "{why}");
        assert!(
            why.contains(
                "ranks asked for 5 but the world size configured is 4; rank-4 is Pending (Insufficient gpu)"
            ),
            "{why}"
        );

        // The same signals with the job whole pass.
        let mut r = RecoveryTracker::new(&verify(20.0, 5, 5), base(), T0);
        let mut last = Outcome::Pending(String::new());
        for t in 0..=6 {
            last = r.push(&snap(t, Some(400.0), Some(0.3), 100 + t * 10));
        }
        assert!(matches!(last, Outcome::Done(_)), "{last:?}");
    }

    #[test]
    fn step_time_is_the_mean_from_the_step_rate_not_the_bucketed_median() {
        // The histogram median reads 88 ms (its bucket's interpolation), while the job takes 25 steps a
        // second: 40 ms a step, at its 40 ms baseline.
        let mut s = snap(1, Some(400.0), Some(0.088), 100);
        s.training.steps_per_s = Some(25.0);
        assert!((step_time(&s).unwrap() - 0.04).abs() < 1e-9);
        let base = PreFault {
            step_seconds: 0.04,
            ..base()
        };
        let mut r = RecoveryTracker::new(&verify(20.0, 1, 60), base, T0);
        r.push(&s);
        let mut s2 = snap(2, Some(400.0), Some(0.088), 130);
        s2.training.steps_per_s = Some(25.0);
        assert!(matches!(r.push(&s2), Outcome::Done(_)));
        // A stalled job has no step time at all.
        s.training.steps_per_s = Some(0.0);
        assert_eq!(step_time(&s), None);
    }

    #[test]
    fn steps_lost_from_going_back_to_a_checkpoint() {
        let mut l = StepsLost::default();
        for (t, step) in [(0, 100), (1, 103), (2, 102), (3, 106), (4, 80), (5, 84), (6, 0)] {
            let mut s = snap(t, Some(1.0), Some(0.3), step);
            if step == 0 {
                for r in &mut s.ranks {
                    r.step = None;
                }
            }
            l.push(&s);
        }
        assert_eq!(
            l.lost(),
            26,
            "106 → 80; a one-step dip and no report at all are not losses"
        );
    }

    #[test]
    fn steps_lost_counts_from_the_jobs_counter_before_the_fault_not_from_a_tick_with_no_rank() {
        // The job had lost 900 steps before the drill; every rank restarts (no rank reports, and the
        // snapshot's counter reads 0), then the job resumes from its checkpoint with 73 more lost.
        let mut before = snap(0, Some(1.0), Some(0.3), 5000);
        before.training.steps_lost = 900;
        let mut gone = snap(1, Some(0.0), None, 0);
        for r in &mut gone.ranks {
            r.step = None;
        }
        gone.training.steps_lost = 0;
        let mut back = snap(2, Some(1.0), Some(0.3), 4960);
        back.training.steps_lost = 973;
        // Counted from the snapshot before the fault (as a drill does from its injection): 73.
        let mut l = StepsLost::default();
        for s in [&before, &gone, &back] {
            l.push(s);
        }
        assert_eq!(l.lost(), 73);
        // A rankless tick first is not the counter's first value: 0 there would count the 900 too.
        let mut l = StepsLost::default();
        for s in [&gone, &back] {
            l.push(s);
        }
        assert_eq!(l.lost(), 0, "the job's whole-life total is not this drill's loss");
    }
}
