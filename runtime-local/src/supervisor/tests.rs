//! The reconciler driven by hand: a launcher of pretend processes that exit when a test says so, and a
//! clock the test moves. No process is started and no port is opened.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lab_model::Millicores;
use lab_model::status::{Phase, PodStatus};
use nix::sys::signal::Signal;

use super::commands::{RoleCommand, role_command};
use super::instance::Kind;
use super::launch::{Launcher, Process};
use super::reconcile::Sup;
use crate::procs::ProcRecord;
use crate::proto::{Request, Response};
use crate::spec::{LocalConfig, LocalSpec, Paths, RankPorts, StoragePorts};
use lab_runtime::Delay;

/// One pretend process.
#[derive(Debug)]
struct Pretend {
    name: String,
    exit: Option<ExitStatus>,
    signals: Vec<Signal>,
    /// Goes on running after SIGTERM (only SIGKILL ends it).
    ignores_term: bool,
}

#[derive(Debug, Default)]
struct Table {
    launched: Vec<RoleCommand>,
    /// By pid.
    procs: BTreeMap<u32, Pretend>,
    /// Names whose program cannot be started.
    refused: Vec<String>,
    /// Names whose next processes ignore SIGTERM.
    stubborn: Vec<String>,
}

/// The launcher of pretend processes, and the test's handle on them.
#[derive(Debug, Clone, Default)]
struct Procs(Arc<Mutex<Table>>);

impl Procs {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.0.lock().unwrap()
    }

    /// The pid of the live process of instance `name`.
    fn live(&self, name: &str) -> Option<u32> {
        self.table()
            .procs
            .iter()
            .find(|(_, p)| p.name == name && p.exit.is_none())
            .map(|(pid, _)| *pid)
    }

    /// Instance `name`'s live process exits with `code`.
    fn exit(&self, name: &str, code: i32) {
        let pid = self.live(name).unwrap_or_else(|| panic!("{name} is not running"));
        self.table().procs.get_mut(&pid).unwrap().exit = Some(ExitStatus::from_raw(code << 8));
    }

    /// How many times instance `name` was started.
    fn starts(&self, name: &str) -> usize {
        self.table().launched.iter().filter(|c| c.name == name).count()
    }

    fn last_command(&self, name: &str) -> RoleCommand {
        self.table()
            .launched
            .iter()
            .rev()
            .find(|c| c.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} was never started"))
    }

    fn signals(&self, pid: u32) -> Vec<Signal> {
        self.table().procs[&pid].signals.clone()
    }
}

#[derive(Debug)]
struct PretendProcess {
    record: ProcRecord,
    table: Procs,
}

impl Launcher for Procs {
    fn launch(&mut self, cmd: &RoleCommand) -> std::io::Result<Box<dyn Process>> {
        let mut t = self.table();
        if t.refused.contains(&cmd.name) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{}: No such file or directory", cmd.program.display()),
            ));
        }
        t.launched.push(cmd.clone());
        let pid = 1000 + t.launched.len() as u32;
        let ignores_term = t.stubborn.contains(&cmd.name);
        t.procs.insert(
            pid,
            Pretend {
                name: cmd.name.clone(),
                exit: None,
                signals: Vec::new(),
                ignores_term,
            },
        );
        Ok(Box::new(PretendProcess {
            record: ProcRecord {
                name: cmd.name.clone(),
                pid,
                start_ticks: 0,
                group_leader: true,
            },
            table: self.clone(),
        }))
    }
}

impl Process for PretendProcess {
    fn record(&self) -> &ProcRecord {
        &self.record
    }

    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        Ok(self.table.table().procs[&self.record.pid].exit)
    }

    fn signal(&self, sig: Signal) {
        let mut t = self.table.table();
        let p = t.procs.get_mut(&self.record.pid).unwrap();
        p.signals.push(sig);
        let ends = sig == Signal::SIGKILL || (sig == Signal::SIGTERM && !p.ignores_term);
        if ends && p.exit.is_none() {
            p.exit = Some(ExitStatus::from_raw(sig as i32));
        }
    }
}

