//! The README's first session, run as written: every command of the block between `<!-- first-session -->`
//! and `<!-- /first-session -->` in README.md, one after the other through `sh -c` from the repository's
//! root (as a reader who followed the set-up above it: the built binaries first on `PATH`, `LAB_WEED`
//! set), each expected to exit 0, on a lab of its own (`LAB_NAME`) in a state folder of its own
//! (`LAB_STATE_DIR`). The lab is taken down at the end whatever happened, and the block's own `lab down`
//! must leave nothing behind.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use lab_tests::{Lab, bin_dir, serial, text, weed};

const START: &str = "<!-- first-session -->";
const END: &str = "<!-- /first-session -->";

/// The repository's root (this package is its `tests/` folder).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package sits in the repository")
        .to_path_buf()
}

/// The command lines of the README's first-session block: the lines of its one ```sh block, blank lines
/// left out. Comments stay: `sh -c` reads them as a reader's shell does.
fn first_session(readme: &str) -> Vec<String> {
    let start = readme
        .find(START)
        .unwrap_or_else(|| panic!("README.md has no {START} marker"));
    let len = readme[start..]
        .find(END)
        .unwrap_or_else(|| panic!("README.md has no {END} after {START}"));
    let block = &readme[start + START.len()..start + len];
    let body = block
        .split_once("```sh\n")
        .unwrap_or_else(|| panic!("no ```sh block between the markers:\n{block}"))
        .1;
    let body = body
        .split_once("```")
        .unwrap_or_else(|| panic!("the ```sh block between the markers is not closed:\n{block}"))
        .0;
    body.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn the_block_is_found_and_cut_as_written() {
    let readme = "intro\n```sh\nnot this\n```\n<!-- first-session -->\n```sh\nlab up   # up\n\nlab down\n```\n<!-- /first-session -->\n";
    assert_eq!(first_session(readme), ["lab up   # up", "lab down"]);
}

#[test]
fn the_readme_first_session_runs_as_written() {
    let _one = serial();
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let commands = first_session(&readme);
    assert!(
        commands.first().is_some_and(|c| c.starts_with("lab up")),
        "the first session starts with `lab up`: {commands:?}"
    );
    assert!(
        commands.last().is_some_and(|c| c.starts_with("lab down")),
        "the first session ends with `lab down`, so it leaves nothing behind: {commands:?}"
    );
    assert!(
        !commands.iter().any(|c| c.starts_with("lab console")),
        "`lab console` takes the terminal: the README shows it outside the block, for a second terminal"
    );

    // `Lab` gives the name and the state folder, and takes the lab down when dropped, also when a command
    // below fails.
    let lab = Lab::new("e2e-first-session");
    let path = std::env::join_paths(std::iter::once(bin_dir()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let mut ports = BTreeSet::new();
    let all = Instant::now();
    for c in &commands {
        let t = Instant::now();
        let out = Command::new("sh")
            .args(["-c", c])
            .current_dir(root())
            .env("PATH", &path)
            .env("LAB_WEED", weed())
            .env("LAB_STATE_DIR", lab.state())
            .env("LAB_NAME", &lab.name)
            .output()
            .expect("run sh");
        eprintln!(
            "{:6.1} s  exit {:?}  {c}",
            t.elapsed().as_secs_f64(),
            out.status.code()
        );
        assert!(out.status.success(), "`{c}` failed:\n{}", text(&out));
        ports.extend(lab.ports());
    }
    eprintln!("{:6.1} s  the whole first session", all.elapsed().as_secs_f64());
    let left = lab.leftovers(&ports);
    assert!(left.is_empty(), "the first session's `lab down` left {left:?}");
}
