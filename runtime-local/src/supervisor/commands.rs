//! The command line of each role the supervisor runs: the SeaweedFS master and volume servers, the latency
//! proxy in front of each volume server, the dataset seeder and the ranks. Pure: the configuration and
//! the desired state in, a [`RoleCommand`] out; starting it is the launcher's business.

use std::path::PathBuf;

use lab_model::{Millicores, names};

use super::instance::{Kind, inst_name};
use crate::spec::{LocalConfig, LocalSpec, Paths};

const LO: &str = "127.0.0.1";
/// `weed volume -concurrentDownloadLimitMB`: what one storage server serves at once.
pub(crate) const VOLUME_DOWNLOAD_LIMIT_MB: u32 = 1;
/// The master's growth of volumes on its own turned off (`[master.volume_growth] disable = true` of its
/// `master.toml`, in environment form): the seeder places every volume itself with `/vol/grow` on a named
/// server, and a master left to grow adds empty volumes minutes into a run, which a drain then moves too.
const MASTER_GROWTH_OFF: (&str, &str) = ("WEED_MASTER_VOLUME_GROWTH_DISABLE", "true");

/// How to start one instance.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RoleCommand {
    /// The instance's name (`rank-1`, `storage-0-proxy`, ...): its log file and its cgroup are named so.
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// A folder the process keeps its files in, made before it starts.
    pub data_dir: Option<PathBuf>,
    /// The working directory, when the process resolves paths against it.
    pub cwd: Option<PathBuf>,
    /// A CPU limit (a rank's, or a volume server's under the slow-disk fault): the process is placed in a
    /// cgroup of its own with this quota.
    pub cpu: Option<Millicores>,
    /// Environment variables of this instance alone.
    pub env: Vec<(String, String)>,
}

/// Rank `r`'s scratch folder (`lab-rank --scratch-dir`): what its pod's emptyDir is on Kubernetes.
pub(crate) fn rank_scratch(paths: &Paths, r: u32) -> PathBuf {
    paths.data().join(names::rank(r))
}

