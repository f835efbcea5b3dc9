//! The lab's PostgreSQL pods (`lab-db`): prepares a data folder the way a database image's entrypoint
//! does, then becomes the server (`exec`), so the supervisor watches and signals PostgreSQL itself.
//!
//! - `primary`: `initdb` on first start (trust on loopback, replication allowed), then `postgres`.
//! - `standby`: `pg_basebackup` from the primary on first start (its volume is empty), then `postgres` in
//!   standby mode, streaming from the primary under its own `application_name` (its pod name, `db-1`):
//!   the name a primary's `synchronous_standby_names` refers to.
//!
//! PostgreSQL refuses to run as root. When the lab runs as root, the servers run as the `postgres` user
//! (Debian's packages create it) through `setpriv`, keeping one capability, `CAP_DAC_READ_SEARCH`, so they
//! can reach their data folder inside the lab's folder, which only root may enter.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Result, WorkloadError};

/// The user the servers run as when the lab runs as root.
pub const DB_USER: &str = "postgres";

/// How a server is run.
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// PostgreSQL's programs (`initdb`, `postgres`, `pg_basebackup`).
    pub pg_bin: PathBuf,
    /// Its data folder (its volume).
    pub data: PathBuf,
    /// Its port.
    pub port: u16,
    /// The address it listens on: `127.0.0.1` (the local lab), or `0.0.0.0` in a pod, where the standby
    /// and the writer reach the primary over the pod network.
    pub listen: String,
    /// A network (CIDR) trusted besides loopback, for connections and for replication: the pod network
    /// in a cluster (`None`: loopback only).
    pub trust: Option<String>,
}

fn invalid(what: String) -> WorkloadError {
    WorkloadError::Database { detail: what }
}

/// `program` run as the database user: itself when the lab is not root, else through `setpriv`.
fn as_db_user(program: &Path) -> Command {
    if !nix::unistd::geteuid().is_root() {
        return Command::new(program);
    }
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={DB_USER}"),
        &format!("--regid={DB_USER}"),
        "--clear-groups",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
    ])
    .arg(program);
    c
}

/// Makes `dir` (empty or not) belong to the database user, mode 0700 as PostgreSQL requires.
fn own(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|e| invalid(format!("creating {}: {e}", dir.display())))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| invalid(format!("setting the mode of {}: {e}", dir.display())))?;
    if nix::unistd::geteuid().is_root() {
        let user = nix::unistd::User::from_name(DB_USER)
            .ok()
            .flatten()
            .ok_or_else(|| {
                invalid(format!(
                    "PostgreSQL refuses to run as root and there is no {DB_USER:?} user to run it as: \
                     install PostgreSQL's packages (they create it), or run the lab as another user"
                ))
            })?;
        nix::unistd::chown(dir, Some(user.uid), Some(user.gid))
            .map_err(|e| invalid(format!("giving {} to {DB_USER}: {e}", dir.display())))?;
    }
    Ok(())
}

fn run(mut c: Command, what: &str) -> Result<()> {
    let out = c
        .output()
        .map_err(|e| invalid(format!("{what}: cannot start it: {e}")))?;
    if !out.status.success() {
        return Err(invalid(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The server's settings on the command line: TCP on `listen` only, no Unix socket, small.
fn server_args(o: &DbOptions) -> Vec<String> {
    let mut a = vec![
        "-D".into(),
        o.data.display().to_string(),
        "-p".into(),
        o.port.to_string(),
    ];
    for (k, v) in [
        ("listen_addresses", o.listen.as_str()),
        ("unix_socket_directories", ""),
        // The lab measures waiting for a standby, not the disk: no fsync on a shared test machine.
        ("fsync", "off"),
        ("wal_level", "replica"),
        ("max_wal_senders", "5"),
        ("wal_keep_size", "256MB"),
        ("hot_standby", "on"),
        ("max_connections", "30"),
        ("shared_buffers", "16MB"),
        // No LLVM: the database image leaves the JIT's module out.
        ("jit", "off"),
    ] {
        a.push("-c".into());
        a.push(format!("{k}={v}"));
    }
    a
}

/// Refuses a `--trust` value that is not an IPv4 network in CIDR form (before anything is written).
///
/// # Errors
/// A sentence saying what it should look like.
pub fn check_network(net: &str) -> Result<()> {
    let ok = net.split_once('/').is_some_and(|(ip, bits)| {
        ip.parse::<std::net::Ipv4Addr>().is_ok() && bits.parse::<u8>().is_ok_and(|b| b <= 32)
    });
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "--trust {net:?} is not an IPv4 network (e.g. 203.0.113.0/24)"
        )))
    }
}

