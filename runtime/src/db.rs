//! The lab's optional database, on the client side: finding PostgreSQL's programs at `lab up`, and the
//! primary's `synchronous_standby_names`, read and set over `tokio-postgres` on the local runtime
//! ([`query`]) and with `psql` in the primary's pod on Kubernetes ([`psql_args`]: the primary is not
//! reachable from outside the cluster there, and its image has `psql`); [`set_standby_names`] serves both.

use std::path::PathBuf;
use std::time::Duration;

use crate::{Result, RuntimeError};

/// How long one statement may take: reading or setting a parameter never waits for a standby.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

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
/// unaligned and tuples only, stopping at the first error (the Kubernetes runtime runs it through `exec` in
/// the primary's container).
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

/// Runs `sql` (one statement) on the server at `addr` (`HOST:PORT`) as the trusted `postgres` user over
/// `tokio-postgres`, and returns the first column of its first row as text (`""` when it returns none).
///
/// # Errors
/// When the server cannot be reached, does not answer in time, or reports an error.
pub async fn query(addr: &str, sql: &str) -> Result<String> {
    let what = format!("the database at {addr}");
    let fail = |e: tokio_postgres::Error| {
        RuntimeError::Other(match e.as_db_error() {
            Some(db) => format!("{what}: database error {}: {}", db.code().code(), db.message()),
            None => format!("{what}: {e}"),
        })
    };
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| RuntimeError::Other(format!("{addr:?} is not HOST:PORT")))?;
    let answer = async {
        let (client, connection) = tokio_postgres::Config::new()
            .host(host)
            .port(port)
            .user("postgres")
            .dbname("postgres")
            .application_name("lab")
            .connect_timeout(QUERY_TIMEOUT)
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(fail)?;
        let connection = tokio::spawn(connection);
        let rows = client.simple_query(sql).await.map_err(fail);
        drop(client);
        let _ = connection.await;
        let first = rows?.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap_or_default().to_string()),
            _ => None,
        });
        Ok(first.unwrap_or_default())
    };
    tokio::time::timeout(QUERY_TIMEOUT, answer)
        .await
        .map_err(|_| RuntimeError::Timeout {
            what: format!("{sql:?} on {what}"),
            seconds: QUERY_TIMEOUT.as_secs_f64(),
        })?
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
