//! A terminal for tests: a tmux server on a private socket, one pane running a plain shell, keys sent
//! to it and its screen captured. The server is killed when the value is dropped.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Makes sure `tmux` runs, installing it with `scripts/tools.sh tmux` when it is missing.
pub fn ensure_tmux() {
    let ok = || {
        Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ok() {
        return;
    }
    let tools = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/tools.sh");
    let _ = Command::new("bash").arg(tools).arg("tmux").output();
    assert!(
        ok(),
        "tmux is missing and scripts/tools.sh could not install it: apt-get install tmux"
    );
}

/// One tmux server with one pane of `cols` × `rows` running `bash` with the prompt `$ `.
#[derive(Debug)]
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts the server (its socket named after `name` and this process) and waits for the prompt.
    pub fn start(name: &str, cols: u16, rows: u16) -> Tmux {
        ensure_tmux();
        let t = Tmux {
            socket: format!("{name}-{}", std::process::id()),
        };
        let (cols, rows) = (cols.to_string(), rows.to_string());
        t.cmd(&[
            "new-session",
            "-d",
            "-x",
            &cols,
            "-y",
            &rows,
            "env RUST_BACKTRACE=0 PS1='$ ' bash --norc --noprofile",
        ]);
        t.wait_for("$", Duration::from_secs(5));
        t
    }

    /// Runs one tmux command against this server; a failure fails the test.
    pub fn cmd(&self, args: &[&str]) -> Output {
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

    /// Sends keys (tmux key names such as `Enter` or `C-c`, or literal text) to the pane.
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend(keys);
        self.cmd(&args);
    }

    /// Types a line into the pane's shell.
    pub fn line(&self, text: &str) {
        self.keys(&[text, "Enter"]);
    }

    /// What the pane shows now.
    pub fn pane(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "0"]).stdout).into_owned()
    }

    /// Waits until the pane shows `text` and returns the pane; fails the test with the pane after `within`.
    pub fn wait_for(&self, text: &str, within: Duration) -> String {
        self.wait_for_all(&[text], within)
    }

    /// Waits until the pane shows every one of `texts` at once and returns the pane; fails the test with
    /// the pane and what it lacks after `within`.
    pub fn wait_for_all(&self, texts: &[&str], within: Duration) -> String {
        let until = Instant::now() + within;
        loop {
            let pane = self.pane();
            let missing: Vec<&&str> = texts.iter().filter(|t| !pane.contains(**t)).collect();
            if missing.is_empty() {
                return pane;
            }
            assert!(
                Instant::now() < until,
                "{missing:?} did not appear within {within:?}; the pane shows:\n{pane}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the pane no longer shows `text`.
    pub fn wait_gone(&self, text: &str, within: Duration) {
        let until = Instant::now() + within;
        while self.pane().contains(text) {
            assert!(Instant::now() < until, "{text:?} is still shown");
            std::thread::sleep(Duration::from_millis(100));
        }
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
