//! `slow-disk` end to end on the local runtime, on one lab: bad input refused with the ledger untouched;
//! the fault slows the storage server's own answers (not only the path the ranks use) and the job with
//! it while every pod stays Ready; moving the job's data off the server (`lab storage drain`) brings
//! throughput back, and the ranks found the new place through the master. Then the built-in drill (a short
//! copy) with the trap first: restarting the rank (a look-alike's fix: the new rank reads from the same
//! slow server) must fail its verification, and the right fix, a checkpoint and then the drain, must pass,
//! the checkpoint saved before the fix's first change (`checkpoint_before_fix`). Prints the figures the
//! docs quote.

use std::time::{Duration, Instant};

use lab_model::Snapshot;
use lab_tests::{Edits, Lab, drill_copy, pct, serial, text, trap_first, wait_until};
use serde_json::Value;

fn own(s: &Snapshot, i: usize) -> f64 {
    s.storage.get(i).and_then(|v| v.own_probe).unwrap_or(f64::NAN)
}

fn fired(s: &Snapshot) -> bool {
    s.alerts
        .iter()
        .any(|a| a.rule == "LabStorageReadLatencyHigh" && a.target == "storage-1")
}

#[test]
fn slow_disk_is_the_servers_own_latency_and_only_draining_it_recovers_the_job() {
    let _one = serial();
    let started = Instant::now();
    let mut lab = Lab::up("slow-disk-e2e", &[]);

    // Bad input: a clear error, and nothing changed, not even the ledger.
    for (args, want) in [
        (
            vec!["fault", "inject", "slow-disk", "--server", "7"],
            "out of range",
        ),
        (
            vec!["fault", "inject", "slow-disk", "--cpu", "2m"],
            "out of range",
        ),
        (
            vec!["fault", "inject", "slow-disk", "--cpu", "lots"],
            "not a CPU quantity",
        ),
        (vec!["storage", "drain", "7"], "does not exist"),
        (vec!["storage", "drain", "one"], "invalid value"),
        (vec!["storage", "undrain", "1"], "not drained"),
    ] {
        lab.refuses(&args, want);
    }

    let base = lab.wait_steady();
    let base_own: Vec<f64> = (0..3).map(|i| own(&base, i)).collect();

    let out = lab.ok(&["fault", "inject", "slow-disk", "--server", "1"]);
    let injected = Instant::now();
    assert!(out.contains("storage-1 server cpu limit unlimited → 6m"), "{out}");
    assert!(out.contains("proof:"), "{out}");

    // The right alert fires, and the evidence is the server's own latency: requests sent straight to it
    // (no proxy) are slow, while its siblings' stay flat. Every pod stays Ready.
    wait_until(
        "storage-1's latency alert",
        Duration::from_secs(60),
        || lab.live(),
        fired,
    );
    let alert_s = injected.elapsed().as_secs_f64();
    let s = lab.wait_for("storage-1's own latency to rise", Duration::from_secs(30), |s| {
        own(s, 1) > 0.02 && own(s, 1) > 5.0 * own(s, 0).max(own(s, 2))
    });
    let own_under = (own(&s, 1), own(&s, 0).max(own(&s, 2)));
    let (ready, total) = s.status.ready_count();
    assert_eq!(ready, total, "every pod stays Ready: {:?}", s.status.pods);
    let under = lab.wait_for("the job to slow down", Duration::from_secs(30), |s| pct(s) < 80.0);
    let under_pct = pct(&under);

    // A look-alike's fix, clearing a network delay, has nothing to clear: the path to storage-1 adds none.
    assert_eq!(lab.proxy_delay_ms(1), 0.0, "slow-disk must not touch the path");

    // Another look-alike's fix, restarting the rank, is the drill's trap below.

    // The right fix: move the data off storage-1; the ranks re-resolve the volumes through the master.
    let t = Instant::now();
    let out = lab.ok(&["storage", "drain", "1"]);
    let drain_s = t.elapsed().as_secs_f64();
    assert!(
        out.contains("moved volume") && out.contains("storage-1 volumes"),
        "{out}"
    );
    let again = lab.run(&["storage", "drain", "1"]);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already drained"),
        "{}",
        text(&again)
    );
    let back = lab.wait_for("throughput back after the drain", Duration::from_secs(90), |s| {
        pct(s) >= 90.0
    });
    let recovery_s = t.elapsed().as_secs_f64();
    // The fault is still on: only the data moved. Idle, the starved server answers its own probe quickly
    // again, which is why the evidence must be read while it serves the job.
    lab.ok(&["fault", "clear", "--all"]);
    lab.ok(&["storage", "undrain", "1"]);
    let drill = drill_trap_first(&lab);
    // The drill's cleanup moved back what its right fix drained: its next run finds the data where it was.
    let undrain = lab.run(&["storage", "undrain", "1"]);
    assert!(
        String::from_utf8_lossy(&undrain.stderr).contains("not drained"),
        "the drill's cleanup left storage-1 drained: {}",
        text(&undrain)
    );
    lab.down();
    eprintln!(
        "slow-disk figures: own latency before {:?} s; under the fault storage-1 {:.3} s, siblings at most {:.3} s; first right alert {alert_s:.1} s after inject; throughput \
         under the fault {under_pct:.0}% of baseline; drain took {drain_s:.1} s; \
         back to ≥90% ({:.0}%) {recovery_s:.1} s after the drain started; the drill: {drill}; whole test {:.0} s",
        base_own,
        own_under.0,
        own_under.1,
        pct(&back),
        started.elapsed().as_secs_f64()
    );
}

