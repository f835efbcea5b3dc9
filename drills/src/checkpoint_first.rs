//! Checkpoint first (`checkpoint_before_fix: true` on a remediate step): whatever the cause, the plan saves
//! the run before it changes anything. A pure judge over the change log and the job's last checkpoint, so
//! a test can replay any order of events.
//!
//! What counts is a checkpoint saved *on request* — a `lab checkpoint` that the job answered, recorded in
//! the change log — after the fault was detected and no later than the remediation's first change to the
//! lab. A periodic checkpoint that happens to fall in that window does not count: the drill checks that
//! the fix saved the run, not that the job's schedule was lucky.

use lab_model::ChangeRecord;
use lab_model::checkpoint::is_checkpoint;

use crate::judge::fmt_s;
use lab_model::clock::rfc3339;

/// The job's last checkpoint as its own signals reported it when the remediation started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastCheckpoint {
    pub step: Option<u64>,
    pub at_ms: Option<u64>,
}

/// Judges one remediation: `detected_ms` is when the fault was detected (the expect step's detection, or
/// the injection when the drill expects nothing), `since_detection` the change records from then to the
/// end of the remediation, `remediation_start_ms` when it began. `Ok` says which checkpoint saved the run,
/// `Err` why none did.
///
/// # Errors
/// A sentence for the report when no checkpoint was saved on request in the window.
pub fn judge(
    detected_ms: u64,
    remediation_start_ms: u64,
    since_detection: &[ChangeRecord],
    last: LastCheckpoint,
) -> Result<String, String> {
    let mut changes: Vec<&ChangeRecord> = since_detection
        .iter()
        .filter(|c| c.at_ms >= detected_ms)
        .collect();
    changes.sort_by_key(|c| c.at_ms);
    let fix = changes
        .iter()
        .find(|c| !is_checkpoint(c) && c.at_ms >= remediation_start_ms);
    let saved: Vec<&&ChangeRecord> = changes.iter().filter(|c| is_checkpoint(c)).collect();
    let before_fix = saved
        .iter()
        .rev()
        .find(|c| fix.is_none_or(|f| c.at_ms <= f.at_ms));
    let rel = |ms: u64| fmt_s(ms.saturating_sub(detected_ms) as f64 / 1000.0);
    match (before_fix, fix) {
        (Some(c), Some(f)) => Ok(format!(
            "checkpoint saved first: {} ({} after the fault was detected), before the first change `{}`",
            saved_text(c),
            rel(c.at_ms),
            f.line()
        )),
        (Some(c), None) => Ok(format!(
            "checkpoint saved: {} ({} after the fault was detected); the remediation changed nothing else",
            saved_text(c),
            rel(c.at_ms)
        )),
        (None, fix) => {
            let mut why = "no checkpoint saved before the fix".to_string();
            if let Some(late) = saved.first() {
                why.push_str(&format!(
                    ": one was saved ({}), but only {} after the fix's first change",
                    saved_text(late),
                    fmt_s(late.at_ms.saturating_sub(fix.map_or(0, |f| f.at_ms)) as f64 / 1000.0)
                ));
            } else {
                why.push_str(": ");
                why.push_str(&last_text(last, detected_ms));
            }
            match fix {
                Some(f) => why.push_str(&format!("; the first change was `{}`", f.line())),
                None => why.push_str("; the remediation changed nothing"),
            }
            why.push_str(" — run `lab checkpoint` before the fix");
            Err(why)
        }
    }
}

/// `step 412 at 2026-…Z` from a checkpoint's change record.
fn saved_text(c: &ChangeRecord) -> String {
    let at = c
        .note
        .as_deref()
        .and_then(|n| n.strip_prefix("saved "))
        .unwrap_or("");
    format!("{} {at}", c.after).trim_end().to_string()
}

/// What the job's signals said of its last checkpoint, against the detection.
fn last_text(last: LastCheckpoint, detected_ms: u64) -> String {
    match (last.step, last.at_ms) {
        (Some(step), Some(at)) if at < detected_ms => format!(
            "the last checkpoint was step {step} at {}, {} before the fault was detected",
            rfc3339(at),
            fmt_s(detected_ms.saturating_sub(at) as f64 / 1000.0)
        ),
        (Some(step), Some(at)) => format!(
            "the last checkpoint was step {step} at {}, one the job wrote on its own schedule, not asked for",
            rfc3339(at)
        ),
        (Some(step), None) => {
            format!("the job wrote no checkpoint since rank-0 started; it resumed from step {step}")
        }
        _ => "the job reported no checkpoint at all".into(),
    }
}

