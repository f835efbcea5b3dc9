//! Recording incidents for replay (`lab drill run --record DIR`): per drill run, the incident as the
//! agent first saw it (the whole bundle, so a replay can cut it to any evidence level), the ledger's
//! truth, a short telemetry timeline, and the verified outcome of every plan tried.
//!
//! The folder: `recording.json` names the format; each run is `<drill>/run-<start>.json`. Runs of the
//! same drill add up: the right fix recorded in one run and a trap in another make one incident with two
//! known plans.

use std::path::Path;

use serde::{Deserialize, Serialize};

use lab_model::Verdict;

use crate::{Mitigation, Truth};

/// A shell command line made of `lab` commands joined by `&&` as argv lists (`lab db template
/// --node-selector '' && lab db delete-pod db-1`); `None` when it is anything else (a pipe, a variable, a
/// script).
pub fn lab_commands(line: &str) -> Option<Vec<Vec<String>>> {
    let mut out = Vec::new();
    for part in line.split("&&") {
        let argv = shell_words(part.trim())?;
        if argv.first().map(String::as_str) != Some("lab") {
            return None;
        }
        out.push(argv);
    }
    Some(out)
}

/// `s` split as a POSIX shell splits words, for plain words and quotes; `None` for what needs a shell
/// (`$`, `|`, `;`, `` ` ``, `>`, `<`, `(`).
fn shell_words(s: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut has = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                has = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    cur.push(q);
                }
            }
            '"' => {
                has = true;
                for q in chars.by_ref() {
                    if q == '"' {
                        break;
                    }
                    if matches!(q, '$' | '`') {
                        return None;
                    }
                    cur.push(q);
                }
            }
            c if c.is_whitespace() => {
                if has {
                    words.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            '$' | '|' | ';' | '`' | '>' | '<' | '(' | ')' | '&' => return None,
            c => {
                has = true;
                cur.push(c);
            }
        }
    }
    if has {
        words.push(cur);
    }
    Some(words)
}

/// The recording format's identifier, versioned.
pub const RECORDING_FORMAT: &str = "straggler-lab.recording/v2";

/// The marker file of a recording folder.
pub const MARKER: &str = "recording.json";

/// A plan (or a remediation command) tried live, and what verification said of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriedPlan {
    /// The commands, as argv, in order.
    pub commands: Vec<Vec<String>>,
    /// `fixed` or `failed`, as verified on the job's signals.
    pub outcome: Mitigation,
    pub evidence: crate::EvidenceLevel,
    /// Why its verification failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<String>,
}

/// What a replay serves besides the incident's bundle: the lab as it was from the detection to the first
/// remediation (a whole bundle a second, stamped in seconds from the detection), and what ran in each rank's
/// CPU limit then.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayData {
    #[serde(default)]
    pub moments: Vec<Moment>,
    /// By rank (`rank-1`): its processes, as `processes` answers.
    #[serde(default)]
    pub processes: std::collections::BTreeMap<String, serde_json::Value>,
}

/// The lab at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Moment {
    /// Seconds from the detection.
    pub t_s: f64,
    pub bundle: serde_json::Value,
}

/// One point of the recorded timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimePoint {
    pub t_s: f64,
    pub pct: Option<f64>,
    pub step_seconds: Option<f64>,
    pub ranks_ready: (usize, usize),
    pub firing: Vec<String>,
}

/// One recorded drill run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRun {
    pub format: String,
    pub drill: String,
    pub started_at: String,
    pub verdict: Verdict,
    pub reason: String,
    pub truth: Option<Truth>,
    /// Seconds from the start of the drill to the first injection's detection.
    pub time_to_detect_s: Option<f64>,
    /// The first bundle handed out, whole.
    pub incident: Option<serde_json::Value>,
    pub tried: Vec<TriedPlan>,
    pub timeline: Vec<TimePoint>,
    #[serde(default)]
    pub replay: ReplayData,
}

/// Checks a recording folder's marker.
///
/// # Errors
/// A message saying what the folder is not.
pub fn check_marker(dir: &Path) -> Result<(), String> {
    let marker = dir.join(MARKER);
    let text = std::fs::read_to_string(&marker).map_err(|e| {
        format!(
            "{} is not a recording ({} cannot be read: {e}); make one with `lab drill run --record DIR`",
            dir.display(),
            MARKER
        )
    })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", marker.display()))?;
    match v.get("format").and_then(serde_json::Value::as_str) {
        Some(RECORDING_FORMAT) => Ok(()),
        Some(other) => Err(format!(
            "{} holds a recording of format {other:?}; this lab reads {RECORDING_FORMAT:?}: record it again",
            dir.display()
        )),
        None => Err(format!("{}: no \"format\"", marker.display())),
    }
}

/// Adds `runs` to the recording folder `dir` (made, with its marker, when new): each as
/// `<drill>/run-<start>.json`.
///
/// # Errors
/// A message when the folder is of another format or cannot be written.
pub fn write(dir: &Path, runs: &[RecordedRun]) -> Result<Vec<std::path::PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let marker = dir.join(MARKER);
    if marker.exists() {
        check_marker(dir)?;
    } else {
        let text = serde_json::json!({ "format": RECORDING_FORMAT }).to_string();
        std::fs::write(&marker, text).map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    }
    let mut written = Vec::new();
    for run in runs {
        let sub = dir.join(&run.drill);
        std::fs::create_dir_all(&sub).map_err(|e| format!("cannot create {}: {e}", sub.display()))?;
        let stamp: String = run.started_at.chars().filter(char::is_ascii_digit).collect();
        let mut path = sub.join(format!("run-{stamp}.json"));
        let mut n = 1;
        while path.exists() {
            n += 1;
            path = sub.join(format!("run-{stamp}-{n}.json"));
        }
        let bytes = serde_json::to_vec_pretty(run).map_err(|e| e.to_string())?;
        std::fs::write(&path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_command_lines_split_as_a_shell_would() {
        let v = lab_commands("lab db template --node-selector '' && lab db delete-pod db-1").unwrap();
        assert_eq!(v[0], ["lab", "db", "template", "--node-selector", ""]);
        assert_eq!(v[1], ["lab", "db", "delete-pod", "db-1"]);
        assert_eq!(
            lab_commands("lab restart rank 1").unwrap(),
            [["lab", "restart", "rank", "1"]]
        );
        assert!(lab_commands("lab status | head").is_none());
        assert!(lab_commands("echo $HOME").is_none());
        assert!(lab_commands("kubectl delete pod db-1").is_none());
    }
}
