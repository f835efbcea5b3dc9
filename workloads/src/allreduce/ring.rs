//! The ring for large vectors, a sending and a receiving thread moving chunks of [`CHUNK`] bytes (see
//! the parent module).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::{CHUNK, HEADER_LEN, Op, Ring, add_into, blocks, check_header, check_io, closed, peer_of};
use crate::error::{Result, WorkloadError};

impl Ring {
    /// The ring with two threads: one sends to the next rank while the other receives from the previous
    /// rank and adds, so the kernel's copies on one side overlap the additions on the other. The vector
    /// travels between them in chunks of [`CHUNK`] bytes: a chunk received (and added) at step `k` is
    /// handed to the sender, which sends it at step `k + 1` and hands it back.
    pub(super) fn ring(&mut self, data: &mut [f32], op: &mut Op) -> Result<()> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::mpsc;

        let (world, rank, len) = (self.world as usize, self.rank as usize, data.len());
        let (next_rank, prev_rank) = ((rank + 1) % world, (rank + world - 1) % world);
        let chunk_vals = CHUNK / 4;
        let steps = 2 * (world - 1);
        // Chunks by (segment, index within it).
        let seg_chunks = |i: usize| blocks(len, world, i, i + 1).len().div_ceil(chunk_vals);
        let send_seg = |k: usize| {
            if k < world - 1 {
                (rank + world - k) % world
            } else {
                (rank + 1 + world - (k - (world - 1))) % world
            }
        };
        let recv_seg = |k: usize| {
            if k < world - 1 {
                (rank + 2 * world - k - 1) % world
            } else {
                (rank + world - (k - (world - 1))) % world
            }
        };
        let mut owned: Vec<Vec<Option<&mut [f32]>>> = Vec::with_capacity(world);
        let mut rest = data;
        for i in 0..world {
            let (seg, tail) = rest.split_at_mut(blocks(len, world, i, i + 1).len());
            rest = tail;
            owned.push(seg.chunks_mut(chunk_vals).map(Some).collect());
        }
        let first: Vec<&mut [f32]> = owned[rank].iter_mut().map(|c| c.take().expect("chunk")).collect();
        if self.scratch.len() < chunk_vals {
            self.scratch.resize(chunk_vals, 0.0);
        }
        let scratch = &mut self.scratch[..chunk_vals];
        let next = self.to[next_rank].as_mut().expect("a link to the next rank");
        let prev = self.from[prev_rank]
            .as_mut()
            .expect("a link from the previous rank");
        let stop = AtomicBool::new(false);
        // Unbounded: at step 0 the sender sends its own segment while the receiver takes in the one it
        // sends next; a bound below a segment would stop every receiver, and with it the ring.
        let (to_sender, sender_in) = mpsc::channel::<(usize, &mut [f32])>();
        let (to_receiver, receiver_in) = mpsc::channel::<(usize, usize, &mut [f32])>();
        let (header, seq, deadline, started) = (op.header, op.seq, op.deadline, op.started);
        let op_ref = &*op;

