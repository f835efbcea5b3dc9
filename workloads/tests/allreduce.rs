//! The all-reduce's algorithms over real loopback TCP, each rank on its own thread: every algorithm against
//! a reference sum for worlds 1..9 and lengths that are odd, below the world size or not divisible by it;
//! bit-identical results on every rank with rounding; the switch by size; and the errors a rank reports
//! (another step, another model, a silent or a dead peer).

use std::net::TcpListener;
use std::time::{Duration, Instant};

use lab_workloads::allreduce::{
    Algorithm, HALVING_DOUBLING_MAX_BYTES, RECURSIVE_DOUBLING_MAX_BYTES, Ring, RingOptions, RingSpec,
    connect_ring, segments,
};

/// Builds a real ring of `world` ranks over loopback TCP, each rank on its own thread, and runs `f`.
fn with_ring<T: Send + 'static>(world: u32, f: impl Fn(Ring) -> T + Send + Sync + Copy + 'static) -> Vec<T> {
    let listeners: Vec<TcpListener> = (0..world)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let peers: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(r, l)| {
            let peers = peers.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(20);
                let spec = RingSpec {
                    rank: r as u32,
                    world,
                    peers: &peers,
                    generation: 77,
                    deadline,
                    opts: RingOptions::default(),
                };
                let ring = connect_ring(&spec, &l, &|w| panic!("unexpected rejection: {w}")).unwrap();
                f(ring)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn input(rank: usize, len: usize, round: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((rank * 7919 + i * 31 + round * 13) % 1000) as f32 - 500.0)
        .collect()
}

#[test]
fn segments_cover_any_length() {
    for len in 0..20 {
        for world in 1..9 {
            let s = segments(len, world);
            assert_eq!(s.len(), world);
            assert_eq!(s[0].start, 0);
            assert_eq!(s[world - 1].end, len);
            assert!(s.windows(2).all(|w| w[0].end == w[1].start));
            let (lo, hi) = (
                s.iter().map(|r| r.len()).min().unwrap(),
                s.iter().map(|r| r.len()).max().unwrap(),
            );
            assert!(hi - lo <= 1);
        }
    }
}

/// The exact elementwise sums of `input` over `world` ranks.
fn sums(world: usize, len: usize, round: usize) -> Vec<f32> {
    let inputs: Vec<Vec<f32>> = (0..world).map(|r| input(r, len, round)).collect();
    (0..len).map(|i| inputs.iter().map(|v| v[i]).sum()).collect()
}

#[test]
fn every_algorithm_is_the_elementwise_sum_for_worlds_1_to_9() {
    for world in 1..=9u32 {
        // Lengths below the world size, not divisible by it, and large enough to pipeline.
        let lengths = [0usize, 1, world as usize - 1, 7 * world as usize + 3, 100_003];
        let results = with_ring(world, move |mut ring| {
            let mut out = Vec::new();
            let mut seq = 0;
            for alg in Algorithm::ALL {
                for (round, &len) in lengths.iter().enumerate() {
                    let mut v = input(ring.rank() as usize, len, round);
                    ring.allreduce_with(alg, &mut v, seq, 5, Duration::from_secs(30))
                        .unwrap();
                    seq += 1;
                    out.push((alg, len, v));
                }
            }
            out
        });
        for (i, (alg, len, _)) in results[0].iter().enumerate() {
            let round = i % lengths.len();
            let want = sums(world as usize, *len, round);
            for (r, got) in results.iter().enumerate() {
                assert_eq!(got[i].2, want, "world {world}, {alg:?}, length {len}, rank {r}");
            }
        }
    }
}

#[test]
fn the_algorithm_switches_by_size() {
    let rd = RECURSIVE_DOUBLING_MAX_BYTES / 4;
    let hd = HALVING_DOUBLING_MAX_BYTES / 4;
    assert_eq!(Algorithm::for_len(0), Algorithm::RecursiveDoubling);
    assert_eq!(
        Algorithm::for_len(8192),
        Algorithm::RecursiveDoubling,
        "the job's 32 KiB"
    );
    assert_eq!(Algorithm::for_len(rd), Algorithm::RecursiveDoubling);
    assert_eq!(Algorithm::for_len(rd + 1), Algorithm::HalvingDoubling);
    assert_eq!(Algorithm::for_len(hd), Algorithm::HalvingDoubling);
    assert_eq!(Algorithm::for_len(hd + 1), Algorithm::Ring);
    for a in Algorithm::ALL {
        assert_eq!(Algorithm::from_name(a.name()), Some(a));
    }
}

#[test]
fn sums_are_right_on_both_sides_of_each_switch() {
    let rd = RECURSIVE_DOUBLING_MAX_BYTES / 4;
    let hd = HALVING_DOUBLING_MAX_BYTES / 4;
    for world in [2u32, 3, 4, 7, 9] {
        let lengths = [rd, rd + 1, hd, hd + 1];
        let results = with_ring(world, move |mut ring| {
            lengths
                .iter()
                .enumerate()
                .map(|(round, &len)| {
                    let mut v = input(ring.rank() as usize, len, round);
                    ring.allreduce(&mut v, round as u64, 0, Duration::from_secs(60))
                        .unwrap();
                    v
                })
                .collect::<Vec<_>>()
        });
        for (round, &len) in lengths.iter().enumerate() {
            let want = sums(world as usize, len, round);
            for (r, got) in results.iter().enumerate() {
                assert!(got[round] == want, "world {world}, length {len}, rank {r}");
            }
        }
    }
}

#[test]
fn ranks_hold_identical_bits_with_rounding() {
    for world in 2..=9u32 {
        let results = with_ring(world, |mut ring| {
            Algorithm::ALL
                .iter()
                .map(|&alg| {
                    let mut v: Vec<f32> = (0..10_007)
                        .map(|i| ((i as f32) * 0.1 + ring.rank() as f32).sin() / 3.0)
                        .collect();
                    ring.allreduce_with(alg, &mut v, 9, 0, Duration::from_secs(20))
                        .unwrap();
                    v
                })
                .collect::<Vec<_>>()
        });
        for (a, alg) in Algorithm::ALL.iter().enumerate() {
            for (r, got) in results.iter().enumerate() {
                assert!(
                    got[a]
                        .iter()
                        .zip(&results[0][a])
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "world {world}, {alg:?}: rank {r} holds other bits than rank 0"
                );
            }
            let want: f64 = (0..world)
                .map(|r| f64::from(((1000.0f32 * 0.1) + r as f32).sin() / 3.0))
                .sum();
            assert!((f64::from(results[0][a][1000]) - want).abs() < 1e-5, "{alg:?}");
        }
    }
}

#[test]
fn disagreements_are_reported_not_summed() {
    // Rank 1 runs one step ahead: around the ring, its successor must say so.
    let results = with_ring(3, |mut ring| {
        let seq = if ring.rank() == 1 { 6 } else { 5 };
        let mut v = vec![1.0; 10];
        ring.allreduce_with(Algorithm::Ring, &mut v, seq, 0, Duration::from_secs(5))
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    assert!(
        results[2]
            .as_ref()
            .unwrap_err()
            .contains("rank 1 is at step 6 while this rank is at step 5")
    );
    // With recursive doubling rank 1 first hears from rank 0 (their pair's hand-over).
    for alg in [Algorithm::RecursiveDoubling, Algorithm::HalvingDoubling] {
        let results = with_ring(3, move |mut ring| {
            let seq = if ring.rank() == 1 { 6 } else { 5 };
            let mut v = vec![1.0; 10];
            ring.allreduce_with(alg, &mut v, seq, 0, Duration::from_secs(5))
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        let e = results[1].as_ref().unwrap_err();
        assert!(
            e.contains("rank 0 is at step 5 while this rank is at step 6"),
            "{alg:?}: {e}"
        );
    }
    // Models that diverged.
    let results = with_ring(2, |mut ring| {
        let mut v = vec![1.0; 4];
        ring.allreduce(&mut v, 1, ring.rank(), Duration::from_secs(5))
            .map_err(|e| e.to_string())
    });
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().unwrap_err().contains("models diverged"))
    );
}

#[test]
fn a_silent_peer_trips_the_watchdog_and_a_dead_one_is_named() {
    let results = with_ring(3, |mut ring| {
        if ring.rank() == 2 {
            std::thread::sleep(Duration::from_millis(1500));
            return String::new();
        }
        let mut v = vec![1.0; 1000];
        ring.allreduce_with(Algorithm::Ring, &mut v, 311, 0, Duration::from_millis(500))
            .unwrap_err()
            .to_string()
    });
    // Around the ring, rank 0 receives from rank 2, which never sends.
    assert!(results[0].starts_with("watchdog: waited "), "{}", results[0]);
    assert!(
        results[0].ends_with(" s at all-reduce step 311 for rank 2"),
        "{}",
        results[0]
    );
    // Recursive doubling in a world of 3: rank 1 stands in for the pair (0, 1) and swaps with rank 2.
    let results = with_ring(3, |mut ring| {
        if ring.rank() == 2 {
            std::thread::sleep(Duration::from_millis(1500));
            return String::new();
        }
        let mut v = vec![1.0; 1000];
        ring.allreduce_with(
            Algorithm::RecursiveDoubling,
            &mut v,
            312,
            0,
            Duration::from_millis(500),
        )
        .unwrap_err()
        .to_string()
    });
    assert!(
        results[1].ends_with(" s at all-reduce step 312 for rank 2"),
        "{}",
        results[1]
    );
    let results = with_ring(2, |mut ring| {
        if ring.rank() == 1 {
            return String::new(); // drops its connections
        }
        let mut v = vec![1.0; 1000];
        ring.allreduce(&mut v, 3, 0, Duration::from_secs(5))
            .unwrap_err()
            .to_string()
    });
    assert!(
        results[0].contains("rank 1 closed the connection at all-reduce step 3"),
        "{}",
        results[0]
    );
}

/// A small deterministic generator, so a failing case can be replayed from its seed.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn every_algorithm_sums_random_odd_lengths_exactly_for_worlds_1_to_8() {
    for world in 1..=8u32 {
        let mut g = Lcg(u64::from(world) * 7919);
        // Odd lengths from tiny to past the ring's chunk, and whole-number values (exact sums, so any
        // order of addition must give the reference's bits).
        let cases: [(usize, u64); 6] = std::array::from_fn(|_| ((g.next() % 70_000) as usize | 1, g.next()));
        let value = |seed: u64, rank: usize, i: usize| {
            ((seed ^ (rank as u64 * 0x9e37_79b9) ^ (i as u64 * 0x85eb_ca6b)) % 2001) as f32 - 1000.0
        };
        let cases_in = cases;
        let results = with_ring(world, move |mut ring| {
            let mut out = Vec::new();
            let mut seq = 0;
            for alg in Algorithm::ALL {
                for &(len, seed) in &cases_in {
                    let mut v: Vec<f32> = (0..len).map(|i| value(seed, ring.rank() as usize, i)).collect();
                    ring.allreduce_with(alg, &mut v, seq, 3, Duration::from_secs(60))
                        .unwrap();
                    seq += 1;
                    out.push(v);
                }
            }
            out
        });
        for (a, alg) in Algorithm::ALL.iter().enumerate() {
            for (c, &(len, seed)) in cases.iter().enumerate() {
                let want: Vec<f32> = (0..len)
                    .map(|i| (0..world as usize).map(|r| value(seed, r, i)).sum())
                    .collect();
                for (r, got) in results.iter().enumerate() {
                    assert!(
                        got[a * cases.len() + c] == want,
                        "world {world}, {alg:?}, length {len}, seed {seed}: rank {r} differs from the reference sum"
                    );
                }
            }
        }
    }
}
