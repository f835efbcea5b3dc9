//! The fault and remediation actions done through the API: storage delay (an ephemeral container running
//! `tc netem`, or the latency proxy beside the volume server), in-place resize through `pods/resize`,
//! the StatefulSet's scale, the world size in `lab-config`, a rank's own settings (`rank-<N>.<NAME>` keys of
//! `lab-config`), and restarting a rank by deleting its pod.
//! What runs beside a rank in its container (slow-compute's hog, rank-hang's hold) is in `beside`.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, LogParams, Patch, PatchParams};
use lab_model::Millicores;
use lab_model::names;
use lab_model::status::{LabStatus, RuntimeKind};
use serde_json::json;

use super::manifests::names as obj;
use super::status::{cpu_limit, rank_cpu_limit, role_of};
use super::{DelayChoice, KubeRuntime, api};
use lab_runtime::{
    CpuLimits, Database, Delay, DelayPath, Lab, Neighbours, Ranks, Result, RuntimeError, Scrape,
    ScrapeTarget, Storage,
};

/// Pod annotation: the delay the lab put on this storage pod's path (`300ms±0ms`).
pub const DELAY_ANNOTATION: &str = "lab.dev/delay";
pub use super::status::{NETEM_ANNOTATION, PATH_ANNOTATION};
/// The line a delay container prints once its `tc` command succeeded.
const TC_OK: &str = "lab: tc ok";

/// Images put `tc` in /sbin or /usr/sbin, which a container's PATH may lack.
const TC_PATH: &str = "PATH=\"$PATH:/usr/sbin:/sbin\" ";

/// Did `tc` fail because the kernel has no netem qdisc?
pub fn netem_missing(log: &str) -> bool {
    let l = log.to_ascii_lowercase();
    l.contains("specified qdisc kind is unknown")
        || l.contains("operation not supported")
        || l.contains("qdisc kind is unknown")
        || (l.contains("netem") && l.contains("no such file or directory"))
}

/// The `tc` command that sets (or, with `None`, removes) the delay on the pod's interface.
pub fn tc_script(delay: Option<Delay>) -> String {
    match delay {
        Some(d) => format!(
            "{TC_PATH}tc qdisc replace dev eth0 root netem delay {}ms {}ms && echo '{TC_OK}'",
            d.delay.as_millis(),
            d.jitter.as_millis()
        ),
        // Deleting a qdisc that is not there fails; either way no netem is left.
        None => format!("{TC_PATH}tc qdisc del dev eth0 root 2>/dev/null; echo '{TC_OK}'"),
    }
}

/// The ephemeral container that runs `script` in a storage pod's network namespace. It is the only
/// container of the lab with NET_ADMIN, and it holds nothing else.
pub fn delay_container(name: &str, image: &str, pull_policy: &str, script: &str) -> serde_json::Value {
    json!({
        "name": name,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["sh", "-c", script],
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": false,
            "allowPrivilegeEscalation": false,
            "capabilities": { "drop": ["ALL"], "add": ["NET_ADMIN"] },
        },
    })
}

fn delay_text(d: Delay) -> String {
    format!("{}ms±{}ms", d.delay.as_millis(), d.jitter.as_millis())
}

fn parse_delay_text(s: &str) -> Option<Delay> {
    let (d, j) = s.split_once('±')?;
    let ms = |t: &str| {
        t.trim()
            .strip_suffix("ms")?
            .parse::<u64>()
            .ok()
            .map(Duration::from_millis)
    };
    Some(Delay {
        delay: ms(d)?,
        jitter: ms(j)?,
    })
}

impl KubeRuntime {
    /// The running pod of storage server `server`.
    pub(super) async fn storage_pod(&self, server: u32) -> Result<Pod> {
        let want = names::storage(server);
        self.lab_pods()
            .await?
            .into_iter()
            .find(|p| {
                role_of(p).is_some_and(|(_, _, n)| n == want) && p.metadata.deletion_timestamp.is_none()
            })
            .ok_or(RuntimeError::NoSuchInstance(want))
    }

    fn annotation(pod: &Pod, key: &str) -> Option<String> {
        pod.metadata.annotations.as_ref()?.get(key).cloned()
    }

