//! rank-crash, rank-hang and slow-compute driven against the fake runtime: what each applies, proves and records,
//! what clearing puts back, the right fixes that leave nothing to undo, and the bad input that changes
//! nothing (the ledger file byte for byte).

use lab_faults::ledger::Before;
use lab_faults::{Fault, FaultPhase, Ledger, clear, clear_all, inject, remediate};
use lab_runtime::testing::FakeRuntime;

fn ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::in_dir(dir.path());
    (dir, l)
}

fn ledger_bytes(dir: &tempfile::TempDir) -> Vec<u8> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
        all.extend(std::fs::read(e.path()).unwrap_or_default());
    }
    all
}

#[tokio::test]
async fn rank_hang_freezes_proves_a_still_step_counter_and_thaws() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let done = inject(&rt, &l, Fault::RankHang(lab_model::fault::RankHang { rank: 1 }))
        .await
        .unwrap();
    assert_eq!(done.entry.phase, FaultPhase::Injected);
    assert_eq!(done.entry.before, Before::Running);
    let proof = done.entry.proof.as_deref().unwrap();
    assert!(
        proof.contains("rank-1's step counter stood at") && proof.contains("Running and Ready"),
        "{proof}"
    );
    assert!(rt.state().frozen.contains(&1));
    assert_eq!(done.changes[0].after, "frozen");

    let cleared = clear(&rt, &l, &done.entry.id).await.unwrap().unwrap();
    assert_eq!(cleared.phase, FaultPhase::Cleared);
    assert!(rt.state().frozen.is_empty());
    let changes = l.read().unwrap().changes;
    assert_eq!(changes.last().unwrap().after, "running");
}

#[tokio::test]
async fn a_hung_rank_restarted_by_the_operator_needs_nothing_undone() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    inject(&rt, &l, Fault::RankHang(lab_model::fault::RankHang { rank: 2 }))
        .await
        .unwrap();
    // The right fix: restart that rank, which comes back thawed.
    remediate::restart(&rt, &l, 2).await.unwrap();
    let thaws = rt
        .calls()
        .iter()
        .filter(|c| c.starts_with("freeze_rank(2, false"))
        .count();
    let cleared = clear(&rt, &l, "rank-hang").await.unwrap().unwrap();
    assert_eq!(cleared.phase, FaultPhase::Cleared);
    let after = rt
        .calls()
        .iter()
        .filter(|c| c.starts_with("freeze_rank(2, false"))
        .count();
    assert_eq!(thaws, after, "nothing thawed: the restart did it");
}

#[tokio::test]
async fn slow_compute_starts_a_hog_beside_each_rank_with_the_template_unchanged_and_stops_them() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let done = inject(
        &rt,
        &l,
        Fault::SlowCompute(lab_model::fault::SlowCompute { ranks: vec![1, 2] }),
    )
    .await
    .unwrap();
    assert_eq!(
        done.entry.before,
        Before::Beside {
            started: vec![(1, 5000), (2, 5001)]
        }
    );
    let proof = done.entry.proof.as_deref().unwrap();
    assert!(
        proof.contains("rank-1: pid 5000 used") && proof.contains("rank-2: pid 5001 used"),
        "{proof}"
    );
    assert!(proof.contains("template 400m, unchanged"), "{proof}");
    assert_eq!(done.changes.len(), 2);
    assert!(rt.state().cpu_live.is_empty(), "no limit was changed");

    clear_all(&rt, &l).await.unwrap();
    let st = rt.state();
    assert!(st.beside.values().all(Vec::is_empty), "{:?}", st.beside);
}

