//! What runs beside a rank in its container, reached through the API server's `exec` (`pods/exec`, over a
//! WebSocket): the rank image's own `lab-beside` lists the processes in the container's cgroup, starts a
//! CPU hog there (slow-compute), holds the rank's training thread in a ptrace stop (rank-hang) and
//! signals one process. Neither the pod's spec nor the StatefulSet's template changes: a process started
//! by `exec` shares the container's cgroup, so its CPU limit, and nothing about it is visible in the pod
//! object. No shell is involved: the command is the program and its arguments.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{AttachParams, AttachedProcess};
use lab_model::names;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use super::manifests::names as obj;
use super::{KubeRuntime, api};
use lab_runtime::{BesideProcess, Result, RuntimeError};

/// The program in the rank image that `exec` runs.
pub const BESIDE_PROGRAM: &str = "lab-beside";

/// How long one `exec` may take, the WebSocket's setup included (a hold waits up to 5 s for the stop).
const EXEC_TIMEOUT: Duration = Duration::from_secs(20);

/// One line of `lab-beside procs`: the fields the lab reads (the role and the state beside them).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ContainerProc {
    pub pid: u32,
    pub command: String,
    pub cpu_seconds: f64,
    pub rank_itself: bool,
    /// `rank`, `hog`, `hold` or `other`.
    pub role: String,
    /// The main thread's state letter (`t`: a ptrace stop; `T`: a stop signal).
    pub state: String,
    /// The pid tracing its main thread (0: none).
    pub tracer: u32,
}

impl ContainerProc {
    fn stopped(&self) -> bool {
        self.state == "t" || self.state == "T"
    }
}

/// The `exec` command for `lab-beside` with `args`.
pub fn beside_command(args: &[&str]) -> Vec<String> {
    std::iter::once(BESIDE_PROGRAM)
        .chain(args.iter().copied())
        .map(String::from)
        .collect()
}

/// Parses `lab-beside procs` output.
///
/// # Errors
/// [`RuntimeError::Kube`] when it is not that program's JSON (an image without `lab-beside`).
pub fn parse_procs(text: &str) -> Result<Vec<ContainerProc>> {
    serde_json::from_str(text.trim()).map_err(|e| {
        RuntimeError::Kube(format!(
            "`{BESIDE_PROGRAM} procs` in the rank's container answered something else ({e}): {}",
            text.trim().chars().take(200).collect::<String>()
        ))
    })
}

/// Whether an `exec` status means the command ran and exited 0; otherwise its message.
pub fn exec_failure(status: Option<&Status>) -> Option<String> {
    match status {
        Some(s) if s.status.as_deref() == Some("Success") => None,
        Some(s) => Some(s.message.clone().unwrap_or_else(|| format!("{:?}", s.reason))),
        None => Some("the exec stream ended without a status".into()),
    }
}

/// Reads an `exec`'s stdout and stderr to their ends, then its status: what it printed on each, and
/// [`exec_failure`]'s verdict.
async fn finish(mut proc: AttachedProcess) -> (String, String, Option<String>) {
    let status = proc.take_status();
    let (mut out, mut err) = (String::new(), String::new());
    let (o, e) = (proc.stdout(), proc.stderr());
    let read_out = async {
        if let Some(mut o) = o {
            let _ = o.read_to_string(&mut out).await;
        }
    };
    let read_err = async {
        if let Some(mut e) = e {
            let _ = e.read_to_string(&mut err).await;
        }
    };
    tokio::join!(read_out, read_err);
    let status = match status {
        Some(s) => s.await,
        None => None,
    };
    let _ = proc.join().await;
    (out, err, exec_failure(status.as_ref()))
}

/// Whether an `exec` failed because its container is not running any more (it exited, and the kubelet
/// has not started it again yet): containerd's "cannot exec in a stopped state", or a runtime's "not
/// running".
fn container_stopped(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("cannot exec in a stopped state") || m.contains("not running")
}

