//! The ring all-reduce: reduce-scatter then all-gather of an `f32` vector over TCP, summing elementwise.
//!
//! Each rank keeps two connections: one to the next rank in the ring (it only sends there) and one from
//! the previous rank (it only receives from there). The vector is cut into `world` segments (their
//! lengths differ by at most one, so any length works); in `world − 1` reduce-scatter steps each rank
//! adds the segment it receives into its own, and in `world − 1` all-gather steps the finished segments
//! travel once around the ring. Every rank ends up with the same bits, because each segment's sum is
//! computed on exactly one rank and then copied.
//!
//! One thread drives both directions with non-blocking sockets and `poll`, and the steps are pipelined:
//! the bytes of step `k + 1` leave as soon as the same bytes of step `k` have arrived (and been added), so
//! a large vector streams through the ring instead of waiting a full segment per hop. Sends go straight
//! from the caller's buffer, all-gather receives land straight in it, and reduce-scatter receives land in
//! one scratch segment: no other copies.
//!
//! Every operation starts with a 24-byte header from the previous rank (magic, step, length, and the
//! sender's model checksum), so a stray client, a rank at another step, a rank with another model size,
//! or a model that diverged between ranks is reported as exactly that, never summed.
//!
//! The time spent blocked in `poll` is the *wait* phase (a peer is not ready: the straggler signal); the
//! rest is *transfer*. An operation that takes longer than the watchdog timeout fails with a
//! [`WorkloadError::Watchdog`] naming the neighbour it was waiting for.
//!
//! Hand-written on purpose: the lab measures this collective's wait and transfer, which a library (MPI,
//! NCCL bindings) would hide and would need a runtime the lab's ranks do not have.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ops::Range;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::error::{Result, WorkloadError};

const OP_MAGIC: u32 = 0x4c41_5231; // "LAR1"
const HELLO_MAGIC: u32 = 0x4c52_4e47; // "LRNG"
const PROTOCOL_VERSION: u32 = 1;
const HEADER_LEN: usize = 24;
const HELLO_LEN: usize = 24;

/// Where one all-reduce spent its time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    /// Blocked waiting for a peer to send or to take data.
    pub wait: Duration,
    /// Moving and adding bytes.
    pub transfer: Duration,
}

/// Socket settings for the ring's connections.
#[derive(Debug, Clone, Copy, Default)]
pub struct RingOptions {
    /// `SO_SNDBUF`/`SO_RCVBUF` in bytes; `None` leaves the kernel's auto-tuning alone.
    pub socket_buffer: Option<usize>,
}

/// This rank's place in the ring and its two connections.
#[derive(Debug)]
pub struct Ring {
    rank: u32,
    world: u32,
    /// To the next rank (send only) and from the previous rank (receive only); `None` when alone.
    links: Option<(TcpStream, TcpStream)>,
    scratch: Vec<f32>,
}

/// The `world` segments a vector of `len` values is cut into: contiguous, in order, lengths differing by
/// at most one.
pub fn segments(len: usize, world: usize) -> Vec<Range<usize>> {
    let world = world.max(1);
    let (base, extra) = (len / world, len % world);
    let mut start = 0;
    (0..world)
        .map(|i| {
            let n = base + usize::from(i < extra);
            let r = start..start + n;
            start += n;
            r
        })
        .collect()
}

impl Ring {
    /// A ring of one: every all-reduce returns the vector unchanged.
    pub fn single() -> Ring {
        Ring {
            rank: 0,
            world: 1,
            links: None,
            scratch: Vec::new(),
        }
    }

