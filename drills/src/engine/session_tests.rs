//! The drill session driven end to end against the fake runtime, with a job model for its snapshots: the
//! fault engine acts on the fake lab, and the snapshots show what the fake lab's state would do to the job.
//! Tokio's clock is paused, so a drill of minutes runs in moments; the snapshots are stamped a second
//! apart and never behind the wall clock the session times its steps with. They run ahead of it by one
//! second per snapshot taken, so the test drill's deadlines leave room for that (the cleanup's most).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lab_faults::{Fault, Ledger};
use lab_model::Snapshot;
use lab_model::snapshot::GoldenSignal;
use lab_runtime::Runtime;
use lab_runtime::state::now_ms;
use lab_runtime::testing::FakeRuntime;

use super::{Guard, Lab, Options, Session, Silent, SnapshotSource, run_drill};
use crate::judge::PreFault;
use crate::judge::tests::{alert, snap};
use crate::report::{DrillReport, StepName, Verdict};
use crate::spec::Drill;

/// Healthy: 1000 samples/s at 32 ms a step. Slowed by a storage delay: 400 samples/s at 80 ms, with the
/// latency and throughput rules firing. `wander` makes the healthy rate swing by half.
#[derive(Debug)]
struct Job {
    rt: FakeRuntime,
    last_ms: u64,
    step: u64,
    ticks: u64,
    wander: bool,
    rebased: Vec<PreFault>,
}

impl Job {
    fn new(rt: &FakeRuntime) -> Self {
        Job {
            rt: rt.clone(),
            last_ms: 0,
            step: 0,
            ticks: 0,
            wander: false,
            rebased: Vec::new(),
        }
    }
}

impl SnapshotSource for Job {
    async fn next(&mut self) -> Snapshot {
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.ticks += 1;
        let at = now_ms().max(self.last_ms + 1000);
        self.last_ms = at;
        let slow = !self.rt.state().delays.is_empty();
        let (samples, step_s) = match (slow, self.wander) {
            (true, _) => (400.0, 0.080),
            (false, true) if self.ticks.is_multiple_of(2) => (500.0, 0.064),
            (false, _) => (1000.0, 0.032),
        };
        self.step += (1.0 / step_s) as u64;
        let mut s = snap(0, Some(samples), Some(step_s), self.step);
        s.at_ms = at;
        if let Ok(st) = self.rt.status().await {
            s.status = st;
        }
        if slow {
            alert(&mut s, GoldenSignal::Latency, "LabStorageReadLatencyHigh");
            alert(&mut s, GoldenSignal::Throughput, "LabThroughputLow");
        }
        s
    }

    fn rebase(&mut self, pre: &PreFault) {
        self.rebased.push(*pre);
    }
}

/// A lab no record names (the session reads the lab's seed from its record when there is one).
const LAB: &str = "drill-session-test-lab";

fn lab(rt: &FakeRuntime, dir: &Path) -> Lab {
    Lab {
        name: LAB.into(),
        runtime: Arc::new(rt.clone()),
        ledger: Ledger::in_dir(dir),
    }
}

fn options(dir: &Path) -> Options {
    Options {
        bundle_dir: dir.join("bundles"),
        ..Options::default()
    }
}

const SLOW_STORAGE: &str = "\
name: slow
seed: 42
warmup: 0s
baseline: 5s
cleanup_deadline: 300s
steps:
  - inject:
      kind: slow-storage
      server: 1
      delay: 300ms
  - expect:
      within: 30s
      signals: [latency, throughput]
      throughput_below_pct: 50
      ranks_ready: 4
      hold: 2s
  - remediate:
  - verify:
      within_pct: 20
      consecutive_steps: 100
      deadline: 30s
";

fn drill(text: &str) -> Drill {
    crate::spec::parse(text).unwrap()
}

/// The fault of the drill's first step.
fn fault(d: &Drill) -> Fault {
    match &d.steps[0] {
        crate::spec::Step::Inject(f) => f.clone(),
        other => panic!("the first step injects nothing: {other:?}"),
    }
}

fn steps(r: &DrillReport) -> Vec<(StepName, bool)> {
    r.steps.iter().map(|s| (s.step, s.ok)).collect()
}

async fn run(rt: &FakeRuntime, dir: &Path, job: &mut Job, text: &str) -> DrillReport {
    let lab = lab(rt, dir);
    let guard = Guard::new(lab.clone());
    let opts = options(dir);
    run_drill(&lab, job, &Silent, &opts, &guard, &drill(text), "test").await
}

