//! The kind tier: the product's headline path on a real kind cluster.
//!
//! Bad input refused (no record, no cluster left) → `lab up --runtime kind --database --nodes 2` (GPUs split
//! 2 + 2, ranks on both nodes) → status, incident, console (in tmux) → Prometheus 3 in the cluster agrees
//! with the lab's alerts on a throttled rank (and, after each drill below, on the alerts the drill detected
//! its fault by) → a checkpoint request from another pod without the lab's
//! token refused, nothing changed → the seed's drills with their traps first → slow-storage with the
//! reference MCP agent → (with `LAB_E2E_ALL_DRILLS=1`) the other built-in drills: stuck-rollout with its
//! right fix and, as a drill of its own, its trap (which must fail); the others each with its trap first
//! (which must fail) and then its right fix (which must pass), through `exec` in the rank, storage and
//! database containers → unplaceable-rank last (its clear rolls every rank) → lab down → nothing left
//! (cluster and kind's network gone).
//!
//! It needs what `scripts/ci/kind-e2e.sh` prepares (Docker or the project's private engine, the kind CLI,
//! the node image, kubectl, the MCP SDK) and runs from there; run alone it fails, naming the script. The
//! script passes, besides its documented settings (`LAB_E2E_NAME`, `LAB_E2E_REPORTS`, `LAB_E2E_NODES`,
//! `LAB_E2E_ALL_DRILLS`, `LAB_E2E_KEEP`, `LAB_BIN`): `LAB_E2E_KIND=1` (the environment is ready),
//! `LAB_E2E_NODE_IMAGE` (the offline node image, empty for kind's pinned one) and `LAB_E2E_T0` (when the
//! script started, for one timeline in the log). Figures go to `figures.tsv` in the reports folder, after
//! the script's own; the script prints them and keeps them as a figures page.
//!
//! A failed drill is recorded and the tier goes on (so one red drill hides no other), failing at the end
//! with every one named; any other check that fails, or cannot be made, fails the tier where it stands.

use std::collections::BTreeSet;
use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use lab_model::status::RuntimeKind;
use lab_model::{Role, Snapshot};
use lab_telemetry::collector::{
    POD_LAST_EXIT_CODE, POD_RESTARTS, POD_STATUS_PHASE, POD_STATUS_UNSCHEDULABLE,
};
use lab_tests::{Edits, Lab, Tmux, drill_copy, poll, summary, text, trap_first};
use serde_json::Value;

/// stuck-rollout's verify deadline in this tier (the built-in's is 90 s). A trap fails only when the
/// deadline runs out, so the built-in's trap cost 166 s. The right fix (the lab's own clear: nothing
/// restarts) keeps the job training: on kind it was back 1.0 s after the remediation and verified its 100
/// steps in 16.8 s (147 ms steps, the machine at load 37); 30 s covers steps up to 300 ms. The trap with it
/// failed on the stall (0 % of baseline 30 s after `lab scale ranks 4`).
const STUCK_DEADLINE: &str = "30s";

/// The verify deadline of a trap tried before the right fix (`trap_first`). A trap fails only when it runs
/// out, so it is as long as the right fix needed there, no longer. Measured on kind (2026-12-05, load 11-25
/// from other builds, the kubelets' back-off at 1-2 s and rank settings by container restart), from the
/// right fix's remediation to back at baseline, after the trap: throttled-rank 1.3 s, slow-compute 2.9 s,
/// slow-storage 8.2 s, sync-replica 11.2 s (20 s), rank-hang 11.5 s, unplaceable-rank 14.2 s, competing-job
/// 18.7 s, slow-disk 19.4 s (30 s for these), rank-crash 29.5 s (35 s; 76.9 s when the back-off doubled to
/// minutes, 19.2 s with it capped at 10 s).
///
/// What each drill costs in this tier (same run, seconds, trap and right fix together): slow-storage 106,
/// throttled-rank 67, stuck-rollout 53 and its trap 83, slow-compute 89, rank-hang 84 (40 s trap then),
/// rank-crash 123 (60 s trap then), sync-replica 70, chained-week 76, slow-disk 131 (45 s trap then),
/// competing-job 110, unplaceable-rank 79: 1091 s of the tier's 1247 s (lab up 61 s, down 6 s). The
/// shorter trap deadlines above take about 50 s off. All eleven drills run here, once each with the trap
/// that tells the right fix from its look-alike: one run is what a change to the lab must not break. How
/// often each verdict is right is the rate script's (`scripts/bench/verdict-rates.sh RUNTIME=kind`: every
/// pair N times, as drills of their own, quiet and with a core busy), too long for CI: 11 drills x 2 fixes
/// x 5-10 runs at 60-130 s is 2-5 hours.
const TRAP_DEADLINE: &str = "30s";

/// What a copy of this tier's shortens: a 2 s warm-up and an 8 s baseline (as the local end-to-end test's
/// copies, `tests/e2e/rank_drills.rs`).
fn quick_start() -> Edits<'static> {
    Edits {
        warmup: Some("2s"),
        baseline: Some("8s"),
        ..Edits::default()
    }
}

/// [`quick_start`] and 50 good steps to verify instead of 100: a short copy.
fn short() -> Edits<'static> {
    Edits {
        consecutive_steps: Some(50),
        ..quick_start()
    }
}

/// The tier's settings, from the environment `scripts/ci/kind-e2e.sh` prepares.
struct Settings {
    name: String,
    reports: PathBuf,
    nodes: u32,
    node_image: Option<String>,
    all_drills: bool,
    keep: bool,
    exe: PathBuf,
    t0_unix: u64,
}

