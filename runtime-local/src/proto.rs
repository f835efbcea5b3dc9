//! The supervisor's control protocol: one JSON request line, one JSON response line, over the Unix
//! socket in the lab's directory (mode 0700 protects it).

use std::path::Path;
use std::time::Duration;

use lab_model::Millicores;
use lab_model::jobs::ForeignJob;
use lab_model::status::LabStatus;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use lab_runtime::{BesideProcess, Delay, Result, RuntimeError, ScrapeTarget};

/// A request to the supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    Ping,
    Status,
    /// Run the dataset seeder (once).
    Seed,
    Scale {
        ranks: u32,
    },
    WorldSize {
        world_size: u32,
    },
    /// Rank count and world size in one template change, rolled out one rank at a time.
    Rollout {
        ranks: u32,
        world_size: u32,
    },
    Resize {
        rank: u32,
        cpu: Millicores,
    },
    ApplyTemplate {
        cpu: Millicores,
    },
    Restart {
        rank: u32,
    },
    SetDelay {
        server: u32,
        delay: Option<Delay>,
    },
    /// Freeze (or thaw) the rank's training thread.
    Freeze {
        rank: u32,
        frozen: bool,
    },
    /// Is the rank's training thread frozen? ([`Response::Flag`])
    Frozen {
        rank: u32,
    },
    /// The processes in the rank's cgroup ([`Response::Processes`]).
    RankProcs {
        rank: u32,
    },
    /// Start a CPU hog in the rank's cgroup ([`Response::Pid`]).
    StartHog {
        rank: u32,
    },
    /// Set (`Some`) or remove (`None`) a setting of one rank; the rank restarts to pick it up.
    SetRankEnv {
        rank: u32,
        name: String,
        value: Option<String>,
    },
    /// The settings of one rank alone ([`Response::Env`]).
    RankEnv {
        rank: u32,
    },
    /// Stop a process in the rank's cgroup that is not the rank.
    StopBeside {
        rank: u32,
        pid: u32,
    },
    /// Holds storage server `server`'s own process to CPU limit `cpu` (`None`: no limit).
    SetStorageCpu {
        server: u32,
        cpu: Option<Millicores>,
    },
    /// Stop every process, remove the cgroups, and exit.
    Shutdown,
    /// Runs a foreign job, or changes the one of that name (its process is replaced).
    RunJob {
        job: ForeignJob,
    },
    /// Stops the foreign job of that name.
    StopJob {
        name: String,
    },
    /// Sets the database standby's template (its node selector); no pod changes.
    DbTemplate {
        node_selector: std::collections::BTreeMap<String, String>,
    },
    /// Deletes a database pod by name; it is made again from its template as it is now.
    DeletePod {
        name: String,
    },
}

/// What the supervisor knows beyond the shared status model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalStatus {
    pub status: LabStatus,
    pub targets: Vec<ScrapeTarget>,
    /// Delays set on storage servers' paths, as `(server, delay)` (a list: map keys would not survive the
    /// tagged response).
    pub delays: Vec<(u32, Delay)>,
    /// The address of each storage server's path as the ranks reach it (the proxy).
    pub storage_paths: Vec<String>,
    /// The supervisor's own pid.
    pub supervisor_pid: u32,
    /// Foreign jobs the lab runs (jobs of other teams on the same storage).
    #[serde(default)]
    pub foreign_jobs: Vec<ForeignJob>,
    /// CPU limits on storage servers' own processes, as `(server, limit)` (the slow-disk fault).
    #[serde(default)]
    pub storage_cpu: Vec<(u32, Millicores)>,
    /// The optional database (its `synchronous_standby_names` is not known to the supervisor: `None`).
    #[serde(default)]
    pub database: Option<lab_model::db::DbStatus>,
}

/// The supervisor's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum Response {
    Ok,
    Status {
        status: Box<LocalStatus>,
    },
    Flag {
        value: bool,
    },
    Processes {
        procs: Vec<BesideProcess>,
    },
    Pid {
        pid: u32,
    },
    Env {
        env: std::collections::BTreeMap<String, String>,
    },
    Error {
        message: String,
    },
}

/// Sends one request to the supervisor listening on `socket` and waits up to `timeout` for its answer.
///
/// # Errors
/// [`RuntimeError::Other`] when the supervisor cannot be reached or answers with an error.
pub async fn call(socket: &Path, req: &Request, timeout: Duration) -> Result<Response> {
    let fut = async {
        let stream = UnixStream::connect(socket).await.map_err(|e| {
            RuntimeError::Other(format!(
                "the lab's supervisor does not answer ({e}): it may have been killed; `lab down` cleans up"
            ))
        })?;
        let (r, mut w) = stream.into_split();
        let mut line = serde_json::to_string(req).map_err(|e| RuntimeError::Other(e.to_string()))?;
        line.push('\n');
        w.write_all(line.as_bytes())
            .await
            .map_err(|e| RuntimeError::io("writing to the supervisor", e))?;
        let mut answer = String::new();
        BufReader::new(r)
            .read_line(&mut answer)
            .await
            .map_err(|e| RuntimeError::io("reading from the supervisor", e))?;
        let resp: Response = serde_json::from_str(&answer)
            .map_err(|e| RuntimeError::Other(format!("the supervisor answered something unreadable: {e}")))?;
        match resp {
            Response::Error { message } => Err(RuntimeError::Other(message)),
            other => Ok(other),
        }
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| RuntimeError::Timeout {
            what: "the lab's supervisor to answer".into(),
            seconds: timeout.as_secs_f64(),
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_with_delays_survives_the_round_trip() {
        use lab_model::status::RuntimeKind;
        let st = LocalStatus {
            status: LabStatus::default_shape("x", RuntimeKind::Local),
            targets: vec![],
            delays: vec![(
                1,
                Delay {
                    delay: Duration::from_millis(300),
                    jitter: Duration::ZERO,
                },
            )],
            storage_paths: vec![],
            supervisor_pid: 1,
            foreign_jobs: vec![],
            storage_cpu: vec![(2, Millicores(5))],
            database: None,
        };
        let r = Response::Status { status: Box::new(st) };
        let back: Response = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn requests_are_tagged_json() {
        let r = Request::Resize {
            rank: 1,
            cpu: Millicores(150),
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(s, r#"{"op":"resize","rank":1,"cpu":"150m"}"#);
        assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), r);
        assert!(serde_json::from_str::<Request>(r#"{"op":"resize","rank":1,"cpu":"lots"}"#).is_err());
    }
}
