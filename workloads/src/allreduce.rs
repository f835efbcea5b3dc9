//! The all-reduce: an elementwise sum of an `f32` vector across all ranks over TCP, with the algorithm
//! chosen by size as MPI libraries do, and every rank ending with the same bits.
//!
//! Every rank holds one connection to every other rank, in each direction: the one it opened (it only
//! sends there) and the one the other rank opened (it only receives from there). Three algorithms use them:
//!
//! * **Recursive doubling** (small vectors, latency-bound): `log2 p` rounds in which partners swap the
//!   whole vector and add. One message per round instead of the ring's `2(W − 1)` hops.
//! * **Recursive halving, then doubling** (Rabenseifner; medium vectors): a reduce-scatter in `log2 p`
//!   rounds that halve the part each rank keeps, then an all-gather in `log2 p` rounds that double it: the
//!   ring's bytes in `2 log2 p` messages.
//! * **Ring** (large vectors, bandwidth-bound): reduce-scatter then all-gather around the ring over the
//!   connections to the next and from the previous rank. The vector is cut into `world` segments; one
//!   thread drives both directions with non-blocking sockets and `poll`, pipelined: bytes of step `k + 1`
//!   leave as soon as the same bytes of step `k` have arrived and been added.
//!
//! `p` is the largest power of two not above the world size. In a world of another size the first
//! `2 (W − p)` ranks pair up before and after (the even rank of each pair hands its vector to the odd one,
//! which takes part for both and hands the result back), as MPICH does.
//!
//! **Identical bits.** Every rank runs the same algorithm (it depends only on the length and the world
//! size, both checked in every message) and so the same reduction tree. Recursive doubling adds two
//! partial sums on both partners, `a + b` on one and `b + a` on the other: IEEE addition is commutative,
//! so the bits agree. The other two compute each element's sum on exactly one rank and copy it to the rest.
//!
//! Every message starts with a 24-byte header (magic, step, length, and the sender's model checksum), sent
//! in the same `writev` as the data, so a stray client, a rank at another step, a rank with another model
//! size, or a model that diverged between ranks is reported as exactly that, never summed. Sends go
//! straight from the caller's buffer; received data lands in it or, when it is to be added, in one scratch
//! buffer kept across operations, so a step allocates nothing.
//!
//! The time spent blocked in `poll` is the *wait* phase (a peer is not ready: the straggler signal); the
//! rest is *transfer*. An operation that takes longer than the watchdog timeout fails with a
//! [`WorkloadError::Watchdog`] naming the peer it was waiting for.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ops::Range;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::error::{Result, WorkloadError};

const OP_MAGIC: u32 = 0x4c41_5231; // "LAR1"
const HELLO_MAGIC: u32 = 0x4c52_4e47; // "LRNG"
/// 2: every rank connects to every other rank (1 connected only the ring's neighbours).
const PROTOCOL_VERSION: u32 = 2;
const HEADER_LEN: usize = 24;
const HELLO_LEN: usize = 24;

/// Vectors up to this many bytes use recursive doubling.
pub const RECURSIVE_DOUBLING_MAX_BYTES: usize = 64 << 10;
/// Vectors up to this many bytes (and above the previous) use recursive halving and doubling; larger
/// ones the ring.
pub const HALVING_DOUBLING_MAX_BYTES: usize = 4 << 20;

/// How the vector is summed across ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    RecursiveDoubling,
    HalvingDoubling,
    Ring,
}

impl Algorithm {
    /// Every algorithm, for tests and benchmarks.
    pub const ALL: [Algorithm; 3] = [
        Algorithm::RecursiveDoubling,
        Algorithm::HalvingDoubling,
        Algorithm::Ring,
    ];

    /// The algorithm for a vector of `len` values: the same on every rank, which is what keeps their
    /// results bit-identical.
    pub fn for_len(len: usize) -> Algorithm {
        let bytes = len.saturating_mul(4);
        if bytes <= RECURSIVE_DOUBLING_MAX_BYTES {
            Algorithm::RecursiveDoubling
        } else if bytes <= HALVING_DOUBLING_MAX_BYTES {
            Algorithm::HalvingDoubling
        } else {
            Algorithm::Ring
        }
    }