fn config(dir: PathBuf, storage_servers: u32, gpus: u32) -> LocalConfig {
    LocalConfig {
        name: "t".into(),
        dir,
        storage_servers,
        gpus,
        seed: 42,
        watchdog_secs: 30.0,
        bin_dir: "/opt/lab/bin".into(),
        weed: "/opt/lab/bin/weed".into(),
        lab_bin: "/opt/lab/bin/lab".into(),
        master_port: 9333,
        master_grpc_port: 19333,
        rendezvous_port: 29500,
        storage: (0..storage_servers as u16)
            .map(|i| StoragePorts {
                weed: 8080 + i * 10,
                weed_grpc: 18080 + i * 10,
                metrics: 9080 + i * 10,
                proxy: 8081 + i * 10,
                control: 8082 + i * 10,
            })
            .collect(),
        cgroups: None,
        scope: None,
        cpu_limit_note: Some("no writable cgroups here".into()),
        port_base: None,
    }
}

/// A supervisor of 2 storage servers and 4 GPUs, nothing started, and the pretend processes it will start.
fn lab() -> (tempfile::TempDir, Sup, Procs) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path().to_path_buf(), 2, 4);
    let mut spec = LocalSpec::initial(Millicores(400));
    // Every rank's ports given beforehand, so the reconciler asks the kernel for none.
    for r in 0..8u16 {
        spec.rank_ports.insert(
            u32::from(r),
            RankPorts {
                listen: 40000 + r,
                metrics: 41000 + r,
            },
        );
    }
    let procs = Procs::default();
    let sup = Sup::new(cfg, spec, Paths::new(dir.path()), Box::new(procs.clone()));
    (dir, sup, procs)
}

fn running(sup: &Sup) -> Vec<String> {
    sup.insts
        .iter()
        .filter(|(_, i)| i.running.is_some())
        .map(|(n, _)| n.clone())
        .collect()
}

/// The master starts and answers, then the volume servers start (they wait for it) and answer too.
fn storage_up(sup: &mut Sup, t: Instant) {
    sup.reconcile(t);
    all_ready(sup);
    sup.reconcile(t);
    all_ready(sup);
}

/// What the probes do when every endpoint answers.
fn all_ready(sup: &mut Sup) {
    for i in sup.insts.values_mut().filter(|i| i.running.is_some()) {
        i.ready = true;
    }
}

fn ok(r: Response) {
    assert_eq!(r, Response::Ok);
}

fn pod(sup: &Sup, name: &str) -> PodStatus {
    sup.status()
        .status
        .pods
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no pod {name}"))
}

/// A lab with storage up and `ranks` ranks started at `t0`.
fn with_ranks(ranks: u32, t0: Instant) -> (tempfile::TempDir, Sup, Procs) {
    let (d, mut sup, procs) = lab();
    storage_up(&mut sup, t0);
    ok(sup.request(Request::Scale { ranks }, t0));
    ok(sup.request(Request::WorldSize { world_size: ranks }, t0));
    storage_up(&mut sup, t0);
    (d, sup, procs)
}

fn secs(t0: Instant, s: f64) -> Instant {
    t0 + Duration::from_secs_f64(s)
}

#[test]
fn storage_starts_first_and_the_seeder_runs_once_storage_is_ready() {
    let (_d, mut sup, procs) = lab();
    ok(sup.request(Request::Seed, Instant::now()));
    let t0 = Instant::now();
    sup.reconcile(t0);
    assert_eq!(
        running(&sup),
        ["storage-0-proxy", "storage-1-proxy", "storage-master"],
        "a volume server waits for the master to answer"
    );
    sup.reconcile(secs(t0, 0.5));
    assert_eq!(procs.starts("storage-0"), 0, "the master is not Ready yet");
    all_ready(&mut sup);
    sup.reconcile(secs(t0, 0.7));
    assert_eq!(
        running(&sup),
        [
            "storage-0",
            "storage-0-proxy",
            "storage-1",
            "storage-1-proxy",
            "storage-master"
        ]
    );
    sup.reconcile(secs(t0, 1.0));
    assert_eq!(procs.starts("seeder"), 0, "storage is not Ready yet");

    all_ready(&mut sup);
    sup.reconcile(secs(t0, 2.0));
    let seeder = procs.last_command("seeder");
    assert!(seeder.args.contains(&"--servers=2".to_string()), "{seeder:?}");
    assert!(seeder.args.contains(&"--seed=42".to_string()), "{seeder:?}");

    procs.exit("seeder", 0);
    sup.reconcile(secs(t0, 3.0));
    sup.reconcile(secs(t0, 60.0));
    assert_eq!(
        procs.starts("seeder"),
        1,
        "a seeder that finished is not run again"
    );
    assert_eq!(pod(&sup, "seeder").phase, Phase::Succeeded);
}

