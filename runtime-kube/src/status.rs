//! The lab as the API server sees it, in the shared status model: pods (with their scheduler messages and
//! their live, spec and template CPU limits), the StatefulSet, `lab-config` and the nodes' GPUs.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ListParams};
use lab_model::Millicores;
use lab_model::names;
use lab_model::status::{LabStatus, Phase, PodStatus, Role};

use super::manifests::names as obj;
use super::{KubeRuntime, api};
use lab_runtime::{Result, ScrapeTarget, TargetKind};

/// Pod annotation: how that delay was applied (`netem` or `proxy`).
pub const PATH_ANNOTATION: &str = "lab.dev/delay-path";
/// Pod annotation: whether this pod's node kernel has `sch_netem` (`supported` or `unsupported`).
pub const NETEM_ANNOTATION: &str = "lab.dev/netem";

/// A CPU quantity (`150m`, `0.4`, `1`) in millicores.
pub fn cpu_of(q: &Quantity) -> Option<Millicores> {
    q.0.parse().ok()
}

/// The CPU limit of the rank container in a pod spec (a pod's, or the StatefulSet template's).
pub(crate) fn rank_cpu_limit(spec: &PodSpec) -> Option<Millicores> {
    let rank = spec.containers.iter().find(|c| c.name == obj::RANK_CONTAINER)?;
    cpu_limit(rank.resources.as_ref()?)
}

/// The CPU limit in a container's resources (as specified, or as the kubelet reports them live).
pub(crate) fn cpu_limit(r: &ResourceRequirements) -> Option<Millicores> {
    r.limits.as_ref()?.get("cpu").and_then(cpu_of)
}

/// A whole-number quantity (a GPU count).
pub fn count_of(q: &Quantity) -> Option<u32> {
    q.0.trim().parse().ok()
}

/// How many of `resource` the nodes offer (allocatable), summed.
pub fn offered(nodes: &[Node], resource: &str) -> u32 {
    nodes
        .iter()
        .filter_map(|n| {
            n.status
                .as_ref()?
                .allocatable
                .as_ref()?
                .get(resource)
                .and_then(count_of)
        })
        .sum()
}

/// The short reason in a scheduler message: `Insufficient lab.dev/gpu` out of
/// `0/1 nodes are available: 1 Insufficient lab.dev/gpu. preemption: ...`.
pub fn short_reason(message: &str) -> Option<String> {
    let at = message.find("Insufficient ")?;
    let rest = &message[at..];
    // A resource name has dots of its own (`lab.dev/gpu`): the sentence ends at a dot before a space.
    let end = [rest.find(". "), rest.find(','), rest.find(';')]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(rest.len());
    Some(rest[..end].trim().trim_end_matches('.').to_string())
}

/// Which role, index and lab name a pod of this lab stands for, from its labels and name.
pub fn role_of(pod: &Pod) -> Option<(Role, Option<u32>, String)> {
    let labels = pod.metadata.labels.as_ref()?;
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    match labels.get(obj::COMPONENT_LABEL)?.as_str() {
        "rank" => {
            let i = names::index_of(pod_name, obj::RANKS)?;
            Some((Role::Rank, Some(i), names::rank(i)))
        }
        "storage-server" => {
            let i: u32 = labels.get(obj::INDEX_LABEL)?.parse().ok()?;
            Some((Role::StorageServer, Some(i), names::storage(i)))
        }
        "storage-master" => Some((Role::StorageMaster, None, names::STORAGE_MASTER.to_string())),
        "seeder" => Some((Role::Seeder, None, "seeder".to_string())),
        "monitoring" => Some((Role::Monitoring, None, "prometheus".to_string())),
        obj::FOREIGN_JOB_COMPONENT => Some((Role::ForeignJob, None, labels.get(obj::JOB_LABEL)?.clone())),
        obj::DATABASE_COMPONENT => {
            let i = names::index_of(pod_name, obj::DATABASE)?;
            Some((Role::Database, Some(i), pod_name.to_string()))
        }
        obj::WRITER_COMPONENT => Some((Role::DbWriter, None, lab_model::db::WRITER.to_string())),
        _ => None,
    }
}

