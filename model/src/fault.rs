//! The catalogue: which faults exist, their parameters and defaults, and how they read as text.

use std::fmt;
use std::time::Duration;

use crate::Millicores;
use crate::quantity::format_duration;
use serde::{Deserialize, Serialize};

use crate::error::ParseError;

/// The kinds of fault, without parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    SlowStorage,
    ThrottledRank,
    UnplaceableRank,
    StuckRollout,
    RankCrash,
    RankHang,
    SlowCompute,
    CompetingJob,
    SlowDisk,
    SyncReplica,
}

impl FaultKind {
    /// Every kind, in catalogue order.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::SlowStorage,
        FaultKind::ThrottledRank,
        FaultKind::UnplaceableRank,
        FaultKind::StuckRollout,
        FaultKind::RankCrash,
        FaultKind::RankHang,
        FaultKind::SlowCompute,
        FaultKind::CompetingJob,
        FaultKind::SlowDisk,
        FaultKind::SyncReplica,
    ];

    /// The kind's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::SlowStorage => "slow-storage",
            FaultKind::ThrottledRank => "throttled-rank",
            FaultKind::UnplaceableRank => "unplaceable-rank",
            FaultKind::StuckRollout => "stuck-rollout",
            FaultKind::RankCrash => "rank-crash",
            FaultKind::RankHang => "rank-hang",
            FaultKind::SlowCompute => "slow-compute",
            FaultKind::CompetingJob => "competing-job",
            FaultKind::SlowDisk => "slow-disk",
            FaultKind::SyncReplica => "sync-replica",
        }
    }

    /// Parses a kind's name.
    ///
    /// # Errors
    /// [`ParseError::Fault`] listing the known kinds.
    pub fn parse(s: &str) -> Result<FaultKind, ParseError> {
        FaultKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            ParseError::Fault(format!(
                "unknown fault {s:?}: the lab knows {} (see `lab fault list`)",
                FaultKind::ALL.map(FaultKind::name).join(", ")
            ))
        })
    }

    /// One line for `lab fault list`: parameters with defaults, and what it does.
    pub fn describe(self) -> &'static str {
        match self {
            FaultKind::SlowStorage => {
                "[--server 1] [--delay 300ms] [--jitter 0ms]  one storage server answers every request late"
            }
            FaultKind::ThrottledRank => {
                "[--rank 1] [--cpu 150m]  one rank's CPU limit cut in place; its template keeps 400m"
            }
            FaultKind::UnplaceableRank => {
                "[--ranks 5]  scale past the node's GPUs and expect that many peers; the new rank never starts"
            }
            FaultKind::StuckRollout => {
                "[--ranks 5]  roll out 5 ranks expecting 5 peers; rank-4 Pending holds the rollout, the job trains on"
            }
            FaultKind::RankCrash => {
                "[--rank 1] [--after 150]  a setting of one rank makes it crash 25 steps in, then every N steps; the job resumes from its checkpoint each time"
            }
            FaultKind::RankHang => {
                "[--rank 1]  one rank's training thread frozen; its process lives and stays Ready"
            }
            FaultKind::SlowCompute => {
                "[--ranks 1,2]  a CPU hog beside each rank, inside its limit; spec and template unchanged"
            }
            FaultKind::CompetingJob => {
                "[--server 1] [--threads 128]  another team's job (not a rank) reads hard from one storage server"
            }
            FaultKind::SlowDisk => {
                "[--server 1] [--cpu 6m]  one storage server itself is slow: its own process starved of CPU"
            }
            FaultKind::SyncReplica => {
                "[--node-selector lab/disk=nvme]  the database's synchronous standby made unschedulable: every commit hangs, reads and Ready look fine (needs lab up --database)"
            }
        }
    }

    /// What the fault does, in one line (the part of [`FaultKind::describe`] after its parameters).
    pub fn summary(self) -> &'static str {
        self.describe()
            .split_once("  ")
            .map_or(self.describe(), |(_, what)| what)
    }

    /// Its parameters and their defaults, as flags: `[("--server", "1"), ("--delay", "300ms"), …]`.
    pub fn parameters(self) -> Vec<(&'static str, &'static str)> {
        let flags = self.describe().split_once("  ").map_or("", |(flags, _)| flags);
        flags
            .split(']')
            .filter_map(|p| p.trim().strip_prefix('['))
            .filter_map(|p| p.split_once(' '))
            .collect()
    }

    /// The fault with its default parameters (what the console's keys inject).
    pub fn default_fault(self) -> Fault {
        match self {
            FaultKind::SlowStorage => Fault::SlowStorage {
                server: 1,
                delay: Duration::from_millis(300),
                jitter: Duration::ZERO,
            },
            FaultKind::ThrottledRank => Fault::ThrottledRank {
                rank: 1,
                cpu: Millicores(150),
            },
            FaultKind::UnplaceableRank => Fault::UnplaceableRank { ranks: 5 },
            FaultKind::StuckRollout => Fault::StuckRollout { ranks: 5 },
            FaultKind::RankCrash => Fault::RankCrash { rank: 1, after: 150 },
            FaultKind::RankHang => Fault::RankHang { rank: 1 },
            FaultKind::SlowCompute => Fault::SlowCompute { ranks: vec![1, 2] },
            FaultKind::CompetingJob => Fault::CompetingJob {
                server: 1,
                threads: default_threads(),
            },
            FaultKind::SlowDisk => Fault::SlowDisk {
                server: 1,
                cpu: DEFAULT_STORAGE_CPU,
            },
            FaultKind::SyncReplica => Fault::SyncReplica {
                node_selector: default_selector(),
            },
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fault with its parameters: what a drill file, the CLI and the console inject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Fault {
    /// Storage server `server` answers every request `delay` (± `jitter`) late.
    SlowStorage {
        server: u32,
        #[serde(with = "ms")]
        delay: Duration,
        #[serde(with = "ms", default)]
        jitter: Duration,
    },
    /// Rank `rank`'s CPU limit is cut in place to `cpu`.
    ThrottledRank { rank: u32, cpu: Millicores },
    /// The job is scaled to `ranks` and told to expect that many peers.
    UnplaceableRank { ranks: u32 },
    /// The job is rolled out to `ranks` ranks expecting that many peers, one GPU short: the rollout waits
    /// behind the Pending rank.
    StuckRollout { ranks: u32 },
    /// Rank `rank` crashes after every `after` steps (a setting of that rank alone).
    RankCrash { rank: u32, after: u64 },
    /// Rank `rank`'s training thread is frozen while its process lives.
    RankHang { rank: u32 },
    /// A CPU hog runs beside each of `ranks`, inside its CPU limit.
    SlowCompute { ranks: Vec<u32> },
    /// A job of another team reads storage server `server` hard, from `threads` connections.
    CompetingJob {
        server: u32,
        #[serde(default = "default_threads")]
        threads: u32,
    },
    /// Storage server `server` itself is slow: its own process is held to `cpu`, so every request it
    /// serves waits (its own latency rises, not only the path's).
    SlowDisk { server: u32, cpu: Millicores },
    /// The database's primary commits synchronously to its standby `db-1`, whose template is changed to
    /// ask for a node label (`node_selector`, `KEY=VALUE`) no node has, and whose pod is made again from
    /// it: it stays Pending.
    SyncReplica {
        #[serde(default = "default_selector")]
        node_selector: String,
    },
}

fn default_threads() -> u32 {
    crate::jobs::DEFAULT_THREADS
}

fn default_selector() -> String {
    "lab/disk=nvme".into()
}

/// The shape of the lab a variant is drawn for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub ranks: u32,
    pub storage_servers: u32,
    pub gpus: u32,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            ranks: 4,
            storage_servers: 3,
            gpus: 4,
        }
    }
}

