//! unplaceable-rank: the job scaled past the node's GPUs and told to expect that many peers (the seed's
//! third fault).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{ParseError, Scaled, Shape, Spec};

/// The job is scaled to `ranks` and told to expect that many peers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct UnplaceableRank {
    /// The new rank count (and world size).
    #[arg(long, default_value_t = 5)]
    pub ranks: u32,
}

impl Spec for UnplaceableRank {
    const NAME: &'static str = "unplaceable-rank";
    const SUMMARY: &'static str =
        "scale past the node's GPUs and expect that many peers; the new rank never starts";
    const ABOUT: &'static str =
        "Scale past the node's GPUs and set the world size to match: the extra rank never starts";
    const CAUSE: &'static str = "over-scaled";
    const KEY: Option<(char, &'static str)> = Some(('u', "ranks 4 -> 5, world size 5, one GPU short"));

    fn validate(&self) -> Result<(), ParseError> {
        Scaled(self.ranks).validate()
    }

    fn vary(&self, shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> Self {
        UnplaceableRank {
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
        write!(f, "unplaceable-rank: {} ranks", self.ranks)
    }
}
