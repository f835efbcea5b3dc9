//! The catalogue: which faults exist, their parameters and defaults, and how they read as text.

use std::fmt;
use std::time::Duration;

use lab_model::Millicores;
use lab_model::quantity::format_duration;
use serde::{Deserialize, Serialize};

use crate::FaultError;

/// The kinds of fault, without parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    SlowStorage,
    ThrottledRank,
    UnplaceableRank,
    CompetingJob,
}

impl FaultKind {
    /// Every kind, in catalogue order.
    pub const ALL: [FaultKind; 4] = [
        FaultKind::SlowStorage,
        FaultKind::ThrottledRank,
        FaultKind::UnplaceableRank,
        FaultKind::CompetingJob,
    ];

    /// The kind's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::SlowStorage => "slow-storage",
            FaultKind::ThrottledRank => "throttled-rank",
            FaultKind::UnplaceableRank => "unplaceable-rank",
            FaultKind::CompetingJob => "competing-job",
        }
    }

    /// Parses a kind's name.
    ///
    /// # Errors
    /// [`FaultError::Invalid`] listing the known kinds.
    pub fn parse(s: &str) -> Result<FaultKind, FaultError> {
        FaultKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            FaultError::Invalid(format!(
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
            FaultKind::CompetingJob => {
                "[--server 1] [--threads 64]  another team's job (not a rank) reads hard from one storage server"
            }
        }
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
            FaultKind::CompetingJob => Fault::CompetingJob {
                server: 1,
                threads: default_threads(),
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
    /// A job of another team reads storage server `server` hard, from `threads` connections.
    CompetingJob {
        server: u32,
        #[serde(default = "default_threads")]
        threads: u32,
    },
}

fn default_threads() -> u32 {
    64
}

impl Fault {
    /// Its kind.
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::SlowStorage { .. } => FaultKind::SlowStorage,
            Fault::ThrottledRank { .. } => FaultKind::ThrottledRank,
            Fault::UnplaceableRank { .. } => FaultKind::UnplaceableRank,
            Fault::CompetingJob { .. } => FaultKind::CompetingJob,
        }
    }

    /// What it acts on: `storage-1`, `rank-1`, `ranks`.
    pub fn target(&self) -> String {
        match self {
            Fault::SlowStorage { server, .. } => lab_model::names::storage(*server),
            Fault::ThrottledRank { rank, .. } => lab_model::names::rank(*rank),
            Fault::UnplaceableRank { .. } => "ranks".to_string(),
            Fault::CompetingJob { server, .. } => lab_model::names::storage(*server),
        }
    }

    /// Checks the parameters that need no lab to check.
    ///
    /// # Errors
    /// [`FaultError::Invalid`] saying what is wrong.
    pub fn validate(&self) -> Result<(), FaultError> {
        match self {
            Fault::SlowStorage { delay, jitter, .. } => {
                if delay.is_zero() {
                    return Err(FaultError::Invalid(
                        "--delay must be more than 0 (e.g. 300ms)".into(),
                    ));
                }
                if *delay > MAX_DELAY {
                    return Err(FaultError::Invalid(format!(
                        "--delay {} is absurd for a lab: at most {}",
                        format_duration(*delay),
                        format_duration(MAX_DELAY)
                    )));
                }
                if jitter > delay {
                    return Err(FaultError::Invalid("--jitter must not exceed --delay".into()));
                }
                Ok(())
            }
            Fault::ThrottledRank { .. } => Ok(()),
            Fault::CompetingJob { threads, .. } => {
                if *threads == 0 || *threads > lab_model::jobs::MAX_THREADS {
                    return Err(FaultError::Invalid(format!(
                        "--threads must be between 1 and {}",
                        lab_model::jobs::MAX_THREADS
                    )));
                }
                Ok(())
            }
            Fault::UnplaceableRank { ranks } => {
                if *ranks == 0 || *ranks > lab_model::actions::MAX_RANKS {
                    return Err(FaultError::Invalid(format!(
                        "--ranks must be between 1 and {}",
                        lab_model::actions::MAX_RANKS
                    )));
                }
                Ok(())
            }
        }
    }
}

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
            Fault::CompetingJob { server, threads } => write!(
                f,
                "competing-job on storage-{server}: another team's job reads it from {threads} connections"
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
        lab_model::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn bad_parameters_are_refused() {
        assert!(
            FaultKind::parse("slow-disk")
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
    }

    #[test]
    fn reads_like_the_seed() {
        assert_eq!(
            FaultKind::SlowStorage.default_fault().to_string(),
            "slow-storage on storage-1: +300 ms"
        );
    }
}
