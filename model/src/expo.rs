//! The Prometheus text exposition format (0.0.4), read into samples.
//!
//! The lab writes its own reader rather than trusting a scrape target: every input, however broken, gives
//! either samples or a [`ParseError`] naming the line, never a panic. `# HELP` and `# TYPE` lines and
//! other comments are skipped; a sample's own timestamp is kept but the collector stamps samples with the
//! scrape time, as Prometheus does for targets that send none.
//!
//! Hand-written on purpose: it is fuzzed (`fuzz/fuzz_targets/expo_parse.rs`) to that promise, and it is the
//! one reader of exposition text in the lab (the Kubernetes runtime reads ranks' steps with it too).

use crate::labels::Labels;

/// Why a line of Prometheus text exposition could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// The metric name is missing or has characters outside `[a-zA-Z0-9_:]`.
    MetricName,
    /// A label name is missing or has characters outside `[a-zA-Z0-9_]`.
    LabelName,
    /// A label is not written `name="value"`.
    LabelSyntax,
    /// A label value uses an escape other than `\\`, `\"` or `\n`.
    Escape,
    /// The `{...}` label set is not closed.
    Unterminated,
    /// The same label name appears twice in one sample.
    DuplicateLabel,
    /// The sample has no value.
    MissingValue,
    /// The value is not a float (`1.5`, `1e3`, `NaN`, `+Inf`).
    Value,
    /// The timestamp is not an integer of milliseconds.
    Timestamp,
    /// Something follows the timestamp.
    Trailing,
}

impl std::fmt::Display for ParseErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ParseErrorKind::MetricName => "invalid metric name",
            ParseErrorKind::LabelName => "invalid label name",
            ParseErrorKind::LabelSyntax => "expected name=\"value\" in the label set",
            ParseErrorKind::Escape => "invalid escape in a label value",
            ParseErrorKind::Unterminated => "label set not closed",
            ParseErrorKind::DuplicateLabel => "duplicate label name",
            ParseErrorKind::MissingValue => "missing sample value",
            ParseErrorKind::Value => "sample value is not a number",
            ParseErrorKind::Timestamp => "timestamp is not an integer",
            ParseErrorKind::Trailing => "unexpected text after the sample",
        })
    }
}

/// A metrics text that is not valid Prometheus text exposition (format 0.0.4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metrics text line {line}: {kind}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    pub kind: ParseErrorKind,
}

/// One sample line: a series and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name, e.g. `lab_steps_total` or `lab_step_duration_seconds_bucket`.
    pub name: String,
    pub labels: Labels,
    pub value: f64,
    /// The optional timestamp written after the value, in ms since the Unix epoch.
    pub timestamp_ms: Option<i64>,
}

/// Reads a whole exposition text.
///
/// # Errors
/// The first line that is not a comment, a blank line or a valid sample, with its 1-based number.
pub fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let trimmed = line.trim_start_matches([' ', '\t']);
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let sample = parse_line(trimmed).map_err(|kind| ParseError { line: i + 1, kind })?;
        out.push(sample);
    }
    Ok(out)
}

fn is_name_start(b: u8, colon: bool) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || (colon && b == b':')
}

fn is_name_char(b: u8, colon: bool) -> bool {
    is_name_start(b, colon) || b.is_ascii_digit()
}

/// A cursor over one line. Only ever stops at ASCII bytes, which are always char boundaries.
struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    fn skip_blanks(&mut self) -> bool {
        let start = self.pos;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
        self.pos > start
    }

    fn name(&mut self, colon: bool) -> Option<&'a str> {
        let start = self.pos;
        match self.peek() {
            Some(b) if is_name_start(b, colon) => self.pos += 1,
            _ => return None,
        }
        while matches!(self.peek(), Some(b) if is_name_char(b, colon)) {
            self.pos += 1;
        }
        self.s.get(start..self.pos)
    }

    fn token(&mut self) -> Option<&'a str> {
        let start = self.pos;
        while matches!(self.peek(), Some(b) if b != b' ' && b != b'\t') {
            self.pos += 1;
        }
        if self.pos == start {
            None
        } else {
            self.s.get(start..self.pos)
        }
    }

    /// A quoted label value after the opening quote, unescaped; consumes the closing quote.
    fn quoted(&mut self) -> Result<String, ParseErrorKind> {
        let rest = self.s.get(self.pos..).ok_or(ParseErrorKind::Unterminated)?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(value);
                }
                '\\' => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    Some(_) => return Err(ParseErrorKind::Escape),
                    None => return Err(ParseErrorKind::Unterminated),
                },
                c => value.push(c),
            }
        }
        Err(ParseErrorKind::Unterminated)
    }
}

