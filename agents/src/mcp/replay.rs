//! A recorded incident served through the same tools, without a lab: the read tools answer from the
//! recording as of the moment asked, on a clock that moves one second per call (so a replay is the same
//! whatever the machine's speed), and an act is judged against what the lab recorded live — the same
//! commands as a verified right fix, as a trap whose verification failed, or a command that changes a part
//! that was not at fault (unrelated) — instead of being run.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::server::{Acted, Evidence};
use super::tools::QueryArgs;
use crate::command::{self, CommandSpec, GroupSlot};
use crate::replay::{Incident, changes_nothing, effective, load};
use crate::score::Score;
use crate::{EvidenceLevel, Mitigation};

/// The replay session file's format identifier, versioned.
pub const REPLAY_SESSION_FORMAT: &str = "straggler-lab.mcp-replay/v1";

/// Seconds the replay's clock moves on with each call.
pub const SECONDS_PER_CALL: f64 = 1.0;

/// How `lab mcp --replay FILE` serves one recorded incident.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplaySession {
    pub format: String,
    /// The recording folder and the drill whose incident is served.
    pub recording: PathBuf,
    pub drill: String,
    pub evidence: EvidenceLevel,
    /// Where the server writes every call.
    pub calls: PathBuf,
}

impl ReplaySession {
    /// Reads a replay session file.
    ///
    /// # Errors
    /// A message when it cannot be read or is not a replay session of this format.
    pub fn load(path: &Path) -> Result<ReplaySession, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the replay session {}: {e}", path.display()))?;
        let s: ReplaySession = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a replay session: {e}", path.display()))?;
        if s.format != REPLAY_SESSION_FORMAT {
            return Err(format!(
                "{}: format {:?}, this lab reads {REPLAY_SESSION_FORMAT:?}",
                path.display(),
                s.format
            ));
        }
        Ok(s)
    }
}

/// One recorded incident as the tools' evidence.
#[derive(Debug)]
pub struct ReplayEvidence {
    incident: Incident,
    calls: AtomicU32,
    acts: Mutex<Vec<Vec<String>>>,
}

impl ReplayEvidence {
    /// The incident of `drill` in the recording folder `dir`.
    ///
    /// # Errors
    /// A message when the folder is not a recording, or holds no incident of that drill.
    pub fn open(dir: &Path, drill: &str) -> Result<ReplayEvidence, String> {
        let incident = load(dir)?
            .into_iter()
            .find(|i| i.drill == drill)
            .ok_or_else(|| format!("{} holds no recorded incident of drill {drill:?}", dir.display()))?;
        Ok(ReplayEvidence::of(incident))
    }

    /// `incident` as the tools' evidence.
    pub fn of(incident: Incident) -> ReplayEvidence {
        ReplayEvidence {
            incident,
            calls: AtomicU32::new(0),
            acts: Mutex::new(Vec::new()),
        }
    }

    /// Seconds on the replay's clock: one per call answered so far.
    pub fn clock_s(&self) -> f64 {
        f64::from(self.calls.load(Ordering::SeqCst)) * SECONDS_PER_CALL
    }

    /// The lab as recorded at the replay's clock: the latest moment at or before it (the moments run from
    /// the detection to the first remediation), else the incident's bundle.
    fn at_clock(&self) -> Value {
        let t = self.clock_s();
        self.incident
            .replay
            .moments
            .iter()
            .rev()
            .find(|m| m.t_s <= t)
            .or_else(|| self.incident.replay.moments.first())
            .map_or_else(|| self.incident.bundle.clone(), |m| m.bundle.clone())
    }

    /// What the acts so far add up to, judged against what was verified live.
    pub fn judged(&self) -> Option<(Mitigation, String)> {
        let acts = self.acts.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let changing = effective(&acts);
        if changing.is_empty() {
            return None;
        }
        Some(self.incident.outcome_of(&changing))
    }

    /// The components an act names that were not at fault (`lab restart rank 2` when storage-1 was slow).
    fn unrelated(&self, argv: &[String]) -> Vec<String> {
        let named = named_components(argv);
        if named.iter().any(|n| self.incident.truth.components.contains(n)) {
            return Vec::new();
        }
        named
    }
}

