//! Starting the lab's processes, behind a trait: the reconciler decides what runs and when, a
//! [`Launcher`] starts it and hands back a [`Process`] to watch and signal. The real launcher spawns
//! each role in a process group of its own, with the lab's name in its environment and its output in its
//! log file, and puts a rank in its CPU cgroup; the reconciler's tests use a launcher of pretend processes.

use std::fmt::Debug;
use std::fs::{self, OpenOptions};
use std::process::{ExitStatus, Stdio};

use nix::sys::signal::Signal;

use super::commands::RoleCommand;
use crate::cgroup::Cgroups;
use crate::procs::ProcRecord;
use crate::spec::Paths;

/// Starts processes.
pub(crate) trait Launcher: Send + Debug {
    /// Starts `cmd`.
    ///
    /// # Errors
    /// When the program cannot be started, or a rank cannot be put in its cgroup.
    fn launch(&mut self, cmd: &RoleCommand) -> std::io::Result<Box<dyn Process>>;
}

/// A process the lab started.
pub(crate) trait Process: Send + Debug {
    /// Its record in the lab's process table.
    fn record(&self) -> &ProcRecord;

    /// Its exit status, once it has exited (the process is reaped then).
    ///
    /// # Errors
    /// When its status cannot be read.
    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>>;

    /// Sends `sig` to it (and to its process group).
    fn signal(&self, sig: Signal);
}

/// The launcher of real processes.
#[derive(Debug)]
pub(crate) struct Spawner {
    pub paths: Paths,
    /// The value of [`super::LAB_ENV`] every process carries.
    pub lab_env: String,
    pub cgroups: Option<Cgroups>,
}

#[derive(Debug)]
struct Child {
    child: tokio::process::Child,
    record: ProcRecord,
}

impl Process for Child {
    fn record(&self) -> &ProcRecord {
        &self.record
    }

    fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    fn signal(&self, sig: Signal) {
        self.record.signal(sig);
    }
}

impl Launcher for Spawner {
    fn launch(&mut self, rc: &RoleCommand) -> std::io::Result<Box<dyn Process>> {
        if let Some(dir) = &rc.data_dir {
            fs::create_dir_all(dir)?;
        }
        let log_file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.paths.log(&rc.name))?;
        let mut cmd = tokio::process::Command::new(&rc.program);
        cmd.args(&rc.args)
            .envs(rc.env.iter().map(|(k, v)| (k, v)))
            .env(super::LAB_ENV, &self.lab_env)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .process_group(0)
            .kill_on_drop(false);
        if let Some(dir) = &rc.cwd {
            cmd.current_dir(dir);
        }
        let child = cmd
            .spawn()
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", rc.program.display())))?;
        let pid = child.id().unwrap_or(0);
        if let (Some(cpu), Some(cg)) = (rc.cpu, &self.cgroups) {
            cg.create_child(&rc.name, cpu)?;
            cg.add_process(&rc.name, pid)?;
        }
        let record = ProcRecord::of(&rc.name, pid, true).unwrap_or(ProcRecord {
            name: rc.name.clone(),
            pid,
            start_ticks: 0,
            group_leader: true,
        });
        Ok(Box::new(Child { child, record }))
    }
}
