//! Moving bytes: accept clients, connect each to the upstream server, copy requests straight through and
//! hold the server's bytes for the current delay before passing them on.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::SharedDelay;

const CHUNK: usize = 64 * 1024;
/// Chunks in flight per connection while a delay holds them; bounds memory when a client reads slowly.
const QUEUE: usize = 256;

/// Accepts clients on `listener` forever, forwarding each to `upstream` through `delay`.
pub async fn serve(listener: TcpListener, upstream: String, delay: Arc<SharedDelay>) {
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                delay.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(forward(client, upstream.clone(), delay.clone()));
            }
            // Out of descriptors or a transient accept error: back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Forwards one client connection until either side closes.
pub async fn forward(client: TcpStream, upstream: String, delay: Arc<SharedDelay>) {
    let Ok(server) = TcpStream::connect(&upstream).await else {
        // The client sees its connection close, as it would if the server were down.
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = copy_through(cr, sw, delay.clone());
    let down = copy_delayed(sr, cw, delay);
    tokio::join!(up, down);
}

async fn copy_through(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Arc<SharedDelay>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                delay.bytes_up.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
    let _ = to.shutdown().await;
}

/// Copies server → client, holding every chunk until `arrival + delay`, in arrival order (like netem
/// without reordering: a later chunk is never released before an earlier one).
async fn copy_delayed(mut from: OwnedReadHalf, to: OwnedWriteHalf, delay: Arc<SharedDelay>) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE);
    let writer = tokio::spawn(release(rx, to, delay.clone()));
    let mut last = Instant::now();
    loop {
        let mut buf = vec![0u8; CHUNK];
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                buf.truncate(n);
                let hold = delay.sample();
                if !hold.is_zero() {
                    delay.delayed_chunks.fetch_add(1, Ordering::Relaxed);
                }
                let at = (Instant::now() + hold).max(last);
                last = at;
                if tx.send((at, buf)).await.is_err() {
                    break;
                }
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}

async fn release(
    mut rx: mpsc::Receiver<(Instant, Vec<u8>)>,
    mut to: OwnedWriteHalf,
    delay: Arc<SharedDelay>,
) {
    while let Some((at, buf)) = rx.recv().await {
        if at > Instant::now() {
            tokio::time::sleep_until(at).await;
        }
        if to.write_all(&buf).await.is_err() {
            return;
        }
        delay.bytes_down.fetch_add(buf.len() as u64, Ordering::Relaxed);
    }
    let _ = to.shutdown().await;
}
