//! A user made for one test, to run the lab as a person without root does: made with `useradd` under a
//! name no other test or run uses, and removed with `userdel` when dropped.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A throwaway user without a home folder or a login shell.
#[derive(Debug)]
pub struct User {
    pub name: String,
}

impl User {
    /// True when this process can make users (it runs as root).
    pub fn can_make() -> bool {
        std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1))
                == Some("0")
        })
    }

    /// Makes a user of a name unique to this process.
    ///
    /// # Panics
    /// When `useradd` fails.
    pub fn make() -> User {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "labe2e{}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new("useradd")
            .args([
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                "--user-group",
                &name,
            ])
            .output()
            .expect("run useradd");
        assert!(
            out.status.success(),
            "useradd {name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        User { name }
    }

    /// Hands `dir` to this user.
    ///
    /// # Panics
    /// When `chown` fails.
    pub fn give(&self, dir: &Path) {
        let out = Command::new("chown")
            .arg(format!("{0}:{0}", self.name))
            .arg(dir)
            .output()
            .expect("run chown");
        assert!(
            out.status.success(),
            "chown {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for User {
    /// Removes the user (`-f`: even if a failed test left a process of it running); never panics.
    fn drop(&mut self) {
        let _ = Command::new("userdel").args(["-f", &self.name]).output();
    }
}