    /// A short name, as the benchmark prints it.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::RecursiveDoubling => "recursive-doubling",
            Algorithm::HalvingDoubling => "halving-doubling",
            Algorithm::Ring => "ring",
        }
    }

    /// Parses [`Algorithm::name`].
    pub fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// Where one all-reduce spent its time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    /// Blocked waiting for a peer to send or to take data.
    pub wait: Duration,
    /// Moving and adding bytes.
    pub transfer: Duration,
}

/// Socket settings for the connections between ranks.
#[derive(Debug, Clone, Copy, Default)]
pub struct RingOptions {
    /// `SO_SNDBUF`/`SO_RCVBUF` in bytes; `None` leaves the kernel's auto-tuning alone.
    pub socket_buffer: Option<usize>,
}

/// This rank's place among the ranks and its connections to each of them.
#[derive(Debug)]
pub struct Ring {
    rank: u32,
    world: u32,
    /// By rank: the connection this rank opened to it (send only); `None` for this rank itself.
    to: Vec<Option<TcpStream>>,
    /// By rank: the connection it opened to this rank (receive only); `None` for this rank itself.
    from: Vec<Option<TcpStream>>,
    scratch: Vec<f32>,
}

/// The start of segment `i` of `parts` equal segments (lengths differing by at most one) of `len` values.
fn seg_start(len: usize, parts: usize, i: usize) -> usize {
    let (base, extra) = (len / parts, len % parts);
    i * base + i.min(extra)
}

/// Segments `lo .. hi` of `parts`, as one range of values.
fn blocks(len: usize, parts: usize, lo: usize, hi: usize) -> Range<usize> {
    seg_start(len, parts, lo)..seg_start(len, parts, hi)
}

/// The `world` segments a vector of `len` values is cut into: contiguous, in order, lengths differing by
/// at most one.
pub fn segments(len: usize, world: usize) -> Vec<Range<usize>> {
    let world = world.max(1);
    (0..world).map(|i| blocks(len, world, i, i + 1)).collect()
}