#[test]
fn a_finished_seeder_is_not_run_again_when_a_storage_server_misses_a_probe() {
    let (_d, mut sup, procs) = lab();
    ok(sup.request(Request::Seed, Instant::now()));
    let t0 = Instant::now();
    storage_up(&mut sup, t0);
    sup.reconcile(secs(t0, 1.0));
    procs.exit("seeder", 0);
    sup.reconcile(secs(t0, 2.0));
    // storage-1 starved of CPU misses a readiness probe, then answers again.
    sup.insts.get_mut("storage-1").expect("storage-1").ready = false;
    sup.reconcile(secs(t0, 3.0));
    all_ready(&mut sup);
    sup.reconcile(secs(t0, 4.0));
    sup.reconcile(secs(t0, 60.0));
    assert_eq!(procs.starts("seeder"), 1, "the dataset is not seeded again");
    assert_eq!(pod(&sup, "seeder").phase, Phase::Succeeded);
}

#[test]
fn a_ready_server_turns_not_ready_only_after_three_failed_probes_in_a_row() {
    let (_d, mut sup, _procs) = lab();
    let t0 = Instant::now();
    storage_up(&mut sup, t0);
    let ready = |sup: &Sup| pod(sup, "storage-1").ready;
    assert!(ready(&sup));
    let probe = |sup: &mut Sup, ok: bool| sup.insts.get_mut("storage-1").expect("storage-1").probed(ok);
    // Two misses, a pass, two misses: never three in a row, so Ready throughout (a starved server).
    for ok in [false, false, true, false, false] {
        probe(&mut sup, ok);
        assert!(
            ready(&sup),
            "Ready after a probe that {}",
            if ok { "passed" } else { "failed" }
        );
    }
    probe(&mut sup, false);
    assert!(!ready(&sup), "three failed probes in a row make it not Ready");
    probe(&mut sup, false);
    assert!(!ready(&sup));
    probe(&mut sup, true);
    assert!(ready(&sup), "one probe that passes makes it Ready again");
}

#[test]
fn a_seeder_that_keeps_failing_is_given_up_after_its_attempts() {
    let (_d, mut sup, procs) = lab();
    ok(sup.request(Request::Seed, Instant::now()));
    let t0 = Instant::now();
    storage_up(&mut sup, t0);
    let mut t = 0.0;
    for _ in 0..20 {
        sup.reconcile(secs(t0, t));
        all_ready(&mut sup);
        if procs.live("seeder").is_some() {
            procs.exit("seeder", 1);
        }
        t += 40.0;
    }
    assert_eq!(procs.starts("seeder"), 6);
    let p = pod(&sup, "seeder");
    assert_eq!(p.phase, Phase::Failed);
    assert_eq!(p.reason.as_deref(), Some("BackoffLimitExceeded"));
}

#[test]
fn ranks_beyond_the_gpus_stay_pending_with_insufficient_gpu() {
    let t0 = Instant::now();
    let (_d, mut sup, procs) = with_ranks(4, t0);
    ok(sup.request(Request::Scale { ranks: 5 }, t0));
    sup.reconcile(secs(t0, 1.0));
    assert_eq!(procs.starts("rank-4"), 0);
    let p = pod(&sup, "rank-4");
    assert_eq!(p.phase, Phase::Pending);
    assert_eq!(p.reason.as_deref(), Some("Insufficient gpu"));
    assert!(
        p.message
            .as_deref()
            .unwrap()
            .contains("4 of 4 counted GPUs in use"),
        "{p:?}"
    );
    assert_eq!(pod(&sup, "rank-3").node.as_deref(), Some("local/gpu-3"));

    // Scaled back, the Pending rank goes and nothing that runs is touched.
    ok(sup.request(Request::Scale { ranks: 4 }, t0));
    sup.reconcile(secs(t0, 2.0));
    assert!(sup.status().status.pods.iter().all(|p| p.name != "rank-4"));
    assert_eq!(procs.starts("rank-0"), 1);
}