/// The node labels a varied sync-replica asks for (none exists on any node).
const UNMATCHED_SELECTORS: [&str; 3] = ["lab/disk=nvme", "lab/zone=b", "lab/rack=r9"];

impl Fault {
    /// A variant of this fault with its parameters drawn within its kind's ranges, for a lab of `shape`:
    /// another server or rank, a delay of 150–600 ms, a rank's CPU cut to 75–150m (its template keeps the
    /// lab's 400m; above 150m a throttled rank no longer stands out from its siblings on a busy machine), 1 or 2 more ranks than GPUs, a crash every 100–200 steps, a hog beside as many ranks (other ones), a
    /// neighbour on 96–256 connections, a server held to 4–10m of CPU, another node label no node has.
    /// `draw(lo, hi)` returns a number in `lo..=hi` (a seeded generator, so a variant can be drawn again).
    /// Every range keeps the fault's effect well past its alert's threshold.
    pub fn vary(&self, shape: Shape, draw: &mut dyn FnMut(u64, u64) -> u64) -> Fault {
        let mut pick = |lo: u64, hi: u64| draw(lo, hi);
        let server =
            |p: &mut dyn FnMut(u64, u64) -> u64| p(0, u64::from(shape.storage_servers.max(1) - 1)) as u32;
        let rank = |p: &mut dyn FnMut(u64, u64) -> u64| p(0, u64::from(shape.ranks.max(1) - 1)) as u32;
        match self {
            Fault::SlowStorage { .. } => Fault::SlowStorage {
                server: server(&mut pick),
                delay: Duration::from_millis(pick(3, 12) * 50),
                jitter: Duration::ZERO,
            },
            Fault::ThrottledRank { .. } => Fault::ThrottledRank {
                rank: rank(&mut pick),
                cpu: Millicores(pick(3, 6) as u32 * 25),
            },
            Fault::UnplaceableRank { .. } => Fault::UnplaceableRank {
                ranks: shape.gpus + pick(1, 2) as u32,
            },
            Fault::StuckRollout { .. } => Fault::StuckRollout {
                ranks: shape.gpus + pick(1, 2) as u32,
            },
            Fault::RankCrash { .. } => Fault::RankCrash {
                rank: rank(&mut pick),
                after: pick(10, 20) * 10,
            },
            Fault::RankHang { .. } => Fault::RankHang {
                rank: rank(&mut pick),
            },
            Fault::SlowCompute { ranks: before } => {
                // As many ranks as the drill names (its expected alerts name each), drawn without repeats.
                let mut pool: Vec<u32> = (0..shape.ranks.max(1)).collect();
                let mut ranks = Vec::new();
                for _ in 0..before.len().clamp(1, pool.len()) {
                    let i = pick(0, pool.len() as u64 - 1) as usize;
                    ranks.push(pool.swap_remove(i));
                }
                ranks.sort_unstable();
                Fault::SlowCompute { ranks }
            }
            Fault::CompetingJob { .. } => Fault::CompetingJob {
                server: server(&mut pick),
                threads: pick(3, 8) as u32 * 32,
            },
            Fault::SlowDisk { .. } => Fault::SlowDisk {
                server: server(&mut pick),
                cpu: Millicores(pick(4, 10) as u32),
            },
            Fault::SyncReplica { .. } => Fault::SyncReplica {
                node_selector: UNMATCHED_SELECTORS[pick(0, UNMATCHED_SELECTORS.len() as u64 - 1) as usize]
                    .into(),
            },
        }
    }

