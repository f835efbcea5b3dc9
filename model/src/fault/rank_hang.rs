//! rank-hang: one rank's training thread frozen while its process lives and stays Ready.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Shape, Spec};

/// Rank `rank`'s training thread is frozen while its process lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct RankHang {
    /// The rank.
    #[arg(long, default_value_t = 1)]
    pub rank: u32,
}

impl Spec for RankHang {
    const NAME: &'static str = "rank-hang";
    const SUMMARY: &'static str = "one rank's training thread frozen; its process lives and stays Ready";
    const ABOUT: &'static str = "One rank's training thread is frozen while its process lives and stays Ready: \
         its step counter stops and its siblings wait at the all-reduce. Locally the cgroup v1 freezer; on \
         Kubernetes a ptrace stop of that thread, through `exec`. Right fix: `lab restart rank N`";
    const CAUSE: &'static str = "hung-rank";

    fn vary(&self, shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> Self {
        RankHang {
            rank: shape.rank(pick),
        }
    }

    fn target(&self) -> String {
        crate::names::rank(self.rank)
    }

    fn placeholders(&self, v: &mut Vec<(&'static str, String)>) {
        v.push(("rank", self.rank.to_string()));
        // A rank that waits for it: the look-alike's fix restarts one of those.
        v.push(("sibling", ((self.rank + 1) % 4).to_string()));
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank-hang on rank-{}: training thread frozen", self.rank)
    }
}
