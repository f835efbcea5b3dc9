//! The demo's plan: the three built-in drills, in the seed story's order, as the demo runs them through the
//! one drill runner. Each watches its fault longer after detection, so the screen shows its steady effect;
//! the throttled rank is fixed by replacing the drifted pod; the unplaceable rank replays the seed's lesson
//! (scaling back alone is given a short window and is not enough, restoring the world size is).

use std::time::Duration;

use lab_drills::spec::{Remediate, Step, Verify};
use lab_drills::{Loaded, builtin};
use lab_faults::FaultKind;

use crate::error::{Result, SessionError};

/// How long the demo watches a fault after detecting it, so the screen shows its steady effect.
pub const HOLD: Duration = Duration::from_secs(10);
/// How long the demo gives the seed's first, incomplete fix for fault 3 before the second one.
pub const WRONG_FIX_WINDOW: Duration = Duration::from_secs(30);

/// The fault of each chapter, in order.
pub const CHAPTERS: [FaultKind; 3] = [
    FaultKind::SlowStorage,
    FaultKind::ThrottledRank,
    FaultKind::UnplaceableRank,
];

fn command(cmd: &str) -> Remediate {
    Remediate {
        command: Some(cmd.to_string()),
        timeout: Duration::from_secs(180),
        checkpoint_before_fix: false,
    }
}

/// The built-in drill of `kind` as the demo runs it.
///
/// # Errors
/// [`SessionError::Drill`] if the built-in drill cannot be loaded; [`SessionError::Demo`] if it;
/// lacks a remediate or verify step.
pub fn chapter(kind: FaultKind) -> Result<Loaded> {
    let mut loaded = builtin::builtin(kind.name())?;
    let lacks = || {
        SessionError::Demo(format!(
            "the built-in drill {} lacks a remediate or verify step",
            kind.name()
        ))
    };
    let verify = loaded
        .drill
        .steps
        .iter()
        .find_map(|s| match s {
            Step::Verify(v) => Some(v.clone()),
            _ => None,
        })
        .ok_or_else(lacks)?;
    let fixes: Vec<Step> = match kind {
        FaultKind::SlowStorage => vec![Step::Remediate(Remediate {
            command: None,
            timeout: Duration::from_secs(120),
            checkpoint_before_fix: false,
        })],
        FaultKind::ThrottledRank | FaultKind::RankHang => {
            vec![Step::Remediate(command("lab restart rank 1"))]
        }
        FaultKind::SlowCompute | FaultKind::RankCrash => vec![Step::Remediate(Remediate {
            command: None,
            timeout: Duration::from_secs(120),
            checkpoint_before_fix: false,
        })],
        // The seed's two fixes in turn: scaling back alone, then the configuration.
        FaultKind::UnplaceableRank | FaultKind::StuckRollout => vec![
            Step::Remediate(command("lab scale ranks 4")),
            Step::Verify(Verify {
                deadline: WRONG_FIX_WINDOW,
                ..verify.clone()
            }),
            Step::Remediate(command("lab config world-size 4")),
        ],
        // Not a chapter of the seed's story; its own drill's fix, should a demo ever include it.
        FaultKind::CompetingJob => vec![Step::Remediate(command("lab job stop nightly-etl"))],
        FaultKind::SlowDisk => {
            return Err(SessionError::Demo(
                "slow-disk is not a chapter of the seed's story: run it with `lab drill run slow-disk`"
                    .into(),
            ));
        }
        // Not a chapter either: the seed's rule, the template fixed and the stuck pod deleted by name.
        FaultKind::SyncReplica => vec![Step::Remediate(command(
            "lab db template --node-selector '' && lab db delete-pod db-1",
        ))],
    };
    let mut steps = Vec::new();
    for s in std::mem::take(&mut loaded.drill.steps) {
        match s {
            Step::Expect(mut e) => {
                e.hold = e.hold.max(HOLD);
                steps.push(Step::Expect(e));
            }
            Step::Remediate(_) => steps.extend(fixes.iter().cloned()),
            other => steps.push(other),
        }
    }
    if !steps.iter().any(|s| matches!(s, Step::Remediate(_))) {
        return Err(lacks());
    }
    loaded.drill.steps = steps;
    Ok(loaded)
}

/// The demo's three drills.
///
/// # Errors
/// As [`chapter`].
pub fn drills() -> Result<Vec<Loaded>> {
    CHAPTERS.into_iter().map(chapter).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(l: &Loaded) -> Vec<&'static str> {
        l.drill.steps.iter().map(Step::key).collect()
    }

    #[test]
    fn the_demo_runs_the_built_in_drills_with_its_own_fixes() {
        let d = drills().unwrap();
        assert_eq!(keys(&d[0]), ["inject", "expect", "remediate", "verify"]);
        assert_eq!(keys(&d[1]), ["inject", "expect", "remediate", "verify"]);
        assert_eq!(
            keys(&d[2]),
            ["inject", "expect", "remediate", "verify", "remediate", "verify"]
        );
        let Step::Remediate(r) = &d[1].drill.steps[2] else {
            unreachable!()
        };
        assert_eq!(r.command.as_deref(), Some("lab restart rank 1"));
        let Step::Verify(v) = &d[2].drill.steps[3] else {
            unreachable!()
        };
        assert_eq!(v.deadline, WRONG_FIX_WINDOW);
        for l in &d {
            let Step::Expect(e) = &l.drill.steps[1] else {
                unreachable!()
            };
            assert!(e.hold >= HOLD);
            assert_eq!(l.origin, format!("builtin:{}", l.drill.name));
        }
    }
}