    /// Its parameters as the placeholders a drill's fixes use: `{server}`, `{rank}`, `{ranks}`, `{delay}`,
    /// `{cpu}`, `{after}`, `{threads}`, `{node_selector}` (and `{target}`, the component it is on).
    pub fn placeholders(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![("target", self.target())];
        match self {
            Fault::SlowStorage { server, delay, .. } => {
                v.push(("server", server.to_string()));
                v.push(("delay", format_duration(*delay)));
            }
            Fault::ThrottledRank { rank, cpu } => {
                v.push(("rank", rank.to_string()));
                v.push(("cpu", cpu.to_string()));
            }
            Fault::UnplaceableRank { ranks } | Fault::StuckRollout { ranks } => {
                v.push(("ranks", ranks.to_string()))
            }
            Fault::RankCrash { rank, after } => {
                v.push(("rank", rank.to_string()));
                v.push(("after", after.to_string()));
            }
            Fault::RankHang { rank } => {
                v.push(("rank", rank.to_string()));
                // A rank that waits for it: the look-alike's fix restarts one of those.
                v.push(("sibling", ((rank + 1) % 4).to_string()));
            }
            Fault::SlowCompute { ranks } => {
                v.push((
                    "ranks",
                    ranks
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                ));
                if let Some(r) = ranks.first() {
                    v.push(("rank", r.to_string()));
                }
            }
            Fault::CompetingJob { server, threads } => {
                v.push(("server", server.to_string()));
                v.push(("threads", threads.to_string()));
            }
            Fault::SlowDisk { server, cpu } => {
                v.push(("server", server.to_string()));
                v.push(("cpu", cpu.to_string()));
            }
            Fault::SyncReplica { node_selector } => v.push(("node_selector", node_selector.clone())),
        }
        v
    }

