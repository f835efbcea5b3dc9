//! `lab logs`: a component's log on every runtime. The runtime reads its processes' or pods' logs; the
//! lab's watcher, which runs on this machine whatever the runtime, keeps its log in the lab's folder.

use lab_runtime::{LogLines, LogRequest};

use crate::{Lab, Result};

/// The name `lab logs` gives the lab's watcher (`lab __watch`).
pub const WATCHER_COMPONENT: &str = "watcher";

impl Lab {
    /// Every component whose log [`Lab::logs`] reads: the runtime's, then the watcher.
    ///
    /// # Errors
    /// [`crate::SessionError::Runtime`] when the runtime cannot list them.
    pub async fn log_components(&self) -> Result<Vec<String>> {
        let mut names = self.runtime.log_components().await?;
        names.push(WATCHER_COMPONENT.to_string());
        Ok(names)
    }

    /// Component `component`'s log, as `request` asks.
    ///
    /// # Errors
    /// [`crate::SessionError::Runtime`] naming the components there are, for a name that is none of
    /// them; or when the log cannot be read.
    pub async fn logs(&self, component: &str, request: LogRequest) -> Result<LogLines> {
        let known = self.log_components().await?;
        if !known.iter().any(|k| k == component) {
            return Err(lab_runtime::logs::unknown_component(component, &self.name, &known).into());
        }
        if component == WATCHER_COMPONENT {
            let path = lab_runtime::state::lab_dir(&self.name).join(crate::live::WATCH_LOG);
            return Ok(lab_runtime::logs::file_lines(&path, request)?);
        }
        Ok(self.runtime.logs(component, request).await?)
    }
}