/// One pod in the status model. `template_cpu` is the StatefulSet template's limit (ranks only) and
/// `events` the FailedScheduling messages for this pod, newest last.
pub fn pod_status(
    pod: &Pod,
    gpu_resource: &str,
    template_cpu: Option<Millicores>,
    events: &[String],
) -> Option<PodStatus> {
    let (role, index, name) = role_of(pod)?;
    let mut s = PodStatus::new(name, role, index);
    let status = pod.status.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    s.phase = match status.phase.as_deref() {
        Some("Running") => Phase::Running,
        Some("Succeeded") => Phase::Succeeded,
        Some("Failed") => Phase::Failed,
        _ => Phase::Pending,
    };
    let conditions = status.conditions.clone().unwrap_or_default();
    s.ready = pod_ready(pod);
    let container_statuses = status.container_statuses.clone().unwrap_or_default();
    s.restarts = container_statuses
        .iter()
        .map(|c| u32::try_from(c.restart_count).unwrap_or(0))
        .sum();
    s.node = spec.node_name.clone();

    // Why it is not running: the scheduler's verdict first, then a waiting container's reason.
    if s.phase == Phase::Pending {
        if let Some(c) = conditions
            .iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        {
            let message = c.message.clone().or_else(|| events.last().cloned());
            s.reason = message
                .as_deref()
                .and_then(short_reason)
                .or_else(|| c.reason.clone());
            s.message = message;
        } else if let Some(m) = events.last() {
            s.reason = short_reason(m);
            s.message = Some(m.clone());
        }
        if s.reason.is_none()
            && let Some(w) = container_statuses
                .iter()
                .find_map(|c| c.state.as_ref()?.waiting.clone())
        {
            s.reason = w.reason;
            s.message = w.message;
        }
    } else if s.phase == Phase::Failed {
        s.reason = status.reason.clone();
        s.message = status.message.clone();
    } else if s.phase == Phase::Running
        && let Some(c) = container_statuses
            .iter()
            .find(|c| c.state.as_ref().is_some_and(|st| st.waiting.is_some()))
    {
        // A container that keeps exiting: the pod stays Running, not Ready, backing off. Say why it
        // exited last (its exit code and the end of its log), as the local runtime does.
        s.reason = c
            .state
            .as_ref()
            .and_then(|st| st.waiting.as_ref()?.reason.clone());
        s.message = c
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .map(|t| {
                let said = t.message.as_deref().map(str::trim).filter(|m| !m.is_empty());
                match said.and_then(|m| m.lines().last()) {
                    Some(last) => format!("exit code {}: {last}", t.exit_code),
                    None => format!("exit code {}", t.exit_code),
                }
            });
    }
    // A pod being deleted is on its way out: its Service endpoints already drop it, and counting it as
    // Ready would say "4/4 Ready" for ranks that are about to restart.
    if pod.metadata.deletion_timestamp.is_some() {
        s.ready = false;
        if s.reason.is_none() {
            s.reason = Some("Terminating".to_string());
        }
    }

    // The main container: the rank's, the volume server's, else the first.
    let main = match role {
        Role::Rank => obj::RANK_CONTAINER,
        Role::StorageServer => obj::VOLUME_CONTAINER,
        _ => spec
            .containers
            .first()
            .map(|c| c.name.as_str())
            .unwrap_or_default(),
    };
    if let Some(c) = spec.containers.iter().find(|c| c.name == main) {
        let limits = c
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .unwrap_or_default();
        s.resources.cpu_spec = limits.get("cpu").and_then(cpu_of);
        s.resources.gpus = limits.get(gpu_resource).and_then(count_of).unwrap_or(0);
    }
    // The main container's last exit that was followed by a restart, as kube-state-metrics'
    // `kube_pod_container_status_last_terminated_exitcode` shows it; none when a signal ended it.
    s.last_exit_code = container_statuses
        .iter()
        .find(|c| c.name == main)
        .and_then(|c| c.last_state.as_ref()?.terminated.as_ref())
        .filter(|t| t.signal.unwrap_or(0) == 0)
        .map(|t| t.exit_code);
    s.resources.cpu_live = container_statuses
        .iter()
        .find(|c| c.name == main)
        .and_then(|c| c.resources.as_ref()?.limits.as_ref()?.get("cpu").and_then(cpu_of));
    s.resources.cpu_template = if role == Role::Rank {
        template_cpu
    } else {
        s.resources.cpu_spec
    };

    s.containers = spec.containers.iter().map(|c| c.name.clone()).collect();
    for e in spec.ephemeral_containers.iter().flatten() {
        // An added container says what it did, so an incident shows what runs in each pod.
        let cmd: Vec<String> = e
            .command
            .iter()
            .flatten()
            .chain(e.args.iter().flatten())
            .cloned()
            .collect();
        let state = status
            .ephemeral_container_statuses
            .iter()
            .flatten()
            .find(|st| st.name == e.name)
            .and_then(|st| st.state.as_ref())
            .map(|st| {
                if st.running.is_some() {
                    "running"
                } else if st.terminated.as_ref().is_some_and(|t| t.exit_code == 0) {
                    "exited 0"
                } else if st.terminated.is_some() {
                    "failed"
                } else {
                    "waiting"
                }
            })
            .unwrap_or("added");
        let last = cmd.last().cloned().unwrap_or_default();
        // A delay container's script: show the tc command itself, not its PATH or its echo.
        let shown = match last.find("tc qdisc") {
            Some(at) => last[at..]
                .split(" &&")
                .next()
                .unwrap_or_default()
                .split(" 2>")
                .next()
                .unwrap_or_default()
                .to_string(),
            None => last,
        };
        s.containers
            .push(format!("{} (ephemeral, {state}: {shown})", e.name));
    }
    Some(s)
}