fn parse_line(line: &str) -> Result<Sample, ParseErrorKind> {
    let mut c = Cursor { s: line, pos: 0 };
    let name = c.name(true).ok_or(ParseErrorKind::MetricName)?.to_string();
    let mut labels = Labels::new();
    let mut seen: Vec<&str> = Vec::new();
    if c.peek() == Some(b'{') {
        c.pos += 1;
        loop {
            c.skip_blanks();
            match c.peek() {
                Some(b'}') => {
                    c.pos += 1;
                    break;
                }
                None => return Err(ParseErrorKind::Unterminated),
                _ => {}
            }
            let lname = c.name(false).ok_or(ParseErrorKind::LabelName)?;
            c.skip_blanks();
            if c.peek() != Some(b'=') {
                return Err(ParseErrorKind::LabelSyntax);
            }
            c.pos += 1;
            c.skip_blanks();
            if c.peek() != Some(b'"') {
                return Err(ParseErrorKind::LabelSyntax);
            }
            c.pos += 1;
            let value = c.quoted()?;
            if seen.contains(&lname) {
                return Err(ParseErrorKind::DuplicateLabel);
            }
            seen.push(lname);
            labels.set(lname, value);
            c.skip_blanks();
            match c.peek() {
                Some(b',') => c.pos += 1,
                Some(b'}') => {}
                None => return Err(ParseErrorKind::Unterminated),
                _ => return Err(ParseErrorKind::LabelSyntax),
            }
        }
    }
    if !c.skip_blanks() {
        return Err(if c.peek().is_none() {
            ParseErrorKind::MissingValue
        } else {
            ParseErrorKind::MetricName
        });
    }
    let value = parse_value(c.token().ok_or(ParseErrorKind::MissingValue)?)?;
    c.skip_blanks();
    let timestamp_ms = match c.token() {
        None => None,
        Some(t) => Some(t.parse::<i64>().map_err(|_| ParseErrorKind::Timestamp)?),
    };
    c.skip_blanks();
    if c.peek().is_some() {
        return Err(ParseErrorKind::Trailing);
    }
    Ok(Sample {
        name,
        labels,
        value,
        timestamp_ms,
    })
}

