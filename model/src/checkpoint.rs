//! The job's checkpoint as rank 0 reports it on its own endpoint: `GET /checkpoint` answers this state,
//! `POST /checkpoint` asks the job to save a checkpoint after the step it is in and answers the state with
//! the new request counted. `lab checkpoint` reads it through the runtime (a loopback URL on the local
//! runtime, the API server's pod proxy on Kubernetes) and waits until the job answers its request.

use serde::{Deserialize, Serialize};

/// The path of the checkpoint control on rank 0's metrics endpoint.
pub const PATH: &str = "/checkpoint";

/// Rank 0's checkpoint state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointState {
    /// When this rank 0 process started, ms since the Unix epoch: a request counted by an earlier
    /// process is never answered by a later one.
    pub started_ms: u64,
    /// The steps the job has completed, as rank 0 knows them.
    pub step: u64,
    /// Whether the job trains (false while rank 0 waits at rendezvous for its peers).
    pub training: bool,
    /// Checkpoint requests this process received; the latest request's number.
    pub requested: u64,
    /// The last checkpoint this process wrote (periodic or asked for), if any.
    pub last: Option<SavedCheckpoint>,
}

/// One checkpoint written to storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedCheckpoint {
    /// Steps completed when it was taken.
    pub step: u64,
    /// When its write finished, ms since the Unix epoch.
    pub at_ms: u64,
    /// The request it answered (every request up to this number); 0 for a periodic one.
    pub request: u64,
}

impl CheckpointState {
    /// The checkpoint that answers request `request`, once written.
    pub fn answer(&self, request: u64) -> Option<SavedCheckpoint> {
        self.last.filter(|c| request > 0 && c.request >= request)
    }
}

/// The change record's `target` and `what` of a checkpoint saved on request (`lab checkpoint`): an action
/// in the change log, though it changes nothing in the lab.
pub const CHANGE_TARGET: &str = "training job";
/// See [`CHANGE_TARGET`].
pub const CHANGE_WHAT: &str = "checkpoint";

/// Whether a change record is a checkpoint saved on request rather than a change to the lab.
pub fn is_checkpoint(c: &crate::ChangeRecord) -> bool {
    c.target == CHANGE_TARGET && c.what == CHANGE_WHAT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_answered_by_a_checkpoint_that_counts_it() {
        let mut s = CheckpointState {
            requested: 3,
            ..CheckpointState::default()
        };
        assert_eq!(s.answer(3), None);
        s.last = Some(SavedCheckpoint {
            step: 400,
            at_ms: 1,
            request: 0,
        });
        assert_eq!(s.answer(3), None, "a periodic checkpoint answers no request");
        s.last = Some(SavedCheckpoint {
            step: 412,
            at_ms: 2,
            request: 3,
        });
        assert_eq!(s.answer(3).map(|c| c.step), Some(412));
        assert_eq!(s.answer(2).map(|c| c.step), Some(412));
        assert_eq!(s.answer(4), None);
        assert_eq!(s.answer(0), None);
    }
}
