//! The pod-like status model shared by every runtime.
//!
//! On Kubernetes these values come from pods, events and the node; on the local runtime the supervisor
//! fills them from its processes, cgroups and readiness probes. Either way, `lab status`, the console and
//! the drills see the same shape.

use serde::{Deserialize, Serialize};

use crate::Millicores;

/// The lifecycle phase of a role instance, as Kubernetes names pod phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// Accepted but not running, e.g. waiting for a GPU (`reason` says why).
    Pending,
    /// Its process (container) is running.
    Running,
    /// It ran to completion (the dataset seeder).
    Succeeded,
    /// It exited with an error and will not be restarted.
    Failed,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        })
    }
}

/// What a role instance does in the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The SeaweedFS master.
    StorageMaster,
    /// A SeaweedFS volume server.
    StorageServer,
    /// The job that seeds the dataset.
    Seeder,
    /// A training rank.
    Rank,
    /// A metrics server (Prometheus) deployed beside the job.
    Monitoring,
    /// A job of another team sharing the storage (not a rank): see `lab_model::jobs`.
    ForeignJob,
    /// A PostgreSQL server of the lab's optional database (`db-0` primary, `db-1` standby).
    Database,
    /// The application committing to that database (`lab-writer`).
    DbWriter,
}

/// Resources of one instance: what runs now against what it was given and what its template says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// The CPU limit in force right now (the cgroup quota, or the container's applied resources).
    pub cpu_live: Option<Millicores>,
    /// The CPU limit in this instance's own spec (a pod spec after an in-place resize says the new value).
    pub cpu_spec: Option<Millicores>,
    /// The CPU limit in the workload's template (StatefulSet); an instance that differs has drifted.
    pub cpu_template: Option<Millicores>,
    /// Counted GPUs this instance holds (or asks for, when Pending).
    pub gpus: u32,
}

impl Resources {
    /// True when the live limit differs from the template: the instance was changed in place.
    pub fn drifted(&self) -> bool {
        matches!((self.cpu_live, self.cpu_template), (Some(l), Some(t)) if l != t)
    }

    /// The CPU limit as `live/spec` (the template when there is no spec), `-` for what is unknown.
    pub fn cpu_live_spec(&self) -> String {
        match (self.cpu_live, self.cpu_spec.or(self.cpu_template)) {
            (Some(l), Some(s)) => format!("{l}/{s}"),
            (Some(l), None) => l.to_string(),
            (None, Some(s)) => format!("-/{s}"),
            (None, None) => "-".to_string(),
        }
    }
}

/// One role instance, shaped like a pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodStatus {
    /// `rank-1`, `storage-0`, `storage-master`, `seeder`.
    pub name: String,
    pub role: Role,
    /// The rank or server index, for roles that have one.
    pub index: Option<u32>,
    pub phase: Phase,
    /// The readiness probe's answer. Deliberately says nothing about training progress.
    pub ready: bool,
    /// How many times the instance was restarted after exiting.
    pub restarts: u32,
    /// The exit code of its last exit that was followed by a restart (kube-state-metrics'
    /// `kube_pod_container_status_last_terminated_exitcode`); none before the first, or when it was
    /// killed by a signal.
    #[serde(default)]
    pub last_exit_code: Option<i32>,
    /// Why the instance is Pending or Failed, e.g. `Insufficient gpu`.
    pub reason: Option<String>,
    /// A longer message from the scheduler or the supervisor.
    pub message: Option<String>,
    pub resources: Resources,
    /// The node (Kubernetes) or slot (local) it runs on.
    pub node: Option<String>,
    /// The containers in the instance, including any added to it (a delay container, for example).
    pub containers: Vec<String>,
    /// The process id on the local runtime.
    pub pid: Option<u32>,
}

