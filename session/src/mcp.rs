//! `lab mcp`: the opened lab as an MCP server an agent connects to. The live source of the tools'
//! evidence: the lab's latest snapshot made into a bundle (the same bundle `lab incident` prints), its
//! processes, its logs and its series; an agent's act is the `lab` command it names, run by this same `lab`
//! binary with its changes recorded on the agent's behalf. One agent at a time per lab: a second server on
//! the same lab is refused while the first runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lab_drills::Bundle;
use lab_drills::agent::EvidenceLevel;
use lab_drills::agent::approval::{Answers, Approval, Mode};
use lab_drills::agent::command::{self, CommandSpec, GroupSlot, LineSink};
use lab_drills::agent::mcp::tools::QueryArgs;
use lab_drills::agent::mcp::{Acted, CallLog, Evidence, McpSession, Server, Settings};
use lab_drills::incident::FixBy;
use lab_model::change::CHANGE_BY_ENV;
use serde_json::Value;

use crate::{Lab, Result, SessionError};

/// The lock file a server holds on its lab while it runs.
pub const LOCK_FILE: &str = "mcp.lock";

/// How long one act (a `lab` command) may take.
pub const ACT_TIMEOUT: Duration = Duration::from_secs(180);

/// How `lab mcp` was asked to serve.
#[derive(Debug, Clone)]
pub struct McpOptions {
    pub evidence: EvidenceLevel,
    /// `auto`, `ask`, `never`, or an approval policy file.
    pub approve: String,
    pub approvals: Option<PathBuf>,
    /// Where every call is written (JSON lines).
    pub calls: Option<PathBuf>,
}

/// The live lab as the tools' evidence.
pub struct LiveEvidence {
    lab: Lab,
    /// The incident as it opened: a drill's bundle file, else the lab as it was when the server started.
    incident: tokio::sync::OnceCell<Value>,
    incident_file: Option<PathBuf>,
    change_by: String,
    fixes: Vec<FixBy>,
    normal: Option<f64>,
    /// Kept open for the server's life: its lock says an agent is connected.
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl std::fmt::Debug for LiveEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveEvidence")
            .field("lab", &self.lab.name())
            .finish_non_exhaustive()
    }
}

impl Lab {
    /// Takes the lab's MCP lock: one agent at a time.
    ///
    /// # Errors
    /// [`SessionError::Mcp`] when another server holds it, or it cannot be made.
    fn mcp_lock(&self) -> Result<nix::fcntl::Flock<std::fs::File>> {
        let path = lab_runtime::state::lab_dir(self.name()).join(LOCK_FILE);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| SessionError::Mcp(format!("cannot open {}: {e}", path.display())))?;
        // flock: released by the kernel when this process ends, however it ends.
        match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(held) => {
                let _ = std::fs::write(&path, format!("lab mcp pid {}", std::process::id()));
                Ok(held)
            }
            Err(_) => {
                let who = std::fs::read_to_string(&path).unwrap_or_default();
                Err(SessionError::Mcp(format!(
                    "another agent is connected to lab {:?} ({}): one agent at a time; stop it first",
                    self.name(),
                    who.trim()
                )))
            }
        }
    }

    /// The lab's MCP server as `lab mcp` runs it standalone.
    ///
    /// # Errors
    /// When another agent is connected, or the approval cannot be read.
    pub fn mcp_server(&self, o: &McpOptions) -> Result<Server<LiveEvidence>> {
        let approval = approval(self.name(), &o.approve, o.approvals.as_deref(), 0)?;
        let evidence = LiveEvidence {
            lab: self.clone(),
            incident: tokio::sync::OnceCell::new(),
            incident_file: None,
            change_by: "agent 1".into(),
            fixes: Vec::new(),
            normal: None,
            _lock: self.mcp_lock()?,
        };
        Ok(Server::new(
            evidence,
            Settings {
                name: self.name().to_string(),
                level: o.evidence,
                approval,
                log: Arc::new(CallLog::new(o.calls.clone())),
            },
        ))
    }

    /// The lab's MCP server for one attempt of a drill, as its session file says.
    ///
    /// # Errors
    /// When another agent is connected, or the approval cannot be read.
    pub fn mcp_session_server(&self, s: &McpSession) -> Result<Server<LiveEvidence>> {
        let approval = approval(self.name(), &s.approve, s.approvals.as_deref(), s.approvals_used)?;
        let evidence = LiveEvidence {
            lab: self.clone(),
            incident: tokio::sync::OnceCell::new(),
            incident_file: Some(s.incident.clone()),
            change_by: s.change_by.clone(),
            fixes: s.fixes.clone(),
            normal: s.normal_samples_per_s,
            _lock: self.mcp_lock()?,
        };
        Ok(Server::new(
            evidence,
            Settings {
                name: self.name().to_string(),
                level: s.evidence,
                approval,
                log: Arc::new(CallLog::new(Some(s.calls.clone()))),
            },
        ))
    }
}

/// Where the lab keeps its earned-autonomy record.
pub fn approval_state_path(name: &str) -> PathBuf {
    lab_runtime::state::lab_dir(name).join("approval-state.json")
}

