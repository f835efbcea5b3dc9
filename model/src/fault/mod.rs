//! The catalogue: which faults exist, their parameters and defaults, and how they read as text.
//!
//! Each fault is defined once, in a file of its own here: a parameter struct whose clap attributes carry
//! its flags, help and defaults and whose serde form is the drill file's `inject:` and the ledger's record,
//! and its [`Spec`]: its name, what it does, its cause class, the console's key, its validation, its
//! variants and how it reads. [`catalogue!`] registers each in one line; `lab fault inject NAME`, the drill
//! file's `inject:`, `lab fault list` and the console's keys are all made from it. Adding a fault is a file
//! here, a line in the catalogue, and its injector in `lab-faults` (a file and a line there).

mod competing_job;
mod rank_crash;
mod rank_hang;
mod slow_compute;
mod slow_disk;
mod slow_storage;
mod stuck_rollout;
mod sync_replica;
mod throttled_rank;
mod unplaceable_rank;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::ParseError;

pub use competing_job::CompetingJob;
pub use rank_crash::RankCrash;
pub use rank_hang::RankHang;
pub use slow_compute::SlowCompute;
pub use slow_disk::{DEFAULT_STORAGE_CPU, MAX_STORAGE_CPU, MIN_STORAGE_CPU, SlowDisk};
pub use slow_storage::{MAX_DELAY, SlowStorage};
pub use stuck_rollout::StuckRollout;
pub use sync_replica::SyncReplica;
pub use throttled_rank::ThrottledRank;
pub use unplaceable_rank::UnplaceableRank;

/// What one fault's parameter struct says of itself. Its defaults are its clap attributes' (its `Default`
/// parses no flags), so the CLI, drill files and the console cannot disagree on them.
pub trait Spec: Sized + Clone + Default + clap::Args + clap::FromArgMatches {
    /// The name on the command line, in drill files and in the ledger.
    const NAME: &'static str;
    /// What it does, in one line (`lab fault list`).
    const SUMMARY: &'static str;
    /// `lab fault inject NAME --help`'s first paragraph.
    const ABOUT: &'static str;
    /// The whole of `--help`, where it says more than [`Spec::ABOUT`].
    const LONG_ABOUT: Option<&'static str> = None;
    /// The class of cause an agent names for it (docs/agents.md).
    const CAUSE: &'static str;
    /// The console's key that injects it with its defaults (the upper case clears it), and what that does.
    const KEY: Option<(char, &'static str)> = None;

    /// Checks the parameters that need no lab to check.
    ///
    /// # Errors
    /// [`ParseError::Fault`] saying what is wrong, naming the flag.
    fn validate(&self) -> Result<(), ParseError> {
        Ok(())
    }

    /// A variant with its parameters drawn within the fault's ranges for a lab of `shape` (`pick(lo, hi)`
    /// is a number in `lo..=hi` from a seeded generator). Every range keeps the fault's effect well past its
    /// alert's threshold.
    fn vary(&self, shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> Self;

    /// What it acts on: `storage-1`, `rank-1`, `ranks`.
    fn target(&self) -> String;

    /// The components it is on, by the names the lab uses.
    fn components(&self) -> Vec<String> {
        vec![self.target()]
    }

    /// Its parameters as the placeholders a drill's fixes use (`{server}`, `{rank}`, …).
    fn placeholders(&self, v: &mut Vec<(&'static str, String)>);

    /// How it reads: `slow-storage on storage-1: +300 ms`.
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

/// A parameter struct as its flags' defaults make it.
fn from_defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("defaults").no_binary_name(true));
    let matches = cmd
        .try_get_matches_from(std::iter::empty::<String>())
        .expect("every parameter of a fault has a default");
    T::from_arg_matches(&matches).expect("every parameter of a fault has a default")
}

/// The catalogue: one line a fault, in the seed story's order. It makes [`FaultKind`], [`Fault`] (the
/// clap subcommands of `lab fault inject` and the serde form of drill files and the ledger), and their
/// dispatch to each fault's [`Spec`].
macro_rules! catalogue {
    ($($variant:ident),* $(,)?) => {
        /// The kinds of fault, without parameters.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "kebab-case")]
        pub enum FaultKind {
            $($variant),*
        }

        /// A fault with its parameters: what a drill file, the CLI and the console inject.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Subcommand)]
        #[serde(tag = "kind", rename_all = "kebab-case")]
        pub enum Fault {
            $(
                #[command(about = <$variant as Spec>::ABOUT, long_about = <$variant as Spec>::LONG_ABOUT)]
                $variant($variant),
            )*
        }

        impl FaultKind {
            /// Every kind, in catalogue order.
            pub const ALL: [FaultKind; [$(stringify!($variant)),*].len()] = [$(FaultKind::$variant),*];

            /// The kind's name on the command line.
            pub fn name(self) -> &'static str {
                match self { $(FaultKind::$variant => <$variant as Spec>::NAME),* }
            }

            /// What the fault does, in one line.
            pub fn summary(self) -> &'static str {
                match self { $(FaultKind::$variant => <$variant as Spec>::SUMMARY),* }
            }

            /// The class of cause an agent names for it.
            pub fn cause(self) -> &'static str {
                match self { $(FaultKind::$variant => <$variant as Spec>::CAUSE),* }
            }

            /// The console's key for it and what pressing it does, if it has one.
            pub fn key(self) -> Option<(char, &'static str)> {
                match self { $(FaultKind::$variant => <$variant as Spec>::KEY),* }
            }

            /// The fault with its default parameters (what the console's keys inject).
            pub fn default_fault(self) -> Fault {
                match self { $(FaultKind::$variant => Fault::$variant($variant::default())),* }
            }

            /// The fault of this kind from the parameters left in `map` (a drill file's `inject:` after its
            /// `kind`), read as they come so that an error points at the value that caused it.
            ///
            /// # Errors
            /// The map's error: a parameter of the wrong type or one this fault does not take.
            pub fn read_params<'de, A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Fault, A::Error> {
                let de = serde::de::value::MapAccessDeserializer::new(map);
                match self { $(FaultKind::$variant => $variant::deserialize(de).map(Fault::$variant)),* }
            }

            /// Its flags, as `lab fault inject NAME` takes them.
            fn flags(self) -> clap::Command {
                match self {
                    $(FaultKind::$variant => {
                        <$variant as clap::Args>::augment_args(clap::Command::new(<$variant as Spec>::NAME))
                    })*
                }
            }
        }

