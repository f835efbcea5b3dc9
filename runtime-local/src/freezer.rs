//! Freezing one thread of a rank with the cgroup v1 freezer: the rank-hang fault.
//!
//! cgroup v1 lets a single thread (a tid written to `tasks`) move to a group of its own, so the training
//! thread of a rank can be frozen while its metrics thread keeps answering `/readyz` and `/metrics`: the
//! process lives, stays Ready, and its step counter stops, as a rank stuck in a kernel does. cgroup v2 moves
//! whole processes only (threaded groups do not carry the freezer), so there the freeze is refused.
//!
//! A frozen task does not act on SIGKILL until it is thawed, so everything that stops a rank thaws it
//! first (the supervisor on restart and shutdown, `lab down` for whatever a killed supervisor left).

use std::fs;
use std::path::{Path, PathBuf};

use super::cgroup::{Cgroups, Version, group_name};

/// The lab's freezer group for rank instance `name` (`.../freezer/straggler-lab.<lab>/rank-1`), or why
/// there is none.
///
/// # Errors
/// Why a thread cannot be frozen here.
pub fn group(cg: Option<&Cgroups>, lab: &str, name: &str) -> Result<PathBuf, String> {
    let cg = cg.ok_or("CPU cgroups are not available on this machine, and neither is the freezer")?;
    if cg.version != Version::V1 {
        return Err("the cgroup v1 freezer is needed to freeze one thread of a rank; this machine has cgroup v2, which freezes whole processes (and their probes with them)".into());
    }
    Ok(lab_root(cg)
        .ok_or("no cgroup v1 freezer hierarchy is mounted")?
        .join(group_name(lab))
        .join(name))
}

/// The v1 freezer hierarchy mounted beside the CPU hierarchy the lab uses (its root has `tasks` but no
/// `freezer.state`).
fn lab_root(cg: &Cgroups) -> Option<PathBuf> {
    let root = cg.lab_root.parent()?.parent()?.join("freezer");
    root.join("tasks").exists().then_some(root)
}

/// Moves thread `tid` into `group` and freezes the group; waits until the kernel says FROZEN.
///
/// # Errors
/// The I/O error, as text.
pub fn freeze(group: &Path, tid: u32) -> Result<(), String> {
    fs::create_dir_all(group).map_err(|e| format!("cannot create {}: {e}", group.display()))?;
    fs::write(group.join("tasks"), tid.to_string())
        .map_err(|e| format!("cannot move thread {tid} into {}: {e}", group.display()))?;
    fs::write(group.join("freezer.state"), "FROZEN")
        .map_err(|e| format!("cannot freeze {}: {e}", group.display()))?;
    for _ in 0..100 {
        if is_frozen(group) {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(format!("{} did not reach FROZEN within 1 s", group.display()))
}

/// True when `group` exists, holds a task, and is frozen.
pub fn is_frozen(group: &Path) -> bool {
    let holds = fs::read_to_string(group.join("tasks")).is_ok_and(|t| !t.trim().is_empty());
    holds && fs::read_to_string(group.join("freezer.state")).is_ok_and(|s| s.trim() == "FROZEN")
}

/// Thaws `group`, moves its threads back to the hierarchy's root, and removes it. A missing group is fine.
///
/// # Errors
/// What could not be undone, as text.
pub fn thaw(group: &Path) -> Result<(), String> {
    if !group.exists() {
        return Ok(());
    }
    fs::write(group.join("freezer.state"), "THAWED")
        .map_err(|e| format!("cannot thaw {}: {e}", group.display()))?;
    // The group is <hierarchy>/<lab group>/<rank>: its threads go back to the hierarchy's root.
    if let Some(root) = group.parent().and_then(Path::parent) {
        let tasks = fs::read_to_string(group.join("tasks")).unwrap_or_default();
        for tid in tasks.lines().map(str::trim).filter(|t| !t.is_empty()) {
            // A thread that exited meanwhile cannot be moved, and needs not be.
            let _ = fs::write(root.join("tasks"), tid);
        }
    }
    fs::remove_dir(group).map_err(|e| format!("cannot remove {}: {e}", group.display()))
}

/// Thaws and removes every freezer group of lab `lab` (its group included), whatever holds them: `lab
/// down` calls it so that no frozen thread outlives the lab or blocks its SIGKILL.
///
/// # Errors
/// The groups that could not be removed, as text.
pub fn remove_lab(cg: &Cgroups, lab: &str) -> Result<(), String> {
    let Some(root) = lab_root(cg).map(|r| r.join(group_name(lab))) else {
        return Ok(());
    };
    if !root.exists() {
        return Ok(());
    }
    let mut failed = Vec::new();
    if let Ok(rd) = fs::read_dir(&root) {
        for e in rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            if let Err(why) = thaw(&e.path()) {
                failed.push(why);
            }
        }
    }
    if let Err(e) = fs::remove_dir(&root) {
        failed.push(format!("{} ({e})", root.display()));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("freezer groups left behind: {}", failed.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_and_missing_cgroups_are_refused_with_the_reason() {
        assert!(group(None, "x", "rank-1").unwrap_err().contains("freezer"));
        let v2 = Cgroups {
            version: Version::V2,
            lab_root: PathBuf::from("/sys/fs/cgroup/straggler-lab.x"),
            delegated: false,
        };
        assert!(group(Some(&v2), "x", "rank-1").unwrap_err().contains("cgroup v2"));
    }

    #[test]
    fn the_group_sits_in_the_freezer_hierarchy_beside_cpu() {
        // A plain directory shaped like the v1 hierarchies: only the layout is exercised.
        let t = tempfile::tempdir().unwrap();
        let cpu = t.path().join("cpu");
        fs::create_dir_all(&cpu).unwrap();
        fs::write(cpu.join("cpu.cfs_quota_us"), "-1").unwrap();
        fs::create_dir_all(t.path().join("freezer")).unwrap();
        fs::write(t.path().join("freezer/tasks"), "").unwrap();
        let cg = Cgroups::create(t.path(), "x").unwrap();
        let g = group(Some(&cg), "x", "rank-1").unwrap();
        assert_eq!(g, t.path().join("freezer/straggler-lab.x/rank-1"));
        assert!(!is_frozen(&g));
        assert!(thaw(&g).is_ok(), "a missing group is already thawed");
    }
}
