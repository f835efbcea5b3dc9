//! The lab's optional database (`lab up --database`): a PostgreSQL primary (`db-0`), a streaming standby
//! (`db-1`, one pod of a StatefulSet with a template) and a writer committing to the primary. What the
//! runtimes report about it, and the template of the standby's pods.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The primary's pod.
pub const PRIMARY: &str = "db-0";
/// The standby's pod; also its `application_name` on the primary, the name `synchronous_standby_names`
/// gives.
pub const STANDBY: &str = "db-1";
/// The writer's pod.
pub const WRITER: &str = "lab-writer";

/// The labels of the local runtime's one node: a template whose node selector asks for anything else
/// cannot be placed there.
pub const LOCAL_NODE_LABELS: [(&str, &str); 3] = [
    ("kubernetes.io/hostname", "local"),
    ("kubernetes.io/os", "linux"),
    ("lab/disk", "ssd"),
];

/// The standby StatefulSet's pod template: what a new standby pod is made from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DbTemplate {
    /// Labels a node must carry for the pod to be placed there.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Bumped at every change of the template (the StatefulSet's revision).
    #[serde(default)]
    pub revision: u64,
}

impl DbTemplate {
    /// The first key=value of the selector that `labels` lacks: why a pod from it cannot be placed.
    pub fn unmatched(&self, labels: &BTreeMap<String, String>) -> Option<(String, String)> {
        self.node_selector
            .iter()
            .find(|(k, v)| labels.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
    }

    /// The selector as `k=v,k=v` (`none` when empty).
    pub fn selector_text(&self) -> String {
        if self.node_selector.is_empty() {
            return "none".into();
        }
        self.node_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The local node's labels as a map.
pub fn local_node_labels() -> BTreeMap<String, String> {
    LOCAL_NODE_LABELS
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Parses `k=v,k=v` into a node selector (empty string: no selector).
///
/// # Errors
/// A sentence saying what a selector looks like.
pub fn parse_selector(s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut m = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .filter(|(k, v)| !k.trim().is_empty() && !v.trim().is_empty())
            .ok_or_else(|| format!("node selector {part:?} is not KEY=VALUE (e.g. lab/disk=ssd)"))?;
        m.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(m)
}

/// Refuses a node selector whose keys or values are not labels: 1 to 63 letters, digits, `-`, `_`, `.`
/// or `/`.
///
/// # Errors
/// A sentence naming the first pair that is not a label.
pub fn check_selector(selector: &BTreeMap<String, String>) -> Result<(), String> {
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
    };
    match selector.iter().find(|(k, v)| !ok(k) || !ok(v)) {
        None => Ok(()),
        Some((k, v)) => Err(format!(
            "node selector {k}={v} is not a label: keys and values are 1 to 63 letters, digits, '-', '_', \
             '.' or '/'"
        )),
    }
}

/// The database as a runtime reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DbStatus {
    /// The primary's address, `127.0.0.1:PORT`.
    pub primary: String,
    /// The standby StatefulSet's template.
    pub template: DbTemplate,
    /// The template the standby pod now standing was made from (`None`: no pod, one is being made).
    pub standby_pod: Option<DbTemplate>,
    /// The labels of the node(s) pods can be placed on.
    pub node_labels: BTreeMap<String, String>,
    /// The primary's `synchronous_standby_names` (empty: commits wait for no standby); `None` when the
    /// primary did not answer.
    pub synchronous_standby_names: Option<String>,
}

/// The programs the lab runs PostgreSQL with.
pub const PG_PROGRAMS: [&str; 4] = ["postgres", "initdb", "pg_basebackup", "psql"];

/// The folder of PostgreSQL's programs: `$LAB_PG_BIN`, else the newest `/usr/lib/postgresql/<v>/bin`
/// (Debian's layout), else the first folder on the `PATH` that has them all. The one function of `model` that
/// looks at the file system: the local runtime (`lab up --database`) and `lab-db` in a pod both ask it.
pub fn find_pg_bin() -> Option<PathBuf> {
    let has = |d: &Path| PG_PROGRAMS.iter().all(|p| d.join(p).exists());
    if let Some(d) = std::env::var_os("LAB_PG_BIN").map(PathBuf::from) {
        return has(&d).then_some(d);
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has(&bin).then_some((v, bin))
        })
        .collect();
    debian.sort();
    if let Some((_, bin)) = debian.pop() {
        return Some(bin);
    }
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).find(|d| has(d)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_the_node_lacks_is_named() {
        let mut t = DbTemplate::default();
        assert_eq!(t.unmatched(&local_node_labels()), None);
        t.node_selector = parse_selector("lab/disk=ssd").unwrap();
        assert_eq!(t.unmatched(&local_node_labels()), None);
        t.node_selector = parse_selector("lab/disk=nvme-raid").unwrap();
        assert_eq!(
            t.unmatched(&local_node_labels()),
            Some(("lab/disk".into(), "nvme-raid".into()))
        );
        assert_eq!(t.selector_text(), "lab/disk=nvme-raid");
    }

    #[test]
    fn selectors_that_are_not_labels_are_refused() {
        assert!(check_selector(&parse_selector("lab/disk=nvme").unwrap()).is_ok());
        assert!(check_selector(&parse_selector("lab/disk=nv me").unwrap()).is_err());
        assert!(check_selector(&parse_selector("a=b\"}").unwrap()).is_err());
    }

    #[test]
    fn selectors_parse_or_say_why_not() {
        assert!(parse_selector("").unwrap().is_empty());
        assert_eq!(parse_selector("a=b, c=d").unwrap().len(), 2);
        assert!(parse_selector("a").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_selector("=b").is_err());
    }
}
