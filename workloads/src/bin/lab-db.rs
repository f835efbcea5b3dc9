//! `lab-db`: one PostgreSQL pod of the lab's database (the primary, or a streaming standby). It prepares
//! the data folder on first start and then becomes the server; the work is in [`lab_workloads::db`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lab_model::format::error_chain;
use lab_workloads::db::{self, DbOptions};

/// A PostgreSQL server of the lab's database: `initdb` (primary) or `pg_basebackup` (standby) on first
/// start, then the server itself, on 127.0.0.1 (or --listen), trusting loopback (and --trust) connections.
///
/// Exit codes: 2 bad flags, 3 the data folder could not be prepared or the server not started.
#[derive(Debug, Parser)]
#[command(name = "lab-db", version, max_term_width = 110)]
struct Cli {
    /// PostgreSQL's programs (the folder of initdb, postgres, pg_basebackup) [default: found].
    #[arg(long, env = "LAB_PG_BIN")]
    pg_bin: Option<PathBuf>,

    /// The server's data folder (its volume).
    #[arg(long)]
    data: PathBuf,

    /// Its port.
    #[arg(long)]
    port: u16,

    /// The address it listens on (0.0.0.0 in a pod, where the standby and the writer reach it over the
    /// pod network).
    #[arg(long, default_value = "127.0.0.1")]
    listen: String,

    /// A network (CIDR, e.g. the cluster's pod network) trusted for connections and replication besides
    /// loopback; written into the primary's pg_hba.conf when its data folder is made.
    #[arg(long, value_name = "CIDR")]
    trust: Option<String>,

    #[command(subcommand)]
    role: Role,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// The primary: takes the writes.
    Primary,
    /// A standby streaming from the primary.
    Standby {
        /// The primary's host (a name such as db-0.db in a pod).
        #[arg(long, default_value = "127.0.0.1")]
        primary_host: String,
        /// The primary's port.
        #[arg(long)]
        primary_port: u16,
        /// Its name on the primary (`application_name`, what synchronous_standby_names names).
        #[arg(long)]
        name: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(pg_bin) = cli.pg_bin.or_else(lab_model::db::find_pg_bin) else {
        eprintln!(
            "lab-db: PostgreSQL is not installed (no postgres and initdb found): install it, or set LAB_PG_BIN"
        );
        return ExitCode::from(2);
    };
    let o = DbOptions {
        pg_bin,
        data: cli.data,
        port: cli.port,
        listen: cli.listen,
        trust: cli.trust,
    };
    let r = match cli.role {
        Role::Primary => db::primary(&o),
        Role::Standby {
            primary_host,
            primary_port,
            name,
        } => db::standby(&o, &primary_host, primary_port, &name),
    };
    if let Err(e) = r {
        eprintln!("lab-db: {}", error_chain(&e));
    }
    ExitCode::from(3)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
