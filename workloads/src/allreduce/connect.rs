//! Connecting every rank to every other, one connection each way, identified by a hello.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::{HELLO_LEN, HELLO_MAGIC, PROTOCOL_VERSION, Ring, RingOptions};
use crate::error::{Result, WorkloadError};

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
                Err(e) => last_connect_error[j] = lab_model::format::error_chain(&e),
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