        let (sent, received) = std::thread::scope(|scope| {
            let stop = &stop;
            // An error says whether it came first: the other half then fails too, as a consequence.
            let fail = |e: WorkloadError| (e, !stop.swap(true, Ordering::Relaxed));
            let sender = scope.spawn(move || -> std::result::Result<(), (WorkloadError, bool)> {
                let mut out = Out {
                    stream: next,
                    peer: next_rank as u32,
                    seq,
                    deadline,
                    started,
                    stop,
                };
                out.write_all(&header).map_err(fail)?;
                let mut queue = first.into_iter();
                for k in 0..steps {
                    let seg = send_seg(k);
                    for c in 0..seg_chunks(seg) {
                        let chunk = if k == 0 {
                            queue.next().expect("own chunks")
                        } else {
                            match sender_in.recv() {
                                Ok((_, chunk)) => chunk,
                                Err(_) => return Ok(()), // the receiver failed and says why
                            }
                        };
                        out.write_all(bytemuck::cast_slice(chunk)).map_err(fail)?;
                        // The receiver needs it back only for the all-gather's first step (its own segment).
                        let _ = to_receiver.send((seg, c, chunk));
                    }
                }
                Ok(())
            });
            let receiver = scope.spawn(move || -> std::result::Result<Duration, (WorkloadError, bool)> {
                let mut inp = In {
                    stream: prev,
                    peer: prev_rank as u32,
                    op: op_ref,
                    stop,
                    wait: Duration::ZERO,
                };
                let mut header_in = [0u8; HEADER_LEN];
                inp.read_exact(&mut header_in).map_err(fail)?;
                check_header(&header_in, op_ref, prev_rank as u32, inp.stream).map_err(fail)?;
                for k in 0..steps {
                    let seg = recv_seg(k);
                    for c in 0..seg_chunks(seg) {
                        let chunk = loop {
                            if let Some(chunk) = owned[seg][c].take() {
                                break chunk;
                            }
                            match receiver_in.recv() {
                                Ok((s, i, chunk)) => owned[s][i] = Some(chunk),
                                Err(_) => return Err(fail(closed(next_rank as u32, seq, None))),
                            }
                        };
                        if k < world - 1 {
                            let buf = &mut scratch[..chunk.len()];
                            inp.read_exact(bytemuck::cast_slice_mut(buf)).map_err(fail)?;
                            add_into(chunk, buf);
                        } else {
                            inp.read_exact(bytemuck::cast_slice_mut(chunk)).map_err(fail)?;
                        }
                        if k + 1 < steps {
                            let _ = to_sender.send((k + 1, chunk));
                        }
                    }
                }
                Ok(inp.wait)
            });
            (sender.join(), receiver.join())
        });
        let received = received.unwrap_or_else(|p| std::panic::resume_unwind(p));
        let sent = sent.unwrap_or_else(|p| std::panic::resume_unwind(p));
        match (sent, received) {
            (Ok(()), Ok(wait)) => {
                op.wait += wait;
                Ok(())
            }
            (Err((e, true)), _) | (_, Err((e, true))) => Err(e),
            (Err((e, false)), _) | (_, Err((e, false))) => Err(e),
        }
    }
}

/// The sending half of the ring: blocking writes over a non-blocking socket, watched by
/// the deadline and the other half's failure.
struct Out<'a> {
    stream: &'a mut TcpStream,
    peer: u32,
    seq: u64,
    deadline: Instant,
    started: Instant,
    stop: &'a std::sync::atomic::AtomicBool,
}

impl Out<'_> {
    fn write_all(&mut self, mut b: &[u8]) -> Result<()> {
        while !b.is_empty() {
            match self.stream.write(b) {
                Ok(n) => b = &b[n..],
                Err(e) => check_io(e, self.peer, self.seq)?,
            }
            if !b.is_empty() {
                block(
                    self.stream,
                    PollFlags::POLLOUT,
                    self.peer,
                    self.seq,
                    self.started,
                    self.deadline,
                    self.stop,
                )?;
            }
        }
        Ok(())
    }
}

/// The receiving half of the ring.
struct In<'a> {
    stream: &'a mut TcpStream,
    peer: u32,
    op: &'a Op,
    stop: &'a std::sync::atomic::AtomicBool,
    wait: Duration,
}

impl In<'_> {
    fn read_exact(&mut self, mut b: &mut [u8]) -> Result<()> {
        while !b.is_empty() {
            match self.stream.read(b) {
                Ok(0) => return Err(closed(self.peer, self.op.seq, None)),
                Ok(n) => b = &mut b[n..],
                Err(e) => check_io(e, self.peer, self.op.seq)?,
            }
            if !b.is_empty() {
                let t = Instant::now();
                block(
                    self.stream,
                    PollFlags::POLLIN,
                    self.peer,
                    self.op.seq,
                    self.op.started,
                    self.op.deadline,
                    self.stop,
                )?;
                self.wait += t.elapsed();
            }
        }
        Ok(())
    }
}

/// Polls one socket for `flags` until the deadline (the watchdog error) or until the other half of the
/// operation failed (an error it does not report: the other half's error is the one returned).
fn block(
    s: &TcpStream,
    flags: PollFlags,
    peer: u32,
    seq: u64,
    started: Instant,
    deadline: Instant,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<()> {
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(closed(peer, seq, None));
    }
    let now = Instant::now();
    if now >= deadline {
        return Err(WorkloadError::Watchdog {
            detail: format!(
                "waited {:.0} s at all-reduce step {seq} for rank {peer}",
                now.duration_since(started).as_secs_f64()
            ),
        });
    }
    let ms = (deadline - now).as_millis().clamp(1, 100) as u16;
    super::waiting::beat();
    match poll(&mut [PollFd::new(s.as_fd(), flags)], PollTimeout::from(ms)) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
        Err(e) => Err(WorkloadError::io(
            "all-reduce poll",
            peer_of(s),
            io::Error::from(e),
            Duration::ZERO,
        )),
    }
}
