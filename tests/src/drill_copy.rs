//! Test copies of the built-in drills: the YAML users see in `drill-file/builtin`, with only what a test must
//! change to fit its time budget (a shorter warm-up and baseline, a trap's shorter verify deadline) or to
//! say what it runs (a name of its own, a remediation command). The fault and the expectation stay the
//! built-in's, so a copy fails or passes for the built-in's reasons.

use std::path::Path;

/// What a copy changes; `None` keeps the built-in's.
#[derive(Debug, Default, Clone, Copy)]
pub struct Edits<'a> {
    /// The copy's name (its report and JUnit case say it).
    pub name: Option<&'a str>,
    pub warmup: Option<&'a str>,
    pub baseline: Option<&'a str>,
    /// The command of every remediate step (None: the lab's own clear).
    pub command: Option<&'a str>,
    /// Good steps in a row that verify the fix.
    pub consecutive_steps: Option<u32>,
    /// The expect step's `hold` (how long it keeps watching after detection).
    pub expect_hold: Option<&'a str>,
    /// The verify step's `hold` (how long a writer's figures must stay back).
    pub verify_hold: Option<&'a str>,
    /// Every verify step's deadline. A trap fails only when this runs out: it needs to be long enough for
    /// the right fix to have passed within it, no longer.
    pub deadline: Option<&'a str>,
    /// Without the built-in's list of the runtimes it runs on (`runtime.kinds`): the copy runs on whatever
    /// runtime the test's lab has.
    pub any_runtime: bool,
}