/// `host` lines for `net` in the primary's `pg_hba.conf`: connections and replication from that network
/// trusted, as loopback is (the standby copies the file with the rest).
///
/// # Errors
/// When `net` is not an IPv4 network in CIDR form, or the file cannot be written.
fn trust_network(data: &Path, net: &str) -> Result<()> {
    check_network(net)?;
    let path = data.join("pg_hba.conf");
    let mut text =
        std::fs::read_to_string(&path).map_err(|e| invalid(format!("reading {}: {e}", path.display())))?;
    text.push_str(&format!(
        "# the lab's pod network\nhost all all {net} trust\nhost replication all {net} trust\n"
    ));
    std::fs::write(&path, text).map_err(|e| invalid(format!("writing {}: {e}", path.display())))
}

/// Prepares the primary's data folder on first start, then becomes the primary.
///
/// # Errors
/// When `initdb` fails or the server cannot be started.
pub fn primary(o: &DbOptions) -> Result<()> {
    if let Some(net) = &o.trust {
        check_network(net)?;
    }
    if !o.data.join("PG_VERSION").exists() {
        own(&o.data)?;
        let mut c = as_db_user(&o.pg_bin.join("initdb"));
        c.arg("-D").arg(&o.data).args([
            "-U",
            DB_USER,
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        run(c, "initdb")?;
        if let Some(net) = &o.trust {
            trust_network(&o.data, net)?;
        }
    }
    let mut c = as_db_user(&o.pg_bin.join("postgres"));
    c.args(server_args(o));
    Err(invalid(format!("starting postgres: {}", c.exec())))
}

/// How long a standby's first copy waits for the primary to answer.
const PRIMARY_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// One `pg_basebackup` from the primary into an empty data folder (an unfinished copy removed first).
fn base_backup(o: &DbOptions, primary_host: &str, primary_port: u16) -> Result<()> {
    if o.data.exists() {
        std::fs::remove_dir_all(&o.data).map_err(|e| {
            invalid(format!(
                "removing an unfinished copy in {}: {e}",
                o.data.display()
            ))
        })?;
    }
    own(&o.data)?;
    let mut c = as_db_user(&o.pg_bin.join("pg_basebackup"));
    c.args([
        "-h",
        primary_host,
        "-p",
        &primary_port.to_string(),
        "-U",
        DB_USER,
        "-D",
    ])
    .arg(&o.data)
    .args(["-R", "-X", "stream", "--no-sync", "-c", "fast"]);
    run(c, "pg_basebackup from the primary")
}

/// Copies the primary on first start (or after a copy that did not finish), then becomes a standby
/// streaming from `primary_host:primary_port` under `name`.
///
/// # Errors
/// When the copy fails or the server cannot be started.
pub fn standby(o: &DbOptions, primary_host: &str, primary_port: u16, name: &str) -> Result<()> {
    // pg_basebackup -R writes standby.signal last: without it the copy did not finish.
    if !o.data.join("standby.signal").exists() {
        // The primary may not answer yet (started beside it, its name not yet in the cluster's DNS, or
        // still running initdb): try again every second rather than exit, which in a pod waits out the
        // kubelet's restart back-off (10 s, then 20 s) for each failure.
        let deadline = std::time::Instant::now() + PRIMARY_WAIT;
        loop {
            match base_backup(o, primary_host, primary_port) {
                Ok(()) => break,
                Err(e) if std::time::Instant::now() < deadline => {
                    eprintln!("lab-db: the copy from the primary failed, trying again in 1 s: {e}");
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
        }
    }
    let mut c = as_db_user(&o.pg_bin.join("postgres"));
    c.args(server_args(o)).args([
        "-c".to_string(),
        format!(
            "primary_conninfo=host={primary_host} port={primary_port} user={DB_USER} application_name={name}"
        ),
    ]);
    Err(invalid(format!("starting postgres: {}", c.exec())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_listen_on_loopback_only() {
        let a = server_args(&DbOptions {
            pg_bin: "/x".into(),
            data: "/d".into(),
            port: 5999,
            listen: "127.0.0.1".into(),
            trust: None,
        });
        assert!(a.contains(&"listen_addresses=127.0.0.1".to_string()));
        assert!(a.contains(&"unix_socket_directories=".to_string()));
        assert!(a.windows(2).any(|w| w[0] == "-p" && w[1] == "5999"));
    }

    #[test]
    fn only_ipv4_networks_are_trusted() {
        assert!(check_network("203.0.113.0/24").is_ok());
        for bad in [
            "203.0.113.0",
            "0.0.0.0/33",
            "all",
            "203.0.113.0/24 trust\nhost all all 0.0.0.0/0",
        ] {
            assert!(check_network(bad).is_err(), "{bad}");
        }
    }
}
