//! What the console asks of the lab (inject or clear a fault, quit), and what the lab tells it back.
//!
//! The console never acts itself: it sends an [`Action`] and shows the [`Feedback`] it gets. The lab CLI
//! maps each [`FaultKey`] to the fault engine with that fault's default parameters.

/// One of the lab's three faults, as the console's keys name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKey {
    /// One storage server answers every request late.
    SlowStorage,
    /// One rank's CPU limit is cut in place.
    ThrottledRank,
    /// The job is scaled past the GPUs and told to expect the extra rank.
    UnplaceableRank,
}

impl FaultKey {
    /// Every fault, in key order.
    pub const ALL: [FaultKey; 3] = [
        FaultKey::SlowStorage,
        FaultKey::ThrottledRank,
        FaultKey::UnplaceableRank,
    ];

    /// The fault's name, as `lab fault` and the ledger write it.
    pub fn name(self) -> &'static str {
        match self {
            FaultKey::SlowStorage => "slow-storage",
            FaultKey::ThrottledRank => "throttled-rank",
            FaultKey::UnplaceableRank => "unplaceable-rank",
        }
    }

    /// The key that injects it; the upper-case letter clears it.
    pub fn key(self) -> char {
        match self {
            FaultKey::SlowStorage => 's',
            FaultKey::ThrottledRank => 't',
            FaultKey::UnplaceableRank => 'u',
        }
    }

    /// What injecting it does, with the default parameters.
    pub fn describe(self) -> &'static str {
        match self {
            FaultKey::SlowStorage => "storage-1 answers 300 ms late",
            FaultKey::ThrottledRank => "rank-1 CPU limit 400m -> 150m in place",
            FaultKey::UnplaceableRank => "ranks 4 -> 5, world size 5, one GPU short",
        }
    }
}

impl std::fmt::Display for FaultKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A request from the console to the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Inject this fault with its default parameters.
    Inject(FaultKey),
    /// Clear this fault, restoring the values it changed.
    Clear(FaultKey),
    /// Clear every active fault.
    ClearAll,
    /// The person quit the console.
    Quit,
}

/// The outcome of an action, shown in the status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feedback {
    /// One line, e.g. `slow-storage injected: storage-1 +300 ms via latency proxy`.
    pub message: String,
    /// False when the action failed; the line is shown as an error.
    pub ok: bool,
    /// True for progress on an action still running (`injecting slow-storage …`); it stays shown until
    /// the outcome replaces it.
    pub working: bool,
}

impl Feedback {
    /// A success line.
    pub fn ok(message: impl Into<String>) -> Self {
        Feedback {
            message: message.into(),
            ok: true,
            working: false,
        }
    }

    /// A failure line.
    pub fn error(message: impl Into<String>) -> Self {
        Feedback {
            message: message.into(),
            ok: false,
            working: false,
        }
    }

    /// Progress of an action that has not finished yet.
    pub fn working(message: impl Into<String>) -> Self {
        Feedback {
            message: message.into(),
            ok: true,
            working: true,
        }
    }
}
