//! The simulated accelerator's fault (`lab-rank --device-fault-after`, set on one rank by the rank-crash
//! fault): after how many steps of a process the device fails and the rank exits.
//!
//! A bad device or driver setting fails soon after it takes effect and then again and again. The first
//! failure in a pod comes after `first` steps, the later ones after `after` steps of each restarted process,
//! so the fault shows within seconds while the job still reaches a checkpoint between two crashes. The
//! rank tells the first from the later ones by a record in a folder that outlives its restarts but not its
//! pod (`--scratch-dir`: the pod's emptyDir on Kubernetes, a folder the supervisor empties for each new
//! pod on the local runtime); without that folder every process counts as a later one.

use std::path::{Path, PathBuf};

/// The record of the device's failures in this pod, in the scratch folder: their count.
pub const RECORD: &str = "device-faults";

/// When the simulated accelerator of this rank fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFault {
    /// Steps of each process after the pod's first failure (0: the device never fails).
    pub after: u64,
    /// Steps before the pod's first failure (0: as `after`; never more than `after`).
    pub first: u64,
    /// The folder that outlives the rank's restarts, where the failures are counted.
    pub scratch: Option<PathBuf>,
}

impl DeviceFault {
    /// Steps this process runs before its device fails (0: it never does), and how many failures this pod
    /// had before it (`None`: not known, without a scratch folder).
    #[must_use]
    pub fn plan(&self) -> (u64, Option<u64>) {
        if self.after == 0 {
            return (0, None);
        }
        let before = self.scratch.as_deref().map(failures);
        let steps = match before {
            Some(0) if self.first > 0 => self.first.min(self.after),
            _ => self.after,
        };
        (steps, before)
    }

    /// A process whose device does not fail (no setting) forgets the failures recorded before it: the
    /// setting was removed and its container restarted (Kubernetes) without a new pod, and a later
    /// setting in the same pod fails sooner first again, as it would in a new pod.
    ///
    /// # Errors
    /// The record exists and cannot be removed.
    pub fn forget_if_healthy(&self) -> std::io::Result<()> {
        let Some(dir) = self.scratch.as_deref().filter(|_| self.after == 0) else {
            return Ok(());
        };
        match std::fs::remove_file(dir.join(RECORD)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Counts one more failure in this pod's record (the folder is made if missing).
    ///
    /// # Errors
    /// The folder or the record cannot be written.
    pub fn record(&self) -> std::io::Result<()> {
        let Some(dir) = &self.scratch else {
            return Ok(());
        };
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join(RECORD), format!("{}\n", failures(dir) + 1))
    }
}

/// The failures recorded in `dir` (none when the record is missing or unreadable).
fn failures(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join(RECORD))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(after: u64, first: u64, scratch: Option<PathBuf>) -> DeviceFault {
        DeviceFault {
            after,
            first,
            scratch,
        }
    }

    #[test]
    fn the_first_failure_in_a_pod_comes_sooner_and_the_later_ones_after_the_full_count() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("rank-1");
        let f = fault(150, 25, Some(scratch.clone()));
        assert_eq!(f.plan(), (25, Some(0)));
        f.record().unwrap();
        assert_eq!(f.plan(), (150, Some(1)));
        f.record().unwrap();
        assert_eq!(f.plan(), (150, Some(2)));
        assert_eq!(std::fs::read_to_string(scratch.join(RECORD)).unwrap(), "2\n");
        // A new pod starts with an empty folder: its first failure comes sooner again.
        std::fs::remove_dir_all(&scratch).unwrap();
        assert_eq!(f.plan(), (25, Some(0)));
        // So does the same pod once a process ran without the setting.
        f.record().unwrap();
        f.forget_if_healthy().unwrap();
        assert_eq!(f.plan(), (150, Some(1)), "a failing device remembers");
        fault(0, 25, Some(scratch.clone())).forget_if_healthy().unwrap();
        assert_eq!(f.plan(), (25, Some(0)));
        fault(0, 25, Some(scratch.clone())).forget_if_healthy().unwrap();
    }

    #[test]
    fn without_a_scratch_folder_or_a_first_count_every_process_runs_the_full_count() {
        assert_eq!(fault(150, 25, None).plan(), (150, None));
        fault(150, 25, None).record().unwrap();
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(fault(150, 0, Some(dir.path().into())).plan(), (150, Some(0)));
        // The first count is never more than the later one.
        assert_eq!(fault(10, 25, Some(dir.path().into())).plan(), (10, Some(0)));
    }

    #[test]
    fn a_device_that_never_fails_reads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(RECORD), "3").unwrap();
        assert_eq!(fault(0, 25, Some(dir.path().into())).plan(), (0, None));
    }

    #[test]
    fn an_unreadable_record_counts_as_none() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(RECORD), "garbage").unwrap();
        assert_eq!(fault(150, 25, Some(dir.path().into())).plan(), (25, Some(0)));
    }
}