#[tokio::test(start_paused = true)]
async fn a_drill_whose_fix_holds_passes_and_leaves_nothing_injected() {
    let rt = FakeRuntime::new();
    let dir = tempfile::tempdir().unwrap();
    let mut job = Job::new(&rt);
    let r = run(&rt, dir.path(), &mut job, SLOW_STORAGE).await;

    assert_eq!(r.verdict, Verdict::Pass, "{}: {:?}", r.reason, r.evidence);
    use StepName::*;
    assert_eq!(
        steps(&r),
        [
            (Check, true),
            (Baseline, true),
            (Inject, true),
            (Expect, true),
            (Remediate, true),
            (Verify, true),
            (Cleanup, true)
        ]
    );
    let base = r.baseline.unwrap();
    assert!((base.samples_per_s - 1000.0).abs() < 1e-9, "{base:?}");
    assert_eq!(
        job.rebased,
        [base],
        "the rules judge against the drill's own baseline"
    );
    assert_eq!(r.figures.lowest_throughput_pct, Some(40.0));
    assert!(
        r.figures.time_to_detect_s.is_some_and(|t| t > 0.0),
        "{:?}",
        r.figures
    );
    assert!(r.figures.time_to_baseline_s >= r.figures.time_to_mitigate_s);
    assert_eq!(r.remediations.len(), 1);
    assert!(
        r.remediations[0].changes.iter().any(|c| c.contains("storage-1")),
        "{:?}",
        r.remediations[0]
    );
    assert!(
        r.remediations[0]
            .bundle
            .as_deref()
            .is_some_and(|b| Path::new(b).exists())
    );
    assert!(r.cleanup.ok && r.cleanup.steady, "{:?}", r.cleanup);
    assert!(rt.state().delays.is_empty());
    assert_eq!(Ledger::in_dir(dir.path()).read().unwrap().active().count(), 0);
}