#[test]
fn a_crashed_process_is_restarted_after_a_backoff_that_doubles() {
    let t0 = Instant::now();
    let (_d, mut sup, procs) = with_ranks(4, t0);
    procs.exit("rank-1", 3);
    sup.reconcile(secs(t0, 10.0));
    assert_eq!(procs.live("rank-1"), None, "not before its backoff");
    let p = pod(&sup, "rank-1");
    assert_eq!(p.restarts, 1);
    assert_eq!(p.reason.as_deref(), Some("CrashLoopBackOff"));
    assert_eq!(p.message.as_deref(), Some("exit code 3"));
    assert_eq!(p.last_exit_code, Some(3));
    assert_eq!(pod(&sup, "rank-0").last_exit_code, None);

    sup.reconcile(secs(t0, 11.1));
    assert!(procs.live("rank-1").is_some(), "restarted after 1 s");
    procs.exit("rank-1", 3);
    sup.reconcile(secs(t0, 12.0));
    sup.reconcile(secs(t0, 13.5));
    assert_eq!(procs.live("rank-1"), None, "the second backoff is 2 s");
    sup.reconcile(secs(t0, 14.1));
    assert!(procs.live("rank-1").is_some());
    assert_eq!(procs.starts("rank-1"), 3);
    assert_eq!(pod(&sup, "rank-1").restarts, 2);
    assert_eq!(procs.starts("rank-0"), 1, "the other ranks run on");
}

#[test]
fn a_new_world_size_replaces_every_rank_and_their_restarts_start_from_zero() {
    let t0 = Instant::now();
    let (_d, mut sup, procs) = with_ranks(4, t0);
    procs.exit("rank-2", 1);
    sup.reconcile(secs(t0, 1.0));
    sup.reconcile(secs(t0, 2.1));
    assert_eq!(pod(&sup, "rank-2").restarts, 1);
    let old = procs.live("rank-0").unwrap();

    ok(sup.request(Request::WorldSize { world_size: 3 }, secs(t0, 3.0)));
    sup.reconcile(secs(t0, 3.0));
    assert_eq!(procs.signals(old), [Signal::SIGTERM]);
    sup.reconcile(secs(t0, 3.2));
    sup.reconcile(secs(t0, 3.4));
    for r in 0..4 {
        let name = format!("rank-{r}");
        let cmd = procs.last_command(&name);
        assert!(cmd.args.contains(&"--world-size=3".to_string()), "{cmd:?}");
        assert!(procs.live(&name).is_some(), "{name} replaced");
        assert_eq!(pod(&sup, &name).restarts, 0, "{name} is a new pod");
        assert_eq!(pod(&sup, &name).last_exit_code, None, "{name} is a new pod");
    }
    assert!(
        procs
            .live("storage-0")
            .is_some_and(|pid| procs.signals(pid).is_empty())
    );
}

#[test]
fn a_rank_that_ignores_sigterm_is_killed_after_the_grace_period_and_restarted_from_its_template() {
    let t0 = Instant::now();
    let (_d, mut sup, procs) = with_ranks(4, t0);
    // As after a resize in place (the cgroup itself is not part of this test).
    sup.spec.cpu_live.insert(2, Millicores(150));
    procs.table().stubborn.push("rank-2".into());
    procs.exit("rank-2", 1);
    sup.reconcile(secs(t0, 1.0));
    sup.reconcile(secs(t0, 2.1));
    let pid = procs.live("rank-2").unwrap();

    ok(sup.request(Request::Restart { rank: 2 }, secs(t0, 5.0)));
    assert!(sup.spec.cpu_live.is_empty(), "a new pod comes from the template");
    sup.reconcile(secs(t0, 6.0));
    assert_eq!(procs.live("rank-2"), Some(pid), "still in its grace period");
    sup.reconcile(secs(t0, 8.5));
    assert_eq!(procs.signals(pid), [Signal::SIGTERM, Signal::SIGKILL]);
    sup.reconcile(secs(t0, 8.6));
    let new = procs.live("rank-2").unwrap();
    assert_ne!(new, pid);
    assert_eq!(procs.last_command("rank-2").cpu, Some(Millicores(400)));
    assert_eq!(pod(&sup, "rank-2").restarts, 0, "a replacement is not a crash");
}

