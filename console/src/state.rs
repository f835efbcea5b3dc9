//! The console's state, apart from any terminal: the latest snapshot, the status line and the help
//! overlay. Snapshots and keys change it; time is passed in, so it is tested without a clock.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use lab_model::Snapshot;

use crate::action::{Action, FaultKey, Feedback};

/// How long an action's feedback stays in the status line.
pub const FEEDBACK_MS: u64 = 15_000;

/// A line in the status bar and when it was set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusLine {
    pub text: String,
    pub ok: bool,
    /// True while the action has been sent and no feedback has come back.
    pub pending: bool,
    pub at_ms: u64,
}

/// Everything the screen shows.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// The latest snapshot, if any arrived.
    pub snapshot: Option<Snapshot>,
    /// When it arrived (console clock), ms since the Unix epoch.
    pub received_at_ms: u64,
    pub status: Option<StatusLine>,
    pub help: bool,
    /// True once the snapshot source is gone (the collector stopped).
    pub source_closed: bool,
    /// How the console was started: its look and whether its keys act.
    pub options: Options,
}

/// How the console is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Draw with colours. Off with `NO_COLOR`: emphasis is then bold, underline and the screen's own
    /// marks (▲ on the outlier, * on a drifted limit), never colour alone.
    pub colour: bool,
    /// Keys never inject or clear (`lab console --read-only`, for a demo where a stray key must not
    /// change the lab): only help and quit act.
    pub read_only: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            colour: true,
            read_only: false,
        }
    }
}

impl Options {
    /// The options for a console on a terminal: colour unless `NO_COLOR` is set.
    pub fn from_env(read_only: bool) -> Options {
        Options {
            colour: lab_model::format::colour_for(true),
            read_only,
        }
    }
}

impl State {
    /// An empty state, waiting for the first snapshot.
    pub fn new() -> Self {
        State::default()
    }

    /// An empty state for a console started with `options`.
    pub fn with_options(options: Options) -> Self {
        State {
            options,
            ..State::default()
        }
    }

    /// Takes a new snapshot.
    pub fn apply(&mut self, snapshot: Snapshot, now_ms: u64) {
        self.snapshot = Some(snapshot);
        self.received_at_ms = now_ms;
    }

    /// Shows an action's outcome.
    pub fn on_feedback(&mut self, feedback: Feedback, now_ms: u64) {
        self.status = Some(StatusLine {
            text: feedback.message,
            ok: feedback.ok,
            pending: feedback.working,
            at_ms: now_ms,
        });
    }

    /// The status line to show at `now_ms`, if one is still fresh (a pending action stays until answered).
    pub fn status_line(&self, now_ms: u64) -> Option<&StatusLine> {
        self.status
            .as_ref()
            .filter(|s| s.pending || now_ms.saturating_sub(s.at_ms) < FEEDBACK_MS)
    }

    /// Handles one key: returns the action to send, if any. Only key presses count (some terminals also
    /// report releases).
    pub fn on_key(&mut self, key: KeyEvent, now_ms: u64) -> Option<Action> {
        if key.kind != KeyEventKind::Press {
            return None;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) {
            return matches!(key.code, KeyCode::Char('c') | KeyCode::Char('C')).then_some(Action::Quit);
        }
        let action = match key.code {
            KeyCode::Char('?') => {
                self.help = !self.help;
                return None;
            }
            KeyCode::Esc if self.help => {
                self.help = false;
                return None;
            }
            KeyCode::Char('q') | KeyCode::Esc => return Some(Action::Quit),
            // Read-only: whatever else is pressed changes nothing.
            _ if self.options.read_only => return None,
            KeyCode::Char('c') => Action::ClearAll,
            KeyCode::Char(c) => {
                let inject = FaultKey::all()
                    .into_iter()
                    .find(|f| f.key() == c)
                    .map(Action::Inject);
                let clear = FaultKey::all()
                    .into_iter()
                    .find(|f| f.key().to_ascii_uppercase() == c)
                    .map(Action::Clear);
                inject.or(clear)?
            }
            _ => return None,
        };
        let text = match action {
            Action::Inject(f) => format!("injecting {f}…"),
            Action::Clear(f) => format!("clearing {f}…"),
            Action::ClearAll => "clearing all faults…".to_string(),
            Action::Quit => String::new(),
        };
        self.help = false;
        self.status = Some(StatusLine {
            text,
            ok: true,
            pending: true,
            at_ms: now_ms,
        });
        Some(action)
    }
}