/// Whether an `exec` was killed by its container's end: exit 137 (SIGKILL), what the kernel sends every
/// process of a PID namespace whose init exits.
fn ended_with_its_container(message: &str) -> bool {
    message.contains("exit code 137")
}

/// Why a rank container's image cannot run the command (an image from before `lab-beside`).
fn missing_program(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("executable file not found") || m.contains("no such file or directory")
}

impl KubeRuntime {
    /// Runs `command` in `container` of pod `pod` through the API server (`what` names it in errors) and
    /// reads it to its end: its stdout, its stderr, and why it failed (`None`: it exited 0). A pod that
    /// does not exist is [`RuntimeError::NoSuchInstance`]. The caller bounds it with its own timeout.
    pub(super) async fn exec_text(
        &self,
        pod: &str,
        container: &str,
        command: Vec<String>,
        what: &str,
    ) -> Result<(String, String, Option<String>)> {
        let ap = AttachParams::default()
            .container(container)
            .stdin(false)
            .stdout(true)
            .stderr(true);
        match self.pods_api().exec(pod, command, &ap).await {
            Ok(proc) => Ok(finish(proc).await),
            Err(kube::Error::Api(s)) if s.code == 404 => Err(RuntimeError::NoSuchInstance(pod.to_string())),
            Err(e) => Err(api::kube_err(what.to_string(), e)),
        }
    }

    /// Runs `lab-beside <args>` in rank `rank`'s container; returns its stdout. A command that exits
    /// non-zero is [`RuntimeError::InvalidInput`] with its stderr (its refusals are about the input).
    async fn beside(&self, rank: u32, args: &[&str]) -> Result<String> {
        let pod = names::rank(rank);
        let what = format!("exec `{}` in {pod}", beside_command(args).join(" "));
        api::within(&what, EXEC_TIMEOUT, async {
            let (out, err, failure) = self
                .exec_text(&pod, obj::RANK_CONTAINER, beside_command(args), &what)
                .await?;
            match failure {
                None => Ok(out),
                Some(m) if missing_program(&m) => Err(RuntimeError::InvalidInput(format!(
                    "{pod}'s image has no {BESIDE_PROGRAM} ({m}): rebuild the lab image from this version \
                     (`lab down`, then `lab up`)"
                ))),
                Some(m) => {
                    let said = err.trim().trim_start_matches("lab-beside: ");
                    Err(RuntimeError::InvalidInput(if said.is_empty() {
                        format!("{what}: {m}")
                    } else {
                        said.to_string()
                    }))
                }
            }
        })
        .await
    }

    /// Every live process in rank `rank`'s container.
    pub(super) async fn container_procs(&self, rank: u32) -> Result<Vec<ContainerProc>> {
        parse_procs(&self.beside(rank, &["procs"]).await?)
    }

    pub(super) async fn beside_processes(&self, rank: u32) -> Result<Vec<BesideProcess>> {
        Ok(self
            .container_procs(rank)
            .await?
            .into_iter()
            .map(|p| BesideProcess {
                pid: p.pid,
                command: p.command,
                cpu_seconds: p.cpu_seconds,
                rank_itself: p.rank_itself,
            })
            .collect())
    }

    pub(super) async fn hog(&self, rank: u32) -> Result<u32> {
        let out = self.beside(rank, &["hog"]).await?;
        out.trim().parse().map_err(|_| {
            RuntimeError::Kube(format!(
                "`{BESIDE_PROGRAM} hog` in rank-{rank} printed no pid: {:?}",
                out.trim()
            ))
        })
    }

    pub(super) async fn stop_process(&self, rank: u32, pid: u32) -> Result<()> {
        let procs = self.container_procs(rank).await?;
        match procs.iter().find(|p| p.pid == pid) {
            None => Err(RuntimeError::InvalidInput(format!(
                "pid {pid} is not beside rank-{rank} (see `lab rank procs {rank}`)"
            ))),
            Some(p) if p.rank_itself => Err(RuntimeError::InvalidInput(format!(
                "pid {pid} is rank-{rank} itself: restart the rank instead (`lab restart rank {rank}`)"
            ))),
            Some(_) => {
                let pid = pid.to_string();
                self.beside(rank, &["signal", "--pid", &pid, "--signal", "kill"])
                    .await
                    .map(drop)
            }
        }
    }