#[test]
fn a_ranks_scratch_folder_outlives_its_restarts_but_not_its_pod() {
    let t0 = Instant::now();
    let (_d, mut sup, procs) = with_ranks(4, t0);
    let scratch = super::commands::rank_scratch(&sup.paths, 1);
    let arg = format!("--scratch-dir={}", scratch.display());
    assert!(procs.last_command("rank-1").args.contains(&arg));
    assert_eq!(procs.last_command("rank-1").data_dir, Some(scratch.clone()));
    // What the rank wrote there (the launcher of pretend processes makes no folder).
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("device-faults"), "1\n").unwrap();

    // A crash: the restarted process finds it.
    procs.exit("rank-1", 6);
    sup.reconcile(secs(t0, 1.0));
    sup.reconcile(secs(t0, 2.1));
    assert_eq!(procs.starts("rank-1"), 2);
    assert_eq!(pod(&sup, "rank-1").restarts, 1);
    assert!(scratch.join("device-faults").exists(), "kept across a restart");

    // A device fault set (rank-crash's inject): the device fails now, a crash the same instance restarts
    // after, with the setting and the folder.
    let pid = procs.live("rank-1").unwrap();
    ok(sup.request(
        Request::SetRankEnv {
            rank: 1,
            name: "LAB_DEVICE_FAULT_AFTER".into(),
            value: Some("150".into()),
        },
        secs(t0, 5.0),
    ));
    assert_eq!(procs.signals(pid), [Signal::SIGUSR1]);
    procs.exit("rank-1", 6);
    sup.reconcile(secs(t0, 5.1));
    sup.reconcile(secs(t0, 9.0));
    assert_eq!(procs.starts("rank-1"), 3);
    assert_eq!(pod(&sup, "rank-1").restarts, 2);
    assert_eq!(pod(&sup, "rank-1").last_exit_code, Some(6));
    assert!(scratch.exists(), "kept across the device's failure");
    let cmd = procs.last_command("rank-1");
    assert!(cmd.env.contains(&("LAB_DEVICE_FAULT_AFTER".into(), "150".into())));

    // A new pod (its settings changed otherwise, as rank-crash's clear does): an empty folder.
    let pid = procs.live("rank-1").unwrap();
    ok(sup.request(
        Request::SetRankEnv {
            rank: 1,
            name: "LAB_DEVICE_FAULT_AFTER".into(),
            value: None,
        },
        secs(t0, 9.5),
    ));
    assert_eq!(procs.signals(pid), [Signal::SIGTERM]);
    sup.reconcile(secs(t0, 9.6));
    sup.reconcile(secs(t0, 9.7));
    assert_eq!(procs.starts("rank-1"), 4);
    assert_eq!(pod(&sup, "rank-1").restarts, 0);
    assert!(!scratch.exists(), "a new pod's folder starts empty");
    let cmd = procs.last_command("rank-1");
    assert!(!cmd.env.iter().any(|(k, _)| k == "LAB_DEVICE_FAULT_AFTER"));

    // `lab restart rank 1` makes a new pod too; other ranks' folders are theirs.
    let other = super::commands::rank_scratch(&sup.paths, 2);
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    ok(sup.request(Request::Restart { rank: 1 }, secs(t0, 10.0)));
    sup.reconcile(secs(t0, 11.0));
    sup.reconcile(secs(t0, 11.1));
    assert_eq!(procs.starts("rank-1"), 5);
    assert!(!scratch.exists());
    assert!(other.exists());
}