/// The approval `approve` names (`auto`, `ask`, `never`, or a policy file whose record is kept in lab
/// `name`'s folder), with the asks answered from `answers` (its first `used` lines taken) or the terminal.
///
/// # Errors
/// [`SessionError::Mcp`] naming what cannot be read.
pub fn approval(
    name: &str,
    approve: &str,
    answers: Option<&std::path::Path>,
    used: usize,
) -> Result<Approval> {
    let mode = Mode::parse(approve, &approval_state_path(name)).map_err(SessionError::Mcp)?;
    let answers = match answers {
        Some(p) => Answers::from_file(p, used).map_err(SessionError::Mcp)?,
        None => Answers::terminal_if_any(),
    };
    Ok(Approval { mode, answers })
}

/// How long a query may take the watcher (it answers between its ticks).
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

impl LiveEvidence {
    async fn bundle_now(&self) -> std::result::Result<Value, String> {
        let now = lab_model::clock::now_ms();
        // The watcher's snapshot, once its rates are there: in its first ticks after `lab up` it has seen
        // one scrape and knows no throughput yet, where a 2 s look of our own does.
        let snap = match crate::live::read_fresh(self.lab.name(), now)
            .filter(|s| s.training.samples_per_s.is_some())
        {
            Some(s) => s,
            None => self.lab.snapshot(Duration::from_secs(2)).await,
        };
        let mut bundle = Bundle::from_snapshot(&snap);
        if snap.database.is_some()
            && let Ok(d) = self.lab.runtime().database().await
        {
            bundle.set_database(&d);
        }
        let series: Vec<(u64, f64)> =
            lab_drills::history::Recent::read(&crate::live::history_path(self.lab.name()))
                .points()
                .filter_map(|p| Some((p.at_ms, p.samples_per_s?)))
                .collect();
        bundle.annotate_changes(
            &self.fixes,
            &series,
            self.normal.or(snap.training.baseline.map(|b| b.samples_per_s)),
        );
        serde_json::to_value(&bundle).map_err(|e| e.to_string())
    }
}

#[async_trait]
impl Evidence for LiveEvidence {
    async fn now(&self) -> std::result::Result<Value, String> {
        self.bundle_now().await
    }

    async fn incident(&self) -> std::result::Result<Value, String> {
        self.incident
            .get_or_try_init(|| async {
                match &self.incident_file {
                    Some(p) => {
                        let bytes =
                            std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", p.display()))
                    }
                    None => {
                        let mut b = self.bundle_now().await?;
                        b["previous_attempts"] = Value::Array(vec![]);
                        Ok(b)
                    }
                }
            })
            .await
            .cloned()
    }

