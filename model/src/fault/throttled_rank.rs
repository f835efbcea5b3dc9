//! throttled-rank: one rank's CPU limit cut in place while its template keeps the old value (the seed's
//! second fault).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Shape, Spec};
use crate::Millicores;

/// Rank `rank`'s CPU limit is cut in place to `cpu`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct ThrottledRank {
    /// The rank.
    #[arg(long, default_value_t = 1)]
    pub rank: u32,
    /// The new CPU limit (e.g. 150m).
    #[arg(long, default_value_t = Millicores(150))]
    pub cpu: Millicores,
}

impl Spec for ThrottledRank {
    const NAME: &'static str = "throttled-rank";
    const SUMMARY: &'static str = "one rank's CPU limit cut in place; its template keeps 400m";
    const ABOUT: &'static str = "One rank's CPU limit is cut in place; its template keeps the old value";
    // The reading, computing client starved of CPU by a limit cut in place.
    const CAUSE: &'static str = "starved-client";
    const KEY: Option<(char, &'static str)> = Some(('t', "rank-1 CPU limit 400m -> 150m in place"));

    /// A cut within 75-150m (its template keeps the lab's 400m; above 150m a throttled rank no longer
    /// stands out from its siblings on a busy machine).
    fn vary(&self, shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> Self {
        ThrottledRank {
            rank: shape.rank(pick),
            cpu: Millicores(pick(3, 6) as u32 * 25),
        }
    }

    fn target(&self) -> String {
        crate::names::rank(self.rank)
    }

    fn placeholders(&self, v: &mut Vec<(&'static str, String)>) {
        v.push(("rank", self.rank.to_string()));
        v.push(("cpu", self.cpu.to_string()));
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "throttled-rank on rank-{}: cpu {}", self.rank, self.cpu)
    }
}
