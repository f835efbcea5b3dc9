//! A component's log as a stream of lines, the way `lab logs` reads it on every runtime: the last lines,
//! then (following) each line as it is written. Here the local runtime's kind of log, a file that a
//! process appends to; the Kubernetes runtimes stream a container's log from the API server.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};

use crate::{Result, RuntimeError};

/// A component's log lines, in order, each without its line ending.
pub type LogLines = BoxStream<'static, Result<String>>;

/// What to read of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogRequest {
    /// Only the last this many lines written so far (`None`: all of them).
    pub tail: Option<usize>,
    /// Keep reading: each line as it is written, until the reader stops.
    pub follow: bool,
}

/// How often a followed file is looked at for new lines.
const POLL: Duration = Duration::from_millis(200);

/// The lines of the file at `path`, as `request` asks. A file that is truncated or made anew while it is
/// followed (a restarted process) is read again from its start.
///
/// # Errors
/// [`RuntimeError::State`] when the file cannot be read at first; a later read error ends the stream
/// with it.
pub fn file_lines(path: &Path, request: LogRequest) -> Result<LogLines> {
    let mut file = std::fs::File::open(path).map_err(|e| crate::state::state_err(path, "read the log", e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| crate::state::state_err(path, "read the log", e))?;
    let offset = bytes.len() as u64;
    // A last line still being written is left for the follower to finish.
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let (done, partial) = bytes.split_at(complete);
    let mut lines: Vec<String> = String::from_utf8_lossy(done)
        .lines()
        .map(str::to_string)
        .collect();
    if !request.follow && !partial.is_empty() {
        lines.push(String::from_utf8_lossy(partial).into_owned());
    }
    if let Some(n) = request.tail {
        lines.drain(..lines.len().saturating_sub(n));
    }
    let first = stream::iter(lines.into_iter().map(Ok));
    if !request.follow {
        return Ok(first.boxed());
    }
    let follower = Follower {
        path: path.to_path_buf(),
        offset,
        pending: partial.to_vec(),
        ready: std::collections::VecDeque::new(),
    };
    let rest = stream::unfold(Some(follower), |state| async move {
        let mut f = state?;
        loop {
            if let Some(line) = f.ready.pop_front() {
                return Some((Ok(line), Some(f)));
            }
            tokio::time::sleep(POLL).await;
            if let Err(e) = f.read_more() {
                return Some((Err(e), None));
            }
        }
    });
    Ok(first.chain(rest).boxed())
}

/// Where a followed file was read up to.
struct Follower {
    path: PathBuf,
    offset: u64,
    /// Bytes of a line not yet ended.
    pending: Vec<u8>,
    ready: std::collections::VecDeque<String>,
}

impl Follower {
    fn read_more(&mut self) -> Result<()> {
        let err = |e| crate::state::state_err(&self.path, "follow the log", e);
        let mut file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            // Between a process's restarts its log may be gone for a moment.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(err(e)),
        };
        let len = file.metadata().map_err(err)?.len();
        if len < self.offset {
            self.offset = 0;
            self.pending.clear();
        }
        if len == self.offset {
            return Ok(());
        }
        file.seek(SeekFrom::Start(self.offset)).map_err(err)?;
        let mut more = Vec::new();
        file.take(len - self.offset).read_to_end(&mut more).map_err(err)?;
        self.offset += more.len() as u64;
        self.pending.extend_from_slice(&more);
        while let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=i).collect();
            let text = String::from_utf8_lossy(&line[..i]);
            self.ready.push_back(text.trim_end_matches('\r').to_string());
        }
        Ok(())
    }
}

/// The refusal for a component that is not one of `known`.
pub fn unknown_component(component: &str, lab: &str, known: &[String]) -> RuntimeError {
    RuntimeError::InvalidInput(format!(
        "lab {lab:?} has no component named {component:?}: its components are {} (`lab logs NAME`)",
        known.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    async fn collect(s: LogLines, n: usize) -> Vec<String> {
        tokio::time::timeout(Duration::from_secs(5), s.take(n).map(|l| l.unwrap()).collect())
            .await
            .expect("lines within 5 s")
    }

    #[tokio::test]
    async fn the_last_lines_then_each_new_line_and_a_restart_from_the_top() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rank-1.log");
        std::fs::write(&path, "one\ntwo\nthree\nhalf").unwrap();
        let all = collect(file_lines(&path, LogRequest::default()).unwrap(), 10).await;
        assert_eq!(all, ["one", "two", "three", "half"]);
        let tail = LogRequest {
            tail: Some(2),
            follow: false,
        };
        assert_eq!(
            collect(file_lines(&path, tail).unwrap(), 10).await,
            ["three", "half"]
        );

        let follow = LogRequest {
            tail: Some(1),
            follow: true,
        };
        let s = file_lines(&path, follow).unwrap();
        let writer = {
            let path = path.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
                f.write_all(b" a line\nfour\n").unwrap();
                tokio::time::sleep(Duration::from_millis(300)).await;
                // The process restarted: its log was made anew.
                std::fs::write(&path, "again\n").unwrap();
            })
        };
        assert_eq!(collect(s, 4).await, ["three", "half a line", "four", "again"]);
        writer.await.unwrap();
    }

    #[test]
    fn an_unknown_component_names_the_ones_there_are() {
        let e = unknown_component("rank-9", "lab", &["master".into(), "rank-0".into()]).to_string();
        assert!(e.contains("\"rank-9\"") && e.contains("master, rank-0"), "{e}");
    }
}
