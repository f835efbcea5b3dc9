//! The live loop: owns the terminal, and turns input, snapshots, feedback and a 1 s tick into state
//! changes and one draw each. The terminal is restored however the loop ends: a Drop guard on return,
//! ratatui's panic hook on a panic, and Ctrl-C (a key in raw mode, or SIGINT/SIGTERM from outside) ends
//! the loop normally.

use std::time::Duration;

use lab_model::clock::now_ms;

use crossterm::event::{Event, EventStream};
use futures::StreamExt;
use lab_model::Snapshot;
use ratatui::DefaultTerminal;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::action::{Action, Feedback};
use crate::error::ConsoleError;
use crate::state::{Options, State};
use crate::view::render;

/// The console redraws at least this often, so ages and since-times keep moving.
pub const REFRESH: Duration = Duration::from_secs(1);

/// Raw mode and the alternate screen for as long as it lives.
struct TerminalGuard {
    terminal: DefaultTerminal,
}

impl TerminalGuard {
    fn enter() -> Result<Self, ConsoleError> {
        // try_init also installs a panic hook that restores the terminal before the panic is printed.
        match ratatui::try_init() {
            Ok(terminal) => Ok(TerminalGuard { terminal }),
            Err(e) => {
                ratatui::restore();
                Err(ConsoleError::Setup(e))
            }
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Handles a key; true when the person quit. A full action queue (the lab still busy with the last
/// action) is said in the status line rather than waited on, so the screen never freezes.
fn on_key(state: &mut State, key: crossterm::event::KeyEvent, actions: &mpsc::Sender<Action>) -> bool {
    match state.on_key(key, now_ms()) {
        Some(Action::Quit) => true,
        Some(action) => {
            if actions.try_send(action).is_err() {
                state.on_feedback(
                    Feedback::error("the lab is busy with the last action: try again"),
                    now_ms(),
                );
            }
            false
        }
        None => false,
    }
}

/// Runs the console until the person quits (q, Esc, Ctrl-C) or the process gets SIGINT/SIGTERM, drawn
/// and keyed as `options` say (no colour with `NO_COLOR`; read-only).
///
/// Reads snapshots from `snapshots`, sends each key's [`Action`] on `actions` (and [`Action::Quit`] when
/// it ends), and shows what comes back on `feedback`. Never talks to a runtime.
///
/// # Errors
/// When the terminal cannot be taken over (not a TTY) or drawing to it fails.
pub async fn run(
    mut snapshots: watch::Receiver<Option<Snapshot>>,
    actions: mpsc::Sender<Action>,
    mut feedback: mpsc::Receiver<Feedback>,
    options: Options,
) -> Result<(), ConsoleError> {
    let mut interrupt = signal(SignalKind::interrupt()).map_err(ConsoleError::Setup)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(ConsoleError::Setup)?;
    let mut guard = TerminalGuard::enter()?;
    let mut events = EventStream::new();
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut state = State::with_options(options);
    if let Some(s) = snapshots.borrow_and_update().clone() {
        state.apply(s, now_ms());
    }
    let (mut snapshots_open, mut feedback_open) = (true, true);
    loop {
        guard
            .terminal
            .draw(|frame| render(frame, &state, now_ms()))
            .map_err(ConsoleError::Io)?;
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(Event::Key(key))) => {
                    if on_key(&mut state, key, &actions) {
                        break;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(ConsoleError::Io(e)),
                None => break,
            },
            changed = snapshots.changed(), if snapshots_open => match changed {
                Ok(()) => {
                    if let Some(s) = snapshots.borrow_and_update().clone() {
                        state.apply(s, now_ms());
                    }
                }
                Err(_) => {
                    snapshots_open = false;
                    state.source_closed = true;
                }
            },
            fb = feedback.recv(), if feedback_open => match fb {
                Some(fb) => state.on_feedback(fb, now_ms()),
                None => feedback_open = false,
            },
            _ = tick.tick() => {}
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
        }
    }
    drop(guard);
    let _ = actions.try_send(Action::Quit);
    Ok(())
}