    async fn query(&self, q: &QueryArgs) -> std::result::Result<Value, String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let path = crate::live::query_socket(self.lab.name());
        let ask = lab_telemetry::QueryAsk {
            expr: q.expr.clone(),
            range_s: q.range_s,
            step_s: q.step_s,
        };
        let asked = async {
            let mut s = tokio::net::UnixStream::connect(&path)
                .await
                .map_err(|e| format!("the lab's watcher answers no queries ({e}): is the lab up?"))?;
            let mut line = serde_json::to_vec(&ask).map_err(|e| e.to_string())?;
            line.push(b'\n');
            s.write_all(&line).await.map_err(|e| e.to_string())?;
            let mut answer = String::new();
            s.read_to_string(&mut answer).await.map_err(|e| e.to_string())?;
            serde_json::from_str::<Value>(&answer).map_err(|e| format!("the watcher's answer: {e}"))
        };
        let answer = tokio::time::timeout(QUERY_TIMEOUT, asked).await.map_err(|_| {
            format!(
                "the lab's watcher did not answer within {} s",
                QUERY_TIMEOUT.as_secs()
            )
        })??;
        match answer.get("status").and_then(Value::as_str) {
            Some("success") => Ok(serde_json::json!({
                "expr": q.expr,
                "range_s": q.range_s,
                "data": answer.get("data").cloned().unwrap_or(Value::Null),
            })),
            _ => Err(answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("the watcher could not answer")
                .to_string()),
        }
    }

    fn answers(&self, tool: &str) -> bool {
        // The watcher answers queries from the series it holds; without it there are none.
        tool != "query" || crate::live::query_socket(self.lab.name()).exists()
    }

    async fn processes(&self, rank: u32) -> std::result::Result<Value, String> {
        let procs = self
            .lab
            .runtime()
            .rank_processes(rank)
            .await
            .map_err(|e| lab_model::format::error_chain(&e))?;
        Ok(serde_json::json!({"rank": lab_model::names::rank(rank), "processes": procs}))
    }

    async fn logs(&self, component: &str, lines: u32) -> std::result::Result<Value, String> {
        use futures::StreamExt as _;
        // The lab's own machinery is not the system under test: its logs would name the injection.
        if matches!(component, "supervisor" | crate::logs::WATCHER_COMPONENT) {
            return Err(format!(
                "{component} is the lab's own machinery, not a component of the job: ask for rank-N, storage-N, \
                 storage-master, db-N, ..."
            ));
        }
        let request = lab_runtime::LogRequest {
            tail: Some(lines as usize),
            follow: false,
        };
        let stream = self
            .lab
            .logs(component, request)
            .await
            .map_err(|e| lab_model::format::error_chain(&e))?;
        let read: Vec<String> = stream.filter_map(|l| async move { l.ok() }).collect().await;
        let kept: Vec<String> = read
            .iter()
            .filter_map(|l| lab_drills::incident::redact::evidence_only(l))
            .collect();
        let mut out = serde_json::json!({"component": component, "lines": kept});
        if kept.len() < read.len() {
            out["left_out"] = Value::from(read.len() - kept.len());
        }
        Ok(out)
    }

    async fn act(&self, argv: &[String]) -> std::result::Result<Acted, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find the lab binary: {e}"))?;
        let mut full = vec![exe.display().to_string()];
        full.extend(argv.iter().skip(1).cloned());
        let spec = CommandSpec {
            command: argv.join(" "),
            timeout: ACT_TIMEOUT,
            env: vec![
                ("LAB_NAME".into(), self.lab.name().to_string()),
                (
                    "LAB_STATE_DIR".into(),
                    lab_runtime::state::base_dir().display().to_string(),
                ),
                (CHANGE_BY_ENV.into(), self.change_by.clone()),
            ],
            path_first: exe.parent().map(PathBuf::from),
        };
        let group: GroupSlot = Arc::default();
        let quiet: LineSink = Arc::new(|_: &str, _| {});
        let from = lab_model::clock::now_ms();
        let out = command::run_argv(&full, &spec, quiet, &group)
            .await
            .map_err(|e| lab_model::format::error_chain(&e))?;
        let to = lab_model::clock::now_ms();
        let (changes, touched) = match self.lab.ledger().read() {
            Ok(d) => {
                let ours: Vec<&lab_model::ChangeRecord> = d
                    .changes
                    .iter()
                    .filter(|c| {
                        c.at_ms >= from && c.at_ms <= to && c.by.as_deref() == Some(self.change_by.as_str())
                    })
                    .collect();
                let mut touched: Vec<String> = ours.iter().map(|c| c.target.clone()).collect();
                touched.sort();
                touched.dedup();
                (ours.iter().map(|c| c.line()).collect(), touched)
            }
            Err(_) => (Vec::new(), Vec::new()),
        };
        Ok(Acted {
            exit_code: if out.timed_out { None } else { out.exit_code },
            stdout: out.stdout,
            stderr: if out.timed_out {
                format!("{}\nstopped after {} s", out.stderr, ACT_TIMEOUT.as_secs())
            } else {
                out.stderr
            },
            changes,
            touched,
            judged: None,
        })
    }
}

/// What `lab mcp` serves.
#[derive(Debug, Clone)]
pub enum Serve {
    /// The running lab, as `lab mcp` with its flags.
    Lab(McpOptions),
    /// One attempt of a drill, as the session file written by `lab drill run --mcp-agent` says (the lab it
    /// names, the level, the incident, the approval).
    Session(PathBuf),
    /// A recorded incident, without a lab, as the replay session file written by `lab replay --mcp-agent`
    /// says: reads answer from the recording, acts are judged against what was verified live.
    Replay(PathBuf),
}

/// `lab mcp`: serves one agent on stdin and stdout until it disconnects. `name` is the lab of
/// [`Serve::Lab`].
///
/// # Errors
/// [`SessionError::Mcp`] when a session file cannot be read, another agent is connected, the approval
/// cannot be read, or the connection fails; [`SessionError::Runtime`] when the lab does not answer.
pub async fn serve(name: &str, what: &Serve) -> Result<()> {
    match what {
        Serve::Replay(file) => {
            use lab_drills::agent::mcp::replay::{ReplayEvidence, ReplaySession};
            let s = ReplaySession::load(file).map_err(SessionError::Mcp)?;
            let evidence = ReplayEvidence::open(&s.recording, &s.drill).map_err(SessionError::Mcp)?;
            let server = Server::new(
                evidence,
                Settings {
                    name: format!("{} (recorded)", s.drill),
                    level: s.evidence,
                    // A replay runs nothing: every act is judged, and approving it changes nothing.
                    approval: Approval::auto(),
                    log: Arc::new(CallLog::new(Some(s.calls.clone()))),
                },
            );
            server.serve_stdio().await.map_err(SessionError::Mcp)
        }
        Serve::Session(file) => {
            let s = McpSession::load(file).map_err(SessionError::Mcp)?;
            let lab = Lab::open(&s.lab).await?;
            let server = lab.mcp_session_server(&s)?;
            server.serve_stdio().await.map_err(SessionError::Mcp)
        }
        Serve::Lab(o) => {
            let lab = Lab::open(name).await?;
            let server = lab.mcp_server(o)?;
            server.serve_stdio().await.map_err(SessionError::Mcp)
        }
    }
}