/// Orders instances the way every view lists them: master, servers, seeder, ranks, monitoring.
pub fn sort_pods(pods: &mut [PodStatus]) {
    pods.sort_by(|a, b| (a.role_order(), a.index, &a.name).cmp(&(b.role_order(), b.index, &b.name)));
}

trait RoleOrder {
    fn role_order(&self) -> u8;
}

impl RoleOrder for PodStatus {
    fn role_order(&self) -> u8 {
        match self.role {
            Role::StorageMaster => 0,
            Role::StorageServer => 1,
            Role::Seeder => 2,
            Role::Rank => 3,
            Role::Monitoring => 4,
            Role::ForeignJob => 5,
            Role::Database => 6,
            Role::DbWriter => 7,
        }
    }
}

/// Picks, for each status-model name, the pod that stands for it: not terminating over terminating, then
/// the newest (a Recreate rollout or a Job retry briefly has two).
pub fn current_pods(pods: Vec<Pod>) -> Vec<Pod> {
    let mut by_name: BTreeMap<String, Pod> = BTreeMap::new();
    for p in pods {
        let Some((_, _, name)) = role_of(&p) else { continue };
        let better = match by_name.get(&name) {
            None => true,
            Some(old) => {
                let key = |p: &Pod| {
                    (
                        p.metadata.deletion_timestamp.is_none(),
                        p.metadata.creation_timestamp.clone(),
                    )
                };
                key(&p) > key(old)
            }
        };
        if better {
            by_name.insert(name, p);
        }
    }
    by_name.into_values().collect()
}

impl KubeRuntime {
    pub(crate) fn selector(&self) -> String {
        format!("{}={}", obj::INSTANCE_LABEL, self.name)
    }

