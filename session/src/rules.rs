//! The rule files a lab evaluates beside its own (`lab up --rules FILE`): loaded and checked before
//! anything starts, and kept in the lab's folder (`rules.json`: where each came from, and its text) so
//! that every later command on the lab (the watcher, `lab status`, the console, the drills) evaluates the
//! same rules, whatever becomes of the original files.

use std::path::PathBuf;
use std::sync::Arc;

use lab_telemetry::RuleSet;
use serde::{Deserialize, Serialize};

use crate::error::{Result, SessionError};

/// One rule file as the lab keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// Where it was read from, as given to `lab up`.
    pub from: String,
    /// Its text when the lab came up.
    pub text: String,
}

/// The file in the lab's directory that keeps its rule files.
fn kept_path(name: &str) -> PathBuf {
    lab_runtime::state::lab_dir(name).join("rules.json")
}

/// The lab's own rules followed by `files`' (in order), and the files as the lab will keep them.
///
/// # Errors
/// [`SessionError::Rules`] naming the file and the rule when one cannot be read or evaluated, or clashes
/// with a name the lab's own rules use.
pub fn load(files: &[PathBuf]) -> Result<(Arc<RuleSet>, Vec<Kept>)> {
    let mut kept = Vec::new();
    for path in files {
        let from = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| lab_telemetry::RuleError::Read {
            origin: from.clone(),
            source,
        })?;
        kept.push(Kept { from, text });
    }
    Ok((combine(&kept)?, kept))
}

fn combine(kept: &[Kept]) -> Result<Arc<RuleSet>> {
    if kept.is_empty() {
        return Ok(lab_telemetry::rules::builtin());
    }
    let mut all = (*lab_telemetry::rules::builtin()).clone();
    for k in kept {
        all = all.with(RuleSet::parse(&k.text, &k.from)?)?;
    }
    Ok(Arc::new(all))
}

/// Keeps `kept` in lab `name`'s folder (nothing when it is empty).
///
/// # Errors
/// [`SessionError::Runtime`] when the file cannot be written.
pub fn save(name: &str, kept: &[Kept]) -> Result<()> {
    if kept.is_empty() {
        return Ok(());
    }
    let bytes = serde_json::to_vec_pretty(kept).map_err(SessionError::Encode)?;
    lab_runtime::state::write_atomic(&kept_path(name), &bytes)?;
    Ok(())
}

/// The rules lab `name` evaluates: its own, and the files it was started with.
///
/// # Errors
/// [`SessionError::KeptRules`] when the kept file cannot be read; [`SessionError::Rules`] when a kept
/// rule file no longer loads (a lab binary that evaluates less than the one that started the lab).
pub fn of_lab(name: &str) -> Result<Arc<RuleSet>> {
    let path = kept_path(name);
    let kept: Vec<Kept> = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| SessionError::KeptRules {
            path: path.clone(),
            source: Box::new(e),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(SessionError::KeptRules {
                path,
                source: Box::new(e),
            });
        }
    };
    combine(&kept)
}

/// Where each of lab `name`'s own rule files came from (none when it runs the lab's rules alone).
pub fn files_of_lab(name: &str) -> Vec<String> {
    std::fs::read(kept_path(name))
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<Kept>>(&b).ok())
        .map(|k| k.into_iter().map(|k| k.from).collect())
        .unwrap_or_default()
}
