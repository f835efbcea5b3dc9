//! Moving the job's data between volume servers on Kubernetes (`lab storage drain` / `undrain`), with
//! SeaweedFS's own `volume.move`: `weed shell` runs in the master's container (through the API's `exec`),
//! where it reaches the master on loopback and every volume server on its pod IP. The master's
//! `/vol/status`, read through the pod proxy, says which server holds which volume; the ranks find a moved
//! volume through the master as they do on the local runtime (their cached location expires, or a read
//! fails and they look it up again).
//!
//! Unlike the local runtime, `volume.move` works here: SeaweedFS refuses to copy from a loopback address,
//! and a pod IP is not one.
//!
//! Also the slow-disk fault's actuator: the volume server container's own CPU limit, resized in place
//! through `pods/resize` (its latency proxy, a container of its own, keeps its CPU), and the direct probe
//! of the server's own port through the pod proxy, bypassing the proxy the ranks read through.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use lab_model::status::Role;
use lab_model::{Millicores, names};
use serde_json::json;

use super::manifests::names as obj;
use super::status::{cpu_limit, role_of};
use super::{KubeRuntime, api};
use lab_runtime::storage::{PROBE_SPACING, PROBE_TIMEOUT, VolumeEntry, parse_vol_status};
use lab_runtime::{Result, RuntimeError};

/// The master's container in its pod.
pub const MASTER_CONTAINER: &str = "master";
/// The master's HTTP port (its gRPC port is this + 10000, as `weed shell` assumes).
pub const MASTER_PORT: u16 = 9333;
/// A volume server's own HTTP port (the ranks' reads go through the proxy on 8480; SeaweedFS's node
/// address is this one).
pub const VOLUME_PORT: u16 = 8080;
/// How long one `weed shell` may run: a move copies the volume, tails it for writes in flight (its idle
/// timeout is 5 s), then deletes the source.
const SHELL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the master may take to place a moved volume on its new server alone (the source's delete
/// reaches it with that server's next heartbeat).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The volume server container's CPU limit as `lab up` deploys it (`manifests/storage-server.yaml`): far
/// above what the server uses, there so that slow-disk resizes a limit that exists.
pub const STORAGE_CPU_LIMIT: Millicores = Millicores(1000);
/// Its CPU request as deployed; a resize below it takes the request down with it.
pub const STORAGE_CPU_REQUEST: Millicores = Millicores(50);

/// The `pods/resize` patch that holds the volume container to `cpu` (its request follows it down only
/// where it would exceed it).
pub fn storage_resize_patch(cpu: Millicores) -> serde_json::Value {
    json!({ "spec": { "containers": [ {
        "name": obj::VOLUME_CONTAINER,
        "resources": {
            "requests": { "cpu": cpu.min(STORAGE_CPU_REQUEST).to_string() },
            "limits": { "cpu": cpu.to_string() },
        },
    } ] } })
}

/// The volume container's applied CPU limit, from the pod's status (`None`: none reported).
pub fn live_storage_cpu(pod: &Pod) -> Option<Millicores> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let c = statuses.iter().find(|c| c.name == obj::VOLUME_CONTAINER)?;
    cpu_limit(c.resources.as_ref()?)
}

/// Why a resize did not apply, from the pod's resize conditions (`None`: nothing says it failed).
pub fn resize_refusal(pod: &Pod) -> Option<String> {
    let cs = pod.status.as_ref()?.conditions.as_ref()?;
    cs.iter()
        .find(|c| {
            c.type_ == "PodResizePending" && c.reason.as_deref() == Some("Infeasible")
                || c.type_ == "PodResizeInProgress" && c.reason.as_deref() == Some("Error")
        })
        .map(|c| c.message.clone().unwrap_or_else(|| "resize infeasible".into()))
}

/// The `weed shell` script that moves volume `vid` from node `from` to node `to` (`ip:port`), under the
/// shell's cluster lock.
pub fn move_script(vid: u32, from: &str, to: &str) -> String {
    format!("lock\nvolume.move -source {from} -target {to} -volumeId {vid}\nunlock\n")
}

/// The command `exec` runs in the master's container: the script fed to `weed shell` on its stdin. The
/// script holds only numbers and `ip:port` addresses (checked), so quoting it in single quotes is safe.
///
/// # Errors
/// [`RuntimeError::Other`] when the script holds a character outside that set.
pub fn shell_command(script: &str) -> Result<Vec<String>> {
    let plain = script
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b' ' | b'\n' | b'.' | b':' | b'-' | b'_'));
    if !plain {
        return Err(RuntimeError::Other(format!(
            "refusing to pass an unexpected weed shell script: {script:?}"
        )));
    }
    Ok(vec![
        "sh".into(),
        "-c".into(),
        format!("printf '%s' '{script}' | weed shell -master=127.0.0.1:{MASTER_PORT} 2>&1"),
    ])
}

