//! Recursive doubling, and recursive halving then doubling, with the pair hand-over for worlds that are
//! not a power of two: the small and medium vectors' algorithms (see the parent module).

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::{
    HEADER_LEN, Into, Op, Ring, SPIN, add_into, blocks, check_header, check_io, chunk, chunk_mut, closed,
    peer_of, power_of_two_below,
};
use crate::error::{Result, WorkloadError};

impl Ring {
    /// Recursive doubling, or (with `halving`) recursive halving then doubling, among the largest
    /// power of two of ranks, with the pairs' hand-over before and after for the ranks beyond it.
    pub(super) fn doubling(&mut self, data: &mut [f32], halving: bool, op: &mut Op) -> Result<()> {
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
        let mut idle_since: Option<Instant> = None;
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
                idle_since = None;
                continue;
            }
            // A partner's answer to a small message comes within microseconds: yield the CPU (to it, on
            // a busy machine) and try again for a moment before sleeping in `poll`, whose wake-up costs
            // more than the message.
            let now = Instant::now();
            let since = *idle_since.get_or_insert(now);
            if now.duration_since(since) < SPIN {
                std::thread::yield_now();
                op.wait += now.elapsed();
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
    super::waiting::beat();
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
