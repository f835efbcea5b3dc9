//! One file per fault: how it is checked against the lab, applied, proven and recovered. The engine
//! (the engine module) owns the ledger and the order of things; a kind owns only what it does to the lab.
//! Adding a fault is its parameters in `lab_model::fault` (a file and a line in the catalogue), then a file
//! here implementing [`Injector`] for them and a line in [`injector`].

mod competing_job;
mod rank_crash;
mod rank_hang;
mod slow_compute;
mod slow_disk;
mod slow_storage;
mod stuck_rollout;
mod sync_replica;
mod throttled_rank;
mod unplaceable_rank;

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use lab_model::ChangeRecord;
use lab_model::change::ChangeSource;
use lab_model::status::{LabStatus, Phase, PodStatus};
use lab_runtime::state::now_ms;
use lab_runtime::{DelayPath, Runtime};

use crate::ledger::{Before, Ledger};
use crate::{Fault, FaultError};

pub use competing_job::CompetingJob;
pub use rank_crash::RankCrash;
pub use rank_hang::RankHang;
pub use slow_compute::SlowCompute;
pub use slow_disk::SlowDisk;
pub use slow_storage::SlowStorage;
pub use stuck_rollout::StuckRollout;
pub use sync_replica::{SyncReplica, WriterReading, read_writer as sync_replica_reading};
pub use throttled_rank::ThrottledRank;
pub use unplaceable_rank::UnplaceableRank;

/// How long a fault may take to show its effect before the inject reports that it did not.
pub(crate) const PROOF_DEADLINE: Duration = Duration::from_secs(90);

/// What one fault acts on: the runtime, and the ledger entry it writes.
#[derive(Debug)]
pub struct Cx<'a> {
    pub rt: &'a dyn Runtime,
    pub ledger: &'a Ledger,
    /// The ledger entry's id (`slow-storage-1`).
    pub id: &'a str,
    /// The fault, as recorded.
    pub fault: &'a Fault,
}

impl Cx<'_> {
    /// Records in the ledger, before anything changes, the value the fault replaces.
    ///
    /// # Errors
    /// [`FaultError::Ledger`] when the ledger cannot be written.
    pub async fn set_before(&self, before: Before) -> Result<(), FaultError> {
        self.ledger.update(|d| {
            crate::ledger::entry_mut(d, self.id)?.before = before;
            Ok(())
        })
    }

    /// A change record made by this fault.
    pub fn change(
        &self,
        target: String,
        what: &str,
        before: String,
        after: String,
        note: Option<String>,
    ) -> ChangeRecord {
        ChangeRecord {
            at_ms: now_ms(),
            source: ChangeSource::Fault,
            target,
            what: what.into(),
            before,
            after,
            note,
            fault_id: Some(self.id.to_string()),
            by: None,
        }
    }
}

/// What an apply did, for its proof to read and the ledger to keep.
#[derive(Debug, Default)]
pub struct Applied {
    /// How a storage delay reached its path.
    pub path: Option<DelayPath>,
    /// Measured before the fault went in, for the proof to compare with (siblings' latency).
    pub measured_before: Vec<Duration>,
    /// The changes made; the proof may add the values it read back.
    pub changes: Vec<ChangeRecord>,
    /// Rates measured before the fault went in (a server's GET/s), for the proof to compare with.
    pub rates_before: Vec<f64>,
}

/// One kind of fault. Apply and recover are idempotent: applying what is applied, or recovering what is
/// back, changes nothing.
#[async_trait]
pub trait Injector: Send + Sync {
    /// Checks the fault against the lab as it is now (its target exists, the change would be one).
    /// Nothing is changed.
    ///
    /// # Errors
    /// [`FaultError::Invalid`] saying what does not fit.
    fn check(&self, status: &LabStatus) -> Result<(), FaultError>;

