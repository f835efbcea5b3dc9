//! The `format` of every JSON document a `lab` command prints with `--json`, in one place. A script reads
//! the field to know the shape; a change that breaks a reader gets a new version (`/v2`), never the same
//! name. Each shape is described in docs/cli.md ("JSON output"); the incident bundle's own
//! `straggler-lab.incident/v3` and the drill report's `straggler-lab.drill-report/v1` live with them.

/// `lab status --json`: the lab's snapshot (docs/telemetry.md, "The snapshot").
pub const STATUS: &str = "straggler-lab.status/v1";
/// `lab list --json`: every lab on this machine.
pub const LABS: &str = "straggler-lab.labs/v1";
/// `lab version --json`: the lab's version and the versions of what it runs.
pub const VERSION: &str = "straggler-lab.version/v1";
/// `lab up --json`: the lab brought up, its baseline and status.
pub const UP: &str = "straggler-lab.up/v1";
/// `lab down --json`: whether a lab was stopped.
pub const DOWN: &str = "straggler-lab.down/v1";
/// `lab fault list --json`: the catalogue.
pub const FAULT_CATALOG: &str = "straggler-lab.fault-catalog/v1";
/// `lab fault status --json`: the ledger (every fault's entry and the change records).
pub const FAULT_LEDGER: &str = "straggler-lab.fault-ledger/v1";
/// `lab fault inject … --json`: the entry of the fault injected and its changes.
pub const FAULT_INJECTED: &str = "straggler-lab.fault-injected/v1";
/// `lab fault clear --json`: the entries cleared.
pub const FAULT_CLEARED: &str = "straggler-lab.fault-cleared/v1";
/// `lab drill list --json`: the built-in drills.
pub const DRILLS: &str = "straggler-lab.drills/v1";
/// `lab job list --json`: the jobs on the lab's storage.
pub const JOBS: &str = "straggler-lab.jobs/v1";
/// One change record: `lab job throttle|stop`, `lab db template|delete-pod --json`.
pub const CHANGE: &str = "straggler-lab.change/v1";
/// `lab db status --json`.
pub const DB_STATUS: &str = "straggler-lab.db-status/v1";
/// `lab rank procs N --json`.
pub const RANK_PROCS: &str = "straggler-lab.rank-procs/v1";
/// `lab rank env N --json`.
pub const RANK_ENV: &str = "straggler-lab.rank-env/v1";
/// `lab checkpoint --json`.
pub const CHECKPOINT: &str = "straggler-lab.checkpoint/v1";
/// `lab storage drain|undrain N --json`.
pub const DRAIN: &str = "straggler-lab.drain/v1";
/// `lab replay --json`: one report per evidence level.
pub const REPLAY: &str = "straggler-lab.replay/v1";
/// `lab image build --json`: the archives written.
pub const IMAGES: &str = "straggler-lab.images/v1";

/// Every format above, for the test that the docs describe each.
#[cfg(test)]
pub const ALL: [&str; 19] = [
    STATUS,
    LABS,
    VERSION,
    UP,
    DOWN,
    FAULT_CATALOG,
    FAULT_LEDGER,
    FAULT_INJECTED,
    FAULT_CLEARED,
    DRILLS,
    JOBS,
    CHANGE,
    DB_STATUS,
    RANK_PROCS,
    RANK_ENV,
    CHECKPOINT,
    DRAIN,
    REPLAY,
    IMAGES,
];

#[cfg(test)]
mod tests {
    #[test]
    fn every_format_is_described_in_the_docs_and_named_once() {
        let doc = include_str!("../../docs/cli.md");
        let mut seen = std::collections::BTreeSet::new();
        for f in super::ALL {
            assert!(seen.insert(f), "{f} twice");
            assert!(f.starts_with("straggler-lab.") && f.ends_with("/v1"), "{f}");
            assert!(
                doc.contains(&format!("`{f}`")),
                "docs/cli.md does not describe {f}"
            );
        }
    }
}
