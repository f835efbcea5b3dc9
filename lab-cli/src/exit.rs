//! The `lab` command's exit status: one enum, the only place a status is chosen, and the text `lab --help`
//! and docs/cli.md show for it.

use std::process::ExitCode;

use lab_session::drills::{RunReport, Verdict};

/// How a `lab` command ended, as its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It did what was asked; every drill passed.
    Passed,
    /// It ran and what it checks did not hold: a drill failed (or an agent's plan was declined), a drill
    /// file did not validate, a replay missed its `--expect-fixed`.
    Failed,
    /// The command line was wrong (clap's own status for a parse error, and ours for a bad flag value).
    Usage,
    /// It could not do what was asked: an error, a drill that errored (it could not run as written), or a
    /// cleanup that failed and may have left the lab changed.
    Error,
    /// Ctrl-C (SIGINT): what was in flight was rolled back or cleared first.
    Interrupted,
    /// Standard output was closed early (`lab fault list | head`): the work was done, some of its output
    /// not read. 141 is what a shell shows for a process that a closed pipe ended (128 + SIGPIPE).
    BrokenPipe,
}

impl Exit {
    /// Every status, in the order the help lists them.
    pub const ALL: [Exit; 6] = [
        Exit::Passed,
        Exit::Failed,
        Exit::Usage,
        Exit::Error,
        Exit::Interrupted,
        Exit::BrokenPipe,
    ];

    /// The number the process exits with.
    pub fn code(self) -> u8 {
        match self {
            Exit::Passed => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Error => 3,
            Exit::Interrupted => 130,
            Exit::BrokenPipe => 141,
        }
    }

    /// One line for `lab --help`.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Passed => "done; every drill passed",
            Exit::Failed => {
                "a drill failed (or its plan was declined), a drill file is invalid, a replay regressed"
            }
            Exit::Usage => "usage: a flag or argument is wrong",
            Exit::Error => "an error: the command could not do it, a drill errored, or a cleanup failed",
            Exit::Interrupted => "interrupted (Ctrl-C); what was in flight was rolled back",
            Exit::BrokenPipe => "standard output closed early (e.g. `| head`)",
        }
    }

    /// The status of a whole drill run: an errored drill or a failed cleanup outweighs a failed drill,
    /// which outweighs passing.
    pub fn of_drills(drills: impl IntoIterator<Item = (Verdict, bool)>) -> Exit {
        let mut worst = Exit::Passed;
        let mut any = false;
        for (verdict, cleanup_failed) in drills {
            any = true;
            let this = if cleanup_failed || verdict == Verdict::Error {
                Exit::Error
            } else if verdict == Verdict::Pass {
                Exit::Passed
            } else {
                Exit::Failed
            };
            worst = worst.max(this);
        }
        // A run with no drill proves nothing (the report says not passed).
        if any { worst } else { Exit::Failed }
    }

    /// [`Exit::of_drills`] for a run's report.
    pub fn of_report(report: &RunReport) -> Exit {
        Exit::of_drills(report.drills.iter().map(|d| (d.verdict, d.cleanup_failed())))
    }

    /// How bad it is, for [`Exit::of_drills`].
    fn rank(self) -> u8 {
        match self {
            Exit::Passed => 0,
            Exit::Failed => 1,
            Exit::BrokenPipe => 2,
            Exit::Usage => 3,
            Exit::Error => 4,
            Exit::Interrupted => 5,
        }
    }

    fn max(self, other: Exit) -> Exit {
        if other.rank() > self.rank() { other } else { self }
    }

    /// The table `lab --help` ends with.
    pub fn help() -> String {
        let mut s = String::from("Exit status:\n");
        for e in Exit::ALL {
            s.push_str(&format!("  {:<5}{}\n", e.code(), e.meaning()));
        }
        s
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// An error in what the command line asked (a value clap cannot check): exits with [`Exit::Usage`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A usage error saying `message`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// The status for a command that ended with `error`.
pub fn of_error(error: &anyhow::Error) -> Exit {
    if error.downcast_ref::<UsageError>().is_some() {
        Exit::Usage
    } else {
        Exit::Error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_conventional() {
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 130, 141]);
        // clap exits 2 on a parse error: ours is the same number.
        assert_eq!(
            i32::from(Exit::Usage.code()),
            clap::Error::new(clap::error::ErrorKind::InvalidValue).exit_code()
        );
    }

    #[test]
    fn a_drill_run_maps_to_the_worst_outcome() {
        use Verdict::*;
        assert_eq!(Exit::of_drills([(Pass, false), (Pass, false)]), Exit::Passed);
        assert_eq!(Exit::of_drills([(Pass, false), (Fail, false)]), Exit::Failed);
        assert_eq!(Exit::of_drills([(Declined, false)]), Exit::Failed);
        assert_eq!(Exit::of_drills([(Fail, false), (Error, false)]), Exit::Error);
        assert_eq!(Exit::of_drills([(Error, false), (Fail, false)]), Exit::Error);
        // A drill that passed but whose cleanup failed left the lab changed: an error, not a pass.
        assert_eq!(Exit::of_drills([(Pass, true)]), Exit::Error);
        assert_eq!(Exit::of_drills([(Fail, true), (Pass, false)]), Exit::Error);
        assert_eq!(Exit::of_drills(std::iter::empty()), Exit::Failed);
    }

    #[test]
    fn usage_errors_are_told_apart_from_other_errors() {
        assert_eq!(of_error(&usage("--set takes NAME=VALUE")), Exit::Usage);
        assert_eq!(of_error(&anyhow::anyhow!("the lab is not running")), Exit::Error);
        assert_eq!(
            of_error(&usage("bad").context("while parsing")),
            Exit::Usage,
            "context keeps the kind"
        );
    }

    #[test]
    fn the_help_lists_every_status() {
        let h = Exit::help();
        for e in Exit::ALL {
            assert!(h.contains(&format!("  {:<5}{}", e.code(), e.meaning())), "{h}");
        }
    }
}