/// The built-in drill `builtin`'s YAML with `edits` made.
pub fn drill_copy(builtin: &str, edits: &Edits) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../drill-file/builtin/{builtin}.yaml"));
    let yaml = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the built-in drill {}: {e}", path.display()));
    let mut out = String::new();
    let mut in_verify = false;
    for line in yaml.lines() {
        let t = line.trim_start();
        let indent = &line[..line.len() - t.len()];
        if edits.any_runtime && !indent.is_empty() && t.starts_with("kinds: ") {
            continue;
        }
        // A step starts (`  - verify:`); a list inside a step (`- rule: …`) is deeper.
        if t.starts_with("- ") && indent.len() <= 2 {
            in_verify = t == "- verify:";
        }
        let line = match (t.split_once(": ").map_or(t, |(k, _)| k), edits) {
            (
                "hold",
                Edits {
                    verify_hold: Some(h), ..
                },
            ) if in_verify => format!("{indent}hold: {h}"),
            (
                "hold",
                Edits {
                    expect_hold: Some(h), ..
                },
            ) if !in_verify => format!("{indent}hold: {h}"),
            ("name", Edits { name: Some(n), .. }) if indent.is_empty() => format!("name: {n}"),
            ("warmup", Edits { warmup: Some(w), .. }) if indent.is_empty() => format!("warmup: {w}"),
            (
                "baseline",
                Edits {
                    baseline: Some(b), ..
                },
            ) if indent.is_empty() => format!("baseline: {b}"),
            ("timeout", Edits { command: Some(c), .. }) => {
                format!("{line}\n{indent}command: '{}'", c.replace('\'', "''"))
            }
            (
                "consecutive_steps",
                Edits {
                    consecutive_steps: Some(n),
                    ..
                },
            ) => {
                format!("{indent}consecutive_steps: {n}")
            }
            (
                "deadline",
                Edits {
                    deadline: Some(d), ..
                },
            ) => format!("{indent}deadline: {d}"),
            _ => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A copy whose last remediation is tried twice: first `trap` (the look-alike's fix), judged with a verify
/// deadline of `deadline`, which must fail; then the copy's own remediation and verification, which must
/// pass. The drill goes back for its second attempt on the failed verification, so one drill shows the
/// trap failing and the right fix passing, at the cost of one fault's set-up. `copy` must end with its
/// last `remediate` and `verify` steps, as every built-in does.
pub fn trap_first(copy: &str, trap: &str, deadline: &str) -> String {
    let start = copy
        .rfind("\n  - remediate:")
        .expect("a drill with a remediate step")
        + 1;
    // The steps end where the next top-level key (or its comment) begins: `fixes:` follows them.
    let end = copy[start..]
        .match_indices('\n')
        .map(|(i, _)| start + i + 1)
        .find(|&i| copy[i..].starts_with(|c: char| !c.is_whitespace()))
        .unwrap_or(copy.len());
    let tail = &copy[start..end];
    assert!(
        tail.contains("\n  - verify:"),
        "the last remediate is followed by its verify"
    );
    let mut trapped = String::new();
    for line in tail.lines() {
        let t = line.trim_start();
        let indent = &line[..line.len() - t.len()];
        match t.split_once(": ").map_or(t, |(k, _)| k) {
            // The copy's own command, if it has one, is the right fix's: the trap's replaces it.
            "command" if indent.len() > 2 => continue,
            "timeout" => trapped.push_str(&format!(
                "{line}\n{indent}command: '{}'",
                trap.replace('\'', "''")
            )),
            "deadline" => trapped.push_str(&format!("{indent}deadline: {deadline}")),
            _ => trapped.push_str(line),
        }
        trapped.push('\n');
    }
    format!("{}{trapped}{tail}{}", &copy[..start], &copy[end..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trap_goes_before_the_right_fix_and_what_follows_the_steps_stays_once() {
        let copy = drill_copy("competing-job", &Edits::default());
        let t = trap_first(&copy, "lab storage drain 1", "30s");
        assert_eq!(t.matches("\nfixes:").count(), 1, "{t}");
        assert_eq!(t.matches("\n  - remediate:").count(), 2, "{t}");
        assert!(t.rfind("\n  - verify:") < t.find("\nfixes:"), "{t}");
        assert!(t.contains("command: 'lab storage drain 1'"), "{t}");
    }

    #[test]
    fn a_copy_changes_only_what_it_is_told() {
        let builtin = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../drill-file/builtin/unplaceable-rank.yaml"),
        )
        .unwrap();
        assert_eq!(drill_copy("unplaceable-rank", &Edits::default()), builtin);
        let copy = drill_copy(
            "unplaceable-rank",
            &Edits {
                name: Some("scale-back-trap"),
                warmup: Some("2s"),
                baseline: Some("8s"),
                command: Some("lab scale ranks 4 && echo 'done'"),
                consecutive_steps: Some(50),
                deadline: Some("30s"),
                ..Edits::default()
            },
        );
        let want = builtin
            .replace("name: unplaceable-rank", "name: scale-back-trap")
            .replace("warmup: 5s", "warmup: 2s")
            .replace("baseline: 15s", "baseline: 8s")
            .replace(
                "      timeout: 180s\n",
                "      timeout: 180s\n      command: 'lab scale ranks 4 && echo ''done'''\n",
            )
            .replace("consecutive_steps: 100", "consecutive_steps: 50")
            .replace("deadline: 90s", "deadline: 30s");
        assert_eq!(copy, want);
    }

    #[test]
    fn a_copy_for_any_runtime_drops_the_runtimes_list_alone() {
        let builtin = drill_copy("slow-disk", &Edits::default());
        assert!(builtin.contains("\n  kinds: [local, kind]\n"), "{builtin}");
        let copy = drill_copy(
            "slow-disk",
            &Edits {
                any_runtime: true,
                ..Edits::default()
            },
        );
        assert_eq!(copy, builtin.replace("  kinds: [local, kind]\n", ""));
    }

    #[test]
    fn a_copy_tells_the_expect_hold_from_the_verify_hold() {
        let copy = drill_copy(
            "sync-replica",
            &Edits {
                expect_hold: Some("1s"),
                verify_hold: Some("3s"),
                ..Edits::default()
            },
        );
        let builtin = drill_copy("sync-replica", &Edits::default());
        let want = builtin
            .replace("      hold: 5s\n", "      hold: 1s\n")
            .replace("      hold: 10s\n", "      hold: 3s\n");
        assert_ne!(builtin, want);
        assert_eq!(copy, want);
    }

    #[test]
    fn a_trap_first_copy_tries_the_trap_then_the_right_fix() {
        let right = drill_copy(
            "slow-disk",
            &Edits {
                command: Some("lab storage drain 1"),
                ..Edits::default()
            },
        );
        let copy = trap_first(&right, "lab restart rank 1", "25s");
        let steps: Vec<&str> = copy
            .lines()
            .filter(|l| l.starts_with("  - "))
            .map(str::trim)
            .collect();
        assert_eq!(
            steps,
            [
                "- inject:",
                "- expect:",
                "- remediate:",
                "- verify:",
                "- remediate:",
                "- verify:"
            ]
        );
        let commands: Vec<&str> = copy
            .lines()
            .filter_map(|l| l.trim().strip_prefix("command: "))
            .collect();
        assert_eq!(commands, ["'lab restart rank 1'", "'lab storage drain 1'"]);
        let deadlines: Vec<&str> = copy
            .lines()
            .filter_map(|l| l.trim().strip_prefix("deadline: "))
            .collect();
        assert_eq!(deadlines, ["25s", "60s"]);
        // Everything before the remediation is the copy's, untouched, and the right fix comes last as it was.
        let at = right.rfind("  - remediate:").unwrap();
        assert!(copy.starts_with(&right[..at]));
        assert!(copy.ends_with(&right[at..]));
    }
}