impl PodStatus {
    /// A fresh Pending instance with nothing known yet.
    pub fn new(name: impl Into<String>, role: Role, index: Option<u32>) -> Self {
        PodStatus {
            name: name.into(),
            role,
            index,
            phase: Phase::Pending,
            ready: false,
            restarts: 0,
            last_exit_code: None,
            reason: None,
            message: None,
            resources: Resources::default(),
            node: None,
            containers: Vec::new(),
            pid: None,
        }
    }

    /// Running and Ready, what `kubectl get pods` shows as healthy.
    pub fn is_running_ready(&self) -> bool {
        self.phase == Phase::Running && self.ready
    }
}

/// Which place the lab runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeKind {
    /// Supervised processes on this machine.
    Local,
    /// A kind cluster the lab created.
    Kind,
    /// A Kubernetes cluster the lab was pointed at with a kubeconfig.
    Cluster,
}

impl std::fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RuntimeKind::Local => "local",
            RuntimeKind::Kind => "kind",
            RuntimeKind::Cluster => "cluster",
        })
    }
}

/// The whole lab as a runtime sees it: instances, the node's counted GPUs, and the job's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabStatus {
    /// The lab's name (several labs can run side by side).
    pub lab: String,
    pub runtime: RuntimeKind,
    /// Every role instance, ranks in order.
    pub pods: Vec<PodStatus>,
    /// GPUs the node advertises (the extended resource, or the local slot count).
    pub gpus_capacity: u32,
    /// The name of the counted GPU resource, e.g. `gpu` locally or `lab.dev/gpu` on Kubernetes.
    pub gpu_resource: String,
    /// The number of ranks the workload asks for (StatefulSet replicas).
    pub ranks_desired: u32,
    /// The world size every rank is told to expect (the job's configuration).
    pub world_size: u32,
    /// The storage server count.
    pub storage_servers: u32,
    /// How an added storage delay is applied on this runtime: `proxy` or `netem`.
    pub delay_path: String,
    /// Notes the runtime wants a person to see (e.g. "cgroups not writable: CPU limits not enforced").
    pub notes: Vec<String>,
}

impl LabStatus {
    /// A lab of the default shape (4 ranks and world size 4, 4 GPUs, 3 storage servers behind the latency
    /// proxy) with no instances yet: a starting point for tests and examples.
    pub fn default_shape(lab: impl Into<String>, runtime: RuntimeKind) -> LabStatus {
        LabStatus {
            lab: lab.into(),
            runtime,
            pods: Vec::new(),
            gpus_capacity: 4,
            gpu_resource: "gpu".into(),
            ranks_desired: 4,
            world_size: 4,
            storage_servers: 3,
            delay_path: "proxy".into(),
            notes: Vec::new(),
        }
    }

    /// The rank instances, in rank order.
    pub fn ranks(&self) -> impl Iterator<Item = &PodStatus> {
        self.pods.iter().filter(|p| p.role == Role::Rank)
    }

    /// `(ready, total)` over the ranks and storage servers: what "4/4 Ready" counts.
    pub fn ready_count(&self) -> (usize, usize) {
        let relevant: Vec<&PodStatus> = self
            .pods
            .iter()
            .filter(|p| matches!(p.role, Role::Rank | Role::StorageServer))
            .collect();
        (
            relevant.iter().filter(|p| p.is_running_ready()).count(),
            relevant.len(),
        )
    }

    /// `(ready, total)` over the ranks only.
    pub fn ranks_ready(&self) -> (usize, usize) {
        self.ready_of(Role::Rank)
    }

