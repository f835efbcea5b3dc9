//! Who approves an agent's act, and how a fault class earns autonomy (the seed: "a fault class earns
//! autonomy one verified fix at a time").
//!
//! An [`Approval`] is a mode and someone to answer when the mode asks. The modes: `auto` (every checked
//! command runs), `ask` (each one is asked), `never` (each one is declined: a read-only agent), and an
//! earned policy ([`EarnedPolicy`], from a policy file): each cause class starts at `ask`, runs on its own
//! (`auto`) after K verified fixes in a row, and drops back to `ask` after a failed verification. The record
//! of verified fixes ([`EarnedState`]) is kept in the lab's folder, so it carries over from drill to drill.
//! An ask is answered from an answers file (`yes`/`no` per line, in order), else on the terminal, else it is
//! declined: nobody was there to say yes.

use std::collections::BTreeMap;
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// The policy file's format identifier, versioned.
pub const POLICY_FORMAT: &str = "straggler-lab.approval-policy/v1";

/// The earned-autonomy state's format identifier, versioned.
pub const STATE_FORMAT: &str = "straggler-lab.approval-state/v1";

/// Verified fixes in a row a class needs before it runs on its own, when the policy file does not say.
pub const DEFAULT_AFTER: u32 = 3;

/// What a class (or the whole run) is set to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClassMode {
    Auto,
    Ask,
    Never,
}

impl std::fmt::Display for ClassMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClassMode::Auto => "auto",
            ClassMode::Ask => "ask",
            ClassMode::Never => "never",
        })
    }
}

/// The earned-autonomy policy, as its file says it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarnedPolicy {
    pub format: String,
    /// Verified fixes in a row before a class runs on its own.
    #[serde(default = "default_after")]
    pub after: u32,
    /// Classes held at a mode whatever their record (`never` for a class the team keeps to itself, `ask`
    /// for one that must always be asked).
    #[serde(default)]
    pub pinned: BTreeMap<String, ClassMode>,
}

fn default_after() -> u32 {
    DEFAULT_AFTER
}

impl EarnedPolicy {
    /// Reads and checks a policy file (YAML or JSON).
    ///
    /// # Errors
    /// A message naming the file and what is wrong with it.
    pub fn from_file(path: &Path) -> Result<EarnedPolicy, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the approval policy {}: {e}", path.display()))?;
        let p: EarnedPolicy = serde_norway::from_str(&text)
            .map_err(|e| format!("{}: not an approval policy: {e}", path.display()))?;
        if p.format != POLICY_FORMAT {
            return Err(format!(
                "{}: format {:?}, this lab reads {POLICY_FORMAT:?}",
                path.display(),
                p.format
            ));
        }
        if p.after == 0 || p.after > 100 {
            return Err(format!(
                "{}: after is {}: give 1 to 100 verified fixes in a row",
                path.display(),
                p.after
            ));
        }
        if let Some(bad) = p
            .pinned
            .keys()
            .find(|c| !crate::plan::causes().contains(&c.as_str()))
        {
            return Err(format!(
                "{}: pinned class {bad:?} is not one of: {}",
                path.display(),
                crate::plan::causes().join(", ")
            ));
        }
        Ok(p)
    }
}

/// One class's record of verified fixes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassRecord {
    /// Verified fixes in a row, since the last failed verification.
    pub verified_in_a_row: u32,
    pub verified_total: u32,
    pub failed_total: u32,
    /// When the record last changed (RFC 3339) and what changed it.
    pub last: Option<String>,
}

/// Every class's record, kept in the lab's folder across drills.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EarnedState {
    pub format: String,
    pub classes: BTreeMap<String, ClassRecord>,
}

impl Default for EarnedState {
    fn default() -> Self {
        EarnedState {
            format: STATE_FORMAT.into(),
            classes: BTreeMap::new(),
        }
    }
}

impl EarnedState {
    /// The state kept at `path`; an empty one when there is none yet.
    ///
    /// # Errors
    /// A message when the file exists but cannot be read or is not a state of this format.
    pub fn load(path: &Path) -> Result<EarnedState, String> {
        match std::fs::read_to_string(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(EarnedState::default()),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
            Ok(text) => {
                let s: EarnedState = serde_json::from_str(&text)
                    .map_err(|e| format!("{}: not an approval state: {e}", path.display()))?;
                if s.format != STATE_FORMAT {
                    return Err(format!(
                        "{}: format {:?}, this lab reads {STATE_FORMAT:?}",
                        path.display(),
                        s.format
                    ));
                }
                Ok(s)
            }
        }
    }