/// The largest power of two not above `n` (`n ≥ 1`).
fn power_of_two_below(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// What an operation checks every message against, and its clock.
struct Op {
    seq: u64,
    len: usize,
    crc: u32,
    header: [u8; HEADER_LEN],
    started: Instant,
    deadline: Instant,
    wait: Duration,
}

/// What to do with received values.
#[derive(Clone, Copy, PartialEq)]
enum Into {
    /// Add them into the caller's vector.
    Add,
    /// Overwrite the caller's vector with them.
    Copy,
}

impl Ring {
    /// A world of one: every all-reduce returns the vector unchanged.
    pub fn single() -> Ring {
        Ring {
            rank: 0,
            world: 1,
            to: vec![None],
            from: vec![None],
            scratch: Vec::new(),
        }
    }

    /// From established connections, by rank: `to[j]` opened by this rank to rank `j`, `from[j]` opened
    /// by rank `j` to this one; both `None` exactly at this rank.
    ///
    /// # Errors
    /// [`WorkloadError::Invalid`] when a connection is missing; I/O errors when the sockets cannot be set
    /// up.
    pub fn from_links(
        rank: u32,
        world: u32,
        to: Vec<Option<TcpStream>>,
        from: Vec<Option<TcpStream>>,
        opts: RingOptions,
    ) -> Result<Ring> {
        let complete = |v: &[Option<TcpStream>]| {
            v.len() == world as usize
                && v.iter()
                    .enumerate()
                    .all(|(j, s)| s.is_some() == (j != rank as usize))
        };
        if !complete(&to) || !complete(&from) {
            return Err(WorkloadError::invalid(
                "all-reduce links",
                format!("rank {rank} of {world} needs one connection each way to every other rank"),
            ));
        }
        for s in to.iter().chain(&from).flatten() {
            let err = |e| WorkloadError::io("connection to a peer rank", peer_of(s), e, Duration::ZERO);
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
            to,
            from,
            scratch: Vec::new(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks.
    pub fn world(&self) -> u32 {
        self.world
    }

    /// Sums `data` elementwise across all ranks, in place, with the algorithm [`Algorithm::for_len`]
    /// picks. `seq` (the step) and `model_crc` (a checksum of the sender's model) are checked against
    /// every peer's; pass the same values on every rank. Fails when the operation takes longer than
    /// `timeout`.
    ///
    /// # Errors
    /// [`WorkloadError::Watchdog`] after `timeout`; [`WorkloadError::PeerClosed`] when a peer goes away;
    /// [`WorkloadError::Protocol`] for garbage; [`WorkloadError::Mismatch`] when a peer is at another
    /// step, has another length or another model. `data` is unspecified after an error.
    pub fn allreduce(
        &mut self,
        data: &mut [f32],
        seq: u64,
        model_crc: u32,
        timeout: Duration,
    ) -> Result<Stats> {
        self.allreduce_with(Algorithm::for_len(data.len()), data, seq, model_crc, timeout)
    }

    /// [`Ring::allreduce`] with a chosen algorithm (every rank must choose the same one).
    ///
    /// # Errors
    /// As [`Ring::allreduce`].
    pub fn allreduce_with(
        &mut self,
        algorithm: Algorithm,
        data: &mut [f32],
        seq: u64,
        model_crc: u32,
        timeout: Duration,
    ) -> Result<Stats> {
        if self.world <= 1 {
            return Ok(Stats::default());
        }
        let started = Instant::now();
        let mut header = [0u8; HEADER_LEN];
        header[0..4].copy_from_slice(&OP_MAGIC.to_le_bytes());
        header[4..12].copy_from_slice(&seq.to_le_bytes());
        header[12..20].copy_from_slice(&(data.len() as u64).to_le_bytes());
        header[20..24].copy_from_slice(&model_crc.to_le_bytes());
        let mut op = Op {
            seq,
            len: data.len(),
            crc: model_crc,
            header,
            started,
            deadline: started + timeout,
            wait: Duration::ZERO,
        };
        match algorithm {
            Algorithm::Ring => self.ring(data, &mut op)?,
            Algorithm::RecursiveDoubling | Algorithm::HalvingDoubling => {
                self.doubling(data, algorithm == Algorithm::HalvingDoubling, &mut op)?;
            }
        }
        let total = started.elapsed();
        Ok(Stats {
            wait: op.wait,
            transfer: total.saturating_sub(op.wait),
        })
    }

    /// Recursive doubling, or (with `halving`) recursive halving then doubling, among the largest
    /// power of two of ranks, with the pairs' hand-over before and after for the ranks beyond it.
    fn doubling(&mut self, data: &mut [f32], halving: bool, op: &mut Op) -> Result<()> {
        let (world, rank, len) = (self.world as usize, self.rank as usize, data.len());
        let p = power_of_two_below(world);
        let rem = world - p;
        // The rank taking part in place of new rank `n`.
        let real = |n: usize| if n < rem { 2 * n + 1 } else { n + rem };
        let me = if rank < 2 * rem {
            if rank % 2 == 0 {
                self.exchange(data, Some((rank + 1, 0..len)), None, op)?;
                None
            } else {
                self.exchange(data, None, Some((rank - 1, 0..len, Into::Add)), op)?;
                Some(rank / 2)
            }
        } else {
            Some(rank - rem)
        };
        if let Some(n) = me {
            if halving {
                // Reduce-scatter: keep half of the current part each round, ending with segment `n`.
                let (mut lo, mut hi) = (0, p);
                let mut d = p / 2;
                while d >= 1 {
                    let peer = real(n ^ d);
                    let mid = lo + d;
                    let (keep, give) = if n & d == 0 {
                        ((lo, mid), (mid, hi))
                    } else {
                        ((mid, hi), (lo, mid))
                    };
                    self.exchange(
                        data,
                        Some((peer, blocks(len, p, give.0, give.1))),
                        Some((peer, blocks(len, p, keep.0, keep.1), Into::Add)),
                        op,
                    )?;
                    (lo, hi) = keep;
                    d /= 2;
                }
                // All-gather: swap finished parts, doubling them each round.
                let mut d = 1;
                while d < p {
                    let peer = real(n ^ d);
                    let theirs = if n & d == 0 { (hi, hi + d) } else { (lo - d, lo) };
                    self.exchange(
                        data,
                        Some((peer, blocks(len, p, lo, hi))),
                        Some((peer, blocks(len, p, theirs.0, theirs.1), Into::Copy)),
                        op,
                    )?;
                    (lo, hi) = (lo.min(theirs.0), hi.max(theirs.1));
                    d *= 2;
                }
            } else {
                let mut d = 1;
                while d < p {
                    let peer = real(n ^ d);
                    self.exchange(data, Some((peer, 0..len)), Some((peer, 0..len, Into::Add)), op)?;
                    d *= 2;
                }
            }
        }
        if rank < 2 * rem {
            if rank % 2 == 1 {
                self.exchange(data, Some((rank - 1, 0..len)), None, op)?;
            } else {
                self.exchange(data, None, Some((rank + 1, 0..len, Into::Copy)), op)?;
            }
        }
        Ok(())
    }

    /// Sends `data[send]` (after the header) to one peer while receiving a message of `recv`'s length
    /// from another (or the same) one, added into or copied over `data[recv]`. Received values to be
    /// added land in the scratch buffer first; they are added as they arrive when the ranges are
    /// disjoint, else once the send is complete (the send must go out unchanged).
    fn exchange(
        &mut self,
        data: &mut [f32],
        send: Option<(usize, Range<usize>)>,
        recv: Option<(usize, Range<usize>, Into)>,
        op: &mut Op,
    ) -> Result<()> {
        let send_total = send.as_ref().map_or(0, |(_, r)| HEADER_LEN + r.len() * 4);
        let recv_total = recv.as_ref().map_or(0, |(_, r, _)| HEADER_LEN + r.len() * 4);
        let (mut sent, mut got, mut added) = (0usize, 0usize, 0usize);
        let mut header_in = [0u8; HEADER_LEN];
        let overlap = match (&send, &recv) {
            (Some((_, s)), Some((_, r, Into::Add))) => s.start < r.end && r.start < s.end,
            _ => false,
        };
        if let Some((_, r, Into::Add)) = &recv
            && self.scratch.len() < r.len()
        {
            self.scratch.resize(r.len(), 0.0);
        }
        loop {
            let mut progressed = false;
            if let Some((peer, s)) = &send
                && sent < send_total
            {
                let stream = self.to[*peer].as_mut().expect("a link to every other rank");
                let payload: &[u8] = bytemuck::cast_slice(&data[s.clone()]);
                let written = if sent < HEADER_LEN {
                    stream
                        .write_vectored(&[IoSlice::new(&op.header[sent..]), IoSlice::new(chunk(payload, 0))])
                } else {
                    stream.write(chunk(payload, sent - HEADER_LEN))
                };
                match written {
                    Ok(n) => {
                        sent += n;
                        progressed |= n > 0;
                    }
                    Err(e) => check_io(e, *peer as u32, op.seq)?,
                }
            }
            if let Some((peer, r, into)) = &recv
                && got < recv_total
            {
                let stream = self.from[*peer].as_mut().expect("a link to every other rank");
                let buf: &mut [u8] = match into {
                    Into::Add => bytemuck::cast_slice_mut(&mut self.scratch[..r.len()]),
                    Into::Copy => bytemuck::cast_slice_mut(&mut data[r.clone()]),
                };
                let read = if got < HEADER_LEN {
                    stream.read_vectored(&mut [
                        IoSliceMut::new(&mut header_in[got..]),
                        IoSliceMut::new(chunk_mut(buf, 0)),
                    ])
                } else {
                    stream.read(chunk_mut(buf, got - HEADER_LEN))
                };
                match read {
                    Ok(0) => return Err(closed(*peer as u32, op.seq, None)),
                    Ok(n) => {
                        let before = got;
                        got += n;
                        progressed = true;
                        if before < HEADER_LEN && got >= HEADER_LEN {
                            check_header(&header_in, op, *peer as u32, stream)?;
                        }
                        if *into == Into::Add && !overlap {
                            let complete = got.saturating_sub(HEADER_LEN) / 4;
                            add_into(
                                &mut data[r.start + added..r.start + complete],
                                &self.scratch[added..complete],
                            );
                            added = complete;
                        }
                    }
                    Err(e) => check_io(e, *peer as u32, op.seq)?,
                }
            }
            let (send_done, recv_done) = (sent == send_total, got == recv_total);
            if send_done && recv_done {
                break;
            }
            if progressed {
                continue;
            }
            let send_fd = send
                .as_ref()
                .filter(|_| !send_done)
                .map(|(peer, _)| (self.to[*peer].as_ref().expect("link"), *peer));
            let recv_fd = recv
                .as_ref()
                .filter(|_| !recv_done)
                .map(|(peer, _, _)| (self.from[*peer].as_ref().expect("link"), *peer));
            let waiting_for = recv_fd.or(send_fd).map_or(0, |(_, p)| p as u32);
            wait_ready(send_fd.map(|(s, _)| s), recv_fd.map(|(s, _)| s), waiting_for, op)?;
        }
        if let Some((_, r, Into::Add)) = &recv
            && added < r.len()
        {
            add_into(&mut data[r.start + added..r.end], &self.scratch[added..r.len()]);
        }
        Ok(())
    }

    /// The ring: reduce-scatter then all-gather over the connections to the next and from the previous
    /// rank, pipelined.
    fn ring(&mut self, data: &mut [f32], op: &mut Op) -> Result<()> {
        let (world, rank, len) = (self.world as usize, self.rank as usize, data.len());
        let (next_rank, prev_rank) = ((rank + 1) % world, (rank + world - 1) % world);
        let max_seg = len.div_ceil(world);
        if self.scratch.len() < max_seg {
            self.scratch.resize(max_seg, 0.0);
        }
        let scratch = &mut self.scratch;
        let next = self.to[next_rank].as_mut().expect("a link to the next rank");
        let prev = self.from[prev_rank]
            .as_mut()
            .expect("a link from the previous rank");
        let seg = |i: usize| blocks(len, world, i, i + 1);
        let steps = 2 * (world - 1);
        let send_seg = |k: usize| -> Range<usize> {
            if k < world - 1 {
                seg((rank + world - k) % world)
            } else {
                seg((rank + 1 + world - (k - (world - 1))) % world)
            }
        };
        let recv_seg = |k: usize| -> Range<usize> {
            if k < world - 1 {
                seg((rank + 2 * world - k - 1) % world)
            } else {
                seg((rank + world - (k - (world - 1))) % world)
            }
        };

        let mut header_in = [0u8; HEADER_LEN];
        let (mut hdr_sent, mut hdr_recv) = (0usize, 0usize);
        let (mut send_step, mut send_off) = (0usize, 0usize); // send_off in bytes of the step's segment
        let (mut recv_step, mut recv_off, mut recv_elems) = (0usize, 0usize, 0usize);

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
            if !send_done {
                let s = if send_step < steps {
                    send_seg(send_step)
                } else {
                    0..0
                };
                let ready = if send_step == steps {
                    0
                } else if send_step == 0 || recv_step >= send_step {
                    s.len() * 4
                } else if recv_step + 1 == send_step {
                    recv_elems * 4
                } else {
                    0
                };
                let bytes: &[u8] = bytemuck::cast_slice(&data[s.clone()]);
                let written = if hdr_sent < HEADER_LEN {
                    want_write = true;
                    next.write_vectored(&[
                        IoSlice::new(&op.header[hdr_sent..]),
                        IoSlice::new(chunk(&bytes[..ready.max(send_off)], send_off)),
                    ])
                } else if ready > send_off {
                    want_write = true;
                    next.write(chunk(&bytes[..ready], send_off))
                } else {
                    Ok(0)
                };
                match written {
                    Ok(n) => {
                        let h = n.min(HEADER_LEN - hdr_sent);
                        hdr_sent += h;
                        send_off += n - h;
                        progressed |= n > 0;
                    }
                    Err(e) => check_io(e, next_rank as u32, op.seq)?,
                }
            }

            // Receive: the header, then the current step's segment (added in, or copied in place).
            if hdr_recv < HEADER_LEN {
                match prev.read(&mut header_in[hdr_recv..]) {
                    Ok(0) => return Err(closed(prev_rank as u32, op.seq, None)),
                    Ok(n) => {
                        hdr_recv += n;
                        progressed = true;
                        if hdr_recv == HEADER_LEN {
                            check_header(&header_in, op, prev_rank as u32, prev)?;
                        }
                    }
                    Err(e) => check_io(e, prev_rank as u32, op.seq)?,
                }
            } else if recv_step < steps {
                let s = recv_seg(recv_step);
                let total = s.len() * 4;
                let reducing = recv_step < world - 1;
                let result = if reducing {
                    let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut scratch[..s.len()]);
                    prev.read(chunk_mut(&mut buf[..total], recv_off))
                } else {
                    let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut data[s.clone()]);
                    prev.read(chunk_mut(&mut buf[..total], recv_off))
                };
                match result {
                    Ok(0) => return Err(closed(prev_rank as u32, op.seq, None)),
                    Ok(n) => {
                        recv_off += n;
                        progressed = true;
                        let complete = recv_off / 4;
                        if reducing {
                            add_into(
                                &mut data[s.start + recv_elems..s.start + complete],
                                &scratch[recv_elems..complete],
                            );
                        }
                        recv_elems = complete;
                    }
                    Err(e) => check_io(e, prev_rank as u32, op.seq)?,
                }
            }

            if progressed {
                continue;
            }
            let waiting_for = if !recv_done { prev_rank } else { next_rank };
            wait_ready(
                want_write.then_some(&*next),
                (!recv_done).then_some(&*prev),
                waiting_for as u32,
                op,
            )?;
        }
        Ok(())
    }
}

/// The most one read or write moves: received values are added, and then sent on, while they are still
/// in the CPU's cache (whole segments of a large vector went through memory twice, measured slower).
const CHUNK: usize = 128 << 10;

fn chunk(b: &[u8], from: usize) -> &[u8] {
    &b[from..b.len().min(from + CHUNK)]
}

fn chunk_mut(b: &mut [u8], from: usize) -> &mut [u8] {
    let end = b.len().min(from + CHUNK);
    &mut b[from..end]
}

/// `dst[i] += src[i]`.
fn add_into(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += *s;
    }
}