/// The command line of instance `kind` of the lab configured by `cfg`, as `spec` wants it now.
///
/// A rank's ports must already be in `spec.rank_ports` (the reconciler hands them out); `None` when they
/// are not.
pub(crate) fn role_command(
    kind: Kind,
    cfg: &LocalConfig,
    spec: &LocalSpec,
    paths: &Paths,
) -> Option<RoleCommand> {
    let name = inst_name(kind);
    let data = paths.data();
    let mut cmd = RoleCommand {
        name,
        program: PathBuf::new(),
        args: Vec::new(),
        data_dir: None,
        cwd: None,
        cpu: None,
        env: Vec::new(),
    };
    match kind {
        Kind::Master => {
            let mdir = data.join("master");
            cmd.program = cfg.weed.clone();
            cmd.args = vec![
                "master".into(),
                format!("-ip={LO}"),
                format!("-ip.bind={LO}"),
                format!("-port={}", cfg.master_port),
                format!("-port.grpc={}", cfg.master_grpc_port),
                format!("-mdir={}", mdir.display()),
                "-volumeSizeLimitMB=64".into(),
                "-defaultReplication=000".into(),
                // One master: leader at once, without Raft's bootstrap wait for peers (1.6 s measured),
                // so the volume servers' first heartbeat finds a leader instead of retrying 5 s later.
                "-peers=none".into(),
            ];
            cmd.data_dir = Some(mdir);
            cmd.cwd = Some(data);
            cmd.env = vec![(MASTER_GROWTH_OFF.0.into(), MASTER_GROWTH_OFF.1.into())];
        }
        Kind::Volume(i) => {
            let p = cfg.storage.get(i as usize)?;
            let vdir = data.join(names::storage(i));
            cmd.program = cfg.weed.clone();
            cmd.args = vec![
                "volume".into(),
                format!("-ip={LO}"),
                format!("-ip.bind={LO}"),
                format!("-port={}", p.weed),
                format!("-port.grpc={}", p.weed_grpc),
                format!("-publicUrl={LO}:{}", p.proxy),
                format!("-dir={}", vdir.display()),
                "-max=32".into(),
                // weed finds the master's gRPC port from `host:port.grpcPort`.
                format!("-master={}.{}", cfg.master(), cfg.master_grpc_port),
                format!("-rack={}", names::storage(i)),
                "-dataCenter=lab".into(),
                format!("-metricsIp={LO}"),
                format!("-metricsPort={}", p.metrics),
                // The lab's servers stop with the lab: no 10 s of heartbeats telling the master it is leaving.
                "-preStopSeconds=0".into(),
                // A server's bandwidth is finite: it serves this many MB of needles at once and queues
                // the rest, so a job reading hard from it makes every other reader of it wait (the
                // competing-job fault), as a disk or NIC would, without touching its siblings.
                format!("-concurrentDownloadLimitMB={VOLUME_DOWNLOAD_LIMIT_MB}"),
            ];
            cmd.data_dir = Some(vdir);
            cmd.cwd = Some(data);
            // A volume server that restarts comes back under the CPU limit the lab has on record.
            cmd.cpu = spec.storage_cpu.get(&i).copied();
        }
        Kind::Proxy(i) => {
            let p = cfg.storage.get(i as usize)?;
            // A proxy that restarts comes back with the delay the lab has on record.
            let d = spec.delays.get(&i).copied();
            cmd.program = cfg.bin_dir.join("lab-proxy");
            cmd.args = vec![
                format!("--listen={LO}:{}", p.proxy),
                format!("--upstream={LO}:{}", p.weed),
                format!("--control={LO}:{}", p.control),
                format!(
                    "--delay-ms={}",
                    d.map(|d| d.delay.as_secs_f64() * 1000.0).unwrap_or(0.0)
                ),
                format!(
                    "--jitter-ms={}",
                    d.map(|d| d.jitter.as_secs_f64() * 1000.0).unwrap_or(0.0)
                ),
            ];
        }
        Kind::Seeder => {
            cmd.program = cfg.bin_dir.join("lab-seeder");
            cmd.args = vec![
                format!("--master={}", cfg.master()),
                format!("--ranks={}", spec.ranks.max(cfg.gpus).max(1)),
                // Every server the lab started, not the seeder's default of three.
                format!("--servers={}", cfg.storage_servers),
                format!("--seed={}", cfg.seed),
            ];
        }
        Kind::Rank(r) => {
            let ports = spec.rank_ports.get(&r)?;
            cmd.program = cfg.bin_dir.join("lab-rank");
            cmd.args = vec![
                format!("--rank={r}"),
                format!("--world-size={}", spec.world_size),
                format!("--master={}", cfg.master()),
                format!("--rendezvous={LO}:{}", cfg.rendezvous_port),
                format!("--listen={LO}:{}", ports.listen),
                format!("--advertise={LO}"),
                format!("--metrics-listen={LO}:{}", ports.metrics),
                format!("--watchdog-timeout={}s", cfg.watchdog_secs),
            ];
            // The pod's emptyDir: kept across the rank's restarts, emptied for each new pod (the reconciler).
            let scratch = rank_scratch(paths, r);
            cmd.args.push(format!("--scratch-dir={}", scratch.display()));
            cmd.data_dir = Some(scratch);
            cmd.cpu = Some(spec.cpu_for(r));
            cmd.env = spec
                .rank_env
                .get(&r)
                .map(|e| e.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default();
        }
        Kind::Job(id) => {
            let j = spec.foreign_jobs.values().find(|j| j.id == id)?;
            // Its own name for its log and its cgroup: it is another team's job, not a role of the lab's.
            cmd.name = j.job.name.clone();
            cmd.program = cfg.bin_dir.join("lab-reader");
            cmd.args = vec![
                format!("--master={}", cfg.master()),
                format!("--server={}", names::storage(j.job.server)),
                format!("--threads={}", j.job.threads),
                format!("--metrics-listen={LO}:{}", j.metrics_port),
            ];
            if let Some(r) = j.job.rate {
                cmd.args.push(format!("--rate={r}"));
            }
            cmd.cpu = Some(crate::spec::FOREIGN_JOB_CPU);
        }
        Kind::DbPrimary | Kind::DbStandby => {
            let d = spec.database.as_ref()?;
            let (port, role) = if kind == Kind::DbPrimary {
                (d.primary_port, vec!["primary".to_string()])
            } else {
                (
                    d.standby_port,
                    vec![
                        "standby".into(),
                        format!("--primary-port={}", d.primary_port),
                        format!("--name={}", lab_model::db::STANDBY),
                    ],
                )
            };
            cmd.program = cfg.bin_dir.join("lab-db");
            cmd.args = vec![
                format!("--pg-bin={}", d.pg_bin.display()),
                format!("--data={}", data.join(&cmd.name).display()),
                format!("--port={port}"),
            ];
            cmd.args.extend(role);
        }
        Kind::Writer => {
            let d = spec.database.as_ref()?;
            cmd.program = cfg.bin_dir.join("lab-writer");
            cmd.args = vec![
                format!("--primary={LO}:{}", d.primary_port),
                format!("--metrics-listen={LO}:{}", d.writer_metrics_port),
            ];
        }
    }
    Some(cmd)
}