impl Settings {
    fn from_env() -> Settings {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        assert_eq!(
            var("LAB_E2E_KIND").as_deref(),
            Some("1"),
            "the kind tier needs the environment scripts/ci/kind-e2e.sh prepares (Docker, the kind CLI, \
             the node image, kubectl and the tools): run scripts/ci/kind-e2e.sh, which runs this test"
        );
        let need = |k: &str| {
            var(k).unwrap_or_else(|| {
                panic!("{k} is not set: scripts/ci/kind-e2e.sh sets it before running this test")
            })
        };
        let nodes: u32 = need("LAB_E2E_NODES")
            .parse()
            .unwrap_or_else(|e| panic!("LAB_E2E_NODES is not a number of nodes: {e}"));
        assert!(
            nodes >= 2,
            "LAB_E2E_NODES={nodes}: the tier runs the lab on at least 2 nodes"
        );
        Settings {
            name: need("LAB_E2E_NAME"),
            reports: PathBuf::from(need("LAB_E2E_REPORTS")),
            nodes,
            node_image: var("LAB_E2E_NODE_IMAGE"),
            all_drills: var("LAB_E2E_ALL_DRILLS").as_deref() == Some("1"),
            keep: var("LAB_E2E_KEEP").as_deref() == Some("1"),
            exe: PathBuf::from(need("LAB_BIN")),
            t0_unix: var("LAB_E2E_T0")
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(unix_now),
        }
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Seconds since `t`, with one decimal, as the figures say them.
fn since(t: Instant) -> String {
    format!("{:.1}", t.elapsed().as_secs_f64())
}

/// A JSON number as it was written, or `none`.
fn number_or_none(v: &Value) -> String {
    if v.is_number() {
        v.to_string()
    } else {
        "none".to_string()
    }
}

/// The first `n` characters of `s`, on one line.
fn cut(s: &str, n: usize) -> String {
    s.replace('\n', " ").chars().take(n).collect()
}

/// A JSON file written by the tier (a report), or `Null` when it is missing or not JSON.
fn read_json(path: &Path) -> Value {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

/// Stdout and stderr of a command, together (an error may be on either).
fn both(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a tool of the environment (kind, docker, kubectl); a tool that does not start fails the tier.
fn tool(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("{cmd:?} did not start ({e}): scripts/ci/kind-e2e.sh puts it on PATH"))
}

/// One run of the tier: the lab, where its reports and figures go, and what failed so far.
struct Tier {
    s: Settings,
    lab: Lab,
    root: PathBuf,
    /// The lab's Kubernetes namespace and the kubeconfig of its cluster, once it is up.
    ns: String,
    kubeconfig: PathBuf,
    /// The drills (and the checks of their verdicts) that failed: the tier goes on and fails at the end.
    failed: Vec<String>,
}

impl Tier {
    fn say(&self, what: impl Display) {
        eprintln!(
            "[kind-e2e +{}s] {what}",
            unix_now().saturating_sub(self.s.t0_unix)
        );
    }

    /// One figure: a line of `figures.tsv`, and said.
    fn figure(&self, what: &str, value: impl Display) {
        let path = self.s.reports.join("figures.tsv");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("the figures file {}: {e}", path.display()));
        writeln!(f, "{what}\t{value}").unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        self.say(format!("figure: {what} = {value}"));
    }

    fn report(&self, file: &str) -> PathBuf {
        self.s.reports.join(file)
    }

    fn write_report(&self, file: &str, body: &str) {
        let p = self.report(file);
        std::fs::write(&p, body).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
    }

    /// `lab ARGS` with its output shown as it comes (long commands: `lab up`, drills), from the checkout's
    /// root (where the reference agents' paths are relative to); whether it succeeded.
    fn lab_shown(&self, args: &[&str]) -> bool {
        self.lab
            .command(args)
            .current_dir(&self.root)
            .status()
            .unwrap_or_else(|e| panic!("lab {} did not start: {e}", args.join(" ")))
            .success()
    }

    /// `lab ARGS`, which must succeed; its output is shown, and returned.
    fn lab_ok(&self, args: &[&str]) -> String {
        let out = self.lab.ok(args);
        eprint!("{out}");
        out
    }

    /// `kubectl --kubeconfig <the lab's> ARGS`.
    fn kc(&self, args: &[&str]) -> Output {
        tool(
            Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(args),
        )
    }

    /// `kubectl get --raw PATH` parsed as JSON, or why not.
    fn kc_raw(&self, path: &str) -> Result<Value, String> {
        let out = self.kc(&["get", "--raw", path]);
        if !out.status.success() {
            return Err(format!("kubectl get --raw {path} failed: {}", both(&out)));
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("kubectl get --raw {path} is not JSON ({e}): {}", both(&out)))
    }

    /// The API server's proxy path to the lab's service or pod `target` (`prometheus:9090`, `rank-0:9400`).
    fn proxy(&self, kind: &str, target: &str, path: &str) -> String {
        format!("/api/v1/namespaces/{}/{kind}/{target}/proxy/{path}", self.ns)
    }

    /// `lab status --json --window W`, or why not (a wait retries a failed look until its deadline).
    fn try_snapshot(&self, window: &str) -> Result<Snapshot, String> {
        let out = self.lab.run(&["status", "--json", "--window", window]);
        if !out.status.success() {
            return Err(format!("lab status failed:\n{}", text(&out)));
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("status --json is not a snapshot ({e}):\n{}", text(&out)))
    }

    /// Polls the snapshot over `window` until `cond` holds, for at most `secs`.
    fn wait_snapshot(&self, what: &str, secs: u64, window: &str, cond: impl Fn(&Snapshot) -> bool) {
        // The look that held; a wait that ran out has failed the tier in `poll`.
        let _held = poll(
            what,
            Duration::from_secs(secs),
            Duration::from_secs(2),
            || self.try_snapshot(window),
            |s| s.as_ref().is_ok_and(&cond),
            |s| match s {
                Ok(s) => format!("last snapshot:\n{}", summary(s)),
                Err(e) => e.clone(),
            },
        );
        self.say(what);
    }

    /// No kind cluster of the lab, no node container of it and no record of the lab.
    fn no_cluster_left(&self, when: &str) {
        let cluster = format!("lab-{}", self.s.name);
        let out = tool(Command::new("kind").args(["get", "clusters"]));
        assert!(
            out.status.success(),
            "{when}: kind get clusters failed: {}",
            both(&out)
        );
        let clusters = String::from_utf8_lossy(&out.stdout);
        assert!(
            !clusters.lines().any(|l| l.trim() == cluster),
            "{when}: kind cluster {cluster} is still there (kind get clusters: {clusters})"
        );
        let out = tool(Command::new("docker").args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=io.x-k8s.kind.cluster={cluster}"),
        ]));
        assert!(out.status.success(), "{when}: docker ps failed: {}", both(&out));
        let left = String::from_utf8_lossy(&out.stdout);
        assert!(
            left.trim().is_empty(),
            "{when}: node containers of {cluster} are still there: {}",
            cut(&left, 200)
        );
        assert!(
            !self.lab.dir().exists(),
            "{when}: the lab's record is still there ({})",
            self.lab.dir().display()
        );
    }

