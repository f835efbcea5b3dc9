//! slow-disk: one storage server itself is slow, its own process starved of CPU.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{ParseError, Shape, Spec};
use crate::Millicores;

/// The smallest CPU limit slow-disk sets: the kernel's smallest quota (1 ms) in the storage server's 382 ms
/// CFS period is 2.6m, so 3m.
pub const MIN_STORAGE_CPU: Millicores = Millicores(3);
/// The largest CPU limit slow-disk sets: a volume server serving the job uses some 20 ms of CPU a second,
/// so a larger limit does not slow it.
pub const MAX_STORAGE_CPU: Millicores = Millicores(20);
/// slow-disk's default: 2.3 ms of CPU per 382 ms period, a third or less of what the server uses at the job's
/// load, and about twice what it needs for its own upkeep (heartbeats, metrics, probes), below which it stops
/// answering at all.
pub const DEFAULT_STORAGE_CPU: Millicores = Millicores(6);

/// Storage server `server` itself is slow: its own process is held to `cpu`, so every request it serves
/// waits (its own latency rises, not only the path's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct SlowDisk {
    /// The storage server.
    #[arg(long, default_value_t = 1)]
    pub server: u32,
    /// The CPU limit held on the server's own process (3m to 20m; smaller is slower).
    #[arg(long, default_value_t = DEFAULT_STORAGE_CPU)]
    pub cpu: Millicores,
}

impl Spec for SlowDisk {
    const NAME: &'static str = "slow-disk";
    const SUMMARY: &'static str = "one storage server itself is slow: its own process starved of CPU";
    const ABOUT: &'static str = "One storage server itself is slow: its own process is starved of CPU, so its \
         own request latency rises (unlike slow-storage, where only the path to it is slow). The right fix moves \
         the job's data off it: `lab storage drain N`";
    const LONG_ABOUT: Option<&'static str> = Some(
        "One storage server itself is slow: its own process is starved of CPU, so its own request latency \
         rises (unlike slow-storage, where only the path to it is slow). The right fix moves the job's data off \
         it: `lab storage drain N`.\n\n\
         The limit is a CPU budget in a long CFS period (382 ms): 6m is 2.3 ms of CPU per period, spent early, \
         and a request that comes after it waits for the next period. On Kubernetes it is the volume \
         container's CPU limit, resized in place, in the kubelet's 100 ms period, where nothing is held below \
         1 ms per period: any value under 10m holds the server to 10m.\n\n\
         Example: lab fault inject slow-disk --server 1 --cpu 6m",
    );
    // The storage server's own process is slow: its own latency rises with the path's.
    const CAUSE: &'static str = "slow-node";

    fn validate(&self) -> Result<(), ParseError> {
        let cpu = self.cpu;
        if cpu < MIN_STORAGE_CPU || cpu > MAX_STORAGE_CPU {
            return Err(ParseError::Fault(format!(
                "--cpu {cpu} is out of range for slow-disk: between {MIN_STORAGE_CPU} (the kernel's \
                 smallest quota, 1 ms, in the storage server's 382 ms period) and {MAX_STORAGE_CPU} (a volume \
                 server serving the job uses about that much, so more would not slow it)"
            )));
        }
        Ok(())
    }

    /// A server held to 4-10m of CPU.
    fn vary(&self, shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> Self {
        SlowDisk {
            server: shape.server(pick),
            cpu: Millicores(pick(4, 10) as u32),
        }
    }

    fn target(&self) -> String {
        crate::names::storage(self.server)
    }

    fn placeholders(&self, v: &mut Vec<(&'static str, String)>) {
        v.push(("server", self.server.to_string()));
        v.push(("cpu", self.cpu.to_string()));
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slow-disk on storage-{}: server process held to cpu {}",
            self.server, self.cpu
        )
    }
}
