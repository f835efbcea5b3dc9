//! A small HTTP/1.1 client over one keep-alive `TcpStream`, the transport of every storage read.
//!
//! The rank makes exactly one request per training step to the volume server that holds its batch, so the
//! client keeps that connection open across steps (no handshake per read) and reuses one body buffer. It
//! speaks only what SeaweedFS and the metrics endpoints need: `GET`/`POST`/`DELETE`, `Range`,
//! `Content-Length` and chunked bodies, and `Connection: close`.
//!
//! Hand-written on purpose: a read's latency is the lab's main signal, and this client adds no pool, retry,
//! redirect or async runtime between the rank's clock and the socket that a general client would.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::error::{Result, WorkloadError};

/// The largest response body the client accepts; anything larger is a protocol error, not an allocation.
pub const MAX_BODY: usize = 1 << 30;
const MAX_HEADER_LINE: usize = 16 * 1024;
const MAX_HEADERS: usize = 100;

/// What came back, besides the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// `Content-Range: bytes a-b/total` when the server answered a range.
    pub content_range: Option<(u64, u64, u64)>,
    /// The server will close the connection after this response.
    pub close: bool,
}

/// One keep-alive connection to one `host:port`, reconnecting when the server closed it.
#[derive(Debug)]
pub struct HttpConn {
    addr: String,
    what: String,
    timeout: Duration,
    conn: Option<BufReader<TcpStream>>,
    head: Vec<u8>,
}

impl HttpConn {
    /// A connection to `addr` (`host:port`), made on first use. `what` names the server in errors
    /// ("seaweedfs master", "volume server storage-1"); `timeout` bounds connect, and each read and write.
    pub fn new(addr: impl Into<String>, what: impl Into<String>, timeout: Duration) -> Self {
        HttpConn {
            addr: addr.into(),
            what: what.into(),
            timeout,
            conn: None,
            head: Vec::with_capacity(512),
        }
    }

    /// The `host:port` this connection talks to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Drops the connection; the next request opens a new one.
    pub fn reset(&mut self) {
        self.conn = None;
    }

    /// Sends one request and reads the whole response body into `body` (cleared first).
    ///
    /// A request on a reused connection that the server had already closed is retried once on a fresh
    /// connection; every request this client makes is idempotent (reads, and writes to a fixed file id).
    ///
    /// # Errors
    /// [`WorkloadError::Connect`] when the server cannot be reached, [`WorkloadError::Timeout`] when it
    /// does not answer in time, [`WorkloadError::Io`] when the connection breaks, and
    /// [`WorkloadError::Protocol`] when the answer is not HTTP/1.1 as expected.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        payload: &[u8],
        body: &mut Vec<u8>,
    ) -> Result<Response> {
        let reused = self.conn.is_some();
        match self.request_once(method, path, headers, payload, body) {
            Err(e) if reused && stale_connection(&e) => {
                self.conn = None;
                self.request_once(method, path, headers, payload, body)
            }
            other => other,
        }
    }

    /// `GET path` and the body into `body`.
    ///
    /// # Errors
    /// As [`HttpConn::request`].
    pub fn get(&mut self, path: &str, body: &mut Vec<u8>) -> Result<Response> {
        self.request("GET", path, &[], &[], body)
    }

    fn request_once(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        payload: &[u8],
        body: &mut Vec<u8>,
    ) -> Result<Response> {
        let HttpConn {
            addr,
            what,
            timeout,
            conn,
            head,
        } = self;
        let io_err = |e: io::Error| WorkloadError::io(what.as_str(), addr.as_str(), e, *timeout);
        head.clear();
        write!(
            head,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: lab-workloads\r\n"
        )
        .map_err(io_err)?;
        for (k, v) in headers {
            write!(head, "{k}: {v}\r\n").map_err(io_err)?;
        }
        if !payload.is_empty() || method == "POST" || method == "PUT" {
            write!(head, "Content-Length: {}\r\n", payload.len()).map_err(io_err)?;
        }
        head.extend_from_slice(b"\r\n");
        // A small payload goes in the same segment as the head.
        let inline = payload.len() <= 16 * 1024;
        if inline {
            head.extend_from_slice(payload);
        }
        if conn.is_none() {
            let stream = connect(addr, what, *timeout)?;
            *conn = Some(BufReader::with_capacity(64 * 1024, stream));
        }
        let reader = conn.as_mut().expect("connected above");
        let sent = reader.get_mut().write_all(head).and_then(|()| {
            if inline {
                Ok(())
            } else {
                reader.get_mut().write_all(payload)
            }
        });
        let result = match sent {
            Ok(()) => read_response(reader, method == "HEAD", body).map_err(|e| match e {
                ReadError::Io(e) => io_err(e),
                ReadError::Malformed(detail) => WorkloadError::protocol(what.as_str(), addr.as_str(), detail),
            }),
            Err(e) => Err(io_err(e)),
        };
        if result.as_ref().map_or(true, |r| r.close) {
            *conn = None;
        }
        result
    }
}

