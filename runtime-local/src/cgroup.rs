//! CPU limits as cgroup quotas: v1 (`cpu.cfs_quota_us` / `cpu.cfs_period_us`) or v2 (`cpu.max`).
//!
//! Each lab gets one parent group and each limited process a child (`rank-<r>`, `storage-<i>`), plus `svc`
//! for the supervisor and everything it starts unlimited. Changing a rank's quota is the in-place resize the
//! throttled-rank fault performs; a storage server's group is the slow-disk fault's, with a longer period
//! ([`STORAGE_PERIOD_US`]). `lab down` removes the groups, after the processes in them are gone.
//!
//! The parent group comes from one of two places ([`plan`]). Where the hierarchy is writable (root), the lab
//! makes `straggler-lab.<name>` under the CPU controller's root. Where it is not (a person on a laptop),
//! cgroup v2 lets systemd delegate a subtree to a user: the supervisor starts inside a transient scope
//! (`systemd-run --user --scope -p Delegate=yes`, the command-line form of the manager's
//! `StartTransientUnit` D-Bus call), and once there takes the scope as the lab's group ([`adopt_scope`]).
//! cgroup v1 cannot delegate its `cpu` controller to a user: there, without root, the lab runs without CPU
//! limits, and [`off_note`] says in one line what that costs and how to get them.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use lab_model::cgroup::{parse_mountinfo, parse_proc_cgroup, v2_dir};
use lab_model::{CfsQuota, Millicores};
use serde::{Deserialize, Serialize};

pub use lab_model::cgroup::Version;

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

/// The name of the `svc` group, where the supervisor and every process it starts without a limit live.
pub const SVC_GROUP: &str = "svc";

/// Where the lab's groups live, once found to be writable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cgroups {
    pub version: Version,
    /// The lab's own parent group.
    pub lab_root: PathBuf,
    /// True when the parent group is a scope systemd delegated to this user: systemd made it and removes it
    /// once its last process has exited, so the lab removes only what it made inside.
    #[serde(default)]
    pub delegated: bool,
}

/// Why CPU limits cannot be enforced with cgroups here, in a few words (it goes inside [`off_note`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

/// The root of the CPU controller: a v1 `cpu` hierarchy, or the v2 unified hierarchy with `cpu` enabled.
fn controller_root(sys: &Path) -> Option<(Version, PathBuf)> {
    for name in ["cpu", "cpu,cpuacct"] {
        let p = sys.join(name);
        if p.join("cpu.cfs_quota_us").exists() {
            return Some((Version::V1, p));
        }
    }
    has_cpu(&sys.join("cgroup.controllers")).then(|| (Version::V2, sys.to_path_buf()))
}

