//! The console's loop in a real terminal (tmux): keys reach the lab as actions and their feedback shows,
//! and the terminal comes back (cooked mode, main screen) on quit, Ctrl-C, SIGTERM and a panic.
//!
//! It drives `lab-console-demo` (the console over a synthetic lab) so that it needs no lab; the
//! end-to-end test of `lab console` against a live local lab lives with the lab's end-to-end tests.
//! tmux comes from `scripts/tools.sh tmux`. Each test runs its own tmux server on a private socket and
//! kills that server when done.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn demo() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lab-console-demo"))
}

fn ensure_tmux() {
    let ok = || {
        Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ok() {
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let _ = Command::new("bash")
        .arg(root.join("scripts/tools.sh"))
        .arg("tmux")
        .output();
    assert!(
        ok(),
        "tmux is missing and scripts/tools.sh could not install it: apt-get install tmux"
    );
}

struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(name: &str) -> Tmux {
        ensure_tmux();
        let t = Tmux {
            socket: format!("lab-console-{name}-{}", std::process::id()),
        };
        t.cmd(&[
            "new-session",
            "-d",
            "-x",
            "150",
            "-y",
            "40",
            "env RUST_BACKTRACE=0 PS1='$ ' bash --norc --noprofile",
        ]);
        t.wait_for("$", Duration::from_secs(5));
        t
    }

    fn cmd(&self, args: &[&str]) -> Output {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend(keys);
        self.cmd(&args);
    }

    fn line(&self, text: &str) {
        self.keys(&[text, "Enter"]);
    }

    fn pane(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "0"]).stdout).into_owned()
    }

    fn wait_for(&self, text: &str, within: Duration) -> String {
        let until = Instant::now() + within;
        loop {
            let pane = self.pane();
            if pane.contains(text) {
                return pane;
            }
            assert!(
                Instant::now() < until,
                "{text:?} did not appear; the pane shows:\n{pane}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_gone(&self, text: &str, within: Duration) {
        let until = Instant::now() + within;
        while self.pane().contains(text) {
            assert!(Instant::now() < until, "{text:?} is still shown");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs the demo in the foreground of the pane's shell, and waits for its first screen.
    fn run_demo(&self, args: &str) {
        self.line(&format!("clear; {} {args}; echo EXITED $?", demo().display()));
        self.wait_for("Training: 100% of normal", Duration::from_secs(10));
    }

    /// After the console ended: its exit code is shown on the shell's own screen, and the terminal is back
    /// in cooked mode with echo.
    fn assert_restored(&self, code: i32) {
        let pane = self.wait_for(&format!("EXITED {code}"), Duration::from_secs(10));
        assert!(
            !pane.contains("┌ Kubernetes"),
            "the console's screen is still shown:\n{pane}"
        );
        // The quotes keep the marker out of the echoed command line.
        self.line("echo \"MO\"\"DES $(stty -a | tr ' ' '\\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\\n' ' ')\"");
        let pane = self.wait_for("MODES ", Duration::from_secs(5));
        assert!(
            pane.contains("MODES icanon echo"),
            "terminal not restored:\n{pane}"
        );
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

#[test]
fn keys_send_actions_show_feedback_and_quit_restores_the_terminal() {
    let t = Tmux::start("keys");
    t.run_demo("");
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
    t.assert_restored(0);
}

#[test]
fn ctrl_c_restores_the_terminal() {
    let t = Tmux::start("ctrlc");
    t.run_demo("");
    t.keys(&["C-c"]);
    t.assert_restored(0);
}

#[test]
fn sigterm_restores_the_terminal() {
    let t = Tmux::start("term");
    t.run_demo("");
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
    t.assert_restored(0);
}

#[test]
fn a_panic_restores_the_terminal() {
    let t = Tmux::start("panic");
    t.run_demo("--panic-after-ms 1500");
    let pane = t.wait_for("EXITED 101", Duration::from_secs(10));
    assert!(
        pane.contains("panicking on purpose"),
        "the panic message is lost:\n{pane}"
    );
    t.assert_restored(101);
}
