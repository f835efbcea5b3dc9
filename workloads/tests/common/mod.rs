//! Shared pieces of the integration tests: a real SeaweedFS (master and three volume servers on loopback,
//! or as many as a test asks for, each volume server behind a counting TCP forwarder that is its public
//! URL), real rank processes, and scraping their metrics. Everything started here is stopped by its own PID when its guard drops, so a
//! failing test cleans up too.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lab_model::expo::parse;
use lab_model::labels::Labels;

/// The `weed` binary: `LAB_WEED`, else `weed` on `PATH`. Missing weed fails the test with what to run.
pub fn weed_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("LAB_WEED").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "LAB_WEED={} is not a file: run `eval \"$(scripts/tools.sh weed)\"`",
            p.display()
        );
        return p;
    }
    let found = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("weed"))
                .find(|p| p.is_file())
        })
        .unwrap_or_default();
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bin/weed");
    found.or_else(|| local.is_file().then_some(local)).unwrap_or_else(|| {
        panic!(
            "SeaweedFS `weed` was not found (LAB_WEED unset, not on PATH): run `eval \"$(scripts/tools.sh weed)\"` \
             from the repository root, then run the tests again"
        )
    })
}

/// A free TCP port on 127.0.0.1 (bound and released; good enough for a test on a quiet loopback).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed (by its PID) and reaped when dropped.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command, dir: &Path) -> Proc {
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.err"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            name: name.to_string(),
            child,
            stdout,
            stderr,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits for the exit, at most `timeout`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub fn stdout_text(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid()),
                nix::sys::signal::Signal::SIGCONT,
            );
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A TCP forwarder standing in as a volume server's public URL, counting what passes through it.
pub struct Forwarder {
    pub addr: String,
    pub connections: Arc<AtomicU64>,
    pub bytes_to_client: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Forwarder {
    pub fn start(target: String) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let connections = Arc::new(AtomicU64::new(0));
        let bytes_to_client = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, b, s) = (connections.clone(), bytes_to_client.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                c.fetch_add(1, Ordering::Relaxed);
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let counted = b.clone();
                std::thread::spawn(move || pump(c2, s2, None));
                std::thread::spawn(move || pump(server, client, Some(counted)));
            }
        });
        Forwarder {
            addr,
            connections,
            bytes_to_client,
            stop,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes_to_client.load(Ordering::Relaxed)
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, counter: Option<Arc<AtomicU64>>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
                if let Some(c) = &counter {
                    c.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(&self.addr);
    }
}

/// A SeaweedFS master and its volume servers (`storage-0..`, data center `lab`) on loopback.
pub struct Weed {
    pub dir: tempfile::TempDir,
    pub master: String,
    /// Internal address of each volume server.
    pub volumes: Vec<String>,
    /// The forwarder each server advertises as its public URL.
    pub proxies: Vec<Forwarder>,
    procs: Vec<Proc>,
}

impl Weed {
    /// Starts the master and three volume servers (`storage-0..2`), as the lab's default does.
    pub fn start() -> Weed {
        Weed::start_with(3)
    }