/// True when the controller list in `file` (`cgroup.controllers`) names `cpu`.
fn has_cpu(file: &Path) -> bool {
    fs::read_to_string(file).is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"))
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
        fs::create_dir_all(&lab_root).map_err(|e| {
            Unavailable(if e.kind() == std::io::ErrorKind::PermissionDenied {
                format!("{} is not writable without root", root.display())
            } else {
                format!("cannot create {}: {e}", lab_root.display())
            })
        })?;
        if version == Version::V2 {
            // Children only get a cpu.max when the parent delegates the controller to them.
            fs::write(lab_root.join("cgroup.subtree_control"), "+cpu").map_err(|e| {
                Unavailable(format!(
                    "cannot enable the cpu controller in {}: {e}",
                    lab_root.display()
                ))
            })?;
        }
        Ok(Cgroups {
            version,
            lab_root,
            delegated: false,
        })
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
            Version::V1 => {
                fs::write(p.join("cpu.cfs_period_us"), period.to_string())?;
                fs::write(p.join("cpu.cfs_quota_us"), quota.to_string())
            }
            Version::V2 => fs::write(p.join("cpu.max"), format!("{quota} {period}")),
        }
    }

    /// Lifts instance `name`'s CPU limit (its group stays, unlimited, until the lab goes down).
    ///
    /// # Errors
    /// The I/O error, when the files cannot be written.
    pub fn set_unlimited(&self, name: &str) -> std::io::Result<()> {
        let p = self.path(name);
        match self.version {
            Version::V1 => fs::write(p.join("cpu.cfs_quota_us"), "-1"),
            Version::V2 => fs::write(p.join("cpu.max"), format!("max {}", period_us(name))),
        }
    }

    /// Reads instance `name`'s CPU limit as the kernel enforces it (`None`: unlimited).
    ///
    /// # Errors
    /// The I/O error, when the files cannot be read.
    pub fn limit(&self, name: &str) -> std::io::Result<Option<Millicores>> {
        let p = self.path(name);
        match self.version {
            Version::V1 => {
                let q = fs::read_to_string(p.join("cpu.cfs_quota_us"))?;
                let per = fs::read_to_string(p.join("cpu.cfs_period_us"))?;
                Ok(CfsQuota::from_v1(&q, &per).and_then(CfsQuota::millicores))
            }
            Version::V2 => {
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

    /// Moves process `pid` (the supervisor, on its way out) out of the groups the lab made and removes them.
    /// A group of the lab's own goes whole, the process moving to its parent; a delegated scope keeps only
    /// itself, with the process back in it, for systemd to remove once that process has exited.
    ///
    /// # Errors
    /// A message naming what could not be moved or removed.
    pub fn release(&self, pid: u32) -> Result<(), String> {
        if !self.delegated {
            if let Some(parent) = self.lab_root.parent() {
                let _ = fs::write(parent.join("cgroup.procs"), pid.to_string());
            }
            return self.remove_all();
        }
        let mut failed = Vec::new();
        for child in child_groups(&self.lab_root) {
            if child.file_name().is_some_and(|n| n != SVC_GROUP)
                && let Err(e) = remove_group(&child)
            {
                failed.push(format!("{} ({e})", child.display()));
            }
        }
        // A group with a controller enabled for its children may hold no process (cgroup v2's rule for
        // every group but the root): turn `cpu` off again before moving back into the scope.
        let steps = [
            (self.lab_root.join("cgroup.subtree_control"), "-cpu".to_string()),
            (self.lab_root.join("cgroup.procs"), pid.to_string()),
        ];
        for (file, value) in steps {
            if let Err(e) = fs::write(&file, value) {
                failed.push(format!("{} ({e})", file.display()));
            }
        }
        let svc = self.path(SVC_GROUP);
        if let Err(e) = remove_group(&svc) {
            failed.push(format!("{} ({e})", svc.display()));
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(format!("cgroups left behind: {}", failed.join(", ")))
        }
    }
}

/// The directories directly under `group`: its child groups.
fn child_groups(group: &Path) -> Vec<PathBuf> {
    fs::read_dir(group)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes one empty group; one that is gone already (systemd may remove a scope first) is fine.
fn remove_group(group: &Path) -> std::io::Result<()> {
    match fs::remove_dir(group) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// What `lab up` can tell about this machine to choose where CPU limits come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Host {
    /// `systemd-run`, if it is on `PATH`.
    pub systemd_run: Option<PathBuf>,
    /// True when this user's systemd manager can be reached (its socket under `XDG_RUNTIME_DIR`, or a session
    /// bus): only then can it start a scope.
    pub user_manager: bool,
}

impl Host {
    /// This machine and this user, as the environment shows them.
    pub fn detect() -> Host {
        let runtime_dir = std::env::var_os("XDG_RUNTIME_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);
        let socket = runtime_dir
            .as_ref()
            .is_some_and(|d| d.join("systemd/private").exists() || d.join("bus").exists());
        let session_bus = std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some_and(|a| !a.is_empty());
        Host {
            systemd_run: super::which("systemd-run"),
            user_manager: socket || session_bus,
        }
    }
}

/// The transient scope the supervisor is to run in, and the command line that asks systemd for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeRequest {
    /// `systemd-run`, as found on `PATH`.
    pub systemd_run: PathBuf,
    /// The scope's unit name, unique to this `lab up` (two state folders may hold labs of one name).
    pub unit: String,
}

impl ScopeRequest {
    /// The scope of lab `lab`, asked for by the `lab up` whose pid is `pid`.
    pub fn new(systemd_run: PathBuf, lab: &str, pid: u32) -> ScopeRequest {
        ScopeRequest {
            systemd_run,
            unit: format!("straggler-lab-{lab}-{pid}.scope"),
        }
    }

    /// The command that runs `program args` inside the scope. `systemd-run --scope` registers the scope for
    /// its own pid and then execs the program, so the program keeps the pid its parent sees; `Delegate=yes`
    /// hands the scope's subtree to this user, `--collect` has systemd forget the unit even if it failed.
    pub fn command(&self, program: &Path, args: &[OsString]) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![
            self.systemd_run.clone().into(),
            "--user".into(),
            "--scope".into(),
            "--quiet".into(),
            "--collect".into(),
            format!("--unit={}", self.unit).into(),
            "--description=Straggler Lab supervisor (CPU limits for the lab's processes)".into(),
            "--property=Delegate=yes".into(),
            "--".into(),
            program.into(),
        ];
        argv.extend(args.iter().cloned());
        argv
    }
}

/// Where a lab's CPU limits come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The lab's own group, made now.
    Direct(Cgroups),
    /// A scope systemd delegates to this user: the supervisor starts in it and takes it ([`adopt_scope`]).
    Delegate(ScopeRequest),
    /// None, and why.
    Off(Unavailable),
}

/// Chooses where lab `lab`'s CPU limits come from: its own group under `sys` where that is writable, else a
/// scope systemd delegates (cgroup v2 with a user manager), else none.
pub fn plan(sys: &Path, lab: &str, host: &Host, pid: u32) -> Plan {
    match Cgroups::create(sys, lab) {
        Ok(cg) => Plan::Direct(cg),
        Err(own) => without_own_group(own, controller_root(sys).map(|(v, _)| v), host, lab, pid),
    }
}

/// Where CPU limits come from when the lab cannot make its own group (`own` says why), from what was found:
/// the CPU controller's interface (`None`: no CPU controller at all) and what `host` offers. Nothing is
/// read or changed here.
pub fn without_own_group(
    Unavailable(own): Unavailable,
    controller: Option<Version>,
    host: &Host,
    lab: &str,
    pid: u32,
) -> Plan {
    let off = |why: String| Plan::Off(Unavailable(why));
    match controller {
        None => off(own),
        Some(Version::V1) => off(format!(
            "{own}, and cgroup v1 cannot delegate its cpu controller to a user"
        )),
        Some(Version::V2) => match (&host.systemd_run, host.user_manager) {
            (Some(run), true) => Plan::Delegate(ScopeRequest::new(run.clone(), lab, pid)),
            (None, _) => off(format!(
                "{own}, and there is no systemd-run to ask systemd for a delegated cgroup"
            )),
            (Some(_), false) => off(format!(
                "{own}, and no systemd user manager answers (XDG_RUNTIME_DIR has no systemd socket)"
            )),
        },
    }
}

/// Takes the scope this process runs in (given as the text of its `/proc/self/cgroup` and
/// `/proc/self/mountinfo`) as the lab's group: moves process `pid` into its `svc` group, then turns the
/// `cpu` controller on for the scope's children, where the ranks' limits go.
///
/// # Errors
/// [`Unavailable`] when the process is in no v2 group, or systemd delegated no `cpu` controller to it, or
/// the scope cannot be written.
pub fn adopt_scope(proc_cgroup: &str, mountinfo: &str, pid: u32) -> Result<Cgroups, Unavailable> {
    let scope = v2_dir(&parse_proc_cgroup(proc_cgroup), &parse_mountinfo(mountinfo))
        .ok_or_else(|| Unavailable("systemd started the lab in no cgroup v2 group it can see".into()))?;
    let controllers = scope.join("cgroup.controllers");
    if !has_cpu(&controllers) {
        let offered = fs::read_to_string(&controllers).unwrap_or_default();
        return Err(Unavailable(format!(
            "systemd delegates to this user a cgroup without the cpu controller (it offers: {}); an \
             administrator can add it with a drop-in for user@.service holding `[Service]` and \
             `Delegate=cpu cpuset io memory pids`",
            offered.trim()
        )));
    }
    let svc = scope.join(SVC_GROUP);
    let write = |file: &Path, value: String| {
        fs::write(file, value).map_err(|e| Unavailable(format!("cannot write {}: {e}", file.display())))
    };
    fs::create_dir_all(&svc).map_err(|e| Unavailable(format!("cannot create {}: {e}", svc.display())))?;
    // The scope itself must hold no process before its children can get a controller.
    write(&svc.join("cgroup.procs"), pid.to_string())?;
    write(&scope.join("cgroup.subtree_control"), "+cpu".to_string())?;
    Ok(Cgroups {
        version: Version::V2,
        lab_root: scope,
        delegated: true,
    })
}

/// The one line `lab up` prints when CPU limits are off: why, what the lab cannot do then, and how to get
/// them.
pub fn off_note(why: &str) -> String {
    format!(
        "CPU limits are off ({why}): ranks run unlimited, and throttled-rank, slow-compute, slow-disk and \
         rank-hang cannot be injected; to get them, run `lab up` as root, or use Docker and kind \
         (`lab up --runtime kind`)"
    )
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
                && let Err(err) = remove_group(&e.path())
            {
                failed.push(format!("{} ({err})", e.path().display()));
            }
        }
    }
    if let Err(err) = remove_group(root) {
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

    fn not_root() -> Unavailable {
        Unavailable("/sys/fs/cgroup is not writable without root".into())
    }

    fn laptop() -> Host {
        Host {
            systemd_run: Some(PathBuf::from("/usr/bin/systemd-run")),
            user_manager: true,
        }
    }

    #[test]
    fn without_root_cgroup_v2_asks_systemd_for_a_scope_and_v1_goes_without() {
        assert_eq!(
            without_own_group(not_root(), Some(Version::V2), &laptop(), "lab", 4242),
            Plan::Delegate(ScopeRequest {
                systemd_run: PathBuf::from("/usr/bin/systemd-run"),
                unit: "straggler-lab-lab-4242.scope".into(),
            })
        );
        let off = |controller, host: &Host| match without_own_group(not_root(), controller, host, "lab", 1) {
            Plan::Off(Unavailable(why)) => why,
            other => panic!("CPU limits should be off, not {other:?}"),
        };
        let v1 = off(Some(Version::V1), &laptop());
        assert!(
            v1.starts_with("/sys/fs/cgroup is not writable without root, and cgroup v1"),
            "{v1}"
        );
        let no_run = Host {
            systemd_run: None,
            ..laptop()
        };
        assert!(off(Some(Version::V2), &no_run).contains("no systemd-run"));
        // `su`, `runuser` or a container: systemd-run is there, the user's manager is not.
        let no_manager = Host {
            user_manager: false,
            ..laptop()
        };
        assert!(off(Some(Version::V2), &no_manager).contains("no systemd user manager"));
        assert_eq!(off(None, &laptop()), not_root().0);
    }

    #[test]
    fn a_writable_hierarchy_is_used_directly_whatever_systemd_offers() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("cgroup.controllers"), "cpu memory pids").unwrap();
        let Plan::Direct(cg) = plan(t.path(), "x", &laptop(), 1) else {
            panic!("a writable hierarchy should be used as it is")
        };
        assert!(!cg.delegated);
        assert_eq!(cg.lab_root, t.path().join("straggler-lab.x"));
    }

    #[test]
    fn the_scope_request_runs_the_supervisor_in_a_delegated_user_scope() {
        let req = ScopeRequest::new(PathBuf::from("/usr/bin/systemd-run"), "demo", 77);
        let argv = req.command(
            Path::new("/opt/lab/lab"),
            &[
                "__supervise".into(),
                "/home/me/.local/state/straggler-lab/demo".into(),
            ],
        );
        let argv: Vec<&str> = argv.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            argv,
            [
                "/usr/bin/systemd-run",
                "--user",
                "--scope",
                "--quiet",
                "--collect",
                "--unit=straggler-lab-demo-77.scope",
                "--description=Straggler Lab supervisor (CPU limits for the lab's processes)",
                "--property=Delegate=yes",
                "--",
                "/opt/lab/lab",
                "__supervise",
                "/home/me/.local/state/straggler-lab/demo",
            ]
        );
    }

    /// A v2 hierarchy in a plain folder, mounted (as its mountinfo line says) at `t`, with the scope systemd
    /// made for the supervisor offering `controllers`; returns the texts of `/proc/self/cgroup` and
    /// `/proc/self/mountinfo` the supervisor would read, and the scope's folder.
    fn delegated(t: &Path, controllers: &str) -> (String, String, PathBuf) {
        let inner = "user.slice/user-1000.slice/user@1000.service/app.slice/straggler-lab-x-9.scope";
        let scope = t.join(inner);
        fs::create_dir_all(&scope).unwrap();
        fs::write(scope.join("cgroup.controllers"), controllers).unwrap();
        let mountinfo = format!(
            "30 1 0:26 / {} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n",
            t.display()
        );
        (format!("0::/{inner}\n"), mountinfo, scope)
    }

    #[test]
    fn the_supervisor_takes_its_delegated_scope_and_gives_it_back() {
        let t = tempfile::tempdir().unwrap();
        let (proc_cgroup, mountinfo, scope) = delegated(t.path(), "cpu memory pids\n");
        let cg = adopt_scope(&proc_cgroup, &mountinfo, 9).unwrap();
        assert_eq!(
            cg,
            Cgroups {
                version: Version::V2,
                lab_root: scope.clone(),
                delegated: true,
            }
        );
        // The supervisor left the scope for `svc` before the scope handed `cpu` to its children.
        assert_eq!(fs::read_to_string(scope.join("svc/cgroup.procs")).unwrap(), "9");
        assert_eq!(
            fs::read_to_string(scope.join("cgroup.subtree_control")).unwrap(),
            "+cpu"
        );

        // On shutdown the lab's groups go and the supervisor is back in the scope, which systemd removes once
        // it has exited. (A group's files do not keep it from being removed; a plain folder's do.)
        fs::create_dir(scope.join("rank-1")).unwrap();
        fs::remove_file(scope.join("svc/cgroup.procs")).unwrap();
        cg.release(9).unwrap();
        assert!(!scope.join("rank-1").exists() && !scope.join("svc").exists());
        assert!(scope.exists(), "the scope is systemd's to remove");
        assert_eq!(
            fs::read_to_string(scope.join("cgroup.subtree_control")).unwrap(),
            "-cpu"
        );
        assert_eq!(fs::read_to_string(scope.join("cgroup.procs")).unwrap(), "9");
    }

    #[test]
    fn a_scope_without_the_cpu_controller_says_how_to_get_it() {
        let t = tempfile::tempdir().unwrap();
        let (proc_cgroup, mountinfo, scope) = delegated(t.path(), "memory pids\n");
        let Unavailable(why) = adopt_scope(&proc_cgroup, &mountinfo, 9).unwrap_err();
        assert!(
            why.contains("offers: memory pids") && why.contains("Delegate=cpu"),
            "{why}"
        );
        assert!(
            !scope.join("svc").exists(),
            "nothing is made in a scope that cannot be used"
        );
        // A supervisor that systemd did not start in a v2 group has nothing to take.
        let v1 = "4:cpu:/\n";
        assert!(adopt_scope(v1, &mountinfo, 9).is_err());
    }

    #[test]
    fn the_off_note_is_one_line_naming_the_loss_and_the_ways_to_get_limits() {
        let note = off_note(&not_root().0);
        assert!(!note.contains('\n'), "{note}");
        for want in ["throttled-rank", "as root", "--runtime kind"] {
            assert!(note.contains(want), "{want:?} missing from {note}");
        }
    }

    #[test]
    fn finds_a_v1_controller_in_a_fake_tree_and_writes_quota() {
        // A plain directory shaped like a v1 hierarchy: the kernel is not involved, only the file layout.
        let t = tempfile::tempdir().unwrap();
        let cpu = t.path().join("cpu");
        fs::create_dir_all(&cpu).unwrap();
        fs::write(cpu.join("cpu.cfs_quota_us"), "-1").unwrap();
        let cg = Cgroups::create(t.path(), "x").unwrap();
        assert_eq!(cg.version, Version::V1);
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
        assert_eq!(cg2.version, Version::V2);
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