#[tokio::test(start_paused = true)]
async fn snapshots_taken_while_an_injection_runs_are_kept_for_the_next_step() {
    let rt = FakeRuntime::new();
    // Every probe of a storage server takes 10 s: the injection probes the two siblings (20 s), sets the
    // delay, then proves it (30 s more).
    rt.slow("probe_storage", Duration::from_secs(10));
    let dir = tempfile::tempdir().unwrap();
    let mut job = Job::new(&rt);
    // The snapshots kept from the injection are stamped far ahead of the wall clock the remediation
    // ends by (see the top of this file): the verification has room for them.
    let text = SLOW_STORAGE.replace("deadline: 30s", "deadline: 300s");
    let r = run(&rt, dir.path(), &mut job, &text).await;
    assert_eq!(r.verdict, Verdict::Pass, "{}: {:?}", r.reason, r.evidence);

    // After the baseline: the healthy snapshots taken while the siblings were probed, then the fault's.
    let after_baseline: Vec<_> = r.timeline.iter().filter(|p| p.pct.is_some()).collect();
    let healthy = after_baseline.iter().take_while(|p| p.firing.is_empty()).count();
    assert!(
        (19..=21).contains(&healthy),
        "{healthy} healthy snapshots during the injection"
    );
    let slowed = after_baseline[healthy..]
        .iter()
        .take_while(|p| !p.firing.is_empty())
        .count();
    assert!(
        slowed >= 25,
        "only {slowed} snapshots of the fault: those of the proof were not kept"
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_that_is_not_back_fails_verify_and_the_cleanup_still_clears_the_fault() {
    let rt = FakeRuntime::new();
    let dir = tempfile::tempdir().unwrap();
    let lab = lab(&rt, dir.path());
    let opts = options(dir.path());
    let guard = Guard::new(lab.clone());
    let mut job = Job::new(&rt);
    let d = drill(SLOW_STORAGE);
    let crate::spec::Step::Expect(expect) = &d.steps[1] else {
        panic!("{:?}", d.steps[1]);
    };
    let crate::spec::Step::Verify(verify) = &d.steps[3] else {
        panic!("{:?}", d.steps[3]);
    };

    let mut s = Session::new(lab, &mut job, &Silent, &opts, guard);
    assert!(s.check_lab(&d).await.ok);
    assert!(s.settle(d.warmup, d.baseline).await.ok);
    assert!(s.inject(fault(&d)).await.ok);
    assert!(s.expect(expect).await.ok);
    // No remediation: every pod stays Ready, and the job's own signals say it is not back.
    let v = s.verify(verify).await;
    assert!(!v.ok);
    assert!(
        v.summary
            .contains("the job is not back 30 s after the remediation"),
        "{}",
        v.summary
    );
    assert!(v.summary.contains("Ready is not fixed"), "{}", v.summary);
    let c = s.cleanup(d.cleanup_deadline).await;
    assert!(c.ok, "{}", c.summary);
    assert!(c.summary.starts_with("cleared slow-storage-1"), "{}", c.summary);
    let r = s.into_report(&d, "test");
    assert_eq!(r.verdict, Verdict::Fail);
    assert!(r.reason.starts_with("verify: "), "{}", r.reason);
    assert!(rt.state().delays.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_lab_that_already_carries_a_fault_is_refused_and_its_fault_left_alone() {
    let rt = FakeRuntime::new();
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::in_dir(dir.path());
    let theirs = Fault::ThrottledRank {
        rank: 2,
        cpu: lab_model::Millicores(150),
    };
    lab_faults::inject(&rt, &ledger, theirs).await.unwrap();
    let mut job = Job::new(&rt);
    let r = run(&rt, dir.path(), &mut job, SLOW_STORAGE).await;

    assert_eq!(r.verdict, Verdict::Error);
    assert_eq!(steps(&r), [(StepName::Check, false)]);
    assert!(r.reason.contains("already has throttled-rank-1"), "{}", r.reason);
    assert_eq!(job.ticks, 0, "nothing was watched");
    assert!(rt.state().delays.is_empty(), "nothing was injected");
    assert_eq!(ledger.read().unwrap().active().count(), 1, "and nothing cleared");
}

#[tokio::test(start_paused = true)]
async fn a_fault_that_cannot_be_injected_ends_the_drill_in_an_error_with_the_lab_as_it_was() {
    let rt = FakeRuntime::new();
    rt.fail("set_storage_delay");
    let dir = tempfile::tempdir().unwrap();
    let mut job = Job::new(&rt);
    let r = run(&rt, dir.path(), &mut job, SLOW_STORAGE).await;

    assert_eq!(r.verdict, Verdict::Error);
    use StepName::*;
    assert_eq!(
        steps(&r),
        [(Check, true), (Baseline, true), (Inject, false), (Cleanup, true)]
    );
    assert!(r.reason.contains("could not inject"), "{}", r.reason);
    assert!(r.cleanup.steady, "{:?}", r.cleanup);
    assert!(rt.state().delays.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_job_that_never_settles_fails_the_baseline_and_injects_nothing() {
    let rt = FakeRuntime::new();
    let dir = tempfile::tempdir().unwrap();
    let mut job = Job::new(&rt);
    job.wander = true;
    let r = run(&rt, dir.path(), &mut job, SLOW_STORAGE).await;

    assert_eq!(r.verdict, Verdict::Error);
    use StepName::*;
    assert_eq!(steps(&r), [(Check, true), (Baseline, false), (Cleanup, true)]);
    assert!(
        r.reason
            .contains("throughput still wanders between 500 and 1000 samples/s"),
        "{}",
        r.reason
    );
    assert!(
        job.ticks > 180,
        "it waited out its deadline ({} snapshots)",
        job.ticks
    );
    assert!(!rt.calls().iter().any(|c| c.starts_with("set_storage_delay")));
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_drill_is_cleared_by_its_guard_and_only_what_it_injected() {
    let rt = FakeRuntime::new();
    let dir = tempfile::tempdir().unwrap();
    let lab = lab(&rt, dir.path());
    let theirs = Fault::ThrottledRank {
        rank: 2,
        cpu: lab_model::Millicores(150),
    };
    lab_faults::inject(&rt, &lab.ledger, theirs).await.unwrap();
    // The guard tells the drill's faults from older ones by the millisecond they were injected in.
    std::thread::sleep(Duration::from_millis(5));
    let opts = options(dir.path());
    let guard = Guard::new(lab.clone());
    let mut job = Job::new(&rt);
    let d = drill(SLOW_STORAGE);
    let mut s = Session::new(lab.clone(), &mut job, &Silent, &opts, guard.clone());
    assert!(s.settle(d.warmup, d.baseline).await.ok);
    assert!(s.inject(fault(&d)).await.ok);
    assert!(rt.state().delays.contains_key(&1));

    let done = guard.abort().await;
    assert_eq!(done, ["cleared slow-storage-2"]);
    assert!(rt.state().delays.is_empty());
    assert_eq!(
        rt.cpu_limits(2).await.unwrap().live,
        Some(lab_model::Millicores(150))
    );
    assert!(
        guard.abort().await.is_empty(),
        "a second interrupt has nothing left to do"
    );
}