#[test]
fn ranks_scaled_away_are_stopped_and_not_counted_as_crashes() {
    let t0 = Instant::now();
    let (_d, mut sup, procs) = with_ranks(4, t0);
    let gone = procs.live("rank-3").unwrap();
    ok(sup.request(Request::Scale { ranks: 2 }, t0));
    sup.reconcile(secs(t0, 1.0));
    assert_eq!(procs.signals(gone), [Signal::SIGTERM]);
    sup.reconcile(secs(t0, 2.0));
    sup.reconcile(secs(t0, 60.0));
    assert_eq!(procs.live("rank-3"), None);
    assert_eq!(procs.starts("rank-3"), 1);
    assert!(!sup.insts.contains_key("rank-3"));
    assert_eq!(sup.slots.keys().copied().collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn a_program_that_cannot_start_is_retried_with_backoff_and_shows_why() {
    let (_d, mut sup, procs) = lab();
    procs.table().refused.push("storage-1".into());
    let t0 = Instant::now();
    sup.reconcile(t0);
    all_ready(&mut sup);
    sup.reconcile(t0);
    let p = pod(&sup, "storage-1");
    assert_eq!(p.reason.as_deref(), Some("CrashLoopBackOff"));
    assert!(
        p.message
            .as_deref()
            .unwrap()
            .starts_with("cannot start: /opt/lab/bin/weed"),
        "{p:?}"
    );
    procs.table().refused.clear();
    sup.reconcile(secs(t0, 1.5));
    assert_eq!(procs.live("storage-1"), None, "the first retry waits 2 s");
    sup.reconcile(secs(t0, 2.1));
    assert!(procs.live("storage-1").is_some());
}

#[test]
fn requests_that_do_not_fit_are_refused_and_change_nothing() {
    let t0 = Instant::now();
    let (_d, mut sup, procs) = with_ranks(2, t0);
    let before = sup.spec.clone();
    let refused = |r: Response| match r {
        Response::Error { message } => message,
        other => panic!("accepted: {other:?}"),
    };
    assert!(refused(sup.request(Request::Scale { ranks: 0 }, t0)).contains("between 1 and"));
    assert!(refused(sup.request(Request::Restart { rank: 5 }, t0)).contains("rank-5 does not exist"));
    let m = refused(sup.request(
        Request::Resize {
            rank: 1,
            cpu: Millicores(150),
        },
        t0,
    ));
    assert!(
        m.contains("not enforced on this machine (no writable cgroups here)"),
        "{m}"
    );
    assert_eq!(sup.spec, before);
    sup.reconcile(secs(t0, 1.0));
    assert_eq!(
        procs.table().launched.len(),
        5 + 2,
        "storage and two ranks, once each"
    );
}

#[test]
fn the_desired_state_is_written_where_a_restarted_supervisor_reads_it() {
    let t0 = Instant::now();
    let (d, mut sup, _procs) = with_ranks(4, t0);
    ok(sup.request(Request::ApplyTemplate { cpu: Millicores(300) }, t0));
    let saved: LocalSpec =
        serde_json::from_slice(&std::fs::read(Paths::new(d.path()).spec()).unwrap()).unwrap();
    assert_eq!(saved, sup.spec);
    assert_eq!(saved.cpu_template, Millicores(300));
    let table = crate::procs::read_table(&Paths::new(d.path()).procs());
    assert_eq!(table.len(), 5 + 4, "every process is on record for `lab down`");
}

#[test]
fn a_restarted_proxy_comes_back_with_the_delay_on_record() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path().to_path_buf(), 2, 4);
    let paths = Paths::new(d.path());
    let mut spec = LocalSpec::initial(Millicores(400));
    spec.delays.insert(
        1,
        Delay {
            delay: Duration::from_millis(300),
            jitter: Duration::from_millis(20),
        },
    );
    let proxy = |i| role_command(Kind::Proxy(i), &cfg, &spec, &paths).unwrap();
    assert_eq!(
        proxy(1).args,
        [
            "--listen=127.0.0.1:8091",
            "--upstream=127.0.0.1:8090",
            "--control=127.0.0.1:8092",
            "--delay-ms=300",
            "--jitter-ms=20",
        ]
    );
    assert!(proxy(0).args.contains(&"--delay-ms=0".to_string()));
    assert_eq!(
        role_command(Kind::Proxy(2), &cfg, &spec, &paths),
        None,
        "no third server"
    );
    assert_eq!(
        role_command(Kind::Rank(0), &cfg, &spec, &paths),
        None,
        "no ports yet"
    );

    let volume = role_command(Kind::Volume(1), &cfg, &spec, &paths).unwrap();
    assert!(
        volume.args.contains(&"-publicUrl=127.0.0.1:8091".to_string()),
        "{volume:?}"
    );
    assert!(
        volume.args.contains(&"-master=127.0.0.1:9333.19333".to_string()),
        "{volume:?}"
    );
    assert_eq!(volume.cwd, Some(paths.data()));
}

