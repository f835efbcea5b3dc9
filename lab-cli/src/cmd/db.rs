//! `lab db status|template|delete-pod`.

use crate::exit::Exit;

use lab_faults::Ledger;
use lab_faults::kinds::sync_replica_reading;
use lab_model::ChangeRecord;

use crate::cli::DbCmd;
use crate::formats;
use crate::out::{self, outln};

pub async fn run(name: &str, cmd: DbCmd) -> anyhow::Result<Exit> {
    let rt = lab_runtime::open::open(name).await?;
    let ledger = Ledger::of_lab(name);
    match cmd {
        DbCmd::Status { json } => {
            let d = rt.database().await?;
            let st = rt.status().await?;
            let writer = sync_replica_reading(rt.as_ref()).await.ok();
            if json {
                let pods: Vec<_> = st
                    .pods
                    .iter()
                    .filter(|p| {
                        matches!(
                            p.role,
                            lab_model::status::Role::Database | lab_model::status::Role::DbWriter
                        )
                    })
                    .collect();
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
            for p in st.pods.iter().filter(|p| {
                matches!(
                    p.role,
                    lab_model::status::Role::Database | lab_model::status::Role::DbWriter
                )
            }) {
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
        DbCmd::Template { node_selector, json } => done(
            lab_faults::db::set_template(rt.as_ref(), &ledger, &node_selector).await?,
            json,
        ),
        DbCmd::DeletePod { pod, json } => done(
            lab_faults::db::delete_pod(rt.as_ref(), &ledger, &pod).await?,
            json,
        ),
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
