//! The fault engine driven against the fake runtime: apply, prove, recover, rollback, idempotence and the
//! ledger, with no processes and no network.

use std::time::Duration;

use lab_faults::ledger::Before;
use lab_faults::{Fault, FaultError, FaultPhase, Ledger, clear, clear_all, inject};
use lab_model::Millicores;
use lab_runtime::Delay;
use lab_runtime::Ranks;
use lab_runtime::testing::FakeRuntime;

fn slow(server: u32) -> Fault {
    Fault::SlowStorage(lab_model::fault::SlowStorage {
        server,
        delay: Duration::from_millis(300),
        jitter: Duration::ZERO,
    })
}

fn ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::in_dir(dir.path());
    (dir, l)
}

fn count(rt: &FakeRuntime, method: &str) -> usize {
    rt.calls()
        .iter()
        .filter(|c| c.starts_with(&format!("{method}(")))
        .count()
}

#[tokio::test]
async fn slow_storage_is_applied_proven_recorded_and_cleared_to_exactly_before() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let done = inject(&rt, &l, slow(1)).await.unwrap();
    assert_eq!(done.entry.phase, FaultPhase::Injected);
    assert_eq!(done.entry.before, Before::Delay { delay: None });
    let proof = done.entry.proof.as_deref().unwrap();
    assert_eq!(
        proof,
        "storage-1 answers in 302 ms through its path (set +300 ms via latency proxy); \
         siblings 2.0 ms, 2.0 ms (before: 2.0 ms, 2.0 ms)"
    );
    assert_eq!(done.changes.len(), 1);
    assert_eq!(
        done.changes[0].line(),
        l.read().unwrap().changes[0].line(),
        "the change is in the ledger"
    );
    assert_eq!(
        rt.state().delays.get(&1).map(|d| d.delay),
        Some(Duration::from_millis(300))
    );

    let cleared = clear(&rt, &l, &done.entry.id).await.unwrap().unwrap();
    assert_eq!(cleared.phase, FaultPhase::Cleared);
    assert!(rt.state().delays.is_empty());
    let data = l.read().unwrap();
    assert_eq!(data.active().count(), 0);
    assert_eq!(data.changes.len(), 2);
    assert_eq!(data.changes[1].note.as_deref(), Some("cleared"));
}

#[tokio::test]
async fn a_sibling_slow_for_a_moment_is_looked_at_again_and_one_that_stays_slow_fails_the_proof() {
    let ms = Duration::from_millis;
    // storage-0's probes: the one before the inject normal, the first after it 50 ms slower (a moment of
    // load), then normal again: the proof looks again and holds.
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    rt.update(|lab| {
        lab.probe_noise.insert(0, [ms(0), ms(50)].into());
    });
    let done = inject(&rt, &l, slow(1)).await.unwrap();
    assert!(
        done.entry
            .proof
            .as_deref()
            .unwrap()
            .contains("siblings 2.0 ms, 2.0 ms"),
        "{:?}",
        done.entry.proof
    );
    assert_eq!(count(&rt, "probe_storage"), 2 + 1 + 2 + 1, "{:?}", rt.calls());

    // Slow at every look after the inject, as a delay on it too would be: the proof fails, nothing stays.
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    rt.update(|lab| {
        lab.probe_noise
            .insert(0, [ms(0), ms(50), ms(50), ms(50), ms(50)].into());
    });
    let e = inject(&rt, &l, slow(1)).await.unwrap_err();
    assert!(e.to_string().contains("a sibling slowed down too"), "{e}");
    assert!(rt.state().delays.is_empty(), "rolled back");
}

