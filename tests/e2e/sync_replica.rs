//! The sync-replica fault end to end on the local runtime, on one lab started with `--database`: a
//! PostgreSQL primary (db-0), its streaming standby (db-1, a StatefulSet's pod) and a writer committing to
//! the primary. The fault proves itself on the writer's own signals (commits at zero, reads answering,
//! every running pod Ready, db-1 Pending); fixing the template alone (the trap) leaves the Pending pod as
//! it is and the commits hung; deleting that pod by name (the seed's rule) brings the standby back and the
//! commits with it. Bad input is refused with the ledger unchanged, and nothing is left after `lab down`.

use std::time::{Duration, Instant};

use lab_tests::{Lab, serial, text};
use serde_json::Value;

/// `lab db status --json`.
fn db(lab: &Lab) -> Value {
    let out = lab.ok(&["db", "status", "--json"]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("db status --json is not JSON ({e}):\n{out}"))
}

fn pod<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["pods"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no pod {name} in {d:#}"))
}

fn commits(d: &Value) -> f64 {
    d["writer"]["commits_per_second"].as_f64().unwrap_or(f64::NAN)
}

fn line(d: &Value) -> String {
    format!(
        "db-1 {} {}; commits/s {:.1}, waiting {:.1} s, p50 {:.1} ms, p99 {:.1} ms, reads/s {:.1}; names {}",
        pod(d, "db-1")["phase"],
        pod(d, "db-1")["reason"],
        commits(d),
        d["writer"]["commit_waiting_seconds"].as_f64().unwrap_or(f64::NAN),
        d["writer"]["commit_p50_seconds"].as_f64().unwrap_or(f64::NAN) * 1e3,
        d["writer"]["commit_p99_seconds"].as_f64().unwrap_or(f64::NAN) * 1e3,
        d["writer"]["reads_per_second"].as_f64().unwrap_or(f64::NAN),
        d["database"]["synchronous_standby_names"]
    )
}

fn wait_db(lab: &Lab, what: &str, deadline: Duration, cond: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let d = db(lab);
        if cond(&d) {
            return d;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out waiting for {what}: {}",
            line(&d)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn sync_replica_hangs_commits_and_only_deleting_the_stuck_pod_fixes_it() {
    let _one = serial();
    let start = Instant::now();
    let mut lab = Lab::up("sync-replica-e2e", &["--database"]);
    eprintln!("lab up --database: {:.0} s", start.elapsed().as_secs_f64());
    let ports = lab.ports();
    let ledger = lab.dir().join("ledger.json");

    // Before the fault: every database pod Running and Ready, the writer commits, commits wait for nobody.
    let d = wait_db(&lab, "the writer to commit", Duration::from_secs(30), |d| {
        commits(d) > 5.0
    });
    for p in ["db-0", "db-1", "lab-writer"] {
        assert_eq!(pod(&d, p)["phase"], "Running", "{d:#}");
        assert_eq!(pod(&d, p)["ready"], true, "{d:#}");
    }
    assert_eq!(d["database"]["synchronous_standby_names"], "", "{d:#}");
    eprintln!("before: {}", line(&d));

    // Bad input is refused with a clear error, and changes nothing, not even the ledger.
    let refused = |args: &[&str], want: &str| {
        let before = std::fs::read(&ledger).ok();
        let out = lab.run(args);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(want),
            "{args:?}: want {want:?}\n{}",
            text(&out)
        );
        assert_eq!(std::fs::read(&ledger).ok(), before, "{args:?} changed the ledger");
    };
    refused(
        &[
            "fault",
            "inject",
            "sync-replica",
            "--node-selector",
            "lab/disk=ssd",
        ],
        "matches the node",
    );
    refused(
        &["fault", "inject", "sync-replica", "--node-selector", "nvme"],
        "KEY=VALUE",
    );
    refused(&["db", "delete-pod", "rank-1"], "is a rank");
    refused(&["db", "delete-pod", "db-7"], "no pod named");
    refused(&["db", "template", "--node-selector", "disk"], "KEY=VALUE");
    let d = db(&lab);
    assert_eq!(d["database"]["template"]["revision"], 0, "{d:#}");

    // The fault proves itself: commits stop while reads answer and every running pod stays Ready.
    let injected = Instant::now();
    let out = lab.ok(&["fault", "inject", "sync-replica"]);
    assert!(out.contains("proof:"), "{out}");
    eprintln!("inject + proof: {:.1} s\n{out}", injected.elapsed().as_secs_f64());
    let d = db(&lab);
    assert_eq!(pod(&d, "db-1")["phase"], "Pending", "{d:#}");
    assert_eq!(pod(&d, "db-1")["reason"], "Unschedulable", "{d:#}");
    assert_eq!(pod(&d, "db-0")["ready"], true);
    assert_eq!(pod(&d, "lab-writer")["ready"], true);
    assert_eq!(commits(&d), 0.0, "{}", line(&d));
    assert!(
        d["writer"]["reads_per_second"].as_f64().unwrap_or(0.0) > 1.0,
        "{}",
        line(&d)
    );
    assert_eq!(d["database"]["synchronous_standby_names"], "\"db-1\"", "{d:#}");
    let s = lab.snapshot();
    assert!(s.status.ranks().all(|r| r.ready), "a rank is not Ready");
    eprintln!("under the fault: {}", line(&d));

    // The trap: fix the template alone. The pod already stuck on the old version stays as it is.
    lab.ok(&["db", "template", "--node-selector", ""]);
    let trap = Instant::now();
    let mut worst = 0.0f64;
    while trap.elapsed() < Duration::from_secs(12) {
        let d = db(&lab);
        assert_eq!(
            pod(&d, "db-1")["phase"],
            "Pending",
            "the template alone moved the pod: {d:#}"
        );
        worst = worst.max(commits(&d));
        std::thread::sleep(Duration::from_secs(1));
    }
    let d = db(&lab);
    assert_eq!(
        commits(&d),
        0.0,
        "commits came back without the pod: {}",
        line(&d)
    );
    assert_eq!(worst, 0.0, "commits flowed during the trap");
    assert_eq!(d["database"]["template"]["node_selector"], serde_json::json!({}));
    assert_eq!(
        d["database"]["standby_pod"]["node_selector"]["lab/disk"], "nvme",
        "{d:#}"
    );
    eprintln!("12 s after the template fix alone: {}", line(&d));

    // The right fix: delete the stuck pod by name; it is made again from the fixed template, catches up,
    // and the commits flow (the primary still names db-1: the fix does not need to touch it).
    let fixed = Instant::now();
    lab.ok(&["db", "delete-pod", "db-1"]);
    let d = wait_db(
        &lab,
        "commits back after deleting db-1",
        Duration::from_secs(60),
        |d| pod(d, "db-1")["ready"] == true && commits(d) > 5.0,
    );
    assert_eq!(d["database"]["synchronous_standby_names"], "\"db-1\"");
    eprintln!(
        "right fix: commits back {:.1} s after the delete: {}",
        fixed.elapsed().as_secs_f64(),
        line(&d)
    );

    // The ledger keeps the fault's changes and both remediations; clearing puts the primary back.
    let changes = std::fs::read_to_string(&ledger).unwrap();
    for want in ["synchronous_standby_names", "template node selector", "deleted"] {
        assert!(changes.contains(want), "ledger lacks {want:?}:\n{changes}");
    }
    lab.ok(&["fault", "clear", "--all"]);
    let d = db(&lab);
    assert_eq!(d["database"]["synchronous_standby_names"], "", "{d:#}");
    wait_db(&lab, "commits after the clear", Duration::from_secs(15), |d| {
        commits(d) > 5.0
    });

    lab.down();
    let left = lab.leftovers(&ports);
    assert!(left.is_empty(), "left behind: {left:?}");
    eprintln!("wall time {:.0} s", start.elapsed().as_secs_f64());
}