    /// Whether the rank's main thread is stopped (held by a tracer, or stopped by a signal). A container
    /// without a lab-rank process (it is being restarted) holds nothing: the process that comes is new.
    ///
    /// A container that stopped between the look and the `exec` holds nothing either: a rank thawed after
    /// its peers restarted finds its ring gone and exits at once (the collective error's code), and the
    /// `exec` that reads the freezer just after it meets a stopped container.
    pub(super) async fn held(&self, rank: u32) -> Result<bool> {
        match self.container_procs(rank).await {
            Ok(procs) => Ok(procs.iter().any(|p| p.rank_itself && p.stopped())),
            Err(RuntimeError::NoSuchInstance(_)) => Ok(false),
            Err(e) if container_stopped(&e.to_string()) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Restarts rank `rank`'s container (not its pod): a signal to the rank, the container's first process,
    /// through `exec`: SIGTERM (lab-rank stops on it, exit 0), or with `device_fails` SIGUSR1 (its
    /// simulated accelerator fails: exit 6, a crash the kubelet counts). The kubelet starts the container
    /// again in the same pod, with the environment as lab-config says now. A pod that is not there, or
    /// whose rank container is not running (waiting in its back-off, or still being made), needs nothing:
    /// its next start reads the new value.
    pub(super) async fn restart_container(&self, rank: u32, device_fails: bool) -> Result<()> {
        let pod = match self.rank_pod(rank).await {
            Ok(p) => p,
            Err(RuntimeError::NoSuchInstance(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let running = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.name == obj::RANK_CONTAINER))
            .and_then(|c| c.state.as_ref()?.running.as_ref())
            .is_some();
        if pod.metadata.deletion_timestamp.is_some() || !running {
            return Ok(());
        }
        match self
            .beside(
                rank,
                &[
                    "signal",
                    "--pid",
                    "1",
                    "--signal",
                    if device_fails { "usr1" } else { "term" },
                ],
            )
            .await
        {
            Ok(_) => Ok(()),
            // Gone or stopped between the look and the signal: the next start reads the new value.
            Err(RuntimeError::NoSuchInstance(_)) => Ok(()),
            Err(e) if e.to_string().contains("no such process") || container_stopped(&e.to_string()) => {
                Ok(())
            }
            // The rank ended on the signal before `lab-beside` did, and took it with it: the kernel kills
            // what is left in a PID namespace whose init exits (exit 137, SIGKILL). The signal was sent.
            Err(e) if ended_with_its_container(&e.to_string()) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The rank container's restart count, from its pod's status.
    async fn restarts(&self, rank: u32) -> Result<i32> {
        let pod = self.rank_pod(rank).await?;
        Ok(pod
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.into_iter().find(|c| c.name == obj::RANK_CONTAINER))
            .map_or(0, |c| c.restart_count))
    }

    /// Holds (`true`) or releases (`false`) rank `rank`'s training thread.
    pub(super) async fn hold(&self, rank: u32, on: bool) -> Result<()> {
        let procs = self.container_procs(rank).await?;
        let me = procs
            .iter()
            .find(|p| p.rank_itself)
            .ok_or_else(|| RuntimeError::Kube(format!("no lab-rank process in rank-{rank}'s container")))?;
        if on {
            if me.stopped() {
                return Ok(());
            }
            let pid = me.pid.to_string();
            return self.beside(rank, &["hold", "--pid", &pid]).await.map(drop);
        }
        let restarts = self.restarts(rank).await?;
        // The holders go (the kernel lets the thread run once its tracer is gone); a stop signal sent by
        // hand is undone too.
        for h in procs
            .iter()
            .filter(|p| p.role == "hold" || (me.tracer != 0 && p.pid == me.tracer))
        {
            let pid = h.pid.to_string();
            self.beside(rank, &["signal", "--pid", &pid, "--signal", "kill"])
                .await?;
        }
        if me.state == "T" {
            let pid = me.pid.to_string();
            self.beside(rank, &["signal", "--pid", &pid, "--signal", "cont"])
                .await?;
        }
        // Released means the thread runs: verified, not assumed. A thread that runs again may find its
        // ring gone (a sibling restarted meanwhile) and the rank exit: its container restarting, or
        // restarted, is released too (the new process was never held).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match self.held(rank).await {
                Ok(false) => return Ok(()),
                Ok(true) => {}
                Err(e) => {
                    if self.restarts(rank).await? != restarts {
                        return Ok(());
                    }
                    if std::time::Instant::now() > deadline {
                        return Err(e);
                    }
                }
            }
            if std::time::Instant::now() > deadline {
                return Err(RuntimeError::Kube(format!(
                    "rank-{rank}'s training thread is still stopped 10 s after its holder was killed"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_the_program_and_its_arguments_without_a_shell() {
        assert_eq!(
            beside_command(&["signal", "--pid", "7", "--signal", "kill"]),
            vec!["lab-beside", "signal", "--pid", "7", "--signal", "kill"]
        );
    }

    #[test]
    fn procs_output_is_parsed_and_anything_else_is_an_error() {
        let text = r#"[{"pid":1,"command":"lab-rank --rank-from-hostname","cpu_seconds":12.5,"rank_itself":true,"role":"rank","state":"t","tracer":40},
                      {"pid":40,"command":"lab-beside hold-run 1","cpu_seconds":0.0,"rank_itself":false,"role":"hold","state":"S","tracer":0}]"#;
        let p = parse_procs(text).unwrap();
        assert_eq!(p.len(), 2);
        assert!(p[0].stopped() && p[0].rank_itself && p[0].tracer == 40);
        assert!(!p[1].stopped());
        let e = parse_procs("sh: lab-beside: not found").unwrap_err().to_string();
        assert!(e.contains("lab-beside procs"), "{e}");
    }

    #[test]
    fn exec_statuses() {
        let ok = Status {
            status: Some("Success".into()),
            ..Status::default()
        };
        assert_eq!(exec_failure(Some(&ok)), None);
        let bad = Status {
            status: Some("Failure".into()),
            message: Some("command terminated with non-zero exit code: error executing command [lab-beside x], exit code 1".into()),
            ..Status::default()
        };
        assert!(exec_failure(Some(&bad)).unwrap().contains("exit code 1"));
        assert!(exec_failure(None).is_some());
        assert!(missing_program(
            "failed to exec in container: exec: \"lab-beside\": executable file not found in $PATH"
        ));
    }

    #[test]
    fn an_exec_into_a_container_that_just_exited_is_told_from_other_failures() {
        // What the API server said when rank-hang's clear read the freezer just after thawing a rank that
        // then exited (its peers had restarted while it was frozen), on kind.
        let said = "exec `lab-beside procs` in rank-1: Internal error occurred: Internal error occurred: error \
                    executing command in container: failed to exec in container: failed to create exec \
                    \"1cfa2f26e65c\": cannot exec in a stopped state: unknown";
        assert!(container_stopped(said));
        assert!(container_stopped("container rank is not running"));
        // `lab rank env`'s restart on kind, once in 5 right fixes of rank-crash: the rank ended on the
        // SIGTERM before `lab-beside` returned.
        assert!(ended_with_its_container(
            "exec `lab-beside signal --pid 1 --signal term` in rank-1: command terminated with non-zero \
             exit code: command terminated with exit code 137"
        ));
        assert!(!ended_with_its_container("command terminated with exit code 1"));
        assert!(!container_stopped(
            "exec `lab-beside procs` in rank-1: connection refused"
        ));
        assert!(!container_stopped(
            "exec: \"lab-beside\": executable file not found in $PATH"
        ));
    }
}
