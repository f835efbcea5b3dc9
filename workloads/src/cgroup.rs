//! The rank's own CPU cgroup: its CFS limit and throttling counters, for cgroup v1 and v2.
//!
//! The cgroup is found afresh on every read (from `/proc/self/cgroup` and `/proc/self/mountinfo`),
//! because a supervisor may move the process into a cgroup after it started, and a fault changes the
//! quota in place. v1 is preferred when its `cpu` controller is mounted (hybrid hosts also show an empty
//! v2 hierarchy); v2 is used otherwise. Nothing here fails loudly: a host without a readable cgroup simply
//! has no throttling metrics.

use std::path::{Path, PathBuf};

use lab_model::CfsQuota;

/// Which cgroup hierarchy a [`CpuCgroup`] lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The CPU cgroup directory of this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuCgroup {
    pub version: Version,
    pub dir: PathBuf,
}

/// Throttling counters from `cpu.stat`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CpuStat {
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_seconds: f64,
}

/// One line of `/proc/self/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub hierarchy: u32,
    /// Controllers of a v1 hierarchy (`cpu`, `cpuacct`); empty for v2.
    pub controllers: Vec<String>,
    pub path: String,
}

/// One cgroup mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The path inside the hierarchy that is mounted (`/` unless a namespace or bind mount narrows it).
    pub root: String,
    pub mount_point: PathBuf,
    pub version: Version,
    /// For v1, the controllers in the mount's super options.
    pub controllers: Vec<String>,
}

impl CpuCgroup {
    /// This process's CPU cgroup, if one with a readable `cpu.stat` can be found.
    pub fn discover() -> Option<CpuCgroup> {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        resolve(&parse_proc_cgroup(&cgroup), &parse_mountinfo(&mountinfo), |p| {
            p.join("cpu.stat").is_file()
        })
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

/// Picks the CPU cgroup directory from the process's memberships and the cgroup mounts; `exists` says
/// whether a candidate directory holds the files (a parameter so that tests need no real cgroupfs).
pub fn resolve(
    memberships: &[Membership],
    mounts: &[Mount],
    exists: impl Fn(&Path) -> bool,
) -> Option<CpuCgroup> {
    let v1 = memberships
        .iter()
        .find(|m| m.controllers.iter().any(|c| c == "cpu"))
        .and_then(|m| {
            let mount = mounts
                .iter()
                .find(|mt| mt.version == Version::V1 && mt.controllers.iter().any(|c| c == "cpu"))?;
            candidate(mount, &m.path, &exists).map(|dir| CpuCgroup {
                version: Version::V1,
                dir,
            })
        });
    if v1.is_some() {
        return v1;
    }
    let m = memberships
        .iter()
        .find(|m| m.hierarchy == 0 && m.controllers.is_empty())?;
    mounts
        .iter()
        .filter(|mt| mt.version == Version::V2)
        .find_map(|mount| candidate(mount, &m.path, &exists))
        .map(|dir| CpuCgroup {
            version: Version::V2,
            dir,
        })
}

fn candidate(mount: &Mount, path: &str, exists: &impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let rel = |p: &str| p.trim_start_matches('/').to_string();
    let mut tries = Vec::new();
    if let Some(inner) = path.strip_prefix(mount.root.as_str()) {
        tries.push(mount.mount_point.join(rel(inner)));
    }
    // Inside a container without a cgroup namespace the path names the host's hierarchy while the mount
    // shows only the container's part; try the path as is, then the mount itself.
    tries.push(mount.mount_point.join(rel(path)));
    tries.push(mount.mount_point.clone());
    tries.into_iter().find(|d| exists(d))
}

/// Parses `/proc/self/cgroup` (`hierarchy:controllers:path` per line).
pub fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let hierarchy = parts.next()?.parse().ok()?;
            let controllers = parts.next()?;
            let path = parts.next()?.to_string();
            let controllers = controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(|c| c.strip_prefix("name=").unwrap_or(c).to_string())
                .collect();
            Some(Membership {
                hierarchy,
                controllers,
                path,
            })
        })
        .collect()
}

/// Parses the cgroup mounts out of `/proc/self/mountinfo`.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let root = unescape(fields.get(3)?);
            let mount_point = PathBuf::from(unescape(fields.get(4)?));
            let mut r = right.split(' ');
            let fstype = r.next()?;
            let _source = r.next();
            let options = r.next().unwrap_or_default();
            let version = match fstype {
                "cgroup" => Version::V1,
                "cgroup2" => Version::V2,
                _ => return None,
            };
            let controllers = if version == Version::V1 {
                options.split(',').map(str::to_string).collect()
            } else {
                Vec::new()
            };
            Some(Mount {
                root,
                mount_point,
                version,
                controllers,
            })
        })
        .collect()
}

