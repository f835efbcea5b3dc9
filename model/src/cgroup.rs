//! Reading cgroups, without touching them: the lines of `/proc/<pid>/cgroup` and `/proc/<pid>/mountinfo`,
//! `cpu.stat`, and which directory of which hierarchy holds a process's CPU controller.
//!
//! The rank reads its own throttling with these, and the local runtime finds the cgroup systemd delegated to
//! it. Only text goes in and out (the caller reads the files), so every layout is testable from fixtures: a
//! v1 host, a hybrid one (v1 `cpu` plus an empty v2 hierarchy), a v2 laptop, a container with a cgroup
//! namespace.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Which cgroup interface: v1 (`cpu.cfs_quota_us` / `cpu.cfs_period_us`) or v2 (`cpu.max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Version {
    V1,
    V2,
}

/// Throttling counters from `cpu.stat`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CpuStat {
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_seconds: f64,
}

/// One line of `/proc/<pid>/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub hierarchy: u32,
    /// Controllers of a v1 hierarchy (`cpu`, `cpuacct`); empty for v2.
    pub controllers: Vec<String>,
    pub path: String,
}

/// One cgroup mount from `/proc/<pid>/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The path inside the hierarchy that is mounted (`/` unless a namespace or bind mount narrows it).
    pub root: String,
    pub mount_point: PathBuf,
    pub version: Version,
    /// For v1, the controllers in the mount's super options.
    pub controllers: Vec<String>,
}

/// Picks the CPU cgroup directory from the process's memberships and the cgroup mounts: the v1 `cpu`
/// hierarchy when it is mounted (hybrid hosts also show an empty v2 hierarchy), else the v2 one. `exists`
/// says whether a candidate directory holds the files (a parameter so that tests need no real cgroupfs).
pub fn resolve(
    memberships: &[Membership],
    mounts: &[Mount],
    exists: impl Fn(&Path) -> bool,
) -> Option<(Version, PathBuf)> {
    let v1 = memberships
        .iter()
        .find(|m| m.controllers.iter().any(|c| c == "cpu"))
        .and_then(|m| {
            let mount = mounts
                .iter()
                .find(|mt| mt.version == Version::V1 && mt.controllers.iter().any(|c| c == "cpu"))?;
            candidate(mount, &m.path, &exists).map(|dir| (Version::V1, dir))
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
        .map(|dir| (Version::V2, dir))
}

/// The directory of the v2 group a process is in, from its memberships and the v2 mounts: its path as a
/// mount shows it, without guessing (a process whose group no mount shows gets `None`). The local runtime
/// finds the scope systemd delegated to it this way.
pub fn v2_dir(memberships: &[Membership], mounts: &[Mount]) -> Option<PathBuf> {
    let m = memberships
        .iter()
        .find(|m| m.hierarchy == 0 && m.controllers.is_empty())?;
    mounts
        .iter()
        .filter(|mt| mt.version == Version::V2)
        .find_map(|mt| {
            let inner = if mt.root == "/" {
                m.path.as_str()
            } else {
                // "/a" is inside "/a" and "/a/b", not inside "/ab".
                m.path
                    .strip_prefix(mt.root.as_str())
                    .filter(|rest| rest.is_empty() || rest.starts_with('/'))?
            };
            Some(mt.mount_point.join(inner.trim_start_matches('/')))
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

/// Parses `/proc/<pid>/cgroup` (`hierarchy:controllers:path` per line).
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

/// Parses the cgroup mounts out of `/proc/<pid>/mountinfo`.
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
            Some((
                Version::V1,
                PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/lab/rank-1")
            ))
        );
    }

    #[test]
    fn finds_a_namespaced_v2_cgroup() {
        let got = resolve(
            &parse_proc_cgroup(V2_CGROUP),
            &parse_mountinfo(V2_MOUNTINFO),
            |p| p == Path::new("/sys/fs/cgroup"),
        );
        assert_eq!(got, Some((Version::V2, PathBuf::from("/sys/fs/cgroup"))));
        // With a cgroup namespace the process sees itself at the root.
        let ns = resolve(
            &parse_proc_cgroup("0::/\n"),
            &parse_mountinfo(V2_MOUNTINFO),
            |p| p == Path::new("/sys/fs/cgroup"),
        );
        assert_eq!(ns.map(|c| c.1), Some(PathBuf::from("/sys/fs/cgroup")));
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
    fn finds_the_v2_group_a_process_is_in_without_guessing() {
        const LAPTOP: &str = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/lab.scope\n";
        const LAPTOP_MOUNTS: &str = "\
30 1 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
";
        assert_eq!(
            v2_dir(&parse_proc_cgroup(LAPTOP), &parse_mountinfo(LAPTOP_MOUNTS)),
            Some(PathBuf::from(
                "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/lab.scope"
            ))
        );
        // A narrowed mount shows only its part of the hierarchy.
        assert_eq!(
            v2_dir(&parse_proc_cgroup(V2_CGROUP), &parse_mountinfo(V2_MOUNTINFO)),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(
            v2_dir(
                &parse_proc_cgroup("0::/kubepods.slice/pod123/cri-abcd\n"),
                &parse_mountinfo(V2_MOUNTINFO)
            ),
            None,
            "a sibling whose name starts the same is not inside the mount"
        );
        // A v1 host's process has no v2 membership of its own to adopt.
        assert_eq!(
            v2_dir(
                &parse_proc_cgroup("11:cpu,cpuacct:/lab\n"),
                &parse_mountinfo(V1_MOUNTINFO)
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