    async fn annotate(&self, pod: &str, values: serde_json::Value) -> Result<()> {
        let patch = json!({ "metadata": { "annotations": values } });
        let what = format!("annotate pod {pod}");
        api::within(&what, self.rec.request_timeout, async {
            self.pods_api()
                .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| api::kube_err(what.clone(), e))
        })
        .await?;
        Ok(())
    }

    /// Sets the latency proxy's delay in front of `pod`'s volume server, through the pod proxy.
    async fn set_proxy_delay(&self, pod: &str, delay: Option<Delay>) -> Result<()> {
        let (d, j) = delay.map_or((0.0, 0.0), |d| {
            (d.delay.as_secs_f64() * 1e3, d.jitter.as_secs_f64() * 1e3)
        });
        let body = serde_json::to_vec(&json!({ "delay_ms": d, "jitter_ms": j }))
            .map_err(|e| RuntimeError::Other(e.to_string()))?;
        let path = api::pod_proxy_path(&self.rec.namespace, pod, obj::PROXY_CONTROL_PORT, "delay");
        let req = http::Request::put(path)
            .header("content-type", "application/json")
            .body(body)
            .map_err(|e| RuntimeError::Other(e.to_string()))?;
        api::request_text(
            &self.client,
            req,
            &format!("set the latency proxy's delay on {pod}"),
            self.rec.request_timeout,
        )
        .await?;
        Ok(())
    }

    /// Reads the latency proxy's delay in front of `pod`'s volume server.
    async fn proxy_delay(&self, pod: &str) -> Result<Option<Delay>> {
        let path = api::pod_proxy_path(&self.rec.namespace, pod, obj::PROXY_CONTROL_PORT, "delay");
        let req = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| RuntimeError::Other(e.to_string()))?;
        let text = api::request_text(
            &self.client,
            req,
            &format!("read the latency proxy's delay on {pod}"),
            self.rec.request_timeout,
        )
        .await?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| RuntimeError::Kube(format!("latency proxy on {pod} answered {text:?}: {e}")))?;
        let ms = |k: &str| v.get(k).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
        let (d, j) = (ms("delay_ms"), ms("jitter_ms"));
        if d <= 0.0 {
            return Ok(None);
        }
        // Whole microseconds, so a delay read back equals the one that was set.
        let dur = |x: f64| Duration::from_micros((x * 1e3).round() as u64);
        Ok(Some(Delay {
            delay: dur(d),
            jitter: dur(j),
        }))
    }

    /// Adds an ephemeral container running `tc` to `pod` and waits for its verdict: `Ok(true)` when tc
    /// succeeded, `Ok(false)` when the kernel has no netem, an error otherwise.
    async fn run_tc(&self, pod: &Pod, delay: Option<Delay>) -> Result<bool> {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let taken = pod
            .spec
            .as_ref()
            .and_then(|s| s.ephemeral_containers.as_ref())
            .map_or(0, Vec::len);
        let cname = format!("delay-{}", taken + 1);
        let container = delay_container(&cname, &self.rec.image, &self.rec.pull_policy, &tc_script(delay));
        let patch = json!({ "spec": { "ephemeralContainers": [container] } });
        let what = format!("add delay container {cname} to {pod_name}");
        api::within(&what, self.rec.request_timeout, async {
            self.pods_api()
                .patch_ephemeral_containers(&pod_name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
                .map_err(|e| api::kube_err(what.clone(), e))
        })
        .await?;

        // The container prints TC_OK once tc succeeded, or exits non-zero with tc's complaint.
        let c = cname.clone();
        let done = move |p: Option<&Pod>| {
            p.and_then(|p| p.status.as_ref()?.ephemeral_container_statuses.as_ref())
                .and_then(|ss| ss.iter().find(|s| s.name == c))
                .and_then(|s| s.state.as_ref())
                .is_some_and(|st| st.terminated.is_some())
        };
        let waited = api::wait_for(
            self.pods_api(),
            &pod_name,
            &format!("delay container {cname} on {pod_name} to finish"),
            self.rec.wait_timeout,
            done,
        )
        .await?;
        let exit = waited
            .as_ref()
            .and_then(|p| p.status.as_ref()?.ephemeral_container_statuses.as_ref())
            .and_then(|ss| ss.iter().find(|s| s.name == cname))
            .and_then(|s| s.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code))
            .unwrap_or(-1);
        let lp = LogParams {
            container: Some(cname.clone()),
            ..Default::default()
        };
        let log = api::within(
            "read the delay container's log",
            self.rec.request_timeout,
            async {
                self.pods_api()
                    .logs(&pod_name, &lp)
                    .await
                    .map_err(|e| api::kube_err("read the delay container's log", e))
            },
        )
        .await?;
        if exit == 0 && log.contains(TC_OK) {
            Ok(true)
        } else if netem_missing(&log) {
            Ok(false)
        } else {
            Err(RuntimeError::Kube(format!(
                "tc in {cname} on {pod_name} failed (exit {exit}): {}",
                log.trim()
            )))
        }
    }

    /// The delay on storage server `server`'s path, with the path it went through.
    async fn delay_of(&self, server: u32) -> Result<Option<(Delay, DelayPath)>> {
        let pod = self.storage_pod(server).await?;
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        if Self::annotation(&pod, PATH_ANNOTATION).as_deref() == Some("netem") {
            return Ok(Self::annotation(&pod, DELAY_ANNOTATION)
                .as_deref()
                .and_then(parse_delay_text)
                .map(|d| (d, DelayPath::Netem)));
        }
        Ok(self.proxy_delay(&pod_name).await?.map(|d| (d, DelayPath::Proxy)))
    }

    async fn apply_delay(&self, server: u32, delay: Option<Delay>) -> Result<DelayPath> {
        let pod = self.storage_pod(server).await?;
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let used = Self::annotation(&pod, PATH_ANNOTATION);
        let Some(d) = delay else {
            // Clear whatever was used; a netem qdisc needs tc run in the pod's network namespace again.
            let path = if used.as_deref() == Some("netem") {
                self.run_tc(&pod, None).await?;
                DelayPath::Netem
            } else {
                self.set_proxy_delay(&pod_name, None).await?;
                DelayPath::Proxy
            };
            self.annotate(
                &pod_name,
                json!({ DELAY_ANNOTATION: null, PATH_ANNOTATION: null }),
            )
            .await?;
            return Ok(path);
        };
        let netem_known = Self::annotation(&pod, NETEM_ANNOTATION);
        let try_netem = match self.rec.delay {
            DelayChoice::Proxy => false,
            DelayChoice::Netem => true,
            DelayChoice::Auto => netem_known.as_deref() != Some("unsupported"),
        };
        if try_netem {
            if self.run_tc(&pod, Some(d)).await? {
                // A proxy delay left from before would add to the netem one.
                if used.as_deref() == Some("proxy") {
                    self.set_proxy_delay(&pod_name, None).await?;
                }
                self.annotate(
                    &pod_name,
                    json!({ DELAY_ANNOTATION: delay_text(d), PATH_ANNOTATION: "netem", NETEM_ANNOTATION: "supported" }),
                )
                .await?;
                return Ok(DelayPath::Netem);
            }
            self.annotate(&pod_name, json!({ NETEM_ANNOTATION: "unsupported" }))
                .await?;
            if self.rec.delay == DelayChoice::Netem {
                return Err(RuntimeError::Other(format!(
                    "the kernel of {pod_name}'s node has no sch_netem (tc: \"Specified qdisc kind is unknown\"): load \
                     the sch_netem module on the node, or use the latency proxy (delay choice auto or proxy)"
                )));
            }
        }
        self.set_proxy_delay(&pod_name, Some(d)).await?;
        self.annotate(
            &pod_name,
            json!({ DELAY_ANNOTATION: delay_text(d), PATH_ANNOTATION: "proxy" }),
        )
        .await?;
        Ok(DelayPath::Proxy)
    }

    pub(super) async fn rank_pod(&self, rank: u32) -> Result<Pod> {
        let name = names::rank(rank);
        match api::within("read a rank's pod", self.rec.request_timeout, async {
            self.pods_api()
                .get_opt(&name)
                .await
                .map_err(|e| api::kube_err(format!("read pod {name}"), e))
        })
        .await?
        {
            Some(p) => Ok(p),
            None => Err(RuntimeError::NoSuchInstance(name)),
        }
    }

    fn live_cpu(pod: &Pod) -> Option<Millicores> {
        let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
        let rank = statuses.iter().find(|c| c.name == obj::RANK_CONTAINER)?;
        cpu_limit(rank.resources.as_ref()?)
    }

    fn spec_cpu(pod: &Pod) -> Option<Millicores> {
        rank_cpu_limit(pod.spec.as_ref()?)
    }

    async fn resize(&self, rank: u32, cpu: Millicores) -> Result<()> {
        let name = names::rank(rank);
        let patch = json!({ "spec": { "containers": [ {
            "name": obj::RANK_CONTAINER,
            // The limit is the fault; the request only follows it down when it would exceed it.
            "resources": { "requests": { "cpu": super::manifests::cpu_request(cpu).to_string() }, "limits": { "cpu": cpu.to_string() } },
        } ] } });
        let what = format!("resize {name} to {cpu}");
        api::within(&what, self.rec.request_timeout, async {
            self.pods_api()
                .patch_resize(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
                .map_err(|e| match &e {
                    kube::Error::Api(s) if s.code == 404 => RuntimeError::NoSuchInstance(name.clone()),
                    _ => api::kube_err(what.clone(), e),
                })
        })
        .await?;
        // Done when the kubelet reports the new limit as applied; an infeasible resize never gets there.
        let want = cpu;
        let applied = move |p: Option<&Pod>| {
            p.is_some_and(|p| {
                Self::live_cpu(p) == Some(want)
                    || p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| {
                                c.type_ == "PodResizePending" && c.reason.as_deref() == Some("Infeasible")
                            })
                        })
            })
        };
        let pod = api::wait_for(
            self.pods_api(),
            &name,
            &format!("{name}'s CPU limit to become {cpu}"),
            self.rec.wait_timeout,
            applied,
        )
        .await?;
        let pod = pod.unwrap_or_default();
        if Self::live_cpu(&pod) != Some(want) {
            let why = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "PodResizePending"))
                .and_then(|c| c.message.clone())
                .unwrap_or_else(|| "resize infeasible".into());
            return Err(RuntimeError::Kube(format!(
                "the node cannot resize {name} to {cpu}: {why}"
            )));
        }
        Ok(())
    }

    /// Re-applies the ranks' manifests (Services and StatefulSet) with these values.
    async fn apply_ranks(&self, ranks: u32, world_size: u32, cpu: Millicores) -> Result<()> {
        let objects = self.rec.settings(&self.name, ranks, world_size, cpu).ranks()?;
        api::within(
            "apply the ranks",
            self.rec.request_timeout,
            api::apply_all(&self.client, &self.rec.namespace, &objects),
        )
        .await
    }

    async fn set_replicas(&self, ranks: u32) -> Result<()> {
        if ranks == 0 {
            return Err(RuntimeError::InvalidInput("ranks must be at least 1".into()));
        }
        let patch = json!({ "spec": { "replicas": ranks } });
        api::within("scale the ranks", self.rec.request_timeout, async {
            self.sts_api()
                .patch_scale(obj::RANKS, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| api::kube_err(format!("scale the ranks to {ranks}"), e))
        })
        .await?;
        Ok(())
    }

    async fn world_size(&self, world_size: u32) -> Result<()> {
        if world_size == 0 {
            return Err(RuntimeError::InvalidInput(
                "the world size must be at least 1".into(),
            ));
        }
        let cm = json!({ "data": { obj::WORLD_SIZE_KEY: world_size.to_string() } });
        api::within("set the world size", self.rec.request_timeout, async {
            self.cm_api()
                .patch(obj::CONFIG, &PatchParams::default(), &Patch::Merge(&cm))
                .await
                .map_err(|e| api::kube_err("set the world size in lab-config", e))
        })
        .await?;
        // The template carries the world size too, so the StatefulSet rolls its pods to the new
        // configuration, and a rolling update waits while any rank is Pending, as on any cluster.
        let sts = json!({ "spec": { "template": { "metadata": { "annotations": { obj::WORLD_SIZE_ANNOTATION: world_size.to_string() } } } } });
        let patched = api::within("annotate the ranks' template", self.rec.request_timeout, async {
            self.sts_api()
                .patch(obj::RANKS, &PatchParams::default(), &Patch::Merge(&sts))
                .await
                .map_err(|e| api::kube_err("record the world size in the ranks' template", e))
        })
        .await?;
        // Wait until the controller has seen that template, so the pods deleted below come back from it
        // rather than from the old one (which a rolling update would then replace once more).
        if let Some(generation) = patched.metadata.generation {
            let seen = move |s: Option<&StatefulSet>| {
                s.and_then(|s| s.status.as_ref()?.observed_generation)
                    .is_some_and(|g| g >= generation)
            };
            api::wait_for(
                self.sts_api(),
                obj::RANKS,
                "the StatefulSet controller to see the new template",
                self.rec.wait_timeout,
                seen,
            )
            .await?;
        }
        // Ranks read the world size when they start: restart them all now, whatever the rollout does.
        // Every rank pod goes, lowest ordinal first. A pod's GPU stays taken until its container has
        // stopped (seconds), so a Pending rank is deleted before any GPU is free; and with OrderedReady the
        // StatefulSet brings the ranks back in order, each once its predecessors are Ready. So the rank
        // beyond the GPUs is always the one left Pending, never a lower rank that lost a race for a GPU.
        // Each pod is deleted by its UID as listed here: a pod of the same name made since (the
        // StatefulSet's replacement of one that went) already reads the new world size and stays.
        let mut ranks: Vec<(u32, String, Option<String>)> = self
            .lab_pods()
            .await?
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| match role_of(&p) {
                Some((lab_model::Role::Rank, Some(i), _)) => Some((
                    i,
                    p.metadata.name.clone().unwrap_or_default(),
                    p.metadata.uid.clone(),
                )),
                _ => None,
            })
            .collect();
        ranks.sort();
        for (_, name, uid) in ranks {
            match self.delete_pod_of_uid(&name, uid).await {
                // Gone already (the rollout took it, or replaced it): nothing to restart.
                Ok(()) | Err(RuntimeError::NoSuchInstance(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Replicas and the world size in one change of the StatefulSet, left to its rolling update: the
    /// ConfigMap first (new pods read the world size from it), then replicas and the template's world-size
    /// annotation in one patch, so the controller creates the extra rank and rolls the others from one
    /// new revision. Nothing is deleted here: with OrderedReady and RollingUpdate the controller replaces
    /// one pod at a time, highest ordinal first, and waits while any rank is not Running and Ready.
    async fn rollout(&self, ranks: u32, world_size: u32) -> Result<()> {
        if ranks == 0 || world_size == 0 {
            return Err(RuntimeError::InvalidInput(
                "ranks and the world size must be at least 1".into(),
            ));
        }
        let cm = json!({ "data": { obj::WORLD_SIZE_KEY: world_size.to_string() } });
        api::within("set the world size", self.rec.request_timeout, async {
            self.cm_api()
                .patch(obj::CONFIG, &PatchParams::default(), &Patch::Merge(&cm))
                .await
                .map_err(|e| api::kube_err("set the world size in lab-config", e))
        })
        .await?;
        let sts = json!({ "spec": {
            "replicas": ranks,
            "template": { "metadata": { "annotations": { obj::WORLD_SIZE_ANNOTATION: world_size.to_string() } } }
        } });
        api::within("roll out the ranks", self.rec.request_timeout, async {
            self.sts_api()
                .patch(obj::RANKS, &PatchParams::default(), &Patch::Merge(&sts))
                .await
                .map_err(|e| api::kube_err("patch the ranks' replicas and template", e))
        })
        .await?;
        Ok(())
    }

    /// The settings of rank `rank` alone: its `rank-<N>.<NAME>` keys in lab-config.
    async fn rank_settings(&self, rank: u32) -> Result<std::collections::BTreeMap<String, String>> {
        let cm = api::within("read lab-config", self.rec.request_timeout, async {
            self.cm_api()
                .get(obj::CONFIG)
                .await
                .map_err(|e| api::kube_err("read lab-config", e))
        })
        .await?;
        let prefix = rank_setting_key(rank, "");
        Ok(cm
            .data
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v.trim().to_string())))
            .collect())
    }

    /// Sets (or with `None` removes) a setting of rank `rank` alone in lab-config. The rank reads its
    /// settings when its container starts, so a change restarts that container, in the same pod (the
    /// local runtime restarts the rank's process as quickly): replacing the pod instead cost the pod's
    /// deletion, a wait for the ranks below it to be Ready again (OrderedReady) and a new sandbox, about
    /// 10 s on kind before the rank even started. An unchanged value changes nothing.
    async fn set_rank_setting(&self, rank: u32, name: &str, value: Option<String>) -> Result<()> {
        lab_model::actions::check_rank_env_name(name).map_err(RuntimeError::InvalidInput)?;
        let replicas = self
            .statefulset()
            .await?
            .spec
            .and_then(|s| s.replicas)
            .map_or(0, |r| u32::try_from(r).unwrap_or(0));
        if rank >= replicas {
            return Err(RuntimeError::InvalidInput(format!(
                "rank-{rank} does not exist (ranks 0..{replicas})"
            )));
        }
        if self.rank_settings(rank).await?.get(name) == value.as_ref() {
            return Ok(());
        }
        let key = rank_setting_key(rank, name);
        let patch = json!({ "data": { key.clone(): value } });
        api::within("set a rank's own setting", self.rec.request_timeout, async {
            self.cm_api()
                .patch(obj::CONFIG, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| api::kube_err(format!("set {key} in lab-config"), e))
        })
        .await?;
        // A device fault set comes in as the device's first failure: the restart that brings the setting
        // is a crash (exit 6) the kubelet counts, seconds before the restarted rank's own would be.
        self.restart_container(rank, lab_model::actions::fails_device_now(name, value.as_deref()))
            .await
    }

    async fn delete_pod(&self, name: &str) -> Result<()> {
        self.delete_pod_of_uid(name, None).await
    }

    /// Deletes pod `name`; with `uid`, only that very pod (a UID precondition): one made since under the
    /// same name is left alone, and the answer is [`RuntimeError::NoSuchInstance`], as for a pod gone.
    async fn delete_pod_of_uid(&self, name: &str, uid: Option<String>) -> Result<()> {
        let what = format!("delete pod {name}");
        let checked = uid.is_some();
        let params = DeleteParams {
            preconditions: uid.map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        api::within(&what, self.rec.request_timeout, async {
            match self.pods_api().delete(name, &params).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 || (checked && s.code == 409) => {
                    Err(RuntimeError::NoSuchInstance(name.to_string()))
                }
                Err(e) => Err(api::kube_err(what.clone(), e)),
            }
        })
        .await
    }

    async fn probe(&self, server: u32, samples: usize) -> Result<Duration> {
        let pod = self.storage_pod(server).await?;
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        // The volume server's public URL is the proxy port: the path every rank's read takes.
        let path = api::pod_proxy_path(&self.rec.namespace, &pod_name, obj::PROXY_PORT, "status");
        let mut times = Vec::with_capacity(samples.max(1));
        for _ in 0..samples.max(1) {
            let req = http::Request::get(path.clone())
                .body(Vec::new())
                .map_err(|e| RuntimeError::Other(e.to_string()))?;
            let start = Instant::now();
            api::request_text(
                &self.client,
                req,
                &format!("probe {}", names::storage(server)),
                self.rec.request_timeout,
            )
            .await?;
            times.push(start.elapsed());
        }
        times.sort();
        Ok(times[times.len() / 2])
    }
}

