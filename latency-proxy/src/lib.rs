//! The lab's latency proxy: a userspace TCP proxy in front of one storage server that delays what the
//! server sends back, the way `tc netem` on the server's interface would.
//!
//! It is the network path the slow-storage fault acts on wherever the kernel has no `sch_netem` (this
//! includes many laptops, WSL2 and CI machines). With no delay set, bytes are copied straight through and
//! the proxy adds no measurable latency. A delay applies to every chunk the server sends, in order, with
//! each chunk held for the delay (± jitter) from the moment it arrived, so a delay never compounds across
//! a response and a change of delay takes effect on open connections at once.

pub mod control;
pub mod error;
pub mod pump;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use error::ProxyError;

/// The delay the proxy adds, as the control API reads and writes it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct DelaySetting {
    /// Added to every chunk the server sends, in milliseconds.
    pub delay_ms: f64,
    /// Uniform jitter, plus or minus, in milliseconds.
    #[serde(default)]
    pub jitter_ms: f64,
}

impl DelaySetting {
    /// The largest delay the proxy accepts: anything longer is a mistake, not a lab scenario.
    pub const MAX_MS: f64 = 60_000.0;

    /// Checks the values are finite, non-negative, and the jitter is no larger than the delay.
    ///
    /// # Errors
    /// [`ProxyError::InvalidDelay`] saying what is wrong.
    pub fn validate(&self) -> Result<(), ProxyError> {
        let bad = |why: &str| Err(ProxyError::InvalidDelay(why.to_string()));
        if !self.delay_ms.is_finite() || !self.jitter_ms.is_finite() {
            return bad("delay and jitter must be numbers");
        }
        if self.delay_ms < 0.0 || self.jitter_ms < 0.0 {
            return bad("delay and jitter must not be negative");
        }
        if self.delay_ms > Self::MAX_MS {
            return bad("delay must be at most 60000 ms");
        }
        if self.jitter_ms > self.delay_ms {
            return bad("jitter must not exceed the delay");
        }
        Ok(())
    }
}

/// The delay shared by every connection of one proxy; changes apply to open connections at once.
#[derive(Debug, Default)]
pub struct SharedDelay {
    delay_us: AtomicU64,
    jitter_us: AtomicU64,
    /// Counters for `/metrics`.
    pub connections: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
    pub delayed_chunks: AtomicU64,
}

impl SharedDelay {
    /// A proxy delay starting at `initial`.
    pub fn new(initial: DelaySetting) -> Arc<Self> {
        let s = Arc::new(SharedDelay::default());
        s.set(initial);
        s
    }

    /// Sets the delay (already validated).
    pub fn set(&self, d: DelaySetting) {
        self.delay_us
            .store((d.delay_ms * 1000.0).round() as u64, Ordering::SeqCst);
        self.jitter_us
            .store((d.jitter_ms * 1000.0).round() as u64, Ordering::SeqCst);
    }

    /// The delay now.
    pub fn get(&self) -> DelaySetting {
        DelaySetting {
            delay_ms: self.delay_us.load(Ordering::SeqCst) as f64 / 1000.0,
            jitter_ms: self.jitter_us.load(Ordering::SeqCst) as f64 / 1000.0,
        }
    }

    /// The hold time for one chunk: the delay plus a uniform sample of the jitter, or zero.
    pub fn sample(&self) -> Duration {
        let d = self.delay_us.load(Ordering::Relaxed);
        let j = self.jitter_us.load(Ordering::Relaxed);
        if d == 0 {
            return Duration::ZERO;
        }
        let us = if j == 0 {
            d
        } else {
            let off = rand::random_range(0..=2 * j);
            (d + off).saturating_sub(j)
        };
        Duration::from_micros(us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert!(
            DelaySetting {
                delay_ms: 300.0,
                jitter_ms: 20.0
            }
            .validate()
            .is_ok()
        );
        assert!(
            DelaySetting {
                delay_ms: 0.0,
                jitter_ms: 0.0
            }
            .validate()
            .is_ok()
        );
        for bad in [
            (-1.0, 0.0),
            (10.0, 20.0),
            (f64::NAN, 0.0),
            (61_000.0, 0.0),
            (5.0, -1.0),
        ] {
            assert!(
                DelaySetting {
                    delay_ms: bad.0,
                    jitter_ms: bad.1
                }
                .validate()
                .is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn jitter_stays_in_bounds() {
        let s = SharedDelay::new(DelaySetting {
            delay_ms: 100.0,
            jitter_ms: 10.0,
        });
        for _ in 0..1000 {
            let d = s.sample();
            assert!(
                d >= Duration::from_millis(90) && d <= Duration::from_millis(110),
                "{d:?}"
            );
        }
        s.set(DelaySetting::default());
        assert_eq!(s.sample(), Duration::ZERO);
    }
}
