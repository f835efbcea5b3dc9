//! Helpers for the end-to-end tests: running the built `lab` binary against its own state folder, and
//! finding everything a lab left behind (processes, cgroups, listening ports) by enumerating them.
//!
//! The tests need the workspace's binaries built (`cargo build --workspace --bins`) and SeaweedFS
//! (`scripts/tools.sh weed`, which sets `LAB_WEED`).
//! `LAB_E2E_PREFIX` (for example `a-`) goes before every lab name the tests use, so that the tests of two
//! checkouts on one machine never touch each other's labs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lab_model::Snapshot;

pub mod drill_copy;
pub mod mcp;
pub mod tmux;
pub mod user;
pub use drill_copy::{Edits, drill_copy, trap_first};
pub use tmux::Tmux;
pub use user::User;

/// End-to-end labs share two cores: one at a time, whatever test binary thread asks.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The binaries every end-to-end test runs.
const BINARIES: [&str; 4] = ["lab", "lab-rank", "lab-seeder", "lab-proxy"];

/// The folder with the built binaries (`target/debug` or `target/release`), from this test's own path.
pub fn bin_dir() -> PathBuf {
    match built_bins() {
        Ok(dir) => dir,
        Err(why) => panic!("{why}"),
    }
}

/// The folder with the built binaries, or what is missing and how to build it.
fn built_bins() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this test's own path: {e}"))?;
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("{} is not in a cargo target folder", exe.display()))?
        .to_path_buf();
    let missing: Vec<&str> = BINARIES.into_iter().filter(|b| !dir.join(b).exists()).collect();
    if missing.is_empty() {
        Ok(dir)
    } else {
        Err(format!(
            "{} not built in {}: run `cargo build --workspace --bins` before the end-to-end tests",
            missing.join(", "),
            dir.display()
        ))
    }
}

/// The `weed` binary, or a failure that says how to get it.
pub fn weed() -> PathBuf {
    find_weed().expect("weed (SeaweedFS) is needed: run `eval \"$(scripts/tools.sh weed)\"` first")
}

/// `LAB_WEED`, else `weed` on `PATH`.
fn find_weed() -> Option<PathBuf> {
    if let Some(w) = std::env::var_os("LAB_WEED").filter(|w| !w.is_empty()) {
        return Some(PathBuf::from(w));
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("weed"))
            .find(|p| p.exists())
    })
}

/// Stops lab `lab`'s watcher by the pid it recorded, as if it had died (the lab itself runs on).
pub fn stop_watcher(lab: &Lab) {
    let recs = lab_runtime_local::procs::read_table(&lab.dir().join("watcher.json"));
    assert!(
        recs.iter().any(lab_runtime_local::procs::ProcRecord::alive),
        "no watcher runs"
    );
    lab_runtime_local::procs::stop_all(&recs, Duration::from_secs(2));
}

/// A lab started by a test, with its own state folder; `Drop` takes it down if the test did not.
#[derive(Debug)]
pub struct Lab {
    pub name: String,
    state: StateDir,
    /// The `lab` binary every command of this lab runs.
    exe: PathBuf,
    down: bool,
    /// Left up when the handle drops without `down` (a failed run kept to be looked at).
    keep: bool,
    /// The user every `lab` command of this lab runs as (`runuser -u`); `None`: this test's own.
    user: Option<String>,
}

/// Where a lab's state lives: a temporary folder of the test's own, removed with it, or one a tier's
/// set-up script gave (kept, with the kubeconfig of its cluster, for a look after the run).
#[derive(Debug)]
enum StateDir {
    Temp(tempfile::TempDir),
    Given(PathBuf),
}

impl Lab {
    /// A lab handle without starting anything (for tests of `lab up` failures). Its name is `name` after
    /// `LAB_E2E_PREFIX` when that is set, so that two checkouts can run their tests on one machine.
    pub fn new(name: &str) -> Lab {
        // Checked here, before a `Lab` exists, so that a missing binary or weed fails the test with one
        // message and not again in `Drop`, where a second panic would abort the whole test binary.
        bin_dir();
        weed();
        let prefix = std::env::var("LAB_E2E_PREFIX").unwrap_or_default();
        let state = tempfile::Builder::new()
            .prefix("lab-e2e-")
            .tempdir()
            .expect("temp dir");
        Lab {
            name: format!("{prefix}{name}"),
            state: StateDir::Temp(state),
            exe: bin_dir().join("lab"),
            down: false,
            keep: false,
            user: None,
        }
    }