#[async_trait]
impl Lab for KubeRuntime {
    fn kind(&self) -> RuntimeKind {
        self.rec.runtime_kind()
    }

    fn name(&self) -> &str {
        &self.name
    }

    async fn status(&self) -> Result<LabStatus> {
        self.lab_status().await
    }

    async fn versions(&self) -> lab_model::version::Parts {
        self.part_versions().await
    }

    async fn log_components(&self) -> Result<Vec<String>> {
        self.components().await
    }

    async fn logs(&self, component: &str, request: lab_runtime::LogRequest) -> Result<lab_runtime::LogLines> {
        self.pod_logs(component, request).await
    }
}

#[async_trait]
impl Scrape for KubeRuntime {
    async fn scrape_targets(&self) -> Result<Vec<ScrapeTarget>> {
        self.targets().await
    }

    async fn fetch_metrics(&self, target: &ScrapeTarget, timeout: Duration) -> Result<String> {
        let req = http::Request::get(target.address.clone())
            .body(Vec::new())
            .map_err(|e| RuntimeError::Other(e.to_string()))?;
        let what = format!("scrape {}", target.instance);
        let scrape = api::request_text(&self.client, req, &what, timeout);
        if target.kind == lab_runtime::TargetKind::Storage && target.index < self.rec.storage_servers {
            // The server's own latency beside SeaweedFS's figures, as on the local runtime: one request
            // straight to its own port, sent with the scrape.
            lab_runtime::storage::scrape_with_own_probe(scrape, self.probe_own_kube(target.index, 1), timeout)
                .await
        } else {
            scrape.await
        }
    }
}