    /// `lab ARGS` must fail saying `want`, leaving nothing behind.
    fn refused(&self, what: &str, want: &str, args: &[&str]) {
        let err = self.lab.refuses(args, want);
        self.no_cluster_left(what);
        let line = err.lines().find(|l| l.contains(want)).unwrap_or_default();
        self.say(format!("refused: {what} ({})", cut(line.trim(), 140)));
    }

    /// Every rank (`want` of them) and every storage server Running and Ready: what Kubernetes reports
    /// during each of these faults.
    fn expect_all_ready(&self, when: &str, want: usize) {
        let s = self.lab.snapshot();
        let ranks = s
            .status
            .pods
            .iter()
            .filter(|p| p.role == Role::Rank && p.is_running_ready())
            .count();
        let servers = s.status.pods.iter().filter(|p| p.role == Role::StorageServer);
        let servers_ok = servers.clone().all(lab_model::PodStatus::is_running_ready);
        assert!(
            ranks >= want && servers_ok && servers.count() > 0,
            "{when}: not {want}/{want} ranks and every storage server Running and Ready ({ranks} ranks Ready):\n{}",
            summary(&s)
        );
        self.say(format!("{when}: {ranks}/{want} ranks Ready"));
    }

    /// db-0, db-1 and the writer Running and Ready, commits flowing, no synchronous standby named.
    fn wait_db_ready(&self, when: &str) {
        let ready = |v: &Value| {
            let running = v["pods"].as_array().map_or(0, |p| {
                p.iter()
                    .filter(|p| p["phase"] == "Running" && p["ready"] == true)
                    .count()
            });
            running == 3
                && v["writer"]["commits_per_second"].as_f64().unwrap_or(0.0) > 5.0
                && v["database"]["synchronous_standby_names"] == ""
        };
        let v = poll(
            &format!("{when}: the database Running and Ready with commits flowing"),
            Duration::from_secs(120),
            Duration::from_secs(2),
            || {
                let out = self.lab.run(&["db", "status", "--json"]);
                serde_json::from_slice::<Value>(&out.stdout).unwrap_or_else(|_| Value::String(text(&out)))
            },
            ready,
            |v| format!("lab db status --json said:\n{v:#}"),
        );
        self.say(format!(
            "{when}: db-0, db-1 and lab-writer Ready, {} commits/s",
            v["writer"]["commits_per_second"]
        ));
    }

    /// A drill report's detection, throughput under the fault and recovery, as figures; then whether
    /// Prometheus in the cluster fired the alerts the drill detected its fault by.
    fn drill_figures(&mut self, name: &str) {
        let r = read_json(&self.report(&format!("{name}.json")));
        if r.is_null() {
            return;
        }
        let f = &r["drills"][0]["figures"];
        self.figure(
            &format!("{name}: detected after (s)"),
            number_or_none(&f["time_to_detect_s"]),
        );
        let pct = f["fault_throughput_pct"].as_f64().map_or_else(
            || number_or_none(&f["fault_throughput_pct"]),
            |p| ((p * 10.0).round() / 10.0).to_string(),
        );
        self.figure(
            &format!("{name}: throughput under the fault (% of baseline)"),
            pct,
        );
        self.figure(
            &format!("{name}: back at baseline after (s)"),
            number_or_none(&f["time_to_baseline_s"]),
        );
        self.prometheus_saw(name, &r["drills"][0]);
    }

    /// Prometheus 3 in the cluster, which evaluates the rule file the lab evaluates, fired every alert the
    /// drill `d` (report `name`) named in its expect step, at some time during the drill (its `ALERTS`
    /// series over the drill's time, from the drill's start to now). The alerts on kube-state-metrics'
    /// series (a Pending or crash-looping rank) are the exception: the lab writes those series from the
    /// API, and the cluster's Prometheus has no exporter of them (docs/telemetry.md). A drill whose expect
    /// names no alert (competing-job's is the throughput drop) has nothing to compare. What each side fired
    /// is kept in `<name>.prometheus.json`; a missing alert fails the tier at the end.
    fn prometheus_saw(&mut self, name: &str, d: &Value) {
        let Some(start) = d["started_at"].as_str() else {
            self.failed.push(format!("{name}: the report has no start time"));
            return;
        };
        let rules = lab_telemetry::rules::builtin();
        let steps = d["steps"].as_array().into_iter().flatten();
        // "latency: LabStorageReadLatencyHigh on storage-1: …": the signal, then the rule that fired.
        let named: BTreeSet<String> = steps
            .filter(|s| s["step"] == "expect")
            .filter_map(|s| s["evidence"].as_array())
            .flatten()
            .filter_map(|e| e.as_str()?.split(": ").nth(1)?.split_whitespace().next())
            .filter(|n| rules.alert(n).is_some())
            .map(str::to_string)
            .collect();
        // The series the lab writes itself from the runtime's status, under kube-state-metrics' names.
        let lab_written = [
            POD_STATUS_PHASE,
            POD_STATUS_UNSCHEDULABLE,
            POD_RESTARTS,
            POD_LAST_EXIT_CODE,
        ];
        let on_kube_series = |n: &str| {
            rules.rules().any(|(_, r)| {
                r.name() == n
                    && r.expr
                        .selectors()
                        .iter()
                        .any(|(s, _)| lab_written.contains(&s.name.as_str()))
            })
        };
        let (want, lab_only): (BTreeSet<String>, BTreeSet<String>) =
            named.iter().cloned().partition(|n| !on_kube_series(n));
        let lab_fired: BTreeSet<&str> = d["timeline"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["firing"].as_array())
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        // Prometheus evaluates each second; a last look of the drill's may still be on its way: three tries.
        let mut fired = BTreeSet::new();
        let mut why = String::new();
        for attempt in 0..3 {
            if attempt > 0 {
                std::thread::sleep(Duration::from_secs(5));
            }
            let query = format!(
                "api/v1/query_range?query=ALERTS%7Balertstate%3D%22firing%22%7D&start={start}&end={}&step=1",
                unix_now()
            );
            match self.kc_raw(&self.proxy("services", "prometheus:9090", &query)) {
                Ok(v) => {
                    fired = v["data"]["result"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s["metric"]["alertname"].as_str())
                        .map(str::to_string)
                        .collect();
                    why.clear();
                }
                Err(e) => why = e,
            }
            if why.is_empty() && want.is_subset(&fired) {
                break;
            }
        }
        let missing: Vec<&String> = want.difference(&fired).collect();
        self.write_report(
            &format!("{name}.prometheus.json"),
            &serde_json::to_string_pretty(&serde_json::json!({
                "expect_named": named,
                "compared": want,
                "lab_only_by_design": lab_only,
                "lab_fired": lab_fired,
                "prometheus_fired": fired,
                "missing_in_prometheus": missing,
                "query_error": why,
            }))
            .unwrap(),
        );
        let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(" ");
        if !why.is_empty() {
            self.say(format!("{name}: Prometheus' alerts could not be read: {why}"));
            self.failed.push(format!("{name}: Prometheus' alerts"));
        } else if want.is_empty() && lab_only.is_empty() {
            // competing-job's expect is the job's own throughput drop, no alert: nothing to compare.
            self.figure(
                &format!("{name}: fired in Prometheus too"),
                "no alert named by the drill's expect",
            );
        } else if !missing.is_empty() {
            self.say(format!(
                "{name}: Prometheus did not fire {missing:?} (the drill's expect named {named:?}; Prometheus fired {fired:?})"
            ));
            self.failed.push(format!("{name}: Prometheus agreement"));
        } else {
            self.figure(
                &format!("{name}: fired in Prometheus too"),
                match (want.is_empty(), lab_only.is_empty()) {
                    (_, true) => list(&want),
                    (true, false) => format!("none compared (lab only: {})", list(&lab_only)),
                    (false, false) => format!("{} (lab only: {})", list(&want), list(&lab_only)),
                },
            );
        }
    }

