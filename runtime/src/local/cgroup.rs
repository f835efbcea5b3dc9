//! CPU limits as cgroup quotas: v1 (`cpu.cfs_quota_us` / `cpu.cfs_period_us`) or v2 (`cpu.max`).
//!
//! Each lab gets one parent group (`straggler-lab.<name>`) under the CPU controller's root, and each limited
//! process a child (`rank-<r>`, `storage-<i>`). Changing a rank's quota is the in-place resize the
//! throttled-rank fault performs; a storage server's group is the slow-disk fault's, with a longer period
//! ([`STORAGE_PERIOD_US`]). `lab down` removes the groups, after the processes in them are gone.

use std::fs;
use std::path::{Path, PathBuf};

use lab_model::{CfsQuota, Millicores};
use serde::{Deserialize, Serialize};

/// The CFS period the lab uses for ranks: 100 ms, Kubernetes' default.
pub const PERIOD_US: u64 = 100_000;

/// The CFS period of a storage server's group (the slow-disk fault): 382 ms.
///
/// Long, so that a small share binds: at the job's load a volume server uses some 20 ms of CPU a second,
/// and the kernel's smallest quota (1 ms) in a 100 ms period is already 10 ms a second, which a quiet
/// machine's server may not exceed by much. In 382 ms, 6m is a 2.3 ms budget, spent early in each period;
/// a request that arrives after it waits for the next period, up to 382 ms. Shorter than the readiness
/// probe's 1 s timeout, so the server stays Ready as a slow disk does; and not a divisor of the lab's one-second scrape,
/// so the scrape's direct probe lands on every phase of the period (1000 / 382 ≈ 2.618, the golden ratio
/// plus two) rather than always on the same one.
pub const STORAGE_PERIOD_US: u64 = 382_000;

/// The CFS period of instance `name`'s group: [`STORAGE_PERIOD_US`] for a storage server, else [`PERIOD_US`].
pub fn period_us(name: &str) -> u64 {
    if name.starts_with("storage-") {
        STORAGE_PERIOD_US
    } else {
        PERIOD_US
    }
}

/// Where the cgroup filesystem is mounted unless `lab up` is told otherwise.
pub const SYS_CGROUP: &str = "/sys/fs/cgroup";

/// Every lab's cgroup is named with this prefix and the lab's name (lab names have no dots, so no other
/// group can be mistaken for a lab's).
pub const GROUP_PREFIX: &str = "straggler-lab.";

/// The cgroup name of lab `lab`.
pub fn group_name(lab: &str) -> String {
    format!("{GROUP_PREFIX}{lab}")
}

/// Which cgroup interface the CPU controller offers here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CgroupVersion {
    V1,
    V2,
}

/// Where the lab's groups live, once found to be writable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cgroups {
    pub version: CgroupVersion,
    /// The lab's own parent group.
    pub lab_root: PathBuf,
}

/// Why CPU limits cannot be enforced with cgroups here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

/// The root of the CPU controller: a v1 `cpu` hierarchy, or the v2 unified hierarchy with `cpu` enabled.
fn controller_root(sys: &Path) -> Option<(CgroupVersion, PathBuf)> {
    for name in ["cpu", "cpu,cpuacct"] {
        let p = sys.join(name);
        if p.join("cpu.cfs_quota_us").exists() {
            return Some((CgroupVersion::V1, p));
        }
    }
    let controllers = fs::read_to_string(sys.join("cgroup.controllers")).ok()?;
    controllers
        .split_whitespace()
        .any(|c| c == "cpu")
        .then(|| (CgroupVersion::V2, sys.to_path_buf()))
}

impl Cgroups {
    /// Finds the CPU controller under `sys` (normally `/sys/fs/cgroup`) and creates the lab's parent group.
    ///
    /// # Errors
    /// [`Unavailable`] with the reason when there is no CPU controller or it is not writable.
    pub fn create(sys: &Path, lab: &str) -> Result<Cgroups, Unavailable> {
        let (version, root) = controller_root(sys)
            .ok_or_else(|| Unavailable(format!("no cgroup CPU controller under {}", sys.display())))?;
        let lab_root = root.join(group_name(lab));
        fs::create_dir_all(&lab_root)
            .map_err(|e| Unavailable(format!("cannot create {}: {e}", lab_root.display())))?;
        if version == CgroupVersion::V2 {
            // Children only get a cpu.max when the parent delegates the controller to them.
            fs::write(lab_root.join("cgroup.subtree_control"), "+cpu").map_err(|e| {
                Unavailable(format!(
                    "cannot enable the cpu controller in {}: {e}",
                    lab_root.display()
                ))
            })?;
        }
        Ok(Cgroups { version, lab_root })
    }