        impl Fault {
            /// Its kind.
            pub fn kind(&self) -> FaultKind {
                match self { $(Fault::$variant(_) => FaultKind::$variant),* }
            }

            /// Checks the parameters that need no lab to check.
            ///
            /// # Errors
            /// [`ParseError::Fault`] saying what is wrong.
            pub fn validate(&self) -> Result<(), ParseError> {
                match self { $(Fault::$variant(p) => p.validate()),* }
            }

            /// A variant of this fault with its parameters drawn within its kind's ranges, for a lab of
            /// `shape` (each fault's [`Spec::vary`] says its ranges). `draw(lo, hi)` returns a number in
            /// `lo..=hi` (a seeded generator, so a variant can be drawn again).
            pub fn vary(&self, shape: Shape, draw: &mut dyn FnMut(u64, u64) -> u64) -> Fault {
                match self { $(Fault::$variant(p) => Fault::$variant(p.vary(shape, draw))),* }
            }

            /// What it acts on: `storage-1`, `rank-1`, `ranks`.
            pub fn target(&self) -> String {
                match self { $(Fault::$variant(p) => p.target()),* }
            }

            /// The components this fault is on, by the names the lab uses (`storage-1`, `rank-2`, `db-1`).
            pub fn components(&self) -> Vec<String> {
                match self { $(Fault::$variant(p) => p.components()),* }
            }

            /// Its parameters as the placeholders a drill's fixes use: `{server}`, `{rank}`, `{ranks}`,
            /// `{delay}`, `{cpu}`, `{after}`, `{threads}`, `{node_selector}` (and `{target}`, the component
            /// it is on).
            pub fn placeholders(&self) -> Vec<(&'static str, String)> {
                let mut v = vec![("target", self.target())];
                match self { $(Fault::$variant(p) => p.placeholders(&mut v)),* }
                v
            }
        }

        impl fmt::Display for Fault {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self { $(Fault::$variant(p) => p.describe(f)),* }
            }
        }

        $(
            impl Default for $variant {
                /// Its flags' defaults, parsed once: serde fills a drill file's or a ledger's missing
                /// parameters from here on every read.
                fn default() -> Self {
                    static DEFAULTS: std::sync::OnceLock<$variant> = std::sync::OnceLock::new();
                    DEFAULTS.get_or_init(from_defaults).clone()
                }
            }

            impl From<$variant> for Fault {
                fn from(p: $variant) -> Fault {
                    Fault::$variant(p)
                }
            }
        )*
    };
}

catalogue!(
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
);

impl FaultKind {
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

    /// Its parameters and their defaults, as flags: `[("--server", "1"), ("--delay", "300ms"), …]`.
    pub fn parameters(self) -> Vec<(String, String)> {
        self.flags()
            .get_arguments()
            .filter_map(|a| {
                let flag = format!("--{}", a.get_long()?);
                let default: Vec<String> = a
                    .get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect();
                Some((flag, default.join(",")))
            })
            .collect()
    }

    /// Its parameters' names as a drill file's `inject:` writes them (`server`, `node_selector`).
    pub fn fields(self) -> Vec<String> {
        self.flags()
            .get_arguments()
            .filter(|a| a.get_long().is_some())
            .map(|a| a.get_id().to_string())
            .collect()
    }

    /// One line for `lab fault list`: parameters with defaults, and what it does.
    pub fn describe(self) -> String {
        let flags: Vec<String> = self
            .parameters()
            .into_iter()
            .map(|(flag, default)| format!("[{flag} {default}]"))
            .collect();
        format!("{}  {}", flags.join(" "), self.summary())
    }