    /// A ring from two established connections: `next` to rank `rank + 1`, `prev` from rank `rank − 1`.
    ///
    /// # Errors
    /// When the sockets cannot be switched to non-blocking mode.
    pub fn from_streams(
        rank: u32,
        world: u32,
        next: TcpStream,
        prev: TcpStream,
        opts: RingOptions,
    ) -> Result<Ring> {
        for (s, who) in [(&next, "next"), (&prev, "previous")] {
            let err = |e| {
                WorkloadError::io(
                    format!("ring connection to the {who} rank"),
                    peer_of(s),
                    e,
                    Duration::ZERO,
                )
            };
            s.set_nodelay(true).map_err(err)?;
            s.set_nonblocking(true).map_err(err)?;
            if let Some(n) = opts.socket_buffer {
                let sock = socket2::SockRef::from(s);
                sock.set_send_buffer_size(n).map_err(err)?;
                sock.set_recv_buffer_size(n).map_err(err)?;
            }
        }
        Ok(Ring {
            rank,
            world,
            links: Some((next, prev)),
            scratch: Vec::new(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks in the ring.
    pub fn world(&self) -> u32 {
        self.world
    }

    fn next_rank(&self) -> u32 {
        (self.rank + 1) % self.world
    }

    fn prev_rank(&self) -> u32 {
        (self.rank + self.world - 1) % self.world
    }

    /// Sums `data` elementwise across all ranks, in place. `seq` (the step) and `model_crc` (a checksum
    /// of the sender's model) are checked against the previous rank's; pass the same values on every
    /// rank. Fails when the operation takes longer than `timeout`.
    ///
    /// # Errors
    /// [`WorkloadError::Watchdog`] after `timeout`; [`WorkloadError::PeerClosed`] when a neighbour goes
    /// away; [`WorkloadError::Protocol`] for garbage; [`WorkloadError::Mismatch`] when the previous rank
    /// is at another step, has another length or another model. `data` is unspecified after an error.
    pub fn allreduce(
        &mut self,
        data: &mut [f32],
        seq: u64,
        model_crc: u32,
        timeout: Duration,
    ) -> Result<Stats> {
        let started = Instant::now();
        let deadline = started + timeout;
        let (world, rank) = (self.world as usize, self.rank as usize);
        let (next_rank, prev_rank) = (self.next_rank(), self.prev_rank());
        let Some((next, prev)) = self.links.as_mut() else {
            return Ok(Stats::default());
        };
        let segs = segments(data.len(), world);
        let max_seg = segs.iter().map(|s| s.len()).max().unwrap_or(0);
        if self.scratch.len() < max_seg {
            self.scratch.resize(max_seg, 0.0);
        }
        let scratch = &mut self.scratch;
        let steps = 2 * (world - 1);
        let send_seg = |k: usize| -> Range<usize> {
            let i = if k < world - 1 {
                (rank + world - k) % world
            } else {
                (rank + 1 + world - (k - (world - 1))) % world
            };
            segs[i].clone()
        };
        let recv_seg = |k: usize| -> Range<usize> {
            let i = if k < world - 1 {
                (rank + 2 * world - k - 1) % world
            } else {
                (rank + world - (k - (world - 1))) % world
            };
            segs[i].clone()
        };

        let mut header = [0u8; HEADER_LEN];
        header[0..4].copy_from_slice(&OP_MAGIC.to_le_bytes());
        header[4..12].copy_from_slice(&seq.to_le_bytes());
        header[12..20].copy_from_slice(&(data.len() as u64).to_le_bytes());
        header[20..24].copy_from_slice(&model_crc.to_le_bytes());
        let mut header_in = [0u8; HEADER_LEN];
        let (mut hdr_sent, mut hdr_recv) = (0usize, 0usize);
        let (mut send_step, mut send_off) = (0usize, 0usize); // send_off in bytes of the step's segment
        let (mut recv_step, mut recv_off, mut recv_elems) = (0usize, 0usize, 0usize);
        let mut wait = Duration::ZERO;

        loop {
            while send_step < steps && send_off == send_seg(send_step).len() * 4 {
                send_step += 1;
                send_off = 0;
            }
            while recv_step < steps && recv_off == recv_seg(recv_step).len() * 4 {
                recv_step += 1;
                recv_off = 0;
                recv_elems = 0;
            }
            let send_done = hdr_sent == HEADER_LEN && send_step == steps;
            let recv_done = hdr_recv == HEADER_LEN && recv_step == steps;
            if send_done && recv_done {
                break;
            }
            let mut progressed = false;

            // Send: the header, then whatever of the current step's segment is ready.
            let mut want_write = false;
            if hdr_sent < HEADER_LEN {
                want_write = true;
                match next.write(&header[hdr_sent..]) {
                    Ok(n) => {
                        hdr_sent += n;
                        progressed |= n > 0;
                    }
                    Err(e) => check_write(e, next_rank, seq)?,
                }
            } else if send_step < steps {
                let seg = send_seg(send_step);
                let ready = if send_step == 0 || recv_step >= send_step {
                    seg.len() * 4
                } else if recv_step + 1 == send_step {
                    recv_elems * 4
                } else {
                    0
                };
                if ready > send_off {
                    want_write = true;
                    let bytes: &[u8] = bytemuck::cast_slice(&data[seg.clone()]);
                    match next.write(&bytes[send_off..ready]) {
                        Ok(n) => {
                            send_off += n;
                            progressed |= n > 0;
                        }
                        Err(e) => check_write(e, next_rank, seq)?,
                    }
                }
            }

            // Receive: the header, then the current step's segment (added in, or copied in place).
            if hdr_recv < HEADER_LEN {
                match prev.read(&mut header_in[hdr_recv..]) {
                    Ok(0) => return Err(closed(prev_rank, seq, None)),
                    Ok(n) => {
                        hdr_recv += n;
                        progressed = true;
                        if hdr_recv == HEADER_LEN {
                            check_header(&header_in, seq, data.len(), model_crc, prev_rank, prev)?;
                        }
                    }
                    Err(e) => check_read(e, prev_rank, seq)?,
                }
            } else if recv_step < steps {
                let seg = recv_seg(recv_step);
                let total = seg.len() * 4;
                let reducing = recv_step < world - 1;
                let result = if reducing {
                    let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut scratch[..seg.len()]);
                    prev.read(&mut buf[recv_off..total])
                } else {
                    let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut data[seg.clone()]);
                    prev.read(&mut buf[recv_off..total])
                };
                match result {
                    Ok(0) => return Err(closed(prev_rank, seq, None)),
                    Ok(n) => {
                        recv_off += n;
                        progressed = true;
                        let complete = recv_off / 4;
                        if reducing {
                            let dst = &mut data[seg.start + recv_elems..seg.start + complete];
                            for (d, s) in dst.iter_mut().zip(&scratch[recv_elems..complete]) {
                                *d += *s;
                            }
                        }
                        recv_elems = complete;
                    }
                    Err(e) => check_read(e, prev_rank, seq)?,
                }
            }

            if progressed {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                let waiting_for = if !recv_done { prev_rank } else { next_rank };
                return Err(WorkloadError::Watchdog {
                    detail: format!(
                        "waited {:.0} s at all-reduce step {seq} for rank {waiting_for}",
                        now.duration_since(started).as_secs_f64()
                    ),
                });
            }
            let ms = (deadline - now).as_millis().clamp(1, 1000) as u16;
            let mut fds = Vec::with_capacity(2);
            if want_write {
                fds.push(PollFd::new(next.as_fd(), PollFlags::POLLOUT));
            }
            if !recv_done {
                fds.push(PollFd::new(prev.as_fd(), PollFlags::POLLIN));
            }
            let t = Instant::now();
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    return Err(WorkloadError::io(
                        "ring poll",
                        peer_of(prev),
                        io::Error::from(e),
                        Duration::ZERO,
                    ));
                }
            }
            wait += t.elapsed();
        }
        let total = started.elapsed();
        Ok(Stats {
            wait,
            transfer: total.saturating_sub(wait),
        })
    }
}

