//! Just enough of PostgreSQL's frontend/backend protocol (version 3) for the lab's writer: connect with
//! trust authentication on loopback, run a simple query, read its rows as text. No TLS, no password, no
//! extended protocol: the lab's database listens on 127.0.0.1 only and trusts it.
//!
//! A commit waiting for a synchronous standby is a query that does not answer; the caller decides how long
//! to wait (`timeout`), and the writer waits for as long as it takes, measuring the wait.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The protocol version sent in the startup message (3.0).
const PROTOCOL_3: i32 = 196_608;
/// The largest backend message accepted; the lab's queries answer a few bytes.
const MAX_MESSAGE: usize = 16 << 20;

/// What went wrong talking to the database.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The connection failed, was closed, or a read timed out.
    #[error("database at {addr}: {what}")]
    Io {
        addr: String,
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The server answered with an error.
    #[error("database error {code}: {message}")]
    Server { code: String, message: String },
    /// The server answered something this client does not speak.
    #[error("database protocol: {0}")]
    Protocol(String),
}

/// Rows of a query's answer, each column as text (`None` for SQL NULL).
pub type Rows = Vec<Vec<Option<String>>>;

/// One connection to a PostgreSQL server.
#[derive(Debug)]
pub struct PgConn {
    stream: TcpStream,
    addr: String,
}

impl PgConn {
    /// Connects to `addr` (`127.0.0.1:5432`) as `user` to database `db`, naming itself `app`
    /// (`application_name`). `timeout` bounds the connect and every read until [`PgConn::set_timeout`].
    ///
    /// # Errors
    /// [`PgError::Io`] when the server cannot be reached; [`PgError::Server`] when it refuses the
    /// connection; [`PgError::Protocol`] when it asks for a password.
    pub fn connect(addr: &str, user: &str, db: &str, app: &str, timeout: Duration) -> Result<Self, PgError> {
        let io = |what: &str| {
            let (addr, what) = (addr.to_string(), what.to_string());
            move |source| PgError::Io { addr, what, source }
        };
        // A name (a pod's Service name on Kubernetes) is looked up at every connect: a primary made
        // again answers at its new address.
        let sock = std::net::ToSocketAddrs::to_socket_addrs(addr)
            .map_err(|e| {
                PgError::Protocol(format!(
                    "{addr:?} is not an address that resolves (HOST:PORT, e.g. 127.0.0.1:5432): {e}"
                ))
            })?
            .next()
            .ok_or_else(|| PgError::Protocol(format!("{addr:?} resolves to no address")))?;
        let stream = TcpStream::connect_timeout(&sock, timeout).map_err(io("connect"))?;
        stream.set_nodelay(true).map_err(io("set no-delay"))?;
        let mut c = PgConn {
            stream,
            addr: addr.to_string(),
        };
        c.set_timeout(Some(timeout))?;
        c.stream
            .write_all(&startup_message(user, db, app))
            .map_err(io("send the startup message"))?;
        loop {
            let (tag, body) = c.read_message()?;
            match tag {
                b'R' => {
                    let code = be_i32(&body, 0)?;
                    if code != 0 {
                        return Err(PgError::Protocol(format!(
                            "the server asks for authentication method {code}; the lab's database trusts \
                             the lab's own connections and this client sends no password"
                        )));
                    }
                }
                b'E' => return Err(server_error(&body)),
                b'Z' => return Ok(c),
                // ParameterStatus, BackendKeyData, notices: nothing the lab needs.
                _ => {}
            }
        }
    }

    /// Bounds every later read (`None`: wait for as long as the server takes).
    ///
    /// # Errors
    /// [`PgError::Io`] when the socket refuses the option.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), PgError> {
        self.stream
            .set_read_timeout(timeout)
            .map_err(|source| PgError::Io {
                addr: self.addr.clone(),
                what: "set a read timeout".into(),
                source,
            })
    }

    /// Runs `sql` (one or more statements, simple protocol) and returns the rows of its answer.
    ///
    /// # Errors
    /// [`PgError::Server`] for an SQL error (the connection stays usable); [`PgError::Io`] when the
    /// connection fails or a read times out (the connection is then unusable).
    pub fn query(&mut self, sql: &str) -> Result<Rows, PgError> {
        self.stream
            .write_all(&query_message(sql))
            .map_err(|source| PgError::Io {
                addr: self.addr.clone(),
                what: "send a query".into(),
                source,
            })?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let (tag, body) = self.read_message()?;
            match tag {
                b'D' => rows.push(data_row(&body)?),
                b'E' => error = Some(server_error(&body)),
                b'Z' => break,
                _ => {}
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(rows),
        }
    }

    fn read_message(&mut self) -> Result<(u8, Vec<u8>), PgError> {
        let mut head = [0u8; 5];
        self.read_exact(&mut head, "read a message")?;
        let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let len = usize::try_from(len)
            .ok()
            .filter(|l| (4..=MAX_MESSAGE).contains(l))
            .ok_or_else(|| PgError::Protocol(format!("message length {len} out of range")))?;
        let mut body = vec![0u8; len - 4];
        self.read_exact(&mut body, "read a message body")?;
        Ok((head[0], body))
    }

    fn read_exact(&mut self, buf: &mut [u8], what: &str) -> Result<(), PgError> {
        self.stream.read_exact(buf).map_err(|source| PgError::Io {
            addr: self.addr.clone(),
            what: what.into(),
            source,
        })
    }
}

