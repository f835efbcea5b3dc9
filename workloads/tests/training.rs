//! Seeds a real SeaweedFS and trains four real ranks on it: the loss falls, every rank holds the same
//! model after every all-reduce, each rank's reads come from (and are labelled with) the server holding
//! its shards, through that server's public URL, and every row read was checksum-verified.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use lab_model::metrics as m;

const STEPS: u64 = 200;
const BATCH: u32 = 64;

#[test]
fn four_ranks_train_on_seeded_seaweedfs() {
    let weed = Weed::start();
    let seeded = weed.seed(&[
        "--ranks",
        "4",
        "--seed",
        "7",
        "--samples-per-shard",
        "1024",
        "--shards-per-rank",
        "2",
    ]);
    assert_eq!(seeded["action"], "created", "{seeded}");
    let placement: BTreeMap<String, String> = serde_json::from_value(seeded["placement"].clone()).unwrap();
    for r in 0..4u32 {
        assert_eq!(
            placement[&r.to_string()],
            format!("storage-{}", r % 3),
            "default placement r mod 3"
        );
    }
    // Seeding again with the same parameters verifies and reuses.
    let again = weed.seed(&[
        "--ranks",
        "4",
        "--seed",
        "7",
        "--samples-per-shard",
        "1024",
        "--shards-per-rank",
        "2",
    ]);
    assert_eq!(again["action"], "reused", "{again}");

    let rendezvous = format!("127.0.0.1:{}", free_port());
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let extra = [
        "--max-steps",
        &STEPS.to_string(),
        "--batch-size",
        &BATCH.to_string(),
        "--model-size",
        "4096",
        "--checkpoint-every",
        "50",
        "--log-every",
        "50",
        "--watchdog-timeout",
        "60s",
    ];
    let mut ranks: Vec<Proc> = (0..4u32)
        .map(|r| {
            spawn_rank(
                &weed,
                &format!("rank-{r}"),
                &rank_args(&weed, &rendezvous, r, 4, ports[r as usize], &extra),
            )
        })
        .collect();

    // While they train: readiness, the metrics of each rank, and the model checksums of ranks caught at
    // the same step. Each round scrapes the four ranks back to back; a synchronous job keeps them within a
    // step of each other, so most rounds find pairs at the same step. The wait ends only when such pairs
    // were compared, so the comparison cannot silently run zero times.
    const SAME_STEP_PAIRS: u32 = 3;
    let mut scraped = vec![String::new(); 4];
    let mut same_step_checks = 0;
    wait_until(
        Duration::from_secs(60),
        "every rank past step 20 on /metrics, and model checksums compared at the same step",
        || {
            let round: Vec<String> = ports
                .iter()
                .map(|port| http_get(&format!("127.0.0.1:{port}"), "/metrics").unwrap_or_default())
                .collect();
            for (r, text) in round.iter().enumerate() {
                if metric(text, m::STEP, &[]).unwrap_or(0.0) >= 20.0 && scraped[r].is_empty() {
                    let ready = http_get(&format!("127.0.0.1:{}", ports[r]), "/readyz");
                    assert!(ready.is_some(), "rank {r} /readyz");
                    scraped[r] = text.clone();
                }
            }
            // Ranks seen at the same step must show the same model checksum.
            for a in 0..4 {
                for b in a + 1..4 {
                    let (sa, sb) = (metric(&round[a], m::STEP, &[]), metric(&round[b], m::STEP, &[]));
                    if sa.is_some() && sa == sb {
                        same_step_checks += 1;
                        assert_eq!(
                            metric(&round[a], m::MODEL_CHECKSUM, &[]),
                            metric(&round[b], m::MODEL_CHECKSUM, &[]),
                            "ranks {a} and {b} at step {sa:?} hold different models"
                        );
                    }
                }
            }
            scraped.iter().all(|t| !t.is_empty()) && same_step_checks >= SAME_STEP_PAIRS
        },
    );
    assert!(same_step_checks >= SAME_STEP_PAIRS);

    let mut summaries = Vec::new();
    for (r, p) in ranks.iter_mut().enumerate() {
        let status = p
            .wait_timeout(Duration::from_secs(90))
            .unwrap_or_else(|| panic!("rank {r} still running"));
        assert!(
            status.success(),
            "rank {r} exited {status}:\n{}\n{}",
            tail(&p.stderr_text(), 20),
            weed.logs()
        );
        let summary: serde_json::Value = serde_json::from_str(p.stdout_text().trim()).unwrap();
        summaries.push(summary);
    }

    for (r, s) in summaries.iter().enumerate() {
        // Every step's all-reduce compared the neighbours' model checksums in its header (a difference
        // stops the rank), and all ranks end on the same model.
        assert_eq!(s["final_step"], STEPS, "rank {r}");
        assert_eq!(
            s["model_crc"], summaries[0]["model_crc"],
            "rank {r} ends with another model"
        );
        let (early, late) = (
            s["early_mean_loss"].as_f64().unwrap(),
            s["late_mean_loss"].as_f64().unwrap(),
        );
        assert!(
            late < 0.6 * early,
            "rank {r}: loss fell only from {early} to {late}"
        );
        assert_eq!(
            s["rows_verified"],
            STEPS * u64::from(BATCH),
            "rank {r} verified every row it read"
        );
        assert_eq!(s["server"], format!("storage-{}", r % 3));
    }

    for (r, text) in scraped.iter().enumerate() {
        let home = format!("storage-{}", r % 3);
        let read_from: Vec<(String, f64)> = series(text, m::STORAGE_READ_BYTES)
            .into_iter()
            .filter(|(_, v)| *v > 0.0)
            .collect();
        assert_eq!(read_from.len(), 1, "rank {r} read from {read_from:?}");
        assert!(
            read_from[0].0.contains(&format!("server=\"{home}\"")),
            "rank {r} read from {read_from:?}"
        );
        assert!(
            metric(text, m::STORAGE_CHECKSUMS_VERIFIED, &[("server", &home)]).unwrap()
                >= 20.0 * f64::from(BATCH)
        );
        let reads = series(text, &format!("{}_count", m::STORAGE_READ_DURATION));
        assert_eq!(reads.len(), 1, "{reads:?}");
        assert!(reads[0].0.contains(&home));
        assert_eq!(
            metric(
                text,
                m::RANK_INFO,
                &[("rank", &r.to_string()), ("world_size", "4"), ("server", &home)]
            ),
            Some(1.0)
        );
        assert_eq!(metric(text, m::WORLD_SIZE, &[]), Some(4.0));
        assert_eq!(metric(text, m::PEERS_CONNECTED, &[]), Some(4.0));
        assert_eq!(metric(text, m::RENDEZVOUS_WAITING, &[]), Some(0.0));
        for kind in ["connect", "http", "timeout", "checksum"] {
            assert_eq!(
                metric(text, m::STORAGE_READ_ERRORS, &[("server", &home), ("kind", kind)]),
                Some(0.0)
            );
        }
        for phase in ["read", "compute", "wait", "transfer"] {
            assert!(
                metric(text, m::PHASE_SECONDS, &[("phase", phase)]).unwrap() > 0.0,
                "rank {r} phase {phase}"
            );
        }
    }
    // Reads went to each server's public URL (the forwarder), as the master reports it.
    for (i, proxy) in weed.proxies.iter().enumerate() {
        assert!(
            proxy.bytes() > 0,
            "nothing was read through storage-{i}'s public URL"
        );
    }
    // Rank 0 checkpointed at step 200, and the log names the phases.
    let log0 = ranks[0].stderr_text();
    assert!(log0.contains("rank 0: checkpoint at step 200 written"), "{log0}");
    assert!(log0.contains("rank 0: step 200 loss "), "{log0}");

    // Rewriting a needle with the bytes it already holds is answered 204, which is a success.
    let mut storage = lab_workloads::storage::Storage::new(&weed.master, Duration::from_secs(5));
    let vid = storage
        .meta_volume("lab-train")
        .unwrap()
        .expect("the meta volume exists");
    let fid = lab_workloads::storage::fixed_fid(vid, 0x77);
    storage.write(&fid, b"same bytes").unwrap();
    storage.write(&fid, b"same bytes").unwrap();
    let mut body = Vec::new();
    assert!(storage.read(&fid, None, &mut body).unwrap().is_some());
    assert_eq!(body, b"same bytes");
    storage.delete(&fid).unwrap();
    assert!(storage.read(&fid, None, &mut body).unwrap().is_none());

    // Seeding with --fresh rewrites the data and clears the job's checkpoint.
    let fresh = weed.seed(&[
        "--ranks",
        "4",
        "--seed",
        "7",
        "--samples-per-shard",
        "1024",
        "--shards-per-rank",
        "2",
        "--fresh",
    ]);
    assert_eq!(fresh["action"], "overwritten", "{fresh}");
    let mut store =
        lab_workloads::checkpoint::JobStore::new(&weed.master, "lab-train", Duration::from_secs(5));
    assert!(
        store.load_checkpoint().unwrap().is_none(),
        "the checkpoint survived a fresh seed"
    );
    assert!(store.load_progress().unwrap().is_none());
}
