//! How a drill wires an agent to the lab's MCP server: the drill writes an [`McpSession`] file and starts
//! the agent with its path; the agent (the MCP client) starts `lab mcp --session FILE` as its server, over
//! stdio. The file says which lab, at which evidence level, where the incident's bundle and the trajectory
//! are, on whose behalf the agent's changes are recorded, and how its acts are approved.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::EvidenceLevel;
use lab_incident::FixBy;

/// The session file's format identifier, versioned.
pub const SESSION_FORMAT: &str = "straggler-lab.mcp-session/v1";

/// One attempt's wiring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpSession {
    pub format: String,
    /// The lab the server acts on.
    pub lab: String,
    pub evidence: EvidenceLevel,
    /// The incident's whole bundle (the server cuts it to the level), with what was tried before.
    pub incident: PathBuf,
    /// Where the server writes every call, one JSON object per line.
    pub calls: PathBuf,
    /// What the agent's changes carry in the change log (`agent 2`), so a later bundle tells them apart.
    pub change_by: String,
    /// The remediations of this drill so far, in order (a change made by one is marked as a fix).
    pub fixes: Vec<FixBy>,
    /// The job's normal throughput (samples/s), for the change log's effects.
    pub normal_samples_per_s: Option<f64>,
    /// `auto`, `ask`, `never`, or an approval policy file's path.
    pub approve: String,
    /// Answers to the asks, one per line; the first `approvals_used` were used by earlier attempts.
    pub approvals: Option<PathBuf>,
    pub approvals_used: usize,
    /// Where the earned-autonomy record is kept (the lab's folder).
    pub approval_state: PathBuf,
    /// 1 for the first attempt, 2 after a failed verification, ...
    pub attempt: u32,
}

impl McpSession {
    /// Reads a session file.
    ///
    /// # Errors
    /// A message when it cannot be read or is not a session of this format.
    pub fn load(path: &Path) -> Result<McpSession, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the MCP session {}: {e}", path.display()))?;
        let s: McpSession = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not an MCP session: {e}", path.display()))?;
        if s.format != SESSION_FORMAT {
            return Err(format!(
                "{}: format {:?}, this lab reads {SESSION_FORMAT:?}",
                path.display(),
                s.format
            ));
        }
        Ok(s)
    }
}