fn check_header(
    h: &[u8; HEADER_LEN],
    seq: u64,
    len: usize,
    crc: u32,
    prev: u32,
    s: &TcpStream,
) -> Result<()> {
    let magic = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
    if magic != OP_MAGIC {
        return Err(WorkloadError::protocol(
            format!("rank {prev}"),
            peer_of(s),
            format!(
                "not an all-reduce header at step {seq} (first bytes {:02x?})",
                &h[..8]
            ),
        ));
    }
    let their_seq = u64::from_le_bytes(h[4..12].try_into().expect("8 bytes"));
    let their_len = u64::from_le_bytes(h[12..20].try_into().expect("8 bytes"));
    let their_crc = u32::from_le_bytes(h[20..24].try_into().expect("4 bytes"));
    if their_seq != seq {
        return Err(WorkloadError::Mismatch {
            detail: format!("rank {prev} is at step {their_seq} while this rank is at step {seq}"),
        });
    }
    if their_len != len as u64 {
        return Err(WorkloadError::Mismatch {
            detail: format!(
                "rank {prev} all-reduces {their_len} values, this rank {len}: give every rank the same --model-size"
            ),
        });
    }
    if their_crc != crc {
        return Err(WorkloadError::Mismatch {
            detail: format!(
                "models diverged: at step {seq} rank {prev}'s model checksum is {their_crc:08x}, this rank's {crc:08x}"
            ),
        });
    }
    Ok(())
}

fn check_write(e: io::Error, peer: u32, seq: u64) -> Result<()> {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(()),
        _ => Err(closed(peer, seq, Some(e))),
    }
}

fn check_read(e: io::Error, peer: u32, seq: u64) -> Result<()> {
    check_write(e, peer, seq)
}

fn closed(peer: u32, seq: u64, source: Option<io::Error>) -> WorkloadError {
    WorkloadError::PeerClosed {
        peer,
        during: format!("all-reduce step {seq}"),
        source,
    }
}

