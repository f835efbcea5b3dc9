//! Storage actions of the local runtime beyond the latency path: a volume server's own CPU limit (the
//! slow-disk fault), a probe that bypasses the proxy (the server's own latency), and moving a volume
//! between servers with SeaweedFS's own tools (`lab storage drain`).
//!
//! Why not `volume.move`: SeaweedFS 4.48's `VolumeCopy` refuses a source whose address is a loopback one
//! ("remote endpoint … resolves to loopback address"), and every server of a local lab listens on
//! 127.0.0.1. So a move is `weed backup` of the volume into the target server's data directory (an
//! incremental copy over the source's gRPC, which the lab owns), then `weed shell`'s `volume.mount` on the
//! target (the master learns the new location at once) and `volume.delete` on the source.

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::{LocalRuntime, http};
use lab_runtime::storage::{PROBE_SPACING, PROBE_TIMEOUT, VolumeEntry, parse_vol_status};
use lab_runtime::{Result, RuntimeError};

const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

impl LocalRuntime {
    fn weed_node(&self, server: u32) -> String {
        format!("127.0.0.1:{}", self.cfg.storage[server as usize].weed)
    }

    /// The server as `weed shell` names it: `ip:port.grpcPort` (without the gRPC port it guesses port+10000).
    fn shell_node(&self, server: u32) -> String {
        let p = &self.cfg.storage[server as usize];
        format!("127.0.0.1:{}.{}", p.weed, p.weed_grpc)
    }

    fn master_with_grpc(&self) -> String {
        format!("{}.{}", self.cfg.master(), self.cfg.master_grpc_port)
    }

    /// Every volume the master knows, with where it is.
    pub(super) async fn volume_entries(&self) -> Result<Vec<VolumeEntry>> {
        let url = format!("http://{}/vol/status", self.cfg.master());
        let (code, body) = http::get(&url, Duration::from_secs(5)).await?;
        if code != 200 {
            return Err(RuntimeError::Other(format!(
                "the storage master answered {code} to /vol/status"
            )));
        }
        parse_vol_status(&body)
    }

    pub(super) async fn volumes_on(&self, server: u32) -> Result<Vec<u32>> {
        Ok(lab_runtime::storage::volumes_on(
            self.volume_entries().await?,
            server,
        ))
    }

    /// Times `samples` `/status` requests straight to the volume server, not through its proxy, and returns
    /// their median. The requests are sent on a fixed schedule, [`PROBE_SPACING`] apart, without waiting for
    /// the previous answer: a server held to a CPU budget per period answers a request that arrives after the
    /// budget is spent only in the next period, and probes sent one after the other would all arrive just
    /// after it answered (when it has budget again) and read fast. A request that times out counts as
    /// [`PROBE_TIMEOUT`].
    pub(super) async fn probe_own(&self, server: u32, samples: usize) -> Result<Duration> {
        let url = format!("http://{}/status", self.weed_node(server));
        lab_runtime::median_probe(samples, PROBE_SPACING, PROBE_TIMEOUT, || {
            let url = url.clone();
            async move {
                match http::get(&url, PROBE_TIMEOUT).await? {
                    (200, _) => Ok(()),
                    (code, _) => Err(RuntimeError::Other(format!("storage-{server} answered {code}"))),
                }
            }
        })
        .await
    }

    /// Moves volume `vid` from server `from` to server `to`: `weed backup` into `to`'s data directory,
    /// `volume.mount` there, `volume.delete` on `from`, then checks the master's answer.
    pub(super) async fn move_volume_local(&self, vid: u32, from: u32, to: u32) -> Result<()> {
        let entries = self.volume_entries().await?;
        let from_rack = lab_model::names::storage(from);
        let Some(entry) = entries.iter().find(|e| e.id == vid && e.rack == from_rack) else {
            return Err(RuntimeError::InvalidInput(format!(
                "storage-{from} does not hold volume {vid}"
            )));
        };
        let dir = self.paths.data().join(lab_model::names::storage(to));
        let mut backup = Command::new(&self.cfg.weed);
        backup
            .arg("backup")
            .arg(format!("-master={}", self.master_with_grpc()))
            .arg(format!("-volumeId={vid}"))
            .arg(format!("-dir={}", dir.display()));
        if !entry.collection.is_empty() {
            backup.arg(format!("-collection={}", entry.collection));
        }
        run_tool(backup, None, &format!("weed backup of volume {vid}")).await?;
        let script = format!(
            "lock\nvolume.mount -node {} -volumeId {vid}\nvolume.delete -node {} -volumeId {vid}\nunlock\n",
            self.shell_node(to),
            self.shell_node(from)
        );
        let mut shell = Command::new(&self.cfg.weed);
        shell
            .arg("shell")
            .arg(format!("-master={}", self.master_with_grpc()));
        let failed = match run_tool(shell, Some(script), "weed shell").await {
            Ok(out) => out
                .lines()
                .find(|l| l.trim_start().starts_with("error"))
                .map(str::to_string),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = failed {
            // The copy was not taken up: leave no stray volume files that a restart of `to` would load.
            let vol_is_mounted_on_to = self.volume_entries().await.is_ok_and(|v| {
                v.iter()
                    .any(|e| e.id == vid && e.rack == lab_model::names::storage(to))
            });
            if !vol_is_mounted_on_to {
                let base = if entry.collection.is_empty() {
                    vid.to_string()
                } else {
                    format!("{}_{vid}", entry.collection)
                };
                for ext in ["dat", "idx", "vif"] {
                    let _ = std::fs::remove_file(dir.join(format!("{base}.{ext}")));
                }
            }
            return Err(RuntimeError::Other(format!(
                "weed shell moving volume {vid} from storage-{from} to storage-{to}: {why}"
            )));
        }
        // The master learns of the delete with the source's next heartbeat: wait for it to place the
        // volume on `to` alone.
        let to_rack = lab_model::names::storage(to);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let racks: Vec<String> = self
                .volume_entries()
                .await?
                .into_iter()
                .filter(|e| e.id == vid)
                .map(|e| e.rack)
                .collect();
            if racks == [to_rack.clone()] {
                break;
            }
            if Instant::now() >= deadline {
                return Err(RuntimeError::Other(format!(
                    "after moving volume {vid} to storage-{to} the master places it on {}",
                    racks.join(", ")
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(())
    }
}

/// Runs a SeaweedFS tool with `stdin`, within [`TOOL_TIMEOUT`]; returns its output.
async fn run_tool(mut cmd: Command, stdin: Option<String>, what: &str) -> Result<String> {
    use std::process::Stdio;
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| RuntimeError::io(format!("starting {what}"), e))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .await
            .map_err(|e| RuntimeError::io(format!("writing to {what}"), e))?;
    }
    let out = tokio::time::timeout(TOOL_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| RuntimeError::Timeout {
            what: what.to_string(),
            seconds: TOOL_TIMEOUT.as_secs_f64(),
        })?
        .map_err(|e| RuntimeError::io(format!("waiting for {what}"), e))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(RuntimeError::Other(format!(
            "{what} failed ({}): {}",
            out.status,
            text.trim()
        )));
    }
    Ok(text)
}