    /// The components this fault is on, by the names the lab uses (`storage-1`, `rank-2`, `db-1`).
    pub fn components(&self) -> Vec<String> {
        match self {
            Fault::SlowCompute { ranks } => ranks.iter().map(|r| crate::names::rank(*r)).collect(),
            _ => vec![self.target()],
        }
    }
}

impl Fault {
    /// Its kind.
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::SlowStorage { .. } => FaultKind::SlowStorage,
            Fault::ThrottledRank { .. } => FaultKind::ThrottledRank,
            Fault::UnplaceableRank { .. } => FaultKind::UnplaceableRank,
            Fault::StuckRollout { .. } => FaultKind::StuckRollout,
            Fault::RankCrash { .. } => FaultKind::RankCrash,
            Fault::RankHang { .. } => FaultKind::RankHang,
            Fault::SlowCompute { .. } => FaultKind::SlowCompute,
            Fault::CompetingJob { .. } => FaultKind::CompetingJob,
            Fault::SlowDisk { .. } => FaultKind::SlowDisk,
            Fault::SyncReplica { .. } => FaultKind::SyncReplica,
        }
    }

    /// What it acts on: `storage-1`, `rank-1`, `ranks`.
    pub fn target(&self) -> String {
        match self {
            Fault::SlowStorage { server, .. } => crate::names::storage(*server),
            Fault::ThrottledRank { rank, .. } => crate::names::rank(*rank),
            Fault::UnplaceableRank { .. } | Fault::StuckRollout { .. } => "ranks".to_string(),
            Fault::RankHang { rank } | Fault::RankCrash { rank, .. } => crate::names::rank(*rank),
            Fault::SlowCompute { ranks } => ranks
                .iter()
                .map(|r| crate::names::rank(*r))
                .collect::<Vec<_>>()
                .join(","),
            Fault::CompetingJob { server, .. } => crate::names::storage(*server),
            Fault::SlowDisk { server, .. } => crate::names::storage(*server),
            Fault::SyncReplica { .. } => crate::db::STANDBY.to_string(),
        }
    }

    /// Checks the parameters that need no lab to check.
    ///
    /// # Errors
    /// [`ParseError::Fault`] saying what is wrong.
    pub fn validate(&self) -> Result<(), ParseError> {
        match self {
            Fault::SlowStorage { delay, jitter, .. } => {
                if delay.is_zero() {
                    return Err(ParseError::Fault(
                        "--delay must be more than 0 (e.g. 300ms)".into(),
                    ));
                }
                if *delay > MAX_DELAY {
                    return Err(ParseError::Fault(format!(
                        "--delay {} is absurd for a lab: at most {}",
                        format_duration(*delay),
                        format_duration(MAX_DELAY)
                    )));
                }
                if jitter > delay {
                    return Err(ParseError::Fault("--jitter must not exceed --delay".into()));
                }
                Ok(())
            }
            Fault::ThrottledRank { .. } | Fault::RankHang { .. } => Ok(()),
            Fault::RankCrash { after, .. } => {
                if *after == 0 {
                    return Err(ParseError::Fault(
                        "--after must be at least 1 step (e.g. 150)".into(),
                    ));
                }
                Ok(())
            }
            Fault::SlowCompute { ranks } => {
                if ranks.is_empty() {
                    return Err(ParseError::Fault(
                        "--ranks must name at least one rank (e.g. 1,2)".into(),
                    ));
                }
                let mut sorted = ranks.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if sorted.len() != ranks.len() {
                    return Err(ParseError::Fault("--ranks names a rank twice".into()));
                }
                if ranks.len() as u32 > crate::actions::MAX_RANKS {
                    return Err(ParseError::Fault(format!(
                        "--ranks names more than the {} ranks a lab can have",
                        crate::actions::MAX_RANKS
                    )));
                }
                Ok(())
            }
            Fault::CompetingJob { threads, .. } => {
                if *threads == 0 || *threads > crate::jobs::MAX_THREADS {
                    return Err(ParseError::Fault(format!(
                        "--threads must be between 1 and {}",
                        crate::jobs::MAX_THREADS
                    )));
                }
                Ok(())
            }
            Fault::SyncReplica { node_selector } => {
                let sel = crate::db::parse_selector(node_selector).map_err(ParseError::Fault)?;
                if sel.is_empty() {
                    return Err(ParseError::Fault(
                        "--node-selector must ask for a label (e.g. lab/disk=nvme)".into(),
                    ));
                }
                let t = crate::db::DbTemplate {
                    node_selector: sel,
                    revision: 0,
                };
                if t.unmatched(&crate::db::local_node_labels()).is_none() {
                    return Err(ParseError::Fault(format!(
                        "--node-selector {node_selector} matches the node's labels ({}), so the standby would \
                         be placed: ask for a label no node has (e.g. lab/disk=nvme)",
                        crate::db::DbTemplate {
                            node_selector: crate::db::local_node_labels(),
                            revision: 0
                        }
                        .selector_text()
                    )));
                }
                Ok(())
            }
            Fault::UnplaceableRank { ranks } | Fault::StuckRollout { ranks } => {
                if *ranks == 0 || *ranks > crate::actions::MAX_RANKS {
                    return Err(ParseError::Fault(format!(
                        "--ranks must be between 1 and {}",
                        crate::actions::MAX_RANKS
                    )));
                }
                Ok(())
            }
            Fault::SlowDisk { cpu, .. } => {
                if *cpu < MIN_STORAGE_CPU || *cpu > MAX_STORAGE_CPU {
                    return Err(ParseError::Fault(format!(
                        "--cpu {cpu} is out of range for slow-disk: between {MIN_STORAGE_CPU} (the kernel's \
                         smallest quota, 1 ms, in the storage server's 382 ms period) and {MAX_STORAGE_CPU} (a volume \
                         server serving the job uses about that much, so more would not slow it)"
                    )));
                }
                Ok(())
            }
        }
    }
}

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