fn peer_of(s: &TcpStream) -> String {
    s.peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Who this rank is in the ring it is about to build.
#[derive(Debug, Clone)]
pub struct RingSpec<'a> {
    pub rank: u32,
    pub world: u32,
    /// Every rank's ring address, by rank.
    pub peers: &'a [String],
    /// Chosen at rendezvous, so that a connection from an earlier incarnation of the job is refused.
    pub generation: u64,
    /// When to give up.
    pub deadline: Instant,
    pub opts: RingOptions,
}

/// Builds this rank's ring: connects to rank `rank + 1` at `peers[rank + 1]` and accepts the connection
/// of rank `rank − 1` on `listener`, both identified by the spec's generation. `rejected` is told about
/// every connection refused on the way (garbage, another job, another rank).
///
/// # Errors
/// [`WorkloadError::Watchdog`] when the ring is not complete by the deadline; [`WorkloadError::Invalid`]
/// when `peers` does not have `world` entries.
pub fn connect_ring(spec: &RingSpec<'_>, listener: &TcpListener, rejected: &dyn Fn(&str)) -> Result<Ring> {
    let RingSpec {
        rank,
        world,
        peers,
        generation,
        deadline,
        opts,
    } = *spec;
    if world <= 1 {
        return Ok(Ring::single());
    }
    if peers.len() != world as usize {
        return Err(WorkloadError::invalid(
            "ring peers",
            format!("{} addresses for world size {world}", peers.len()),
        ));
    }
    let next_rank = (rank + 1) % world;
    let prev_rank = (rank + world - 1) % world;
    let next_addr = &peers[next_rank as usize];
    let mut hello = [0u8; HELLO_LEN];
    hello[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
    hello[4..8].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    hello[8..16].copy_from_slice(&generation.to_le_bytes());
    hello[16..20].copy_from_slice(&rank.to_le_bytes());
    hello[20..24].copy_from_slice(&world.to_le_bytes());
    listener
        .set_nonblocking(true)
        .map_err(|e| WorkloadError::io("ring listener", "local", e, Duration::ZERO))?;
    let (mut next, mut prev): (Option<TcpStream>, Option<TcpStream>) = (None, None);
    let mut last_connect_error = String::new();
    while next.is_none() || prev.is_none() {
        if Instant::now() >= deadline {
            let missing = match (&next, &prev) {
                (None, None) => {
                    format!("rank {next_rank} at {next_addr} ({last_connect_error}) and rank {prev_rank}")
                }
                (None, _) => format!("rank {next_rank} at {next_addr} ({last_connect_error})"),
                _ => format!("rank {prev_rank} to connect"),
            };
            return Err(WorkloadError::Watchdog {
                detail: format!("ring setup timed out waiting for {missing}"),
            });
        }
        let mut idle = true;
        if next.is_none() {
            match crate::http::connect(next_addr, &format!("rank {next_rank}"), Duration::from_secs(1)) {
                Ok(mut s) => {
                    idle = false;
                    if s.write_all(&hello).is_ok() {
                        next = Some(s);
                    }
                }
                Err(e) => last_connect_error = lab_model::format::error_chain(&e),
            }
        }
        if prev.is_none() {
            match listener.accept() {
                Ok((mut s, addr)) => {
                    idle = false;
                    match read_hello(&mut s, generation, world, prev_rank) {
                        Ok(()) => prev = Some(s),
                        Err(why) => rejected(&format!("ring connection from {addr} refused: {why}")),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => rejected(&format!("ring accept failed: {e}")),
            }
        }
        if idle {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let (Some(next), Some(prev)) = (next, prev) else {
        unreachable!("loop ends when both are set")
    };
    Ring::from_streams(rank, world, next, prev, opts)
}

fn read_hello(
    s: &mut TcpStream,
    generation: u64,
    world: u32,
    want_rank: u32,
) -> std::result::Result<(), String> {
    s.set_nonblocking(false).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    let mut h = [0u8; HELLO_LEN];
    s.read_exact(&mut h)
        .map_err(|e| format!("no hello within 2 s ({e})"))?;
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    if u32_at(0) != HELLO_MAGIC || u32_at(4) != PROTOCOL_VERSION {
        return Err(format!("not a lab ring hello (first bytes {:02x?})", &h[..8]));
    }
    let their_gen = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
    if their_gen != generation {
        return Err(format!(
            "generation {their_gen:x}, this job is {generation:x} (an earlier incarnation?)"
        ));
    }
    if u32_at(20) != world {
        return Err(format!("world size {}, this rank has {world}", u32_at(20)));
    }
    if u32_at(16) != want_rank {
        return Err(format!("rank {}, expected rank {want_rank}", u32_at(16)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Builds a real ring of `world` ranks over loopback TCP, each rank on its own thread, and runs `f`.
    fn with_ring<T: Send + 'static>(
        world: u32,
        f: impl Fn(Ring) -> T + Send + Sync + Copy + 'static,
    ) -> Vec<T> {
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

    #[test]
    fn allreduce_is_the_elementwise_sum_for_worlds_1_to_8() {
        for world in 1..=8u32 {
            // Lengths below the world size, not divisible by it, and large enough to pipeline.
            let lengths = [0usize, 1, world as usize - 1, 7 * world as usize + 3, 100_003];
            let results = with_ring(world, move |mut ring| {
                let mut out = Vec::new();
                for (round, &len) in lengths.iter().enumerate() {
                    let mut v = input(ring.rank() as usize, len, round);
                    ring.allreduce(&mut v, round as u64, 5, Duration::from_secs(20))
                        .unwrap();
                    out.push(v);
                }
                out
            });
            for (round, &len) in lengths.iter().enumerate() {
                let inputs: Vec<Vec<f32>> = (0..world as usize).map(|r| input(r, len, round)).collect();
                let want: Vec<f32> = (0..len).map(|i| inputs.iter().map(|v| v[i]).sum()).collect();
                for (r, got) in results.iter().enumerate() {
                    assert_eq!(got[round], want, "world {world}, length {len}, rank {r}");
                }
            }
        }
    }

    #[test]
    fn ranks_hold_identical_bits_with_rounding() {
        let results = with_ring(5, |mut ring| {
            let mut v: Vec<f32> = (0..10_007)
                .map(|i| ((i as f32) * 0.1 + ring.rank() as f32).sin() / 3.0)
                .collect();
            ring.allreduce(&mut v, 9, 0, Duration::from_secs(20)).unwrap();
            v
        });
        for r in &results[1..] {
            assert!(r.iter().zip(&results[0]).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        let want: f64 = (0..5)
            .map(|r| f64::from(((1000.0f32 * 0.1) + r as f32).sin() / 3.0))
            .sum();
        assert!((f64::from(results[0][1000]) - want).abs() < 1e-5);
    }

    #[test]
    fn disagreements_are_reported_not_summed() {
        // Rank 1 runs one step ahead: its neighbours must say so.
        let results = with_ring(3, |mut ring| {
            let seq = if ring.rank() == 1 { 6 } else { 5 };
            let mut v = vec![1.0; 10];
            ring.allreduce(&mut v, seq, 0, Duration::from_secs(5))
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        assert!(
            results[2]
                .as_ref()
                .unwrap_err()
                .contains("rank 1 is at step 6 while this rank is at step 5")
        );
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
            ring.allreduce(&mut v, 311, 0, Duration::from_millis(500))
                .unwrap_err()
                .to_string()
        });
        // Rank 0 receives from rank 2, which never sends.
        assert!(results[0].starts_with("watchdog: waited "), "{}", results[0]);
        assert!(
            results[0].ends_with(" s at all-reduce step 311 for rank 2"),
            "{}",
            results[0]
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

    #[test]
    fn garbage_on_the_ring_port_is_refused() {
        let l0 = TcpListener::bind("127.0.0.1:0").unwrap();
        let l1 = TcpListener::bind("127.0.0.1:0").unwrap();
        let peers = vec![
            l0.local_addr().unwrap().to_string(),
            l1.local_addr().unwrap().to_string(),
        ];
        // A stranger connects to rank 0 first and speaks HTTP.
        let mut stranger = TcpStream::connect(&peers[0]).unwrap();
        stranger.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let p1 = peers.clone();
        let t = std::thread::spawn(move || {
            let spec = RingSpec {
                rank: 1,
                world: 2,
                peers: &p1,
                generation: 1,
                deadline: Instant::now() + Duration::from_secs(10),
                opts: RingOptions::default(),
            };
            connect_ring(&spec, &l1, &|_| {}).map(|_| ())
        });
        let seen = std::sync::Mutex::new(Vec::new());
        let spec = RingSpec {
            rank: 0,
            world: 2,
            peers: &peers,
            generation: 1,
            deadline: Instant::now() + Duration::from_secs(10),
            opts: RingOptions::default(),
        };
        let ring = connect_ring(&spec, &l0, &|w| seen.lock().unwrap().push(w.to_string()));
        assert!(ring.is_ok());
        t.join().unwrap().unwrap();
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(seen[0].contains("not a lab ring hello"), "{seen:?}");
    }
}
