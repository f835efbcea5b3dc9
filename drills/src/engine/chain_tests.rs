//! A chained drill (the seed's week) driven against the fake runtime: fault 1 fixed and verified, then
//! fault 2 injected with that fix in the change log. Each remediation is judged with what is injected at
//! that point, a failed first fix does not run into the second incident, and `--remediate` given once per
//! remediate step gives each its own command. Tokio's clock is paused, as in `session_tests`.

use std::sync::Arc;

use lab_faults::Ledger;
use lab_runtime::testing::FakeRuntime;

use super::test_job::Job;
use super::{Guard, Lab, Options, Silent, run_drill};
use lab_reports::report::{DrillReport, StepName, Verdict};

const WEEK: &str = "\
name: week
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
      hold: 2s
  - remediate:
  - verify:
      within_pct: 20
      consecutive_steps: 100
      deadline: 30s
  - inject:
      kind: throttled-rank
      rank: 1
      cpu: 150m
  - expect:
      within: 30s
      signals: [saturation]
      throughput_below_pct: 90
      hold: 2s
  - remediate:
  - verify:
      within_pct: 15
      consecutive_steps: 100
      deadline: 30s
";

async fn run(text: &str, each: &[&str]) -> (DrillReport, FakeRuntime, tempfile::TempDir) {
    let rt = FakeRuntime::new();
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab {
        name: "drill-chain-test-lab".into(),
        runtime: Arc::new(rt.clone()),
        ledger: Ledger::in_dir(dir.path()),
    };
    let guard = Guard::new(lab.clone());
    let drill = lab_drill_file::spec::parse(text).unwrap();
    let mut opts = Options {
        bundle_dir: dir.path().join("bundles"),
        ..Options::default()
    };
    let each: Vec<String> = each.iter().map(|s| s.to_string()).collect();
    opts.set_remediate(&each, &[&drill]).unwrap();
    let mut job = Job::new(&rt);
    job.starvation = true;
    job.ledger = Some(Ledger::in_dir(dir.path()));
    let r = run_drill(&lab, &mut job, &Silent, &opts, &guard, &drill, "test").await;
    (r, rt, dir)
}

fn steps(r: &DrillReport) -> Vec<(StepName, bool)> {
    r.steps.iter().map(|s| (s.step, s.ok)).collect()
}

