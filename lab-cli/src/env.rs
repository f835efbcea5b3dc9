//! The environment variables the lab reads, in one table: `lab --help` prints it and README.md's
//! "Environment variables" carries the same rows (a test keeps the two together).

/// One variable: its name, and what it does (with its default).
pub const VARS: &[(&str, &str)] = &[
    ("LAB_NAME", "the lab to act on, as --name (default: lab)"),
    (
        "LAB_STATE_DIR",
        "where every lab's folder is (default: ~/.local/state/straggler-lab)",
    ),
    ("XDG_STATE_HOME", "the base of the default state folder"),
    (
        "LAB_WEED",
        "the SeaweedFS `weed` binary (default: `weed` on PATH)",
    ),
    (
        "LAB_BIN_DIR",
        "where lab-rank, lab-seeder, lab-proxy … are (default: beside lab)",
    ),
    ("LAB_PG_BIN", "PostgreSQL's programs, for `lab up --database`"),
    (
        "KUBECONFIG",
        "an existing cluster's kubeconfig when --kubeconfig is not given",
    ),
    (
        "DOCKER_HOST",
        "the Docker engine the kind runtime uses (default: the local socket)",
    ),
    (
        "RUST_LOG",
        "the log filter, overriding -v (e.g. RUST_LOG=lab_runtime=debug)",
    ),
    (
        "NO_COLOR",
        "set to anything but empty: no colour in logs or the console",
    ),
    (
        "LAB_CHANGE_BY",
        "on whose behalf a command changes the lab (in its change records)",
    ),
    (
        "LAB_INCIDENT_BUNDLE",
        "given to a remediation or an agent: the incident bundle's path",
    ),
    ("LAB_EVIDENCE", "given to an agent: the evidence level it reads"),
    (
        "LAB_MCP_SERVER",
        "given to an --mcp-agent: how to start the lab's MCP server (JSON argv)",
    ),
    (
        "LAB_MCP_CONFIG",
        "given to an --mcp-agent: the same as an MCP client config file",
    ),
    (
        "LAB_CHROMIUM",
        "tests: the Chromium that screenshots the HTML report",
    ),
    (
        "LAB_E2E_PREFIX",
        "tests: a prefix for every lab name the end-to-end tests use",
    ),
];

/// The table `lab --help` ends with.
pub fn help() -> String {
    let width = VARS.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut s = String::from("Environment (README.md, \"Environment variables\"):\n");
    for (name, what) in VARS {
        s.push_str(&format!("  {name:<width$}  {what}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_table_has_every_variable_and_the_help_too() {
        let doc = include_str!("../../README.md");
        let h = help();
        for (name, _) in VARS {
            assert!(
                doc.contains(&format!("| `{name}` |")),
                "README.md's environment table lacks {name}"
            );
            assert!(h.contains(name), "{h}");
        }
    }
}
