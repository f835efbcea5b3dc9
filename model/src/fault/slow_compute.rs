//! slow-compute: a CPU hog beside ranks, inside their own limits; spec and template unchanged.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::{ParseError, Shape, Spec};

/// A CPU hog runs beside each of `ranks`, inside its CPU limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct SlowCompute {
    /// The ranks, comma-separated (e.g. 1,2); leave at least one rank out.
    #[arg(long, default_value = "1,2", value_delimiter = ',')]
    #[serde(deserialize_with = "one_or_many")]
    pub ranks: Vec<u32>,
}

/// `ranks: [1, 2]`, or `ranks: 3` for one.
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Ranks {
        One(u32),
        Many(Vec<u32>),
    }
    Ok(match Ranks::deserialize(d)? {
        Ranks::One(r) => vec![r],
        Ranks::Many(v) => v,
    })
}

impl Spec for SlowCompute {
    const NAME: &'static str = "slow-compute";
    const SUMMARY: &'static str = "a CPU hog beside each rank, inside its limit; spec and template unchanged";
    const ABOUT: &'static str = "A CPU hog runs beside each of these ranks, inside the rank's own CPU limit: they \
         compute slowly while spec, limit in force and template are unchanged. Right fix: find and stop the hog \
         (`lab rank procs N`, `lab rank stop N --pid P`). On Kubernetes the hog is started through `exec` in the \
         rank's container";
    // Something beside the ranks takes their CPU; their limits are unchanged.
    const CAUSE: &'static str = "cpu-neighbour";

    fn validate(&self) -> Result<(), ParseError> {
        if self.ranks.is_empty() {
            return Err(ParseError::Fault(
                "--ranks must name at least one rank (e.g. 1,2)".into(),
            ));
        }
        let mut sorted = self.ranks.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != self.ranks.len() {
            return Err(ParseError::Fault("--ranks names a rank twice".into()));
        }
        if self.ranks.len() as u32 > crate::actions::MAX_RANKS {
            return Err(ParseError::Fault(format!(
                "--ranks names more than the {} ranks a lab can have",
                crate::actions::MAX_RANKS
            )));
        }
        Ok(())
    }

    /// As many ranks as the drill names (its expected alerts name each), drawn without repeats.
    fn vary(&self, shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> Self {
        let mut pool: Vec<u32> = (0..shape.ranks.max(1)).collect();
        let mut ranks = Vec::new();
        for _ in 0..self.ranks.len().clamp(1, pool.len()) {
            let i = pick(0, pool.len() as u64 - 1) as usize;
            ranks.push(pool.swap_remove(i));
        }
        ranks.sort_unstable();
        SlowCompute { ranks }
    }

    fn target(&self) -> String {
        self.components().join(",")
    }

    fn components(&self) -> Vec<String> {
        self.ranks.iter().map(|r| crate::names::rank(*r)).collect()
    }

    fn placeholders(&self, v: &mut Vec<(&'static str, String)>) {
        let list: Vec<String> = self.ranks.iter().map(ToString::to_string).collect();
        v.push(("ranks", list.join(",")));
        if let Some(r) = self.ranks.first() {
            v.push(("rank", r.to_string()));
        }
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slow-compute on {}: a CPU hog beside each",
            self.components().join(", ")
        )
    }
}
