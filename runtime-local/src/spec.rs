//! What the local lab is made of: its fixed configuration (written once by `lab up`) and its desired
//! state (changed by scaling, resizing, world-size and delay commands), both kept in the lab's directory.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use lab_model::Millicores;
use lab_model::db::DbTemplate;
use lab_model::jobs::ForeignJob;
use serde::{Deserialize, Serialize};

use super::cgroup::{Cgroups, ScopeRequest};
use lab_runtime::{Delay, Result, RuntimeError};

/// The ports of one storage server: weed itself, the proxy in front of it, and their side ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoragePorts {
    /// `weed volume -port`.
    pub weed: u16,
    pub weed_grpc: u16,
    /// `weed volume -metricsPort`.
    pub metrics: u16,
    /// The latency proxy, the address the master advertises as the server's publicUrl.
    pub proxy: u16,
    /// The proxy's control API.
    pub control: u16,
}

/// The ports of one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankPorts {
    /// The collective (ring all-reduce) listener.
    pub listen: u16,
    /// `/metrics`, `/readyz`, `/healthz`.
    pub metrics: u16,
}

/// Fixed at `lab up`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalConfig {
    pub name: String,
    pub dir: PathBuf,
    pub storage_servers: u32,
    pub gpus: u32,
    pub seed: u64,
    pub watchdog_secs: f64,
    /// Where `lab-rank`, `lab-seeder` and `lab-proxy` live.
    pub bin_dir: PathBuf,
    /// The `weed` binary.
    pub weed: PathBuf,
    /// The `lab` binary (the supervisor runs as `lab __supervise`).
    pub lab_bin: PathBuf,
    pub master_port: u16,
    pub master_grpc_port: u16,
    pub rendezvous_port: u16,
    pub storage: Vec<StoragePorts>,
    /// CPU limits through cgroups, or `None` when cgroups are not writable here.
    pub cgroups: Option<Cgroups>,
    /// The systemd scope the supervisor runs in, when its CPU limits are a delegated cgroup: the supervisor
    /// takes the scope as [`Self::cgroups`] once it runs there.
    #[serde(default)]
    pub scope: Option<ScopeRequest>,
    /// When CPU limits are not enforced, why, and what that costs ([`super::cgroup::off_note`]).
    pub cpu_limit_note: Option<String>,
    /// When set, ports are taken in order from here instead of from the kernel's free ports.
    pub port_base: Option<u16>,
}

impl LocalConfig {
    /// The master's address.
    pub fn master(&self) -> String {
        format!("127.0.0.1:{}", self.master_port)
    }
}

/// The desired state, changed by commands while the lab runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalSpec {
    /// Ranks asked for (the StatefulSet's replicas).
    pub ranks: u32,
    /// The world size every rank is told (the job's configuration).
    pub world_size: u32,
    /// The CPU limit in the rank template.
    pub cpu_template: Millicores,
    /// Ranks whose limit was changed in place, and to what.
    pub cpu_live: BTreeMap<u32, Millicores>,
    /// Delays set on storage servers' paths.
    pub delays: BTreeMap<u32, Delay>,
    /// Whether the dataset seeder should run (once).
    pub seed: bool,
    /// Ports given to each rank index, kept across restarts and scaling.
    pub rank_ports: BTreeMap<u32, RankPorts>,
    /// Bumped whenever the rank configuration changes; ranks started under an older one are replaced.
    pub generation: u64,
    /// True after a rolling change ([`lab_runtime::Ranks::rollout_ranks`]): a rank whose world size differs
    /// from `world_size` is replaced one at a time, only while every rank is available, instead of all
    /// at once.
    #[serde(default)]
    pub rolling: bool,
    /// Settings of one rank alone (`LAB_*` environment variables), kept across its restarts like a
    /// per-rank entry of the job's configuration.
    #[serde(default)]
    pub rank_env: BTreeMap<u32, BTreeMap<String, String>>,
    /// Jobs of other teams the lab runs beside the training job, by name.
    #[serde(default)]
    pub foreign_jobs: BTreeMap<String, ForeignJobSpec>,
    /// The id the next foreign job gets (ids are never reused, so a replaced job is a new instance).
    #[serde(default)]
    pub next_job_id: u32,
    /// Storage servers whose volume server process is held to a CPU limit (the slow-disk fault), and to
    /// what; a volume server that restarts comes back under the same limit.
    #[serde(default)]
    pub storage_cpu: BTreeMap<u32, Millicores>,
    /// The optional database beside the job (`lab up --database`).
    #[serde(default)]
    pub database: Option<DbSpec>,
}

/// The lab's database as the supervisor runs it: a primary, one standby (a StatefulSet of one, with a
/// template) and the writer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DbSpec {
    /// PostgreSQL's programs.
    pub pg_bin: PathBuf,
    pub primary_port: u16,
    pub standby_port: u16,
    /// The writer's `/metrics`.
    pub writer_metrics_port: u16,
    /// The standby StatefulSet's pod template.
    pub template: DbTemplate,
    /// The template the standby pod now standing was made from. A pod keeps it until it is deleted: a
    /// changed template does not touch a pod that exists (nor one left Pending); `None` after a delete,
    /// and the supervisor makes the pod again from `template`.
    pub standby_pod: Option<DbTemplate>,
}

