//! stuck-rollout: a rolling change to more ranks than GPUs, held behind the rank that cannot be placed.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{ParseError, Scaled, Shape, Spec};

/// The job is rolled out to `ranks` ranks expecting that many peers, one GPU short: the rollout waits
/// behind the Pending rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct StuckRollout {
    /// The new rank count (and world size in the new configuration).
    #[arg(long, default_value_t = 5)]
    pub ranks: u32,
}

impl Spec for StuckRollout {
    const NAME: &'static str = "stuck-rollout";
    const SUMMARY: &'static str =
        "roll out 5 ranks expecting 5 peers; rank-4 Pending holds the rollout, the job trains on";
    const ABOUT: &'static str = "Roll out more ranks than GPUs with a configuration expecting them all, as one \
         rolling change: the extra rank stays Pending, the rollout waits behind it, and the running ranks train \
         on with the old configuration. Scaling back unblocks the rollout and stalls the job; putting the world \
         size back fixes it";
    // The configuration says five while four run on the old one: the rollout is held.
    const CAUSE: &'static str = "stuck-rollout";

    fn validate(&self) -> Result<(), ParseError> {
        Scaled(self.ranks).validate()
    }

    fn vary(&self, shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> Self {
        StuckRollout {
            ranks: Scaled::vary(shape, pick),
        }
    }

    fn target(&self) -> String {
        Scaled::TARGET.to_string()
    }

    fn placeholders(&self, v: &mut Vec<(&'static str, String)>) {
        Scaled(self.ranks).placeholders(v);
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stuck-rollout: {} ranks", self.ranks)
    }
}
