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
        };
        assert_eq!(c.line(), "rank-1 cpu limit 400m → 150m; spec 400m");
    }
}
