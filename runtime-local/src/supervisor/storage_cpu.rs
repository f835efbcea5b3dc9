//! The slow-disk fault's actuator on the local runtime: a storage server's own `weed volume` process held
//! to a CPU limit in a cgroup of its own (`storage-<i>`), so every request it serves — its own reads from
//! its data directory included — waits for CPU. The latency proxy in front of it is a separate process and
//! is left alone, so the server's own request latency (its `/metrics` histogram, a probe that bypasses the
//! proxy) rises, which is what tells a slow node from a slow network path.

use lab_model::{Millicores, names};

use super::reconcile::Sup;
use crate::proto::Response;

impl Sup {
    /// Sets (`Some`) or lifts (`None`) storage server `server`'s CPU limit, and keeps it on record so a
    /// restarted volume server comes back under it.
    pub(super) fn set_storage_cpu(&mut self, server: u32, cpu: Option<Millicores>) -> Response {
        let err = |m: String| Response::Error { message: m };
        if server >= self.cfg.storage_servers {
            return err(format!(
                "storage-{server} does not exist (servers 0..{})",
                self.cfg.storage_servers
            ));
        }
        let Some(cg) = &self.cfg.cgroups else {
            return err(format!(
                "CPU limits are not enforced on this machine ({}), so storage-{server} cannot be slowed",
                self.cfg
                    .cpu_limit_note
                    .as_deref()
                    .unwrap_or("no writable cgroups")
            ));
        };
        let name = names::storage(server);
        let pid = self
            .insts
            .get(&name)
            .and_then(|i| i.running.as_ref())
            .map(|r| r.process.record().pid);
        let result = match cpu {
            Some(cpu) => cg.create_child(&name, cpu).and_then(|_| match pid {
                Some(pid) => cg.add_process(&name, pid),
                None => Ok(()),
            }),
            None if cg.path(&name).is_dir() => cg.set_unlimited(&name),
            None => Ok(()),
        };
        if let Err(e) = result {
            return err(format!("cannot write storage-{server}'s cgroup: {e}"));
        }
        match cpu {
            Some(c) => self.spec.storage_cpu.insert(server, c),
            None => self.spec.storage_cpu.remove(&server),
        };
        self.save_spec();
        Response::Ok
    }
}