/// The longest storage delay the lab injects.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::SlowStorage {
                server,
                delay,
                jitter,
            } => {
                write!(
                    f,
                    "slow-storage on storage-{server}: +{}",
                    format_duration(*delay)
                )?;
                if !jitter.is_zero() {
                    write!(f, " ± {}", format_duration(*jitter))?;
                }
                Ok(())
            }
            Fault::ThrottledRank { rank, cpu } => write!(f, "throttled-rank on rank-{rank}: cpu {cpu}"),
            Fault::UnplaceableRank { ranks } => write!(f, "unplaceable-rank: {ranks} ranks"),
            Fault::StuckRollout { ranks } => write!(f, "stuck-rollout: {ranks} ranks"),
            Fault::RankHang { rank } => write!(f, "rank-hang on rank-{rank}: training thread frozen"),
            Fault::RankCrash { rank, after } => {
                let first = crate::actions::DEVICE_FAULT_FIRST_STEPS;
                if *after > first {
                    write!(
                        f,
                        "rank-crash on rank-{rank}: crashes {first} steps in, then every {after} steps"
                    )
                } else {
                    write!(f, "rank-crash on rank-{rank}: crashes every {after} steps")
                }
            }
            Fault::SlowCompute { .. } => write!(
                f,
                "slow-compute on {}: a CPU hog beside each",
                self.target().replace(',', ", ")
            ),
            Fault::CompetingJob { server, threads } => write!(
                f,
                "competing-job on storage-{server}: another team's job reads it from {threads} connections"
            ),
            Fault::SlowDisk { server, cpu } => {
                write!(
                    f,
                    "slow-disk on storage-{server}: server process held to cpu {cpu}"
                )
            }
            Fault::SyncReplica { node_selector } => write!(
                f,
                "sync-replica on db-1: commits wait for a standby whose template asks for {node_selector}"
            ),
        }
    }
}