/// Whether an error on a reused keep-alive connection means the server closed it while idle.
fn stale_connection(e: &WorkloadError) -> bool {
    match e {
        WorkloadError::Io { source, .. } => matches!(
            source.kind(),
            io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionAborted
        ),
        _ => false,
    }
}

/// Resolves `addr` (every time: the name may move, as a Kubernetes Service or pod does) and connects to
/// the first address that answers, with no-delay set.
///
/// # Errors
/// [`WorkloadError::Connect`] when the name does not resolve or no address accepts.
pub fn connect(addr: &str, what: &str, timeout: Duration) -> Result<TcpStream> {
    let err = |source| WorkloadError::Connect {
        what: what.to_string(),
        addr: addr.to_string(),
        source,
    };
    let addrs = addr.to_socket_addrs().map_err(err)?;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name resolved to no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                s.set_nodelay(true).map_err(err)?;
                s.set_read_timeout(Some(timeout)).map_err(err)?;
                s.set_write_timeout(Some(timeout)).map_err(err)?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(err(last))
}

/// Why a response could not be read.
#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    Malformed(String),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Reads one HTTP/1.1 response (status line, headers, body) from `r`; the body goes into `body`.
///
/// # Errors
/// [`ReadError::Io`] when the stream fails or ends early, [`ReadError::Malformed`] when it is not HTTP.
pub fn read_response(
    r: &mut impl BufRead,
    head_only: bool,
    body: &mut Vec<u8>,
) -> Result<Response, ReadError> {
    body.clear();
    let mut line = Vec::with_capacity(128);
    read_line(r, &mut line)?;
    let status_line = std::str::from_utf8(&line).map_err(|_| malformed("status line is not text"))?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(malformed(format!(
            "not an HTTP/1.x status line: {:?}",
            truncate(status_line, 80)
        )));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|s| (100..=999).contains(s))
        .ok_or_else(|| malformed(format!("bad status in {:?}", truncate(status_line, 80))))?;
    let mut close = version == "HTTP/1.0";
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut content_range = None;
    for n in 0.. {
        if n > MAX_HEADERS {
            return Err(malformed("too many header lines"));
        }
        read_line(r, &mut line)?;
        if line.is_empty() {
            break;
        }
        let text = std::str::from_utf8(&line).map_err(|_| malformed("header is not text"))?;
        let Some((name, value)) = text.split_once(':') else {
            return Err(malformed(format!(
                "header without a colon: {:?}",
                truncate(text, 80)
            )));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .map_err(|_| malformed(format!("bad Content-Length {value:?}")))?;
            if n > MAX_BODY {
                return Err(malformed(format!(
                    "body of {n} bytes is larger than the {MAX_BODY} accepted"
                )));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        } else if name.eq_ignore_ascii_case("content-range") {
            content_range = parse_content_range(value);
        }
    }
    let no_body = head_only || status == 204 || status == 304 || (100..200).contains(&status);
    if no_body {
        return Ok(Response {
            status,
            content_range,
            close,
        });
    }
    if chunked {
        read_chunked(r, body, &mut line)?;
    } else if let Some(n) = length {
        // `read_to_end` fills spare capacity without zeroing it first (a reused buffer stays allocated).
        body.reserve(n);
        r.take(n as u64).read_to_end(body)?;
        if body.len() != n {
            let msg = format!("connection closed after {} of {n} body bytes", body.len());
            return Err(ReadError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, msg)));
        }
    } else {
        // No length and not chunked: the body runs to the end of the connection.
        r.take(MAX_BODY as u64 + 1).read_to_end(body)?;
        if body.len() > MAX_BODY {
            return Err(malformed("unbounded body larger than accepted"));
        }
        close = true;
    }
    Ok(Response {
        status,
        content_range,
        close,
    })
}