#[tokio::test]
async fn clearing_twice_changes_nothing_the_second_time() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let done = inject(&rt, &l, slow(0)).await.unwrap();
    clear(&rt, &l, &done.entry.id).await.unwrap();
    let sets = count(&rt, "set_storage_delay");
    assert_eq!(clear(&rt, &l, &done.entry.id).await.unwrap(), None);
    assert_eq!(clear(&rt, &l, "slow-storage").await.unwrap(), None);
    assert!(clear_all(&rt, &l).await.unwrap().is_empty());
    assert_eq!(count(&rt, "set_storage_delay"), sets, "nothing was touched again");
    assert!(matches!(
        clear(&rt, &l, "no-such-fault-9").await,
        Err(FaultError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_fault_that_cannot_be_proven_is_rolled_back_and_kept_as_failed() {
    let rt = FakeRuntime::new();
    rt.update(|l| l.delays_take_effect = false);
    let (_d, l) = ledger();
    let err = inject(&rt, &l, slow(1)).await.unwrap_err();
    assert!(matches!(err, FaultError::NotProven { .. }), "{err}");
    assert!(rt.state().delays.is_empty(), "the delay was rolled back");
    let data = l.read().unwrap();
    assert_eq!(data.faults.len(), 1);
    assert_eq!(data.faults[0].phase, FaultPhase::Failed);
    assert!(data.faults[0].error.is_some());
    assert_eq!(data.active().count(), 0);
    // The delay was on record from its apply, so its rollback is too: the log says the path was changed
    // and put back.
    let log: Vec<(&str, &str, Option<&str>)> = data
        .changes
        .iter()
        .map(|c| (c.before.as_str(), c.after.as_str(), c.note.as_deref()))
        .collect();
    assert_eq!(log.len(), 2, "{:?}", data.changes);
    assert_eq!((log[0].0, log[1].1, log[1].2), ("0 ms", "0 ms", Some("cleared")));
}

#[tokio::test]
async fn a_failed_apply_is_rolled_back_and_the_error_names_the_action() {
    let rt = FakeRuntime::new();
    rt.fail("set_storage_delay");
    let (_d, l) = ledger();
    let err = inject(&rt, &l, slow(2)).await.unwrap_err();
    assert!(err.to_string().contains("adding the delay to storage-2"), "{err}");
    assert_eq!(l.read().unwrap().faults[0].phase, FaultPhase::Failed);
}

#[tokio::test]
async fn nothing_changes_when_a_fault_does_not_fit_or_is_already_in() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let err = inject(&rt, &l, slow(7)).await.unwrap_err();
    assert!(err.to_string().contains("--server 7 is out of range"), "{err}");
    let err = inject(
        &rt,
        &l,
        Fault::UnplaceableRank(lab_model::fault::UnplaceableRank { ranks: 4 }),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("not above the current 4 ranks"), "{err}");
    assert!(l.read().unwrap().faults.is_empty());

    inject(&rt, &l, slow(1)).await.unwrap();
    let sets = count(&rt, "set_storage_delay");
    let err = inject(&rt, &l, slow(2)).await.unwrap_err();
    assert!(matches!(err, FaultError::AlreadyInjected { .. }), "{err}");
    assert_eq!(count(&rt, "set_storage_delay"), sets);
    assert!(!rt.state().delays.contains_key(&2));
}

#[tokio::test]
async fn throttled_rank_restores_the_limit_it_found_not_the_template() {
    let rt = FakeRuntime::new();
    rt.update(|l| {
        l.cpu_live.insert(1, Millicores(300));
    });
    let (_d, l) = ledger();
    let fault = Fault::ThrottledRank(lab_model::fault::ThrottledRank {
        rank: 1,
        cpu: Millicores(150),
    });
    let done = inject(&rt, &l, fault).await.unwrap();
    assert_eq!(done.entry.before, Before::Cpu { cpu: Millicores(300) });
    assert!(
        done.entry
            .proof
            .as_deref()
            .unwrap()
            .contains("reads 150m while its template says 400m")
    );
    assert_eq!(done.changes[0].note.as_deref(), Some("spec 400m"));
    clear_all(&rt, &l).await.unwrap();
    assert_eq!(rt.state().cpu_live.get(&1), Some(&Millicores(300)));
}

#[tokio::test]
async fn a_throttled_rank_replaced_since_needs_nothing_undone() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let fault = Fault::ThrottledRank(lab_model::fault::ThrottledRank {
        rank: 2,
        cpu: Millicores(150),
    });
    inject(&rt, &l, fault).await.unwrap();
    rt.restart_rank(2).await.unwrap();
    let resizes = count(&rt, "resize_rank");
    let cleared = clear(&rt, &l, "throttled-rank").await.unwrap().unwrap();
    assert_eq!(cleared.phase, FaultPhase::Cleared);
    assert_eq!(count(&rt, "resize_rank"), resizes, "no resize back");
}

#[tokio::test]
async fn unplaceable_rank_is_proven_by_the_pending_rank_and_cleared_to_four() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let done = inject(
        &rt,
        &l,
        Fault::UnplaceableRank(lab_model::fault::UnplaceableRank { ranks: 5 }),
    )
    .await
    .unwrap();
    let proof = done.entry.proof.as_deref().unwrap();
    assert!(
        proof.starts_with("rank-4 Pending (Insufficient gpu); 4 running ranks restarted"),
        "{proof}"
    );
    assert_eq!((rt.state().ranks, rt.state().world_size), (5, 5));
    assert_eq!(done.changes.len(), 2);
    clear_all(&rt, &l).await.unwrap();
    assert_eq!((rt.state().ranks, rt.state().world_size), (4, 4));
}

