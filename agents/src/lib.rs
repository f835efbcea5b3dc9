//! Agents that propose instead of acting: an agent command reads the incident bundle (cut to an
//! [`EvidenceLevel`]) and prints a [`Plan`]; the lab checks it ([`plan`]), asks for approval when told to
//! ([`Approval`]), runs it command by command as argv, and scores it against what was injected
//! ([`score`]). [`record`] keeps each incident for [`replay`], which scores an agent without a lab.

pub mod command;
pub mod error;
pub mod plan;
pub mod record;
pub mod replay;
pub mod score;

use std::collections::VecDeque;
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

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

/// Who approves each command of a plan.
#[derive(Debug, Clone)]
pub enum Approval {
    /// Every checked command runs.
    Auto,
    /// A person, asked on the terminal before each command.
    Terminal,
    /// Decisions read from a file, one line per command in the order they are asked (`yes`/`no`); a
    /// command with no line left is declined.
    File(Arc<Mutex<VecDeque<bool>>>),
}

impl Approval {
    /// The decisions in `path`: one per line, `yes`/`y`/`approve` or `no`/`n`/`decline`; blank lines and
    /// `#` comments are skipped.
    ///
    /// # Errors
    /// A message when the file cannot be read or a line is neither.
    pub fn from_file(path: &Path) -> Result<Approval, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the approvals file {}: {e}", path.display()))?;
        let mut out = VecDeque::new();
        for (i, line) in text.lines().enumerate() {
            let l = line.split('#').next().unwrap_or("").trim().to_lowercase();
            match l.as_str() {
                "" => {}
                "yes" | "y" | "approve" => out.push_back(true),
                "no" | "n" | "decline" => out.push_back(false),
                other => {
                    return Err(format!(
                        "{}:{}: {other:?} is not a decision: write yes or no, one per command",
                        path.display(),
                        i + 1
                    ));
                }
            }
        }
        Ok(Approval::File(Arc::new(Mutex::new(out))))
    }

    /// Asking on the terminal; refused when stdin is not one (use a file in CI).
    ///
    /// # Errors
    /// A message when there is no terminal to ask on.
    pub fn terminal() -> Result<Approval, String> {
        if std::io::stdin().is_terminal() {
            Ok(Approval::Terminal)
        } else {
            Err(
                "--approve without a file asks on the terminal, and stdin is not one: give --approve FILE"
                    .into(),
            )
        }
    }

    /// Whether `cmd` (the `i`th of `n`) may run, with who decided.
    pub async fn decide(&self, cmd: &PlanCommand, i: usize, n: usize) -> (bool, String) {
        match self {
            Approval::Auto => (true, "auto".into()),
            Approval::File(q) => match q.lock().unwrap_or_else(|p| p.into_inner()).pop_front() {
                Some(d) => (d, "approvals file".into()),
                None => (false, "approvals file (no decision left)".into()),
            },
            Approval::Terminal => {
                let prompt = format!(
                    "  approve command {i} of {n}: {}\n    reason: {}\n  run it? [y/N] ",
                    cmd.line(),
                    cmd.reason
                );
                let yes = tokio::task::spawn_blocking(move || {
                    let mut o = std::io::stdout().lock();
                    let _ = o.write_all(prompt.as_bytes());
                    let _ = o.flush();
                    let mut line = String::new();
                    let _ = std::io::stdin().lock().read_line(&mut line);
                    matches!(line.trim().to_lowercase().as_str(), "y" | "yes")
                })
                .await
                .unwrap_or(false);
                (yes, "terminal".into())
            }
        }
    }
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
