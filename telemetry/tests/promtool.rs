//! The rule file is valid Prometheus: `promtool check rules` accepts it and `promtool test rules` passes
//! its unit tests. promtool comes from Debian's `prometheus` package; `scripts/tools.sh promtool` installs
//! it when missing.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn promtool() -> PathBuf {
    let found = |p: &Path| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if found(Path::new("promtool")) {
        return PathBuf::from("promtool");
    }
    let install = Command::new("bash")
        .arg(root().join("scripts/tools.sh"))
        .arg("promtool")
        .output();
    if found(Path::new("promtool")) {
        return PathBuf::from("promtool");
    }
    let why = match install {
        Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
        Err(e) => e.to_string(),
    };
    panic!(
        "promtool is not installed and scripts/tools.sh could not install it ({}): install Debian's \
         prometheus package (apt-get install prometheus) and run the test again",
        why.trim()
    );
}

fn run(args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(root().join("manifests/rules"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    text
}

#[test]
fn promtool_checks_the_rule_file() {
    let out = run(&["check", "rules", "golden-signals.yaml"]);
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn promtool_unit_tests_pass() {
    let out = run(&["test", "rules", "golden-signals.test.yaml"]);
    assert!(out.contains("SUCCESS"), "{out}");
}
