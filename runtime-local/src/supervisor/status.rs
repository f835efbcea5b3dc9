//! What the supervisor reports: its instances read as pods in the shared status model (a pod per role
//! instance, a storage server's volume and proxy as the two containers of one pod), the scrape targets,
//! the delays on record and the storage paths the ranks use.

use lab_model::names;
use lab_model::status::{LabStatus, Phase, PodStatus, Resources, Role, RuntimeKind};

use super::instance::{Kind, inst_name};
use super::reconcile::{Inst, Sup};
use crate::proto::LocalStatus;
use lab_runtime::{ScrapeTarget, TargetKind};

impl Sup {
    /// The lab as it is now.
    pub fn status(&self) -> LocalStatus {
        let cfg = &self.cfg;
        let spec = &self.spec;
        let mut pods = Vec::new();
        let inst = |k: Kind| self.insts.get(&inst_name(k));
        let pod_of =
            |name: String, role: Role, index: Option<u32>, parts: &[Option<&Inst>], containers: &[&str]| {
                let mut p = PodStatus::new(name, role, index);
                let all_running =
                    !parts.is_empty() && parts.iter().all(|i| i.is_some_and(|i| i.running.is_some()));
                p.phase = if all_running {
                    Phase::Running
                } else {
                    Phase::Pending
                };
                p.ready = all_running && parts.iter().all(|i| i.is_some_and(|i| i.ready));
                p.restarts = parts.iter().map(|i| i.map_or(0, |i| i.restarts)).sum();
                p.last_exit_code = parts.iter().find_map(|i| i.and_then(|i| i.last_exit_code));
                p.pid = parts
                    .first()
                    .and_then(|i| i.and_then(|i| i.running.as_ref().map(|r| r.process.record().pid)));
                if !all_running
                    && let Some(e) = parts.iter().find_map(|i| i.and_then(|i| i.last_exit.clone()))
                {
                    // Like a pod whose container keeps exiting: still Running, not Ready, backing off.
                    p.phase = Phase::Running;
                    p.reason = Some("CrashLoopBackOff".into());
                    p.message = Some(e);
                }
                p.node = Some("local".into());
                p.containers = containers.iter().map(|s| s.to_string()).collect();
                p
            };
        pods.push(pod_of(
            names::STORAGE_MASTER.into(),
            Role::StorageMaster,
            None,
            &[inst(Kind::Master)],
            &["weed-master"],
        ));
        for i in 0..cfg.storage_servers {
            pods.push(pod_of(
                names::storage(i),
                Role::StorageServer,
                Some(i),
                &[inst(Kind::Volume(i)), inst(Kind::Proxy(i))],
                &["weed-volume", "latency-proxy"],
            ));
        }
        if spec.seed {
            let mut p = pod_of(
                "seeder".into(),
                Role::Seeder,
                None,
                &[inst(Kind::Seeder)],
                &["lab-seeder"],
            );
            if let Some(s) = inst(Kind::Seeder) {
                if s.succeeded {
                    p.phase = Phase::Succeeded;
                    p.reason = None;
                    p.message = None;
                } else if s.failed {
                    p.phase = Phase::Failed;
                    p.reason = Some("BackoffLimitExceeded".into());
                }
            }
            pods.push(p);
        }
        let mut targets = Vec::new();
        for r in 0..spec.ranks {
            let name = names::rank(r);
            let mut p = pod_of(
                name.clone(),
                Role::Rank,
                Some(r),
                &[inst(Kind::Rank(r))],
                &["lab-rank"],
            );
            p.resources = Resources {
                cpu_live: cfg.cgroups.as_ref().and_then(|cg| {
                    if inst(Kind::Rank(r)).is_some_and(|i| i.running.is_some()) {
                        cg.limit(&name).ok().flatten()
                    } else {
                        None
                    }
                }),
                cpu_spec: Some(spec.cpu_for(r)),
                cpu_template: Some(spec.cpu_template),
                gpus: 1,
            };
            match self.slots.get(&r) {
                Some(slot) => p.node = Some(format!("local/gpu-{slot}")),
                None => {
                    p.phase = Phase::Pending;
                    p.ready = false;
                    p.node = None;
                    p.reason = Some("Insufficient gpu".into());
                    p.message = Some(format!(
                        "0/1 nodes are available: 1 Insufficient gpu ({} of {} counted GPUs in use)",
                        self.slots.len(),
                        cfg.gpus
                    ));
                }
            }
            if p.phase == Phase::Running
                && let Some(ports) = spec.rank_ports.get(&r)
            {
                targets.push(ScrapeTarget {
                    instance: name,
                    kind: TargetKind::Rank,
                    index: r,
                    address: format!("http://127.0.0.1:{}/metrics", ports.metrics),
                });
            }
            pods.push(p);
        }
        for j in spec.foreign_jobs.values() {
            let mut p = pod_of(
                j.job.name.clone(),
                Role::ForeignJob,
                None,
                &[inst(Kind::Job(j.id))],
                &["lab-reader"],
            );
            p.resources = Resources {
                cpu_live: cfg
                    .cgroups
                    .as_ref()
                    .and_then(|cg| cg.limit(&j.job.name).ok().flatten()),
                cpu_spec: Some(crate::spec::FOREIGN_JOB_CPU),
                cpu_template: Some(crate::spec::FOREIGN_JOB_CPU),
                gpus: 0,
            };
            if p.phase == Phase::Running {
                targets.push(ScrapeTarget {
                    instance: j.job.name.clone(),
                    kind: TargetKind::Job,
                    index: j.id,
                    address: format!("http://127.0.0.1:{}/metrics", j.metrics_port),
                });
            }
            pods.push(p);
        }
        let database = self.database_pods(&mut pods, &mut targets, &pod_of);
        for (i, p) in cfg.storage.iter().enumerate() {
            targets.push(ScrapeTarget {
                instance: names::storage(i as u32),
                kind: TargetKind::Storage,
                index: i as u32,
                address: format!("http://127.0.0.1:{}/metrics", p.metrics),
            });
        }
        let mut notes = Vec::new();
        if let Some(n) = &cfg.cpu_limit_note {
            notes.push(n.clone());
        }
        LocalStatus {
            status: LabStatus {
                lab: cfg.name.clone(),
                runtime: RuntimeKind::Local,
                pods,
                gpus_capacity: cfg.gpus,
                gpu_resource: "gpu".into(),
                ranks_desired: spec.ranks,
                world_size: spec.world_size,
                storage_servers: cfg.storage_servers,
                delay_path: "proxy".into(),
                notes,
            },
            targets,
            delays: spec.delays.iter().map(|(k, v)| (*k, *v)).collect(),
            storage_paths: cfg
                .storage
                .iter()
                .map(|p| format!("127.0.0.1:{}", p.proxy))
                .collect(),
            supervisor_pid: std::process::id(),
            foreign_jobs: spec.foreign_jobs.values().map(|j| j.job.clone()).collect(),
            storage_cpu: spec.storage_cpu.iter().map(|(k, v)| (*k, *v)).collect(),
            database,
        }
    }
}
