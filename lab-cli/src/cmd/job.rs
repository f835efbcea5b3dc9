//! `lab job list|throttle|stop`.

use std::process::ExitCode;

use lab_faults::{Ledger, jobs};
use lab_model::ChangeRecord;

use crate::cli::JobCmd;
use crate::out;

pub async fn run(name: &str, cmd: JobCmd) -> anyhow::Result<ExitCode> {
    let rt = lab_runtime::open::open(name).await?;
    let ledger = Ledger::of_lab(name);
    match cmd {
        JobCmd::List(a) => {
            let lines = jobs::list(rt.as_ref(), a.window).await?;
            if a.json {
                out::json(&lines)?;
            } else {
                println!(
                    "{:<14} {:<9} {:>7} {:>10} {:>13}  SERVERS",
                    "JOB", "KIND", "RUNNING", "READS/S", "RATE LIMIT"
                );
                for l in lines {
                    println!(
                        "{:<14} {:<9} {:>7} {:>10} {:>13}  {}",
                        l.name,
                        l.kind,
                        format!("{}/{}", l.running, l.members.len()),
                        l.reads_per_s.map_or("-".into(), |r| format!("{r:.1}")),
                        l.rate_limit.map_or("-".into(), |r| format!("{r}/s")),
                        l.servers.join(",")
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        JobCmd::Throttle(a) => done(
            jobs::throttle(rt.as_ref(), &ledger, &a.job, a.rate).await?,
            a.json,
        ),
        JobCmd::Stop(a) => done(jobs::stop(rt.as_ref(), &ledger, &a.job).await?, a.json),
    }
}

fn done(c: ChangeRecord, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        out::json(&c)?;
    } else {
        println!("changed: {}", c.line());
    }
    Ok(ExitCode::SUCCESS)
}
