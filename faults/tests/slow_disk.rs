//! slow-disk and `lab storage drain` against the fake runtime: the fault's apply, proof and clear, and
//! the drain's moves and refusals (each refusal leaves the ledger and the drain record as they were).

use lab_faults::drain::{drain, drained_since, undrain};
use lab_faults::ledger::Before;
use lab_faults::{Fault, FaultPhase, Ledger, clear, inject};
use lab_model::Millicores;
use lab_runtime::Lab;
use lab_runtime::testing::FakeRuntime;

fn ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::in_dir(dir.path());
    (dir, l)
}

fn files(l: &Ledger) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    (
        std::fs::read(l.dir().join("ledger.json")).ok(),
        std::fs::read(l.dir().join("drains.json")).ok(),
    )
}

#[tokio::test]
async fn slow_disk_limits_the_servers_own_cpu_proves_it_by_its_own_latency_and_clears() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let f = Fault::SlowDisk(lab_model::fault::SlowDisk {
        server: 1,
        cpu: Millicores(6),
    });
    let done = inject(&rt, &l, f).await.unwrap();
    assert_eq!(done.entry.phase, FaultPhase::Injected);
    assert_eq!(done.entry.before, Before::StorageCpu { cpu: None });
    assert_eq!(rt.state().storage_cpu.get(&1), Some(&Millicores(6)));
    let proof = done.entry.proof.as_deref().unwrap();
    assert!(proof.contains("bypassing the path"), "{proof}");
    // The path the ranks use was not touched.
    assert!(rt.state().delays.is_empty());
    clear(&rt, &l, &done.entry.id).await.unwrap();
    assert!(rt.state().storage_cpu.is_empty());
}

#[tokio::test]
async fn slow_disk_on_a_server_that_does_not_exist_changes_nothing() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let before = files(&l);
    let err = inject(
        &rt,
        &l,
        Fault::SlowDisk(lab_model::fault::SlowDisk {
            server: 7,
            cpu: Millicores(6),
        }),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    assert_eq!(files(&l), before);
    assert!(rt.state().storage_cpu.is_empty());
}

#[tokio::test]
async fn slow_disk_passes_its_check_on_kubernetes_where_the_volume_container_is_resized() {
    let rt = FakeRuntime::new();
    let mut status = rt.status().await.unwrap();
    let f = Fault::SlowDisk(lab_model::fault::SlowDisk {
        server: 1,
        cpu: Millicores(10),
    });
    for kind in [
        lab_model::status::RuntimeKind::Kind,
        lab_model::status::RuntimeKind::Cluster,
    ] {
        status.runtime = kind;
        lab_faults::kinds::injector(&f).check(&status).unwrap();
    }
    // An unknown server is still refused there.
    let bad = Fault::SlowDisk(lab_model::fault::SlowDisk {
        server: 7,
        cpu: Millicores(10),
    });
    assert!(lab_faults::kinds::injector(&bad).check(&status).is_err());
}

#[tokio::test]
async fn drain_moves_every_volume_to_the_least_loaded_healthy_server_and_undrain_brings_them_back() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    let r = drain(&rt, &l, 1).await.unwrap();
    assert_eq!(r.moved, vec![(3, 1, 0), (4, 1, 2)]);
    assert!(rt.state().volumes[&1].is_empty());
    assert!(
        r.change.line().contains("storage-1 volumes 3, 4 → none"),
        "{}",
        r.change.line()
    );
    let again = drain(&rt, &l, 1).await.unwrap_err();
    assert!(again.to_string().contains("already drained"), "{again}");
    // What a drill that began before the drain moves back in its cleanup; one that began after, nothing.
    assert_eq!(drained_since(&l, r.change.at_ms).unwrap(), [1]);
    assert!(drained_since(&l, r.change.at_ms + 1).unwrap().is_empty());
    let back = undrain(&rt, &l, 1).await.unwrap();
    assert!(
        drained_since(&l, 0).unwrap().is_empty(),
        "undrained: nothing left to move back"
    );
    assert_eq!(back.moved, vec![(3, 0, 1), (4, 2, 1)]);
    assert_eq!(rt.state().volumes[&1], vec![3, 4]);
    assert!(
        undrain(&rt, &l, 1)
            .await
            .unwrap_err()
            .to_string()
            .contains("not drained")
    );
}

#[tokio::test]
async fn drain_refuses_unknown_and_last_healthy_servers_and_changes_nothing() {
    let rt = FakeRuntime::new();
    let (_d, l) = ledger();
    drain(&rt, &l, 0).await.unwrap();
    drain(&rt, &l, 1).await.unwrap();
    let before = files(&l);
    let calls = rt.calls().len();
    for (server, want) in [(2, "last healthy"), (9, "does not exist")] {
        let e = drain(&rt, &l, server).await.unwrap_err();
        assert!(e.to_string().contains(want), "{server}: {e}");
        assert_eq!(files(&l), before, "storage-{server}");
    }
    // Only the status was read: no volume was listed or moved.
    assert!(
        rt.calls()[calls..].iter().all(|c| c.starts_with("status(")),
        "{:?}",
        &rt.calls()[calls..]
    );
}
