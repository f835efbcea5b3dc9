//! The trajectory: every call an agent made, in order, with its time, arguments, outcome and result size,
//! and for an act what was decided, by whom, and what it changed. Written as it happens, one JSON object per
//! line, so a drill (or a person) reads it even when the agent is stopped half-way.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Mitigation;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Answered.
    Ok,
    /// The request was wrong (an unknown tool, bad arguments, a tool above the evidence level): refused,
    /// nothing changed.
    Refused,
    /// An act the approval did not allow: nothing changed.
    Declined,
    /// An act that ran and failed (a non-zero exit), or a read that could not be answered.
    Failed,
}

/// What an act did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActRecord {
    pub argv: Vec<String>,
    pub reason: String,
    /// The cause class the act names (its own, else the agent's diagnosis).
    pub cause: Option<String>,
    pub approved: bool,
    /// Who decided, and on what ground.
    pub decided_by: String,
    pub exit_code: Option<i32>,
    /// The change records the act wrote (`rank-1 cpu limit 150m → 400m`).
    pub changes: Vec<String>,
    /// The components those changes touched.
    pub touched: Vec<String>,
    /// In a replay: what live verification said of this act (a recorded right fix, a trap, or unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judged: Option<(Mitigation, String)>,
}

/// One call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// 1, 2, ... in the order received.
    pub seq: u32,
    /// When it came, ms since the Unix epoch.
    pub at_ms: u64,
    /// When it came, seconds from the start of the drill (set by the drill that read the trajectory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_s: Option<f64>,
    pub tool: String,
    pub arguments: Value,
    pub outcome: Outcome,
    /// Why it was refused, declined or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Bytes of the result handed back.
    pub result_bytes: usize,
    pub duration_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub act: Option<ActRecord>,
}

/// Where calls are written as they come (and kept for the session's own reading).
#[derive(Debug, Default)]
pub struct CallLog {
    path: Option<PathBuf>,
    calls: Mutex<Vec<ToolCall>>,
}

impl CallLog {
    /// A log appended to `path` (made if missing), or kept in memory only.
    pub fn new(path: Option<PathBuf>) -> CallLog {
        CallLog {
            path,
            calls: Mutex::new(Vec::new()),
        }
    }

    /// The number the next call gets.
    pub fn next_seq(&self) -> u32 {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).len() as u32 + 1
    }

    /// Adds `call`; a log file that cannot be written is reported on stderr (never on stdout, which is
    /// the protocol's).
    pub fn push(&self, call: ToolCall) {
        if let Some(p) = &self.path {
            let line = serde_json::to_string(&call).unwrap_or_default();
            let r = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .and_then(|mut f| writeln!(f, "{line}"));
            if let Err(e) = r {
                eprintln!("lab mcp: cannot record the call in {}: {e}", p.display());
            }
        }
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).push(call);
    }

    /// The calls so far.
    pub fn calls(&self) -> Vec<ToolCall> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Reads a trajectory file; a line that does not parse (a write cut short) ends it.
///
/// # Errors
/// A message when the file exists and cannot be read.
pub fn read(path: &Path) -> Result<Vec<ToolCall>, String> {
    let text = match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        Ok(t) => t,
    };
    Ok(text
        .lines()
        .map_while(|l| serde_json::from_str::<ToolCall>(l).ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_written_as_they_come_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("calls.jsonl");
        let log = CallLog::new(Some(p.clone()));
        for (i, tool) in ["status", "remediate"].iter().enumerate() {
            log.push(ToolCall {
                seq: log.next_seq(),
                at_ms: 1000 + i as u64,
                t_s: None,
                tool: (*tool).into(),
                arguments: serde_json::json!({}),
                outcome: Outcome::Ok,
                message: None,
                result_bytes: 10,
                duration_ms: 1.0,
                act: None,
            });
        }
        let back = read(&p).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!((back[1].seq, back[1].tool.as_str()), (2, "remediate"));
        std::fs::write(
            &p,
            format!(
                "{}\n{{\"seq\":",
                std::fs::read_to_string(&p).unwrap().lines().next().unwrap()
            ),
        )
        .unwrap();
        assert_eq!(read(&p).unwrap().len(), 1, "a cut line ends the trajectory");
        assert!(read(&dir.path().join("none")).unwrap().is_empty());
    }
}