#[cfg(test)]
mod tests {
    use crossterm::event::{KeyEventState, KeyModifiers};

    use super::*;
    use lab_model::FaultKind;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    #[test]
    fn keys_map_to_actions() {
        let mut s = State::new();
        assert_eq!(
            s.on_key(key(KeyCode::Char('s')), 0),
            Some(Action::Inject(FaultKey(FaultKind::SlowStorage)))
        );
        assert_eq!(
            s.on_key(key(KeyCode::Char('T')), 0),
            Some(Action::Clear(FaultKey(FaultKind::ThrottledRank)))
        );
        assert_eq!(
            s.on_key(key(KeyCode::Char('u')), 0),
            Some(Action::Inject(FaultKey(FaultKind::UnplaceableRank)))
        );
        assert_eq!(s.on_key(key(KeyCode::Char('c')), 0), Some(Action::ClearAll));
        assert_eq!(s.on_key(key(KeyCode::Char('x')), 0), None);
        assert_eq!(s.on_key(key(KeyCode::Char('q')), 0), Some(Action::Quit));
        assert_eq!(
            s.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL), 0),
            Some(Action::Quit)
        );
    }

    #[test]
    fn a_read_only_console_ignores_every_key_that_would_change_the_lab() {
        let mut s = State::with_options(Options {
            read_only: true,
            ..Options::default()
        });
        for c in ['s', 't', 'u', 'S', 'T', 'U', 'c', 'x'] {
            assert_eq!(s.on_key(key(KeyCode::Char(c)), 0), None, "{c}");
        }
        assert!(s.status.is_none(), "nothing is said to be under way");
        assert_eq!(s.on_key(key(KeyCode::Char('?')), 0), None);
        assert!(s.help);
        assert_eq!(s.on_key(key(KeyCode::Char('q')), 0), Some(Action::Quit));
    }

    #[test]
    fn releases_are_ignored() {
        let mut s = State::new();
        let release = KeyEvent {
            code: KeyCode::Char('s'),
            modifiers: KeyModifiers::NONE,
            kind: KeyEventKind::Release,
            state: KeyEventState::NONE,
        };
        assert_eq!(s.on_key(release, 0), None);
    }

    #[test]
    fn help_overlay_toggles_and_esc_closes_it_before_quitting() {
        let mut s = State::new();
        assert_eq!(s.on_key(key(KeyCode::Char('?')), 0), None);
        assert!(s.help);
        assert_eq!(s.on_key(key(KeyCode::Esc), 0), None);
        assert!(!s.help);
        assert_eq!(s.on_key(key(KeyCode::Esc), 0), Some(Action::Quit));
    }

    #[test]
    fn status_line_shows_pending_then_feedback_then_fades() {
        let mut s = State::new();
        s.on_key(key(KeyCode::Char('s')), 1_000);
        assert_eq!(s.status_line(60_000).unwrap().text, "injecting slow-storage…");
        s.on_feedback(
            Feedback::working("injecting slow-storage: storage-1 +300 ms …"),
            2_000,
        );
        assert!(s.status_line(60_000).unwrap().pending);
        s.on_feedback(Feedback::error("slow-storage: storage-1 is not running"), 61_000);
        let l = s.status_line(62_000).unwrap();
        assert!(!l.ok && !l.pending);
        assert!(s.status_line(61_000 + FEEDBACK_MS).is_none());
    }
}