    /// Writes the state to `path` (whole, through a temporary file).
    ///
    /// # Errors
    /// A message when it cannot be written.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, bytes).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Adds one verification of a fix of `class`: a verified fix extends its run, a failed one ends it.
    pub fn record(&mut self, class: &str, verified: bool, when: &str) {
        let r = self.classes.entry(class.to_string()).or_default();
        if verified {
            r.verified_in_a_row += 1;
            r.verified_total += 1;
        } else {
            r.verified_in_a_row = 0;
            r.failed_total += 1;
        }
        r.last = Some(format!(
            "{when}: {}",
            if verified {
                "verified"
            } else {
                "failed verification"
            }
        ));
    }

    /// What `policy` makes of `class` now, and why.
    pub fn mode(&self, policy: &EarnedPolicy, class: &str) -> (ClassMode, String) {
        if let Some(m) = policy.pinned.get(class) {
            return (*m, format!("policy: {class} pinned to {m}"));
        }
        let n = self.classes.get(class).map_or(0, |r| r.verified_in_a_row);
        if n >= policy.after {
            (
                ClassMode::Auto,
                format!(
                    "policy: auto ({n} verified fixes of {class} in a row, {} needed)",
                    policy.after
                ),
            )
        } else {
            (
                ClassMode::Ask,
                format!(
                    "policy: ask ({n} of {} verified fixes of {class} in a row)",
                    policy.after
                ),
            )
        }
    }
}

/// How the acts of a run are approved.
#[derive(Debug, Clone)]
pub enum Mode {
    Auto,
    Ask,
    Never,
    /// The policy and where its state is kept.
    Earned {
        policy: EarnedPolicy,
        state: PathBuf,
    },
}

impl Mode {
    /// `auto`, `ask`, `never`, or the path of a policy file (its state kept at `state`).
    ///
    /// # Errors
    /// A message when the word is none of these and no readable policy file.
    pub fn parse(s: &str, state: &Path) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "ask" => Ok(Mode::Ask),
            "never" => Ok(Mode::Never),
            path => {
                let p = Path::new(path);
                if !p.exists() {
                    return Err(format!(
                        "--approve {path:?}: give auto, ask, never, or the path of an approval policy file"
                    ));
                }
                Ok(Mode::Earned {
                    policy: EarnedPolicy::from_file(p)?,
                    state: state.to_path_buf(),
                })
            }
        }
    }

    /// Its name in reports.
    pub fn label(&self) -> String {
        match self {
            Mode::Auto => "auto".into(),
            Mode::Ask => "ask".into(),
            Mode::Never => "never".into(),
            Mode::Earned { policy, .. } => {
                format!("earned (auto after {} verified fixes in a row)", policy.after)
            }
        }
    }
}

/// Who answers when the mode asks.
#[derive(Debug, Clone)]
pub enum Answers {
    /// Nobody: an ask is declined.
    Nobody,
    /// A person, asked on the controlling terminal.
    Terminal,
    /// Decisions read from a file, one per line in the order they are asked; an ask with no line left is
    /// declined.
    File(Arc<Mutex<std::collections::VecDeque<bool>>>),
}

impl Answers {
    /// The decisions in `path`: one per line, `yes`/`y`/`approve` or `no`/`n`/`decline`; blank lines and `#`
    /// comments are skipped. The first `skip` are taken as already used (by an earlier attempt).
    ///
    /// # Errors
    /// A message when the file cannot be read or a line is neither.
    pub fn from_file(path: &Path, skip: usize) -> Result<Answers, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the approvals file {}: {e}", path.display()))?;
        let mut out = std::collections::VecDeque::new();
        for (i, line) in text.lines().enumerate() {
            let l = line.split('#').next().unwrap_or("").trim().to_lowercase();
            match l.as_str() {
                "" => {}
                "yes" | "y" | "approve" => out.push_back(true),
                "no" | "n" | "decline" => out.push_back(false),
                other => {
                    return Err(format!(
                        "{}:{}: {other:?} is not a decision: write yes or no, one per command",
                        path.display(),
                        i + 1
                    ));
                }
            }
        }
        for _ in 0..skip {
            out.pop_front();
        }
        Ok(Answers::File(Arc::new(Mutex::new(out))))
    }

    /// The terminal when this process has one to ask on (stdin, or the controlling terminal for a process
    /// whose stdin is a protocol), else nobody.
    pub fn terminal_if_any() -> Answers {
        if std::io::stdin().is_terminal() || std::fs::File::open("/dev/tty").is_ok() {
            Answers::Terminal
        } else {
            Answers::Nobody
        }
    }
}

