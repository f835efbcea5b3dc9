//! What the console asks of the lab (inject or clear a fault, quit), and what the lab tells it back.
//!
//! The console never acts itself: it sends an [`Action`] and shows the [`Feedback`] it gets. The lab CLI
//! maps each [`FaultKey`] to the fault engine with that fault's default parameters.

use lab_model::FaultKind;

/// A fault the console has a key for: the catalogue's faults that name one (`lab_model::fault::Spec::KEY`),
/// the seed's three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultKey(pub FaultKind);

impl FaultKey {
    /// Every fault with a key, in the catalogue's order.
    pub fn all() -> impl Iterator<Item = FaultKey> {
        FaultKind::with_keys().map(|(k, _, _)| FaultKey(k))
    }

    /// The fault's name, as `lab fault` and the ledger write it.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// The key that injects it; the upper-case letter clears it.
    pub fn key(self) -> char {
        self.0.key().map_or('?', |(c, _)| c)
    }

    /// What injecting it does, with the default parameters.
    pub fn describe(self) -> &'static str {
        self.0.key().map_or("", |(_, says)| says)
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