/// Blocks in `poll` until `send` can take data or `recv` has some, at most until the operation's
/// deadline (then the watchdog error names `waiting_for`); the time blocked counts as waiting.
fn wait_ready(
    send: Option<&TcpStream>,
    recv: Option<&TcpStream>,
    waiting_for: u32,
    op: &mut Op,
) -> Result<()> {
    let now = Instant::now();
    if now >= op.deadline {
        return Err(WorkloadError::Watchdog {
            detail: format!(
                "waited {:.0} s at all-reduce step {} for rank {waiting_for}",
                now.duration_since(op.started).as_secs_f64(),
                op.seq
            ),
        });
    }
    let ms = (op.deadline - now).as_millis().clamp(1, 1000) as u16;
    fn out(s: &TcpStream) -> PollFd<'_> {
        PollFd::new(s.as_fd(), PollFlags::POLLOUT)
    }
    fn inp(s: &TcpStream) -> PollFd<'_> {
        PollFd::new(s.as_fd(), PollFlags::POLLIN)
    }
    let t = Instant::now();
    let polled = match (send, recv) {
        (Some(s), Some(r)) => poll(&mut [out(s), inp(r)], PollTimeout::from(ms)),
        (Some(s), None) => poll(&mut [out(s)], PollTimeout::from(ms)),
        (None, Some(r)) => poll(&mut [inp(r)], PollTimeout::from(ms)),
        (None, None) => Ok(0),
    };
    match polled {
        Ok(_) | Err(nix::errno::Errno::EINTR) => {}
        Err(e) => {
            let peer = recv.or(send).map(peer_of).unwrap_or_default();
            return Err(WorkloadError::io(
                "all-reduce poll",
                peer,
                io::Error::from(e),
                Duration::ZERO,
            ));
        }
    }
    op.wait += t.elapsed();
    Ok(())
}