/// The built-in drill, a short copy (2 s warm-up, 8 s baseline, 50 good steps to verify), with restarting
/// rank-1 tried first (a 30 s verify deadline: the drain's verification passed well within it) and then
/// `lab checkpoint && lab storage drain 1`, which must save the checkpoint before its first change.
/// Returns the drill's figures and the trap's verdict.
fn drill_trap_first(lab: &Lab) -> String {
    let lab_dir = lab.dir();
    let dir = lab_dir.parent().unwrap();
    let right = drill_copy(
        "slow-disk",
        &Edits {
            name: Some("slow-disk-trap-first"),
            warmup: Some("2s"),
            baseline: Some("8s"),
            command: Some("lab checkpoint && lab storage drain 1"),
            consecutive_steps: Some(50),
            ..Edits::default()
        },
    );
    let mut yaml = trap_first(&right, "lab restart rank 1", "30s");
    // Checkpoint first on the right fix's step alone: the trap saves nothing, and fails on its own.
    let last = yaml.rfind("      timeout: ").unwrap();
    yaml.insert_str(last, "      checkpoint_before_fix: true\n");
    let file = dir.join("slow-disk-trap-first.yaml");
    std::fs::write(&file, yaml).unwrap();
    let d = lab.passing_drill(&file);
    let steps = d["steps"].as_array().unwrap();
    let of = |name: &str| -> Vec<&Value> { steps.iter().filter(|s| s["step"] == name).collect() };
    let (verify, remediate) = (of("verify"), of("remediate"));
    assert_eq!((verify.len(), remediate.len()), (2, 2), "{}", d["steps"]);
    assert_eq!(
        verify[0]["ok"], false,
        "restarting the rank must not fix a slow node: {}",
        verify[0]
    );
    assert_eq!(verify[1]["ok"], true, "the drain must: {}", verify[1]);
    let saved = remediate[1]["evidence"]
        .as_array()
        .and_then(|e| e.first())
        .and_then(Value::as_str)
        .unwrap_or("");
    assert!(saved.starts_with("checkpoint saved first"), "{}", remediate[1]);
    format!(
        "{}; the trap: {}; the right fix: {saved}",
        d["figures"],
        verify[0]["summary"].as_str().unwrap_or("")
    )
}