#[tokio::test]
async fn stopping_the_hog_by_hand_is_the_right_fix_and_the_rank_itself_is_refused() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    inject(
        &rt,
        &l,
        Fault::SlowCompute(lab_model::fault::SlowCompute { ranks: vec![1] }),
    )
    .await
    .unwrap();
    let procs = remediate::rank_processes(&rt, 1).await.unwrap();
    let own = procs.iter().find(|p| p.rank_itself).unwrap().pid;
    let hog = procs.iter().find(|p| !p.rank_itself).unwrap().pid;
    let changes = l.read().unwrap().changes.len();
    let err = remediate::stop_beside(&rt, &l, 1, own).await.unwrap_err();
    assert!(err.to_string().contains("lab restart rank 1"), "{err}");
    let err = remediate::stop_beside(&rt, &l, 1, 424242).await.unwrap_err();
    assert!(err.to_string().contains("lab rank procs 1"), "{err}");
    assert_eq!(
        l.read().unwrap().changes.len(),
        changes,
        "refusals record nothing"
    );

    let c = remediate::stop_beside(&rt, &l, 1, hog).await.unwrap();
    assert_eq!(c.after, "stopped");
    let stops = rt
        .calls()
        .iter()
        .filter(|c| c.starts_with("stop_beside("))
        .count();
    clear(&rt, &l, "slow-compute").await.unwrap().unwrap();
    assert_eq!(
        rt.calls()
            .iter()
            .filter(|c| c.starts_with("stop_beside("))
            .count(),
        stops,
        "the clear finds the hog gone and stops nothing"
    );
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let rt = FakeRuntime::new();
    let (d, l) = ledger();
    inject(&rt, &l, Fault::RankHang(lab_model::fault::RankHang { rank: 3 }))
        .await
        .unwrap();
    clear_all(&rt, &l).await.unwrap();
    let before = ledger_bytes(&d);
    let calls = rt.calls().len();
    for (fault, says) in [
        (
            Fault::RankHang(lab_model::fault::RankHang { rank: 9 }),
            "out of range",
        ),
        (
            Fault::SlowCompute(lab_model::fault::SlowCompute { ranks: vec![1, 7] }),
            "out of range",
        ),
        (
            Fault::SlowCompute(lab_model::fault::SlowCompute { ranks: vec![] }),
            "at least one rank",
        ),
        (
            Fault::SlowCompute(lab_model::fault::SlowCompute { ranks: vec![2, 2] }),
            "twice",
        ),
        (
            Fault::SlowCompute(lab_model::fault::SlowCompute {
                ranks: vec![0, 1, 2, 3],
            }),
            "leave one out",
        ),
    ] {
        let err = inject(&rt, &l, fault).await.unwrap_err();
        assert!(err.to_string().contains(says), "{err}");
    }
    assert_eq!(ledger_bytes(&d), before, "the ledger is byte-identical");
    assert!(
        rt.calls()[calls..]
            .iter()
            .all(|c| !c.starts_with("freeze_rank") && !c.starts_with("start_hog")),
        "{:?}",
        &rt.calls()[calls..]
    );
}

#[tokio::test]
async fn rank_crash_sets_the_ranks_own_setting_proves_the_crash_loop_and_puts_it_back() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let done = inject(
        &rt,
        &l,
        Fault::RankCrash(lab_model::fault::RankCrash { rank: 1, after: 150 }),
    )
    .await
    .unwrap();
    assert_eq!(
        done.entry.before,
        Before::RankEnv {
            name: "LAB_DEVICE_FAULT_AFTER".into(),
            value: None
        }
    );
    let proof = done.entry.proof.as_deref().unwrap();
    assert!(proof.contains("rank-1 crashed and was restarted"), "{proof}");
    assert_eq!(
        rt.state().rank_env[&1]
            .get("LAB_DEVICE_FAULT_AFTER")
            .map(String::as_str),
        Some("150")
    );
    assert_eq!(done.changes[0].line(), l.read().unwrap().changes[0].line());

    clear_all(&rt, &l).await.unwrap();
    assert!(rt.state().rank_env.is_empty());
}

#[tokio::test]
async fn the_operator_putting_the_setting_back_is_the_right_fix_and_restarting_is_not() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    inject(
        &rt,
        &l,
        Fault::RankCrash(lab_model::fault::RankCrash { rank: 2, after: 150 }),
    )
    .await
    .unwrap();
    // The trap: a restart keeps the rank's own setting, which crashes it again.
    remediate::restart(&rt, &l, 2).await.unwrap();
    assert!(rt.state().rank_env.contains_key(&2));
    // Bad input changes nothing.
    let changes = l.read().unwrap().changes.len();
    let err = remediate::set_rank_env(&rt, &l, 2, "PATH", None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a rank setting"), "{err}");
    let err = remediate::set_rank_env(&rt, &l, 2, "LAB_NOT_SET", None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("has no setting"), "{err}");
    assert_eq!(l.read().unwrap().changes.len(), changes);
    // The right fix.
    let c = remediate::set_rank_env(&rt, &l, 2, "LAB_DEVICE_FAULT_AFTER", None)
        .await
        .unwrap();
    assert_eq!((c.before.as_str(), c.after.as_str()), ("150", "unset"));
    let sets = rt
        .calls()
        .iter()
        .filter(|c| c.starts_with("set_rank_env("))
        .count();
    clear(&rt, &l, "rank-crash").await.unwrap().unwrap();
    assert_eq!(
        rt.calls()
            .iter()
            .filter(|c| c.starts_with("set_rank_env("))
            .count(),
        sets,
        "the clear finds the setting gone and changes nothing"
    );
}