    pub(crate) fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.rec.namespace)
    }

    pub(crate) fn sts_api(&self) -> Api<StatefulSet> {
        Api::namespaced(self.client.clone(), &self.rec.namespace)
    }

    pub(crate) fn cm_api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.rec.namespace)
    }

    /// The lab's pods, one per status-model name.
    pub(crate) async fn lab_pods(&self) -> Result<Vec<Pod>> {
        let lp = ListParams::default().labels(&self.selector());
        let pods = api::within("list the lab's pods", self.rec.request_timeout, async {
            self.pods_api()
                .list(&lp)
                .await
                .map_err(|e| api::kube_err("list the lab's pods", e))
        })
        .await?;
        Ok(current_pods(pods.items))
    }

    /// The ranks' StatefulSet.
    pub(crate) async fn statefulset(&self) -> Result<StatefulSet> {
        api::within("read the ranks' StatefulSet", self.rec.request_timeout, async {
            self.sts_api()
                .get(obj::RANKS)
                .await
                .map_err(|e| api::kube_err("read the ranks' StatefulSet", e))
        })
        .await
    }

    /// The CPU limit in the StatefulSet's template.
    pub(crate) fn template_cpu(sts: &StatefulSet) -> Option<Millicores> {
        rank_cpu_limit(sts.spec.as_ref()?.template.spec.as_ref()?)
    }

    /// The world size in `lab-config`.
    pub(crate) async fn config_world_size(&self) -> Result<u32> {
        let cm = api::within("read lab-config", self.rec.request_timeout, async {
            self.cm_api()
                .get(obj::CONFIG)
                .await
                .map_err(|e| api::kube_err("read lab-config", e))
        })
        .await?;
        cm.data
            .as_ref()
            .and_then(|d| d.get(obj::WORLD_SIZE_KEY))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| lab_runtime::RuntimeError::Kube("lab-config has no valid world-size".to_string()))
    }

    /// The GPUs the nodes offer (allocatable), summed; `None` when nodes may not be listed.
    pub(crate) async fn gpu_capacity(&self) -> Result<Option<u32>> {
        match api::list_nodes(&self.client, self.rec.request_timeout).await {
            Ok(nodes) => Ok(Some(offered(&nodes, &self.rec.gpu_resource))),
            Err(e) if api::status_code(&e) == Some(403) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// FailedScheduling messages for the pods that are Pending without a scheduler message.
    async fn scheduling_events(&self, pods: &[Pod]) -> Result<BTreeMap<String, Vec<String>>> {
        let mut out = BTreeMap::new();
        let needs = pods.iter().any(|p| {
            let st = p.status.as_ref();
            st.and_then(|s| s.phase.as_deref()) == Some("Pending")
                && !st.and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "PodScheduled" && c.message.is_some())
                })
        });
        if !needs {
            return Ok(out);
        }
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.rec.namespace);
        let lp = ListParams::default().fields("reason=FailedScheduling");
        let list = api::within("list scheduling events", self.rec.request_timeout, async {
            events
                .list(&lp)
                .await
                .map_err(|e| api::kube_err("list scheduling events", e))
        })
        .await?;
        let mut items = list.items;
        items.sort_by_key(|e| e.last_timestamp.clone().map(|t| t.0));
        for e in items {
            if let (Some(name), Some(msg)) = (e.involved_object.name, e.message) {
                out.entry(name).or_insert_with(Vec::new).push(msg);
            }
        }
        Ok(out)
    }

    /// The whole lab in the status model.
    pub(crate) async fn lab_status(&self) -> Result<LabStatus> {
        // The four reads that need nothing of each other at once: a status costs the slowest round trip
        // to the API server, not the sum of four (the collector gives a status 900 ms each tick).
        let (pods, sts, world_size, gpus) = tokio::try_join!(
            self.lab_pods(),
            self.statefulset(),
            self.config_world_size(),
            self.gpu_capacity()
        )?;
        let events = self.scheduling_events(&pods).await?;
        let template_cpu = Self::template_cpu(&sts);
        let mut out: Vec<PodStatus> = pods
            .iter()
            .filter_map(|p| {
                let pod_name = p.metadata.name.clone().unwrap_or_default();
                let ev = events.get(&pod_name).map(Vec::as_slice).unwrap_or(&[]);
                pod_status(p, &self.rec.gpu_resource, template_cpu, ev)
            })
            .collect();
        sort_pods(&mut out);
        let mut notes = Vec::new();
        if gpus.is_none() {
            notes.push(format!(
                "nodes cannot be listed with this kubeconfig: the {} capacity is unknown",
                self.rec.gpu_resource
            ));
        }
        let delay_path = delay_path_of(&pods, self.rec.delay);
        if delay_path.1 {
            notes.push(
                "the node kernel has no sch_netem: storage delays go through the latency proxy".to_string(),
            );
        }
        Ok(LabStatus {
            lab: self.name.clone(),
            runtime: self.rec.runtime_kind(),
            pods: out,
            gpus_capacity: gpus.unwrap_or(0),
            gpu_resource: self.rec.gpu_resource.clone(),
            ranks_desired: sts
                .spec
                .as_ref()
                .and_then(|s| s.replicas)
                .map_or(0, |r| u32::try_from(r).unwrap_or(0)),
            world_size,
            storage_servers: self.rec.storage_servers,
            delay_path: delay_path.0,
            notes,
        })
    }

    /// The metrics endpoints of the ranks and volume servers that have a pod IP, as pod-proxy paths.
    pub(crate) async fn targets(&self) -> Result<Vec<ScrapeTarget>> {
        let pods = self.lab_pods().await?;
        let mut out = Vec::new();
        for p in &pods {
            let Some((role, index, instance)) = role_of(p) else {
                continue;
            };
            let Some(index) = index.or(matches!(role, Role::ForeignJob | Role::DbWriter).then_some(0)) else {
                continue;
            };
            let has_ip = p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some();
            if !has_ip || p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let pod_name = p.metadata.name.clone().unwrap_or_default();
            let (kind, port) = match role {
                Role::Rank => (TargetKind::Rank, obj::RANK_METRICS_PORT),
                Role::StorageServer => (TargetKind::Storage, obj::STORAGE_METRICS_PORT),
                Role::ForeignJob => (TargetKind::Job, obj::JOB_METRICS_PORT),
                Role::DbWriter => (TargetKind::Writer, obj::WRITER_METRICS_PORT),
                _ => continue,
            };
            out.push(ScrapeTarget {
                instance,
                kind,
                index,
                address: api::pod_proxy_path(&self.rec.namespace, &pod_name, port, "metrics"),
            });
        }
        out.sort_by_key(|t| (t.kind == TargetKind::Storage, t.index));
        Ok(out)
    }
}