    /// A lab handle for the binary `exe` and the state folder `state`, both given by a tier's set-up
    /// script (the kind tier's), without starting anything. The name is taken as it is. With `keep`, a
    /// handle dropped before `down` (a failed run) leaves the lab up and says how to take it down.
    pub fn given(name: &str, state: PathBuf, exe: PathBuf, keep: bool) -> Lab {
        assert!(
            exe.is_file(),
            "the lab binary {} does not exist: build it (cargo build --workspace --bins)",
            exe.display()
        );
        std::fs::create_dir_all(&state)
            .unwrap_or_else(|e| panic!("the state folder {}: {e}", state.display()));
        Lab {
            name: name.to_string(),
            state: StateDir::Given(state),
            exe,
            down: false,
            keep,
            user: None,
        }
    }

    /// The state folder (`LAB_STATE_DIR` of every command of this lab).
    pub fn state(&self) -> &Path {
        match &self.state {
            StateDir::Temp(t) => t.path(),
            StateDir::Given(p) => p,
        }
    }

    /// The `lab` binary this lab's commands run.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// [`Lab::new`], with every `lab` command run as `user`, who owns the state folder.
    ///
    /// # Panics
    /// When the state folder cannot be handed to `user`.
    pub fn new_as(name: &str, user: &User) -> Lab {
        let mut lab = Lab::new(name);
        user.give(lab.state());
        lab.user = Some(user.name.clone());
        lab
    }

    /// `lab up --runtime local` with `extra` flags; panics with the output if it fails.
    pub fn up(name: &str, extra: &[&str]) -> Lab {
        let lab = Lab::new(name);
        let mut args = vec!["up", "--runtime", "local"];
        args.extend_from_slice(extra);
        let out = lab.run(&args);
        assert!(out.status.success(), "lab up failed:\n{}", text(&out));
        lab
    }