    /// Starts the master and `servers` volume servers and waits until the master lists them all. A
    /// process that dies on the way (a port taken by someone else between picking and binding) is started
    /// again on other ports.
    pub fn start_with(servers: u32) -> Weed {
        let weed = weed_binary();
        let dir = tempfile::Builder::new().prefix("lab-weed-").tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("master")).unwrap();
        let mut procs: Vec<Proc> = Vec::new();
        let mut master = String::new();
        let mut master_grpc = String::new();
        for attempt in 0..3 {
            let [port, grpc] = free_ports::<2>();
            let mut p = Proc::spawn(
                &format!("weed-master-{attempt}"),
                Command::new(&weed).args([
                    "master",
                    "-ip=127.0.0.1",
                    "-ip.bind=127.0.0.1",
                    &format!("-port={port}"),
                    &format!("-port.grpc={grpc}"),
                    &format!("-mdir={}", dir.path().join("master").display()),
                    "-volumeSizeLimitMB=64",
                    // One master needs no election: without this the first volume server's heartbeat
                    // meets "not current leader" and retries 5 s later, as the lab's own master does not.
                    "-peers=none",
                ]),
                dir.path(),
            );
            let addr = format!("127.0.0.1:{port}");
            let up = wait_for(Duration::from_secs(20), || {
                p.child.try_wait().ok().flatten().is_none() && http_get(&addr, "/dir/status").is_some()
            });
            let alive = p.child.try_wait().ok().flatten().is_none();
            procs.push(p);
            if up && alive {
                master = addr;
                master_grpc = format!("127.0.0.1:{port}.{grpc}");
                break;
            }
        }
        assert!(
            !master.is_empty(),
            "the SeaweedFS master did not start: {}",
            logs_of(&procs)
        );
        let mut volumes = Vec::new();
        let mut proxies = Vec::new();
        for i in 0..servers {
            let vdir = dir.path().join(format!("volume-{i}"));
            std::fs::create_dir_all(&vdir).unwrap();
            let mut started = false;
            for attempt in 0..3 {
                let [port, grpc] = free_ports::<2>();
                let url = format!("127.0.0.1:{port}");
                let proxy = Forwarder::start(url.clone());
                let mut p = Proc::spawn(
                    &format!("weed-volume-{i}-{attempt}"),
                    Command::new(&weed).args([
                        "volume",
                        "-ip=127.0.0.1",
                        "-ip.bind=127.0.0.1",
                        &format!("-port={port}"),
                        &format!("-port.grpc={grpc}"),
                        &format!("-dir={}", vdir.display()),
                        "-max=8",
                        &format!("-master={master_grpc}"),
                        &format!("-rack=storage-{i}"),
                        "-dataCenter=lab",
                        &format!("-publicUrl={}", proxy.addr),
                    ]),
                    dir.path(),
                );
                let registered = wait_for(Duration::from_secs(30), || {
                    p.child.try_wait().ok().flatten().is_some()
                        || http_get(&master, "/dir/status")
                            .is_some_and(|b| b.contains(&format!("\"storage-{i}\"")) && b.contains(&url))
                });
                let alive = p.child.try_wait().ok().flatten().is_none();
                procs.push(p);
                if registered && alive {
                    volumes.push(url);
                    proxies.push(proxy);
                    started = true;
                    break;
                }
            }
            assert!(
                started,
                "volume server storage-{i} did not start: {}",
                logs_of(&procs)
            );
        }
        Weed {
            dir,
            master,
            volumes,
            proxies,
            procs,
        }
    }

    pub fn logs(&self) -> String {
        logs_of(&self.procs)
    }

    /// Runs lab-seeder and returns its JSON summary.
    pub fn seed(&self, args: &[&str]) -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_lab-seeder"))
            .args(["--master", &self.master])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "lab-seeder failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn logs_of(procs: &[Proc]) -> String {
    procs
        .iter()
        .map(|p| format!("--- {}\n{}\n", p.name, tail(&p.stderr_text(), 15)))
        .collect()
}

/// `n` distinct free TCP ports on 127.0.0.1 (all bound at once, then released).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().unwrap().port())
}

/// Polls `cond` until it holds (true) or `timeout` passes (false).
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A plain `GET` returning the body of a 200, or `None`.
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return Some(dechunk(body));
    }
    Some(body.to_string())
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The value of the sample `name{labels}` in a Prometheus text exposition (labels in any order), read by
/// the lab's own exposition parser; `None` when there is none or the text is malformed.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want = Labels::from_pairs(labels.iter().copied());
    parse(text)
        .ok()?
        .into_iter()
        .find(|s| s.name == name && s.labels == want)
        .map(|s| s.value)
}

/// Every label set of samples named `name` (as `name{labels}`), with values.
pub fn series(text: &str, name: &str) -> Vec<(String, f64)> {
    parse(text)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.name == name)
        .map(|s| (format!("{}{}", s.name, s.labels), s.value))
        .collect()
}

/// The arguments of rank `rank` of a `world`-rank job on this SeaweedFS.
pub fn rank_args(
    weed: &Weed,
    rendezvous: &str,
    rank: u32,
    world: u32,
    metrics_port: u16,
    extra: &[&str],
) -> Vec<String> {
    let mut v: Vec<String> = [
        "--rank",
        &rank.to_string(),
        "--world-size",
        &world.to_string(),
        "--master",
        &weed.master,
        "--rendezvous",
        rendezvous,
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        &format!("127.0.0.1:{metrics_port}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// Starts rank `rank` with the given arguments.
pub fn spawn_rank(weed: &Weed, name: &str, args: &[String]) -> Proc {
    Proc::spawn(
        name,
        Command::new(env!("CARGO_BIN_EXE_lab-rank")).args(args),
        weed.dir.path(),
    )
}

/// Polls `cond` until it holds, panicking with `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
