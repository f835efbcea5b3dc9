//! The competing-job fault end to end on the local runtime, on one lab: another team's job (its own
//! process and cgroup, not a rank) loads storage-1; the evidence names the client that loads it and the
//! server's own latency beside the ranks'; `lab job list/throttle/stop` see and fix it, and refuse what
//! is not a foreign job, a zero rate or garbage without changing anything; in the built-in drill the
//! look-alike's fix (draining storage-1, slow-disk's right fix) fails and the right fix (throttling that
//! job) then passes.

use std::time::{Duration, Instant};

use lab_model::Snapshot;
use lab_model::status::{Phase, Role};
use lab_tests::{Edits, Lab, drill_copy, pct, serial, trap_first};
use serde_json::Value;

const JOB: &str = "nightly-etl";

fn jobs(lab: &Lab) -> Vec<Value> {
    let out = lab.ok(&["job", "list", "--json"]);
    let doc = serde_json::from_str::<Value>(&out)
        .unwrap_or_else(|e| panic!("job list --json is not JSON ({e}):\n{out}"));
    assert_eq!(doc["format"], "straggler-lab.jobs/v1");
    doc["jobs"].as_array().expect("a list of jobs").clone()
}

fn job<'a>(list: &'a [Value], name: &str) -> Option<&'a Value> {
    list.iter().find(|j| j["name"] == name)
}

/// storage-1's reads by the foreign job, and by rank-1, in a snapshot.
fn client_reads(s: &Snapshot, client: &str) -> f64 {
    s.storage
        .iter()
        .find(|v| v.name == "storage-1")
        .and_then(|v| v.clients.iter().find(|c| c.client == client))
        .map_or(0.0, |c| c.reads_per_s)
}

fn own_p50(s: &Snapshot, server: &str) -> f64 {
    s.storage
        .iter()
        .find(|v| v.name == server)
        .and_then(|v| v.server_p50)
        .unwrap_or(f64::NAN)
}