    /// Records the value it replaces ([`Cx::set_before`]), then applies the fault to the lab, whose
    /// status was read just before.
    ///
    /// # Errors
    /// The runtime's error.
    async fn apply(&self, cx: &Cx<'_>, status: &LabStatus) -> Result<Applied, FaultError>;

    /// Waits until the fault shows its effect, and says what was measured.
    ///
    /// # Errors
    /// [`FaultError::NotProven`] with what was measured instead.
    async fn prove(
        &self,
        cx: &Cx<'_>,
        status: &LabStatus,
        applied: &mut Applied,
    ) -> Result<String, FaultError>;

    /// Puts back `before` and checks it is back; returns the changes made (none when it already was).
    ///
    /// # Errors
    /// The runtime's error, [`FaultError::NotRestored`], or [`FaultError::Ledger`] for a `before` of another kind.
    async fn recover(&self, cx: &Cx<'_>, before: &Before) -> Result<Vec<ChangeRecord>, FaultError>;
}

/// The injector of `fault`: the registry of kinds.
pub fn injector(fault: &Fault) -> Box<dyn Injector> {
    match fault {
        Fault::SlowStorage(p) => Box::new(p.clone()),
        Fault::ThrottledRank(p) => Box::new(p.clone()),
        Fault::UnplaceableRank(p) => Box::new(p.clone()),
        Fault::StuckRollout(p) => Box::new(p.clone()),
        Fault::RankCrash(p) => Box::new(p.clone()),
        Fault::RankHang(p) => Box::new(p.clone()),
        Fault::SlowCompute(p) => Box::new(p.clone()),
        Fault::CompetingJob(p) => Box::new(p.clone()),
        Fault::SlowDisk(p) => Box::new(p.clone()),
        Fault::SyncReplica(p) => Box::new(p.clone()),
    }
}

/// How often [`wait_until`] looks again.
const LOOK_EVERY: Duration = Duration::from_millis(500);

pub(crate) use lab_runtime::wait::Look;

/// Looks at the lab every half second until a look says it is done, for at most `deadline`; then
/// `timed_out` makes the error from what the last look saw. A look that fails ends the wait with its error.
///
/// # Errors
/// The failed look's error, or `timed_out`'s.
pub(crate) async fn wait_until<T, F, Fut>(
    deadline: Duration,
    look: F,
    timed_out: impl FnOnce(String) -> FaultError,
) -> Result<T, FaultError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Look<T>, FaultError>>,
{
    lab_runtime::wait::poll(LOOK_EVERY, deadline, look)
        .await?
        .map_err(timed_out)
}

/// The ledger holds a `before` that does not belong to this kind of fault.
pub(crate) fn mismatched(cx: &Cx<'_>, before: &Before) -> FaultError {
    FaultError::Ledger {
        path: "ledger".into(),
        what: format!(
            "entry {}: {} has a mismatched before value {before:?}",
            cx.id, cx.fault
        ),
    }
}

/// The fault did not show its effect: `why` says what was measured.
pub(crate) fn not_proven(cx: &Cx<'_>, why: String) -> FaultError {
    FaultError::NotProven {
        fault: cx.fault.to_string(),
        why,
    }
}

/// Checks that storage server `server` exists in the lab.
pub(crate) fn storage_server(status: &LabStatus, server: u32) -> Result<(), FaultError> {
    if server >= status.storage_servers {
        return Err(FaultError::Invalid(format!(
            "--server {server} is out of range: this lab has storage-0 to storage-{}",
            status.storage_servers.saturating_sub(1)
        )));
    }
    Ok(())
}

/// Rank `rank`'s pod, or why `--rank` names none.
pub(crate) fn rank_pod(status: &LabStatus, rank: u32) -> Result<&PodStatus, FaultError> {
    status.ranks().find(|p| p.index == Some(rank)).ok_or_else(|| {
        FaultError::Invalid(format!(
            "--rank {rank} is out of range: this lab has rank-0 to rank-{}",
            status.ranks_desired.saturating_sub(1)
        ))
    })
}

/// Refuses a rank that is not Running: there is nothing `to` (throttle, crash, slow down) on it.
pub(crate) fn running(pod: &PodStatus, rank: u32, to: &str) -> Result<(), FaultError> {
    if pod.phase != Phase::Running {
        return Err(FaultError::Invalid(format!(
            "rank-{rank} is {}, not Running: nothing to {to}",
            pod.phase
        )));
    }
    Ok(())
}

/// Checks that `ranks` is more ranks than the job has and than the node has GPUs; otherwise nothing would
/// be left unplaced, and `so` says what would happen instead.
pub(crate) fn more_ranks_than_gpus(status: &LabStatus, ranks: u32, so: &str) -> Result<(), FaultError> {
    if ranks <= status.ranks_desired {
        return Err(FaultError::Invalid(format!(
            "--ranks {ranks} is not above the current {} ranks: give more ranks than the job has",
            status.ranks_desired
        )));
    }
    if ranks <= status.gpus_capacity {
        return Err(FaultError::Invalid(format!(
            "--ranks {ranks} fits on the node's {} GPUs, so {so}: use --ranks {}",
            status.gpus_capacity,
            status.gpus_capacity + 1
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use lab_model::status::RuntimeKind;
    use lab_runtime::Lab;
    use lab_runtime::testing::FakeRuntime;

    use super::{Injector, RankCrash, RankHang, SlowCompute};

    /// slow-compute and rank-hang run on Kubernetes too (through `exec`), rank-crash through a key of the
    /// job's ConfigMap.
    #[tokio::test]
    async fn the_rank_faults_pass_their_check_on_kubernetes() {
        let mut st = FakeRuntime::new().status().await.unwrap();
        for kind in [RuntimeKind::Kind, RuntimeKind::Cluster] {
            st.runtime = kind;
            SlowCompute { ranks: vec![1, 2] }.check(&st).unwrap();
            RankHang { rank: 1 }.check(&st).unwrap();
            RankCrash { rank: 1, after: 150 }.check(&st).unwrap();
        }
    }
}
