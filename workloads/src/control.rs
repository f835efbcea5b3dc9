//! Rank 0's checkpoint control: `POST /checkpoint` on its metrics endpoint asks the job to save a
//! checkpoint after the step it is in, `GET /checkpoint` says whether it has. The endpoint's threads count
//! requests here; the training loop takes them between steps (a checkpoint is a whole step's model) and
//! the writer thread reports each checkpoint it wrote back here.

use std::sync::Mutex;

use lab_model::checkpoint::{CheckpointState, SavedCheckpoint};

/// The header that carries the lab's control token on a request that changes the job.
pub const TOKEN_HEADER: &str = "x-lab-control-token";

/// The shared state between the endpoint, the training loop and the checkpoint writer.
#[derive(Debug)]
pub struct CheckpointControl {
    state: Mutex<Inner>,
    /// The lab's token: with one, a request that changes the job must carry it ([`TOKEN_HEADER`]). On
    /// Kubernetes any pod that reaches the rank's port could otherwise ask it to checkpoint, and a
    /// NetworkPolicy needs a network plugin that enforces it, which a kind node may not run.
    token: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    public: CheckpointState,
    /// The latest request the training loop has taken.
    taken: u64,
}

impl CheckpointControl {
    /// The control of a rank 0 process that started at `started_ms`.
    pub fn new(started_ms: u64) -> Self {
        CheckpointControl {
            state: Mutex::new(Inner {
                public: CheckpointState {
                    started_ms,
                    ..CheckpointState::default()
                },
                taken: 0,
            }),
            token: None,
        }
    }

    /// Requests that change the job must carry `token` (none, or an empty one: they need not).
    #[must_use]
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// Whether a request that carries `given` (its [`TOKEN_HEADER`]) may change the job.
    pub fn allows(&self, given: Option<&str>) -> bool {
        match (&self.token, given) {
            (None, _) => true,
            // Compared in full whatever differs first, so the time taken says nothing about the token.
            (Some(t), Some(g)) => {
                t.len() == g.len() && t.bytes().zip(g.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
            }
            (Some(_), None) => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state as the endpoint answers it.
    pub fn state(&self) -> CheckpointState {
        self.lock().public.clone()
    }

    /// Counts a request; returns the state with it counted.
    pub fn request(&self) -> CheckpointState {
        let mut s = self.lock();
        s.public.requested += 1;
        s.public.clone()
    }

    /// The training loop, between steps: the latest request not taken yet, now taken.
    pub fn take(&self) -> Option<u64> {
        let mut s = self.lock();
        (s.public.requested > s.taken).then(|| {
            s.taken = s.public.requested;
            s.taken
        })
    }

    /// Puts a taken request back (the writer could not take the checkpoint): the next step tries again.
    pub fn untake(&self, request: u64) {
        let mut s = self.lock();
        if s.taken == request {
            s.taken = request - 1;
        }
    }

    /// The training loop: the steps completed, and whether the job trains.
    pub fn progress(&self, step: u64, training: bool) {
        let mut s = self.lock();
        s.public.step = step;
        s.public.training = training;
    }

    /// The writer: a checkpoint of `step` is written, answering `request` (0: a periodic one).
    pub fn saved(&self, step: u64, at_ms: u64, request: u64) {
        let mut s = self.lock();
        // A periodic checkpoint written after an asked-for one still answers what that one answered.
        let answered = s.public.last.map_or(0, |c| c.request);
        s.public.last = Some(SavedCheckpoint {
            step,
            at_ms,
            request: request.max(answered),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_taken_once_and_answered_by_the_checkpoint_written() {
        let c = CheckpointControl::new(5);
        assert_eq!(c.take(), None);
        let s = c.request();
        assert_eq!((s.requested, s.started_ms), (1, 5));
        c.request();
        assert_eq!(
            c.take(),
            Some(2),
            "two requests before a step: one checkpoint answers both"
        );
        assert_eq!(c.take(), None);
        c.saved(100, 10, 0);
        assert_eq!(c.state().answer(2), None);
        c.saved(107, 11, 2);
        assert_eq!(c.state().answer(1).map(|s| s.step), Some(107));
        c.saved(200, 12, 0);
        assert_eq!(c.state().answer(2).map(|s| s.step), Some(200));
        let r = c.request().requested;
        assert_eq!(c.take(), Some(r));
        c.untake(r);
        assert_eq!(
            c.take(),
            Some(r),
            "a request the writer could not take is taken again"
        );
    }
}