/// The components a lab command names by number or name: `rank-2` for `lab restart rank 2`.
pub fn named_components(argv: &[String]) -> Vec<String> {
    let rest: Vec<&str> = argv.iter().skip(1).map(String::as_str).collect();
    match rest.as_slice() {
        ["restart", "rank", n, ..]
        | ["resize", "rank", n, ..]
        | ["rank", "stop", n, ..]
        | ["rank", "env", n, ..] => {
            vec![format!("rank-{n}")]
        }
        ["storage", "drain" | "undrain", n, ..] => vec![format!("storage-{n}")],
        ["db", "delete-pod", p, ..] => vec![(*p).to_string()],
        ["job", "stop" | "throttle", j, ..] => vec![(*j).to_string()],
        ["scale", "ranks", ..] => vec!["ranks".into()],
        ["config", "world-size", ..] => vec!["job config".into()],
        _ => Vec::new(),
    }
}

#[async_trait]
impl Evidence for ReplayEvidence {
    async fn now(&self) -> Result<Value, String> {
        Ok(self.at_clock())
    }

    async fn incident(&self) -> Result<Value, String> {
        let mut b = self.incident.bundle.clone();
        if b.get("previous_attempts").is_none() {
            b["previous_attempts"] = Value::Array(vec![]);
        }
        Ok(b)
    }

    async fn query(&self, _q: &QueryArgs) -> Result<Value, String> {
        Err("a recording holds no series to query".into())
    }

    async fn processes(&self, rank: u32) -> Result<Value, String> {
        self.incident
            .replay
            .processes
            .get(&lab_model::names::rank(rank))
            .cloned()
            .ok_or_else(|| format!("the recording holds no processes of rank-{rank}"))
    }

    async fn logs(&self, _component: &str, _lines: u32) -> Result<Value, String> {
        Err("a recording holds no logs".into())
    }

    async fn act(&self, argv: &[String]) -> Result<Acted, String> {
        self.acts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(argv.to_vec());
        if changes_nothing(argv) {
            return Ok(Acted {
                exit_code: Some(0),
                stdout: "(replay) changes nothing of the job: answered as done".into(),
                ..Acted::default()
            });
        }
        let unrelated = self.unrelated(argv);
        let judged = match self.judged() {
            Some((Mitigation::Unknown, why)) if !unrelated.is_empty() => (
                Mitigation::Failed,
                format!(
                    "unrelated: changes {}, which was not at fault ({why})",
                    unrelated.join(", ")
                ),
            ),
            Some(j) => j,
            None => (Mitigation::Unknown, "changes nothing".into()),
        };
        Ok(Acted {
            exit_code: Some(0),
            stdout: "(replay) not run; judged against what was verified live".into(),
            stderr: String::new(),
            changes: Vec::new(),
            touched: if unrelated.is_empty() {
                named_components(argv)
            } else {
                unrelated
            },
            judged: Some(judged),
        })
    }

    fn answers(&self, tool: &str) -> bool {
        match tool {
            "query" | "logs" => false,
            "processes" => !self.incident.replay.processes.is_empty(),
            _ => true,
        }
    }