fn read_chunked(r: &mut impl BufRead, body: &mut Vec<u8>, line: &mut Vec<u8>) -> Result<(), ReadError> {
    loop {
        read_line(r, line)?;
        let text = std::str::from_utf8(line).map_err(|_| malformed("chunk size is not text"))?;
        let size_hex = text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| malformed(format!("bad chunk size {:?}", truncate(text, 40))))?;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                read_line(r, line)?;
                if line.is_empty() {
                    return Ok(());
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(malformed("chunked body larger than accepted"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        read_line(r, line)?;
        if !line.is_empty() {
            return Err(malformed("chunk not followed by CRLF"));
        }
    }
}

/// Reads one line without its CRLF (or LF) into `line`.
fn read_line(r: &mut impl BufRead, line: &mut Vec<u8>) -> Result<(), ReadError> {
    line.clear();
    let n = r
        .by_ref()
        .take(MAX_HEADER_LINE as u64 + 1)
        .read_until(b'\n', line)?;
    if n == 0 {
        return Err(ReadError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        )));
    }
    if line.last() != Some(&b'\n') {
        if line.len() > MAX_HEADER_LINE {
            return Err(malformed("header line too long"));
        }
        return Err(ReadError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed mid-line",
        )));
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(())
}

fn parse_content_range(v: &str) -> Option<(u64, u64, u64)> {
    let rest = v.strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    Some((
        a.trim().parse().ok()?,
        b.trim().parse().ok()?,
        total.trim().parse().ok()?,
    ))
}

fn malformed(s: impl Into<String>) -> ReadError {
    ReadError::Malformed(s.into())
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The body as text for an error message: lossy UTF-8, at most 200 characters.
pub fn body_snippet(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(&body[..body.len().min(400)]);
    truncate(s.trim(), 200).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &[u8]) -> (Result<Response, ReadError>, Vec<u8>) {
        let mut body = Vec::new();
        let r = read_response(&mut &raw[..], false, &mut body);
        (r, body)
    }

    #[test]
    fn reads_a_content_length_response() {
        let (r, body) =
            parse(b"HTTP/1.1 206 Partial Content\r\nContent-Length: 5\r\nContent-Range: bytes 10-14/100\r\n\r\nhello");
        let r = r.unwrap();
        assert_eq!(r.status, 206);
        assert_eq!(r.content_range, Some((10, 14, 100)));
        assert!(!r.close);
        assert_eq!(body, b"hello");
    }

    #[test]
    fn reads_a_chunked_response() {
        let (r, body) = parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\nWiki\r\n6;x=y\r\npedia \r\n0\r\n\r\n",
        );
        assert!(r.unwrap().close);
        assert_eq!(body, b"Wikipedia ");
    }

    #[test]
    fn refuses_garbage_without_panicking() {
        for raw in [
            &b"SSH-2.0-OpenSSH\r\n"[..],
            b"HTTP/1.1 abc OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
        ] {
            assert!(
                matches!(parse(raw).0, Err(ReadError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
        assert!(matches!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort").0,
            Err(ReadError::Io(_))
        ));
        assert!(matches!(parse(b"").0, Err(ReadError::Io(_))));
    }
}
