//! Every lab on this machine (`lab list`): the folders under the state directory that hold a `lab.json`,
//! each with its runtime, its age and its health, read from the lab's watcher when it keeps a fresh
//! snapshot, else by asking its runtime (within a few seconds: a lab that does not answer says so).

use std::time::Duration;

use lab_model::Snapshot;
use lab_model::status::{LabStatus, RuntimeKind};
use lab_runtime::state;
use serde::Serialize;

/// How long `lab list` waits for one lab's runtime to answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// How a lab is doing, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Health {
    /// Every rank and storage server Ready, and the job trains at 80% of its baseline or better (or
    /// no baseline figure to compare yet).
    Healthy,
    /// It answers, but something is off: a role not Ready, a fault injected, training below 80%.
    Degraded,
    /// Its runtime does not answer (the supervisor or the cluster is gone): `lab down` cleans up.
    Unreachable,
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Health::Healthy => "healthy",
            Health::Degraded => "degraded",
            Health::Unreachable => "unreachable",
        })
    }
}

/// One lab in `lab list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabSummary {
    pub name: String,
    pub runtime: RuntimeKind,
    /// When `lab up` started it, ms since the Unix epoch.
    pub created_ms: u64,
    /// Seconds since then.
    pub age_s: u64,
    pub health: Health,
    /// What the health is made of: `4/4 ranks Ready · 3/3 storage Ready · training at 98% of normal`.
    pub detail: String,
    /// Faults injected now (from the lab's ledger).
    pub faults: usize,
    /// Whether the lab's watcher runs.
    pub watcher: bool,
}

/// Every lab recorded under the state directory, by name. A folder whose `lab.json` cannot be read is
/// listed as unreachable with why.
pub async fn list() -> Vec<LabSummary> {
    let now = state::now_ms();
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(state::base_dir()) {
        for e in entries.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if state::validate_name(&name).is_err() || !e.path().join(state::RECORD_FILE).exists() {
                continue;
            }
            found.push(name);
        }
    }
    found.sort();
    let summaries = found.iter().map(|name| summary(name, now));
    futures::future::join_all(summaries).await
}

async fn summary(name: &str, now: u64) -> LabSummary {
    let faults = lab_faults::Ledger::of_lab(name)
        .read()
        .map(|d| d.active().count())
        .unwrap_or(0);
    let watcher = crate::live::running(name);
    let rec = match state::read_record(name) {
        Ok(Some(r)) => r,
        Ok(None) | Err(_) => {
            return LabSummary {
                name: name.to_string(),
                runtime: RuntimeKind::Local,
                created_ms: 0,
                age_s: 0,
                health: Health::Unreachable,
                detail: "its lab.json cannot be read: `lab down` removes what is left".into(),
                faults,
                watcher,
            };
        }
    };
    let (health, detail) = match crate::live::read_fresh(name, now) {
        Some(snap) => judge(&snap.status, Some(&snap), faults),
        None => match ask(name).await {
            Ok(st) => judge(&st, None, faults),
            Err(why) => (Health::Unreachable, why),
        },
    };
    LabSummary {
        name: name.to_string(),
        runtime: rec.runtime,
        created_ms: rec.created_ms,
        age_s: now.saturating_sub(rec.created_ms) / 1000,
        health,
        detail,
        faults,
        watcher,
    }
}

/// The lab's status from its runtime, or why it did not answer.
async fn ask(name: &str) -> Result<LabStatus, String> {
    let asked = async {
        let rt = crate::open::open(name).await?;
        rt.status().await
    };
    match tokio::time::timeout(ASK_TIMEOUT, asked).await {
        Ok(Ok(st)) => Ok(st),
        Ok(Err(e)) => Err(lab_model::format::error_chain(&e)),
        Err(_) => Err(format!("no answer within {} s", ASK_TIMEOUT.as_secs())),
    }
}

/// Health from what the lab reports: Ready counts, the job's rate (with a snapshot) and faults injected.
pub fn judge(st: &LabStatus, snap: Option<&Snapshot>, faults: usize) -> (Health, String) {
    let (ranks, ranks_total) = st.ranks_ready();
    let (servers, servers_total) = st.servers_ready();
    let mut parts = vec![
        format!("{ranks}/{ranks_total} ranks Ready"),
        format!("{servers}/{servers_total} storage Ready"),
    ];
    let mut ok = ranks == ranks_total && servers == servers_total && ranks_total > 0;
    if let Some(pct) = snap.and_then(|s| s.training.pct_of_baseline) {
        parts.push(format!("training at {pct:.0}% of normal"));
        ok &= pct >= 80.0;
    }
    if faults > 0 {
        parts.push(format!(
            "{faults} fault{} injected",
            if faults == 1 { "" } else { "s" }
        ));
        ok = false;
    }
    (
        if ok { Health::Healthy } else { Health::Degraded },
        parts.join(" · "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_model::status::{PodStatus, Role};

    fn lab(ranks_ready: &[bool]) -> LabStatus {
        let mut st = LabStatus::default_shape("t", RuntimeKind::Local);
        let pod = |name: String, role, i: usize, ready: bool| {
            let mut p = PodStatus::new(name, role, Some(i as u32));
            p.phase = lab_model::status::Phase::Running;
            p.ready = ready;
            p
        };
        for (i, ready) in ranks_ready.iter().enumerate() {
            st.pods
                .push(pod(lab_model::names::rank(i as u32), Role::Rank, i, *ready));
        }
        st.pods
            .push(pod(lab_model::names::storage(0), Role::StorageServer, 0, true));
        st
    }

    #[test]
    fn healthy_only_when_everything_is_ready_fast_and_unfaulted() {
        let (h, d) = judge(&lab(&[true, true]), None, 0);
        assert_eq!(h, Health::Healthy, "{d}");
        assert!(d.starts_with("2/2 ranks Ready"), "{d}");
        assert_eq!(judge(&lab(&[true, false]), None, 0).0, Health::Degraded);
        let (h, d) = judge(&lab(&[true, true]), None, 1);
        assert_eq!((h, d.ends_with("1 fault injected")), (Health::Degraded, true));
        let mut snap = Snapshot::new(0, lab(&[true, true]));
        snap.training.pct_of_baseline = Some(7.0);
        let (h, d) = judge(&snap.status, Some(&snap), 0);
        assert_eq!(h, Health::Degraded);
        assert!(d.contains("training at 7% of normal"), "{d}");
    }
}