#[cfg(test)]
mod tests {
    use lab_model::change::ChangeSource;
    use lab_model::checkpoint::{CHANGE_TARGET, CHANGE_WHAT};

    use super::*;

    const DETECTED: u64 = 1_000_000;
    const START: u64 = 1_002_000;

    fn change(at_ms: u64, target: &str, what: &str, after: &str) -> ChangeRecord {
        ChangeRecord {
            at_ms,
            source: ChangeSource::Remediation,
            target: target.into(),
            what: what.into(),
            before: "x".into(),
            after: after.into(),
            note: None,
            fault_id: None,
            by: None,
        }
    }

    fn saved(at_ms: u64, step: u64) -> ChangeRecord {
        let mut c = change(at_ms, CHANGE_TARGET, CHANGE_WHAT, &format!("step {step}"));
        c.note = Some(format!("saved at {}", rfc3339(at_ms - 100)));
        c
    }

    fn clear(at_ms: u64) -> ChangeRecord {
        let mut c = change(at_ms, "storage-1", "added delay", "0 ms");
        c.source = ChangeSource::Fault;
        c
    }

    const PERIODIC_BEFORE: LastCheckpoint = LastCheckpoint {
        step: Some(400),
        at_ms: Some(DETECTED - 12_000),
    };

    #[test]
    fn a_checkpoint_before_the_first_change_passes() {
        let ok = judge(
            DETECTED,
            START,
            &[saved(START + 500, 412), clear(START + 900)],
            PERIODIC_BEFORE,
        )
        .unwrap();
        assert!(ok.starts_with("checkpoint saved first: step 412 at "), "{ok}");
        assert!(ok.contains("2.50 s after the fault was detected"), "{ok}");
        assert!(ok.contains("`storage-1 added delay x → 0 ms`"), "{ok}");
        // Saved and fixed in the same millisecond: the checkpoint was there before the change.
        assert!(
            judge(
                DETECTED,
                START,
                &[clear(START + 500), saved(START + 500, 412)],
                PERIODIC_BEFORE
            )
            .is_ok()
        );
        // Saved by an earlier remediation after the detection, before this one's first change.
        assert!(
            judge(
                DETECTED,
                START,
                &[saved(START - 1_000, 405), clear(START + 10)],
                PERIODIC_BEFORE
            )
            .is_ok()
        );
    }

    #[test]
    fn no_checkpoint_says_which_was_the_last() {
        let e = judge(DETECTED, START, &[clear(START + 900)], PERIODIC_BEFORE).unwrap_err();
        assert!(
            e.starts_with("no checkpoint saved before the fix: the last checkpoint was step 400 at "),
            "{e}"
        );
        assert!(e.contains("12.00 s before the fault was detected"), "{e}");
        assert!(
            e.contains("the first change was `storage-1 added delay x → 0 ms`"),
            "{e}"
        );
        assert!(e.ends_with("run `lab checkpoint` before the fix"), "{e}");
        // A periodic checkpoint after the detection is not a checkpoint the fix saved.
        let periodic = LastCheckpoint {
            step: Some(500),
            at_ms: Some(START + 100),
        };
        let e = judge(DETECTED, START, &[clear(START + 900)], periodic).unwrap_err();
        assert!(e.contains("on its own schedule, not asked for"), "{e}");
        let none = LastCheckpoint {
            step: None,
            at_ms: None,
        };
        assert!(
            judge(DETECTED, START, &[], none)
                .unwrap_err()
                .contains("no checkpoint at all")
        );
    }

    #[test]
    fn a_checkpoint_after_the_fix_is_too_late() {
        let e = judge(
            DETECTED,
            START,
            &[clear(START + 100), saved(START + 2_100, 470)],
            PERIODIC_BEFORE,
        )
        .unwrap_err();
        assert!(e.contains("one was saved (step 470 at "), "{e}");
        assert!(e.contains("but only 2.00 s after the fix's first change"), "{e}");
    }

    #[test]
    fn checkpoints_before_the_detection_do_not_count() {
        let e = judge(
            DETECTED,
            START,
            &[saved(DETECTED - 5_000, 380), clear(START + 100)],
            PERIODIC_BEFORE,
        )
        .unwrap_err();
        assert!(
            e.starts_with("no checkpoint saved before the fix: the last"),
            "{e}"
        );
    }

    #[test]
    fn a_remediation_that_only_saves_passes_this_judge() {
        let ok = judge(DETECTED, START, &[saved(START + 300, 410)], PERIODIC_BEFORE).unwrap();
        assert!(ok.contains("changed nothing else"), "{ok}");
    }
}
