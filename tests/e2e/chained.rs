//! The chained week end to end on the local runtime (one lab): the built-in `chained-week` drill passes
//! with the right fix for each fault, given with `--remediate` once per remediate step, and fails when the
//! second fix puts the storage delay back, as the seed's agent proposed. Both runs' second bundles must
//! let a reader tell the first fix from the new cause in the change log: who made each change, and what
//! the job's throughput did after it.

use std::path::Path;
use std::time::Instant;

use lab_tests::{Lab, serial, text};
use serde_json::Value;

const RIGHT_1: &str = "lab fault clear --all";
const RIGHT_2: &str = "lab resize rank 1 --cpu 400m";
/// The seed agent's second plan: the last change (fault 1's fix) read as the newest suspect, and undone.
const TRAP_2: &str = "lab fault inject slow-storage --server 1 --delay 300ms";

fn run(lab: &Lab, drill: &str, fixes: [&str; 2], report: &Path) -> (Option<i32>, String, Value) {
    let out = lab.run(&[
        "drill",
        "run",
        drill,
        "--remediate",
        fixes[0],
        "--remediate",
        fixes[1],
        "--report",
        report.to_str().unwrap(),
    ]);
    let r: Value = serde_json::from_str(&std::fs::read_to_string(report).unwrap_or_default())
        .unwrap_or_else(|e| panic!("no report ({e}):\n{}", text(&out)));
    (out.status.code(), text(&out), r["drills"][0].clone())
}

/// The change of `target` to `after` in the change log of remediation `i`'s bundle.
fn change<'a>(log: &'a [Value], target: &str, after: &str) -> &'a Value {
    log.iter()
        .rev()
        .find(|c| c["where"] == target && c["after"] == after)
        .unwrap_or_else(|| panic!("no change of {target} to {after} in {log:#?}"))
}

const BUILTIN: &str = include_str!("../../drill-file/builtin/chained-week.yaml");

/// The built-in week with fault 2 cut to 50m instead of 150m, as the built-in drills' test does for the
/// throttled trap: on a machine whose load changes between a drill's baseline and its verify window (other
/// builds starting and stopping), 150m can cost less than that change and its alert may never fire; 50m
/// costs more than any such swing. The week is the same.
fn deep_cut(yaml: &str) -> String {
    assert!(yaml.contains("cpu: 150m"), "{yaml}");
    yaml.replace("cpu: 150m", "cpu: 50m")
}

/// The second incident's bundle: fault 1's fix is marked as remediation 1 and brought the job back;
/// rank-1's limit cut came from someone else and slowed it; nothing names an injection.
fn check_second_bundle(d: &Value) -> Vec<Value> {
    let path = d["remediations"][1]["bundle"].as_str().unwrap();
    let b: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let raw = b["changes"].to_string().to_lowercase();
    assert!(!raw.contains("inject") && !raw.contains("fault"), "{raw}");
    let log = b["changes"].as_array().unwrap().clone();
    let fix = change(&log, "storage-1", "0 ms");
    assert_eq!(
        (&fix["who"], &fix["remediation"]),
        (&"remediation".into(), &1.into()),
        "{fix:#}"
    );
    let (fb, fa) = (
        fix["effect"]["pct_of_normal_before"].as_f64().unwrap(),
        fix["effect"]["pct_of_normal_after"].as_f64().unwrap(),
    );
    assert!(fa > fb + 20.0, "the first fix brought the job back: {fix:#}");
    let cause = change(&log, "rank-1", "50m");
    assert_eq!(cause["who"], "operator", "{cause:#}");
    assert!(cause.get("remediation").is_none(), "{cause:#}");
    assert!(cause["at_ms"].as_u64() > fix["at_ms"].as_u64(), "{log:#?}");
    let (cb, ca) = (
        cause["effect"]["pct_of_normal_before"].as_f64().unwrap(),
        cause["effect"]["pct_of_normal_after"].as_f64().unwrap(),
    );
    assert!(ca < cb, "the limit cut slowed the job: {cause:#}");
    eprintln!(
        "second bundle: fix {} → {} % of normal, cause {} → {} %",
        fb, fa, cb, ca
    );
    log
}

