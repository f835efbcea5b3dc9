//! Rendezvous: how `world size` ranks find each other before the first step, the way torch's rendezvous
//! does. Rank 0 hosts it on the `--rendezvous` address; every other rank connects there (retrying, and
//! resolving the name again on every try), says who it is, and waits.
//!
//! The host answers each join with the list of ranks joined so far and repeats it every second, so every
//! waiting rank can show how many peers it has and notice a host that went away (it then reconnects).
//! A rank that announces another world size, dataset or model size, or a rank number out of range, is
//! refused with a message saying exactly that, and keeps retrying: the host may be restarted with the
//! corrected configuration. When all `world size` ranks have joined, the host reads the resume point
//! (checkpoint) and sends everyone a welcome: the ring addresses, a fresh generation number for the ring,
//! the step to start from and the model to start with. If fewer than `world size` ranks join before the
//! deadline, every waiting rank, host included, fails with a watchdog error naming the missing ranks.
//!
//! Messages are JSON in frames prefixed by their length (4 bytes, little-endian); the welcome is followed
//! by one binary frame holding the model's parameters.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Result, WorkloadError};

/// Names the protocol in every hello, so that another program is refused by name.
pub const PROTOCOL: &str = "straggler-lab-rendezvous/1";
const MAX_JSON_FRAME: usize = 1 << 20;
const HEARTBEAT: Duration = Duration::from_secs(1);
/// A waiting rank reconnects when it has heard nothing from the host for this long.
const SILENCE: Duration = Duration::from_secs(4);

/// What a rank says when it joins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: String,
    pub rank: u32,
    pub world_size: u32,
    /// Where the rank's ring listener can be reached (`host:port`).
    pub ring_addr: String,
    pub dataset: String,
    pub model_size: u64,
}

/// Where the job starts from, decided by the host when everyone has joined.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resume {
    /// The step the job continues from (0 for a fresh job).
    pub start_step: u64,
    /// The checkpoint it resumed from, if any.
    pub checkpoint_step: Option<u64>,
    /// Steps redone because of this restart (the work since the checkpoint that was lost).
    pub steps_lost: u64,
    /// Steps lost over the job's whole life, this restart included.
    pub steps_lost_total: u64,
    /// Times the job resumed after a failure, this one included.
    pub resumes_total: u64,
    /// CRC32 of the model in the binary frame that follows the welcome.
    pub model_crc: u32,
}

/// Messages on the rendezvous connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    Hello(Hello),
    /// The ranks joined so far (the host included).
    Waiting {
        joined: Vec<u32>,
        world_size: u32,
    },
    /// The join was refused; `kind` is the metric label (`world_size`, `protocol`, `config`).
    Reject {
        kind: String,
        reason: String,
    },
    /// Everyone is here: ring addresses by rank, the ring's generation, and the resume point.
    Welcome {
        generation: u64,
        peers: Vec<String>,
        resume: Resume,
    },
}

/// What a completed rendezvous gives every rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub generation: u64,
    pub peers: Vec<String>,
    pub resume: Resume,
    /// The parameters to start from (empty: start from a fresh model).
    pub model: Vec<f32>,
}

/// Told what happens while a rank waits.
pub trait Observer {
    /// `joined` of `world` ranks have joined.
    fn joined(&self, joined: u32, world: u32);
    /// A join was refused or a peer misbehaved; `kind` is the metric label.
    fn error(&self, kind: &str, message: &str);
}

/// Writes one length-prefixed frame.
///
/// # Errors
/// When the stream fails.
pub fn write_frame(w: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len()).map_err(|_| io::Error::other("frame too large"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(payload)?;
    w.flush()
}

/// Reads one length-prefixed frame of at most `max` bytes.
///
/// # Errors
/// When the stream fails or ends, or announces a frame larger than `max` (`InvalidData`).
pub fn read_frame(r: &mut impl Read, max: usize) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes announced, at most {max} expected (first bytes {len:08x})"),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

fn send(s: &mut TcpStream, m: &Message) -> io::Result<()> {
    write_frame(s, &serde_json::to_vec(m).map_err(io::Error::other)?)
}

fn recv(s: &mut TcpStream) -> io::Result<Message> {
    let frame = read_frame(s, MAX_JSON_FRAME)?;
    serde_json::from_slice(&frame).map_err(|e| {
        let text = String::from_utf8_lossy(&frame[..frame.len().min(60)]).into_owned();
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a rendezvous message ({e}): {text:?}"),
        )
    })
}