/// A decision on one act.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub approved: bool,
    /// Who decided, and on what ground: `auto`, `approvals file`, `terminal`, `policy: auto (3 verified
    /// fixes of bad-network-path in a row, 3 needed)`, `policy: ask, nobody to ask`.
    pub by: String,
}

/// How the acts of a run are approved: a mode, and who answers when it asks.
#[derive(Debug, Clone)]
pub struct Approval {
    pub mode: Mode,
    pub answers: Answers,
}

impl Approval {
    /// Every checked act runs.
    pub fn auto() -> Approval {
        Approval {
            mode: Mode::Auto,
            answers: Answers::Nobody,
        }
    }

    /// Decides on `line` (the command as one line), proposed for `reason` as a fix of `cause`.
    pub async fn decide(&self, line: &str, reason: &str, cause: Option<&str>) -> Decision {
        let (mode, why) = match &self.mode {
            Mode::Auto => (ClassMode::Auto, "auto".to_string()),
            Mode::Ask => (ClassMode::Ask, "ask".to_string()),
            Mode::Never => (ClassMode::Never, "never".to_string()),
            Mode::Earned { policy, state } => match cause {
                None => (ClassMode::Ask, "policy: ask (no cause named)".to_string()),
                Some(c) => match EarnedState::load(state) {
                    Ok(s) => s.mode(policy, c),
                    Err(e) => (
                        ClassMode::Ask,
                        format!("policy: ask (its state cannot be read: {e})"),
                    ),
                },
            },
        };
        match mode {
            ClassMode::Auto => Decision {
                approved: true,
                by: why,
            },
            ClassMode::Never => Decision {
                approved: false,
                by: format!("{why}: no act runs"),
            },
            ClassMode::Ask => {
                let (approved, who) = self.ask(line, reason, cause).await;
                let by = if why == "ask" {
                    who
                } else {
                    format!("{why}; {who}")
                };
                Decision { approved, by }
            }
        }
    }

    async fn ask(&self, line: &str, reason: &str, cause: Option<&str>) -> (bool, String) {
        match &self.answers {
            Answers::Nobody => (false, "nobody to ask: declined".into()),
            Answers::File(q) => match q.lock().unwrap_or_else(|p| p.into_inner()).pop_front() {
                Some(d) => (d, "approvals file".into()),
                None => (false, "approvals file (no decision left)".into()),
            },
            Answers::Terminal => {
                let prompt = format!(
                    "  approve: {line}\n    reason: {reason}{}\n  run it? [y/N] ",
                    cause.map_or(String::new(), |c| format!("\n    cause: {c}"))
                );
                let yes = tokio::task::spawn_blocking(move || ask_terminal(&prompt))
                    .await
                    .unwrap_or(false);
                (yes, "terminal".into())
            }
        }
    }
}

