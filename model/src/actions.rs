//! The values a runtime's actions take and report, which faults, remediations and checks speak whatever the
//! runtime: a storage delay and the path it took, a rank's CPU limits, and the lab's size limits.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Millicores;

/// The most ranks a lab runs (the rank count and the world size), on any runtime.
pub const MAX_RANKS: u32 = 64;

/// Checks the name of a setting of one rank: a `LAB_*` environment variable of upper-case letters,
/// digits and underscores (the rank's own flags; nothing else of its environment).
///
/// # Errors
/// What is wrong with it, for the user.
pub fn check_rank_env_name(name: &str) -> Result<(), String> {
    let ok = name.len() > 4
        && name.starts_with("LAB_")
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a rank setting: use a LAB_* variable of upper-case letters, digits and _ (e.g. LAB_DEVICE_FAULT_AFTER)"
        ))
    }
}
/// The most storage servers a lab runs, on any runtime.
pub const MAX_STORAGE_SERVERS: u32 = 16;

/// Steps before a rank pod's first simulated device failure under rank-crash (`lab-rank
/// --device-fault-first`'s default); the later ones come after the fault's `--after` steps.
pub const DEVICE_FAULT_FIRST_STEPS: u64 = 25;

/// The setting that makes a rank's simulated accelerator fail (`lab-rank --device-fault-after`).
pub const DEVICE_FAULT_SETTING: &str = "LAB_DEVICE_FAULT_AFTER";

/// Whether setting rank setting `name` to `value` fails the rank's device as it takes effect: on Kubernetes
/// a rank reads its settings when its container starts, so the restart that brings a device fault in is
/// the device's first failure (the rank exits with [`DEVICE_FAULT_EXIT`], told so by `SIGUSR1`), not a
/// stop as asked followed by a crash a few seconds later.
#[must_use]
pub fn fails_device_now(name: &str, value: Option<&str>) -> bool {
    name == DEVICE_FAULT_SETTING
        && value
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
}

/// The exit code of a rank whose (simulated) accelerator failed: rank-crash's own, which its peers' exit on
/// the collective error (4) is not.
pub const DEVICE_FAULT_EXIT: u8 = 6;

/// An added delay on the network path to one storage server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delay {
    /// Added to every request (and, over a proxy, to every response).
    #[serde(with = "duration_ms")]
    pub delay: Duration,
    /// Uniform jitter, plus or minus.
    #[serde(with = "duration_ms")]
    pub jitter: Duration,
}

/// How a delay reached the path to a storage server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DelayPath {
    /// The lab's userspace latency proxy in front of the server.
    Proxy,
    /// `tc netem` in the server's network namespace.
    Netem,
}

impl std::fmt::Display for DelayPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DelayPath::Proxy => "latency proxy",
            DelayPath::Netem => "tc netem",
        })
    }
}

/// A rank's CPU limit: in force now, in its own spec, and in the workload's template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuLimits {
    pub live: Option<Millicores>,
    pub spec: Option<Millicores>,
    pub template: Millicores,
}

mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1000.0)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(d)?;
        Duration::try_from_secs_f64(ms / 1000.0).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_device_fault_of_some_steps_fails_the_device_now() {
        assert!(fails_device_now(DEVICE_FAULT_SETTING, Some("150")));
        assert!(fails_device_now(DEVICE_FAULT_SETTING, Some(" 7\n")));
        assert!(!fails_device_now(DEVICE_FAULT_SETTING, Some("0")));
        assert!(!fails_device_now(DEVICE_FAULT_SETTING, Some("many")));
        assert!(!fails_device_now(DEVICE_FAULT_SETTING, None));
        assert!(!fails_device_now("LAB_LOG_EVERY", Some("150")));
    }
}