/// The first line of `weed shell` output that reports a failure, if any (the shell exits 0 either way).
pub fn shell_error(out: &str) -> Option<String> {
    out.lines()
        .map(str::trim)
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.starts_with("error") || l.contains("failed to") || l.starts_with("panic")
        })
        .map(str::to_string)
}

/// The racks holding volume `vid`, as `/vol/status` lists it.
pub fn racks_of(entries: &[VolumeEntry], vid: u32) -> Vec<String> {
    let mut r: Vec<String> = entries
        .iter()
        .filter(|e| e.id == vid)
        .map(|e| e.rack.clone())
        .collect();
    r.sort();
    r
}

impl KubeRuntime {
    /// The storage master's running pod.
    async fn master_pod(&self) -> Result<Pod> {
        self.lab_pods()
            .await?
            .into_iter()
            .find(|p| {
                role_of(p).is_some_and(|(r, _, _)| r == Role::StorageMaster)
                    && p.metadata.deletion_timestamp.is_none()
            })
            .ok_or_else(|| RuntimeError::NoSuchInstance(names::STORAGE_MASTER.to_string()))
    }

    /// Every volume the master knows, with where it is (its `/vol/status`, through the pod proxy).
    pub(super) async fn volume_entries(&self) -> Result<Vec<VolumeEntry>> {
        let pod = self.master_pod().await?;
        let pod_name = pod.metadata.name.unwrap_or_default();
        let path = api::pod_proxy_path(&self.rec.namespace, &pod_name, MASTER_PORT, "vol/status");
        let req = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| RuntimeError::Other(e.to_string()))?;
        let text = api::request_text(
            &self.client,
            req,
            "read the storage master's /vol/status",
            self.rec.request_timeout,
        )
        .await?;
        parse_vol_status(&text)
    }

    /// The volumes storage server `server` holds now.
    pub(super) async fn volumes_on(&self, server: u32) -> Result<Vec<u32>> {
        if server >= self.rec.storage_servers {
            return Err(RuntimeError::NoSuchInstance(names::storage(server)));
        }
        Ok(lab_runtime::storage::volumes_on(
            self.volume_entries().await?,
            server,
        ))
    }

    /// Storage server `server`'s node address as SeaweedFS names it: its pod IP and its own port.
    async fn volume_node(&self, server: u32) -> Result<String> {
        let pod = self.storage_pod(server).await?;
        let ip = pod
            .status
            .and_then(|s| s.pod_ip)
            .ok_or_else(|| RuntimeError::Kube(format!("storage-{server}'s pod has no IP yet")))?;
        Ok(format!("{ip}:{VOLUME_PORT}"))
    }

    /// What `weed version` says in the master's container: the SeaweedFS of the lab's image.
    pub(super) async fn exec_weed_version(&self) -> Result<String> {
        self.exec_in_master(vec!["weed".into(), "version".into()]).await
    }

    /// Runs `command` in the master's container; returns what it printed (stdout and stderr).
    async fn exec_in_master(&self, command: Vec<String>) -> Result<String> {
        let pod = self.master_pod().await?;
        let pod_name = pod.metadata.name.unwrap_or_default();
        let what = format!("exec `weed shell` in {pod_name}");
        api::within(&what, SHELL_TIMEOUT, async {
            let (out, err, failure) = self
                .exec_text(&pod_name, MASTER_CONTAINER, command, &what)
                .await?;
            let text = format!("{out}{err}");
            match failure {
                None => Ok(text),
                Some(m) => Err(RuntimeError::Other(format!("{what}: {m}: {}", text.trim()))),
            }
        })
        .await
    }

    /// The volume container's CPU limit as applied now.
    pub(super) async fn storage_cpu_limit(&self, server: u32) -> Result<Option<Millicores>> {
        if server >= self.rec.storage_servers {
            return Err(RuntimeError::NoSuchInstance(names::storage(server)));
        }
        Ok(live_storage_cpu(&self.storage_pod(server).await?))
    }

    /// Resizes the volume container of storage server `server` in place to `cpu` (`None`: back to the
    /// limit `lab up` gives it), then waits until the kubelet reports it applied. A resize the node
    /// refuses is an error with the kubelet's reason, and the limit is left as it was.
    pub(super) async fn resize_storage(&self, server: u32, cpu: Option<Millicores>) -> Result<()> {
        if server >= self.rec.storage_servers {
            return Err(RuntimeError::NoSuchInstance(names::storage(server)));
        }
        let want = cpu.unwrap_or(STORAGE_CPU_LIMIT);
        let pod = self.storage_pod(server).await?;
        let name = pod.metadata.name.clone().unwrap_or_default();
        let patch = if cpu.is_none() {
            json!({ "spec": { "containers": [ {
                "name": obj::VOLUME_CONTAINER,
                "resources": {
                    "requests": { "cpu": STORAGE_CPU_REQUEST.to_string() },
                    "limits": { "cpu": STORAGE_CPU_LIMIT.to_string() },
                },
            } ] } })
        } else {
            storage_resize_patch(want)
        };
        let what = format!("resize storage-{server}'s volume server to {want}");
        api::within(&what, self.rec.request_timeout, async {
            self.pods_api()
                .patch_resize(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
                .map_err(|e| api::kube_err(what.clone(), e))
        })
        .await?;
        let applied = move |p: Option<&Pod>| {
            p.is_none_or(|p| live_storage_cpu(p) == Some(want) || resize_refusal(p).is_some())
        };
        let pod = api::wait_for(
            self.pods_api(),
            &name,
            &format!("storage-{server}'s CPU limit to become {want}"),
            self.rec.wait_timeout,
            applied,
        )
        .await?
        .ok_or_else(|| RuntimeError::NoSuchInstance(names::storage(server)))?;
        if live_storage_cpu(&pod) != Some(want) {
            let why = resize_refusal(&pod).unwrap_or_else(|| "resize not applied".into());
            return Err(RuntimeError::Kube(format!(
                "the node cannot resize storage-{server} to {want}: {why}"
            )));
        }
        Ok(())
    }

    /// Times `samples` `GET /status` requests straight to storage server `server`'s own port (through the
    /// pod proxy, not through its latency proxy), sent [`PROBE_SPACING`] apart without waiting for
    /// answers, and returns their median.
    pub(super) async fn probe_own_kube(&self, server: u32, samples: usize) -> Result<Duration> {
        if server >= self.rec.storage_servers {
            return Err(RuntimeError::NoSuchInstance(names::storage(server)));
        }
        let pod = self.storage_pod(server).await?;
        let pod_name = pod.metadata.name.unwrap_or_default();
        let path = api::pod_proxy_path(&self.rec.namespace, &pod_name, VOLUME_PORT, "status");
        lab_runtime::median_probe(samples, PROBE_SPACING, PROBE_TIMEOUT, || {
            let path = path.clone();
            async move {
                let req = http::Request::get(path)
                    .body(Vec::new())
                    .map_err(|e| RuntimeError::Other(e.to_string()))?;
                api::request_text(&self.client, req, "probe a volume server directly", PROBE_TIMEOUT)
                    .await
                    .map(|_| ())
            }
        })
        .await
    }

    /// Moves volume `vid` from server `from` to `to` with `volume.move`, then waits until the master
    /// places it on `to` alone.
    pub(super) async fn move_volume_kube(&self, vid: u32, from: u32, to: u32) -> Result<()> {
        for s in [from, to] {
            if s >= self.rec.storage_servers {
                return Err(RuntimeError::NoSuchInstance(names::storage(s)));
            }
        }
        let entries = self.volume_entries().await?;
        let (from_rack, to_rack) = (names::storage(from), names::storage(to));
        if !entries.iter().any(|e| e.id == vid && e.rack == from_rack) {
            return Err(RuntimeError::InvalidInput(format!(
                "storage-{from} does not hold volume {vid}"
            )));
        }
        let (src, dst) = (self.volume_node(from).await?, self.volume_node(to).await?);
        let out = self
            .exec_in_master(shell_command(&move_script(vid, &src, &dst))?)
            .await?;
        if let Some(why) = shell_error(&out) {
            return Err(RuntimeError::Other(format!(
                "weed shell moving volume {vid} from storage-{from} to storage-{to}: {why}"
            )));
        }
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let racks = racks_of(&self.volume_entries().await?, vid);
            if racks == [to_rack.clone()] {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(RuntimeError::Other(format!(
                    "after moving volume {vid} to storage-{to} the master places it on {} (weed shell said: {})",
                    if racks.is_empty() {
                        "no server".into()
                    } else {
                        racks.join(", ")
                    },
                    out.trim().lines().last().unwrap_or_default()
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_move_is_seaweedfs_own_volume_move_under_the_shell_lock() {
        let s = move_script(3, "10.244.0.7:8080", "10.244.0.9:8080");
        assert_eq!(
            s,
            "lock\nvolume.move -source 10.244.0.7:8080 -target 10.244.0.9:8080 -volumeId 3\nunlock\n"
        );
        let cmd = shell_command(&s).unwrap();
        assert_eq!(&cmd[..2], ["sh", "-c"]);
        assert!(
            cmd[2].ends_with("| weed shell -master=127.0.0.1:9333 2>&1"),
            "{}",
            cmd[2]
        );
        assert!(cmd[2].contains("'lock\nvolume.move"), "{}", cmd[2]);
    }

    #[test]
    fn a_script_that_could_escape_its_quotes_is_refused() {
        assert!(shell_command("lock\n'; rm -rf /data; '\n").is_err());
        assert!(shell_command("volume.move -volumeId $(id)").is_err());
    }

    #[test]
    fn shell_failures_are_found_in_its_output() {
        assert_eq!(shell_error("moved volume 3\n"), None);
        assert!(
            shell_error("error: volume 3 not found on 10.244.0.7:8080\n")
                .unwrap()
                .contains("not found")
        );
        assert!(shell_error("copy volume 3: failed to connect\n").is_some());
        // weed 4.48's own words, moving volume 1 between two servers on non-loopback addresses.
        let moved = "copying volume 1 from 10.214.0.1:28080 to 10.214.0.2:28080\ntailing volume 1 from \
                     10.214.0.1:28080 to 10.214.0.2:28080\ndeleting volume 1 from 10.214.0.1:28080\nmoved volume 1 \
                     from 10.214.0.1:28080 to 10.214.0.2:28080\n";
        assert_eq!(shell_error(moved), None);
        let gone = "volume 1 on 10.214.0.1:28080 keeps the readonly mark the move added; volume.mark -writable \
                    clears it if the prior readonly state was transient\nerror: mark volume 1 readonly on \
                    10.214.0.1:28080: rpc error: code = Unknown desc = not found volume id 1\n";
        assert!(shell_error(gone).unwrap().contains("not found volume id 1"));
    }

    #[test]
    fn the_slow_disk_resize_holds_the_volume_container_alone() {
        let p = storage_resize_patch(Millicores(10));
        let c = &p["spec"]["containers"][0];
        assert_eq!(c["name"], "volume");
        assert_eq!(c["resources"]["limits"]["cpu"], "10m");
        assert_eq!(
            c["resources"]["requests"]["cpu"], "10m",
            "a request may not exceed its limit"
        );
        assert_eq!(
            p["spec"]["containers"].as_array().unwrap().len(),
            1,
            "the latency proxy keeps its CPU"
        );
        let p = storage_resize_patch(Millicores(200));
        assert_eq!(p["spec"]["containers"][0]["resources"]["requests"]["cpu"], "50m");
    }

    #[test]
    fn the_applied_limit_and_a_refusal_are_read_from_the_pod_status() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "storage-1-abc" },
            "status": {
                "containerStatuses": [
                    { "name": "latency-proxy", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                      "resources": { "limits": { "cpu": "2" } } },
                    { "name": "volume", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                      "resources": { "limits": { "cpu": "10m" } } }
                ],
                "conditions": [ { "type": "PodResizePending", "status": "True", "reason": "Infeasible",
                                  "message": "Node didn't have enough capacity" } ]
            }
        }))
        .unwrap();
        assert_eq!(live_storage_cpu(&pod), Some(Millicores(10)));
        assert_eq!(
            resize_refusal(&pod).as_deref(),
            Some("Node didn't have enough capacity")
        );
    }

    #[test]
    fn where_a_volume_is() {
        let body = r#"{"Volumes":{"DataCenters":{"lab":{"storage-0":{"10.244.0.7:8080":[{"Collection":"","Id":3}]},"storage-1":{"10.244.0.9:8080":[{"Collection":"","Id":3},{"Collection":"","Id":4}]}}}}}"#;
        let v = parse_vol_status(body).unwrap();
        assert_eq!(racks_of(&v, 3), ["storage-0", "storage-1"]);
        assert_eq!(racks_of(&v, 4), ["storage-1"]);
        assert!(racks_of(&v, 9).is_empty());
    }
}