    /// A `lab` command for this lab.
    pub fn command(&self, args: &[&str]) -> Command {
        let lab = &self.exe;
        let mut c = match &self.user {
            // runuser keeps the environment set here, apart from HOME, SHELL, USER and LOGNAME.
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--"]).arg(lab);
                c
            }
            None => Command::new(lab),
        };
        c.args(args)
            .env("LAB_STATE_DIR", self.state())
            .env("LAB_NAME", &self.name);
        if let Some(w) = find_weed() {
            c.env("LAB_WEED", w);
        }
        c
    }

    /// Runs the drill file `file` (`lab drill run FILE --report FILE.json`), panics unless it passes, and
    /// returns its drill's report (`drills[0]` of the JSON report).
    pub fn passing_drill(&self, file: &Path) -> serde_json::Value {
        // In the lab's own folder, not beside the drill file: that is the source tree's fixtures.
        let name = file.file_stem().expect("a drill file's name").to_string_lossy();
        let report = self.dir().join(format!("{name}.report.json"));
        let out = self.run(&[
            "drill",
            "run",
            file.to_str().expect("a UTF-8 path"),
            "--report",
            report.to_str().expect("a UTF-8 path"),
        ]);
        assert!(out.status.success(), "the drill failed:\n{}", text(&out));
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).expect("the report")).expect("the report is JSON");
        r["drills"][0].clone()
    }

    /// Runs `lab ARGS` to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run lab")
    }

    /// Runs `lab ARGS` and panics unless it succeeds; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "lab {} failed:\n{}",
            args.join(" "),
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `lab status --json --window 2s`, parsed: quick, for polling; alerts may not have fired yet.
    pub fn snapshot(&self) -> Snapshot {
        let s = self.ok(&["status", "--json", "--window", "2s"]);
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("status --json is not a snapshot ({e}):\n{s}"))
    }

    /// `lab status --json --window W`: a snapshot after watching for `secs` seconds, long enough for alerts
    /// that must hold for a while to fire.
    pub fn snapshot_over(&self, secs: u32) -> Snapshot {
        let w = format!("{secs}s");
        let s = self.ok(&["status", "--json", "--window", &w]);
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("status --json is not a snapshot ({e}):\n{s}"))
    }

    /// The watcher's live snapshot (`lab status --json`): alerts evaluated every second since `lab up`.
    pub fn live(&self) -> Snapshot {
        let s = self.ok(&["status", "--json"]);
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("status --json is not a snapshot ({e}):\n{s}"))
    }

    /// Waits up to a minute for the job to train at 80% of its baseline or better.
    pub fn wait_steady(&self) -> Snapshot {
        self.wait_for("a steady baseline", Duration::from_secs(60), |s| pct(s) >= 80.0)
    }

    /// Runs `lab ARGS`, which must fail with `want` in its error and leave the fault ledger byte-identical;
    /// returns the error (stderr).
    pub fn refuses(&self, args: &[&str], want: &str) -> String {
        let ledger = self.dir().join("ledger.json");
        let before = std::fs::read(&ledger).ok();
        let out = self.run(args);
        assert!(!out.status.success(), "{args:?} should fail:\n{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(err.contains(want), "{args:?}: want {want:?}\n{}", text(&out));
        assert_eq!(std::fs::read(&ledger).ok(), before, "{args:?} changed the ledger");
        err
    }

    /// Polls the snapshot until `cond` holds, or panics after `deadline` with the last one.
    pub fn wait_for(&self, what: &str, deadline: Duration, cond: impl Fn(&Snapshot) -> bool) -> Snapshot {
        wait_until(what, deadline, || self.snapshot(), cond)
    }

    /// The delay the latency proxy in front of storage server `i` adds now, read from its control API.
    pub fn proxy_delay_ms(&self, i: usize) -> f64 {
        let cfg: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.dir().join("lab.json")).expect("lab.json"))
                .expect("lab.json is JSON");
        let port = cfg["config"]["storage"][i]["control"]
            .as_u64()
            .expect("the proxy's control port");
        let out = Command::new("curl")
            .args(["-s", "-m", "5", &format!("http://127.0.0.1:{port}/delay")])
            .output()
            .expect("curl");
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("proxy answered:\n{}", text(&out)));
        v["delay_ms"].as_f64().expect("delay_ms")
    }

    /// The lab's folder inside the state folder.
    pub fn dir(&self) -> PathBuf {
        self.state().join(&self.name)
    }

    /// Every port the lab's configuration and spec name (to check none is left listening).
    pub fn ports(&self) -> BTreeSet<u16> {
        let mut ports = BTreeSet::new();
        for f in ["lab.json", "spec.json"] {
            if let Ok(b) = std::fs::read(self.dir().join(f)) {
                let v: serde_json::Value = serde_json::from_slice(&b).unwrap_or_default();
                collect_ports(&v, &mut ports);
            }
        }
        ports
    }

    /// `lab down`, asserting success.
    pub fn down(&mut self) -> String {
        self.down = true;
        self.ok(&["down"])
    }

    /// What of this lab is still there: processes, cgroups, listening ports among `ports`.
    pub fn leftovers(&self, ports: &BTreeSet<u16>) -> Vec<String> {
        let mut left: Vec<String> = lab_processes(&self.name)
            .into_iter()
            .map(|p| format!("process {p}"))
            .collect();
        left.extend(
            lab_cgroups(&self.name)
                .into_iter()
                .map(|c| format!("cgroup {}", c.display())),
        );
        left.extend(
            listening(ports)
                .into_iter()
                .map(|p| format!("listening port {p}")),
        );
        if self.dir().exists() {
            left.push(format!("state folder {}", self.dir().display()));
        }
        left
    }
}

impl Drop for Lab {
    /// Takes the lab down if the test did not; never panics (a panic here, while a failed test unwinds,
    /// would abort the test binary and hide the failure's own message).
    fn drop(&mut self) {
        if self.down {
            return;
        }
        // A lab that never came up has no record: nothing to keep, and its `lab down` failing says nothing
        // worth showing.
        let recorded = self.dir().exists();
        if self.keep {
            if recorded {
                eprintln!(
                    "leaving lab {} up: LAB_STATE_DIR={} {} down --name {}",
                    self.name,
                    self.state().display(),
                    self.exe.display(),
                    self.name
                );
            }
            return;
        }
        match self.command(&["down"]).output() {
            Ok(out) if recorded && !out.status.success() => eprintln!(
                "lab down of {} failed; it may be left behind:\n{}",
                self.name,
                text(&out)
            ),
            Err(e) => eprintln!(
                "lab down of {} did not run ({e}); it may be left behind",
                self.name
            ),
            Ok(_) => {}
        }
    }
}