/// Asks on stdin/stdout when they are a terminal, else on the controlling terminal.
fn ask_terminal(prompt: &str) -> bool {
    let mut line = String::new();
    if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(prompt.as_bytes());
        let _ = o.flush();
        let _ = std::io::stdin().lock().read_line(&mut line);
    } else if let Ok(tty) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
    {
        let mut w = &tty;
        let _ = w.write_all(prompt.as_bytes());
        let _ = w.flush();
        let _ = std::io::BufReader::new(&tty).read_line(&mut line);
    }
    matches!(line.trim().to_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(after: u32) -> EarnedPolicy {
        EarnedPolicy {
            format: POLICY_FORMAT.into(),
            after,
            pinned: BTreeMap::from([("over-scaled".to_string(), ClassMode::Never)]),
        }
    }

    /// A class starts at ask, runs on its own after K verified fixes in a row, and drops back after a
    /// failed verification; a pinned class stays where it is pinned.
    #[test]
    fn a_class_earns_autonomy_one_verified_fix_at_a_time() {
        let p = policy(2);
        let mut s = EarnedState::default();
        assert_eq!(s.mode(&p, "bad-network-path").0, ClassMode::Ask);
        s.record("bad-network-path", true, "t1");
        assert_eq!(s.mode(&p, "bad-network-path").0, ClassMode::Ask);
        s.record("bad-network-path", true, "t2");
        let (m, why) = s.mode(&p, "bad-network-path");
        assert_eq!(m, ClassMode::Auto, "{why}");
        assert!(
            why.contains("2 verified fixes of bad-network-path in a row"),
            "{why}"
        );
        assert_eq!(
            s.mode(&p, "slow-node").0,
            ClassMode::Ask,
            "classes earn separately"
        );
        s.record("bad-network-path", false, "t3");
        assert_eq!(s.mode(&p, "bad-network-path").0, ClassMode::Ask);
        assert_eq!(s.classes["bad-network-path"].verified_total, 2);
        assert_eq!(s.mode(&p, "over-scaled").0, ClassMode::Never);
    }

    #[tokio::test]
    async fn the_state_persists_and_decides_across_processes() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("approval-state.json");
        let file = dir.path().join("policy.yaml");
        std::fs::write(&file, format!("format: {POLICY_FORMAT}\nafter: 1\n")).unwrap();
        let mode = Mode::parse(file.to_str().unwrap(), &state).unwrap();
        let a = Approval {
            mode,
            answers: Answers::Nobody,
        };
        let d = a
            .decide("lab fault clear --all", "r", Some("bad-network-path"))
            .await;
        assert!(!d.approved);
        assert!(d.by.contains("nobody to ask"), "{}", d.by);
        let mut s = EarnedState::load(&state).unwrap();
        s.record("bad-network-path", true, "t");
        s.save(&state).unwrap();
        let d = a
            .decide("lab fault clear --all", "r", Some("bad-network-path"))
            .await;
        assert!(d.approved, "{}", d.by);
        let d = a.decide("lab fault clear --all", "r", None).await;
        assert!(!d.approved, "an act that names no cause is asked");
    }

    #[test]
    fn bad_policies_are_refused_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("s.json");
        let e = Mode::parse("sometimes", &state).unwrap_err();
        assert!(e.contains("auto, ask, never"), "{e}");
        let f = dir.path().join("p.yaml");
        std::fs::write(&f, "format: other/v1\n").unwrap();
        assert!(
            Mode::parse(f.to_str().unwrap(), &state)
                .unwrap_err()
                .contains("format")
        );
        std::fs::write(
            &f,
            format!("format: {POLICY_FORMAT}\npinned: {{gremlins: ask}}\n"),
        )
        .unwrap();
        assert!(
            Mode::parse(f.to_str().unwrap(), &state)
                .unwrap_err()
                .contains("gremlins")
        );
        std::fs::write(&f, format!("format: {POLICY_FORMAT}\nafter: 0\n")).unwrap();
        assert!(
            Mode::parse(f.to_str().unwrap(), &state)
                .unwrap_err()
                .contains("after is 0")
        );
    }

    #[tokio::test]
    async fn answers_come_from_the_file_in_order_after_those_used() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("answers");
        std::fs::write(&f, "yes\n# the trap\nno\nyes\n").unwrap();
        let a = Approval {
            mode: Mode::Ask,
            answers: Answers::from_file(&f, 1).unwrap(),
        };
        assert!(!a.decide("x", "r", None).await.approved);
        let d = a.decide("x", "r", None).await;
        assert_eq!((d.approved, d.by.as_str()), (true, "approvals file"));
        let d = a.decide("x", "r", None).await;
        assert_eq!(
            (d.approved, d.by.as_str()),
            (false, "approvals file (no decision left)")
        );
        std::fs::write(&f, "maybe\n").unwrap();
        assert!(Answers::from_file(&f, 0).unwrap_err().contains("not a decision"));
    }
}