fn unescape(s: &str) -> String {
    // mountinfo escapes space, tab, newline and backslash as \040 style octal.
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal =
            (b[i] == b'\\' && b.len() >= i + 4 && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)))
                .then(|| {
                    b[i + 1..i + 4]
                        .iter()
                        .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'))
                })
                .and_then(|v| u8::try_from(v).ok());
        if let Some(v) = octal {
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `cpu.stat` of either version: v1 reports `throttled_time` in nanoseconds, v2 `throttled_usec`.
pub fn parse_cpu_stat(text: &str) -> CpuStat {
    let mut s = CpuStat::default();
    let mut usec = None;
    let mut nsec = None;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(k), Some(v)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(v) = v.parse::<u64>() else { continue };
        match k {
            "nr_periods" => s.nr_periods = v,
            "nr_throttled" => s.nr_throttled = v,
            "throttled_usec" => usec = Some(v),
            "throttled_time" => nsec = Some(v),
            _ => {}
        }
    }
    s.throttled_seconds = match (usec, nsec) {
        (Some(us), _) => us as f64 / 1e6,
        (None, Some(ns)) => ns as f64 / 1e9,
        (None, None) => 0.0,
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_CGROUP: &str = "\
12:memory:/lab/rank-1
11:cpu,cpuacct:/lab/rank-1
4:pids:/user.slice
1:name=systemd:/user.slice/session-1.scope
0::/user.slice/session-1.scope
";
    const V1_MOUNTINFO: &str = "\
25 30 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
31 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
32 25 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,memory
";
    const V2_CGROUP: &str = "0::/kubepods.slice/pod123/cri-abc\n";
    const V2_MOUNTINFO: &str = "\
1000 900 0:26 /kubepods.slice/pod123/cri-abc /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
1001 900 0:27 / /proc rw - proc proc rw
";

    #[test]
    fn finds_the_v1_cpu_cgroup_on_a_hybrid_host() {
        let got = resolve(
            &parse_proc_cgroup(V1_CGROUP),
            &parse_mountinfo(V1_MOUNTINFO),
            |p| p == Path::new("/sys/fs/cgroup/cpu,cpuacct/lab/rank-1"),
        );
        assert_eq!(
            got,
            Some(CpuCgroup {
                version: Version::V1,
                dir: PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/lab/rank-1")
            })
        );
    }

    #[test]
    fn finds_a_namespaced_v2_cgroup() {
        let got = resolve(
            &parse_proc_cgroup(V2_CGROUP),
            &parse_mountinfo(V2_MOUNTINFO),
            |p| p == Path::new("/sys/fs/cgroup"),
        );
        assert_eq!(
            got,
            Some(CpuCgroup {
                version: Version::V2,
                dir: PathBuf::from("/sys/fs/cgroup")
            })
        );
        // With a cgroup namespace the process sees itself at the root.
        let ns = resolve(
            &parse_proc_cgroup("0::/\n"),
            &parse_mountinfo(V2_MOUNTINFO),
            |p| p == Path::new("/sys/fs/cgroup"),
        );
        assert_eq!(ns.map(|c| c.dir), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(
            resolve(
                &parse_proc_cgroup(V2_CGROUP),
                &parse_mountinfo(V2_MOUNTINFO),
                |_| false
            ),
            None
        );
    }

    #[test]
    fn parses_v1_and_v2_cpu_stat() {
        let v1 = parse_cpu_stat("nr_periods 33\nnr_throttled 30\nthrottled_time 2500000000\n");
        assert_eq!(
            v1,
            CpuStat {
                nr_periods: 33,
                nr_throttled: 30,
                throttled_seconds: 2.5
            }
        );
        let v2 = parse_cpu_stat(
            "usage_usec 8000\nuser_usec 5000\nsystem_usec 3000\nnr_periods 10\nnr_throttled 4\nthrottled_usec 1500000\n",
        );
        assert_eq!(
            v2,
            CpuStat {
                nr_periods: 10,
                nr_throttled: 4,
                throttled_seconds: 1.5
            }
        );
        assert_eq!(parse_cpu_stat("garbage\n"), CpuStat::default());
    }

    #[test]
    fn unescapes_mount_points() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/end\\04"), "/end\\04");
        assert_eq!(unescape("/big\\777"), "/big\\777");
    }
}
