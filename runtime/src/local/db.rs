//! The local lab's optional database, on the client side: finding PostgreSQL's programs at `lab up`,
//! waiting for the database to take commits, and the primary's `synchronous_standby_names`, read and
//! set with `psql` over loopback.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{Result, RuntimeError};

/// How long one `psql` call may take: reading or setting a parameter never waits for a standby.
const PSQL_TIMEOUT: Duration = Duration::from_secs(10);

/// The folder of PostgreSQL's programs: `$LAB_PG_BIN`, else the newest `/usr/lib/postgresql/<v>/bin`
/// (Debian's layout), else the folder of `postgres` on the `PATH`.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] saying how to install it.
pub fn find_pg_bin() -> Result<PathBuf> {
    let has = |d: &Path| {
        ["postgres", "initdb", "pg_basebackup", "psql"]
            .iter()
            .all(|p| d.join(p).exists())
    };
    if let Some(d) = std::env::var_os("LAB_PG_BIN").map(PathBuf::from) {
        return if has(&d) {
            Ok(d)
        } else {
            Err(RuntimeError::InvalidInput(format!(
                "LAB_PG_BIN={} has no postgres, initdb, pg_basebackup and psql",
                d.display()
            )))
        };
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
        return Ok(bin);
    }
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).find(|d| has(d)))
        .ok_or_else(|| {
            RuntimeError::InvalidInput(
                "--database needs PostgreSQL (postgres, initdb, pg_basebackup, psql): install it \
                 (Debian: apt-get install postgresql), or set LAB_PG_BIN to its bin folder"
                    .into(),
            )
        })
}

/// `psql`'s arguments for one statement `sql` on the server at `host:port`, as the trusted `postgres` user,
/// unaligned and tuples only, stopping at the first error (the local lab runs it on this machine; the kind
/// runtime through `exec` in the primary's container).
pub fn psql_args(host: &str, port: &str, sql: &str) -> Vec<String> {
    [
        "-X",
        "-A",
        "-t",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        host,
        "-p",
        port,
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-c",
        sql,
    ]
    .iter()
    .map(ToString::to_string)
    .collect()
}

/// Runs `sql` on the server at `addr` with `psql` and returns its unaligned output.
///
/// # Errors
/// When `psql` cannot start, does not finish in time, or reports an error.
pub async fn psql(pg_bin: &Path, addr: &str, sql: &str) -> Result<String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| RuntimeError::Other(format!("{addr:?} is not HOST:PORT")))?;
    let mut c = tokio::process::Command::new(pg_bin.join("psql"));
    c.args(psql_args(host, port, sql)).kill_on_drop(true);
    let out = tokio::time::timeout(PSQL_TIMEOUT, c.output())
        .await
        .map_err(|_| RuntimeError::Timeout {
            what: format!("psql on the primary at {addr}"),
            seconds: PSQL_TIMEOUT.as_secs_f64(),
        })?
        .map_err(|e| RuntimeError::io("running psql", e))?;
    if !out.status.success() {
        return Err(RuntimeError::Other(format!(
            "psql on the primary at {addr}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `names` as a `synchronous_standby_names` value in an `ALTER SYSTEM` statement: each standby name
/// double-quoted (a name with `-` needs it), the whole single-quoted.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] for a name that is not lower-case letters, digits and `-`.
pub fn standby_names_literal(names: &str) -> Result<String> {
    let mut quoted = Vec::new();
    for n in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let n = n.trim_matches('"');
        if n.is_empty()
            || n.len() > 63
            || !n
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(RuntimeError::InvalidInput(format!(
                "standby name {n:?} must be lower-case letters, digits, '-' and '_' (a pod name such as db-1)"
            )));
        }
        quoted.push(format!("\"{n}\""));
    }
    Ok(format!("'{}'", quoted.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standby_names_are_quoted_and_checked() {
        assert_eq!(standby_names_literal("db-1").unwrap(), "'\"db-1\"'");
        assert_eq!(standby_names_literal("").unwrap(), "''");
        assert!(standby_names_literal("db-1'; DROP TABLE x; --").is_err());
    }
}
