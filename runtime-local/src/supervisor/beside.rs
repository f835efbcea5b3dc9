//! What runs beside a rank: the processes in its cgroup (its own, and any other that shares its CPU
//! limit), the CPU hogs the slow-compute fault starts there, and the frozen training thread of the
//! rank-hang fault. The supervisor owns the hogs like any other process: they carry the lab's name, are
//! in its process table, are reaped here and stopped on shutdown.

use std::time::Instant;

use lab_model::names;
use nix::sys::signal::Signal;

use super::commands::RoleCommand;
use super::log;
use super::reconcile::{Beside, Sup, TERMINATION_GRACE, thaw};
use crate::freezer;
use crate::procs::ProcRecord;
use crate::proto::Response;
use lab_runtime::BesideProcess;

/// A CPU-bound loop, the smallest program that eats whatever CPU its group allows.
const HOG_SCRIPT: &str = "while :; do :; done";

fn err(message: String) -> Response {
    Response::Error { message }
}

/// `(utime + stime)` of `pid` in seconds (`/proc` counts in USER_HZ, 100 on Linux).
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn command_line(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

impl Sup {
    /// The pid of rank `rank`'s running process, or the refusal to send.
    fn rank_pid(&self, rank: u32) -> Result<u32, Response> {
        if rank >= self.spec.ranks {
            return Err(err(format!(
                "rank-{rank} does not exist (ranks 0..{})",
                self.spec.ranks
            )));
        }
        self.insts
            .get(&names::rank(rank))
            .and_then(|i| i.running.as_ref())
            .filter(|r| r.terminating.is_none())
            .map(|r| r.process.record().pid)
            .ok_or_else(|| err(format!("rank-{rank} is not running")))
    }

    pub(super) fn thaw_rank(&self, rank: u32) {
        thaw(&self.cfg, rank);
    }

    pub(super) fn freeze(&mut self, rank: u32, frozen: bool) -> Response {
        let group = match freezer::group(self.cfg.cgroups.as_ref(), &self.cfg.name, &names::rank(rank)) {
            Ok(g) => g,
            Err(why) => return err(format!("cannot freeze rank-{rank}: {why}")),
        };
        if !frozen {
            return match freezer::thaw(&group) {
                Ok(()) => Response::Ok,
                Err(e) => err(e),
            };
        }
        let pid = match self.rank_pid(rank) {
            Ok(p) => p,
            Err(r) => return r,
        };
        // The training loop runs on the main thread, whose tid is the pid; the metrics threads stay out.
        match freezer::freeze(&group, pid) {
            Ok(()) => {
                log(&format!("froze rank-{rank}'s training thread (tid {pid})"));
                Response::Ok
            }
            Err(e) => {
                let _ = freezer::thaw(&group);
                err(e)
            }
        }
    }

    pub(super) fn frozen(&self, rank: u32) -> Response {
        let value = freezer::group(self.cfg.cgroups.as_ref(), &self.cfg.name, &names::rank(rank))
            .is_ok_and(|g| freezer::is_frozen(&g));
        Response::Flag { value }
    }

    pub(super) fn rank_procs(&self, rank: u32) -> Response {
        let own = match self.rank_pid(rank) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let mut pids = match &self.cfg.cgroups {
            Some(cg) => cg.processes(&names::rank(rank)),
            None => Vec::new(),
        };
        if !pids.contains(&own) {
            pids.insert(0, own);
        }
        let procs = pids
            .into_iter()
            .map(|pid| BesideProcess {
                pid,
                command: command_line(pid),
                cpu_seconds: cpu_seconds(pid),
                rank_itself: pid == own,
            })
            .collect();
        Response::Processes { procs }
    }

    pub(super) fn start_hog(&mut self, rank: u32) -> Response {
        if let Err(r) = self.rank_pid(rank) {
            return r;
        }
        let Some(cg) = self.cfg.cgroups.clone() else {
            return err(format!(
                "CPU limits are not enforced on this machine ({}): a process beside rank-{rank} would not share its limit",
                self.cfg
                    .cpu_limit_note
                    .as_deref()
                    .unwrap_or("no writable cgroups")
            ));
        };
        let n = self.beside.iter().filter(|b| b.rank == rank).count();
        let cmd = RoleCommand {
            name: format!("{}-beside-{n}", names::rank(rank)),
            program: "/bin/sh".into(),
            args: vec!["-c".into(), HOG_SCRIPT.into()],
            data_dir: None,
            cwd: None,
            cpu: None,
            env: Vec::new(),
        };
        let process = match self.launcher.launch(&cmd) {
            Ok(p) => p,
            Err(e) => return err(format!("cannot start a process beside rank-{rank}: {e}")),
        };
        let pid = process.record().pid;
        if let Err(e) = cg.add_process(&names::rank(rank), pid) {
            process.signal(Signal::SIGKILL);
            self.beside.push(Beside {
                rank,
                process,
                terminating: Some(Instant::now()),
            });
            return err(format!("cannot put pid {pid} into rank-{rank}'s cgroup: {e}"));
        }
        log(&format!("started a CPU hog beside rank-{rank} (pid {pid})"));
        self.beside.push(Beside {
            rank,
            process,
            terminating: None,
        });
        self.save_procs();
        Response::Pid { pid }
    }

    pub(super) fn stop_beside(&mut self, rank: u32, pid: u32, now: Instant) -> Response {
        let own = match self.rank_pid(rank) {
            Ok(p) => p,
            Err(r) => return r,
        };
        if pid == own {
            return err(format!(
                "pid {pid} is rank-{rank} itself: restart the rank with `lab restart rank {rank}` instead"
            ));
        }
        let in_group = self
            .cfg
            .cgroups
            .as_ref()
            .is_some_and(|cg| cg.processes(&names::rank(rank)).contains(&pid));
        if !in_group {
            return err(format!(
                "pid {pid} is not beside rank-{rank}: `lab rank procs {rank}` lists what is"
            ));
        }
        if let Some(b) = self
            .beside
            .iter_mut()
            .find(|b| b.rank == rank && b.process.record().pid == pid)
        {
            if b.terminating.is_none() {
                b.process.signal(Signal::SIGTERM);
                b.terminating = Some(now);
            }
        } else if let Some(rec) = ProcRecord::of("beside", pid, false) {
            // Something the lab did not start, in the rank's group all the same: the operator asked.
            rec.signal(Signal::SIGTERM);
        }
        log(&format!("stopping pid {pid} beside rank-{rank}"));
        Response::Ok
    }

    /// Reaps the processes beside ranks that exited, and kills those that outlived their grace.
    pub(super) fn reap_beside(&mut self, now: Instant) -> bool {
        let before = self.beside.len();
        self.beside.retain_mut(|b| {
            if b.terminating
                .is_some_and(|t| now.duration_since(t) > TERMINATION_GRACE)
            {
                b.process.signal(Signal::SIGKILL);
            }
            !matches!(b.process.try_wait(), Ok(Some(_)))
        });
        before != self.beside.len()
    }

    /// Thaws every rank and asks every process beside a rank to stop (the shutdown).
    pub(super) fn stop_all_beside(&mut self, now: Instant) {
        for r in 0..crate::MAX_RANKS {
            thaw(&self.cfg, r);
        }
        for b in &mut self.beside {
            if b.terminating.is_none() {
                b.process.signal(Signal::SIGTERM);
                b.terminating = Some(now);
            }
        }
    }
}
