//! The lab's state directory: one folder per lab (mode 0700) that names everything the lab started.
//!
//! The folder is `$LAB_STATE_DIR/<name>` when `LAB_STATE_DIR` is set, else
//! `$XDG_STATE_HOME/straggler-lab/<name>`, else `~/.local/state/straggler-lab/<name>`. Its `lab.json`
//! says which runtime runs the lab and how to reach it; each runtime keeps its own files beside it.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use lab_model::status::RuntimeKind;
use serde::{Deserialize, Serialize};

use crate::{Result, RuntimeError};

/// The file in a lab's directory that records which runtime runs it.
pub const RECORD_FILE: &str = "lab.json";

/// Where every lab's directory lives.
pub fn base_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LAB_STATE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("straggler-lab");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".local/state/straggler-lab")
}

/// Checks a lab name: 1–40 characters of `a-z`, `0-9` and `-`, starting with a letter.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] naming what is wrong.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::InvalidInput(format!(
            "lab name {name:?} is not valid: use 1-40 lowercase letters, digits and '-', starting with a letter"
        )))
    }
}

/// The directory of lab `name`.
pub fn lab_dir(name: &str) -> PathBuf {
    base_dir().join(name)
}

/// What `lab.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabRecord {
    pub name: String,
    pub runtime: RuntimeKind,
    /// When `lab up` started, ms since the Unix epoch.
    pub created_ms: u64,
    /// The runtime's own settings (ports, kubeconfig, namespace, ...).
    pub config: serde_json::Value,
}

/// Creates the lab's directory with mode 0700 (and its parents), failing if a lab is recorded there.
///
/// # Errors
/// [`RuntimeError::AlreadyRunning`] if `lab.json` exists; [`RuntimeError::State`] on I/O errors.
pub fn create_lab_dir(name: &str) -> Result<PathBuf> {
    validate_name(name)?;
    let dir = lab_dir(name);
    if let Some(rec) = read_record_at(&dir).ok().flatten() {
        return Err(RuntimeError::AlreadyRunning {
            name: name.to_string(),
            runtime: rec.runtime.to_string(),
        });
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| state_err(&dir, "create", e))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(|e| state_err(&dir, "chmod", e))?;
    Ok(dir)
}

/// Reads the record of lab `name`, if one exists.
///
/// # Errors
/// [`RuntimeError::State`] when the file exists but cannot be read or parsed.
pub fn read_record(name: &str) -> Result<Option<LabRecord>> {
    validate_name(name)?;
    read_record_at(&lab_dir(name))
}

/// Reads the record in a lab directory, if one exists.
///
/// # Errors
/// [`RuntimeError::State`] when the file exists but cannot be read or parsed.
pub fn read_record_at(dir: &Path) -> Result<Option<LabRecord>> {
    let path = dir.join(RECORD_FILE);
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| RuntimeError::State {
                path: path.clone(),
                what: format!(
                    "corrupt record ({e}): `lab down` stops whatever of the lab still runs and removes its folder"
                ),
                source: None,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(state_err(&path, "read", e)),
    }
}

/// Writes the record of a lab into its directory, atomically.
///
/// # Errors
/// [`RuntimeError::State`] on I/O errors.
pub fn write_record(dir: &Path, record: &LabRecord) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(record).map_err(|e| RuntimeError::Other(e.to_string()))?;
    write_atomic(&dir.join(RECORD_FILE), &bytes)
}

/// Writes `bytes` to `path` through a temporary file and a rename, so readers never see half a file.
///
/// # Errors
/// [`RuntimeError::State`] on I/O errors.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_replacing(path, bytes, true)
}

/// [`write_atomic`] without waiting for the disk: for a file rewritten every second whose loss in a crash
/// costs nothing (the watcher's live snapshot).
///
/// # Errors
/// [`RuntimeError::State`] on I/O errors.
pub fn write_volatile(path: &Path, bytes: &[u8]) -> Result<()> {
    write_replacing(path, bytes, false)
}

fn write_replacing(path: &Path, bytes: &[u8], sync: bool) -> Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut f = fs::File::create(&tmp).map_err(|e| state_err(&tmp, "create", e))?;
    f.write_all(bytes)
        .and_then(|()| if sync { f.sync_all() } else { Ok(()) })
        .map_err(|e| state_err(&tmp, "write", e))?;
    fs::rename(&tmp, path).map_err(|e| state_err(path, "rename", e))
}

/// A state-folder I/O error: what was being done to which path.
pub fn state_err(path: &Path, what: &str, e: std::io::Error) -> RuntimeError {
    RuntimeError::State {
        path: path.to_path_buf(),
        what: what.to_string(),
        source: Some(e),
    }
}

pub use lab_model::clock::now_ms;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["lab", "a", "demo-2"] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Lab", "2lab", "a/b", "..", "a b", &"x".repeat(41)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}
