//! The drills of one rank's faults end to end on the local runtime, each trying its trap first and its
//! right fix after it: rank-crash (restarting rank-1 fails, putting the cause back passes), rank-hang
//! (restarting a sibling fails, restarting rank-1 passes) and slow-compute (re-applying the template fails,
//! the lab's own clear passes). The three rules that name the cause (`LabRankCrashLooping`, `LabRankHung`,
//! `LabRankComputeSlow`) must be what detected the crashes, the hang and the slow compute.
//!
//! One lab, one `lab drill run` of three drill files. To fit its time budget the files are the built-in
//! drills with a shorter warm-up and baseline, 50 good steps instead of 100 to verify (not rank-crash's:
//! its rank crashes every 150 steps of a restarted process, and a restarted one trains well for up to
//! about 100 before the next crash), and each copy's last remediation tried twice (`lab_tests::trap_first`): the trap
//! with a 15 s verify deadline (a trap fails only when its deadline runs out), whose verification must
//! fail, then the right fix, whose verification must pass. The drill goes back for a second attempt on the
//! failed verification, so both verdicts cost one fault's set-up. Each fault and expectation is the
//! built-in's.

use std::time::Instant;

use lab_tests::{Edits, Lab, drill_copy, serial, step, text, trap_first};
use serde_json::Value;

/// A built-in drill renamed, with a shorter warm-up and baseline, 50 good steps to verify (rank-crash
/// keeps its 100), `fix` as its remediation (None: the lab's own clear), and `trap` tried first with a
/// 15 s verify deadline.
fn variant(builtin: &str, fix: Option<&str>, trap: &str) -> String {
    let copy = drill_copy(
        builtin,
        &Edits {
            warmup: Some("2s"),
            baseline: Some("8s"),
            command: fix,
            consecutive_steps: (builtin != "rank-crash").then_some(50),
            ..Edits::default()
        },
    );
    trap_first(&copy, trap, "15s")
}

#[test]
fn rank_drills_fail_with_their_traps_then_pass_with_their_fixes() {
    let _one = serial();
    let t_all = Instant::now();
    let mut lab = Lab::up("rank-signals-e2e", &[]);
    let dir = tempfile::tempdir().unwrap();
    // (built-in, its trap, its right fix)
    let runs: [(&str, &str, Option<&str>); 3] = [
        (
            "rank-crash",
            "lab restart rank 1",
            Some("lab rank env 1 --unset LAB_DEVICE_FAULT_AFTER"),
        ),
        ("rank-hang", "lab restart rank 2", Some("lab restart rank 1")),
        ("slow-compute", "lab apply --cpu 400m", None),
    ];
    let mut files = Vec::new();
    for (builtin, trap, fix) in runs {
        let p = dir.path().join(format!("{builtin}.yaml"));
        std::fs::write(&p, variant(builtin, fix, trap)).unwrap();
        files.push(p.display().to_string());
    }
    let json = dir.path().join("report.json");
    let mut args = vec!["drill", "run"];
    args.extend(files.iter().map(String::as_str));
    args.extend(["--report", json.to_str().unwrap()]);
    let out = lab.run(&args);
    // Every drill passes in the end, each on its right fix.
    assert!(out.status.success(), "{}", text(&out));
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let drills = r["drills"].as_array().unwrap();
    assert_eq!(drills.len(), runs.len(), "{}", text(&out));
    for ((name, trap, fix), d) in runs.iter().zip(drills) {
        assert_eq!(d["name"], *name);
        let f = &d["figures"];
        let expect = step(d, "expect");
        let verify = lab_tests::verifications(d);
        let trap_verdict = verify
            .first()
            .and_then(|v| v["summary"].as_str())
            .unwrap_or_default();
        eprintln!(
            "figure: {name}: verdict {}, lowest throughput {}%, detect {} s, back to baseline {} s, steps lost {}; the trap: {trap_verdict}",
            d["verdict"],
            f["lowest_throughput_pct"],
            f["time_to_detect_s"],
            f["time_to_baseline_s"],
            f["steps_lost"]
        );
        // Detected with every rank Ready, before any remediation.
        assert_eq!(expect["ok"], true, "{name}: {expect:#}");
        let seen = expect["summary"].as_str().unwrap_or_default();
        eprintln!("figure: {name}: expect: {seen}");
        if *name == "rank-crash" {
            // rank-1 alone: its peers restart too, but after a collective error, which names no crash.
            assert!(
                seen.contains("LabRankCrashLooping on rank-1"),
                "{name}: {expect:#}"
            );
            for r in ["rank-0", "rank-2", "rank-3"] {
                assert!(
                    !seen.contains(&format!("LabRankCrashLooping on {r}")),
                    "{name}: {expect:#}"
                );
            }
            assert!(f["steps_lost"].as_u64().is_some_and(|n| n > 0), "{name}: {f}");
        }
        if *name == "rank-hang" {
            assert!(seen.contains("LabRankHung on rank-1"), "{name}: {expect:#}");
        }
        if *name == "slow-compute" {
            for r in ["rank-1", "rank-2"] {
                assert!(
                    seen.contains(&format!("LabRankComputeSlow on {r}")),
                    "{name}: {expect:#}"
                );
            }
        }
        // The trap ran, exited 0, and its verification failed on the job's own signals; then the right
        // fix's passed.
        assert_eq!(verify.len(), 2, "{name}: {}", d["steps"]);
        assert_eq!(d["remediations"][0]["command"], *trap, "{name}: {d:#}");
        assert_eq!(d["remediations"][0]["exit_code"], 0, "{name}: {d:#}");
        assert_eq!(
            verify[0]["ok"], false,
            "{name}: `{trap}` must fail: {}",
            verify[0]
        );
        assert!(
            trap_verdict.starts_with("the job is not back"),
            "{name}: {trap_verdict}"
        );
        // A hang or a slow rank keeps every rank Ready; a crashing one may be between restarts.
        if *name != "rank-crash" {
            assert!(
                trap_verdict.contains("Ready is not fixed"),
                "{name}: {trap_verdict}"
            );
        }
        assert_eq!(
            verify[1]["ok"], true,
            "{name} with {fix:?} must pass: {}",
            verify[1]
        );
        assert_eq!(d["verdict"], "pass", "{name}: {}", d["reason"]);
        assert_eq!(
            d["remediations"].as_array().map(Vec::len),
            Some(2),
            "{name}: {d:#}"
        );
        // The cleanup cleared the fault and left the lab steady for the next drill.
        assert_eq!(d["cleanup"]["ok"], true, "{name}: {}", d["cleanup"]);
        assert_eq!(d["cleanup"]["steady"], true, "{name}: {}", d["cleanup"]);
    }
    let s = lab.snapshot_over(6);
    assert!(s.alerts.is_empty(), "alerts after the drills: {:?}", s.alerts);
    assert!(s.faults.is_empty(), "faults left: {:?}", s.faults);
    lab.down();
    eprintln!("figure: test wall time {:.0} s", t_all.elapsed().as_secs_f64());
}
