//! The console's loop in a real terminal (tmux): keys reach the lab as actions and their feedback shows,
//! and the terminal comes back (cooked mode, main screen) on quit, Ctrl-C, SIGTERM and a panic.
//!
//! It drives `lab-console-demo` (the console over a synthetic lab) so that it needs no lab; the
//! end-to-end test of `lab console` against a live local lab lives with the lab's end-to-end tests.
//! tmux comes from `scripts/tools.sh tmux`. Each test runs its own tmux server on a private socket and
//! kills that server when done.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use lab_tests::Tmux;

fn demo() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lab-console-demo"))
}

/// Runs the demo in the foreground of the pane's shell, and waits for its first screen.
fn run_demo(t: &Tmux, args: &str) {
    t.line(&format!("clear; {} {args}; echo EXITED $?", demo().display()));
    t.wait_for("Training: 100% of normal", Duration::from_secs(10));
}

/// After the console ended: its exit code is shown on the shell's own screen, and the terminal is back
/// in cooked mode with echo.
fn assert_restored(t: &Tmux, code: i32) {
    let pane = t.wait_for(&format!("EXITED {code}"), Duration::from_secs(10));
    assert!(
        !pane.contains("┌ Kubernetes"),
        "the console's screen is still shown:\n{pane}"
    );
    // The quotes keep the marker out of the echoed command line.
    t.line("echo \"MO\"\"DES $(stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\\n' ' ')\"");
    let pane = t.wait_for("MODES ", Duration::from_secs(5));
    assert!(
        pane.contains("MODES icanon echo"),
        "terminal not restored:\n{pane}"
    );
}

#[test]
fn keys_send_actions_show_feedback_and_quit_restores_the_terminal() {
    let t = Tmux::start("lab-console-keys", 150, 40);
    run_demo(&t, "");
    t.keys(&["s"]);
    t.wait_for(
        "Training: 7% of normal · storage-1 read p50 488 ms (siblings 3.0 ms)",
        Duration::from_secs(5),
    );
    // The feedback and the next snapshot arrive on separate channels, in either order.
    let pane = t.wait_for("demo: slow-storage marked injected", Duration::from_secs(5));
    assert!(pane.contains("storage-1 ▲"), "{pane}");
    t.keys(&["?"]);
    t.wait_for("Inject a fault with its key", Duration::from_secs(5));
    t.keys(&["Escape"]);
    // A key sent right after Escape would read as Alt+key: wait for the overlay to close first.
    t.wait_gone("Inject a fault with its key", Duration::from_secs(5));
    t.keys(&["S"]);
    t.wait_for("Training: 100% of normal", Duration::from_secs(5));
    t.keys(&["q"]);
    assert_restored(&t, 0);
}

#[test]
fn ctrl_c_restores_the_terminal() {
    let t = Tmux::start("lab-console-ctrlc", 150, 40);
    run_demo(&t, "");
    t.keys(&["C-c"]);
    assert_restored(&t, 0);
}

#[test]
fn sigterm_restores_the_terminal() {
    let t = Tmux::start("lab-console-term", 150, 40);
    run_demo(&t, "");
    let shell = String::from_utf8_lossy(&t.cmd(&["display-message", "-p", "-t", "0", "#{pane_pid}"]).stdout)
        .trim()
        .to_string();
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
    let console: i32 = children
        .split_whitespace()
        .next()
        .expect("the console runs under the shell")
        .parse()
        .unwrap();
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(console.to_string())
        .status()
        .unwrap();
    assert!(status.success());
    assert_restored(&t, 0);
}

#[test]
fn a_panic_restores_the_terminal() {
    let t = Tmux::start("lab-console-panic", 150, 40);
    run_demo(&t, "--panic-after-ms 1500");
    let pane = t.wait_for("EXITED 101", Duration::from_secs(10));
    assert!(
        pane.contains("panicking on purpose"),
        "the panic message is lost:\n{pane}"
    );
    assert_restored(&t, 101);
}
