//! The shipped recordings of the built-in drills (recorded on the real local lab): each holds its right
//! fix and its trap, and the reference agent replays against them as the docs say: every incident fixed
//! with the full bundle; at the metrics level whatever it manages is scored, and the same when replayed
//! again (a better agent must not fail here). Needs `python3` (the reference agent's only need).

use std::path::PathBuf;
use std::time::Duration;

use lab_agents::replay::{load, replay};
use lab_agents::{EvidenceLevel, Mitigation};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixtures() -> PathBuf {
    root().join("agents/tests/fixtures/recorded")
}

fn agent() -> String {
    format!(
        "python3 {}",
        root().join("examples/agents/reference.py").display()
    )
}

#[test]
fn every_recorded_incident_has_a_verified_right_fix_and_trap() {
    let incidents = load(&fixtures()).unwrap();
    assert!(!incidents.is_empty());
    for inc in &incidents {
        let fixed = inc.known.values().filter(|(f, t)| *f > 0 && *t == 0).count();
        let traps = inc.known.values().filter(|(f, t)| *f == 0 && *t > 0).count();
        assert!(fixed >= 1 && traps >= 1, "{}: {:?}", inc.drill, inc.known);
        assert!(
            inc.truth.anomaly && !inc.truth.components.is_empty(),
            "{:?}",
            inc.truth
        );
    }
}

#[tokio::test]
async fn the_reference_agent_fixes_every_incident_at_full_and_is_scored_the_same_twice_at_metrics() {
    let n = load(&fixtures()).unwrap().len();
    let full = replay(
        &fixtures(),
        &agent(),
        EvidenceLevel::Full,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(full.fixed, n, "{:#?}", full.incidents);
    // Fixed, for the named cause, on the right part (blaming a part the fault only passes through, such as
    // the primary whose commits wait on its standby, costs precision or recall, not the fix).
    assert!(
        full.incidents
            .iter()
            .all(|i| i.score.as_ref().is_some_and(|s| s.detection
                && s.cause
                && s.precision.is_some_and(|p| p > 0.0)
                && s.mitigation == Mitigation::Fixed)),
        "{:#?}",
        full.incidents
    );
    let at_metrics = || async {
        replay(
            &fixtures(),
            &agent(),
            EvidenceLevel::Metrics,
            Duration::from_secs(30),
        )
        .await
        .unwrap()
    };
    let (first, second) = (at_metrics().await, at_metrics().await);
    assert_eq!(first.incidents.len(), n);
    let verdicts = |r: &lab_agents::replay::ReplayReport| -> Vec<(String, Option<Mitigation>)> {
        r.incidents
            .iter()
            .map(|i| (i.drill.clone(), i.score.as_ref().map(|s| s.mitigation)))
            .collect()
    };
    assert_eq!(
        verdicts(&first),
        verdicts(&second),
        "the metrics replay is not stable"
    );
}