/// Go's `strconv.ParseFloat` as the exposition format uses it: decimals, exponents, `NaN`, `±Inf`.
fn parse_value(t: &str) -> Result<f64, ParseErrorKind> {
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    let special = ["inf", "infinity", "nan"]
        .iter()
        .any(|w| body.eq_ignore_ascii_case(w));
    let plain = !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    if !special && !plain {
        return Err(ParseErrorKind::Value);
    }
    t.parse::<f64>().map_err(|_| ParseErrorKind::Value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Sample {
        let mut v = parse(line).unwrap();
        assert_eq!(v.len(), 1, "{line}");
        v.remove(0)
    }

    fn err(text: &str) -> ParseErrorKind {
        parse(text).unwrap_err().kind
    }

    #[test]
    fn plain_and_labelled_samples() {
        let s = one("lab_steps_total 42");
        assert_eq!(
            (s.name.as_str(), s.value, s.labels.is_empty()),
            ("lab_steps_total", 42.0, true)
        );
        let s = one(r#"lab_phase_seconds_total{phase="wait",} 1.5e1 1700000000000"#);
        assert_eq!(s.labels.get("phase"), Some("wait"));
        assert_eq!(s.value, 15.0);
        assert_eq!(s.timestamp_ms, Some(1_700_000_000_000));
        let s = one("x{ a = \"1\" , b=\"\\\"q\\\\\\n\" }\t+Inf");
        assert_eq!(s.labels.get("b"), Some("\"q\\\n"));
        assert!(s.value.is_infinite());
        assert!(one("x NaN").value.is_nan());
        assert_eq!(one("x -Inf").value, f64::NEG_INFINITY);
        assert_eq!(one("x infinity").value, f64::INFINITY);
        assert_eq!(one("ns:rule_x{} 1").name, "ns:rule_x");
    }

    #[test]
    fn comments_blank_lines_and_crlf() {
        let v = parse("# HELP x help\r\n# TYPE x counter\r\n\r\n  x 1\r\n#EOF").unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].value, 1.0);
    }

    #[test]
    fn unicode_label_values() {
        assert_eq!(one("x{a=\"é→\\\"\"} 2").labels.get("a"), Some("é→\""));
    }

    #[test]
    fn broken_lines_name_their_fault() {
        assert_eq!(err("1x 2"), ParseErrorKind::MetricName);
        assert_eq!(err("x{1a=\"v\"} 2"), ParseErrorKind::LabelName);
        assert_eq!(err("x{a\"v\"} 2"), ParseErrorKind::LabelSyntax);
        assert_eq!(err("x{a=v} 2"), ParseErrorKind::LabelSyntax);
        assert_eq!(err("x{a=\"v\\t\"} 2"), ParseErrorKind::Escape);
        assert_eq!(err("x{a=\"v"), ParseErrorKind::Unterminated);
        assert_eq!(err("x{a=\"v\""), ParseErrorKind::Unterminated);
        assert_eq!(err("x{a=\"1\",a=\"2\"} 2"), ParseErrorKind::DuplicateLabel);
        assert_eq!(err("x"), ParseErrorKind::MissingValue);
        assert_eq!(err("x{a=\"1\"}"), ParseErrorKind::MissingValue);
        assert_eq!(err("x 0x10"), ParseErrorKind::Value);
        assert_eq!(err("x 1.2.3"), ParseErrorKind::Value);
        assert_eq!(err("x e"), ParseErrorKind::Value);
        assert_eq!(err("x 1 12.5"), ParseErrorKind::Timestamp);
        assert_eq!(err("x 1 2 3"), ParseErrorKind::Trailing);
        assert_eq!(err("x-y 1"), ParseErrorKind::MetricName);
        assert_eq!(parse("ok 1\nbad").unwrap_err().line, 2);
    }

    #[test]
    fn garbage_never_panics() {
        // A deterministic sweep over short inputs built from the format's own punctuation, plus bytes that
        // are not ASCII; the fuzz target exercises the same function with arbitrary input.
        let alphabet = [
            "x", "{", "}", "=", "\"", "\\", ",", " ", "1", "e", "\n", "é", "#", "+", "N", "a",
        ];
        for len in 0..=5u32 {
            let total = (alphabet.len() as u64).pow(len);
            for mut k in 0..total {
                let mut s = String::new();
                for _ in 0..len {
                    s.push_str(alphabet[(k % alphabet.len() as u64) as usize]);
                    k /= alphabet.len() as u64;
                }
                let _ = parse(&s);
            }
        }
    }

    #[test]
    fn real_seaweedfs_volume_server_metrics() {
        let text = include_str!("../tests/fixtures/valid/seaweedfs-volume-4.48.txt");
        let samples = parse(text).unwrap();
        let get_count = samples
            .iter()
            .find(|s| {
                s.name == "SeaweedFS_volumeServer_request_seconds_count"
                    && s.labels.get("type") == Some("GET")
            })
            .unwrap();
        assert_eq!(get_count.value, 21.0);
        let inf = samples
            .iter()
            .find(|s| {
                s.name == "SeaweedFS_volumeServer_request_seconds_bucket"
                    && s.labels.get("type") == Some("GET")
                    && s.labels.get("le") == Some("+Inf")
            })
            .unwrap();
        assert_eq!(inf.value, 21.0);
    }
}
