//! The rank's own CPU cgroup: its CFS limit and throttling counters, for cgroup v1 and v2.
//!
//! The cgroup is found afresh on every read (from `/proc/self/cgroup` and `/proc/self/mountinfo`, parsed by
//! [`lab_model::cgroup`]), because a supervisor may move the process into a cgroup after it started, and a
//! fault changes the quota in place. Nothing here fails loudly: a host without a readable cgroup simply has
//! no throttling metrics.

use std::path::PathBuf;

use lab_model::CfsQuota;
pub use lab_model::cgroup::{CpuStat, Version};
use lab_model::cgroup::{parse_cpu_stat, parse_mountinfo, parse_proc_cgroup, resolve};

/// The CPU cgroup directory of this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuCgroup {
    pub version: Version,
    pub dir: PathBuf,
}

impl CpuCgroup {
    /// This process's CPU cgroup, if one with a readable `cpu.stat` can be found.
    pub fn discover() -> Option<CpuCgroup> {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let (version, dir) = resolve(&parse_proc_cgroup(&cgroup), &parse_mountinfo(&mountinfo), |p| {
            p.join("cpu.stat").is_file()
        })?;
        Some(CpuCgroup { version, dir })
    }

    /// The throttling counters now.
    ///
    /// # Errors
    /// When `cpu.stat` cannot be read.
    pub fn stat(&self) -> std::io::Result<CpuStat> {
        let text = std::fs::read_to_string(self.dir.join("cpu.stat"))?;
        Ok(parse_cpu_stat(&text))
    }

    /// The CFS limit in cores, `None` when unlimited.
    ///
    /// # Errors
    /// When the limit files cannot be read (the root v2 cgroup has no `cpu.max`: that reads as `Ok(None)`).
    pub fn limit_cores(&self) -> std::io::Result<Option<f64>> {
        match self.version {
            Version::V1 => {
                let quota = std::fs::read_to_string(self.dir.join("cpu.cfs_quota_us"))?;
                let period = std::fs::read_to_string(self.dir.join("cpu.cfs_period_us"))?;
                Ok(CfsQuota::from_v1(&quota, &period).map(CfsQuota::cores))
            }
            Version::V2 => match std::fs::read_to_string(self.dir.join("cpu.max")) {
                Ok(text) => Ok(CfsQuota::from_cpu_max(&text).map(CfsQuota::cores)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_limit_and_counters_of_a_v2_group_from_its_files() {
        // A plain directory with a v2 group's files: only the reading is exercised.
        let t = tempfile::tempdir().unwrap();
        let cg = CpuCgroup {
            version: Version::V2,
            dir: t.path().to_path_buf(),
        };
        assert_eq!(
            cg.limit_cores().unwrap(),
            None,
            "no cpu.max: the root group, unlimited"
        );
        std::fs::write(t.path().join("cpu.max"), "15000 100000\n").unwrap();
        assert_eq!(cg.limit_cores().unwrap(), Some(0.15));
        std::fs::write(t.path().join("cpu.max"), "max 100000\n").unwrap();
        assert_eq!(cg.limit_cores().unwrap(), None);
        std::fs::write(
            t.path().join("cpu.stat"),
            "nr_periods 10\nnr_throttled 4\nthrottled_usec 1500000\n",
        )
        .unwrap();
        assert_eq!(cg.stat().unwrap().nr_throttled, 4);
    }
}