fn collect_ports(v: &serde_json::Value, out: &mut BTreeSet<u16>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                if (k.contains("port")
                    || k == "listen"
                    || k == "metrics"
                    || k == "proxy"
                    || k == "control"
                    || k == "weed"
                    || k == "weed_grpc")
                    && let Some(p) = v.as_u64()
                    && let Ok(p) = u16::try_from(p)
                {
                    out.insert(p);
                }
                collect_ports(v, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| collect_ports(v, out)),
        _ => {}
    }
}

/// Live processes carrying `STRAGGLER_LAB=<lab>@<folder>` in their environment, as `pid name` (the
/// tests give every lab its own name, so the name alone identifies it).
pub fn lab_processes(lab: &str) -> Vec<String> {
    let needle = format!("STRAGGLER_LAB={lab}@");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv.starts_with(needle.as_bytes())) {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat
                .rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z'))
            {
                continue;
            }
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            out.push(format!("{pid} {}", comm.trim()));
        }
    }
    out
}

/// The lab's cgroup, found the way the local runtime finds it (cgroup v1 `cpu` or `cpu,cpuacct`, or v2).
pub fn lab_cgroups(lab: &str) -> Vec<PathBuf> {
    lab_runtime_local::cgroup::find_lab_group(Path::new(lab_runtime_local::cgroup::SYS_CGROUP), lab)
        .into_iter()
        .collect()
}

/// Which of `ports` have a TCP listener on this machine (IPv4 or IPv6), from /proc/net.
pub fn listening(ports: &BTreeSet<u16>) -> Vec<u16> {
    let mut found = BTreeSet::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(t) = std::fs::read_to_string(f) else {
            continue;
        };
        for line in t.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // st 0A is LISTEN
            if cols.len() > 3
                && cols[3] == "0A"
                && let Some(port) = cols[1]
                    .rsplit(':')
                    .next()
                    .and_then(|h| u16::from_str_radix(h, 16).ok())
                && ports.contains(&port)
            {
                found.insert(port);
            }
        }
    }
    found.into_iter().collect()
}

/// Every TCP listener's local address on this machine, as `ip:port` (IPv4 only is enough for loopback checks).
pub fn listeners_of(pids: &[u32]) -> Vec<String> {
    // Map socket inodes of these processes to listening sockets.
    let mut inodes = BTreeSet::new();
    for pid in pids {
        if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            for fd in rd.flatten() {
                if let Ok(l) = std::fs::read_link(fd.path())
                    && let Some(i) = l
                        .to_str()
                        .and_then(|s| s.strip_prefix("socket:["))
                        .and_then(|s| s.strip_suffix(']'))
                {
                    inodes.insert(i.to_string());
                }
            }
        }
    }
    let mut out = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(t) = std::fs::read_to_string(f) else {
            continue;
        };
        for line in t.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() > 9 && cols[3] == "0A" && inodes.contains(cols[9]) {
                out.push(decode_addr(cols[1]));
            }
        }
    }
    out
}

fn decode_addr(hex: &str) -> String {
    let (ip, port) = hex.split_once(':').unwrap_or((hex, "0"));
    let port = u16::from_str_radix(port, 16).unwrap_or(0);
    if ip.len() == 8 {
        let n = u32::from_str_radix(ip, 16).unwrap_or(0);
        let b = n.to_le_bytes();
        format!("{}.{}.{}.{}:{port}", b[0], b[1], b[2], b[3])
    } else {
        format!("[{ip}]:{port}")
    }
}

/// Takes snapshots from `next` until `cond` holds, every half second, or panics after `deadline` with the
/// last one.
pub fn wait_until(
    what: &str,
    deadline: Duration,
    next: impl FnMut() -> Snapshot,
    cond: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    poll(what, deadline, Duration::from_millis(500), next, cond, |s| {
        format!("last snapshot:\n{}", summary(s))
    })
}