    /// The built-in `builtin`'s YAML (from `drill-file/builtin/`) renamed `name`, on any runtime (the
    /// copies of this tier run on kind, whatever runtimes the built-in lists), with `edits`, at
    /// `<reports>/<name>.yaml`.
    fn copy(&self, builtin: &str, name: &str, edits: Edits) {
        let yaml = drill_copy(
            builtin,
            &Edits {
                name: Some(name),
                any_runtime: true,
                ..edits
            },
        );
        self.write_report(&format!("{name}.yaml"), &yaml);
    }

    /// The copy `name` with its last remediation tried twice: first `trap` (a look-alike's fix), whose
    /// verification (with `deadline`) must fail, then the copy's own command, whose verification must pass.
    /// The drill goes back for its second attempt on the failed verification, so one drill shows both
    /// verdicts at the cost of one fault's set-up (the local end-to-end tests run each trap as a drill of
    /// its own: tests/e2e/rank_drills.rs).
    fn trap_first(&self, name: &str, trap: &str, deadline: &str) {
        let p = self.report(&format!("{name}.yaml"));
        let copy = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("drill copy {}: {e}", p.display()));
        self.write_report(&format!("{name}.yaml"), &trap_first(&copy, trap, deadline));
    }

    /// Runs the drill file `<reports>/<file>.yaml` with its report at `<reports>/<name>.json`; a failure is
    /// recorded (and named at the end) so that the other drills and checks still run and say what they
    /// found.
    fn run_drill(&mut self, file: &str, name: &str) -> bool {
        let yaml = self.report(&format!("{file}.yaml"));
        let json = self.report(&format!("{name}.json"));
        let xml = self.report(&format!("{name}.xml"));
        let passed = self.lab_shown(&[
            "drill",
            "run",
            &yaml.display().to_string(),
            "--report",
            &json.display().to_string(),
            "--junit",
            &xml.display().to_string(),
        ]);
        if passed {
            self.say(format!("drill {name} passed"));
        } else {
            self.say(format!("drill {name} FAILED (report: {})", json.display()));
            self.failed.push(format!("drill {name}"));
        }
        passed
    }

    /// Runs the trap-first copy `name`, which must pass, with its trap's verification failed before the
    /// right fix's passed.
    fn run_trap_first(&mut self, name: &str) {
        let t = Instant::now();
        self.run_drill(name, name);
        self.figure(&format!("drill {name}, trap then right fix (s)"), since(t));
        self.drill_figures(name);
        let r = read_json(&self.report(&format!("{name}.json")));
        let verify: Vec<&Value> = r["drills"][0]["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["step"] == "verify")
            .collect();
        let oks: Vec<&Value> = verify.iter().map(|v| &v["ok"]).collect();
        if oks.len() >= 2 && oks[oks.len() - 2..] == [&Value::Bool(false), &Value::Bool(true)] {
            let trap = verify[verify.len() - 2]["summary"].as_str().unwrap_or_default();
            self.say(format!("{name}: the trap failed as it must: {}", cut(trap, 160)));
        } else {
            self.say(format!(
                "drill {name}: the trap's verification did not fail before the right fix's passed (verifications ok: {oks:?}; report: {})",
                self.report(&format!("{name}.json")).display()
            ));
            self.failed.push(format!("{name} trap verdict"));
        }
        self.expect_all_ready(&format!("after drill {name}"), 4);
    }

    // --- the steps of the tier, in order ------------------------------------------------------------

    /// Bad input: refused, nothing half-made stays behind.
    fn bad_input_refused(&self) {
        let nodes9: Vec<&str> = ["up", "--runtime", "kind", "--nodes", "9"]
            .into_iter()
            .chain(self.node_image_args())
            .collect();
        self.refused("--nodes 9", "out of range", &nodes9);
        self.refused(
            "a node image that does not exist",
            "cannot be pulled",
            &[
                "up",
                "--runtime",
                "kind",
                "--node-image",
                "straggler-lab/no-such-node:v0",
            ],
        );
        let kubeconfig = self.report("no-such-kubeconfig").display().to_string();
        self.refused(
            "--database on an existing cluster",
            "local and kind runtimes",
            &["up", "--kubeconfig", &kubeconfig, "--database"],
        );
        let out = self.lab.run(&["status"]);
        assert!(
            !out.status.success(),
            "lab status found a lab after refused ups:\n{}",
            text(&out)
        );
    }

    fn node_image_args(&self) -> Vec<&str> {
        self.s
            .node_image
            .as_deref()
            .map(|i| vec!["--node-image", i])
            .unwrap_or_default()
    }

    /// One lab for the whole tier, on more than one node (GPUs split across them, ranks on each), with the
    /// database beside the job (its image built offline from this machine's PostgreSQL): the primary db-0,
    /// the standby db-1 and the writer. (One lab instead of one node and then two saves a `lab up` and a
    /// `lab down`, about 100 s.)
    fn up(&mut self) {
        let nodes = self.s.nodes.to_string();
        let mut args = vec!["up", "--runtime", "kind", "--database", "--nodes", &nodes];
        args.extend(self.node_image_args());
        self.say(format!("lab {}", args.join(" ")));
        let t = Instant::now();
        assert!(
            self.lab_shown(&args),
            "lab {} failed (its output is above)",
            args.join(" ")
        );
        self.figure(
            &format!("lab up --database, {} nodes (s)", self.s.nodes),
            since(t),
        );
        self.kubeconfig = self.lab.dir().join("kubeconfig");
        let cfg = read_json(&self.lab.dir().join("lab.json"));
        self.ns = cfg["config"]["namespace"]
            .as_str()
            .unwrap_or_else(|| panic!("lab.json names no namespace: {cfg}"))
            .to_string();
    }

    /// Status (ranks over the nodes, a NODE column, the kind runtime with 4 GPUs), the database, the
    /// incident's wiring.
    fn status_and_incident(&self) {
        self.expect_all_ready("after lab up", 4);
        let s = self.lab.snapshot();
        self.write_report(
            "status-nodes.json",
            &serde_json::to_string_pretty(&s.status).unwrap(),
        );
        let ranks: Vec<(&str, &str)> = s
            .status
            .ranks()
            .map(|p| (p.name.as_str(), p.node.as_deref().unwrap_or("")))
            .collect();
        let mut nodes: Vec<&str> = ranks.iter().map(|r| r.1).filter(|n| !n.is_empty()).collect();
        nodes.sort_unstable();
        nodes.dedup();
        assert!(
            nodes.len() >= 2,
            "the ranks run on {} node(s), not spread over {}: {ranks:?}",
            nodes.len(),
            self.s.nodes
        );
        self.say(format!("ranks on {} nodes: {ranks:?}", nodes.len()));
        let table = self.lab.ok(&["status"]);
        assert!(
            table.contains("NODE"),
            "lab status shows no node column on {} nodes:\n{table}",
            self.s.nodes
        );
        self.wait_db_ready("after lab up");
        let s = self.lab.snapshot().status;
        self.write_report("status-up.json", &serde_json::to_string_pretty(&s).unwrap());
        assert!(
            s.runtime == RuntimeKind::Kind && s.gpus_capacity == 4 && s.world_size == 4,
            "status after up: not the kind runtime with 4 GPUs and world size 4 (runtime {}, {} GPUs, world size {})",
            s.runtime,
            s.gpus_capacity,
            s.world_size
        );
        let incident = self.lab.ok(&["incident"]);
        self.write_report("incident-up.txt", &incident);
        assert!(
            incident.contains("storage-1"),
            "lab incident does not show the wiring (no storage-1):\n{incident}"
        );
    }

    /// The console in a real terminal: Ready beside the job's own signal, and the ranks.
    fn console(&self) {
        let t = Tmux::start("kind-e2e-console", 160, 45);
        t.line(&format!(
            "LAB_STATE_DIR='{}' '{}' --name '{}' console",
            self.lab.state().display(),
            self.lab.exe().display(),
            self.lab.name
        ));
        let pane = t.wait_for_all(&["Kubernetes: 4/4 Ready", "rank-3"], Duration::from_secs(30));
        self.write_report("console.txt", &pane);
        t.keys(&["q"]);
        std::thread::sleep(Duration::from_secs(1));
        self.say("console shows 4/4 Ready and the ranks");
    }

    /// Prometheus 3 in the cluster agrees with the lab on a throttled rank.
    fn prometheus_agrees(&self) {
        let alerts_path = self.proxy("services", "prometheus:9090", "api/v1/alerts");
        self.kc_raw(&alerts_path).unwrap_or_else(|e| {
            panic!("Prometheus in the cluster does not answer through the API server: {e}")
        });
        let build = self
            .kc_raw(&self.proxy("services", "prometheus:9090", "api/v1/status/buildinfo"))
            .unwrap_or_else(|e| panic!("Prometheus' build information: {e}"));
        let version = build["data"]["version"].as_str().unwrap_or_default();
        self.say(format!("Prometheus in the cluster: {version}"));
        assert!(
            version.starts_with("3."),
            "Prometheus in the cluster is {version:?}, not the 3.x this tier runs ({build})"
        );
        self.lab_ok(&[
            "fault",
            "inject",
            "throttled-rank",
            "--rank",
            "1",
            "--cpu",
            "150m",
        ]);
        let t = Instant::now();
        // A 6 s window: the rule must have held for its `for` within the look.
        self.wait_snapshot("the lab's LabRankCpuThrottled fires for rank-1", 120, "6s", |s| {
            s.alerts
                .iter()
                .any(|a| a.rule == "LabRankCpuThrottled" && a.target == "rank-1")
        });
        self.figure("throttled-rank detected by the lab (s)", since(t));
        let firing = |v: &Result<Value, String>| {
            v.as_ref().is_ok_and(|v| {
                v["data"]["alerts"].as_array().is_some_and(|a| {
                    a.iter().any(|a| {
                        let l = &a["labels"];
                        let who = l["pod"].as_str().or(l["instance"].as_str()).unwrap_or_default();
                        l["alertname"] == "LabRankCpuThrottled"
                            && a["state"] == "firing"
                            && who.contains("rank-1")
                    })
                })
            })
        };
        let v = poll(
            "Prometheus to fire LabRankCpuThrottled for rank-1",
            Duration::from_secs(180),
            Duration::from_secs(5),
            || self.kc_raw(&alerts_path),
            firing,
            |v| match v {
                Ok(v) => format!("Prometheus' alerts: {}", v["data"]["alerts"]),
                Err(e) => e.clone(),
            },
        );
        self.figure("throttled-rank firing in Prometheus (s)", since(t));
        let mut names: Vec<&str> = v.as_ref().map_or(Vec::new(), |v| {
            v["data"]["alerts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|a| a["state"] == "firing")
                .filter_map(|a| a["labels"]["alertname"].as_str())
                .collect()
        });
        names.sort_unstable();
        names.dedup();
        let names = serde_json::to_string(&names).unwrap();
        self.write_report("prometheus-alerts.json", &format!("{names}\n"));
        self.say(format!("Prometheus agrees: {names}"));
        self.lab_ok(&["fault", "clear", "--all"]);
    }

    /// The ranks' control answers only the lab. A checkpoint request (POST /checkpoint on rank-0's port)
    /// from another pod, without the lab's token: the offline nodes run no network plugin that enforces a
    /// NetworkPolicy, so the rank itself refuses it, and the request changes nothing. The lab's own request
    /// (with the token, through the pod proxy) is taken.
    fn control_answers_only_the_lab(&self) {
        let requested = || {
            let v = self
                .kc_raw(&self.proxy("pods", "rank-0:9400", "checkpoint"))
                .unwrap_or_else(|e| panic!("rank-0's checkpoint state: {e}"));
            v["requested"]
                .as_u64()
                .unwrap_or_else(|| panic!("rank-0's checkpoint state has no count of requests: {v}"))
        };
        let before = requested();
        let out = self.kc(&[
            "-n",
            &self.ns,
            "get",
            "pod",
            "rank-0",
            "-o",
            "jsonpath={.status.podIP}",
        ]);
        let ip = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success() && !ip.is_empty(),
            "rank-0's pod IP: {}",
            both(&out)
        );
        let url = format!("http://{ip}:9400/checkpoint");
        let out = self.kc(&[
            "-n",
            &self.ns,
            "exec",
            "deploy/storage-0",
            "-c",
            "volume",
            "--",
            "wget",
            "-q",
            "-O-",
            "--post-data=",
            &url,
        ]);
        let said = both(&out);
        assert!(
            !out.status.success(),
            "a checkpoint request from storage-0's pod without the token was taken: {said}"
        );
        assert!(
            said.contains("403"),
            "the request from another pod failed, but not with 403 Forbidden: {said}"
        );
        let after = requested();
        assert_eq!(
            after, before,
            "the refused request changed rank-0's checkpoint requests"
        );
        self.say(format!(
            "a checkpoint request from another pod without the token: refused ({}), nothing changed",
            cut(&said, 100)
        ));
        self.lab_ok(&["checkpoint"]);
        let after = requested();
        assert!(
            after > before,
            "lab checkpoint's request was not counted (requests {before} before, {after} after)"
        );
    }

    /// The drill engine, which this tier checks through the built-in drills. A build without it cannot run
    /// them: that fails the tier with the CLI's own error.
    fn have_drills(&self) {
        let out = self.lab.run(&["drill", "list"]);
        assert!(
            out.status.success(),
            "the drill engine is unavailable ('lab drill list' failed): this tier checks the built-in drills\n{}",
            text(&out)
        );
    }

    /// The seed's faults 1 and 2, short copies with their traps first: restarting the rank that waits on
    /// the slow server, and re-applying the template that was right all along. throttled-rank keeps the
    /// built-in's 100 steps to verify (its tolerance is tight so that the trap cannot pass on a good moment).
    fn seed_drills(&mut self) {
        self.copy("slow-storage", "slow-storage", short());
        self.trap_first("slow-storage", "lab restart rank 1", TRAP_DEADLINE);
        self.copy("throttled-rank", "throttled-rank", quick_start());
        self.trap_first("throttled-rank", "lab apply --cpu 400m", TRAP_DEADLINE);
        for d in ["slow-storage", "throttled-rank"] {
            self.run_trap_first(d);
        }
    }

    /// An agent that investigates through the lab's MCP tools, on the cluster: the reference MCP agent (the
    /// official Python SDK) started by the drill with `lab mcp` as its server, the built-in slow-storage at
    /// the full evidence level. It must pass, with the agent detecting, localizing and naming the cause,
    /// and its calls on record.
    fn mcp_agent(&mut self) {
        let python = std::env::var("LAB_MCP_PYTHON")
            .ok()
            .filter(|p| !p.is_empty())
            .expect("LAB_MCP_PYTHON is not set: scripts/ci/kind-e2e.sh installs the MCP SDK (scripts/tools.sh mcp)");
        let agent = format!("{python} examples/agents/mcp_reference.py");
        let report = self.report("mcp-slow-storage.json");
        let t = Instant::now();
        let passed = self.lab_shown(&[
            "drill",
            "run",
            "slow-storage",
            "--mcp-agent",
            &agent,
            "--evidence",
            "full",
            "--report",
            &report.display().to_string(),
        ]);
        let a = &read_json(&report)["drills"][0]["agent"];
        if !passed {
            self.say(format!(
                "drill slow-storage with the MCP agent did not pass (report: {})",
                report.display()
            ));
            self.failed.push("slow-storage with the MCP agent".into());
        } else if !(a["protocol"] == "mcp"
            && ["detected", "localized", "cause", "mitigated"]
                .iter()
                .all(|k| a[*k] == true))
        {
            self.say(format!(
                "slow-storage with the MCP agent passed, but its score is not all right: {a}"
            ));
            self.failed.push("slow-storage MCP agent score".into());
        } else {
            self.say(format!(
                "slow-storage with the MCP agent: {} attempt(s), {} tool calls, fixed {} s after the incident opened",
                a["attempts"], a["tool_calls"], a["incident_to_fix_s"]
            ));
        }
        self.figure("drill slow-storage with the MCP agent (s)", since(t));
        self.drill_figures("mcp-slow-storage");
        self.expect_all_ready("after the MCP agent's drill", 4);
    }

    /// The other eight built-in drills (ten runs, traps first), about 14 minutes here: a change is checked
    /// on them with `LAB_E2E_ALL_DRILLS=1` (and their verdict rates with `scripts/bench/verdict-rates.sh
    /// RUNTIME=kind`), while CI runs the seed's three and the MCP agent's drill, so that a cold `.ci/run`
    /// stays inside its budget. stuck-rollout, the look-alike of the seed's fault 3, is first among them.
    fn other_drills(&mut self) {
        self.copy(
            "stuck-rollout",
            "stuck-rollout",
            Edits {
                deadline: Some(STUCK_DEADLINE),
                ..Edits::default()
            },
        );
        self.copy(
            "stuck-rollout",
            "stuck-rollout-trap",
            Edits {
                deadline: Some(STUCK_DEADLINE),
                command: Some("lab scale ranks 4"),
                ..Edits::default()
            },
        );
        let t = Instant::now();
        self.run_drill("stuck-rollout", "stuck-rollout");
        self.figure("drill stuck-rollout (s)", since(t));
        self.drill_figures("stuck-rollout");
        self.expect_all_ready("after drill stuck-rollout", 4);
        // The seed's fault 3 as it happened, with the seed agent's first fix: scaling back to four alone
        // unblocks the rollout, the four restart expecting five peers and the job stalls. The drill must
        // fail, on the stall.
        let t = Instant::now();
        let trap_json = self.report("stuck-rollout-trap.json");
        let passed = self.lab_shown(&[
            "drill",
            "run",
            &self.report("stuck-rollout-trap.yaml").display().to_string(),
            "--report",
            &trap_json.display().to_string(),
        ]);
        let r = read_json(&trap_json);
        if passed {
            self.say(
                "drill stuck-rollout with the trap (lab scale ranks 4) PASSED: scaling back alone must fail",
            );
            self.failed.push("stuck-rollout trap".into());
        } else if r["drills"][0]["verdict"] != "fail" {
            self.say(format!(
                "drill stuck-rollout with the trap did not end in a fail verdict (verdict {}; report: {})",
                r["drills"][0]["verdict"],
                trap_json.display()
            ));
            self.failed.push("stuck-rollout trap verdict".into());
        } else {
            self.say(format!(
                "stuck-rollout trap failed as it must: {}",
                cut(r["drills"][0]["reason"].as_str().unwrap_or_default(), 160)
            ));
        }
        self.figure("drill stuck-rollout with the trap (s)", since(t));
        self.expect_all_ready("after the stuck-rollout trap", 4);

        // One rank's faults through `exec` in the rank containers, with the right fixes a person would
        // make: the hogs beside rank-1 and rank-2 found with `lab rank procs` and stopped with `lab rank
        // stop` (the template is unchanged, so re-applying it would do nothing); the hung rank (its training
        // thread held in a ptrace stop while its pod stays Ready) restarted alone. Their copies are short;
        // with the built-ins' settings they took 96 s and 68 s on kind with the machine at load 37, paid
        // for by stuck-rollout's shorter verify deadline (60 s less for its trap).
        let stop_hogs = "for r in 1 2; do for p in $(lab rank procs $r --json | jq -r \".processes[] | select(.rank_itself | not) | .pid\"); do lab rank stop $r --pid $p || exit 1; done; done";
        self.copy(
            "slow-compute",
            "slow-compute",
            Edits {
                command: Some(stop_hogs),
                ..short()
            },
        );
        self.trap_first("slow-compute", "lab apply --cpu 400m", TRAP_DEADLINE);
        self.copy(
            "rank-hang",
            "rank-hang",
            Edits {
                command: Some("lab restart rank 1"),
                ..short()
            },
        );
        self.trap_first("rank-hang", "lab restart rank 2", TRAP_DEADLINE);
        // rank-crash with its right fix (rank-1's own key removed from lab-config); it keeps the built-in's
        // 100 steps to verify, as the local tier's copy does. By hand on kind (load ~15): 97 s,
        // LabRankCrashLooping on rank-1 23.9 s after the inject, back 72.1 s after it; its trap (`lab
        // restart rank 1`) failed as it must. After its trap, the right fix waits on the kubelet: every
        // crash doubles the back-off of the containers that crashed (rank-1's, and its peers' after their
        // collective error), so the longer the trap runs, the longer the ranks take to come back once the
        // cause is gone. With an 80 s trap the right fix was not back within the built-in's 90 s (the
        // ranks 0/3 Ready for 50 s of it, in back-off); with a 60 s trap it was back 76.9 s after the
        // remediation. Hence a 60 s trap and 180 s for the right fix's verification. Since the lab's kind
        // cluster caps the kubelets' back-off at 10 s (runtime-kube/src/kind.rs), the right fix was back
        // 19.2 s after the remediation (2026-12-03); with it at 1-2 s and the setting taken by a restart
        // of rank-1's container, 29.5 s after a 60 s trap at load 11-25 (2026-12-05): a 35 s trap. The
        // 180 s deadline stays, a margin paid only on failure.
        self.copy(
            "rank-crash",
            "rank-crash",
            Edits {
                deadline: Some("180s"),
                command: Some("lab rank env 1 --unset LAB_DEVICE_FAULT_AFTER"),
                ..quick_start()
            },
        );
        self.trap_first("rank-crash", "lab restart rank 1", "35s");
        for d in ["slow-compute", "rank-hang", "rank-crash"] {
            self.run_trap_first(d);
        }

        // The seed's general version on the cluster: db-1's template asks for a label no node has, db-1
        // made again from it stays Pending, every commit waits for it. The trap fixes the template alone:
        // on Kubernetes the pod already made from the old version stays Pending (the StatefulSet updates
        // OnDelete, as a stuck rollout leaves it), so the commits stay hung; the right fix also deletes
        // db-1 by name. By hand on kind the right fix's commits were back 11.2 s after it (20 s for the
        // trap).
        self.copy(
            "sync-replica",
            "sync-replica",
            Edits {
                command: Some("lab db template --node-selector '' && lab db delete-pod db-1"),
                ..short()
            },
        );
        self.trap_first("sync-replica", "lab db template --node-selector ''", "20s");
        self.run_trap_first("sync-replica");
        self.wait_db_ready("after drill sync-replica");

        // The seed's week on the cluster: fault 1 fixed and verified; then fault 2 with fault 1's fix in
        // the change log, and the seed agent's second fix first (putting the delay back: the last change
        // treated as the newest suspect), which must fail; then the lab's own clear, which must pass.
        // Before the storage drills: its slow-storage needs rank-1's data on storage-1.
        self.copy(
            "chained-week",
            "chained-week",
            Edits {
                command: Some("lab fault clear --all"),
                ..short()
            },
        );
        self.trap_first(
            "chained-week",
            "lab fault inject slow-storage --server 1 --delay 300ms",
            TRAP_DEADLINE,
        );
        self.run_trap_first("chained-week");

        // "Storage is slow" on the cluster, with the right fixes: storage-1's volume container held to 6m
        // of CPU (resized in place; the kubelet's floor makes it 10m in each 100 ms), fixed by moving the
        // job's data off it with SeaweedFS's own volume.move (`lab storage drain 1`, run in the master's
        // container through exec), then moved back for what follows; another team's job (its own
        // Deployment and pod, not a rank) reading storage-1 hard, fixed by stopping it. A checkpoint is
        // saved before each fix. Short copies: on kind (load 13-22, another kind lab starting beside it)
        // slow-disk took 102 s (detected after 7.1 s, 25 % of baseline, back 88.6 s after the inject) and
        // competing-job 76 s (4.2 s, 66 %, 20.7 s).
        //
        // After slow-disk's trap the job is stalled: restarting rank-1 sends its peers back to rendezvous
        // too, each rank's pod is restarted with the kubelet's back-off, and each reads its shards again,
        // rank-1 from the starved server. No checkpoint can be saved then (rank-0 answers a checkpoint
        // request at a step; `lab checkpoint` timed out after 5 s), so the right fix is the drain alone, and
        // its verification gets 150 s (the built-in's 60 s ran out 5 s before the job was back, the ranks
        // still in back-off). Over a whole tier the back-off grew with every drill that restarted a rank
        // (rank-crash's the most) until a right fix was not back within 150 s (ranks 0, 2, 3 in
        // CrashLoopBackOff, 5 restarts each); capped at 10 s, right after rank-crash's drill it was back
        // 10.9 s after the drain (2026-12-03). The local end-to-end test (tests/e2e/slow_disk.rs) checks
        // checkpoint first behind the same trap, where the job kept training.
        self.copy(
            "slow-disk",
            "slow-disk",
            Edits {
                deadline: Some("150s"),
                command: Some("lab storage drain 1"),
                ..short()
            },
        );
        self.trap_first("slow-disk", "lab restart rank 1", TRAP_DEADLINE);
        // competing-job's trap is slow-disk's right fix: draining storage-1 moves the ranks' data, and the
        // neighbour, reading the same needles through the master, follows it.
        self.copy(
            "competing-job",
            "competing-job",
            Edits {
                command: Some("lab checkpoint && lab job stop nightly-etl"),
                ..short()
            },
        );
        self.trap_first("competing-job", "lab storage drain 1", TRAP_DEADLINE);
        for d in ["slow-disk", "competing-job"] {
            self.run_trap_first(d);
            let jobs: Value = serde_json::from_str(&self.lab.ok(&["job", "list", "--json"]))
                .unwrap_or_else(|e| panic!("lab job list --json is not JSON: {e}"));
            let foreign: Vec<&Value> = jobs["jobs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|j| j["kind"] == "foreign")
                .map(|j| &j["name"])
                .collect();
            if !foreign.is_empty() {
                self.say(format!(
                    "a foreign job is still running after drill {d}: {foreign:?}"
                ));
                self.failed.push(format!("foreign job left after {d}"));
            }
            // Both drained storage-1 (slow-disk's right fix, competing-job's trap); each drill's cleanup
            // moves its volumes back, so competing-job's neighbour reads what storage-1 holds again.
            let out = self.lab.run(&["storage", "undrain", "1"]);
            if out.status.success() || !both(&out).contains("not drained") {
                self.say(format!(
                    "drill {d}'s cleanup left storage-1 drained: {}",
                    both(&out)
                ));
                self.failed.push(format!("storage-1 drained after {d}"));
            }
            self.expect_all_ready(&format!("after drill {d}"), 4);
        }
    }

    /// unplaceable-rank, the seed's fault 3, its trap first. Last: its inject and its clear each restart
    /// every rank. The trap is the seed agent's first fix, scaling back to four alone: the four ranks still
    /// expect five peers and the job stays stalled. The right fix is the lab's own clear (world size and
    /// ranks back to four). Its inject's way in (every rank pod made again, in order, each once the one
    /// below is Ready) took 11 s on kind, longer than its detection (throughput at +4.3 s): the expect step
    /// holds Ready to account from the moment the fault is in place (its proof), so the ranks coming back
    /// one by one on the way in are not Kubernetes' view of the fault (that was why this drill failed in 3
    /// of 4 runs here before). By hand on kind (load 23): the right fix back 16.0 s after the clear; the
    /// trap at 0 % of the baseline 90 s after it.
    fn unplaceable_rank(&mut self) {
        self.copy("unplaceable-rank", "unplaceable-rank", short());
        self.trap_first("unplaceable-rank", "lab scale ranks 4", TRAP_DEADLINE);
        self.run_trap_first("unplaceable-rank");
        self.wait_snapshot("back to 4 ranks and world size 4", 60, "2s", |s| {
            s.status.world_size == 4 && s.status.ranks_desired == 4
        });
        // The clear rolls the ranks back onto the old configuration: the rollout is finished, not only the
        // numbers.
        let out = self.kc(&[
            "-n",
            &self.ns,
            "rollout",
            "status",
            "statefulset/rank",
            "--timeout=180s",
        ]);
        eprint!("{}", both(&out));
        assert!(
            out.status.success(),
            "the ranks' rollout after unplaceable-rank did not finish: {}",
            both(&out)
        );
    }

    /// lab down, and nothing left: the cluster, its node containers, the record, kind's network.
    fn down(&mut self) {
        let t = Instant::now();
        eprint!("{}", self.lab.down());
        self.figure(&format!("lab down, {} nodes (s)", self.s.nodes), since(t));
        self.no_cluster_left("after lab down");
        let out = tool(Command::new("kind").args(["get", "clusters"]));
        let none = out.status.success() && String::from_utf8_lossy(&out.stdout).trim().is_empty();
        if none {
            let net = tool(Command::new("docker").args(["network", "inspect", "kind"]));
            assert!(
                !net.status.success(),
                "after lab down: kind's network is still there"
            );
        }
    }
}

#[test]
fn kind_tier() {
    let s = Settings::from_env();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the checkout's root")
        .to_path_buf();
    // The lab's state in a folder of this run's, so the kubeconfig of the cluster is known.
    let state = s.reports.join("state");
    let _ = std::fs::remove_dir_all(&state);
    let lab = Lab::given(&s.name, state, s.exe.clone(), s.keep);
    let mut tier = Tier {
        s,
        lab,
        root,
        ns: String::new(),
        kubeconfig: PathBuf::new(),
        failed: Vec::new(),
    };

    tier.bad_input_refused();
    tier.up();
    tier.status_and_incident();
    tier.console();
    tier.prometheus_agrees();
    tier.control_answers_only_the_lab();
    tier.have_drills();
    tier.seed_drills();
    tier.mcp_agent();
    if tier.s.all_drills {
        tier.other_drills();
    } else {
        tier.say("LAB_E2E_ALL_DRILLS is not 1: the other eight built-in drills are left to a full run of this tier");
    }
    let s = tier.lab.snapshot().status;
    tier.write_report("status-drills.json", &serde_json::to_string_pretty(&s).unwrap());
    assert!(
        s.delay_path.contains("proxy") || s.delay_path.contains("netem"),
        "the status does not say which delay path slow-storage uses (delay_path {:?})",
        s.delay_path
    );
    tier.say(format!("slow-storage delay path: {}", s.delay_path));
    tier.unplaceable_rank();
    tier.down();

    assert!(
        tier.failed.is_empty(),
        "the kind tier failed: {}",
        tier.failed.join(", ")
    );
    tier.say("all passed");
}
