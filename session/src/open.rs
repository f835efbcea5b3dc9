//! Finding a running lab by name, and picking a runtime for a new one.

use std::sync::Arc;

use lab_model::status::RuntimeKind;

use lab_runtime::lifecycle::Progress;
use lab_runtime::{Result, Runtime, RuntimeError, state};
use lab_runtime_kube as kube;
use lab_runtime_local::{self as local, LocalRuntime};

/// Opens the running lab `name`, whatever runtime it is on.
///
/// # Errors
/// [`RuntimeError::NotRunning`] when no lab of that name is recorded; the runtime's error when it cannot
/// be reached.
pub async fn open(name: &str) -> Result<Arc<dyn Runtime>> {
    let rec = state::read_record(name)?.ok_or_else(|| RuntimeError::NotRunning {
        name: name.to_string(),
    })?;
    Ok(match rec.runtime {
        RuntimeKind::Local => Arc::new(LocalRuntime::open(&rec)?),
        RuntimeKind::Kind | RuntimeKind::Cluster => Arc::new(kube::open(&rec).await?),
    })
}

/// Takes lab `name` down, whatever runtime it is on. Returns `false` when no such lab was recorded.
///
/// # Errors
/// When something could not be removed; the error names it.
pub async fn down(name: &str, progress: &dyn Progress) -> Result<bool> {
    state::validate_name(name)?;
    let rec = match state::read_record(name) {
        Ok(Some(r)) => r,
        Ok(None) => {
            // No record, but a half-made lab (a crash during `up`) may have left a folder or processes.
            if state::lab_dir(name).exists() || !local::procs::lab_processes(name).is_empty() {
                local::down(name, progress).await?;
                return Ok(true);
            }
            return Ok(false);
        }
        // A corrupt record: whatever the lab was, stop what carries its name and remove the folder.
        Err(_) => {
            local::down(name, progress).await?;
            return Ok(true);
        }
    };
    match rec.runtime {
        RuntimeKind::Local => {
            local::down(name, progress).await?;
        }
        RuntimeKind::Kind | RuntimeKind::Cluster => kube::down(&rec, progress).await?,
    }
    Ok(true)
}

/// Which runtime `--runtime auto` picks, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub runtime: RuntimeKind,
    pub reason: String,
}

/// Why kind could not be used, in words that fit after "kind is unusable here,".
fn fallback_reason(e: &RuntimeError) -> String {
    match e {
        RuntimeError::MissingTool { tool, hint } => format!("{tool}: {hint}"),
        other => other.to_string(),
    }
}

/// Picks kind when Docker is reachable and `kind` is installed at a supported version, else local.
pub async fn choose() -> Choice {
    match kube::kind::preflight().await {
        Ok(v) => Choice {
            runtime: RuntimeKind::Kind,
            reason: format!("Docker is reachable and {v} is installed"),
        },
        Err(e) => Choice {
            runtime: RuntimeKind::Local,
            reason: format!("--runtime auto: kind is unusable here, {}", fallback_reason(&e)),
        },
    }
}