fn model_bytes(model: &[f32]) -> Vec<u8> {
    model.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn model_from(bytes: &[u8]) -> io::Result<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "model frame is not whole f32 values",
        ));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect())
}

/// The host side, run by rank 0.
#[derive(Debug)]
pub struct Host {
    listener: TcpListener,
    addr: String,
}

impl Host {
    /// Binds the rendezvous address. `addr` is what the other ranks connect to; when it names an address
    /// this host does not have (a Kubernetes Service IP, say), the same port is bound on all interfaces.
    /// `bind` overrides the address bound.
    ///
    /// # Errors
    /// [`WorkloadError::Connect`] when nothing can be bound (the port is in use, for example).
    pub fn bind(addr: &str, bind: Option<&str>) -> Result<Host> {
        let err = |a: &str, source| WorkloadError::Connect {
            what: "rendezvous listen address (bind)".into(),
            addr: a.into(),
            source,
        };
        let any_on = |port: u16, v6: bool| {
            SocketAddr::new(
                if v6 {
                    IpAddr::from([0u16; 8])
                } else {
                    IpAddr::from([0u8; 4])
                },
                port,
            )
        };
        let listener = if let Some(b) = bind {
            TcpListener::bind(b).map_err(|e| err(b, e))?
        } else {
            match addr.to_socket_addrs().map(|a| a.collect::<Vec<SocketAddr>>()) {
                Ok(resolved) if !resolved.is_empty() => match TcpListener::bind(&resolved[..]) {
                    Ok(l) => l,
                    // A Service IP or another host's name: listen on the same port everywhere.
                    Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                        let any = any_on(resolved[0].port(), resolved[0].is_ipv6());
                        TcpListener::bind(any).map_err(|e| err(&any.to_string(), e))?
                    }
                    Err(e) => return Err(err(addr, e)),
                },
                // A name that does not resolve yet (its DNS record follows the pod): the port is enough.
                resolved => {
                    let port = addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
                    let Some(port) = port else {
                        let e = resolved
                            .err()
                            .unwrap_or_else(|| io::Error::other("resolves to no address"));
                        return Err(err(addr, e));
                    };
                    let any = any_on(port, false);
                    TcpListener::bind(any).map_err(|e| err(&any.to_string(), e))?
                }
            }
        };
        listener.set_nonblocking(true).map_err(|e| err(addr, e))?;
        let local = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| addr.to_string());
        Ok(Host {
            listener,
            addr: local,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> &str {
        &self.addr
    }

    /// Waits until every rank has joined, then decides the resume point with `resume` and welcomes
    /// everyone. `me` is rank 0's own hello; its `ring_addr` host part may be left empty, to be filled in
    /// with the address the other ranks reached this host on.
    ///
    /// # Errors
    /// [`WorkloadError::Watchdog`] when not everyone joined by `deadline`; whatever `resume` fails with.
    pub fn run(
        &self,
        me: &Hello,
        deadline: Instant,
        observer: &dyn Observer,
        resume: impl FnOnce() -> Result<(Resume, Vec<f32>)>,
    ) -> Result<Outcome> {
        let started = Instant::now();
        let world = me.world_size;
        let mut joined: BTreeMap<u32, (TcpStream, Hello)> = BTreeMap::new();
        let mut last_beat = Instant::now();
        let mut last_count = u32::MAX;
        while (joined.len() as u32) + 1 < world {
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<String> = (1..world)
                    .filter(|r| !joined.contains_key(r))
                    .map(|r| r.to_string())
                    .collect();
                return Err(WorkloadError::Watchdog {
                    detail: format!(
                        "waited {:.0} s at rendezvous for {world} ranks; {} joined (missing: rank {})",
                        now.duration_since(started).as_secs_f64(),
                        joined.len() + 1,
                        missing.join(", ")
                    ),
                });
            }
            let mut changed = false;
            match self.listener.accept() {
                Ok((stream, from)) => changed |= self.admit(stream, from, me, &mut joined, observer),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => observer.error("protocol", &format!("rendezvous accept failed: {e}")),
            }
            if changed || last_beat.elapsed() >= HEARTBEAT {
                joined.retain(|_, (s, _)| alive(s));
                let ranks: Vec<u32> = std::iter::once(0).chain(joined.keys().copied()).collect();
                let msg = Message::Waiting {
                    joined: ranks,
                    world_size: world,
                };
                joined.retain(|_, (s, _)| send(s, &msg).is_ok());
                last_beat = Instant::now();
            }
            let count = joined.len() as u32 + 1;
            if count != last_count {
                observer.joined(count, world);
                last_count = count;
            }
            if !changed {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        observer.joined(world, world);

        let (resume, model) = resume()?;
        let generation: u64 = rand::random();
        let my_ip = joined
            .values()
            .next()
            .and_then(|(s, _)| s.local_addr().ok())
            .map(|a| a.ip());
        let mut peers = vec![fill_host(&me.ring_addr, my_ip)];
        peers.extend(joined.values().map(|(_, h)| h.ring_addr.clone()));
        let welcome = Message::Welcome {
            generation,
            peers: peers.clone(),
            resume: resume.clone(),
        };
        let model_frame = model_bytes(&model);
        for (rank, (s, _)) in &mut joined {
            let sent = s
                .set_write_timeout(Some(Duration::from_secs(10)))
                .and_then(|()| send(s, &welcome))
                .and_then(|()| write_frame(s, &model_frame));
            if let Err(e) = sent {
                // The ring setup will time out on the ranks that need this one; say why here.
                observer.error(
                    "peer_closed",
                    &format!("rank {rank} left before the welcome: {e}"),
                );
            }
        }
        Ok(Outcome {
            generation,
            peers,
            resume,
            model,
        })
    }

    /// Reads a joining rank's hello and admits or refuses it; true when the set of ranks changed.
    fn admit(
        &self,
        mut s: TcpStream,
        from: SocketAddr,
        me: &Hello,
        joined: &mut BTreeMap<u32, (TcpStream, Hello)>,
        observer: &dyn Observer,
    ) -> bool {
        let setup = s
            .set_nonblocking(false)
            .and_then(|()| s.set_read_timeout(Some(Duration::from_secs(2))))
            .and_then(|()| s.set_write_timeout(Some(Duration::from_secs(2))))
            .and_then(|()| s.set_nodelay(true));
        if setup.is_err() {
            return false;
        }
        let hello = match recv(&mut s) {
            Ok(Message::Hello(h)) => h,
            Ok(other) => {
                let reason = format!("{from} sent {other:?} instead of a hello");
                observer.error("protocol", &reason);
                let _ = send(
                    &mut s,
                    &Message::Reject {
                        kind: "protocol".into(),
                        reason,
                    },
                );
                return false;
            }
            Err(e) => {
                observer.error(
                    "protocol",
                    &format!("rendezvous connection from {from} sent garbage: {e}"),
                );
                return false;
            }
        };
        let refuse = |s: &mut TcpStream, kind: &str, reason: String| {
            observer.error(kind, &reason);
            let _ = send(
                s,
                &Message::Reject {
                    kind: kind.into(),
                    reason,
                },
            );
            false
        };
        if hello.protocol != PROTOCOL {
            return refuse(
                &mut s,
                "protocol",
                format!("{from} speaks {:?}, not {PROTOCOL}", hello.protocol),
            );
        }
        if hello.world_size != me.world_size {
            return refuse(
                &mut s,
                "world_size",
                format!(
                    "rank {} announced world size {} but rank 0 expects {}: give every rank the same --world-size \
                     (LAB_WORLD_SIZE)",
                    hello.rank, hello.world_size, me.world_size
                ),
            );
        }
        if hello.rank == 0 || hello.rank >= me.world_size {
            return refuse(
                &mut s,
                "config",
                format!(
                    "{from} claims rank {}, but ranks 1..{} join rank 0 (is a second rank 0 running?)",
                    hello.rank,
                    me.world_size - 1
                ),
            );
        }
        if hello.dataset != me.dataset || hello.model_size != me.model_size {
            return refuse(
                &mut s,
                "config",
                format!(
                    "rank {} trains dataset {:?} with model size {}, rank 0 dataset {:?} with model size {}",
                    hello.rank, hello.dataset, hello.model_size, me.dataset, me.model_size
                ),
            );
        }
        joined.insert(hello.rank, (s, hello));
        true
    }
}

/// True unless the peer has closed its end (checked without blocking or consuming anything).
fn alive(s: &TcpStream) -> bool {
    if s.set_nonblocking(true).is_err() {
        return false;
    }
    let mut b = [0u8; 1];
    let r = match s.peek(&mut b) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
    };
    r && s.set_nonblocking(false).is_ok()
}

/// `host:port` with the host filled in from `ip` when it is empty (`:29500` → `10.0.0.5:29500`).
fn fill_host(addr: &str, ip: Option<IpAddr>) -> String {
    match (addr.strip_prefix(':'), ip) {
        (Some(port), Some(ip)) => match port.parse::<u16>() {
            Ok(p) => SocketAddr::new(ip, p).to_string(),
            Err(_) => addr.to_string(),
        },
        (Some(port), None) => format!("127.0.0.1:{port}"),
        _ => addr.to_string(),
    }
}

/// Joins the rendezvous hosted at `addr` and waits for the welcome, reconnecting when the host is not
/// there yet or goes away, until `deadline`. `hello` builds this rank's hello from the local address of
/// the connection (the address the host, and so the other ranks, can reach this rank on).
///
/// # Errors
/// [`WorkloadError::Watchdog`] when the job did not assemble by `deadline`, saying how many ranks joined,
/// which are missing, and why this rank was refused or could not connect, if it was.
pub fn join(
    addr: &str,
    hello: &dyn Fn(IpAddr) -> Hello,
    deadline: Instant,
    observer: &dyn Observer,
) -> Result<Outcome> {
    let started = Instant::now();
    let mut last_problem = String::new();
    let mut last_reject: Option<String> = None;
    let mut last_joined: Option<(Vec<u32>, u32)> = None;
    loop {
        let now = Instant::now();
        if now >= deadline {
            let mut detail = format!(
                "waited {:.0} s at rendezvous",
                now.duration_since(started).as_secs_f64()
            );
            if let Some((joined, world)) = &last_joined {
                let missing: Vec<String> = (0..*world)
                    .filter(|r| !joined.contains(r))
                    .map(|r| r.to_string())
                    .collect();
                detail += &format!(
                    " for {world} ranks; {} joined (missing: rank {})",
                    joined.len(),
                    missing.join(", ")
                );
            }
            if let Some(reject) = &last_reject {
                detail += &format!("; {reject}");
            } else if !last_problem.is_empty() {
                detail += &format!("; {last_problem}");
            }
            return Err(WorkloadError::Watchdog { detail });
        }
        let mut s = match crate::http::connect(addr, "rank 0's rendezvous", Duration::from_secs(2)) {
            Ok(s) => s,
            Err(e) => {
                last_problem = format!(
                    "rank 0's rendezvous at {addr} is not reachable: {}",
                    lab_model::format::error_chain(&e)
                );
                std::thread::sleep(
                    Duration::from_millis(500).min(deadline.saturating_duration_since(Instant::now())),
                );
                continue;
            }
        };
        let local_ip = s
            .local_addr()
            .map(|a| a.ip())
            .unwrap_or(IpAddr::from([127, 0, 0, 1]));
        let me = hello(local_ip);
        if send(&mut s, &Message::Hello(me.clone())).is_err() {
            continue;
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let _ = s.set_read_timeout(Some(SILENCE.min(left).max(Duration::from_millis(1))));
            match recv(&mut s) {
                Ok(Message::Waiting { joined, world_size }) => {
                    observer.joined(joined.len() as u32, world_size);
                    last_joined = Some((joined, world_size));
                    last_reject = None;
                }
                Ok(Message::Reject { kind, reason }) => {
                    observer.error(&kind, &reason);
                    last_reject = Some(format!("rank 0 refused this rank: {reason}"));
                    std::thread::sleep(
                        Duration::from_secs(1).min(deadline.saturating_duration_since(Instant::now())),
                    );
                    break;
                }
                Ok(Message::Welcome {
                    generation,
                    peers,
                    resume,
                }) => {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                    let model =
                        read_frame(&mut s, crate::model::MAX_MODEL_SIZE * 4).and_then(|b| model_from(&b));
                    match model {
                        Ok(model) => {
                            if peers.len() != me.world_size as usize {
                                return Err(WorkloadError::protocol(
                                    "rank 0's rendezvous",
                                    addr,
                                    format!(
                                        "welcome lists {} ranks for world size {}",
                                        peers.len(),
                                        me.world_size
                                    ),
                                ));
                            }
                            if !model.is_empty() && crate::model::checksum(&model) != resume.model_crc {
                                return Err(WorkloadError::Checksum {
                                    what: "model received at rendezvous".into(),
                                    detail: "crc32 does not match the welcome".into(),
                                });
                            }
                            return Ok(Outcome {
                                generation,
                                peers,
                                resume,
                                model,
                            });
                        }
                        Err(e) => {
                            last_problem = format!("the welcome's model did not arrive: {e}");
                            break;
                        }
                    }
                }
                Ok(Message::Hello(_)) => {
                    observer.error("protocol", &format!("{addr} answered a hello with a hello"));
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    observer.error(
                        "protocol",
                        &format!("rank 0's rendezvous at {addr} sent garbage: {e}"),
                    );
                    last_problem = format!("rank 0's rendezvous at {addr} sent garbage");
                    std::thread::sleep(Duration::from_millis(500));
                    break;
                }
                Err(e) => {
                    // Silence or a closed connection: the host is gone or restarting. Join again.
                    last_problem = format!("lost rank 0's rendezvous at {addr}: {e}");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);
    impl Observer for Log {
        fn joined(&self, joined: u32, world: u32) {
            self.0.lock().unwrap().push(format!("joined {joined}/{world}"));
        }
        fn error(&self, kind: &str, message: &str) {
            self.0.lock().unwrap().push(format!("{kind}: {message}"));
        }
    }

    fn hello(rank: u32, world: u32) -> Hello {
        Hello {
            protocol: PROTOCOL.into(),
            rank,
            world_size: world,
            ring_addr: format!(":{}", 40000 + rank),
            dataset: "d".into(),
            model_size: 8,
        }
    }

    #[test]
    fn everyone_joins_late_and_gets_the_model() {
        let host = Host::bind("127.0.0.1:0", None).unwrap();
        let addr = host.local_addr().to_string();
        let clients: Vec<_> = (1..4u32)
            .map(|r| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(200 * u64::from(r)));
                    let log = Log::default();
                    let h = |ip: IpAddr| Hello {
                        ring_addr: SocketAddr::new(ip, 40000 + r as u16).to_string(),
                        ..hello(r, 4)
                    };
                    let out = join(&addr, &h, Instant::now() + Duration::from_secs(20), &log).unwrap();
                    (out, log.0.into_inner().unwrap())
                })
            })
            .collect();
        let log = Log::default();
        let resume = Resume {
            start_step: 300,
            checkpoint_step: Some(300),
            model_crc: crate::model::checksum(&[1.5, 2.5]),
            ..Resume::default()
        };
        let r2 = resume.clone();
        let out = host
            .run(
                &hello(0, 4),
                Instant::now() + Duration::from_secs(20),
                &log,
                move || Ok((r2, vec![1.5, 2.5])),
            )
            .unwrap();
        assert_eq!(
            out.peers,
            vec![
                "127.0.0.1:40000",
                "127.0.0.1:40001",
                "127.0.0.1:40002",
                "127.0.0.1:40003"
            ]
        );
        for c in clients {
            let (o, log) = c.join().unwrap();
            assert_eq!(o.peers, out.peers);
            assert_eq!(o.generation, out.generation);
            assert_eq!(o.resume, resume);
            assert_eq!(o.model, vec![1.5, 2.5]);
            assert!(log.iter().any(|l| l.ends_with("/4")), "{log:?}");
        }
        assert!(log.0.lock().unwrap().contains(&"joined 4/4".to_string()));
    }

    #[test]
    fn a_missing_rank_trips_the_watchdog_everywhere() {
        let host = Host::bind("127.0.0.1:0", None).unwrap();
        let addr = host.local_addr().to_string();
        let client = std::thread::spawn(move || {
            let h = |_: IpAddr| hello(1, 3);
            join(
                &addr,
                &h,
                Instant::now() + Duration::from_millis(2500),
                &Log::default(),
            )
            .unwrap_err()
            .to_string()
        });
        let err = host
            .run(
                &hello(0, 3),
                Instant::now() + Duration::from_millis(2000),
                &Log::default(),
                || unreachable!(),
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("watchdog: waited 2 s at rendezvous for 3 ranks; 2 joined (missing: rank 2)"),
            "{err}"
        );
        let err = client.join().unwrap();
        assert!(err.contains("for 3 ranks; 2 joined (missing: rank 2)"), "{err}");
    }

    #[test]
    fn another_world_size_or_garbage_is_refused_with_a_reason() {
        let host = Host::bind("127.0.0.1:0", None).unwrap();
        let addr = host.local_addr().to_string();
        let a2 = addr.clone();
        let client = std::thread::spawn(move || {
            let h = |_: IpAddr| hello(1, 4);
            join(
                &a2,
                &h,
                Instant::now() + Duration::from_millis(1500),
                &Log::default(),
            )
            .unwrap_err()
            .to_string()
        });
        let mut junk = TcpStream::connect(&addr).unwrap();
        junk.write_all(b"\xff\xff\xff\x7fnot a frame").unwrap();
        let log = Log::default();
        let _ = host.run(
            &hello(0, 5),
            Instant::now() + Duration::from_millis(1500),
            &log,
            || unreachable!(),
        );
        let err = client.join().unwrap();
        assert!(
            err.contains("rank 0 refused this rank: rank 1 announced world size 4 but rank 0 expects 5"),
            "{err}"
        );
        let log = log.0.into_inner().unwrap();
        assert!(
            log.iter()
                .any(|l| l.starts_with("world_size: rank 1 announced world size 4")),
            "{log:?}"
        );
        assert!(
            log.iter()
                .any(|l| l.starts_with("protocol: rendezvous connection from") && l.contains("garbage")),
            "{log:?}"
        );
    }

    #[test]
    fn rank_0_listens_on_the_port_when_the_address_is_not_its_own() {
        // A name that does not resolve (yet) and an address of another host: the port is enough. Nothing
        // connects; the listener is dropped at once.
        for addr in ["rendezvous.invalid:0", "192.0.2.1:0"] {
            let host = Host::bind(addr, None).unwrap();
            assert!(
                host.local_addr().starts_with("0.0.0.0:"),
                "{addr} -> {}",
                host.local_addr()
            );
        }
        assert!(Host::bind("no-port.invalid", None).is_err());
    }

    #[test]
    fn frames_refuse_oversized_announcements() {
        let mut data: &[u8] = &[0xff, 0xff, 0xff, 0xff, 1, 2, 3];
        assert_eq!(
            read_frame(&mut data, 100).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let mut buf = Vec::new();
        write_frame(&mut buf, b"abc").unwrap();
        assert_eq!(read_frame(&mut &buf[..], 100).unwrap(), b"abc");
    }
}
