//! `lab db status|template|delete-pod`.

use crate::exit::Exit;

use lab_session::remediate::Database;
use lab_session::{ChangeRecord, Lab};

use crate::cli::DbCmd;
use crate::formats;
use crate::out::{self, outln};

pub async fn run(name: &str, cmd: DbCmd) -> anyhow::Result<Exit> {
    let lab = Lab::open(name).await?;
    match cmd {
        DbCmd::Status { json } => {
            let Database {
                database: d,
                pods,
                writer,
            } = lab.database().await?;
            if json {
                out::json(
                    formats::DB_STATUS,
                    &serde_json::json!({
                        "database": d,
                        "pods": pods,
                        "writer": writer.map(|w| serde_json::json!({
                            "commits_per_second": w.commits_per_second,
                            "reads_per_second": w.reads_per_second,
                            "commit_p50_seconds": w.p50,
                            "commit_p99_seconds": w.p99,
                            "commit_waiting_seconds": w.waiting,
                        })),
                    }),
                )?;
                return Ok(Exit::Passed);
            }
            for p in &pods {
                outln!(
                    "{:<11} {:<8} ready={:<5} {}",
                    p.name,
                    p.phase.to_string(),
                    p.ready,
                    p.message.as_deref().unwrap_or("")
                );
            }
            outln!(
                "template: revision {} node selector {}",
                d.template.revision,
                d.template.selector_text()
            );
            match &d.standby_pod {
                Some(t) => outln!(
                    "db-1 made from: revision {} node selector {}",
                    t.revision,
                    t.selector_text()
                ),
                None => outln!("db-1 made from: (being made)"),
            }
            outln!(
                "primary {}: synchronous_standby_names = {}",
                d.primary,
                d.synchronous_standby_names
                    .as_deref()
                    .map_or("(no answer)".to_string(), |s| format!("'{s}'"))
            );
            if let Some(w) = writer {
                outln!(
                    "writer: {:.1} commits/s, commit p50 {:.1} ms, p99 {:.1} ms, waiting {:.1} s, {:.1} reads/s",
                    w.commits_per_second,
                    w.p50 * 1000.0,
                    w.p99 * 1000.0,
                    w.waiting,
                    w.reads_per_second
                );
            }
            Ok(Exit::Passed)
        }
        DbCmd::Template { node_selector, json } => done(lab.set_db_template(&node_selector).await?, json),
        DbCmd::DeletePod { pod, json } => done(lab.delete_db_pod(&pod).await?, json),
    }
}

fn done(c: ChangeRecord, json: bool) -> anyhow::Result<Exit> {
    if json {
        out::json(formats::CHANGE, &c)?;
    } else {
        outln!("changed: {}", c.line());
    }
    Ok(Exit::Passed)
}