    /// Where the lab's desired state disagrees with itself, one line each: ranks asked for that the
    /// configured world size does not count, a rank that is not Running and Ready, a live CPU limit that
    /// drifted from its template. Empty for a job that is whole. A job can train at its baseline while
    /// one of these holds (world size set back to 4 with a fifth rank still Pending) and break the moment
    /// the cluster changes, so a fix is not verified until this is empty.
    pub fn inconsistencies(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.ranks_desired != self.world_size {
            out.push(format!(
                "ranks asked for {} but the world size configured is {}",
                self.ranks_desired, self.world_size
            ));
        }
        for p in self.ranks() {
            if !p.is_running_ready() {
                out.push(format!(
                    "{} is {}{}",
                    p.name,
                    if p.phase == Phase::Running {
                        "Running, not Ready".to_string()
                    } else {
                        p.phase.to_string()
                    },
                    p.reason.as_ref().map_or(String::new(), |r| format!(" ({r})"))
                ));
            }
            if let (true, Some(l), Some(t)) = (
                p.resources.drifted(),
                p.resources.cpu_live,
                p.resources.cpu_template,
            ) {
                out.push(format!(
                    "{}'s live CPU limit {l} differs from its template {t}",
                    p.name
                ));
            }
        }
        out
    }

    /// `(ready, total)` over the storage servers only.
    pub fn servers_ready(&self) -> (usize, usize) {
        self.ready_of(Role::StorageServer)
    }

    fn ready_of(&self, role: Role) -> (usize, usize) {
        let of_role: Vec<&PodStatus> = self.pods.iter().filter(|p| p.role == role).collect();
        (
            of_role.iter().filter(|p| p.is_running_ready()).count(),
            of_role.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(i: u32, phase: Phase, ready: bool, live: u32) -> PodStatus {
        let mut p = PodStatus::new(format!("rank-{i}"), Role::Rank, Some(i));
        p.phase = phase;
        p.ready = ready;
        p.resources.cpu_live = Some(Millicores(live));
        p.resources.cpu_template = Some(Millicores(400));
        p
    }

    fn lab(pods: Vec<PodStatus>, desired: u32, world: u32) -> LabStatus {
        LabStatus {
            lab: "t".into(),
            runtime: RuntimeKind::Local,
            pods,
            gpus_capacity: 4,
            gpu_resource: "gpu".into(),
            ranks_desired: desired,
            world_size: world,
            storage_servers: 3,
            delay_path: "proxy".into(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn a_whole_job_has_no_inconsistencies_and_each_kind_is_named() {
        let whole: Vec<PodStatus> = (0..4).map(|i| rank(i, Phase::Running, true, 400)).collect();
        assert!(lab(whole.clone(), 4, 4).inconsistencies().is_empty());

        // The world size set back to 4 while a fifth rank is still asked for and Pending.
        let mut five = whole.clone();
        let mut pending = rank(4, Phase::Pending, false, 400);
        pending.reason = Some("Insufficient gpu".into());
        five.push(pending);
        assert_eq!(
            lab(five, 5, 4).inconsistencies(),
            vec![
                "ranks asked for 5 but the world size configured is 4".to_string(),
                "rank-4 is Pending (Insufficient gpu)".to_string(),
            ]
        );

        // A limit cut in place and a rank that runs but is not Ready.
        let mut drifted = whole;
        drifted[1] = rank(1, Phase::Running, true, 150);
        drifted[2] = rank(2, Phase::Running, false, 400);
        assert_eq!(
            lab(drifted, 4, 4).inconsistencies(),
            vec![
                "rank-1's live CPU limit 150m differs from its template 400m".to_string(),
                "rank-2 is Running, not Ready".to_string(),
            ]
        );
    }

    #[test]
    fn drift_needs_both_values() {
        let mut r = Resources {
            cpu_live: Some(Millicores(150)),
            cpu_template: Some(Millicores(400)),
            ..Default::default()
        };
        assert!(r.drifted());
        r.cpu_live = Some(Millicores(400));
        assert!(!r.drifted());
        r.cpu_live = None;
        assert!(!r.drifted());
    }

    #[test]
    fn phase_serialises_like_kubernetes() {
        assert_eq!(serde_json::to_string(&Phase::Pending).unwrap(), "\"Pending\"");
        assert_eq!(
            serde_json::to_string(&Role::StorageServer).unwrap(),
            "\"storage-server\""
        );
    }
}
