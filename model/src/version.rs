//! The versions of the parts a lab runs, as `lab version` and every drill report name them, and how they
//! are read from each tool's own words.

use serde::{Deserialize, Serialize};

/// What runs the lab, where it is known: a figure measured on one SeaweedFS or Kubernetes is traced to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parts {
    /// SeaweedFS, as `weed version` says it (e.g. `4.48`).
    pub seaweedfs: Option<String>,
    /// The kind CLI that runs the cluster (e.g. `v0.32.0`); only on the kind runtime.
    pub kind: Option<String>,
    /// The API server's version (e.g. `v1.34.0`); only on the Kubernetes runtimes.
    pub kubernetes: Option<String>,
}

/// The version in `weed version`'s line (`version 8000GB 4.48 pypi linux amd64` → `4.48`): the first word
/// that is numbers and dots, after the word `version`.
pub fn weed_version(output: &str) -> Option<String> {
    let line = output.lines().find(|l| l.trim_start().starts_with("version"))?;
    line.split_whitespace()
        .skip(1)
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

/// The version in `kind version`'s line (`kind v0.32.0 go1.24.2 linux/amd64` → `v0.32.0`).
pub fn kind_version(output: &str) -> Option<String> {
    output
        .split_whitespace()
        .find(|w| w.starts_with('v') && w[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_the_tools_own_words() {
        assert_eq!(
            weed_version("version 8000GB 4.48 pypi linux amd64\nFor enterprise users, ...").as_deref(),
            Some("4.48")
        );
        assert_eq!(
            weed_version("version 30GB 3.80 0e1d4e5 linux amd64").as_deref(),
            Some("3.80")
        );
        assert_eq!(weed_version("no such command"), None);
        assert_eq!(
            kind_version("kind v0.32.0 go1.24.2 linux/amd64").as_deref(),
            Some("v0.32.0")
        );
        assert_eq!(kind_version("kind: command not found"), None);
    }
}
