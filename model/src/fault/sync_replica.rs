//! sync-replica: the database's synchronous standby made unschedulable (the seed's general version).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{ParseError, Shape, Spec};
use crate::db::{DbTemplate, local_node_labels, parse_selector};

/// The node labels a varied sync-replica asks for (none exists on any node).
const UNMATCHED_SELECTORS: [&str; 3] = ["lab/disk=nvme", "lab/zone=b", "lab/rack=r9"];

/// The database's primary commits synchronously to its standby `db-1`, whose template is changed to ask
/// for a node label (`node_selector`, `KEY=VALUE`) no node has, and whose pod is made again from it: it
/// stays Pending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct SyncReplica {
    /// The label the changed template asks for, KEY=VALUE (one the node lacks).
    #[arg(long, default_value = "lab/disk=nvme")]
    pub node_selector: String,
}

impl Spec for SyncReplica {
    const NAME: &'static str = "sync-replica";
    const SUMMARY: &'static str = "the database's synchronous standby made unschedulable: every commit hangs, reads and Ready look fine (needs lab up --database)";
    const ABOUT: &'static str = "The database's primary commits synchronously to its standby db-1, whose template \
         is changed to ask for a node label no node has; the standby pod is made again from it and stays \
         Pending. Every commit hangs while reads and Ready look fine. Fixing the template alone does not move \
         the Pending pod: the right fix also deletes it by name (`lab db template --node-selector ''`, then \
         `lab db delete-pod db-1`). Needs `lab up --database` (local or kind runtime)";
    // Commits wait for a synchronous standby that cannot be scheduled.
    const CAUSE: &'static str = "unschedulable-replica";

    fn validate(&self) -> Result<(), ParseError> {
        let node_selector = &self.node_selector;
        let sel = parse_selector(node_selector).map_err(ParseError::Fault)?;
        if sel.is_empty() {
            return Err(ParseError::Fault(
                "--node-selector must ask for a label (e.g. lab/disk=nvme)".into(),
            ));
        }
        let t = DbTemplate {
            node_selector: sel,
            revision: 0,
        };
        if t.unmatched(&local_node_labels()).is_none() {
            return Err(ParseError::Fault(format!(
                "--node-selector {node_selector} matches the node's labels ({}), so the standby would be \
                 placed: ask for a label no node has (e.g. lab/disk=nvme)",
                DbTemplate {
                    node_selector: local_node_labels(),
                    revision: 0
                }
                .selector_text()
            )));
        }
        Ok(())
    }

    /// Another node label no node has.
    fn vary(&self, _shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> Self {
        SyncReplica {
            node_selector: UNMATCHED_SELECTORS[pick(0, UNMATCHED_SELECTORS.len() as u64 - 1) as usize].into(),
        }
    }

    fn target(&self) -> String {
        crate::db::STANDBY.to_string()
    }

    fn placeholders(&self, v: &mut Vec<(&'static str, String)>) {
        v.push(("node_selector", self.node_selector.clone()));
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sync-replica on db-1: commits wait for a standby whose template asks for {}",
            self.node_selector
        )
    }
}
