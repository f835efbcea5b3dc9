//! A drill's verdict: the one word every report, exit code and recording agrees on.

use serde::{Deserialize, Serialize};

/// The outcome of one drill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Detected, remediated, and the job's own signals came back; the cleanup left the lab steady.
    Pass,
    /// The drill ran and something it checks did not hold.
    Fail,
    /// The drill could not run as written (the lab did not fit, a fault could not be injected, or the lab
    /// was not steady to begin with).
    Error,
    /// An agent's plan was declined by the person (or the approvals file) asked to approve it.
    Declined,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Error => "ERROR",
            Verdict::Declined => "DECLINED",
        })
    }
}