#[test]
fn competing_job_loads_one_server_and_throttling_that_job_fixes_it() {
    let _one = serial();
    let start = Instant::now();
    let mut lab = Lab::up("competing-job-e2e", &[]);
    let ports = lab.ports();

    // Before the fault: one job, the training job, and it reads.
    let list = jobs(&lab);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["kind"], "training");
    assert!(list[0]["reads_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{list:?}");

    // Bad input is refused with a clear error, and changes nothing, not even the ledger.
    lab.refuses(
        &["fault", "inject", "competing-job", "--server", "7"],
        "out of range",
    );
    lab.refuses(
        &["fault", "inject", "competing-job", "--threads", "0"],
        "--threads",
    );
    lab.refuses(&["job", "stop", JOB], "no foreign job named");

    let base = lab.wait_steady();
    let out = lab.ok(&["fault", "inject", "competing-job"]);
    assert!(out.contains("proof:") && out.contains(JOB), "{out}");
    let injected = Instant::now();

    // Its own process, its own cgroup, its own name: not a rank, no GPU.
    let s = lab.snapshot();
    let pod = s
        .status
        .pods
        .iter()
        .find(|p| p.name == JOB)
        .expect("the job's pod");
    assert_eq!(pod.role, Role::ForeignJob);
    assert_eq!(pod.phase, Phase::Running);
    assert_eq!(pod.resources.gpus, 0);
    let pid = pod.pid.expect("its pid");
    assert!(s.status.ranks().all(|r| r.pid != Some(pid)));
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    assert!(cgroup.contains(JOB), "not in a cgroup of its own:\n{cgroup}");
    assert!(s.status.ranks().all(|r| r.ready), "a rank is not Ready");

    // The evidence, without naming the fault: storage-1 serves far more reads than its siblings, most
    // of them for a client that is not a rank, and its own latency stands out beside the ranks' view.
    let s = lab.wait_for(
        "storage-1 loaded by the foreign job, its own latency up",
        Duration::from_secs(40),
        |s| {
            client_reads(s, JOB) > 10.0 * client_reads(s, "rank-1").max(1.0)
                && own_p50(s, "storage-1") > 3.0 * own_p50(s, "storage-0")
        },
    );
    let v1 = s.storage.iter().find(|v| v.name == "storage-1").unwrap();
    let kinds: Vec<&str> = v1.clients.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(
        kinds.first(),
        Some(&"job"),
        "busiest client first: {:?}",
        v1.clients
    );
    let fault_pct = pct(&s);
    eprintln!(
        "under the fault: {fault_pct:.0}% of baseline; storage-1 serves {:.0}/s ({:?}); own p50 {:.1} ms vs \
         storage-0 {:.1} ms; ranks see {:.1} ms",
        v1.served_per_s.unwrap_or(f64::NAN),
        v1.clients,
        own_p50(&s, "storage-1") * 1e3,
        own_p50(&s, "storage-0") * 1e3,
        v1.client_p50.unwrap_or(f64::NAN) * 1e3
    );
    let status = lab.ok(&["status"]);
    assert!(
        status.contains("READS BY CLIENT") && status.contains("(job)"),
        "{status}"
    );
    let incident = lab.ok(&["incident", "--json"]);
    let bundle: Value = serde_json::from_str(&incident).unwrap();
    // The lab's own name (which the bundle carries) aside, nothing in it names the cause.
    let raw = incident.to_lowercase().replace(&lab.name, "");
    for word in ["competing", "inject", "fault"] {
        assert!(!raw.contains(word), "the bundle names {word:?}");
    }
    assert!(
        bundle["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["clients"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["client"] == JOB)),
        "{bundle:#}"
    );

    // `lab job`: the list shows it; throttling a rank, a zero rate or garbage is refused.
    let list = jobs(&lab);
    let j = job(&list, JOB).expect("the foreign job is listed");
    assert_eq!(j["kind"], "foreign");
    assert!(j["reads_per_s"].as_f64().unwrap_or(0.0) > 50.0, "{j}");
    lab.refuses(&["job", "throttle", "rank-1", "--rate", "5"], "not a foreign job");
    lab.refuses(
        &["job", "throttle", "training", "--rate", "5"],
        "not a foreign job",
    );
    lab.refuses(&["job", "stop", "rank-0"], "not a foreign job");
    lab.refuses(&["job", "throttle", JOB, "--rate", "0"], "more than 0");
    lab.refuses(&["job", "throttle", JOB, "--rate", "lots"], "not a number");
    lab.refuses(
        &["job", "throttle", "nope", "--rate", "5"],
        "no foreign job named",
    );

    // The right fix: throttle it, and the job comes back on its own signals.
    let out = lab.ok(&["job", "throttle", JOB, "--rate", "20"]);
    assert!(out.contains("20 reads/s"), "{out}");
    let back = lab.wait_for(
        "throughput back after the throttle",
        Duration::from_secs(60),
        |s| pct(s) >= 85.0 && client_reads(s, JOB) < 30.0,
    );
    eprintln!(
        "recovered {:.0} s after the inject, {:.0}% of baseline (before: {:.0} samples/s)",
        injected.elapsed().as_secs_f64(),
        pct(&back),
        base.training.baseline.map_or(f64::NAN, |b| b.samples_per_s)
    );
    let j = jobs(&lab);
    assert_eq!(job(&j, JOB).unwrap()["rate_limit"].as_f64(), Some(20.0));
    lab.ok(&["job", "stop", JOB]);
    assert!(job(&jobs(&lab), JOB).is_none());
    // The fault's clear finds the job gone and changes nothing more.
    lab.ok(&["fault", "clear", "--all"]);

    // The built-in drill: draining storage-1 first (the slow-disk fix: the ranks' data moves, and the
    // neighbour, reading the same needles through the master, follows it) must fail its verification;
    // throttling the neighbour then passes. Its trap's deadline is 30 s: the right fix was back 21 s after
    // the inject on kind, and within its verification's first seconds here.
    let file = lab.dir().parent().unwrap().join("competing-job-trap-first.yaml");
    let right = drill_copy(
        "competing-job",
        &Edits {
            command: Some("lab job throttle nightly-etl --rate 20"),
            ..Edits::default()
        },
    );
    std::fs::write(&file, trap_first(&right, "lab storage drain 1", "30s")).unwrap();
    let d = lab.passing_drill(&file);
    let verified: Vec<(bool, &str)> = lab_tests::verifications(&d)
        .into_iter()
        .map(|s| (s["ok"] == true, s["summary"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(verified.len(), 2, "{}", d["steps"]);
    assert!(
        !verified[0].0,
        "draining storage-1 must not fix a noisy neighbour: {}",
        verified[0].1
    );
    assert!(verified[1].0, "throttling the neighbour must: {}", verified[1].1);
    let changes: Vec<String> = d["remediations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["changes"].to_string())
        .collect();
    assert!(
        changes[0].contains("storage-1"),
        "the drain's changes: {}",
        changes[0]
    );
    eprintln!("drill figures: {}; the trap: {}", d["figures"], verified[0].1);
    lab.down();
    let left = lab.leftovers(&ports);
    assert!(left.is_empty(), "left behind: {left:?}");
    eprintln!("wall time {:.0} s", start.elapsed().as_secs_f64());
}
