//! The drill session driven end to end against the fake runtime, with a job model for its snapshots: the
//! fault engine acts on the fake lab, and the snapshots show what the fake lab's state would do to the job.
//! Tokio's clock is paused, so a drill of minutes runs in moments; the snapshots are stamped a second
//! apart and never behind the wall clock the session times its steps with. They run ahead of it by one
//! second per snapshot taken, so the test drill's deadlines leave room for that (the cleanup's most).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lab_faults::{Fault, Ledger};
use lab_runtime::state::now_ms;
use lab_runtime::testing::FakeRuntime;

use super::test_job::Job;
use super::{Guard, Lab, Options, Session, Silent, run_drill};
use lab_drill_file::spec::Drill;
use lab_reports::report::{DrillReport, StepName, Verdict};
use lab_runtime::Ranks;

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
    lab_drill_file::spec::parse(text).unwrap()
}

/// The fault of the drill's first step.
fn fault(d: &Drill) -> Fault {
    match &d.steps[0] {
        lab_drill_file::spec::Step::Inject(f) => f.clone(),
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

/// The bundle a remediation reads names the change that caused the incident even when the signals caught
/// it while the injection still proved itself (storage-2 at 450 ms, a proof of 30 s): the expect step is
/// met from snapshots taken meanwhile, and the bundle is cut from the newest of them.
#[tokio::test(start_paused = true)]
async fn the_bundle_names_the_change_when_the_signals_catch_it_during_the_proof() {
    let rt = FakeRuntime::new();
    rt.slow("probe_storage", Duration::from_secs(10));
    let dir = tempfile::tempdir().unwrap();
    let mut job = Job::new(&rt);
    job.ledger = Some(Ledger::in_dir(dir.path()));
    let text = SLOW_STORAGE
        .replace("server: 1", "server: 2")
        .replace("delay: 300ms", "delay: 450ms")
        .replace("deadline: 30s", "deadline: 300s");
    let r = run(&rt, dir.path(), &mut job, &text).await;
    assert_eq!(r.verdict, Verdict::Pass, "{}: {:?}", r.reason, r.evidence);
    let path = r.remediations[0].bundle.as_deref().unwrap();
    let b: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let changes: Vec<String> = b["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{} {} {} → {}", c["where"], c["what"], c["before"], c["after"]))
        .collect();
    assert_eq!(
        changes,
        [r#""storage-2" "added delay" "0 ms" → "450 ms""#],
        "{b:#}"
    );
}

/// A lab that is not steady when a drill begins (after the drill before it, rank-3 is not running yet) is
/// waited for in the check step, which says so; the inject comes only once the lab is steady again.
#[tokio::test(start_paused = true)]
async fn a_lab_still_settling_from_the_drill_before_is_waited_for_in_the_check_step() {
    let rt = FakeRuntime::new();
    rt.update(|l| l.gpus = 3);
    let back = tokio::spawn({
        let rt = rt.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(8)).await;
            rt.update(|l| l.gpus = 4);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let mut job = Job::new(&rt);
    let r = run(&rt, dir.path(), &mut job, SLOW_STORAGE).await;
    back.await.unwrap();
    assert_eq!(r.verdict, Verdict::Pass, "{}: {:?}", r.reason, r.evidence);
    let check = &r.steps[0];
    assert_eq!(check.step, StepName::Check);
    assert!(
        check
            .summary
            .contains("the lab was not steady when the drill began (rank-3 is Pending (Insufficient gpu))")
            && check.summary.contains("steady again after"),
        "{}",
        check.summary
    );
}

/// A lab that stays unsteady fails the drill in its check step, saying why, with nothing injected: not in
/// an inject that cannot read the rank it acts on.
#[tokio::test(start_paused = true)]
async fn a_lab_that_stays_unsteady_fails_the_check_step_and_injects_nothing() {
    let rt = FakeRuntime::new();
    rt.update(|l| l.gpus = 3);
    let dir = tempfile::tempdir().unwrap();
    let mut job = Job::new(&rt);
    let r = run(&rt, dir.path(), &mut job, SLOW_STORAGE).await;
    assert_eq!(r.verdict, Verdict::Error);
    assert_eq!(steps(&r), [(StepName::Check, false)]);
    assert!(
        r.reason
            .starts_with("check: the lab is not steady after what ran before this drill: rank-3 is Pending"),
        "{}",
        r.reason
    );
    assert!(rt.state().delays.is_empty(), "nothing was injected");
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
    let lab_drill_file::spec::Step::Expect(expect) = &d.steps[1] else {
        panic!("{:?}", d.steps[1]);
    };
    let lab_drill_file::spec::Step::Verify(verify) = &d.steps[3] else {
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
    let theirs = Fault::ThrottledRank(lab_model::fault::ThrottledRank {
        rank: 2,
        cpu: lab_model::Millicores(150),
    });
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
    let theirs = Fault::ThrottledRank(lab_model::fault::ThrottledRank {
        rank: 2,
        cpu: lab_model::Millicores(150),
    });
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

    // The remediation drained storage-1 when the drill was interrupted: the guard moves its volumes back.
    lab_faults::drain::drain(&rt, &lab.ledger, 1).await.unwrap();
    assert!(rt.state().volumes[&1].is_empty());

    let done = guard.abort().await;
    assert_eq!(
        done,
        [
            "cleared slow-storage-2 (slow-storage on storage-1: +300 ms)",
            "storage-1 undrained (2 volume(s) moved back)"
        ]
    );
    assert_eq!(rt.state().volumes[&1], vec![3, 4]);
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

/// The slow-storage drill with short windows, for tests on the real clock (an agent is a real process).
const AGENT_DRILL: &str = "\
name: slow
seed: 42
warmup: 0s
baseline: 5s
steps:
  - inject:
      kind: slow-storage
      server: 1
      delay: 300ms
  - expect:
      within: 20s
      signals: [latency]
      hold: 1s
  - remediate:
  - verify:
      within_pct: 20
      consecutive_steps: 10
      deadline: 3s
  - remediate:
  - verify:
      within_pct: 20
      consecutive_steps: 10
      deadline: 3s
";

async fn run_agent(dir: &Path, agent: &str, approval: lab_agents::Approval) -> DrillReport {
    let rt = FakeRuntime::new();
    let mut job = Job::new(&rt);
    let lab = lab(&rt, dir);
    let guard = Guard::new(lab.clone());
    let mut opts = options(dir);
    opts.agent = Some(lab_agents::AgentOptions {
        command: agent.into(),
        evidence: lab_agents::EvidenceLevel::Wiring,
        approval,
        timeout: Duration::from_secs(3),
    });
    run_drill(
        &lab,
        &mut job,
        &Silent,
        &opts,
        &guard,
        &drill(AGENT_DRILL),
        "test",
    )
    .await
}

/// Bad agents and a declined plan, on the real clock, side by side: each ends with its own verdict and
/// changes nothing; a plan that ran and did not hold sends the incident back with `previous_attempts`.
#[tokio::test]
async fn agents_that_fail_are_verdicts_and_change_nothing() {
    use lab_agents::{Approval, Mitigation, PlanOutcome};
    let dirs: Vec<tempfile::TempDir> = (0..5).map(|_| tempfile::tempdir().unwrap()).collect();
    let plan = |cmds: &str| {
        format!(
            r#"printf '%s' '{{"format":"straggler-lab.plan/v1","anomaly":true,"blame":["storage-1"],"cause":"bad-network-path","commands":[{cmds}]}}'"#
        )
    };
    let keep = format!(
        "cp \"$LAB_INCIDENT_BUNDLE\" {}/seen-$(date +%s%N).json; ",
        dirs[4].path().display()
    );
    let approvals = dirs[3].path().join("approvals");
    std::fs::write(&approvals, "no\n").unwrap();
    let decline = Approval {
        mode: lab_agents::approval::Mode::Ask,
        answers: lab_agents::approval::Answers::from_file(&approvals, 0).unwrap(),
    };
    let look = plan(r#"{"argv":["lab","status"],"reason":"look first"}"#);
    let nothing = format!("{keep}{}", plan(""));
    let (not_json, crash, slow, declined, empty) = tokio::join!(
        run_agent(dirs[0].path(), "echo restart rank 1", Approval::auto()),
        run_agent(dirs[1].path(), "echo boom >&2; exit 3", Approval::auto()),
        run_agent(dirs[2].path(), "sleep 30", Approval::auto()),
        run_agent(dirs[3].path(), &look, decline),
        run_agent(dirs[4].path(), &nothing, Approval::auto()),
    );
    let first = |r: &DrillReport| r.remediations[0].agent.clone().unwrap();
    assert_eq!(not_json.verdict, Verdict::Fail, "{}", not_json.reason);
    assert!(
        not_json.reason.contains("plan was refused"),
        "{}",
        not_json.reason
    );
    assert_eq!(first(&not_json).outcome, PlanOutcome::Refused);
    assert!(
        crash.reason.contains("exit 3") && crash.reason.contains("boom"),
        "{}",
        crash.reason
    );
    assert_eq!(first(&crash).outcome, PlanOutcome::AgentFailed);
    assert!(
        slow.reason.contains("did not answer within 3 s"),
        "{}",
        slow.reason
    );
    assert!(first(&slow).timed_out);
    assert_eq!(declined.verdict, Verdict::Declined, "{}", declined.reason);
    assert!(
        declined.reason.contains("declined (approvals file)"),
        "{}",
        declined.reason
    );
    let d = first(&declined);
    assert_eq!(d.outcome, PlanOutcome::Declined);
    assert!(!d.commands[0].approved && d.commands[0].exit_code.is_none());
    assert_eq!(d.score.as_ref().unwrap().mitigation, Mitigation::NotRun);
    for r in [&not_json, &crash, &slow, &declined] {
        assert_eq!(
            r.remediations.len(),
            1,
            "{}: nothing after the failed remediation",
            r.reason
        );
        assert!(
            r.remediations[0].changes.is_empty(),
            "{:?}",
            r.remediations[0].changes
        );
        // Only the drill's own cleanup cleared the fault.
        assert!(
            r.cleanup.cleared.iter().any(|c| c.contains("slow-storage")),
            "{:?}",
            r.cleanup
        );
    }
    // An empty plan ran, did not hold, and went back: the second bundle says what was tried and how it failed.
    assert_eq!(empty.verdict, Verdict::Fail, "{}", empty.reason);
    assert_eq!(empty.remediations.len(), 2);
    let s = first(&empty).score.unwrap();
    assert_eq!(
        (s.detection, s.precision, s.recall, s.cause),
        (true, Some(1.0), 1.0, true)
    );
    assert_eq!(s.mitigation, Mitigation::Failed);
    assert_eq!(first(&empty).truth.unwrap().components, vec!["storage-1"]);
    let mut seen: Vec<_> = std::fs::read_dir(dirs[4].path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("seen-"))
        .collect();
    seen.sort();
    assert_eq!(seen.len(), 2);
    let b1: serde_json::Value = serde_json::from_slice(&std::fs::read(&seen[0]).unwrap()).unwrap();
    let b2: serde_json::Value = serde_json::from_slice(&std::fs::read(&seen[1]).unwrap()).unwrap();
    assert_eq!(b1["evidence"], "wiring");
    assert!(b1.get("changes").is_none(), "wiring level holds no change log");
    assert_eq!(b1["previous_attempts"].as_array().unwrap().len(), 0);
    let prev = &b2["previous_attempts"][0];
    assert!(
        prev["verification"].as_str().unwrap().starts_with("verify"),
        "{prev}"
    );
    assert_eq!(prev["commands"], serde_json::json!([]));
    assert_eq!(empty.full_bundles.len(), 2);
}

/// The past the lab's watcher kept: `secs` one-second moments ending now, at 1000 samples/s, the one
/// `unsteady_at` seconds before now (if any) with a rank not Ready.
fn watched(secs: u64, unsteady_at: Option<u64>) -> crate::history::Recent {
    let now = now_ms();
    let mut r = crate::history::Recent::default();
    for i in (0..secs).rev() {
        r.push(crate::history::SteadyPoint {
            at_ms: now - i * 1000,
            samples_per_s: Some(1000.0),
            step_seconds: Some(0.032),
            unsteady: (unsteady_at == Some(i)).then(|| "3/4 ranks Running and Ready".to_string()),
            learned: None,
            faults: 0,
            last_change_ms: None,
            commits_per_s: None,
        });
    }
    r
}

#[tokio::test(start_paused = true)]
async fn a_lab_already_watched_steady_for_the_window_needs_no_new_wait() {
    let rt = FakeRuntime::new();
    let dir = tempfile::tempdir().unwrap();
    let lab = lab(&rt, dir.path());
    let opts = options(dir.path());
    let d = drill(SLOW_STORAGE);

    let mut job = Job::new(&rt);
    job.past = watched(30, None);
    let mut s = Session::new(lab.clone(), &mut job, &Silent, &opts, Guard::new(lab.clone()));
    let b = s.settle(d.warmup, d.baseline).await;
    assert!(b.ok, "{}", b.summary);
    assert!(
        b.summary.contains("already watched before the drill"),
        "{}",
        b.summary
    );
    assert!(job.ticks <= 2, "{} ticks", job.ticks);

    // A moment that was not steady 2 s ago: the window starts after it, and the rest is waited for.
    let mut job = Job::new(&rt);
    job.past = watched(30, Some(2));
    let mut s = Session::new(lab.clone(), &mut job, &Silent, &opts, Guard::new(lab.clone()));
    let b = s.settle(d.warmup, d.baseline).await;
    assert!(b.ok, "{}", b.summary);
    assert!(job.ticks >= 3, "{} ticks: {}", job.ticks, b.summary);

    // No past: the warm-up and the whole window are waited for.
    let mut job = Job::new(&rt);
    let mut s = Session::new(lab.clone(), &mut job, &Silent, &opts, Guard::new(lab));
    let b = s.settle(d.warmup, d.baseline).await;
    assert!(b.ok, "{}", b.summary);
    assert!(!b.summary.contains("already watched"), "{}", b.summary);
    assert!(
        job.ticks as f64 >= (d.warmup + d.baseline).as_secs_f64() - 1.0,
        "{} ticks",
        job.ticks
    );
}
#[tokio::test(start_paused = true)]
async fn checkpoint_first_fails_a_fix_that_did_not_save_the_run() {
    let rt = FakeRuntime::new();
    let dir = tempfile::tempdir().unwrap();
    let mut job = Job::new(&rt);
    let text = SLOW_STORAGE.replace(
        "  - remediate:\n",
        "  - remediate:\n      checkpoint_before_fix: true\n",
    );
    let r = run(&rt, dir.path(), &mut job, &text).await;
    assert_eq!(r.verdict, Verdict::Fail, "{}", r.reason);
    assert!(
        r.reason.starts_with(
            "remediate: no checkpoint saved before the fix: the job reported no checkpoint at all"
        ),
        "{}",
        r.reason
    );
    assert!(
        r.reason.contains("the first change was `storage-1"),
        "{}",
        r.reason
    );
    assert!(
        r.reason.contains("the lab's own clear saves none"),
        "{}",
        r.reason
    );
    // The fix itself ran, and the drill's cleanup leaves nothing injected.
    assert!(rt.state().delays.is_empty());
    assert_eq!(Ledger::in_dir(dir.path()).read().unwrap().active().count(), 0);
}