    /// The group of instance `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.lab_root.join(name)
    }

    /// Creates instance `name`'s group with CPU limit `cpu`.
    ///
    /// # Errors
    /// The I/O error, when the group cannot be made or written.
    pub fn create_child(&self, name: &str, cpu: Millicores) -> std::io::Result<PathBuf> {
        let p = self.path(name);
        fs::create_dir_all(&p)?;
        self.set_limit(name, cpu)?;
        Ok(p)
    }

    /// Sets instance `name`'s CPU limit in place.
    ///
    /// # Errors
    /// The I/O error, when the files cannot be written.
    pub fn set_limit(&self, name: &str, cpu: Millicores) -> std::io::Result<()> {
        let p = self.path(name);
        let period = period_us(name);
        // The kernel refuses a quota under 1 ms.
        let quota = cpu.cfs_quota_us(period).max(1000);
        match self.version {
            CgroupVersion::V1 => {
                fs::write(p.join("cpu.cfs_period_us"), period.to_string())?;
                fs::write(p.join("cpu.cfs_quota_us"), quota.to_string())
            }
            CgroupVersion::V2 => fs::write(p.join("cpu.max"), format!("{quota} {period}")),
        }
    }

    /// Lifts instance `name`'s CPU limit (its group stays, unlimited, until the lab goes down).
    ///
    /// # Errors
    /// The I/O error, when the files cannot be written.
    pub fn set_unlimited(&self, name: &str) -> std::io::Result<()> {
        let p = self.path(name);
        match self.version {
            CgroupVersion::V1 => fs::write(p.join("cpu.cfs_quota_us"), "-1"),
            CgroupVersion::V2 => fs::write(p.join("cpu.max"), format!("max {}", period_us(name))),
        }
    }

    /// Reads instance `name`'s CPU limit as the kernel enforces it (`None`: unlimited).
    ///
    /// # Errors
    /// The I/O error, when the files cannot be read.
    pub fn limit(&self, name: &str) -> std::io::Result<Option<Millicores>> {
        let p = self.path(name);
        match self.version {
            CgroupVersion::V1 => {
                let q = fs::read_to_string(p.join("cpu.cfs_quota_us"))?;
                let per = fs::read_to_string(p.join("cpu.cfs_period_us"))?;
                Ok(CfsQuota::from_v1(&q, &per).and_then(CfsQuota::millicores))
            }
            CgroupVersion::V2 => {
                let max = fs::read_to_string(p.join("cpu.max"))?;
                Ok(CfsQuota::from_cpu_max(&max).and_then(CfsQuota::millicores))
            }
        }
    }

    /// Moves process `pid` (all its threads) into instance `name`'s group.
    ///
    /// # Errors
    /// The I/O error, when the process cannot be moved.
    pub fn add_process(&self, name: &str, pid: u32) -> std::io::Result<()> {
        fs::write(self.path(name).join("cgroup.procs"), pid.to_string())
    }

    /// The processes in instance `name`'s group.
    pub fn processes(&self, name: &str) -> Vec<u32> {
        read_procs(&self.path(name))
    }

    /// Removes every instance group and then the lab's group. Groups that still hold processes stay, and
    /// are named in the error.
    ///
    /// # Errors
    /// A message naming the groups that could not be removed.
    pub fn remove_all(&self) -> Result<(), String> {
        remove_tree(&self.lab_root)
    }
}

/// Removes a lab's cgroup tree (children first). Missing groups are fine.
///
/// # Errors
/// A message naming the groups that could not be removed.
pub fn remove_tree(root: &Path) -> Result<(), String> {
    if !root.exists() {
        return Ok(());
    }
    let mut failed = Vec::new();
    if let Ok(entries) = fs::read_dir(root) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false)
                && let Err(err) = fs::remove_dir(e.path())
            {
                failed.push(format!("{} ({err})", e.path().display()));
            }
        }
    }
    if let Err(err) = fs::remove_dir(root) {
        failed.push(format!("{} ({err})", root.display()));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("cgroups left behind: {}", failed.join(", ")))
    }
}

