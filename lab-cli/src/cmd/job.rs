//! `lab job list|throttle|stop`.

use crate::exit::Exit;

use lab_session::{ChangeRecord, Lab};

use crate::cli::JobCmd;
use crate::formats;
use crate::out::{self, outln};

pub async fn run(name: &str, cmd: JobCmd) -> anyhow::Result<Exit> {
    let lab = Lab::open(name).await?;
    match cmd {
        JobCmd::List(a) => {
            let lines = lab.jobs(a.window).await?;
            if a.json {
                out::json_list(formats::JOBS, "jobs", &lines)?;
            } else {
                outln!(
                    "{:<14} {:<9} {:>7} {:>10} {:>13}  SERVERS",
                    "JOB",
                    "KIND",
                    "RUNNING",
                    "READS/S",
                    "RATE LIMIT"
                );
                for l in lines {
                    outln!(
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
            Ok(Exit::Passed)
        }
        JobCmd::Throttle(a) => done(lab.throttle_job(&a.job, a.rate).await?, a.json),
        JobCmd::Stop(a) => done(lab.stop_job(&a.job).await?, a.json),
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