fn step_summaries(d: &Value, step: &str) -> Vec<(bool, String)> {
    d["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["step"] == step)
        .map(|s| {
            (
                s["ok"].as_bool().unwrap(),
                s["summary"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_chained_week_passes_with_each_faults_own_fix_and_fails_when_the_second_puts_the_delay_back() {
    let _one = serial();
    let t0 = Instant::now();
    let mut lab = Lab::up("week-chained", &[]);
    let up_s = t0.elapsed().as_secs_f64();
    let dir = tempfile::tempdir().unwrap();

    // The right fixes, one per remediate step.
    let t = Instant::now();
    let deep = dir.path().join("chained-week-50m.yaml");
    std::fs::write(&deep, deep_cut(BUILTIN)).unwrap();
    let (code, out, d) = run(
        &lab,
        deep.to_str().unwrap(),
        [RIGHT_1, RIGHT_2],
        &dir.path().join("pass.json"),
    );
    assert_eq!(
        code,
        Some(0),
        "chained-week must pass with its right fixes:\n{out}"
    );
    assert_eq!(d["verdict"], "pass", "{d:#}");
    let injects: Vec<(bool, String)> = step_summaries(&d, "inject");
    assert_eq!(injects.len(), 2, "{injects:?}");
    let expects = step_summaries(&d, "expect");
    let verifies = step_summaries(&d, "verify");
    assert!(expects.iter().all(|(ok, _)| *ok), "{expects:?}");
    // A verification may fail only when this machine got slower during the drill and the job was back at
    // the steady state after the cleanup (the step that judges it again, right after).
    let rejudged = |i: usize| {
        verifies
            .get(i + 1)
            .is_some_and(|(ok, summary)| *ok && summary.contains("at the lab's normal of the moment"))
    };
    assert!(
        verifies.iter().enumerate().all(|(i, (ok, _))| *ok || rejudged(i)),
        "{verifies:?}"
    );
    assert_eq!(d["remediations"][0]["command"], RIGHT_1);
    assert_eq!(d["remediations"][1]["command"], RIGHT_2);
    check_second_bundle(&d);
    let pass_s = t.elapsed().as_secs_f64();
    eprintln!("right fixes ({pass_s:.0} s): {expects:?} {verifies:?}");

    // The trap, from a copy with a shorter warm-up and baseline, and a shorter last deadline (it cannot
    // pass: rank-1 is still starved and storage-1 is slow again).
    let copy = deep_cut(BUILTIN)
        .replace("warmup: 5s", "warmup: 2s")
        .replace("baseline: 15s", "baseline: 8s");
    let at = copy.rfind("deadline: 45s").unwrap();
    let copy = format!(
        "{}deadline: 20s{}",
        &copy[..at],
        &copy[at + "deadline: 45s".len()..]
    );
    let file = dir.path().join("chained-week.yaml");
    std::fs::write(&file, copy).unwrap();
    let t = Instant::now();
    let (code, out, d) = run(
        &lab,
        file.to_str().unwrap(),
        [RIGHT_1, TRAP_2],
        &dir.path().join("trap.json"),
    );
    assert_eq!(code, Some(1), "putting the delay back must fail the week:\n{out}");
    assert_eq!(d["verdict"], "fail", "{d:#}");
    let reason = d["reason"].as_str().unwrap();
    assert!(reason.starts_with("verify: the job is not back"), "{reason}");
    let verifies = step_summaries(&d, "verify");
    assert_eq!(
        verifies.iter().take(2).map(|v| v.0).collect::<Vec<_>>(),
        [true, false],
        "fault 1's fix held, the second did not: {verifies:?}"
    );
    // When this machine got slower during the drill, the failed verification is judged again against the
    // steady state after the cleanup; storage-1 still slow fails that too.
    assert!(
        verifies[2..]
            .iter()
            .all(|(ok, summary)| !ok
                && summary.starts_with("not back at the lab's normal of the moment either")),
        "{verifies:?}"
    );
    let trap_changes = d["remediations"][1]["changes"].to_string();
    assert!(
        trap_changes.contains("storage-1 added delay 0 ms → 300 ms"),
        "{trap_changes}"
    );
    // The agent that proposed the trap had the same evidence against it.
    check_second_bundle(&d);
    assert_eq!(d["cleanup"]["ok"], true, "{}", d["cleanup"]);
    let status = lab.ok(&["fault", "status"]);
    assert!(status.contains("no fault is injected"), "{status}");
    let trap_s = t.elapsed().as_secs_f64();
    eprintln!("trap ({trap_s:.0} s): {reason}");
    lab.down();
    eprintln!(
        "wall: lab up {up_s:.0} s, right fixes {pass_s:.0} s, trap {trap_s:.0} s, total {:.0} s",
        t0.elapsed().as_secs_f64()
    );
}
