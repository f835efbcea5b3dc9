//! `lab replay`: an agent scored against recorded incidents, without a lab, at each evidence level asked,
//! and, for a regression test, checked for the number fixed and for the same scores when replayed again.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lab_drills::agent::mcp::replay::{McpReplayed, replay_mcp};
use lab_drills::agent::replay::{ReplayReport, replay};
use serde::Serialize;

use crate::error::{Result, SessionError};

pub use lab_drills::agent::{Mitigation, Score};

use crate::EvidenceLevel;

/// The agent replayed, by the protocol it speaks.
#[derive(Debug, Clone)]
pub enum Agent {
    /// A planning agent (`--agent CMD`): it reads each incident's bundle and prints a plan.
    Plans(String),
    /// An interactive agent (`--mcp-agent CMD`): it investigates through the MCP tools, served from the
    /// recording.
    Mcp(String),
}

/// `lab replay`, as its flags say it.
#[derive(Debug, Clone)]
pub struct ReplayRun {
    /// The recording folder.
    pub dir: PathBuf,
    pub agent: Agent,
    /// Each in turn.
    pub evidence: Vec<EvidenceLevel>,
    /// Per incident.
    pub timeout: Duration,
    /// Passes only if exactly this many incidents are fixed at every level.
    pub expect_fixed: Option<usize>,
    /// Replays everything twice; passes only if every score is the same both times.
    pub expect_stable: bool,
}

/// One level's replay, whichever protocol the agent speaks.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Level {
    Plans(ReplayReport),
    Mcp {
        agent: String,
        evidence: EvidenceLevel,
        incidents: Vec<McpReplayed>,
        fixed: usize,
        duration_s: f64,
    },
}

impl Level {
    /// Incidents fixed.
    pub fn fixed(&self) -> usize {
        match self {
            Level::Plans(r) => r.fixed,
            Level::Mcp { fixed, .. } => *fixed,
        }
    }

    /// What must not change from one replay to the next: each incident's score and outcome.
    fn scores(&self) -> Vec<(String, Option<Score>, String)> {
        match self {
            Level::Plans(r) => r
                .incidents
                .iter()
                .map(|i| (i.drill.clone(), i.score.clone(), i.known.clone()))
                .collect(),
            Level::Mcp { incidents, .. } => incidents
                .iter()
                .map(|i| (i.drill.clone(), i.score.clone(), i.known.clone()))
                .collect(),
        }
    }
}

/// A replay's outcome.
#[derive(Debug)]
pub struct Replayed {
    /// One per level asked, in order.
    pub levels: Vec<Level>,
    /// Whether each level fixed as many as expected (true when nothing was expected).
    pub fixed_ok: bool,
    /// The levels whose scores changed when replayed again (with `expect_stable`).
    pub unstable: Vec<EvidenceLevel>,
}

impl Replayed {
    /// Whether the replay met what was expected of it.
    pub fn passed(&self) -> bool {
        self.fixed_ok && self.unstable.is_empty()
    }
}

async fn level(r: &ReplayRun, level: EvidenceLevel) -> Result<Level> {
    match &r.agent {
        Agent::Mcp(agent) => {
            let started = Instant::now();
            let lab = std::env::current_exe().map_err(SessionError::NoBinary)?;
            let incidents = replay_mcp(&r.dir, agent, level, r.timeout, &lab)
                .await
                .map_err(SessionError::Replay)?;
            let fixed = incidents
                .iter()
                .filter(|i| {
                    i.score
                        .as_ref()
                        .is_some_and(|s| s.mitigation == Mitigation::Fixed)
                })
                .count();
            Ok(Level::Mcp {
                agent: agent.clone(),
                evidence: level,
                incidents,
                fixed,
                duration_s: started.elapsed().as_secs_f64(),
            })
        }
        Agent::Plans(agent) => Ok(Level::Plans(
            replay(&r.dir, agent, level, r.timeout)
                .await
                .map_err(SessionError::Replay)?,
        )),
    }
}

/// `lab replay`: every level of `r` replayed in turn (then again, with `expect_stable`).
///
/// # Errors
/// [`SessionError::Replay`] when the recording cannot be read or the agent cannot be run.
pub async fn run(r: &ReplayRun) -> Result<Replayed> {
    let mut levels: Vec<Level> = Vec::new();
    for l in &r.evidence {
        levels.push(level(r, *l).await?);
    }
    let mut unstable = Vec::new();
    if r.expect_stable {
        for (l, first) in r.evidence.iter().zip(&levels) {
            let again = level(r, *l).await?;
            if again.scores() != first.scores() {
                unstable.push(*l);
            }
        }
    }
    let fixed_ok = r
        .expect_fixed
        .is_none_or(|n| levels.iter().all(|l| l.fixed() == n));
    Ok(Replayed {
        levels,
        fixed_ok,
        unstable,
    })
}
