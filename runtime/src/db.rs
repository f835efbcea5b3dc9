//! The local lab's optional database, on the client side: finding PostgreSQL's programs at `lab up`,
//! waiting for the database to take commits, and the primary's `synchronous_standby_names`, read and
//! set with `psql` over loopback ([`set_standby_names`] also serves the Kubernetes runtime, whose `psql`
//! runs in the primary's pod).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{Result, RuntimeError};

/// How long one `psql` call may take: reading or setting a parameter never waits for a standby.
const PSQL_TIMEOUT: Duration = Duration::from_secs(10);

/// The folder of PostgreSQL's programs ([`lab_model::db::find_pg_bin`]).
///
/// # Errors
/// [`RuntimeError::InvalidInput`] saying how to install it.
pub fn find_pg_bin() -> Result<PathBuf> {
    lab_model::db::find_pg_bin().ok_or_else(|| {
        let programs = lab_model::db::PG_PROGRAMS.join(", ");
        RuntimeError::InvalidInput(match std::env::var_os("LAB_PG_BIN") {
            Some(d) => format!("LAB_PG_BIN={} has not all of {programs}", PathBuf::from(d).display()),
            None => format!(
                "--database needs PostgreSQL ({programs}): install it (Debian: apt-get install postgresql), or \
                 set LAB_PG_BIN to its bin folder"
            ),
        })
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

/// How long the primary may take to load a new `synchronous_standby_names` after its reload.
const RELOAD_DEADLINE: Duration = Duration::from_secs(10);

/// Sets the primary's `synchronous_standby_names` to `names` (`""`: commits wait for no standby), reloads
/// it, and waits until it says the new value (the reload is asynchronous). `psql` runs one statement on
/// the primary and returns what it printed: over loopback on the local runtime, in the pod on Kubernetes.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] for a bad name; `psql`'s errors; [`RuntimeError::Timeout`] when the
/// primary does not load the value in time.
pub async fn set_standby_names<F, Fut>(names: &str, psql: F) -> Result<()>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<String>>,
{
    let literal = standby_names_literal(names)?;
    psql(format!("ALTER SYSTEM SET synchronous_standby_names = {literal}")).await?;
    psql("SELECT pg_reload_conf()".into()).await?;
    let want = psql(format!("SELECT {literal}")).await?;
    let start = std::time::Instant::now();
    loop {
        let now = psql("SHOW synchronous_standby_names".into()).await?;
        if now == want {
            return Ok(());
        }
        if start.elapsed() > RELOAD_DEADLINE {
            return Err(RuntimeError::Timeout {
                what: format!("the primary to load synchronous_standby_names = {want:?} (it says {now:?})"),
                seconds: RELOAD_DEADLINE.as_secs_f64(),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