mod ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", d.as_secs_f64() * 1000.0))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        crate::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_splits_into_its_flags_and_what_it_does() {
        let k = FaultKind::SlowStorage;
        assert_eq!(
            k.parameters(),
            [("--server", "1"), ("--delay", "300ms"), ("--jitter", "0ms")]
        );
        assert_eq!(k.summary(), "one storage server answers every request late");
        for k in FaultKind::ALL {
            assert!(!k.parameters().is_empty(), "{k:?}");
            assert!(!k.summary().starts_with('['), "{k:?}: {}", k.summary());
            assert!(!k.summary().is_empty());
        }
    }

    #[test]
    fn faults_round_trip_as_data() {
        for k in FaultKind::ALL {
            let f = k.default_fault();
            let j = serde_json::to_string(&f).unwrap();
            assert_eq!(serde_json::from_str::<Fault>(&j).unwrap(), f, "{j}");
            assert_eq!(FaultKind::parse(k.name()).unwrap(), k);
        }
        let f: Fault = serde_json::from_str(r#"{"kind":"slow-storage","server":2,"delay":"1.5s"}"#).unwrap();
        assert_eq!(
            f,
            Fault::SlowStorage {
                server: 2,
                delay: Duration::from_millis(1500),
                jitter: Duration::ZERO
            }
        );
    }

    #[test]
    fn rank_crash_says_when_its_crashes_come() {
        let f = |after| Fault::RankCrash { rank: 1, after }.to_string();
        assert_eq!(
            f(150),
            "rank-crash on rank-1: crashes 25 steps in, then every 150 steps"
        );
        // The first crash is never later than the others.
        assert_eq!(f(10), "rank-crash on rank-1: crashes every 10 steps");
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(
            FaultKind::parse("slow-nfs")
                .unwrap_err()
                .to_string()
                .contains("slow-storage")
        );
        let zero = Fault::SlowStorage {
            server: 1,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
        };
        assert!(zero.validate().is_err());
        let absurd = Fault::SlowStorage {
            server: 1,
            delay: Duration::from_secs(3600),
            jitter: Duration::ZERO,
        };
        assert!(absurd.validate().unwrap_err().to_string().contains("absurd"));
        assert!(Fault::UnplaceableRank { ranks: 0 }.validate().is_err());
        assert!(Fault::SlowCompute { ranks: vec![] }.validate().is_err());
        assert!(Fault::RankCrash { rank: 1, after: 0 }.validate().is_err());
        assert!(
            Fault::SlowCompute { ranks: vec![1, 1] }
                .validate()
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        assert!(Fault::SlowCompute { ranks: vec![1, 2] }.validate().is_ok());
        for cpu in [0, 2, 21, 4000] {
            let f = Fault::SlowDisk {
                server: 1,
                cpu: Millicores(cpu),
            };
            assert!(f.validate().unwrap_err().to_string().contains("--cpu"), "{cpu}");
        }
        assert!(FaultKind::SlowDisk.default_fault().validate().is_ok());
        let f: Fault = serde_json::from_str(r#"{"kind":"slow-disk","server":2,"cpu":"20m"}"#).unwrap();
        assert_eq!(f.target(), "storage-2");
        let placeable = Fault::SyncReplica {
            node_selector: "lab/disk=ssd".into(),
        };
        assert!(
            placeable
                .validate()
                .unwrap_err()
                .to_string()
                .contains("matches the node")
        );
        let garbage = Fault::SyncReplica {
            node_selector: "nvme".into(),
        };
        assert!(garbage.validate().unwrap_err().to_string().contains("KEY=VALUE"));
        assert!(FaultKind::SyncReplica.default_fault().validate().is_ok());
    }

    #[test]
    fn reads_like_the_seed() {
        assert_eq!(
            FaultKind::SlowStorage.default_fault().to_string(),
            "slow-storage on storage-1: +300 ms"
        );
        assert_eq!(
            FaultKind::SlowCompute.default_fault().to_string(),
            "slow-compute on rank-1, rank-2: a CPU hog beside each"
        );
        assert_eq!(FaultKind::SlowCompute.default_fault().target(), "rank-1,rank-2");
    }
}