/// One foreign job as the supervisor runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForeignJobSpec {
    /// Its instance id (`Kind::Job(id)`).
    pub id: u32,
    pub job: ForeignJob,
    /// Its `/metrics` port.
    pub metrics_port: u16,
    /// Bumped when its settings change: the running process is replaced, as a Deployment rolls its pod.
    pub generation: u64,
}

/// The CPU limit of a foreign job's own cgroup: it is another team's job, with a quota of its own.
pub const FOREIGN_JOB_CPU: Millicores = Millicores(500);

impl LocalSpec {
    /// The spec at the start: storage only, no ranks yet.
    pub fn initial(cpu: Millicores) -> Self {
        LocalSpec {
            ranks: 0,
            world_size: 0,
            cpu_template: cpu,
            cpu_live: BTreeMap::new(),
            delays: BTreeMap::new(),
            seed: false,
            rank_ports: BTreeMap::new(),
            generation: 1,
            rolling: false,
            rank_env: BTreeMap::new(),
            foreign_jobs: BTreeMap::new(),
            next_job_id: 0,
            storage_cpu: BTreeMap::new(),
            database: None,
        }
    }

    /// Rank `r`'s CPU limit in its own spec: the in-place value if it was resized, else the template's.
    pub fn cpu_for(&self, r: u32) -> Millicores {
        self.cpu_live.get(&r).copied().unwrap_or(self.cpu_template)
    }
}

/// Hands out ports: in order from a base, or free ones from the kernel.
#[derive(Debug)]
pub struct PortAllocator {
    next: Option<u16>,
    taken: Vec<u16>,
}

impl PortAllocator {
    /// From `base` upwards, or from the kernel when `None`.
    pub fn new(base: Option<u16>) -> Self {
        PortAllocator {
            next: base,
            taken: Vec::new(),
        }
    }

    /// Ports already handed out by others, never to be given again.
    pub fn avoid(&mut self, ports: impl IntoIterator<Item = u16>) {
        self.taken.extend(ports);
    }

    /// The next port. With a base, a port in use is an error naming it; without one, the kernel picks.
    ///
    /// # Errors
    /// [`RuntimeError::InvalidInput`] when a port from the base is in use or the range runs out.
    pub fn take(&mut self) -> Result<u16> {
        match self.next {
            Some(p) => {
                let next = p.checked_add(1).ok_or_else(|| {
                    RuntimeError::InvalidInput(
                        "--port-base is too high: the lab needs a range of ports".into(),
                    )
                })?;
                self.next = Some(next);
                if self.taken.contains(&p) {
                    return self.take();
                }
                if !port_free(p) {
                    return Err(RuntimeError::InvalidInput(format!(
                        "port {p} on 127.0.0.1 is in use: choose another --port-base, or leave it out to use free ports"
                    )));
                }
                self.taken.push(p);
                Ok(p)
            }
            None => loop {
                let p = TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .map_err(|e| RuntimeError::io("finding a free port on 127.0.0.1", e))?
                    .port();
                // weed derives nothing from these, but two roles must never share one.
                if !self.taken.contains(&p) {
                    self.taken.push(p);
                    return Ok(p);
                }
            },
        }
    }
}

/// True when nothing listens on `127.0.0.1:port` (we can bind it).
pub fn port_free(port: u16) -> bool {
    TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).is_ok()
}

/// Files in the lab's directory.
#[derive(Debug, Clone)]
pub struct Paths {
    pub dir: PathBuf,
}

impl Paths {
    pub fn new(dir: &Path) -> Self {
        Paths {
            dir: dir.to_path_buf(),
        }
    }
    pub fn spec(&self) -> PathBuf {
        self.dir.join("spec.json")
    }
    pub fn socket(&self) -> PathBuf {
        self.dir.join("supervisor.sock")
    }
    pub fn procs(&self) -> PathBuf {
        self.dir.join("procs.json")
    }
    pub fn supervisor(&self) -> PathBuf {
        self.dir.join("supervisor.json")
    }
    /// The supervisor's log: its `tracing` events, and anything it writes to stderr.
    pub fn supervisor_log(&self) -> PathBuf {
        self.dir.join("supervisor.log")
    }
    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }
    pub fn log(&self, name: &str) -> PathBuf {
        self.logs().join(format!("{name}.log"))
    }
    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_in_use_is_named() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let busy = l.local_addr().unwrap().port();
        let mut a = PortAllocator::new(Some(busy));
        let e = a.take().unwrap_err().to_string();
        assert!(e.contains(&format!("port {busy}")), "{e}");
    }

    #[test]
    fn free_ports_are_distinct() {
        let mut a = PortAllocator::new(None);
        let ports: Vec<u16> = (0..20).map(|_| a.take().unwrap()).collect();
        let mut d = ports.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), ports.len());
    }

    #[test]
    fn resized_ranks_keep_their_own_limit() {
        let mut s = LocalSpec::initial(Millicores(400));
        s.cpu_live.insert(1, Millicores(150));
        assert_eq!(s.cpu_for(1), Millicores(150));
        assert_eq!(s.cpu_for(0), Millicores(400));
    }
}