#[async_trait]
impl Storage for KubeRuntime {
    async fn storage_delay(&self, server: u32) -> Result<Option<Delay>> {
        Ok(self.delay_of(server).await?.map(|(d, _)| d))
    }

    async fn set_storage_delay(&self, server: u32, delay: Option<Delay>) -> Result<DelayPath> {
        self.apply_delay(server, delay).await
    }

    async fn probe_storage(&self, server: u32, samples: usize) -> Result<Duration> {
        self.probe(server, samples).await
    }

    async fn probe_storage_own(&self, server: u32, samples: usize) -> Result<Duration> {
        self.probe_own_kube(server, samples).await
    }

    async fn storage_cpu(&self, server: u32) -> Result<Option<Millicores>> {
        self.storage_cpu_limit(server).await
    }

    async fn set_storage_cpu(&self, server: u32, cpu: Option<Millicores>) -> Result<()> {
        self.resize_storage(server, cpu).await
    }

    async fn storage_volumes(&self, server: u32) -> Result<Vec<u32>> {
        self.volumes_on(server).await
    }

    async fn move_volume(&self, volume: u32, from: u32, to: u32) -> Result<()> {
        self.move_volume_kube(volume, from, to).await
    }
}

#[async_trait]
impl Ranks for KubeRuntime {
    async fn cpu_limits(&self, rank: u32) -> Result<CpuLimits> {
        let pod = self.rank_pod(rank).await?;
        let sts = self.statefulset().await?;
        let template = Self::template_cpu(&sts)
            .ok_or_else(|| RuntimeError::Kube("the ranks' template has no CPU limit".into()))?;
        Ok(CpuLimits {
            live: Self::live_cpu(&pod),
            spec: Self::spec_cpu(&pod),
            template,
        })
    }