/// The startup message: protocol 3.0 and the connection's parameters.
pub fn startup_message(user: &str, db: &str, app: &str) -> Vec<u8> {
    let mut body = PROTOCOL_3.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", db), ("application_name", app)] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut msg = len_prefix(body.len()).to_vec();
    msg.extend_from_slice(&body);
    msg
}

/// A simple query message.
pub fn query_message(sql: &str) -> Vec<u8> {
    let mut msg = vec![b'Q'];
    msg.extend_from_slice(&len_prefix(sql.len() + 1));
    msg.extend_from_slice(sql.as_bytes());
    msg.push(0);
    msg
}

fn len_prefix(body: usize) -> [u8; 4] {
    i32::try_from(body + 4).unwrap_or(i32::MAX).to_be_bytes()
}

fn be_i32(b: &[u8], at: usize) -> Result<i32, PgError> {
    b.get(at..at + 4)
        .map(|s| i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| PgError::Protocol("message too short".into()))
}

/// A DataRow's columns as text.
pub fn data_row(body: &[u8]) -> Result<Vec<Option<String>>, PgError> {
    let n = body
        .get(0..2)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
        .ok_or_else(|| PgError::Protocol("data row too short".into()))?;
    let mut at = 2;
    let mut cols = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let len = be_i32(body, at)?;
        at += 4;
        if len < 0 {
            cols.push(None);
            continue;
        }
        let end = at + usize::try_from(len).unwrap_or(usize::MAX);
        let v = body
            .get(at..end)
            .ok_or_else(|| PgError::Protocol("data row column past its end".into()))?;
        cols.push(Some(String::from_utf8_lossy(v).into_owned()));
        at = end;
    }
    Ok(cols)
}

/// An ErrorResponse's SQLSTATE code and message.
pub fn server_error(body: &[u8]) -> PgError {
    let (mut code, mut message) = (String::new(), String::new());
    for field in body.split(|b| *b == 0) {
        let Some((&t, v)) = field.split_first() else {
            continue;
        };
        let v = String::from_utf8_lossy(v).into_owned();
        match t {
            b'C' => code = v,
            b'M' => message = v,
            _ => {}
        }
    }
    PgError::Server { code, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_startup_message_carries_its_length_and_parameters() {
        let m = startup_message("postgres", "lab", "lab-writer");
        assert_eq!(be_i32(&m, 0).unwrap() as usize, m.len());
        assert_eq!(be_i32(&m, 4).unwrap(), PROTOCOL_3);
        assert!(m.ends_with(b"application_name\0lab-writer\0\0"));
    }

    #[test]
    fn a_query_is_tagged_and_nul_terminated() {
        let m = query_message("SELECT 1");
        assert_eq!(m[0], b'Q');
        assert_eq!(be_i32(&m, 1).unwrap(), 4 + 9);
        assert_eq!(&m[5..], b"SELECT 1\0");
    }

    #[test]
    fn data_rows_read_text_and_null() {
        let mut b = 2u16.to_be_bytes().to_vec();
        b.extend_from_slice(&2i32.to_be_bytes());
        b.extend_from_slice(b"42");
        b.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(data_row(&b).unwrap(), vec![Some("42".into()), None]);
        // A column longer than the message is refused, not read past.
        let mut bad = 1u16.to_be_bytes().to_vec();
        bad.extend_from_slice(&9i32.to_be_bytes());
        bad.extend_from_slice(b"ab");
        assert!(data_row(&bad).is_err());
    }

    #[test]
    fn errors_name_their_code_and_message() {
        let body = b"SERROR\0C42P01\0Mrelation \"t\" does not exist\0\0";
        let e = server_error(body).to_string();
        assert!(
            e.contains("42P01") && e.contains("relation \"t\" does not exist"),
            "{e}"
        );
    }
}
