//! competing-job: another team's job (not a rank) reads hard from one storage server.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{ParseError, Shape, Spec};

/// A job of another team reads storage server `server` hard, from `threads` connections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct CompetingJob {
    /// The storage server it reads from.
    #[arg(long, default_value_t = 1)]
    pub server: u32,
    /// Connections it reads from at once (1 to 256).
    #[arg(long, default_value_t = crate::jobs::DEFAULT_THREADS)]
    pub threads: u32,
}

impl Spec for CompetingJob {
    const NAME: &'static str = "competing-job";
    const SUMMARY: &'static str = "another team's job (not a rank) reads hard from one storage server";
    const ABOUT: &'static str =
        "Another team's job (its own process and cgroup, not a rank) reads hard from one storage server";
    // Another team's job reads hard from the same server.
    const CAUSE: &'static str = "competing-job";

    fn validate(&self) -> Result<(), ParseError> {
        if self.threads == 0 || self.threads > crate::jobs::MAX_THREADS {
            return Err(ParseError::Fault(format!(
                "--threads must be between 1 and {}",
                crate::jobs::MAX_THREADS
            )));
        }
        Ok(())
    }

    /// A neighbour on 96-256 connections.
    fn vary(&self, shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> Self {
        CompetingJob {
            server: shape.server(pick),
            threads: pick(3, 8) as u32 * 32,
        }
    }

    fn target(&self) -> String {
        crate::names::storage(self.server)
    }

    fn placeholders(&self, v: &mut Vec<(&'static str, String)>) {
        v.push(("server", self.server.to_string()));
        v.push(("threads", self.threads.to_string()));
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "competing-job on storage-{}: another team's job reads it from {} connections",
            self.server, self.threads
        )
    }
}
