//! The lab watching itself: the telemetry driver running in its own task (or, for a reader that follows
//! the lab, the watcher's snapshots read as they are written), publishing each snapshot (with the
//! golden-signal rules evaluated) to every reader. Stops when the [`Watch`] is dropped.

use lab_model::Snapshot;
use lab_telemetry::Driver;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running telemetry loop and the latest snapshot it produced.
#[derive(Debug)]
pub struct Watch {
    snapshots: watch::Receiver<Option<Snapshot>>,
    task: JoinHandle<()>,
}

impl Watch {
    /// Starts `driver` ticking in its own task.
    pub fn start(driver: Driver) -> Watch {
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(driver.run(tx));
        Watch { snapshots: rx, task }
    }

    /// As [`Watch::start`], the driver also answering the PromQL queries sent on `queries` between its
    /// ticks (the watcher's query socket, for `lab mcp`'s `query` tool).
    pub fn start_answering(
        driver: Driver,
        queries: tokio::sync::mpsc::Receiver<lab_telemetry::Query>,
    ) -> Watch {
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(driver.run_answering(tx, queries));
        Watch { snapshots: rx, task }
    }

    /// Follows the snapshots the watcher of lab `name` writes (`lab up` starts it), each read as soon as
    /// it is written: a reader that follows the lab live (the console) then neither scrapes nor evaluates
    /// anything itself. Where no watcher runs, or its snapshot stays older than [`crate::live::FRESH`],
    /// `driver` runs here instead, as [`Watch::start`] does.
    pub fn follow(name: String, driver: Driver) -> Watch {
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(crate::live::follow(name, driver, tx));
        Watch { snapshots: rx, task }
    }

    /// A reader of the snapshots; `None` until the first one.
    pub fn subscribe(&self) -> watch::Receiver<Option<Snapshot>> {
        self.snapshots.clone()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