fn world_size_of(procs: &Procs, name: &str) -> String {
    procs
        .last_command(name)
        .args
        .into_iter()
        .find(|a| a.starts_with("--world-size="))
        .unwrap_or_default()
}

#[test]
fn a_rolling_change_waits_behind_a_pending_rank_and_the_running_ranks_keep_their_revision() {
    let t0 = Instant::now();
    let (_d, mut sup, procs) = with_ranks(4, t0);
    ok(sup.request(
        Request::Rollout {
            ranks: 5,
            world_size: 5,
        },
        t0,
    ));
    for s in 1..20 {
        sup.reconcile(secs(t0, f64::from(s)));
        all_ready(&mut sup);
    }
    assert_eq!(pod(&sup, "rank-4").reason.as_deref(), Some("Insufficient gpu"));
    assert_eq!(sup.status().status.world_size, 5, "the configuration says five");
    for r in 0..4 {
        let name = format!("rank-{r}");
        assert_eq!(procs.starts(&name), 1, "{name} was not touched");
        assert_eq!(world_size_of(&procs, &name), "--world-size=4");
    }
    // A rank of the old revision that crashes comes back in its own pod, with its own configuration.
    procs.exit("rank-1", 1);
    sup.reconcile(secs(t0, 21.0));
    sup.reconcile(secs(t0, 22.5));
    assert_eq!(procs.starts("rank-1"), 2);
    assert_eq!(world_size_of(&procs, "rank-1"), "--world-size=4");
}

#[test]
fn scaling_back_unblocks_the_rollout_one_rank_at_a_time_highest_first() {
    let t0 = Instant::now();
    let (_d, mut sup, procs) = with_ranks(4, t0);
    ok(sup.request(
        Request::Rollout {
            ranks: 5,
            world_size: 5,
        },
        t0,
    ));
    sup.reconcile(secs(t0, 1.0));
    ok(sup.request(Request::Scale { ranks: 4 }, secs(t0, 2.0)));
    let mut order: Vec<String> = Vec::new();
    let mut t = 2.0;
    while order.len() < 4 && t < 60.0 {
        // Several ticks before the probes see the new rank Ready: the rollout waits for it.
        for k in 0..3 {
            sup.reconcile(secs(t0, t + 0.1 * f64::from(k)));
        }
        let replaced: Vec<String> = (0..4)
            .rev()
            .map(|r| format!("rank-{r}"))
            .filter(|n| procs.starts(n) == 2)
            .collect();
        assert!(
            replaced.len() <= order.len() + 1,
            "one rank at a time: {replaced:?}"
        );
        for n in replaced {
            if !order.contains(&n) {
                order.push(n);
            }
        }
        all_ready(&mut sup);
        t += 1.0;
    }
    assert_eq!(order, ["rank-3", "rank-2", "rank-1", "rank-0"]);
    for r in 0..4 {
        assert_eq!(world_size_of(&procs, &format!("rank-{r}")), "--world-size=5");
    }
}

#[test]
fn rolling_back_to_the_running_revision_restarts_nothing() {
    let t0 = Instant::now();
    let (_d, mut sup, procs) = with_ranks(4, t0);
    ok(sup.request(
        Request::Rollout {
            ranks: 5,
            world_size: 5,
        },
        t0,
    ));
    sup.reconcile(secs(t0, 1.0));
    ok(sup.request(
        Request::Rollout {
            ranks: 4,
            world_size: 4,
        },
        secs(t0, 2.0),
    ));
    for s in 2..10 {
        sup.reconcile(secs(t0, f64::from(s)));
        all_ready(&mut sup);
    }
    assert!(sup.status().status.pods.iter().all(|p| p.name != "rank-4"));
    for r in 0..4 {
        assert_eq!(procs.starts(&format!("rank-{r}")), 1);
    }
    assert!(
        sup.request(
            Request::Rollout {
                ranks: 0,
                world_size: 4
            },
            t0
        ) != Response::Ok
    );
    assert_eq!(sup.spec.ranks, 4, "a refused rollout changes nothing");
}
#[path = "jobs_tests.rs"]
mod jobs;
