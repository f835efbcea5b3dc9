//! Agents that propose instead of acting: an agent command reads the incident bundle (cut to an
//! [`EvidenceLevel`]) and prints a [`Plan`]; the lab checks it ([`plan`]), asks for approval when told to
//! ([`Approval`]), runs it command by command as argv, and scores it against what was injected
//! ([`score`]). [`record`] keeps each incident for [`replay`], which scores an agent without a lab.

pub mod approval;
pub mod command;
pub mod error;
pub mod mcp;
pub mod plan;
pub mod record;
pub mod replay;
pub mod score;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::approval::{Approval, Decision};
pub use self::plan::{Plan, PlanCommand, PlanError};
pub use self::score::{Mitigation, Score, Truth};
pub use lab_incident::evidence::{self, EvidenceLevel};

/// How long an agent may think before it is stopped.
pub const DEFAULT_AGENT_TIMEOUT: Duration = Duration::from_secs(120);

/// How a drill asks an agent for its plan (`--agent`, `--evidence`, `--approve`).
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// A shell command; it finds the bundle's path in `LAB_INCIDENT_BUNDLE` and prints a plan on stdout.
    pub command: String,
    pub evidence: EvidenceLevel,
    pub approval: Approval,
    pub timeout: Duration,
}

/// One command of a plan, as decided and run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RanCommand {
    pub argv: Vec<String>,
    pub approved: bool,
    pub decided_by: String,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub duration_s: f64,
    pub stdout: String,
    pub stderr: String,
}

/// What became of an agent's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanOutcome {
    /// Every command was approved and exited 0 (whether it fixed the job is the verification's word).
    Ran,
    /// A command was declined: nothing after it ran.
    Declined,
    /// A command failed: nothing after it ran.
    CommandFailed,
    /// The plan was refused before anything ran (not JSON, a command off the allow-list, ...).
    Refused,
    /// The agent crashed or did not finish in time: no plan.
    AgentFailed,
}

/// The agent's part of a remediation: its plan, what was decided and run, and the score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    /// The agent's command line.
    pub agent: String,
    pub evidence: EvidenceLevel,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// Seconds the agent took.
    pub duration_s: f64,
    pub outcome: PlanOutcome,
    /// Why the plan was refused or the agent failed.
    pub problem: Option<String>,
    pub plan: Option<Plan>,
    pub commands: Vec<RanCommand>,
    /// Seconds from the injection to the plan.
    pub plan_at_s: Option<f64>,
    /// The ledger's truth and the plan's score against it, once the verification has spoken.
    pub truth: Option<Truth>,
    pub score: Option<Score>,
}
