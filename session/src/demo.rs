//! The demo's plan: the three built-in drills, in the seed story's order, as the demo runs them through the
//! one drill runner. Each watches its fault longer after detection, so the screen shows its steady effect;
//! the throttled rank is fixed by replacing the drifted pod; the unplaceable rank replays the seed's lesson
//! (scaling back alone is given a short window and is not enough, restoring the world size is).
//!
//! A chapter whose fault does not fit the lab (the throttled rank where the lab runs without CPU limits, as
//! it does for a person without root on cgroup v1) is skipped with the fault's own reason, and the demo
//! tells the others: [`plan`].

use std::future::Future;
use std::time::Duration;

use lab_drills::engine::Observer;
use lab_drills::spec::{Remediate, Step, Verify};
use lab_drills::{Loaded, builtin};
use lab_faults::FaultKind;
use lab_model::status::LabStatus;

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

/// A chapter the demo cannot tell on this lab, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The chapter's place in [`CHAPTERS`], counted from 0.
    pub chapter: usize,
    pub why: String,
}

/// What the demo tells on one lab: the chapters whose fault fits it, in order, and those it skips.
#[derive(Debug)]
pub struct Plan {
    /// The chapters told, as places in [`CHAPTERS`], in the order they run.
    pub told: Vec<usize>,
    pub skipped: Vec<Skipped>,
    drills: Vec<Loaded>,
}

/// The demo's chapters on the lab `status` shows: each chapter's fault is checked as `lab fault inject`
/// would check it, changing nothing; one that does not fit is skipped with the check's reason.
///
/// # Errors
/// As [`chapter`].
pub fn plan(status: &LabStatus) -> Result<Plan> {
    let mut p = Plan {
        told: Vec::new(),
        skipped: Vec::new(),
        drills: Vec::new(),
    };
    for (i, c) in CHAPTERS.iter().enumerate() {
        let loaded = chapter(c)?;
        let refused = loaded.drill.steps.iter().find_map(|s| match s {
            Step::Inject(fault) => lab_faults::engine::check(fault, status).err(),
            _ => None,
        });
        match refused {
            Some(why) => p.skipped.push(Skipped {
                chapter: i,
                why: why.to_string(),
            }),
            None => {
                p.told.push(i);
                p.drills.push(loaded);
            }
        }
    }
    Ok(p)
}

/// The demo's [`plan`] for the running lab `name`, as it is now.
///
/// # Errors
/// [`SessionError::Runtime`] when the lab does not answer; as [`chapter`].
pub async fn plan_for(name: &str) -> Result<Plan> {
    let lab = Lab::open(name).await?;
    plan(&lab.runtime.status().await?)
}

/// `lab demo` on the running lab `name`: the drills of the chapters `plan` tells, through the one drill
/// runner, each step told to `observer`; an `interrupt` clears what the running chapter injected.
///
/// # Errors
/// [`SessionError::Runtime`] when the lab does not answer.
pub async fn run(
    name: &str,
    plan: &Plan,
    observer: &dyn Observer,
    interrupt: impl Future<Output = ()>,
) -> Result<Ran> {
    let lab = Lab::open(name).await?;
    let options = lab.drill_options(None);
    Ok(lab.run_drills(&plan.drills, &options, observer, interrupt).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_model::status::{Phase, PodStatus, Role, RuntimeKind};
    use lab_model::{Millicores, names};

    /// A lab of four Running ranks whose CPU limits are `live` (`None`: not enforced), with `note`.
    fn lab(live: Option<Millicores>, note: Option<&str>) -> LabStatus {
        let mut st = LabStatus::default_shape("x", RuntimeKind::Local);
        for r in 0..4 {
            let mut p = PodStatus::new(names::rank(r), Role::Rank, Some(r));
            p.phase = Phase::Running;
            p.ready = true;
            p.resources.cpu_template = Some(Millicores(400));
            p.resources.cpu_live = live;
            st.pods.push(p);
        }
        st.notes.extend(note.map(str::to_string));
        st
    }

    #[test]
    fn a_lab_without_cpu_limits_skips_the_throttled_rank_and_says_why() {
        let all = plan(&lab(Some(Millicores(400)), None)).unwrap();
        assert!(all.skipped.is_empty(), "{:?}", all.skipped);
        assert_eq!(all.told.len(), 3);

        let note = "CPU limits are off (not root): to get them, run `lab up` as root";
        let p = plan(&lab(None, Some(note))).unwrap();
        let told: Vec<&str> = p.drills.iter().map(|l| l.drill.name.as_str()).collect();
        assert_eq!(told, ["slow-storage", "unplaceable-rank"]);
        assert_eq!(p.told, [0, 2]);
        assert_eq!(p.skipped.len(), 1);
        assert_eq!(CHAPTERS[p.skipped[0].chapter].kind, FaultKind::ThrottledRank);
        assert!(p.skipped[0].why.contains(note), "{}", p.skipped[0].why);
    }

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
