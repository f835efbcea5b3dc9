//! Reliability end to end: the lab is safe to run again and again. A crash matrix (SIGKILL of the `lab`
//! command at each step of `up`, during `fault inject`, `fault clear` and `drill run`; of a rank, a storage
//! server and the supervisor), a corrupted state folder, and the security checks (loopback only, no
//! secret in any log or report, only the delay container holds NET_ADMIN). After each crash `lab status`
//! tells the truth or names what is wrong, killed ranks and storage servers come back, no dataset shard or
//! checkpoint is lost (checksums compared with `lab-seeder --verify`), and `lab down` leaves nothing.
//!
//! Covered elsewhere and not repeated here: up/status/down leftovers, a killed supervisor with an intact
//! record, bad `lab up` flags, loopback listeners and the 0700 folder (`local_lab.rs`); bad fault input and
//! Ctrl-C during an inject (`faults.rs`); Ctrl-C during a drill and invalid drill files (`drills.rs`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lab_model::Snapshot;
use lab_model::status::{Phase, Role};
use lab_runtime_local::cgroup::{Cgroups, SYS_CGROUP};
use lab_tests::{Lab, bin_dir, lines_until_injected, pct, serial, summary, text, wait_until};
use serde_json::Value;

fn sigkill(pid: u32) {
    signal(pid, "-KILL");
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid} failed");
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// Waits until `pid` is gone (or a zombie), for at most 30 s.
fn wait_dead(pid: u32, what: &str) {
    let start = Instant::now();
    while alive(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what} ({pid}) outlived SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_json(path: &Path) -> Value {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&b).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The pid the supervisor recorded for instance `name` (`rank-2`, `storage-0`, `storage-0-proxy`).
fn pid_of(lab: &Lab, name: &str) -> u32 {
    let table = read_json(&lab.dir().join("procs.json"));
    table
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .and_then(|r| r["pid"].as_u64())
        .unwrap_or_else(|| panic!("no {name} in procs.json: {table}")) as u32
}

fn supervisor_pid(lab: &Lab) -> u32 {
    read_json(&lab.dir().join("supervisor.json"))[0]["pid"]
        .as_u64()
        .unwrap() as u32
}

/// Waits for `child` at most `deadline`; kills it (by its pid) and fails if it is still running then.
fn wait_bounded(mut child: Child, what: &str, deadline: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{what} did not finish within {deadline:?}:\n{}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// An output that is not a panic: a finished command whose stderr has no Rust panic message.
fn no_panic(out: &Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked at") && out.status.code() != Some(101),
        "{what} panicked:\n{}",
        text(out)
    );
}

fn curl(url: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-m", "5", url])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The sum of `name` over every series whose labels contain all of `labels`, across every running rank.
fn rank_metric(lab: &Lab, name: &str, labels: &[&str]) -> f64 {
    let spec = read_json(&lab.dir().join("spec.json"));
    let mut total = 0.0;
    for (_, ports) in spec["rank_ports"].as_object().unwrap() {
        let port = ports["metrics"].as_u64().unwrap();
        let body = curl(&format!("http://127.0.0.1:{port}/metrics"));
        for line in body.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap_or((line, ""));
            let metric = series.split('{').next().unwrap_or("");
            if metric == name && labels.iter().all(|l| series.contains(l)) {
                total += value.parse::<f64>().unwrap_or(0.0);
            }
        }
    }
    total
}

/// `lab-seeder --verify` against the lab's storage: every shard read back and checked against the manifest
/// and its own checksums, and the checkpoint decoded with its checksums. Fails the test if anything does not
/// verify; returns the shard CRC32s and the checkpoint's step and CRC32.
fn verify_storage(lab: &Lab) -> Value {
    let cfg = read_json(&lab.dir().join("lab.json"))["config"].clone();
    let master = format!("127.0.0.1:{}", cfg["master_port"]);
    // The supervisor seeds before any rank exists: for as many ranks as the node has GPUs.
    let ranks = cfg["gpus"].as_u64().unwrap().max(1).to_string();
    let seed = cfg["seed"].to_string();
    let out = Command::new(bin_dir().join("lab-seeder"))
        .args([
            "--master", &master, "--ranks", &ranks, "--seed", &seed, "--verify", "--wait", "60s",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the stored dataset does not verify:\n{}",
        text(&out)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["action"], "verified", "{v}");
    eprintln!(
        "storage verified: {} shards, {} bytes, checkpoint at step {} (crc32 {})",
        v["shards"], v["bytes"], v["verified"]["checkpoint_step"], v["verified"]["checkpoint_crc32"]
    );
    v
}

/// The data survived: the same shards with the same checksums, and a checkpoint no older than before.
fn same_data(before: &Value, after: &Value, what: &str) {
    assert_eq!(
        before["verified"]["shard_crc32"], after["verified"]["shard_crc32"],
        "{what}: shard checksums changed"
    );
    assert_eq!(before["manifest_fid"], after["manifest_fid"], "{what}");
    let step = |v: &Value| v["verified"]["checkpoint_step"].as_u64();
    if let Some(b) = step(before) {
        let a = step(after).unwrap_or_else(|| panic!("{what}: the checkpoint of step {b} is gone"));
        assert!(a >= b, "{what}: the checkpoint went back from step {b} to {a}");
    }
}

/// `lab status` tells the truth: every pod it calls Running has a live process, and the ranks it calls
/// Running are exactly the live `lab-rank` processes of the lab. Retries while a restart settles.
fn status_is_true(lab: &Lab, env: &Env) -> Snapshot {
    let start = Instant::now();
    loop {
        let out = env.run(lab, &["status", "--json", "--window", "2s"]);
        assert!(out.status.success(), "{}", text(&out));
        let s: Snapshot = serde_json::from_slice(&out.stdout).unwrap();
        let dead: Vec<String> = s
            .status
            .pods
            .iter()
            .filter(|p| p.phase == Phase::Running)
            .filter_map(|p| {
                p.pid
                    .filter(|pid| !alive(*pid))
                    .map(|pid| format!("{} (pid {pid})", p.name))
            })
            .collect();
        let running_ranks = s.status.ranks().filter(|p| p.phase == Phase::Running).count();
        let live_ranks = lab_tests::lab_processes(&lab.name)
            .iter()
            .filter(|p| p.ends_with(" lab-rank"))
            .count();
        if dead.is_empty() && running_ranks == live_ranks {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "lab status is not the truth: Running but dead {dead:?}; {running_ranks} ranks Running, {live_ranks} lab-rank processes\n{}",
            summary(&s)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The environment every command of a test runs with (a secret planted in it), and everything they printed.
struct Env {
    vars: Vec<(String, String)>,
    printed: std::cell::RefCell<String>,
}

impl Env {
    fn new(vars: &[(&str, &str)]) -> Env {
        Env {
            vars: vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            printed: Default::default(),
        }
    }

    fn command(&self, lab: &Lab, args: &[&str]) -> Command {
        let mut c = lab.command(args);
        for (k, v) in &self.vars {
            c.env(k, v);
        }
        c
    }

    fn keep(&self, out: &Output) {
        let mut p = self.printed.borrow_mut();
        p.push_str(&String::from_utf8_lossy(&out.stdout));
        p.push_str(&String::from_utf8_lossy(&out.stderr));
    }

    fn run(&self, lab: &Lab, args: &[&str]) -> Output {
        let out = self.command(lab, args).output().unwrap();
        self.keep(&out);
        no_panic(&out, &format!("lab {}", args.join(" ")));
        out
    }

    fn ok(&self, lab: &Lab, args: &[&str]) -> String {
        let out = self.run(lab, args);
        assert!(
            out.status.success(),
            "lab {} failed:\n{}",
            args.join(" "),
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `lab ARGS`, expecting it to fail with a message containing every one of `want`.
    fn fails(&self, lab: &Lab, args: &[&str], want: &[&str]) -> String {
        let out = self.run(lab, args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !out.status.success(),
            "lab {} should fail:\n{}",
            args.join(" "),
            text(&out)
        );
        for w in want {
            assert!(
                err.contains(w),
                "lab {}: want {w:?} in:\n{}",
                args.join(" "),
                text(&out)
            );
        }
        err
    }

    fn wait_for(
        &self,
        lab: &Lab,
        what: &str,
        deadline: Duration,
        cond: impl Fn(&Snapshot) -> bool,
    ) -> Snapshot {
        let next = || {
            let out = self.run(lab, &["status", "--json", "--window", "2s"]);
            assert!(out.status.success(), "{}", text(&out));
            serde_json::from_slice(&out.stdout).unwrap()
        };
        wait_until(what, deadline, next, cond)
    }

    fn recovered(&self, lab: &Lab, what: &str) -> Snapshot {
        let s = self.wait_for(lab, what, Duration::from_secs(240), |s| {
            pct(s) >= 90.0 && s.status.ranks_ready() == (4, 4)
        });
        eprintln!(
            "{what}: back at {:.0}% of baseline (step {}, checkpoint {:?}, steps lost in all {})",
            pct(&s),
            s.training.step,
            s.training.checkpoint_step,
            s.training.steps_lost
        );
        s
    }
}

/// Polls the ledger until it contains `needle`; returns false if `child` ended first or time ran out.
fn ledger_shows(lab: &Lab, child: &mut Child, needle: &str, deadline: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if std::fs::read_to_string(lab.dir().join("ledger.json")).is_ok_and(|l| l.contains(needle)) {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// SIGKILLs `child` if it is still running and reaps it; false if it had already finished.
fn kill_mid(child: &mut Child) -> bool {
    if child.try_wait().unwrap().is_some() {
        return false;
    }
    sigkill(child.id());
    let _ = child.wait();
    true
}

/// A fault whose inject or clear was killed half-way: its ledger entry (id starting `prefix`) is left in
/// `phase`, and `lab fault status` shows that phase.
fn assert_unfinished(env: &Env, lab: &Lab, prefix: &str, phase: &str) {
    let active = active_entries(lab);
    assert!(
        active
            .iter()
            .any(|e| e.starts_with(prefix) && e.ends_with(&format!(" {phase}"))),
        "{active:?}"
    );
    let st = env.ok(lab, &["fault", "status"]);
    assert!(
        st.contains(phase),
        "fault status must show the unfinished {phase}:\n{st}"
    );
}

/// The ledger's entries still active (injecting, injected or clearing), as `id phase`.
fn active_entries(lab: &Lab) -> Vec<String> {
    let l = read_json(&lab.dir().join("ledger.json"));
    l["faults"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| matches!(e["phase"].as_str(), Some("injecting" | "injected" | "clearing")))
        .map(|e| format!("{} {}", e["id"].as_str().unwrap(), e["phase"].as_str().unwrap()))
        .collect()
}

/// A short drill (small warm-up and baseline windows) so that a test can afford to run it.
const QUICK_DRILL: &str = "\
name: quick-slow-storage
description: storage-1 answers 300 ms late; the lab's own clear fixes it.
seed: 42
warmup: 2s
baseline: 6s
steps:
  - inject:
      kind: slow-storage
      server: 1
      delay: 300ms
  - expect:
      signals: [latency]
  - remediate:
  - verify:
";

#[test]
fn crash_matrix_on_a_running_lab_loses_nothing_and_down_leaves_nothing() {
    let _one = serial();
    let work = tempfile::tempdir().unwrap();
    // Secrets in the environment of every command: none may reach a log, a report or the console.
    let secret = format!("lab-test-secret-{}-{}", std::process::id(), lab_tests_nonce());
    let token = format!("lab-test-bearer-{}", lab_tests_nonce());
    let kubeconfig = work.path().join("kubeconfig");
    std::fs::write(&kubeconfig, fake_kubeconfig(&token, 9)).unwrap();
    let env = Env::new(&[
        ("LAB_TEST_SECRET", &secret),
        ("KUBECONFIG", kubeconfig.to_str().unwrap()),
        ("LAB_API_TOKEN", &token),
    ]);
    let mut lab = Lab::new("e2e-crash");
    env.ok(&lab, &["up", "--runtime", "local"]);
    let ports = lab.ports();
    env.wait_for(&lab, "a steady job", Duration::from_secs(120), |s| pct(s) >= 80.0);
    let v0 = verify_storage(&lab);
    assert_eq!(v0["shards"], 16, "{v0}");

    // A rank killed outright is restarted by the supervisor (counted), and the job resumes.
    let victim = pid_of(&lab, "rank-2");
    sigkill(victim);
    let s = env.wait_for(&lab, "rank-2 restarted", Duration::from_secs(60), |s| {
        s.status
            .ranks()
            .any(|p| p.index == Some(2) && p.restarts >= 1 && p.pid.is_some_and(|p| p != victim))
    });
    eprintln!(
        "rank-2 killed: {}",
        summary(&s).lines().find(|l| l.contains("rank-2")).unwrap_or("")
    );
    env.recovered(&lab, "after SIGKILL of rank-2");
    status_is_true(&lab, &env);
    let v1 = verify_storage(&lab);
    same_data(&v0, &v1, "after SIGKILL of rank-2");

    // A storage server killed outright (the one that also holds the checkpoint) comes back with its data.
    let victim = pid_of(&lab, "storage-0");
    sigkill(victim);
    env.wait_for(
        &lab,
        "storage-0 restarted and Ready",
        Duration::from_secs(90),
        |s| {
            s.status
                .pods
                .iter()
                .any(|p| p.name == "storage-0" && p.role == Role::StorageServer && p.restarts >= 1 && p.ready)
        },
    );
    env.recovered(&lab, "after SIGKILL of storage-0");
    status_is_true(&lab, &env);
    let v2 = verify_storage(&lab);
    same_data(&v1, &v2, "after SIGKILL of storage-0");
    let checksum_errors = rank_metric(
        &lab,
        lab_model::metrics::STORAGE_READ_ERRORS,
        &["kind=\"checksum\""],
    );
    let verified = rank_metric(&lab, lab_model::metrics::STORAGE_CHECKSUMS_VERIFIED, &[]);
    assert_eq!(checksum_errors, 0.0, "ranks read data that failed its checksum");
    assert!(verified > 0.0, "the ranks verified no row at all");

    // A rank that stops answering (SIGSTOP: the kernel still accepts connections to its metrics port, the
    // rank never reads them): `lab status` answers within its own deadlines and names the silent endpoint.
    let frozen = pid_of(&lab, "rank-1");
    signal(frozen, "-STOP");
    let t = Instant::now();
    let out = wait_bounded(
        env.command(&lab, &["status", "--json", "--window", "2s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        "lab status with a frozen rank",
        Duration::from_secs(30),
    );
    let answered = t.elapsed();
    signal(frozen, "-CONT");
    env.keep(&out);
    assert!(out.status.success(), "{}", text(&out));
    let s: Snapshot = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        s.scrape_errors.iter().any(|e| e.starts_with("rank-1")),
        "the silent rank-1 is not named: {:?}",
        s.scrape_errors
    );
    eprintln!(
        "lab status with rank-1 stopped answered in {:.1} s: {:?}",
        answered.as_secs_f64(),
        s.scrape_errors
    );
    env.recovered(&lab, "after rank-1 was stopped and continued");

    // The `lab` command killed in the middle of an inject: the ledger says so, and a clear restores.
    let mut child = env
        .command(&lab, &["fault", "inject", "slow-storage"])
        .spawn()
        .unwrap();
    assert!(
        ledger_shows(&lab, &mut child, "\"kind\": \"delay\"", Duration::from_secs(30)),
        "the inject never recorded its before value"
    );
    // Killed once the delay is on the proxy, while the inject proves it (five reads at 300 ms): the
    // half-made fault then has something to restore.
    let start = Instant::now();
    while lab.proxy_delay_ms(1) != 300.0 && child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the inject never set the delay"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        kill_mid(&mut child),
        "the slow-storage inject finished before it could be killed"
    );
    assert_unfinished(&env, &lab, "slow-storage-", "injecting");
    env.fails(&lab, &["fault", "inject", "slow-storage"], &["already injected"]);
    env.ok(&lab, &["fault", "clear", "--all"]);
    assert_eq!(lab.proxy_delay_ms(1), 0.0, "the delay outlived clear --all");
    assert!(active_entries(&lab).is_empty(), "{:?}", active_entries(&lab));

    // Killed half-way through the unplaceable-rank inject: the supervisor is stopped as soon as the ledger
    // holds the values the inject replaces, so the command is certainly waiting on one of its changes
    // (scale to 5, then world size 5) when it dies. The change it had sent is applied once the supervisor
    // continues: a half-made fault, which `lab status` must show as it is and `clear --all` must undo.
    let sup = supervisor_pid(&lab);
    let mut child = env
        .command(&lab, &["fault", "inject", "unplaceable-rank"])
        .spawn()
        .unwrap();
    let seen = ledger_shows(&lab, &mut child, "\"kind\": \"ranks\"", Duration::from_secs(30));
    signal(sup, "-STOP");
    std::thread::sleep(Duration::from_secs(1));
    let killed = kill_mid(&mut child);
    signal(sup, "-CONT");
    assert!(
        seen && killed,
        "the unplaceable-rank inject was not caught under way"
    );
    assert!(
        active_entries(&lab).iter().any(|e| e.ends_with(" injecting")),
        "{:?}",
        active_entries(&lab)
    );
    let s = status_is_true(&lab, &env);
    eprintln!(
        "unplaceable-rank inject killed half-way: {} ranks wanted, world size {}",
        s.status.ranks_desired, s.status.world_size
    );
    assert_eq!(s.status.ranks_desired, 5, "{}", summary(&s));
    env.ok(&lab, &["fault", "clear", "--all"]);
    let s = env.recovered(&lab, "after a killed unplaceable-rank inject and clear --all");
    assert_eq!((s.status.ranks_desired, s.status.world_size), (4, 4));

    // Killed in the middle of a clear. The proxy whose delay is being removed is stopped first, so the clear
    // is certainly under way (its request to the proxy waits) when the command dies.
    env.ok(&lab, &["fault", "inject", "slow-storage"]);
    let proxy = pid_of(&lab, "storage-1-proxy");
    signal(proxy, "-STOP");
    let mut child = env.command(&lab, &["fault", "clear", "--all"]).spawn().unwrap();
    let seen = ledger_shows(
        &lab,
        &mut child,
        "\"phase\": \"clearing\"",
        Duration::from_secs(20),
    );
    let killed = kill_mid(&mut child);
    signal(proxy, "-CONT");
    assert!(seen && killed, "the clear was not caught under way");
    assert_unfinished(&env, &lab, "slow-storage-", "clearing");
    env.ok(&lab, &["fault", "clear", "--all"]);
    assert!(active_entries(&lab).is_empty());
    assert_eq!(lab.proxy_delay_ms(1), 0.0, "the delay outlived the second clear");
    env.recovered(&lab, "after a killed clear and clear --all");

    // Killed in the middle of a drill, right after its inject: nothing cleans up for it but clear --all.
    let drill_file = work.path().join("quick.yaml");
    std::fs::write(&drill_file, QUICK_DRILL).unwrap();
    let drill_path = drill_file.to_str().unwrap();
    let mut child = env
        .command(&lab, &["drill", "run", drill_path])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    lines_until_injected(child.stdout.take().unwrap());
    assert!(kill_mid(&mut child), "the drill ended before it could be killed");
    assert!(
        lab.proxy_delay_ms(1) >= 300.0,
        "the drill's fault should still be applied"
    );
    let st = env.ok(&lab, &["fault", "status"]);
    assert!(st.contains("slow-storage"), "{st}");
    env.ok(&lab, &["fault", "clear", "--all"]);
    assert_eq!(lab.proxy_delay_ms(1), 0.0);
    env.recovered(&lab, "after a killed drill and clear --all");

    // The same drill run to completion, with its reports, and the incident bundle: inspected for secrets.
    let report = work.path().join("report.json");
    let junit = work.path().join("report.xml");
    env.ok(
        &lab,
        &[
            "drill",
            "run",
            drill_path,
            "--report",
            report.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    assert_eq!(read_json(&report)["passed"], true);
    env.ok(&lab, &["incident", "--json"]);
    let v3 = verify_storage(&lab);
    same_data(&v2, &v3, "after the faults and drills");

    // Remediations with values the lab cannot take are refused with a reason and change nothing.
    let spec_before = std::fs::read(lab.dir().join("spec.json")).unwrap();
    let ledger_before = std::fs::read(lab.dir().join("ledger.json")).unwrap();
    for (args, want) in [
        (&["scale", "ranks", "0"][..], "rank count"),
        (&["scale", "ranks", "65"], "rank count"),
        (&["config", "world-size", "0"], "world size"),
        (&["resize", "rank", "9", "--cpu", "100m"], "out of range"),
        (&["resize", "rank", "1", "--cpu", "0m"], "cpu quantity"),
        (&["restart", "rank", "9"], "out of range"),
        (&["apply", "--cpu", "0m"], "cpu quantity"),
    ] {
        let err = env.fails(&lab, args, &[]);
        assert!(
            err.to_lowercase().contains(want),
            "lab {}: want {want:?} in {err}",
            args.join(" ")
        );
    }
    assert_eq!(std::fs::read(lab.dir().join("spec.json")).unwrap(), spec_before);
    assert_eq!(
        std::fs::read(lab.dir().join("ledger.json")).unwrap(),
        ledger_before
    );

    // Corrupted files while the lab runs. A garbage spec: the supervisor holds the truth and rewrites it.
    std::fs::write(lab.dir().join("spec.json"), b"\x00garbage{").unwrap();
    env.ok(&lab, &["status"]);
    env.ok(&lab, &["scale", "ranks", "4"]);
    read_json(&lab.dir().join("spec.json"));
    // A garbage ledger: faults are refused with a clear reason and nothing is applied; status still works.
    let ledger = lab.dir().join("ledger.json");
    let saved = std::fs::read(&ledger).unwrap();
    std::fs::write(&ledger, &saved[..saved.len() / 2]).unwrap();
    env.fails(&lab, &["fault", "inject", "slow-storage"], &["ledger", "corrupt"]);
    assert_eq!(lab.proxy_delay_ms(1), 0.0, "a refused inject must apply nothing");
    env.fails(&lab, &["fault", "clear", "--all"], &["ledger", "corrupt"]);
    env.fails(&lab, &["fault", "status"], &["ledger", "corrupt"]);
    env.ok(&lab, &["status"]);
    std::fs::write(&ledger, &saved).unwrap();
    // A garbage record: every command says so and points at `lab down`.
    let record = lab.dir().join("lab.json");
    let saved = std::fs::read(&record).unwrap();
    std::fs::write(&record, b"{\"name\": \"e2e-cr").unwrap();
    for args in [
        &["status"][..],
        &["fault", "clear", "--all"],
        &["fault", "status"],
        &["incident"],
    ] {
        env.fails(&lab, args, &["corrupt record", "lab down"]);
    }
    std::fs::write(&record, &saved).unwrap();
    env.ok(&lab, &["status"]);

    // Security while it runs: every listener of every process of the lab is on loopback.
    let pids: Vec<u32> = lab_tests::lab_processes(&lab.name)
        .iter()
        .filter_map(|p| p.split(' ').next()?.parse().ok())
        .collect();
    let listeners = lab_tests::listeners_of(&pids);
    assert!(listeners.len() >= 15, "{listeners:?}");
    assert!(
        listeners.iter().all(|l| l.starts_with("127.0.0.1:")),
        "{listeners:?}"
    );

    // No secret in the lab's folder (logs, records), the reports, or anything a command printed.
    let mut leaks = Vec::new();
    for f in files_under(&lab.dir()) {
        if f.starts_with(lab.dir().join("data")) {
            continue; // the dataset and SeaweedFS' own volumes: bytes the lab generated
        }
        leaks.extend(find_secrets(&f, &[&secret, &token]));
    }
    for f in [&report, &junit] {
        leaks.extend(find_secrets(f, &[&secret, &token]));
    }
    let printed = env.printed.borrow().clone();
    for s in [&secret, &token] {
        if printed.contains(s.as_str()) {
            leaks.push(format!("a command's output holds {s}"));
        }
    }
    assert!(leaks.is_empty(), "secrets leaked: {leaks:?}");

    // The supervisor killed: the lab's processes run on unsupervised and every command says why.
    let sup = supervisor_pid(&lab);
    sigkill(sup);
    wait_dead(sup, "the supervisor");
    env.fails(&lab, &["status"], &["supervisor", "lab down"]);
    env.fails(
        &lab,
        &["fault", "inject", "slow-storage"],
        &["supervisor", "lab down"],
    );
    // Nothing is injected, and the ledger says so without the supervisor.
    let out = env.ok(&lab, &["fault", "clear", "--all"]);
    assert!(out.contains("nothing to clear"), "{out}");
    assert!(
        lab.dir().join("supervisor.sock").exists(),
        "the stale socket is part of this case"
    );
    let victim = pid_of(&lab, "rank-3");
    sigkill(victim);
    wait_dead(victim, "rank-3");
    // ... and then the record and the process table are garbage too: down still finds and stops everything
    // by the lab's name, removes its cgroups and its folder.
    std::fs::write(&record, b"\xff\xfe not json").unwrap();
    std::fs::write(lab.dir().join("procs.json"), b"[{\"pid\": ").unwrap();
    env.fails(&lab, &["status"], &["corrupt record"]);
    assert!(!lab_tests::lab_processes(&lab.name).is_empty());
    let out = lab.down();
    env.printed.borrow_mut().push_str(&out);
    let left = lab.leftovers(&ports);
    assert!(left.is_empty(), "left behind after lab down: {left:?}");
}

fn lab_tests_nonce() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                todo.push(e.path());
            } else if ft.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

fn find_secrets(path: &Path, secrets: &[&str]) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap_or_default();
    secrets
        .iter()
        .filter(|s| bytes.windows(s.len()).any(|w| w == s.as_bytes()))
        .map(|s| format!("{} holds {s}", path.display()))
        .collect()
}

/// A kubeconfig whose user authenticates with `token`, for a cluster at 127.0.0.1 on a port nothing
/// listens on (`port` is a low, privileged port no test opens).
fn fake_kubeconfig(token: &str, port: u16) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: https://127.0.0.1:{port}
    insecure-skip-tls-verify: true
users:
- name: fake
  user:
    token: {token}
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
    namespace: lab
current-context: fake
"
    )
}

#[test]
fn the_kubernetes_runtime_never_prints_a_bearer_token() {
    let _one = serial();
    let work = tempfile::tempdir().unwrap();
    let token = format!("lab-test-bearer-{}", lab_tests_nonce());
    let lab = Lab::new("e2e-token");
    let env = Env::new(&[]);

    // A cluster that does not answer: the error names the server, never the credentials.
    let good = work.path().join("kubeconfig");
    std::fs::write(&good, fake_kubeconfig(&token, 9)).unwrap();
    let g = good.to_str().unwrap();
    let out = env.run(&lab, &["up", "--kubeconfig", g, "--wait-timeout", "5s"]);
    assert!(!out.status.success(), "{}", text(&out));
    // It created nothing, so it rolled nothing back and forgot the lab: the name is free again.
    assert!(
        !lab.dir().exists(),
        "a failed up that created nothing left {}",
        lab.dir().display()
    );
    // With a context that does not exist.
    let out = env
        .command(&lab, &["up", "--kubeconfig", g, "--context", "nope"])
        .output()
        .unwrap();
    env.keep(&out);
    assert!(!out.status.success(), "{}", text(&out));
    // A kubeconfig that is not YAML, broken right after the token.
    let broken = work.path().join("broken");
    std::fs::write(&broken, format!("users:\n- user:\n    token: {token}\n  : [\n")).unwrap();
    let out = env.run(&lab, &["up", "--kubeconfig", broken.to_str().unwrap()]);
    assert!(!out.status.success(), "{}", text(&out));
    // A kubeconfig whose token is not a string (the parser quotes what it did not expect).
    let typed = work.path().join("typed");
    std::fs::write(
        &typed,
        fake_kubeconfig(&token, 9).replace(&format!("token: {token}"), &format!("token: [{token}]")),
    )
    .unwrap();
    let out = env.run(&lab, &["up", "--kubeconfig", typed.to_str().unwrap()]);
    assert!(!out.status.success(), "{}", text(&out));

    // A failed `lab up --retain` keeps its record (see docs/reliability.md): status and down reach for
    // the cluster with the same credentials, and must not print them either.
    let out = env.run(
        &lab,
        &["up", "--kubeconfig", g, "--wait-timeout", "5s", "--retain"],
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(lab.dir().exists(), "--retain kept no record: {}", text(&out));
    for args in [&["status"][..], &["down"]] {
        let out = env.run(&lab, args);
        assert!(!out.status.success(), "{}", text(&out));
    }

    let printed = env.printed.borrow().clone();
    assert!(
        !printed.contains(&token),
        "a bearer token was printed:\n{printed}"
    );
    assert!(
        printed.contains("127.0.0.1:9") || printed.contains("API server"),
        "{printed}"
    );
    // The retained up created nothing on a cluster that never answered: its folder is all there is, and
    // removing it by hand frees the name, as docs/reliability.md says.
    std::fs::remove_dir_all(lab.dir()).unwrap();
}

#[test]
fn every_manifest_grants_added_capabilities_only_to_the_delay_container() {
    use lab_runtime_kube::actions::delay_container;
    use lab_runtime_kube::manifests::{self, Settings};

    // Every file in manifests/ is one of the embedded templates checked here.
    let embedded = [
        manifests::NAMESPACE,
        manifests::CONFIG,
        manifests::STORAGE_MASTER,
        manifests::STORAGE_SERVER,
        manifests::SEEDER,
        manifests::RANKS,
        manifests::PROMETHEUS,
        manifests::FOREIGN_JOB,
        manifests::DATABASE,
    ];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
    for f in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = f.path();
        if p.extension().is_some_and(|e| e == "yaml") {
            let body = std::fs::read_to_string(&p).unwrap();
            assert!(
                embedded.contains(&body.as_str()),
                "{} is not rendered by the runtime",
                p.display()
            );
        }
    }

    let s = Settings {
        namespace: "straggler-lab-sec".into(),
        lab: "sec".into(),
        image: lab_runtime_kube::DEFAULT_IMAGE.into(),
        prometheus_image: lab_runtime_kube::DEFAULT_PROMETHEUS_IMAGE.into(),
        pull_policy: "IfNotPresent".into(),
        ranks: 5,
        world_size: 5,
        storage_servers: 3,
        seed: 42,
        gpus: 4,
        watchdog_seconds: 120,
        cpu: lab_model::Millicores(400),
        gpu_resource: "lab.dev/gpu".into(),
        control_token: "0123abcd".into(),
    };
    let mut objects = s.namespace().unwrap();
    objects.extend(s.config().unwrap());
    objects.extend(s.storage().unwrap());
    objects.extend(s.seeder().unwrap());
    objects.extend(s.ranks().unwrap());
    objects.extend(s.prometheus("groups: []\n").unwrap());
    // The competing-job fault's foreign job, a Deployment of its own.
    objects.extend(
        s.foreign_job(&lab_model::jobs::ForeignJob {
            name: "nightly-etl".into(),
            server: 1,
            threads: 64,
            rate: None,
        })
        .unwrap(),
    );
    // The database beside the job (`lab up --runtime kind --database`).
    objects.extend(
        s.database(
            lab_runtime_kube::DEFAULT_DB_IMAGE,
            lab_runtime_kube::kind::POD_SUBNET,
        )
        .unwrap(),
    );

    // Every container of every pod the lab deploys, plus the ephemeral container the slow-storage fault adds.
    let mut containers: Vec<(String, Value)> = Vec::new();
    for o in &objects {
        let kind = o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
        let name = o.metadata.name.clone().unwrap_or_default();
        let spec = match kind.as_str() {
            "Pod" => &o.data["spec"],
            _ => &o.data["spec"]["template"]["spec"],
        };
        assert!(
            spec["hostNetwork"].is_null() && spec["hostPID"].is_null(),
            "{kind}/{name} shares a host namespace"
        );
        for key in ["initContainers", "containers"] {
            for c in spec[key].as_array().into_iter().flatten() {
                containers.push((
                    format!("{kind}/{name}/{}", c["name"].as_str().unwrap_or("?")),
                    c.clone(),
                ));
            }
        }
    }
    assert!(
        containers.len() >= 6,
        "{:?}",
        containers.iter().map(|c| &c.0).collect::<Vec<_>>()
    );
    let script = "tc qdisc replace dev eth0 root netem delay 300ms 0ms";
    containers.push((
        "ephemeral/delay".into(),
        delay_container("lab-delay-1", "img", "IfNotPresent", script),
    ));

    let mut holders = Vec::new();
    for (name, c) in &containers {
        let sc = &c["securityContext"];
        assert!(
            sc["privileged"].is_null() || sc["privileged"] == false,
            "{name} is privileged"
        );
        assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]), "{name}");
        if let Some(add) = sc["capabilities"]["add"].as_array() {
            holders.push((name.clone(), add.clone()));
        }
    }
    assert_eq!(
        holders,
        vec![("ephemeral/delay".to_string(), vec![Value::from("NET_ADMIN")])],
        "only the delay container may add a capability, and only NET_ADMIN"
    );
}

#[test]
fn a_corrupted_state_folder_gives_clear_errors_and_down_still_cleans_up() {
    let _one = serial();
    let env = Env::new(&[]);

    // A folder with no record (a crash before `lab up` wrote one): nothing is running, and down removes it.
    let lab = Lab::new("e2e-norecord");
    std::fs::create_dir_all(lab.dir().join("logs")).unwrap();
    for args in [
        &["status"][..],
        &["fault", "inject", "slow-storage"],
        &["fault", "status"],
        &["incident"],
    ] {
        env.fails(&lab, args, &["no lab named", "lab up"]);
    }
    let out = env.ok(&lab, &["down"]);
    assert!(out.contains("is down"), "{out}");
    assert!(!lab.dir().exists());
    let out = env.ok(&lab, &["down"]);
    assert!(out.contains("nothing to stop"), "{out}");

    // A truncated record, a stale socket, a garbage process table, and a process of the lab still running
    // in the lab's cgroup: every command says what is wrong without a panic, and down stops and removes it all.
    let mut lab = Lab::new("e2e-corrupt");
    let dir = lab.dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("lab.json"),
        b"{\"name\": \"e2e-corrupt\", \"runtime\": \"lo",
    )
    .unwrap();
    std::fs::write(dir.join("procs.json"), b"not json").unwrap();
    std::fs::write(dir.join("spec.json"), b"\x00\x01").unwrap();
    std::fs::write(dir.join("ledger.json"), b"{\"faults\": [").unwrap();
    drop(std::os::unix::net::UnixListener::bind(dir.join("supervisor.sock")).unwrap());
    use std::os::unix::process::CommandExt;
    let mut stray = Command::new("sleep")
        .arg("600")
        .env("STRAGGLER_LAB", format!("{}@{}", lab.name, dir.display()))
        .process_group(0)
        .spawn()
        .unwrap();
    // The lab's group, made the way `lab up` makes it (the runtime's own discovery: cgroup v1 `cpu` or
    // `cpu,cpuacct`, or v2). A machine where the runtime cannot enforce CPU limits cannot run this tier
    // (throttled-rank needs them too): that is a failure that says so, not a skipped check.
    let cgroups = Cgroups::create(Path::new(SYS_CGROUP), &lab.name).unwrap_or_else(|why| {
        panic!(
            "the local runtime cannot enforce CPU limits here ({}): run the end-to-end tests as root, or with a delegated cgroup v2 subtree",
            why.0
        )
    });
    let group = cgroups.lab_root.clone();
    cgroups
        .create_child("rank-0", lab_model::Millicores(400))
        .unwrap();
    cgroups.add_process("rank-0", stray.id()).unwrap();
    assert_eq!(cgroups.processes("rank-0"), vec![stray.id()]);
    for args in [
        &["status"][..],
        &["status", "--json", "--window", "2s"],
        &["fault", "inject", "throttled-rank"],
        &["fault", "clear", "--all"],
        &["fault", "status"],
        &["scale", "ranks", "3"],
        &["incident", "--json"],
        &["drill", "run", "slow-storage"],
    ] {
        env.fails(&lab, args, &["corrupt record", "lab down"]);
    }
    assert!(alive(stray.id()), "a refused command must stop nothing");
    let out = lab.down();
    assert!(out.contains("is down"), "{out}");
    let status = stray.wait().unwrap();
    assert!(!status.success(), "the lab's stray process was not stopped");
    assert!(!dir.exists(), "down left the folder");
    assert!(!group.exists(), "down left the lab's cgroup {}", group.display());
    assert!(lab_tests::lab_processes(&lab.name).is_empty());
}

#[test]
fn bad_arguments_to_every_command_are_refused_and_touch_nothing() {
    let env = Env::new(&[]);
    let lab = Lab::new("e2e-args");
    for args in [
        &["--name", "..", "down"][..],
        &["--name", "../../tmp", "status"],
        &["--name", "", "fault", "clear", "--all"],
        &["--name", "x y", "up", "--runtime", "local"],
        &["scale", "ranks", "-1"],
        &["scale", "nodes", "3"],
        &["resize", "rank", "x", "--cpu", "100m"],
        &["resize", "rank", "1"],
        &["restart", "rank"],
        &["apply"],
        &["config", "world-size", "many"],
        &["status", "--window", "soon"],
        &["incident", "--window", "-1s"],
        &["fault", "clear"],
        &["fault", "clear", "x", "--all"],
        &["fault", "inject", "slow-storage", "--jitter", "lots"],
        &["fault", "inject", "throttled-rank", "--rank", "-2"],
        &["drill", "run"],
        &["drill", "run", "slow-storage", "--repeat", "0"],
        &["drill", "run", "slow-storage", "--repeat", "101"],
        &["drill", "validate", "/nonexistent/drill.yaml"],
        &["up", "--runtime", "local", "--port-base", "70000"],
        &["up", "--runtime", "local", "--baseline-timeout", "forever"],
        &["down", "--force"],
        &["no-such-command"],
    ] {
        let out = env.run(&lab, args);
        assert!(!out.status.success(), "lab {args:?} should fail:\n{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.trim().is_empty(),
            "lab {args:?}: no reason given:\n{}",
            text(&out)
        );
    }
    assert!(
        std::fs::read_dir(lab.state()).unwrap().next().is_none(),
        "a refused command created something in the state folder"
    );
}

/// The steps `lab up` prints (`✓ name`), in order; the CLI is killed right after the one named.
const UP_STEPS: [&str; 5] = [
    "preflight",
    "start supervisor",
    "start storage",
    "seed dataset",
    "start ranks",
];

#[test]
fn killing_lab_up_at_each_step_leaves_a_lab_that_status_reports_and_down_removes() {
    let _one = serial();
    let env = Env::new(&[]);
    let mut figures = Vec::new();
    for (i, after) in UP_STEPS.iter().enumerate() {
        let during = UP_STEPS
            .get(i + 1)
            .copied()
            .unwrap_or("wait for training baseline");
        let mut lab = Lab::new(&format!("e2e-upkill-{i}"));
        let mut child = env
            .command(&lab, &["up", "--runtime", "local"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = Vec::new();
        for line in BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = line.unwrap();
            let done = line.contains(&format!("✓ {after}"));
            assert!(
                !line.contains('✗'),
                "lab up failed before the kill: {line}\n{lines:#?}"
            );
            lines.push(line);
            if done {
                break;
            }
        }
        assert!(lines.last().is_some_and(|l| l.contains(after)), "{lines:#?}");
        let started = Instant::now();
        sigkill(child.id());
        let _ = child.wait();
        let ports = lab.ports();

        // Status answers (what is there, or that the supervisor is gone) and does not hang.
        let out = wait_bounded(
            env.command(&lab, &["status", "--json", "--window", "2s"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
            "lab status after a killed up",
            Duration::from_secs(30),
        );
        no_panic(&out, "lab status");
        let told = if out.status.success() {
            let s: Snapshot = serde_json::from_slice(&out.stdout).unwrap();
            let running: Vec<String> = s
                .status
                .pods
                .iter()
                .filter(|p| p.phase == Phase::Running)
                .map(|p| p.name.clone())
                .collect();
            for p in &s.status.pods {
                if p.phase == Phase::Running
                    && let Some(pid) = p.pid
                {
                    assert!(alive(pid), "{} reported Running with a dead pid {pid}", p.name);
                }
            }
            assert!(
                s.training.baseline.is_none(),
                "no baseline was learned: up was killed"
            );
            format!("{} pods Running: {}", running.len(), running.join(" "))
        } else {
            String::from_utf8_lossy(&out.stderr).trim().to_string()
        };
        // A second `lab up` of the same name refuses: the half-made lab is still there.
        if lab.dir().join("lab.json").exists() {
            env.fails(
                &lab,
                &["up", "--runtime", "local"],
                &["already running", "lab down"],
            );
        }
        lab.down();
        let left = lab.leftovers(&ports);
        assert!(
            left.is_empty(),
            "killed during {during}: left behind after lab down: {left:?}"
        );
        figures.push(format!(
            "killed during {during:<26} status: {told}; down took {:.1} s",
            started.elapsed().as_secs_f64()
        ));
    }
    for f in figures {
        eprintln!("{f}");
    }
}
