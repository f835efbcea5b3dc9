//! `lab-proxy`: a latency proxy in front of one storage server, with an HTTP control API.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use lab_latency_proxy::{DelaySetting, SharedDelay, control, pump};
use tokio::net::TcpListener;

/// A TCP proxy in front of one storage server that can delay what the server sends back, like tc netem.
///
/// With no delay set it copies bytes straight through. Set or read the delay with the control API:
///   curl -X PUT -d '{"delay_ms":300,"jitter_ms":0}' http://CONTROL/delay
///   curl http://CONTROL/delay
/// It also serves /healthz and /metrics on the control address.
#[derive(Debug, Parser)]
#[command(name = "lab-proxy", version)]
struct Args {
    /// Where clients connect (the server's address as clients know it).
    #[arg(long, env = "LAB_PROXY_LISTEN")]
    listen: SocketAddr,
    /// The real server, HOST:PORT.
    #[arg(long, env = "LAB_PROXY_UPSTREAM")]
    upstream: String,
    /// Where the control API listens.
    #[arg(long, env = "LAB_PROXY_CONTROL")]
    control: SocketAddr,
    /// A delay to start with, in milliseconds.
    #[arg(long, default_value_t = 0.0, env = "LAB_PROXY_DELAY_MS")]
    delay_ms: f64,
    /// Jitter to start with, plus or minus, in milliseconds.
    #[arg(long, default_value_t = 0.0, env = "LAB_PROXY_JITTER_MS")]
    jitter_ms: f64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let initial = DelaySetting {
        delay_ms: args.delay_ms,
        jitter_ms: args.jitter_ms,
    };
    initial.validate()?;
    let delay = SharedDelay::new(initial);
    let data = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let ctl = TcpListener::bind(args.control)
        .await
        .with_context(|| format!("cannot listen on {}", args.control))?;
    eprintln!(
        "lab-proxy: {} -> {} (control {}), delay {} ms ± {} ms",
        data.local_addr()?,
        args.upstream,
        ctl.local_addr()?,
        initial.delay_ms,
        initial.jitter_ms
    );
    tokio::select! {
        () = pump::serve(data, args.upstream, delay.clone()) => {}
        () = control::serve(ctl, delay) => {}
        r = tokio::signal::ctrl_c() => { r?; }
    }
    Ok(())
}
