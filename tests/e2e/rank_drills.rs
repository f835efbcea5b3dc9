//! The drills of one rank's faults end to end on the local runtime, each with its right fix and its trap:
//! rank-crash (putting the cause back passes, restarting rank-1 fails), rank-hang (restart rank-1 passes,
//! restarting a sibling fails) and slow-compute (the clear passes, re-applying the template fails).
//! The three rules that name the cause (`LabRankCrashLooping`, `LabRankHung`, `LabRankComputeSlow`) must be
//! what detected the crashes, the hang and the slow compute.
//!
//! One lab, one `lab drill run` of six drill files. To fit its time budget the files are the built-in
//! drills with a shorter warm-up and baseline, 50 good steps instead of 100 to verify (not rank-crash's:
//! its rank crashes every 150 steps of a process, and a restarted one trains well for up to about 100
//! before the next crash), and the traps with a shorter verify deadline (a trap fails only when its
//! deadline runs out); each fault and expectation is the built-in's.

use std::time::Instant;

use lab_tests::{Edits, Lab, drill_copy, serial, step, text};
use serde_json::Value;

/// A built-in drill renamed, with a shorter warm-up and baseline, 50 good steps to verify (rank-crash
/// keeps its 100), and with `remediation` (None: the lab's own clear) and a verify deadline of its own.
fn variant(builtin: &str, name: &str, remediation: Option<&str>, deadline: Option<&str>) -> String {
    drill_copy(
        builtin,
        &Edits {
            name: Some(name),
            warmup: Some("2s"),
            baseline: Some("8s"),
            command: remediation,
            consecutive_steps: (builtin != "rank-crash").then_some(50),
            deadline,
            ..Edits::default()
        },
    )
}

/// A drill file: its name, the built-in it is made from, its remediation (None: the lab's own clear), its
/// verify deadline (None: the built-in's), and whether it must pass.
type Run = (
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    bool,
);

#[test]
fn rank_drills_pass_with_their_fixes_and_fail_with_their_traps() {
    let _one = serial();
    let t_all = Instant::now();
    let mut lab = Lab::up("rank-signals-e2e", &[]);
    let dir = tempfile::tempdir().unwrap();
    let runs: [Run; 6] = [
        (
            "rank-crash-fix",
            "rank-crash",
            Some("lab rank env 1 --unset LAB_DEVICE_FAULT_AFTER"),
            None,
            true,
        ),
        (
            "rank-crash-trap",
            "rank-crash",
            Some("lab restart rank 1"),
            Some("15s"),
            false,
        ),
        (
            "rank-hang-fix",
            "rank-hang",
            Some("lab restart rank 1"),
            None,
            true,
        ),
        (
            "rank-hang-trap",
            "rank-hang",
            Some("lab restart rank 2"),
            Some("15s"),
            false,
        ),
        ("slow-compute-fix", "slow-compute", None, None, true),
        (
            "slow-compute-trap",
            "slow-compute",
            Some("lab apply --cpu 400m"),
            Some("15s"),
            false,
        ),
    ];
    let mut files = Vec::new();
    for (name, builtin, fix, deadline, _) in runs {
        let p = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&p, variant(builtin, name, fix, deadline)).unwrap();
        files.push(p.display().to_string());
    }
    let json = dir.path().join("report.json");
    let mut args = vec!["drill", "run"];
    args.extend(files.iter().map(String::as_str));
    args.extend(["--report", json.to_str().unwrap()]);
    let out = lab.run(&args);
    // The traps fail, so the run as a whole fails.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let drills = r["drills"].as_array().unwrap();
    assert_eq!(drills.len(), runs.len(), "{}", text(&out));
    for ((name, _, fix, _, passes), d) in runs.iter().zip(drills) {
        assert_eq!(d["name"], *name);
        let reason = d["reason"].as_str().unwrap_or_default();
        let f = &d["figures"];
        let expect = step(d, "expect");
        eprintln!(
            "figure: {name}: verdict {}, lowest throughput {}%, detect {} s, back to baseline {} s, steps lost {}; {reason}",
            d["verdict"],
            f["lowest_throughput_pct"],
            f["time_to_detect_s"],
            f["time_to_baseline_s"],
            f["steps_lost"]
        );
        // Detected in every run, traps included (the trap comes after detection), with every rank Ready.
        assert_eq!(expect["ok"], true, "{name}: {expect:#}");
        let seen = expect["summary"].as_str().unwrap_or_default();
        eprintln!("figure: {name}: expect: {seen}");
        if name.starts_with("rank-crash") {
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
        if name.starts_with("rank-hang") {
            assert!(seen.contains("LabRankHung on rank-1"), "{name}: {expect:#}");
        }
        if name.starts_with("slow-compute") {
            for r in ["rank-1", "rank-2"] {
                assert!(
                    seen.contains(&format!("LabRankComputeSlow on {r}")),
                    "{name}: {expect:#}"
                );
            }
        }
        if *passes {
            assert_eq!(d["verdict"], "pass", "{name} with {fix:?}: {reason}");
        } else {
            assert_eq!(d["verdict"], "fail", "{name} with {fix:?} must fail: {d:#}");
            assert!(
                reason.starts_with("verify: the job is not back"),
                "{name}: {reason}"
            );
            // A hang or a slow rank keeps every rank Ready; a crashing one may be between restarts.
            if !name.starts_with("rank-crash") {
                assert!(reason.contains("Ready is not fixed"), "{name}: {reason}");
            }
            assert_eq!(d["remediations"][0]["exit_code"], 0, "{name}: {d:#}");
        }
        // Whatever the verdict, the cleanup cleared the fault and left the lab steady for the next drill.
        assert_eq!(d["cleanup"]["ok"], true, "{name}: {}", d["cleanup"]);
        assert_eq!(d["cleanup"]["steady"], true, "{name}: {}", d["cleanup"]);
    }
    let s = lab.snapshot_over(6);
    assert!(s.alerts.is_empty(), "alerts after the drills: {:?}", s.alerts);
    assert!(s.faults.is_empty(), "faults left: {:?}", s.faults);
    lab.down();
    eprintln!("figure: test wall time {:.0} s", t_all.elapsed().as_secs_f64());
}
