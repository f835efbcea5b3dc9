//! The demo's plan: the three built-in drills, in the seed story's order, as the demo runs them through the
//! one drill runner. Each watches its fault longer after detection, so the screen shows its steady effect;
//! the throttled rank is fixed by replacing the drifted pod; the unplaceable rank replays the seed's lesson
//! (scaling back alone is given a short window and is not enough, restoring the world size is).

use std::future::Future;
use std::time::Duration;

use lab_drills::engine::Observer;
use lab_drills::spec::{Remediate, Step, Verify};
use lab_drills::{Loaded, builtin};
use lab_faults::FaultKind;

use crate::Lab;
use crate::drills::Ran;
use crate::error::{Result, SessionError};

/// How long the demo watches a fault after detecting it, so the screen shows its steady effect.
pub const HOLD: Duration = Duration::from_secs(10);
/// How long the demo gives the seed's first, incomplete fix for fault 3 before the second one.
pub const WRONG_FIX_WINDOW: Duration = Duration::from_secs(30);

/// How a chapter's fault is fixed in the story.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fix {
    /// The lab's own clear (what the inject changed, restored).
    LabClear,
    /// One command.
    Command(&'static str),
    /// The seed's lesson: a first fix that looks right and is given a short window
    /// ([`WRONG_FIX_WINDOW`]) where it is not enough, then the second that is.
    TwoSteps(&'static str, &'static str),
}

/// One chapter of the demo's story: a built-in drill and how the story tells it.
#[derive(Debug, Clone, Copy)]
pub struct Chapter {
    /// The fault, and the built-in drill of the same name.
    pub kind: FaultKind,
    pub title: &'static str,
    /// What happens and how it is fixed, in a sentence or two.
    pub plan: &'static str,
    pub fix: Fix,
    /// The fix in a few words, as the story names it once the fault is detected; `None` for a two-step
    /// fix, named after its first verification instead.
    pub fix_words: Option<&'static str>,
}

/// The chapters, in the seed story's order.
pub const CHAPTERS: [Chapter; 3] = [
    Chapter {
        kind: FaultKind::SlowStorage,
        title: "a slow storage server",
        plan: "storage-1 answers every request 300 ms late. Fix: remove the added delay (the lab's own clear).",
        fix: Fix::LabClear,
        fix_words: Some("the lab's own clear (delay removed)"),
    },
    Chapter {
        kind: FaultKind::ThrottledRank,
        title: "one throttled worker",
        plan: "rank-1's CPU limit is cut in place to 150m; its template keeps 400m. Fix: replace the drifted pod \
               (`lab restart rank 1`), not re-apply a template that was right all along.",
        fix: Fix::Command("lab restart rank 1"),
        fix_words: Some("lab restart rank 1"),
    },
    Chapter {
        kind: FaultKind::UnplaceableRank,
        title: "one worker that cannot be placed",
        plan: "The job is scaled to 5 ranks on 4 GPUs and told to expect 5 peers. First fix, as in the seed: scale \
               back to 4 — not enough. Second: restore the world size to 4.",
        fix: Fix::TwoSteps("lab scale ranks 4", "lab config world-size 4"),
        fix_words: None,
    },
];

fn command(cmd: &str) -> Remediate {
    Remediate {
        command: Some(cmd.to_string()),
        timeout: Duration::from_secs(180),
        checkpoint_before_fix: false,
    }
}

/// The built-in drill of chapter `c` as the demo runs it.
///
/// # Errors
/// [`SessionError::Drill`] if the built-in drill cannot be loaded; [`SessionError::Demo`] if it lacks a
/// remediate or verify step.
pub fn chapter(c: &Chapter) -> Result<Loaded> {
    let name = c.kind.name();
    let mut loaded = builtin::builtin(name)?;
    let lacks = || {
        SessionError::Demo(format!(
            "the built-in drill {name} lacks a remediate or verify step"
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
    let fixes: Vec<Step> = match c.fix {
        Fix::LabClear => vec![Step::Remediate(Remediate {
            command: None,
            timeout: Duration::from_secs(120),
            checkpoint_before_fix: false,
        })],
        Fix::Command(cmd) => vec![Step::Remediate(command(cmd))],
        Fix::TwoSteps(first, second) => vec![
            Step::Remediate(command(first)),
            Step::Verify(Verify {
                deadline: WRONG_FIX_WINDOW,
                ..verify.clone()
            }),
            Step::Remediate(command(second)),
        ],
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
    CHAPTERS.iter().map(chapter).collect()
}

/// `lab demo` on the running lab `name`: the chapters' drills through the one drill runner, each step
/// told to `observer`; an `interrupt` clears what the running chapter injected.
///
/// # Errors
/// As [`drills`], before the lab is opened; [`SessionError::Runtime`] when the lab does not answer.
pub async fn run(name: &str, observer: &dyn Observer, interrupt: impl Future<Output = ()>) -> Result<Ran> {
    let drills = drills()?;
    let lab = Lab::open(name).await?;
    let options = lab.drill_options(None);
    Ok(lab.run_drills(&drills, &options, observer, interrupt).await)
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