fn bundle(r: &DrillReport, i: usize) -> serde_json::Value {
    let path = r.remediations[i].bundle.as_deref().unwrap();
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_week_passes_when_each_fault_gets_its_own_fix() {
    let (r, rt, dir) = run(WEEK, &[]).await;
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
            (Inject, true),
            (Expect, true),
            (Remediate, true),
            (Verify, true),
            (Cleanup, true)
        ]
    );
    // Each expect step times its own fault: timed from the first injection, the second would be far past
    // its 30 s (the fake's snapshots run ahead of the clock, so the figure itself is loose).
    let expects: Vec<&str> = r
        .steps
        .iter()
        .filter(|s| s.step == Expect)
        .map(|s| s.summary.as_str())
        .collect();
    for e in &expects {
        let after: f64 = e
            .strip_prefix("detected ")
            .and_then(|t| t.split(" s after").next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{e}"));
        assert!(after < 30.0, "{expects:?}");
    }
    assert_eq!(
        r.figures.lowest_throughput_pct,
        Some(40.0),
        "the lowest of both faults"
    );
    assert!(r.remediations[0].changes.iter().any(|c| c.contains("storage-1")));
    assert!(r.remediations[1].changes.iter().any(|c| c.contains("rank-1")));
    // The second incident's change log: fault 1's change, its fix marked as remediation 1, fault 2's change.
    let b = bundle(&r, 1);
    let log: Vec<(String, String, Option<u64>)> = b["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["who"].as_str().unwrap().to_string(),
                format!("{} {} → {}", c["where"], c["before"], c["after"]).replace('"', ""),
                c["remediation"].as_u64(),
            )
        })
        .collect();
    let find = |what: &str| {
        log.iter()
            .find(|l| l.1 == what)
            .unwrap_or_else(|| panic!("{what}: {log:?}"))
    };
    assert_eq!(find("storage-1 0 ms → 300 ms").0, "operator");
    assert_eq!(find("storage-1 300 ms → 0 ms").0, "remediation");
    assert_eq!(find("storage-1 300 ms → 0 ms").2, Some(1));
    assert_eq!(find("rank-1 400m → 150m").0, "operator");
    assert_eq!(find("rank-1 400m → 150m").2, None);
    // The first bundle has no earlier fix in it.
    assert!(
        bundle(&r, 0)["changes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["who"] == "operator"),
        "{:#}",
        bundle(&r, 0)["changes"]
    );
    let lab = rt.state();
    assert!(lab.delays.is_empty() && lab.cpu_live.values().all(|c| *c == lab.template));
    assert_eq!(Ledger::in_dir(dir.path()).read().unwrap().active().count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_second_fix_that_leaves_fault_2_in_place_fails_the_week() {
    // The first remediation is the lab's own clear; the second changes nothing.
    let text = WEEK.replacen(
        "  - remediate:\n  - verify:\n      within_pct: 15",
        "  - remediate:\n      command: \"true\"\n  - verify:\n      within_pct: 15",
        1,
    );
    let (r, rt, _dir) = run(&text, &[]).await;
    assert_eq!(r.verdict, Verdict::Fail);
    assert!(
        r.reason.starts_with("verify: the job is not back"),
        "{}",
        r.reason
    );
    let verifies: Vec<bool> = r
        .steps
        .iter()
        .filter(|s| s.step == StepName::Verify)
        .map(|s| s.ok)
        .collect();
    assert_eq!(
        verifies,
        [true, false],
        "fault 1's fix held; fault 2 was still in"
    );
    assert_eq!(r.remediations[1].command.as_deref(), Some("true"));
    assert!(r.cleanup.ok, "{:?}", r.cleanup);
    let lab = rt.state();
    assert!(
        lab.cpu_live.values().all(|c| *c == lab.template),
        "the cleanup cleared fault 2: {:?}",
        lab.cpu_live
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_first_fix_stops_the_week_before_fault_2_and_each_step_runs_its_own_command() {
    let (r, rt, _dir) = run(WEEK, &["echo first", "echo second"]).await;
    assert_eq!(r.verdict, Verdict::Fail);
    assert!(r.reason.starts_with("verify: "), "{}", r.reason);
    // The verification of fault 1 failed: the drill does not skip to fault 2's remediation.
    assert_eq!(r.steps.iter().filter(|s| s.step == StepName::Inject).count(), 1);
    assert_eq!(r.remediations.len(), 1);
    assert_eq!(r.remediations[0].command.as_deref(), Some("echo first"));
    assert_eq!(r.remediations[0].stdout, "first\n");
    assert!(!rt.calls().iter().any(|c| c.starts_with("resize_rank")));
    assert!(rt.state().delays.is_empty());
}

#[test]
fn remediate_given_once_per_step_must_match_every_drill() {
    let week = lab_drill_file::spec::parse(WEEK).unwrap();
    let one = lab_drill_file::builtin::builtin("slow-storage").unwrap().drill;
    let mut o = Options::default();
    o.set_remediate(&[], &[&week]).unwrap();
    assert_eq!((o.remediate.as_deref(), o.remediate_each.len()), (None, 0));
    o.set_remediate(&["x".into()], &[&week, &one]).unwrap();
    assert_eq!((o.remediate.as_deref(), o.remediate_each.len()), (Some("x"), 0));

    let mut o = Options::default();
    let two = ["a".to_string(), "b".to_string()];
    o.set_remediate(&two, &[&week]).unwrap();
    assert_eq!(o.remediate_each, two);
    let mut o = Options::default();
    let e = o.set_remediate(&two, &[&week, &one]).unwrap_err();
    assert_eq!(
        e,
        "--remediate is given 2 times, but drill slow-storage has 1 remediate step: give it once (for every \
         remediate step) or once per remediate step, in order"
    );
    assert!(
        o.remediate.is_none() && o.remediate_each.is_empty(),
        "nothing set"
    );
    let e = o.set_remediate(&["a".into(), " ".into()], &[&week]).unwrap_err();
    assert!(e.contains("--remediate number 2 is empty"), "{e}");
}

#[test]
fn each_fix_is_scored_by_the_verification_that_judged_it() {
    use StepName::*;
    let step = |step, ok| lab_reports::report::StepReport {
        step,
        ok,
        started_s: 0.0,
        duration_s: 0.0,
        summary: String::new(),
        evidence: vec![],
    };
    let held = |s: &[(StepName, bool)]| {
        let steps: Vec<_> = s.iter().map(|(n, ok)| step(*n, *ok)).collect();
        super::session::fixes_held(&steps)
    };
    // The week: fault 1's fix held, fault 2's did not.
    let week = [
        (Inject, true),
        (Remediate, true),
        (Verify, true),
        (Inject, true),
        (Remediate, true),
        (Verify, false),
        (Cleanup, true),
    ];
    assert_eq!(held(&week), [true, false]);
    // A failed verification judged again after the cleanup: the re-judgment decides.
    let rejudged = [
        (Remediate, true),
        (Verify, false),
        (Cleanup, true),
        (Verify, true),
    ];
    assert_eq!(held(&rejudged), [true]);
    // A second attempt at one incident.
    let retried = [
        (Remediate, true),
        (Verify, false),
        (Remediate, true),
        (Verify, true),
    ];
    assert_eq!(held(&retried), [false, true]);
}
