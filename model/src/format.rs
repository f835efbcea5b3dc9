//! How the lab writes a figure or an error for a person, the same in every crate that prints one.

/// An error and its sources on one line: `outer: cause: root cause`. A source whose text the line already
/// holds is left out, so an error that repeats its cause is not read twice.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        src = cause.source();
    }
    s
}

/// A latency given in seconds: `0.4 ms`, `2.5 ms`, `488 ms`, `1.25 s`. One decimal below 10 ms (where it
/// would round to `10.0 ms` it is written `10 ms`).
pub fn latency(s: f64) -> String {
    let ms = s * 1000.0;
    if ms < 9.95 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{s:.2} s")
    }
}

/// A latency given in milliseconds, as [`latency`] writes it.
pub fn latency_ms(ms: f64) -> String {
    latency(ms / 1000.0)
}

/// Seconds to a tenth, `-` when not measured: `8.0 s`.
pub fn opt_secs(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1} s"))
}

/// Seconds as a person reads a step time: `310 ms`, `4.30 s`.
pub fn fmt_s(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else {
        format!("{s:.2} s")
    }
}

/// Whether to colour what a person reads on a stream: only on a terminal, and never when `NO_COLOR` is set
/// to anything but the empty string (the convention of no-color.org, which an empty value does not trigger).
/// `no_color` is the variable's value, passed in so the decision is tested without touching the
/// environment; [`colour_for`] reads it.
pub fn colour(no_color: Option<&std::ffi::OsStr>, terminal: bool) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// [`colour`] with `NO_COLOR` read from the environment.
pub fn colour_for(terminal: bool) -> bool {
    colour(std::env::var_os("NO_COLOR").as_deref(), terminal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn an_error_chain_is_one_line_without_repeats() {
        let root = E("connection refused", None);
        let mid = E("cannot reach storage-1: connection refused", Some(Box::new(root)));
        let top = E("read failed", Some(Box::new(mid)));
        assert_eq!(
            error_chain(&top),
            "read failed: cannot reach storage-1: connection refused"
        );
        assert_eq!(error_chain(&E("alone", None)), "alone");
    }

    #[test]
    fn latencies() {
        assert_eq!(latency(0.00042), "0.4 ms");
        assert_eq!(latency(0.0025), "2.5 ms");
        assert_eq!(latency(0.00996), "10 ms");
        assert_eq!(latency(0.488), "488 ms");
        assert_eq!(latency(1.5), "1.50 s");
        assert_eq!(latency_ms(414.0), "414 ms");
        assert_eq!(latency_ms(2.9), "2.9 ms");
        assert_eq!(opt_secs(Some(8.0)), "8.0 s");
        assert_eq!(opt_secs(None), "-");
    }

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color_set() {
        use std::ffi::OsStr;
        assert!(colour(None, true));
        assert!(!colour(None, false));
        assert!(!colour(Some(OsStr::new("1")), true));
        assert!(
            !colour(Some(OsStr::new("0")), true),
            "any value but empty turns colour off"
        );
        assert!(
            colour(Some(OsStr::new("")), true),
            "an empty NO_COLOR is as if unset"
        );
        assert!(!colour(Some(OsStr::new("")), false));
    }
}
