//! Change records: what changed, where, when, before and after.
//!
//! Faults write one when they inject and when they clear; remediation commands write one too, so an
//! incident shows every change beside the signals, and a person (or an agent) can tell a fix from a cause.

use serde::{Deserialize, Serialize};

/// Who made a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeSource {
    /// A fault injection or its clearing.
    Fault,
    /// A remediation command (`lab scale`, `lab resize`, ...), by a person or an agent.
    Remediation,
    /// The lab's own lifecycle (`lab up`).
    Lifecycle,
}

/// The environment variable that says on whose behalf a `lab` command changes the lab: a drill sets
/// `remediation 1` for the command of its first remediation, `agent 2` for the commands of an agent's
/// second plan. Every change record the command makes carries it in [`ChangeRecord::by`], so an incident's
/// change log tells a fix from the fault beside it by who made it, not by when.
pub const CHANGE_BY_ENV: &str = "LAB_CHANGE_BY";

/// One change to the running lab.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRecord {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub source: ChangeSource,
    /// The thing changed: `rank-1`, `storage-1`, `ranks`, `job config`.
    pub target: String,
    /// The property changed: `cpu limit`, `added delay`, `replicas`, `world size`.
    pub what: String,
    pub before: String,
    pub after: String,
    /// Extra context, e.g. `spec 400m` or `via latency proxy`.
    pub note: Option<String>,
    /// The fault this change belongs to, if any.
    pub fault_id: Option<String>,
    /// On whose behalf it was made (see [`CHANGE_BY_ENV`]), e.g. `remediation 1`; `None` when nobody said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl ChangeRecord {
    /// One line, e.g. `rank-1 cpu limit 400m → 150m; spec 400m`.
    pub fn line(&self) -> String {
        let mut s = format!("{} {} {} → {}", self.target, self.what, self.before, self.after);
        if let Some(n) = &self.note {
            s.push_str("; ");
            s.push_str(n);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line() {
        let c = ChangeRecord {
            at_ms: 0,
            source: ChangeSource::Fault,
            target: "rank-1".into(),
            what: "cpu limit".into(),
            before: "400m".into(),
            after: "150m".into(),
            note: Some("spec 400m".into()),
            fault_id: Some("f1".into()),
            by: None,
        };
        assert_eq!(c.line(), "rank-1 cpu limit 400m → 150m; spec 400m");
    }
}