    fn after_call(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

/// One incident replayed against an interactive agent.
#[derive(Debug, Clone, Serialize)]
pub struct McpReplayed {
    pub drill: String,
    pub evidence: EvidenceLevel,
    pub problem: Option<String>,
    pub calls: Vec<crate::mcp::ToolCall>,
    pub diagnosis: Option<crate::mcp::Diagnosis>,
    /// What its acts added up to, against what was verified live.
    pub known: String,
    pub score: Option<Score>,
    pub duration_s: f64,
}

/// Replays every incident of `dir` against the interactive `agent` at `level`: the agent is started with
/// `lab_bin mcp --replay SESSION` as its server (in LAB_MCP_SERVER, as a live drill does) and its acts are
/// judged, not run. Incidents are independent (each its own session, calls file and agent), so as many run
/// at once as the machine has cores; the results come back in the recording's order.
///
/// # Errors
/// A message when the folder cannot be loaded or a session file cannot be written.
pub async fn replay_mcp(
    dir: &Path,
    agent: &str,
    level: EvidenceLevel,
    timeout: Duration,
    lab_bin: &Path,
) -> Result<Vec<McpReplayed>, String> {
    use futures::stream::{self, StreamExt, TryStreamExt};
    let incidents = load(dir)?;
    let tmp = std::env::temp_dir().join(format!("lab-replay-mcp-{}-{level}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let out = stream::iter(&incidents)
        .map(|inc| replay_one(dir, inc, agent, level, timeout, lab_bin, &tmp))
        .buffered(jobs)
        .try_collect::<Vec<_>>()
        .await;
    let _ = std::fs::remove_dir_all(&tmp);
    out
}

/// One incident of [`replay_mcp`], its files in `tmp`.
async fn replay_one(
    dir: &Path,
    inc: &Incident,
    agent: &str,
    level: EvidenceLevel,
    timeout: Duration,
    lab_bin: &Path,
    tmp: &Path,
) -> Result<McpReplayed, String> {
    let started = Instant::now();
    let calls = tmp.join(format!("{}.calls.jsonl", inc.drill));
    let _ = std::fs::remove_file(&calls);
    let session = tmp.join(format!("{}.session.json", inc.drill));
    let s = ReplaySession {
        format: REPLAY_SESSION_FORMAT.into(),
        recording: dir.to_path_buf(),
        drill: inc.drill.clone(),
        evidence: level,
        calls: calls.clone(),
    };
    std::fs::write(
        &session,
        serde_json::to_vec_pretty(&s).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("cannot write {}: {e}", session.display()))?;
    let server = vec![
        lab_bin.display().to_string(),
        "mcp".to_string(),
        "--replay".to_string(),
        session.display().to_string(),
    ];
    let spec = CommandSpec {
        command: agent.into(),
        timeout,
        env: vec![
            (
                "LAB_MCP_SERVER".into(),
                serde_json::to_string(&server).unwrap_or_default(),
            ),
            ("LAB_EVIDENCE".into(), level.to_string()),
            ("LAB_ATTEMPT".into(), "1".into()),
        ],
        path_first: None,
    };
    let o = command::run(&spec, Arc::new(|_: &str, _| {}), &GroupSlot::default())
        .await
        .map_err(|e| e.to_string())?;
    let calls = crate::mcp::calls::read(&calls)?;
    let diagnosis: Option<crate::mcp::Diagnosis> = calls
        .iter()
        .rev()
        .filter(|c| c.tool == "diagnose" && c.outcome == crate::mcp::calls::Outcome::Ok)
        .find_map(|c| serde_json::from_value(c.arguments.clone()).ok());
    let attempt = crate::mcp::McpAttempt {
        agent: agent.into(),
        evidence: level,
        attempt: 1,
        exit_code: o.exit_code,
        timed_out: o.timed_out,
        duration_s: o.duration.as_secs_f64(),
        problem: None,
        calls: calls.clone(),
        diagnosis: diagnosis.clone(),
        session: session.display().to_string(),
        truth: Some(inc.truth.clone()),
        score: None,
    };
    let problem = if o.timed_out {
        Some(format!(
            "the agent did not finish within {:.0} s",
            timeout.as_secs_f64()
        ))
    } else if o.exit_code != Some(0) {
        Some(format!(
            "the agent failed ({:?}): {}",
            o.exit_code,
            o.stderr.lines().last().unwrap_or("")
        ))
    } else {
        None
    };
    // The last act's judgement is what all of them added up to.
    let judged = calls.iter().rev().find_map(|c| c.act.as_ref()?.judged.clone());
    let (mitigation, known) = match judged {
        Some(j) => j,
        None if attempt.acts().any(|a| a.approved) => (Mitigation::NotRun, "changed nothing".into()),
        None => (Mitigation::NotRun, "no act".into()),
    };
    let score = problem
        .is_none()
        .then(|| crate::score::score_conclusion(&attempt.conclusion(), &inc.truth, mitigation, None, None));
    Ok(McpReplayed {
        drill: inc.drill.clone(),
        evidence: level,
        problem,
        calls,
        diagnosis,
        known,
        score,
        duration_s: started.elapsed().as_secs_f64(),
    })
}