    async fn resize_rank(&self, rank: u32, cpu: Millicores) -> Result<()> {
        self.resize(rank, cpu).await
    }

    async fn apply_template(&self, cpu: Millicores) -> Result<()> {
        let sts = self.statefulset().await?;
        let replicas = sts
            .spec
            .as_ref()
            .and_then(|s| s.replicas)
            .map_or(self.rec.ranks, |r| u32::try_from(r).unwrap_or(0));
        let world_size = self.config_world_size().await?;
        self.apply_ranks(replicas, world_size, cpu).await
    }

    async fn scale_ranks(&self, ranks: u32) -> Result<()> {
        self.set_replicas(ranks).await
    }

    async fn set_world_size(&self, world_size: u32) -> Result<()> {
        self.world_size(world_size).await
    }

    async fn rollout_ranks(&self, ranks: u32, world_size: u32) -> Result<()> {
        self.rollout(ranks, world_size).await
    }

    async fn restart_rank(&self, rank: u32) -> Result<()> {
        self.delete_pod(&names::rank(rank)).await
    }

    async fn rank_frozen(&self, rank: u32) -> Result<bool> {
        self.held(rank).await
    }

    async fn freeze_rank(&self, rank: u32, frozen: bool) -> Result<()> {
        self.hold(rank, frozen).await
    }