fn check_header(h: &[u8; HEADER_LEN], op: &Op, prev: u32, s: &TcpStream) -> Result<()> {
    let (seq, len, crc) = (op.seq, op.len, op.crc);
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

fn check_io(e: io::Error, peer: u32, seq: u64) -> Result<()> {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(()),
        _ => Err(closed(peer, seq, Some(e))),
    }
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

/// Who this rank is among the ranks it is about to connect to.
#[derive(Debug, Clone)]
pub struct RingSpec<'a> {
    pub rank: u32,
    pub world: u32,
    /// Every rank's listen address, by rank.
    pub peers: &'a [String],
    /// Chosen at rendezvous, so that a connection from an earlier incarnation of the job is refused.
    pub generation: u64,
    /// When to give up.
    pub deadline: Instant,
    pub opts: RingOptions,
}

/// Connects this rank to every other: opens a connection to each rank `j` at `peers[j]` and accepts one
/// from each on `listener`, all identified by the spec's generation. `rejected` is told about every
/// connection refused on the way (garbage, another job, another protocol version).
///
/// # Errors
/// [`WorkloadError::Watchdog`] when a connection is still missing at the deadline;
/// [`WorkloadError::Invalid`] when `peers` does not have `world` entries.
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
    let mut hello = [0u8; HELLO_LEN];
    hello[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
    hello[4..8].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    hello[8..16].copy_from_slice(&generation.to_le_bytes());
    hello[16..20].copy_from_slice(&rank.to_le_bytes());
    hello[20..24].copy_from_slice(&world.to_le_bytes());
    listener
        .set_nonblocking(true)
        .map_err(|e| WorkloadError::io("ring listener", "local", e, Duration::ZERO))?;
    let w = world as usize;
    let mut to: Vec<Option<TcpStream>> = (0..w).map(|_| None).collect();
    let mut from: Vec<Option<TcpStream>> = (0..w).map(|_| None).collect();
    let mut last_connect_error: Vec<String> = vec![String::new(); w];
    let others = |v: &[Option<TcpStream>]| -> Vec<usize> {
        (0..w).filter(|&j| j != rank as usize && v[j].is_none()).collect()
    };
    loop {
        let (to_missing, from_missing) = (others(&to), others(&from));
        if to_missing.is_empty() && from_missing.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let mut missing: Vec<String> = to_missing
                .iter()
                .map(|&j| format!("rank {j} at {} ({})", peers[j], last_connect_error[j]))
                .collect();
            missing.extend(from_missing.iter().map(|&j| format!("rank {j} to connect")));
            return Err(WorkloadError::Watchdog {
                detail: format!("ring setup timed out waiting for {}", missing.join(" and ")),
            });
        }
        let mut idle = true;
        for j in to_missing {
            match crate::http::connect(&peers[j], &format!("rank {j}"), Duration::from_secs(1)) {
                Ok(mut s) => {
                    idle = false;
                    if s.write_all(&hello).is_ok() {
                        to[j] = Some(s);
                    }
                }
                Err(e) => last_connect_error[j] = crate::error_chain(&e),
            }
        }
        loop {
            match listener.accept() {
                Ok((mut s, addr)) => {
                    idle = false;
                    match read_hello(&mut s, generation, world, rank) {
                        // A rank that connects again (it retried) replaces its earlier connection.
                        Ok(j) => from[j as usize] = Some(s),
                        Err(why) => rejected(&format!("ring connection from {addr} refused: {why}")),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    rejected(&format!("ring accept failed: {e}"));
                    break;
                }
            }
        }
        if idle {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ring::from_links(rank, world, to, from, opts)
}

/// Reads a connecting rank's hello; returns its rank.
fn read_hello(s: &mut TcpStream, generation: u64, world: u32, me: u32) -> std::result::Result<u32, String> {
    s.set_nonblocking(false).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    let mut h = [0u8; HELLO_LEN];
    s.read_exact(&mut h)
        .map_err(|e| format!("no hello within 2 s ({e})"))?;
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    if u32_at(0) != HELLO_MAGIC {
        return Err(format!("not a lab ring hello (first bytes {:02x?})", &h[..8]));
    }
    if u32_at(4) != PROTOCOL_VERSION {
        return Err(format!(
            "ring protocol version {}, this rank speaks {PROTOCOL_VERSION}: run the same lab-rank build on every rank",
            u32_at(4)
        ));
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
    let theirs = u32_at(16);
    if theirs >= world || theirs == me {
        return Err(format!("rank {theirs}, not another rank of {world}"));
    }
    Ok(theirs)
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

    #[test]
    fn a_hello_of_another_protocol_version_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mut hello = [0u8; HELLO_LEN];
        hello[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        hello[4..8].copy_from_slice(&1u32.to_le_bytes());
        hello[8..16].copy_from_slice(&7u64.to_le_bytes());
        hello[16..20].copy_from_slice(&1u32.to_le_bytes());
        hello[20..24].copy_from_slice(&2u32.to_le_bytes());
        c.write_all(&hello).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let why = read_hello(&mut s, 7, 2, 0).unwrap_err();
        assert!(
            why.contains("ring protocol version 1, this rank speaks 2"),
            "{why}"
        );
        hello[4..8].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        c.write_all(&hello).unwrap();
        let (mut s, _) = l.accept().unwrap();
        assert_eq!(read_hello(&mut s, 7, 2, 0), Ok(1));
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
