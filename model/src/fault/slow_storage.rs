//! slow-storage: one storage server answers every request late (the seed's first fault).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ParseError, Shape, Spec, ms};
use crate::quantity::format_duration;

/// The longest storage delay the lab injects.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// Storage server `server` answers every request `delay` (± `jitter`) late.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct SlowStorage {
    /// The storage server.
    #[arg(long, default_value_t = 1)]
    pub server: u32,
    /// Added to every answer (e.g. 300ms, 1.5s).
    #[arg(long, default_value = "300ms", value_parser = crate::parse_duration)]
    #[serde(with = "ms")]
    pub delay: Duration,
    /// Uniform jitter, plus or minus.
    #[arg(long, default_value = "0ms", value_parser = crate::parse_duration)]
    #[serde(with = "ms")]
    pub jitter: Duration,
}

impl Spec for SlowStorage {
    const NAME: &'static str = "slow-storage";
    const SUMMARY: &'static str = "one storage server answers every request late";
    const ABOUT: &'static str = "One storage server answers every request late";
    // A delay added in front of one storage server: the server itself answers in time.
    const CAUSE: &'static str = "bad-network-path";
    const KEY: Option<(char, &'static str)> = Some(('s', "storage-1 answers 300 ms late"));

    fn validate(&self) -> Result<(), ParseError> {
        if self.delay.is_zero() {
            return Err(ParseError::Fault(
                "--delay must be more than 0 (e.g. 300ms)".into(),
            ));
        }
        if self.delay > MAX_DELAY {
            return Err(ParseError::Fault(format!(
                "--delay {} is absurd for a lab: at most {}",
                format_duration(self.delay),
                format_duration(MAX_DELAY)
            )));
        }
        if self.jitter > self.delay {
            return Err(ParseError::Fault("--jitter must not exceed --delay".into()));
        }
        Ok(())
    }

    fn vary(&self, shape: Shape, pick: &mut dyn FnMut(u64, u64) -> u64) -> Self {
        SlowStorage {
            server: shape.server(pick),
            delay: Duration::from_millis(pick(3, 12) * 50),
            jitter: Duration::ZERO,
        }
    }

    fn target(&self) -> String {
        crate::names::storage(self.server)
    }

    fn placeholders(&self, v: &mut Vec<(&'static str, String)>) {
        v.push(("server", self.server.to_string()));
        v.push(("delay", format_duration(self.delay)));
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slow-storage on storage-{}: +{}",
            self.server,
            format_duration(self.delay)
        )?;
        if !self.jitter.is_zero() {
            write!(f, " ± {}", format_duration(self.jitter))?;
        }
        Ok(())
    }
}