    async fn rank_env(&self, rank: u32) -> Result<std::collections::BTreeMap<String, String>> {
        self.rank_settings(rank).await
    }

    async fn set_rank_env(&self, rank: u32, name: &str, value: Option<String>) -> Result<()> {
        self.set_rank_setting(rank, name, value).await
    }

    async fn checkpoint(
        &self,
        save: bool,
        timeout: Duration,
    ) -> Result<lab_model::checkpoint::CheckpointState> {
        // The same control as on the local runtime, reached through the API server's pod proxy.
        let target = lab_runtime::rank0_target(self.targets().await?)?;
        let address = lab_runtime::checkpoint_address(&target.address);
        let mut req = if save {
            http::Request::post(address)
        } else {
            http::Request::get(address)
        };
        if let Some(token) = self.rec.control_token.as_deref() {
            // The pod proxy passes the request's headers on to the rank.
            req = req.header("X-Lab-Control-Token", token);
        }
        let req = req
            .body(Vec::new())
            .map_err(|e| RuntimeError::Other(e.to_string()))?;
        let text = api::request_text(&self.client, req, "rank-0's checkpoint control", timeout).await?;
        lab_runtime::parse_checkpoint(&text)
    }
}

#[async_trait]
impl Neighbours for KubeRuntime {
    async fn rank_processes(&self, rank: u32) -> Result<Vec<lab_runtime::BesideProcess>> {
        self.beside_processes(rank).await
    }

