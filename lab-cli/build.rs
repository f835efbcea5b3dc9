//! Records the git commit the `lab` binary is built from, for `lab version` and the drill reports:
//! `LAB_GIT_COMMIT` when the build sets it (an image built without the repository's history), else
//! `git rev-parse --short HEAD`, else `unknown`.

// A build script speaks to cargo on stdout; the CLI's rule against println! is for the `lab` binary.
#![allow(clippy::disallowed_macros)]

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=LAB_GIT_COMMIT");
    let commit = std::env::var("LAB_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=LAB_GIT_COMMIT={commit}");
    // Built again when HEAD moves: a checkout (HEAD itself) or a commit on the branch (its ref, loose or
    // packed).
    for path in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--git-path", &r])
    {
        println!("cargo:rerun-if-changed={p}");
    }
}