/// A change is on record from the moment it is in force, not from the end of its proof: a reader of the
/// ledger while the proof still looks (the lab's watcher, a drill's snapshots and the incident bundle cut
/// from them) sees the setting that crashes the rank. Here rank-3 at 120 steps, whose first crash the
/// proof is still waiting to see.
#[tokio::test(start_paused = true)]
async fn a_change_is_on_record_while_its_proof_still_looks() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    // Every status read takes 2 s: the inject reads it at once (done at 2 s), applies, then its proof's
    // first look reads it again (done at 4 s).
    rt.slow("status", std::time::Duration::from_secs(2));
    let fault = Fault::RankCrash(lab_model::fault::RankCrash { rank: 3, after: 120 });
    let task = tokio::spawn({
        let (rt, l) = (rt.clone(), l.clone());
        async move { inject(&rt, &l, fault).await }
    });
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        rt.state().rank_env[&3]
            .get("LAB_DEVICE_FAULT_AFTER")
            .map(String::as_str),
        Some("120"),
        "applied by now"
    );
    assert!(!task.is_finished(), "the proof still looks");
    let seen: Vec<String> = l.read().unwrap().changes.iter().map(|c| c.line()).collect();
    assert_eq!(
        seen,
        [
            "rank-3 LAB_DEVICE_FAULT_AFTER unset → 120; a setting of this rank alone: its accelerator fails after that many steps"
        ],
        "the change in force is on record during the proof"
    );
    let done = task.await.unwrap().unwrap();
    // Recorded once, as the proof left it.
    let after: Vec<String> = l.read().unwrap().changes.iter().map(|c| c.line()).collect();
    assert_eq!(after, done.changes.iter().map(|c| c.line()).collect::<Vec<_>>());
    clear_all(&rt, &l).await.unwrap();
}

/// On a lab just used the rank may still be restarting when the inject comes (after the previous fault's
/// clear it waits out its restart backoff, then its peers): its metrics do not answer. The inject waits
/// until it trains before it freezes it, and proves the hang on a step counter it saw move. Here rank-2,
/// whose metrics answer from 5 s on.
#[tokio::test(start_paused = true)]
async fn rank_hang_waits_for_a_restarting_rank_to_train_before_it_freezes_it() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    rt.fail("fetch_metrics");
    let task = tokio::spawn({
        let (rt, l) = (rt.clone(), l.clone());
        async move { inject(&rt, &l, Fault::RankHang(lab_model::fault::RankHang { rank: 2 })).await }
    });
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert!(!task.is_finished(), "the inject waits for the rank to train");
    assert!(rt.state().frozen.is_empty(), "nothing is frozen meanwhile");
    rt.heal("fetch_metrics");
    let done = task.await.unwrap().unwrap();
    let proof = done.entry.proof.as_deref().unwrap();
    assert!(proof.contains("rank-2's step counter stood at"), "{proof}");
    assert!(rt.state().frozen.contains(&2));
    clear_all(&rt, &l).await.unwrap();
    assert!(rt.state().frozen.is_empty());
}

/// A rank that does not train within the inject's wait is not frozen: the inject says the job is not
/// steady, and nothing changes.
#[tokio::test(start_paused = true)]
async fn rank_hang_on_a_rank_that_does_not_train_says_so_and_changes_nothing() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    rt.fail("fetch_metrics");
    let err = inject(&rt, &l, Fault::RankHang(lab_model::fault::RankHang { rank: 2 }))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("rank-2 is not training") && msg.contains("the job is not steady"),
        "{msg}"
    );
    assert!(
        !rt.calls().iter().any(|c| c.starts_with("freeze_rank")),
        "{:?}",
        rt.calls()
    );
    let data = l.read().unwrap();
    assert_eq!(data.faults[0].phase, FaultPhase::Failed);
    assert!(data.changes.is_empty(), "{:?}", data.changes);
}
