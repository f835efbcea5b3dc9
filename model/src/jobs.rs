//! Jobs on the lab's storage: the training job, and jobs of other teams that share the storage with it
//! (the noisy neighbours of the `competing-job` fault). A foreign job runs on its own — its own process
//! and cgroup on the local runtime — and is never a rank: it holds no GPU and trains nothing.

use serde::{Deserialize, Serialize};

/// The name every runtime gives the training job in `lab job list`.
pub const TRAINING_JOB: &str = "training";

/// The most foreign jobs a lab runs at once.
pub const MAX_FOREIGN_JOBS: usize = 8;

/// The connections a foreign job opens unless told otherwise: enough that the server it reads queues the
/// ranks' reads well past the latency rule's floor (at 64, rank-1's reads of it sat at 38-70 ms, at the
/// 50 ms floor, and the alert came late).
pub const DEFAULT_THREADS: u32 = 128;

/// The most connections a foreign job opens.
pub const MAX_THREADS: u32 = 256;
const _: () = assert!(DEFAULT_THREADS >= 1 && DEFAULT_THREADS <= MAX_THREADS);

/// The highest read rate a foreign job may be held to, reads per second.
pub const MAX_READ_RATE: f64 = 100_000.0;

/// A job of another team that reads from one storage server, as the lab runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForeignJob {
    /// Its name (`nightly-etl`): lower-case letters, digits and `-`.
    pub name: String,
    /// The storage server it reads from.
    pub server: u32,
    /// Connections reading at once.
    pub threads: u32,
    /// Reads per second it is held to; `None`: as fast as the server answers.
    pub rate: Option<f64>,
}

/// Checks a foreign job's name: it becomes a process, cgroup and pod name, and must not pass for a rank
/// or a storage server.
///
/// # Errors
/// A sentence saying what is wrong.
pub fn validate_job_name(name: &str) -> Result<(), String> {
    let shaped = !name.is_empty()
        && name.len() <= 40
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.as_bytes()[0].is_ascii_lowercase()
        && !name.ends_with('-');
    if !shaped {
        return Err(format!(
            "job name {name:?} must be 1 to 40 lower-case letters, digits and '-', starting with a letter"
        ));
    }
    if is_training_name(name) || name.starts_with("storage") || name == "seeder" {
        return Err(format!(
            "job name {name:?} is taken by the lab's own job or storage: pick another"
        ));
    }
    Ok(())
}

/// True for the training job's own names: `training`, its ranks (`rank-1`) and `ranks`.
pub fn is_training_name(name: &str) -> bool {
    name == TRAINING_JOB || name == "ranks" || crate::names::index_of(name, "rank").is_some()
}

/// Parses a read rate: `20`, `20/s`, `20r/s`: reads per second, more than 0.
///
/// # Errors
/// A sentence saying what a rate looks like.
pub fn parse_read_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let num = t
        .strip_suffix("r/s")
        .or_else(|| t.strip_suffix("/s"))
        .unwrap_or(t)
        .trim();
    let v: f64 = num
        .parse()
        .map_err(|_| format!("read rate {s:?} is not a number of reads per second (e.g. 20 or 20/s)"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!(
            "read rate {s:?} must be more than 0 reads/s: to stop the job, use `lab job stop`"
        ));
    }
    if v > MAX_READ_RATE {
        return Err(format!("read rate {s:?} is more than {MAX_READ_RATE} reads/s"));
    }
    Ok(v)
}

/// One line of `lab job list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobLine {
    pub name: String,
    /// `training` or `foreign`.
    pub kind: String,
    /// Its instances (`rank-0`… or its own pod/process).
    pub members: Vec<String>,
    /// Running members out of all.
    pub running: usize,
    /// The storage servers it reads from.
    pub servers: Vec<String>,
    /// Reads per second it makes, measured over the window (`None`: not measured).
    pub reads_per_s: Option<f64>,
    /// The rate it is held to (foreign jobs only).
    pub rate_limit: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_pass_for_the_lab_s_own_are_refused() {
        assert!(validate_job_name("nightly-etl").is_ok());
        for bad in [
            "",
            "rank-1",
            "training",
            "ranks",
            "storage-1",
            "Etl",
            "9x",
            "a b",
            "etl-",
        ] {
            assert!(validate_job_name(bad).is_err(), "{bad:?}");
        }
        assert!(is_training_name("rank-3"));
        assert!(!is_training_name("rankings"));
    }

    #[test]
    fn rates_parse_and_zero_or_garbage_is_refused() {
        assert_eq!(parse_read_rate("20").unwrap(), 20.0);
        assert_eq!(parse_read_rate("2.5/s").unwrap(), 2.5);
        assert_eq!(parse_read_rate("7r/s").unwrap(), 7.0);
        for bad in ["0", "0/s", "-3", "lots", "", "NaN", "inf", "1e9"] {
            assert!(parse_read_rate(bad).is_err(), "{bad:?}");
        }
        assert!(parse_read_rate("0").unwrap_err().contains("lab job stop"));
    }
}
