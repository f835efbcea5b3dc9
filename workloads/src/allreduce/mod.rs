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
//!   connections to the next and from the previous rank. The vector is cut into `world` segments, and
//!   those into chunks of 128 KiB; one thread receives and adds, another sends, so that a chunk leaves as
//!   soon as it has arrived and been added (while it is still in the cache), and the kernel's copies on
//!   one side overlap the additions on the other.
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
//!
//! Hand-written on purpose: the lab measures this collective's wait and transfer, which a library (MPI,
//! NCCL bindings) would hide and would need a runtime the lab's ranks do not have.

mod connect;
mod doubling;
mod ring;
pub mod waiting;

pub use connect::{RingSpec, connect_ring};

use std::io;
use std::net::TcpStream;
use std::ops::Range;
use std::time::{Duration, Instant};

use crate::error::{Result, WorkloadError};

const OP_MAGIC: u32 = 0x4c41_5231; // "LAR1"
const HELLO_MAGIC: u32 = 0x4c52_4e47; // "LRNG"
/// 2: every rank connects to every other rank (1 connected only the ring's neighbours).
const PROTOCOL_VERSION: u32 = 2;
const HEADER_LEN: usize = 24;
const HELLO_LEN: usize = 24;

/// How long an exchange retries, yielding the CPU, before it blocks in `poll`.
const SPIN: Duration = Duration::from_micros(100);

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
        let done = match algorithm {
            Algorithm::Ring => self.ring(data, &mut op),
            Algorithm::RecursiveDoubling | Algorithm::HalvingDoubling => {
                self.doubling(data, algorithm == Algorithm::HalvingDoubling, &mut op)
            }
        };
        waiting::clear();
        done?;
        let total = started.elapsed();
        Ok(Stats {
            wait: op.wait,
            transfer: total.saturating_sub(op.wait),
        })
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