/// Takes values from `next` until `cond` holds, every `every`, or panics after `deadline` with the last one
/// as `show` tells it (what was seen, so that the failure says why the wait did not end).
pub fn poll<T>(
    what: &str,
    deadline: Duration,
    every: Duration,
    mut next: impl FnMut() -> T,
    cond: impl Fn(&T) -> bool,
    show: impl Fn(&T) -> String,
) -> T {
    let start = Instant::now();
    loop {
        let v = next();
        if cond(&v) {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}; {}",
            show(&v)
        );
        std::thread::sleep(every);
    }
}

/// Training throughput as % of the baseline; NaN before a baseline is known.
pub fn pct(s: &Snapshot) -> f64 {
    s.training.pct_of_baseline.unwrap_or(f64::NAN)
}

/// Reads a running `lab drill run`'s live lines up to the one that says its inject took effect, and
/// returns them; panics if the output ends first.
pub fn lines_until_injected(stdout: impl std::io::Read) -> Vec<String> {
    use std::io::BufRead;
    let mut seen = Vec::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.expect("the drill's output");
        let injected = line.contains("✓ inject");
        seen.push(line);
        if injected {
            return seen;
        }
    }
    panic!("the drill never reported its inject: {seen:#?}");
}

/// Sends SIGINT to a running `lab` command (Ctrl-C, as a person would) and waits for it to end.
pub fn interrupt(child: std::process::Child) -> Output {
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success(), "kill -INT {} failed", child.id());
    child
        .wait_with_output()
        .expect("the interrupted command's output")
}

/// The time each part of a long test took, printed as it goes (`--nocapture` shows them; CI keeps them
/// with a failure's output), so that a slow suite says where its minutes go.
#[derive(Debug)]
pub struct Phases {
    start: Instant,
    last: Instant,
}

impl Phases {
    pub fn start() -> Phases {
        let now = Instant::now();
        Phases {
            start: now,
            last: now,
        }
    }

    /// Prints how long the part that ends now took, and the total so far.
    pub fn done(&mut self, what: &str) {
        let now = Instant::now();
        eprintln!(
            "[{:6.1} s] {what}: {:.1} s",
            (now - self.start).as_secs_f64(),
            (now - self.last).as_secs_f64()
        );
        self.last = now;
    }
}

/// The step called `name` of drill report `d` (one drill of a run's JSON report); panics naming the drill.
pub fn step<'a>(d: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    d["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("{}: no {name} step in {d:#}", d["name"]))
}

/// The verifications of drill report `d` as judged: a failed one that the drill judged again after its
/// cleanup (the machine got slower during the drill, so the job's normal of the moment is the measure)
/// counts as that second judgement. A test that counts the fixes tried reads these.
pub fn verifications(d: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut out: Vec<&serde_json::Value> = Vec::new();
    let mut cleaned = false;
    for s in d["steps"].as_array().into_iter().flatten() {
        match s["step"].as_str() {
            Some("cleanup") => cleaned = true,
            Some("verify") if cleaned && out.last().is_some_and(|v| v["ok"] == false) => {
                eprintln!(
                    "{}: a failed verification judged again against the steady state after the cleanup: {}",
                    d["name"], s["summary"]
                );
                *out.last_mut().unwrap() = s;
            }
            Some("verify") => out.push(s),
            _ => {}
        }
    }
    out
}

/// Stdout and stderr of a finished command, for failure messages.
pub fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A few lines of a snapshot for failure messages.
pub fn summary(s: &Snapshot) -> String {
    let mut o = String::new();
    for p in &s.status.pods {
        o.push_str(&format!(
            "  {} {} ready={} restarts={} {:?}\n",
            p.name, p.phase, p.ready, p.restarts, p.reason
        ));
    }
    o.push_str(&format!(
        "  training: {:?} samples/s, {:?}% of baseline, step {}\n  alerts: {:?}\n  scrape errors: {:?}\n",
        s.training.samples_per_s,
        s.training.pct_of_baseline,
        s.training.step,
        s.alerts.iter().map(|a| &a.rule).collect::<Vec<_>>(),
        s.scrape_errors
    ));
    for v in &s.storage {
        o.push_str(&format!(
            "  {}: client p50 {:?} s, own probe {:?} s, readers {:?}\n",
            v.name, v.client_p50, v.own_probe, v.readers
        ));
    }
    o
}