/// Lab `lab`'s own group under the CPU controller of `sys`, if it exists. `lab down` looks here when the
/// lab's record, which names the group, is unreadable: the group must not outlive the lab either way.
pub fn find_lab_group(sys: &Path, lab: &str) -> Option<PathBuf> {
    let (_, root) = controller_root(sys)?;
    let group = root.join(group_name(lab));
    group.is_dir().then_some(group)
}

/// Every `straggler-lab.*` group under the CPU controller of `sys`, for leak checks.
pub fn lab_groups(sys: &Path) -> Vec<PathBuf> {
    let Some((_, root)) = controller_root(sys) else {
        return Vec::new();
    };
    fs::read_dir(root)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(GROUP_PREFIX))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// The processes in a lab's group and in every group under it.
pub fn tree_processes(root: &Path) -> Vec<u32> {
    let mut pids = read_procs(root);
    if let Ok(entries) = fs::read_dir(root) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                pids.extend(read_procs(&e.path()));
            }
        }
    }
    pids
}

fn read_procs(group: &Path) -> Vec<u32> {
    fs::read_to_string(group.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_v1_controller_in_a_fake_tree_and_writes_quota() {
        // A plain directory shaped like a v1 hierarchy: the kernel is not involved, only the file layout.
        let t = tempfile::tempdir().unwrap();
        let cpu = t.path().join("cpu");
        fs::create_dir_all(&cpu).unwrap();
        fs::write(cpu.join("cpu.cfs_quota_us"), "-1").unwrap();
        let cg = Cgroups::create(t.path(), "x").unwrap();
        assert_eq!(cg.version, CgroupVersion::V1);
        cg.create_child("rank-1", Millicores(400)).unwrap();
        assert_eq!(cg.limit("rank-1").unwrap(), Some(Millicores(400)));
        cg.set_limit("rank-1", Millicores(150)).unwrap();
        assert_eq!(
            fs::read_to_string(cg.path("rank-1").join("cpu.cfs_quota_us")).unwrap(),
            "15000"
        );
    }

    #[test]
    fn a_storage_servers_group_gets_the_long_period() {
        let t = tempfile::tempdir().unwrap();
        let cpu = t.path().join("cpu");
        fs::create_dir_all(&cpu).unwrap();
        fs::write(cpu.join("cpu.cfs_quota_us"), "-1").unwrap();
        let cg = Cgroups::create(t.path(), "x").unwrap();
        cg.create_child("storage-1", Millicores(6)).unwrap();
        let read = |f: &str| fs::read_to_string(cg.path("storage-1").join(f)).unwrap();
        assert_eq!(read("cpu.cfs_period_us"), "382000");
        assert_eq!(read("cpu.cfs_quota_us"), "2292");
        assert_eq!(cg.limit("storage-1").unwrap(), Some(Millicores(6)));
        cg.set_unlimited("storage-1").unwrap();
        assert_eq!(cg.limit("storage-1").unwrap(), None);

        // cgroup v2 (a laptop, a kind node): one file, "QUOTA PERIOD".
        let t2 = tempfile::tempdir().unwrap();
        fs::write(t2.path().join("cgroup.controllers"), "cpuset cpu io memory").unwrap();
        let cg2 = Cgroups::create(t2.path(), "x").unwrap();
        assert_eq!(cg2.version, CgroupVersion::V2);
        cg2.create_child("storage-1", Millicores(6)).unwrap();
        assert_eq!(
            fs::read_to_string(cg2.path("storage-1").join("cpu.max")).unwrap(),
            "2292 382000"
        );
        cg2.create_child("rank-1", Millicores(400)).unwrap();
        assert_eq!(
            fs::read_to_string(cg2.path("rank-1").join("cpu.max")).unwrap(),
            "40000 100000"
        );
    }

    #[test]
    fn a_lab_group_is_found_by_name_alone() {
        let t = tempfile::tempdir().unwrap();
        let cpu = t.path().join("cpu");
        fs::create_dir_all(&cpu).unwrap();
        fs::write(cpu.join("cpu.cfs_quota_us"), "-1").unwrap();
        assert_eq!(find_lab_group(t.path(), "x"), None);
        let cg = Cgroups::create(t.path(), "x").unwrap();
        assert_eq!(find_lab_group(t.path(), "x"), Some(cg.lab_root.clone()));
        assert_eq!(find_lab_group(t.path(), "y"), None);
    }

    #[test]
    fn no_controller_is_reported() {
        let t = tempfile::tempdir().unwrap();
        assert!(Cgroups::create(t.path(), "x").is_err());
    }
}