    async fn start_hog(&self, rank: u32) -> Result<u32> {
        self.hog(rank).await
    }

    async fn stop_beside(&self, rank: u32, pid: u32) -> Result<()> {
        self.stop_process(rank, pid).await
    }

    async fn foreign_jobs(&self) -> Result<Vec<lab_model::jobs::ForeignJob>> {
        self.foreign_deployments().await
    }

    async fn run_foreign_job(&self, job: &lab_model::jobs::ForeignJob) -> Result<()> {
        self.run_job(job).await
    }

    async fn stop_foreign_job(&self, name: &str) -> Result<()> {
        self.stop_job(name).await
    }
}

#[async_trait]
impl Database for KubeRuntime {
    async fn database(&self) -> Result<lab_model::db::DbStatus> {
        self.db_status().await
    }

    async fn set_db_template(&self, node_selector: std::collections::BTreeMap<String, String>) -> Result<()> {
        self.set_db_selector(node_selector).await
    }

    async fn delete_pod(&self, name: &str) -> Result<()> {
        self.delete_db_pod(name).await
    }

    async fn set_synchronous_standby_names(&self, names: &str) -> Result<()> {
        self.set_standby_names(names).await
    }
}

/// The `lab-config` key of a setting of rank `rank` alone: the ranks have lab-config in their environment
/// and rank N takes its own `rank-<N>.<NAME>` variables when its container starts (`lab-rank
/// --rank-settings-from-env`).
pub(crate) fn rank_setting_key(rank: u32, name: &str) -> String {
    format!("rank-{rank}.{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netem_absence_is_recognised() {
        assert!(netem_missing("Error: Specified qdisc kind is unknown.\n"));
        assert!(netem_missing("RTNETLINK answers: Operation not supported"));
        assert!(!netem_missing("RTNETLINK answers: Operation not permitted"));
    }

    #[test]
    fn tc_scripts() {
        let d = Delay {
            delay: Duration::from_millis(300),
            jitter: Duration::from_millis(20),
        };
        assert!(
            tc_script(Some(d))
                .ends_with("tc qdisc replace dev eth0 root netem delay 300ms 20ms && echo 'lab: tc ok'")
        );
        assert!(tc_script(None).contains("tc qdisc del dev eth0 root"));
        assert_eq!(parse_delay_text(&delay_text(d)), Some(d));
    }

    #[test]
    fn only_the_delay_container_holds_net_admin() {
        let c = delay_container("delay-1", "img:1", "Never", "true");
        assert_eq!(c["securityContext"]["capabilities"]["add"], json!(["NET_ADMIN"]));
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        assert!(c["securityContext"].get("privileged").is_none());
    }
}