#[tokio::test]
async fn a_clear_that_fails_keeps_the_fault_on_record_until_it_succeeds() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    inject(&rt, &l, slow(1)).await.unwrap();
    rt.fail("set_storage_delay");
    let err = clear_all(&rt, &l).await.unwrap_err();
    assert!(matches!(err, FaultError::NotRestored { .. }), "{err}");
    assert_eq!(l.read().unwrap().active().count(), 1, "still active");
    rt.heal("set_storage_delay");
    assert_eq!(clear_all(&rt, &l).await.unwrap().len(), 1);
    assert!(rt.state().delays.is_empty());
}

#[test]
fn a_delay_on_record_reads_back_as_it_was() {
    let d = Delay {
        delay: Duration::from_millis(300),
        jitter: Duration::from_millis(20),
    };
    let b = Before::Delay { delay: Some(d) };
    let json = serde_json::to_string(&b).unwrap();
    assert_eq!(serde_json::from_str::<Before>(&json).unwrap(), b);
}

#[tokio::test]
async fn stuck_rollout_is_proven_by_the_pending_rank_holding_back_the_old_configuration() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let done = inject(
        &rt,
        &l,
        Fault::StuckRollout(lab_model::fault::StuckRollout { ranks: 5 }),
    )
    .await
    .unwrap();
    let proof = done.entry.proof.as_deref().unwrap();
    assert!(
        proof.contains("rank-4 Pending") && proof.contains("still train with world size 4"),
        "{proof}"
    );
    let s = rt.state();
    assert_eq!((s.ranks, s.world_size, s.running_world_size), (5, 5, Some(4)));
    assert!(
        rt.calls().contains(&"rollout_ranks(5 5)".to_string()),
        "{:?}",
        rt.calls()
    );
    assert_eq!(
        count(&rt, "set_world_size"),
        0,
        "a rolling change, not a restart of every rank"
    );
    assert_eq!(done.changes.len(), 2);
    assert!(
        done.changes
            .iter()
            .all(|c| c.fault_id.as_deref() == Some("stuck-rollout-1"))
    );

    clear_all(&rt, &l).await.unwrap();
    let s = rt.state();
    assert_eq!((s.ranks, s.world_size, s.running_world_size), (4, 4, None));
    assert!(rt.calls().contains(&"rollout_ranks(4 4)".to_string()));
}

#[tokio::test]
async fn stuck_rollout_after_the_trap_is_cleared_back_to_four_expecting_four() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    inject(
        &rt,
        &l,
        Fault::StuckRollout(lab_model::fault::StuckRollout { ranks: 5 }),
    )
    .await
    .unwrap();
    // The seed agent's first fix: the rollout goes on, every rank now expects five peers.
    rt.scale_ranks(4).await.unwrap();
    assert_eq!(rt.state().running_world_size, None);
    assert_eq!(rt.state().world_size, 5);
    let cleared = clear(&rt, &l, "stuck-rollout").await.unwrap().unwrap();
    assert_eq!(cleared.phase, FaultPhase::Cleared);
    assert_eq!((rt.state().ranks, rt.state().world_size), (4, 4));
}

#[tokio::test]
async fn a_stuck_rollout_that_does_not_fit_changes_nothing() {
    let (d, l) = ledger();
    let rt = FakeRuntime::new();
    let files = |d: &tempfile::TempDir| -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap_or_default(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = files(&d);
    for (ranks, why) in [
        (4, "not above the current 4 ranks"),
        (0, "--ranks must be between 1 and"),
    ] {
        let err = inject(
            &rt,
            &l,
            Fault::StuckRollout(lab_model::fault::StuckRollout { ranks }),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
    }
    rt.update(|lab| lab.gpus = 8);
    let err = inject(
        &rt,
        &l,
        Fault::StuckRollout(lab_model::fault::StuckRollout { ranks: 5 }),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("fits on the node's 8 GPUs"), "{err}");
    rt.update(|lab| {
        lab.gpus = 4;
        lab.world_size = 3;
    });
    let err = inject(
        &rt,
        &l,
        Fault::StuckRollout(lab_model::fault::StuckRollout { ranks: 5 }),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("expects 3 peers with 4 ranks"), "{err}");
    assert_eq!(files(&d), before, "the ledger is byte-identical");
    assert_eq!(count(&rt, "rollout_ranks"), 0);
}