/// The delay path the storage pods were last given (`netem`/`proxy`), or what the choice implies, and
/// whether some pod's kernel was found without `sch_netem`.
fn delay_path_of(pods: &[Pod], choice: super::DelayChoice) -> (String, bool) {
    let ann = |p: &Pod, k: &str| p.metadata.annotations.as_ref().and_then(|a| a.get(k)).cloned();
    let no_netem = pods
        .iter()
        .any(|p| ann(p, NETEM_ANNOTATION).as_deref() == Some("unsupported"));
    let used = pods.iter().find_map(|p| ann(p, PATH_ANNOTATION));
    let path = match (used, choice) {
        (Some(u), _) => u,
        (None, super::DelayChoice::Proxy) => "proxy".to_string(),
        (None, super::DelayChoice::Netem) => "netem".to_string(),
        (None, super::DelayChoice::Auto) if no_netem => "proxy".to_string(),
        (None, super::DelayChoice::Auto) => "netem, else proxy".to_string(),
    };
    (path, no_netem)
}

/// Whether a pod's `Ready` condition is true.
pub(crate) fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn scheduler_reasons() {
        let m = "0/1 nodes are available: 1 Insufficient lab.dev/gpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.";
        assert_eq!(
            super::short_reason(m).as_deref(),
            Some("Insufficient lab.dev/gpu")
        );
        assert_eq!(
            super::short_reason("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.").as_deref(),
            Some("Insufficient nvidia.com/gpu")
        );
        assert_eq!(
            super::short_reason("0/3 nodes: 1 Insufficient cpu, 2 node(s) had taint").as_deref(),
            Some("Insufficient cpu")
        );
        assert_eq!(super::short_reason("node(s) had untolerated taint"), None);
    }

    fn rank_pod(container_statuses: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "rank-1", "labels": {"app.kubernetes.io/component": "rank"}},
            "spec": {"containers": [{"name": "rank"}, {"name": "delay"}]},
            "status": {"phase": "Running", "containerStatuses": container_statuses},
        }))
        .expect("a pod")
    }

    #[test]
    fn last_exit_code_is_the_rank_containers_last_termination() {
        let pod = rank_pod(serde_json::json!([
            {"name": "delay", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
             "lastState": {"terminated": {"exitCode": 9}}},
            {"name": "rank", "ready": false, "restartCount": 2, "image": "i", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 3, "message": "device lost"}}},
        ]));
        let s = super::pod_status(&pod, "lab.dev/gpu", None, &[]).expect("a rank");
        assert_eq!(s.last_exit_code, Some(3));
        assert_eq!(s.restarts, 2);
        assert_eq!(s.reason.as_deref(), Some("CrashLoopBackOff"));

        let fresh = rank_pod(serde_json::json!([
            {"name": "rank", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
             "state": {"running": {}}},
        ]));
        let s = super::pod_status(&fresh, "lab.dev/gpu", None, &[]).expect("a rank");
        assert_eq!(s.last_exit_code, None, "no exit before the first restart");

        let signalled = rank_pod(serde_json::json!([
            {"name": "rank", "ready": true, "restartCount": 1, "image": "i", "imageID": "",
             "lastState": {"terminated": {"exitCode": 137, "signal": 9}}},
        ]));
        let s = super::pod_status(&signalled, "lab.dev/gpu", None, &[]).expect("a rank");
        assert_eq!(s.last_exit_code, None, "a signal is not an exit code");
    }
}
