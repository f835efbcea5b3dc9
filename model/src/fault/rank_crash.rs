//! rank-crash: a setting of one rank makes its accelerator fail again and again; the job resumes from its
//! checkpoint each time.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{ParseError, Shape, Spec};

/// Rank `rank` crashes after every `after` steps (a setting of that rank alone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct RankCrash {
    /// The rank.
    #[arg(long, default_value_t = 1)]
    pub rank: u32,
    /// Steps between crashes (a restarted process runs this many; the first crash comes as the setting
    /// takes effect, and in a new pod that has the setting after 25 steps, or after N when N is smaller).
    #[arg(long, default_value_t = 150)]
    pub after: u64,
}

impl Spec for RankCrash {
    const NAME: &'static str = "rank-crash";
    const SUMMARY: &'static str = "a setting of one rank makes it crash as the setting takes effect, then every N steps; the job resumes from its checkpoint each time";
    const ABOUT: &'static str = "One rank crashes in a loop: a setting of that rank alone (LAB_DEVICE_FAULT_AFTER) \
         makes its accelerator fail as the setting takes effect, then after every N steps of each restarted \
         process (a new pod that starts with the setting fails 25 steps in first). Its peers see a \
         collective error; the job resumes from its checkpoint each time and the steps since are lost. Right fix: remove the setting (`lab rank env N --unset \
         LAB_DEVICE_FAULT_AFTER`). On Kubernetes the setting is a `rank-N.LAB_DEVICE_FAULT_AFTER` key of \
         lab-config";
    const CAUSE: &'static str = "crash-loop";

    fn validate(&self) -> Result<(), ParseError> {
        if self.after == 0 {
            return Err(ParseError::Fault(
                "--after must be at least 1 step (e.g. 150)".into(),
            ));
        }
        Ok(())
    }

    /// A crash every 100-200 steps.
    fn vary(&self, shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> Self {
        RankCrash {
            rank: shape.rank(pick),
            after: pick(10, 20) * 10,
        }
    }

    fn target(&self) -> String {
        crate::names::rank(self.rank)
    }

    fn placeholders(&self, v: &mut Vec<(&'static str, String)>) {
        v.push(("rank", self.rank.to_string()));
        v.push(("after", self.after.to_string()));
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (rank, after) = (self.rank, self.after);
        write!(
            f,
            "rank-crash on rank-{rank}: crashes as its setting takes effect, then every {after} steps"
        )
    }
}
