//! One function per command: map the parsed flags onto the library's options, call it, print the result.

mod checkpoint;
mod console;
mod db;
mod demo;
mod drill;
mod fault;
mod image;
mod incident;
mod job;
pub(crate) mod labs;
mod lifecycle;
mod mcp;
mod remediate;
mod replay;
mod status;

use crate::exit::Exit;

use crate::cli::{Cli, Command};

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<Exit> {
    let name = cli.name;
    lab_session::validate_name(&name).map_err(|e| crate::exit::usage(e.to_string()))?;
    match cli.command {
        Command::Up(a) => lifecycle::up(&name, a).await,
        Command::Down(a) => lifecycle::down(&name, a.json).await,
        Command::Status(a) => status::status(&name, a).await,
        Command::Fault(f) => fault::run(&name, f).await,
        Command::Scale(a) => remediate::scale(&name, a.count).await,
        Command::Config(crate::cli::ConfigCmd::WorldSize { size }) => {
            remediate::world_size(&name, size).await
        }
        Command::Resize(a) => remediate::resize(&name, a.rank, a.cpu).await,
        Command::Restart(a) => remediate::restart(&name, a.rank).await,
        Command::Apply(a) => remediate::apply(&name, a.cpu).await,
        Command::Rank(crate::cli::RankCmd::Procs { rank, json }) => remediate::procs(&name, rank, json).await,
        Command::Rank(crate::cli::RankCmd::Stop { rank, pid }) => remediate::stop(&name, rank, pid).await,
        Command::Rank(crate::cli::RankCmd::Env {
            rank,
            set,
            unset,
            json,
        }) => remediate::env(&name, rank, set, unset, json).await,
        Command::Job(j) => job::run(&name, j).await,
        Command::Storage(c) => remediate::storage(&name, c).await,
        Command::Db(d) => db::run(&name, d).await,
        Command::Image(i) => image::run(i).await,
        Command::Checkpoint(a) => checkpoint::checkpoint(&name, a).await,
        Command::Console(a) => console::console(&name, a.read_only).await,
        Command::List(a) => labs::list(a.json).await,
        Command::Logs(a) => labs::logs(&name, a).await,
        Command::Version(a) => labs::version(&name, a.json).await,
        Command::Completion { shell } => labs::completion(shell),
        Command::Man => labs::man(),
        Command::Drill(d) => drill::run(&name, d).await,
        Command::Incident(a) => incident::incident(&name, a).await,
        Command::Demo(a) => demo::demo(&name, a).await,
        Command::Replay(a) => replay::replay(a).await,
        Command::Mcp(a) => mcp::mcp(&name, a).await,
        Command::Rbac(a) => rbac(&name, a),
        Command::Watch => {
            let lab = lab_session::Lab::open(&name).await?;
            lab.serve_snapshots().await?;
            Ok(Exit::Passed)
        }
        Command::Supervise { .. } => unreachable!("handled in main before the async runtime starts"),
    }
}

/// `lab rbac`: the manifest on stdout.
fn rbac(name: &str, a: crate::cli::RbacArgs) -> anyhow::Result<Exit> {
    use lab_session::rbac::{Subject, manifest};
    let who = match (a.user, a.group, a.service_account) {
        (Some(u), _, _) => Subject::User(u),
        (_, Some(g), _) => Subject::Group(g),
        (_, _, Some(sa)) => {
            let Some((ns, n)) = sa
                .split_once('/')
                .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
            else {
                anyhow::bail!(
                    "--service-account {sa:?} is not NAMESPACE/NAME: e.g. --service-account ci/runner"
                );
            };
            Subject::ServiceAccount(ns.to_string(), n.to_string())
        }
        _ => anyhow::bail!("say who gets it: --user, --group or --service-account"),
    };
    let namespace = a.namespace.unwrap_or_else(|| format!("straggler-lab-{name}"));
    crate::out::write(format_args!("{}", manifest(&namespace, &who, !a.namespace_only)));
    Ok(Exit::Passed)
}
