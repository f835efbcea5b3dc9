//! `lab list`, `lab logs`, `lab version`, `lab completion` and `lab man`: the labs on this machine, a
//! component's log, what the lab is made of, and the command line for the shell and `man`.

use futures::StreamExt;
use lab_session::version::Build;
use lab_session::{Lab, LogRequest};

use crate::cli::LogsArgs;
use crate::exit::Exit;
use crate::formats;
use crate::out::{self, out, outln};

/// This binary's build: the workspace version and the commit `build.rs` recorded.
pub const BUILD: Build = Build {
    version: env!("CARGO_PKG_VERSION"),
    commit: env!("LAB_GIT_COMMIT"),
};

pub async fn list(json: bool) -> anyhow::Result<Exit> {
    let labs = lab_session::labs::list().await;
    if json {
        out::json_list(formats::LABS, "labs", &labs)?;
        return Ok(Exit::Passed);
    }
    if labs.is_empty() {
        outln!(
            "no lab on this machine (under {}); `lab up` starts one",
            lab_session::state_dir().display()
        );
        return Ok(Exit::Passed);
    }
    outln!(
        "{:<16} {:<8} {:>8}  {:<12} DETAIL",
        "NAME",
        "RUNTIME",
        "AGE",
        "HEALTH"
    );
    for l in &labs {
        outln!(
            "{:<16} {:<8} {:>8}  {:<12} {}",
            l.name,
            l.runtime.to_string(),
            age(l.age_s),
            l.health.to_string(),
            l.detail
        );
    }
    Ok(Exit::Passed)
}

/// An age as a person says it: `42s`, `7m`, `3h12m`, `2d4h`.
fn age(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

pub async fn logs(name: &str, a: LogsArgs) -> anyhow::Result<Exit> {
    let lab = Lab::open(name).await?;
    let mut lines = lab
        .logs(
            &a.component,
            LogRequest {
                tail: a.tail,
                follow: a.follow,
            },
        )
        .await?;
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    loop {
        let line = tokio::select! {
            l = lines.next() => l,
            _ = &mut interrupt => return Ok(Exit::Interrupted),
        };
        match line {
            Some(Ok(l)) => outln!("{l}"),
            Some(Err(e)) => return Err(e.into()),
            None => return Ok(Exit::Passed),
        }
        // A reader that has gone (`lab logs -f rank-1 | head`) ends a follow that would never end.
        if out::closed() {
            return Ok(Exit::Passed);
        }
    }
}

pub async fn version(name: &str, json: bool) -> anyhow::Result<Exit> {
    let v = lab_session::version::current(&BUILD, name).await;
    if json {
        out::json(formats::VERSION, &v)?;
        return Ok(Exit::Passed);
    }
    let known = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    outln!("lab        {} (commit {})", v.lab, v.commit);
    match v.runtime {
        Some(r) => outln!("runtime    {r} (lab {name:?})"),
        None => outln!("runtime    - (no lab {name:?} running: the parts `lab up` would use here)"),
    }
    outln!("seaweedfs  {}", known(&v.parts.seaweedfs));
    outln!("kind       {}", known(&v.parts.kind));
    outln!("kubernetes {}", known(&v.parts.kubernetes));
    Ok(Exit::Passed)
}

pub fn completion(shell: clap_complete::Shell) -> anyhow::Result<Exit> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut crate::cli::command(), "lab", &mut script);
    out!("{}", String::from_utf8_lossy(&script));
    Ok(Exit::Passed)
}

pub fn man() -> anyhow::Result<Exit> {
    let mut page = Vec::new();
    clap_mangen::Man::new(crate::cli::command()).render(&mut page)?;
    out!("{}", String::from_utf8_lossy(&page));
    Ok(Exit::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_people_say_them() {
        assert_eq!(
            [0, 59, 60, 3599, 3600, 3 * 3600 + 12 * 60, 86_400 * 2 + 4 * 3600].map(age),
            ["0s", "59s", "1m", "59m", "1h00m", "3h12m", "2d4h"]
        );
    }

    #[test]
    fn the_build_names_a_commit() {
        assert!(!BUILD.commit.is_empty());
        assert_eq!(BUILD.version, env!("CARGO_PKG_VERSION"));
    }
}