    /// The kinds the console has keys for, in key order.
    pub fn with_keys() -> impl Iterator<Item = (FaultKind, char, &'static str)> {
        FaultKind::ALL
            .into_iter()
            .filter_map(|k| k.key().map(|(c, says)| (k, c, says)))
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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

impl Shape {
    /// A storage server of this lab, drawn.
    pub fn server(self, pick: &mut dyn FnMut(u64, u64) -> u64) -> u32 {
        pick(0, u64::from(self.storage_servers.max(1) - 1)) as u32
    }

    /// A rank of this lab, drawn.
    pub fn rank(self, pick: &mut dyn FnMut(u64, u64) -> u64) -> u32 {
        pick(0, u64::from(self.ranks.max(1) - 1)) as u32
    }
}

/// The rank count of a fault that scales the job (unplaceable-rank, stuck-rollout).
struct Scaled(u32);

impl Scaled {
    /// What such a fault acts on.
    const TARGET: &'static str = "ranks";

    /// At least 1, at most what a lab can have.
    fn validate(&self) -> Result<(), ParseError> {
        if self.0 == 0 || self.0 > crate::actions::MAX_RANKS {
            return Err(ParseError::Fault(format!(
                "--ranks must be between 1 and {}",
                crate::actions::MAX_RANKS
            )));
        }
        Ok(())
    }

    /// One or two more ranks than GPUs.
    fn vary(shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> u32 {
        shape.gpus + pick(1, 2) as u32
    }

    fn placeholders(&self, v: &mut Vec<(&'static str, String)>) {
        v.push(("ranks", self.0.to_string()));
    }
}

/// A duration as text with its unit (`300ms`, `1.5s`), read where it stands so an error points at it.
mod ms {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", d.as_secs_f64() * 1000.0))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with a unit, such as 300ms or 1.5s")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                crate::parse_duration(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Millicores;

    #[test]
    fn each_kind_splits_into_its_flags_and_what_it_does() {
        let k = FaultKind::SlowStorage;
        let params = k.parameters();
        let flags: Vec<(&str, &str)> = params.iter().map(|(f, d)| (f.as_str(), d.as_str())).collect();
        assert_eq!(
            flags,
            [("--server", "1"), ("--delay", "300ms"), ("--jitter", "0ms")]
        );
        assert_eq!(
            FaultKind::SlowCompute.describe(),
            "[--ranks 1,2]  a CPU hog beside each rank, inside its limit; spec and template unchanged"
        );
        assert_eq!(FaultKind::SyncReplica.fields(), ["node_selector"]);
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
            Fault::SlowStorage(SlowStorage {
                server: 2,
                delay: Duration::from_millis(1500),
                jitter: Duration::ZERO
            })
        );
    }

    #[test]
    fn rank_crash_says_when_its_crashes_come() {
        let f = |after| Fault::RankCrash(RankCrash { rank: 1, after }).to_string();
        assert_eq!(
            f(150),
            "rank-crash on rank-1: crashes as its setting takes effect, then every 150 steps"
        );
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(
            FaultKind::parse("slow-nfs")
                .unwrap_err()
                .to_string()
                .contains("slow-storage")
        );
        let zero = Fault::SlowStorage(SlowStorage {
            server: 1,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
        });
        assert!(zero.validate().is_err());
        let absurd = Fault::SlowStorage(SlowStorage {
            server: 1,
            delay: Duration::from_secs(3600),
            jitter: Duration::ZERO,
        });
        assert!(absurd.validate().unwrap_err().to_string().contains("absurd"));
        assert!(
            Fault::UnplaceableRank(UnplaceableRank { ranks: 0 })
                .validate()
                .is_err()
        );
        assert!(
            Fault::SlowCompute(SlowCompute { ranks: vec![] })
                .validate()
                .is_err()
        );
        assert!(
            Fault::RankCrash(RankCrash { rank: 1, after: 0 })
                .validate()
                .is_err()
        );
        assert!(
            Fault::SlowCompute(SlowCompute { ranks: vec![1, 1] })
                .validate()
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        assert!(
            Fault::SlowCompute(SlowCompute { ranks: vec![1, 2] })
                .validate()
                .is_ok()
        );
        for cpu in [0, 2, 21, 4000] {
            let f = Fault::SlowDisk(SlowDisk {
                server: 1,
                cpu: Millicores(cpu),
            });
            assert!(f.validate().unwrap_err().to_string().contains("--cpu"), "{cpu}");
        }
        assert!(FaultKind::SlowDisk.default_fault().validate().is_ok());
        let f: Fault = serde_json::from_str(r#"{"kind":"slow-disk","server":2,"cpu":"20m"}"#).unwrap();
        assert_eq!(f.target(), "storage-2");
        let placeable = Fault::SyncReplica(SyncReplica {
            node_selector: "lab/disk=ssd".into(),
        });
        assert!(
            placeable
                .validate()
                .unwrap_err()
                .to_string()
                .contains("matches the node")
        );
        let garbage = Fault::SyncReplica(SyncReplica {
            node_selector: "nvme".into(),
        });
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
