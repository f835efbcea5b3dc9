//! CPU quantities and durations written the way Kubernetes users write them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ParseError;

/// A CPU amount in millicores (`400m` = 0.4 of a core), the unit of Kubernetes CPU limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Millicores(pub u32);

impl Millicores {
    /// The largest CPU quantity the lab accepts (64 cores); anything above is a typing mistake.
    pub const MAX: Millicores = Millicores(64_000);

    /// As a fraction of one core.
    pub fn cores(self) -> f64 {
        f64::from(self.0) / 1000.0
    }

    /// The CFS quota in microseconds for a given period, e.g. 150m over 100 ms is 15 000 µs.
    pub fn cfs_quota_us(self, period_us: u64) -> u64 {
        u64::from(self.0) * period_us / 1000
    }

    /// The quantity a CFS quota and period stand for, rounded to the nearest millicore.
    pub fn from_cfs(quota_us: u64, period_us: u64) -> Option<Millicores> {
        if period_us == 0 {
            return None;
        }
        let m = (quota_us * 1000 + period_us / 2) / period_us;
        u32::try_from(m).ok().map(Millicores)
    }
}

/// A CFS bandwidth limit as a cgroup's files state it: `quota_us` of CPU time in every `period_us`.
///
/// Both cgroup versions are read here, for the rank that reports its own limit and for the local runtime
/// that sets and checks its ranks' limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CfsQuota {
    pub quota_us: u64,
    pub period_us: u64,
}

impl CfsQuota {
    /// The period the kernel uses when none is written.
    pub const DEFAULT_PERIOD_US: u64 = 100_000;

    /// Reads v2 `cpu.max` (`"40000 100000"`); `None` when unlimited (`"max 100000"`) or unreadable.
    pub fn from_cpu_max(text: &str) -> Option<CfsQuota> {
        let mut it = text.split_whitespace();
        let quota = it.next()?;
        let period_us = match it.next() {
            Some(p) => p.parse().ok()?,
            None => Self::DEFAULT_PERIOD_US,
        };
        if quota == "max" {
            return None;
        }
        Self::limit(quota.parse().ok()?, period_us)
    }

    /// Reads v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`; `None` when unlimited (quota `-1`) or unreadable.
    pub fn from_v1(quota: &str, period: &str) -> Option<CfsQuota> {
        let quota_us: i64 = quota.trim().parse().ok()?;
        let period_us: u64 = period.trim().parse().ok()?;
        Self::limit(u64::try_from(quota_us).ok()?, period_us)
    }

    fn limit(quota_us: u64, period_us: u64) -> Option<CfsQuota> {
        (quota_us > 0 && period_us > 0).then_some(CfsQuota { quota_us, period_us })
    }

    /// The limit in cores, exactly (`15000` of `100000` is 0.15).
    pub fn cores(self) -> f64 {
        self.quota_us as f64 / self.period_us as f64
    }

    /// The limit as a CPU quantity, rounded to the nearest millicore.
    pub fn millicores(self) -> Option<Millicores> {
        Millicores::from_cfs(self.quota_us, self.period_us)
    }
}

impl fmt::Display for Millicores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}m", self.0)
    }
}

impl FromStr for Millicores {
    type Err = ParseError;

    /// Accepts `150m`, `0.4`, `2`; refuses zero, negatives, and more than [`Millicores::MAX`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseError::Cpu { input: s.to_string() };
        let t = s.trim();
        let milli = if let Some(m) = t.strip_suffix('m') {
            m.parse::<u64>().map_err(|_| err())?
        } else {
            let cores: f64 = t.parse().map_err(|_| err())?;
            if !cores.is_finite() || cores < 0.0 {
                return Err(err());
            }
            (cores * 1000.0).round() as u64
        };
        if milli == 0 || milli > u64::from(Self::MAX.0) {
            return Err(err());
        }
        Ok(Millicores(milli as u32))
    }
}

impl TryFrom<String> for Millicores {
    type Error = ParseError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Millicores> for String {
    fn from(m: Millicores) -> String {
        m.to_string()
    }
}

/// Parses `300ms`, `1.5s`, `2m`, `1h`, `250us`. A bare number is refused: the unit matters too much.
///
/// # Errors
/// [`ParseError::Duration`] when the text has no known unit or the number is not finite and non-negative.
pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    let err = || ParseError::Duration { input: s.to_string() };
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).ok_or_else(err)?;
    let (num, unit) = t.split_at(split);
    let n: f64 = num.trim().parse().map_err(|_| err())?;
    if !n.is_finite() || n < 0.0 {
        return Err(err());
    }
    let secs = match unit {
        "us" | "µs" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(err()),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| err())
}

/// Formats a duration the way the lab prints it: `3 ms`, `488 ms`, `1.2 s`, `4m13s`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        let s = d.as_secs();
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cfs_limits_of_both_cgroup_versions() {
        let q = |quota_us, period_us| Some(CfsQuota { quota_us, period_us });
        assert_eq!(CfsQuota::from_cpu_max("40000 100000\n"), q(40_000, 100_000));
        assert_eq!(CfsQuota::from_cpu_max("40000"), q(40_000, 100_000));
        for unlimited in [
            "max 100000\n",
            "max",
            "garbage",
            "",
            "0 100000",
            "40000 0",
            "40000 x",
        ] {
            assert_eq!(CfsQuota::from_cpu_max(unlimited), None, "{unlimited:?}");
        }
        assert_eq!(CfsQuota::from_v1("15000\n", "100000\n"), q(15_000, 100_000));
        for (quota, period) in [
            ("-1\n", "100000\n"),
            ("junk", "100000"),
            ("15000", ""),
            ("0", "100000"),
        ] {
            assert_eq!(CfsQuota::from_v1(quota, period), None, "{quota:?} {period:?}");
        }
        let l = CfsQuota::from_cpu_max("40000 100000").unwrap();
        assert_eq!((l.cores(), l.millicores()), (0.4, Some(Millicores(400))));
        let l = CfsQuota::from_v1("15000", "100000").unwrap();
        assert_eq!((l.cores(), l.millicores()), (0.15, Some(Millicores(150))));
    }

    #[test]
    fn cpu_quantities() {
        assert_eq!("150m".parse::<Millicores>(), Ok(Millicores(150)));
        assert_eq!("0.4".parse::<Millicores>(), Ok(Millicores(400)));
        assert_eq!("2".parse::<Millicores>(), Ok(Millicores(2000)));
        for bad in ["", "0", "0m", "-1", "abc", "150 m", "1e9", "NaN", "65"] {
            assert!(bad.parse::<Millicores>().is_err(), "{bad} should be refused");
        }
        assert_eq!(Millicores(400).to_string(), "400m");
    }

    #[test]
    fn cfs_round_trip() {
        assert_eq!(Millicores(150).cfs_quota_us(100_000), 15_000);
        assert_eq!(Millicores::from_cfs(15_000, 100_000), Some(Millicores(150)));
        assert_eq!(Millicores::from_cfs(40_000, 100_000), Some(Millicores(400)));
        assert_eq!(Millicores::from_cfs(1, 0), None);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0ms"), Ok(Duration::ZERO));
        for bad in ["300", "ms", "-1s", "3 parsecs", "inf s"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn formatting() {
        assert_eq!(format_duration(Duration::from_micros(2500)), "2.5 ms");
        assert_eq!(format_duration(Duration::from_millis(488)), "488 ms");
        assert_eq!(format_duration(Duration::from_millis(1200)), "1.2 s");
        assert_eq!(format_duration(Duration::from_secs(253)), "4m13s");
    }
}
