//! PromQL's tokens: names, numbers, durations, strings and operators, each with the byte offset it starts
//! at, so that every parse error can say where it is.

use crate::error::QueryError;

/// One token and where it starts (a byte offset into the expression).
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub kind: Tok,
    pub at: usize,
}

/// The kinds of token.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// A metric name, label name, function name or keyword (`rate`, `by`, `and`).
    Ident(String),
    /// A number: `1`, `0.5`, `1e3`, `0x1f`, `Inf`, `NaN`.
    Number(f64),
    /// A duration: `3s`, `1m`, `1h30m`, `500ms`, in milliseconds.
    Duration(i64),
    /// A quoted string, unescaped.
    Str(String),
    LParen,
    RParen,
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Comma,
    Colon,
    At,
    /// `=` (in a label matcher).
    Assign,
    /// `=~`.
    ReMatch,
    /// `!~`.
    ReNoMatch,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    Eof,
}

impl Tok {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("{s:?}"),
            Tok::Number(n) => format!("number {n}"),
            Tok::Duration(_) => "a duration".into(),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Eof => "the end of the expression".into(),
            other => format!("\"{}\"", other.symbol()),
        }
    }

    fn symbol(&self) -> &'static str {
        match self {
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::Comma => ",",
            Tok::Colon => ":",
            Tok::At => "@",
            Tok::Assign => "=",
            Tok::ReMatch => "=~",
            Tok::ReNoMatch => "!~",
            Tok::Add => "+",
            Tok::Sub => "-",
            Tok::Mul => "*",
            Tok::Div => "/",
            Tok::Mod => "%",
            Tok::Pow => "^",
            Tok::Eq => "==",
            Tok::Ne => "!=",
            Tok::Gt => ">",
            Tok::Lt => "<",
            Tok::Ge => ">=",
            Tok::Le => "<=",
            _ => "",
        }
    }
}

/// Splits `src` into tokens, ending with [`Tok::Eof`].
///
/// # Errors
/// A [`QueryError::Syntax`] at the first character that starts no token, or an unclosed string.
pub fn lex(src: &str) -> Result<Vec<Token>, QueryError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        // A comment runs to the end of the line.
        if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let at = i;
        let two = |s: &[u8]| b[i..].starts_with(s);
        let (kind, len) = match c {
            b'(' => (Tok::LParen, 1),
            b')' => (Tok::RParen, 1),
            b'{' => (Tok::LBrace, 1),
            b'}' => (Tok::RBrace, 1),
            b'[' => (Tok::LBracket, 1),
            b']' => (Tok::RBracket, 1),
            b',' => (Tok::Comma, 1),
            b':' if !b.get(i + 1).is_some_and(|n| is_ident_start(*n)) => (Tok::Colon, 1),
            b'@' => (Tok::At, 1),
            b'+' => (Tok::Add, 1),
            b'-' => (Tok::Sub, 1),
            b'*' => (Tok::Mul, 1),
            b'/' => (Tok::Div, 1),
            b'%' => (Tok::Mod, 1),
            b'^' => (Tok::Pow, 1),
            b'=' if two(b"==") => (Tok::Eq, 2),
            b'=' if two(b"=~") => (Tok::ReMatch, 2),
            b'=' => (Tok::Assign, 1),
            b'!' if two(b"!=") => (Tok::Ne, 2),
            b'!' if two(b"!~") => (Tok::ReNoMatch, 2),
            b'>' if two(b">=") => (Tok::Ge, 2),
            b'>' => (Tok::Gt, 1),
            b'<' if two(b"<=") => (Tok::Le, 2),
            b'<' => (Tok::Lt, 1),
            b'"' | b'\'' | b'`' => {
                let (s, len) = string(src, i)?;
                (Tok::Str(s), len)
            }
            b'0'..=b'9' | b'.' => number_or_duration(src, i)?,
            c if is_ident_start(c) || c == b':' => {
                let mut j = i + 1;
                while j < b.len() && (is_ident_char(b[j])) {
                    j += 1;
                }
                let word = &src[i..j];
                let kind = match word.to_ascii_lowercase().as_str() {
                    "inf" => Tok::Number(f64::INFINITY),
                    "nan" => Tok::Number(f64::NAN),
                    _ => Tok::Ident(word.to_string()),
                };
                (kind, j - i)
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(QueryError::syntax(
                    src,
                    at,
                    format!("unexpected character {ch:?}"),
                ));
            }
        };
        out.push(Token { kind, at });
        i += len;
    }
    out.push(Token {
        kind: Tok::Eof,
        at: src.len(),
    });
    Ok(out)
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

/// A number (`1`, `1.5`, `.5`, `1e-3`, `0x1f`) or, when a unit follows the digits at once, a duration
/// (`3s`, `1h30m`, `500ms`).
fn number_or_duration(src: &str, i: usize) -> Result<(Tok, usize), QueryError> {
    let b = src.as_bytes();
    if b[i..].starts_with(b"0x") || b[i..].starts_with(b"0X") {
        let mut j = i + 2;
        while j < b.len() && b[j].is_ascii_hexdigit() {
            j += 1;
        }
        let v = i64::from_str_radix(&src[i + 2..j], 16)
            .map_err(|_| QueryError::syntax(src, i, "invalid hexadecimal number"))?;
        return Ok((Tok::Number(v as f64), j - i));
    }
    let mut j = i;
    while j < b.len() && b[j].is_ascii_digit() {
        j += 1;
    }
    // Digits followed by a unit letter: a duration.
    if j > i && j < b.len() && matches!(b[j], b's' | b'm' | b'h' | b'd' | b'w' | b'y') {
        let mut k = j;
        while k < b.len() && (b[k].is_ascii_alphanumeric()) {
            k += 1;
        }
        let ms = parse_duration(&src[i..k])
            .ok_or_else(|| QueryError::syntax(src, i, format!("invalid duration {:?}", &src[i..k])))?;
        return Ok((Tok::Duration(ms), k - i));
    }
    if j < b.len() && b[j] == b'.' {
        j += 1;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
    }
    if j < b.len() && (b[j] == b'e' || b[j] == b'E') {
        let mut k = j + 1;
        if k < b.len() && (b[k] == b'+' || b[k] == b'-') {
            k += 1;
        }
        if k < b.len() && b[k].is_ascii_digit() {
            while k < b.len() && b[k].is_ascii_digit() {
                k += 1;
            }
            j = k;
        }
    }
    let text = &src[i..j];
    let v: f64 = text
        .parse()
        .map_err(|_| QueryError::syntax(src, i, format!("invalid number {text:?}")))?;
    if j < b.len() && is_ident_char(b[j]) {
        return Err(QueryError::syntax(
            src,
            i,
            format!("invalid number or duration {:?}", &src[i..=j]),
        ));
    }
    Ok((Tok::Number(v), j - i))
}

/// A Prometheus duration: one or more `<integer><unit>` with units `y w d h m s ms`, largest first
/// (`1h30m`, `90s`, `500ms`), in milliseconds. `None` when it is not one.
pub fn parse_duration(s: &str) -> Option<i64> {
    const UNITS: [(&str, i64); 7] = [
        ("y", 365 * 24 * 3_600_000),
        ("w", 7 * 24 * 3_600_000),
        ("d", 24 * 3_600_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    if s.is_empty() {
        return None;
    }
    let b = s.as_bytes();
    let mut i = 0;
    let mut total: i64 = 0;
    // Units must come largest first, each at most once.
    let mut last_unit = 0;
    while i < b.len() {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let n: i64 = s[start..i].parse().ok()?;
        let ustart = i;
        while i < b.len() && b[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &s[ustart..i];
        let pos = UNITS.iter().position(|(u, _)| *u == unit)? + 1;
        if pos <= last_unit {
            return None;
        }
        last_unit = pos;
        total = total.checked_add(n.checked_mul(UNITS[pos - 1].1)?)?;
    }
    Some(total)
}

/// Writes `ms` the way Prometheus writes a duration: `3s`, `1m`, `1h30m`, `500ms`, `0s`.
pub fn format_duration(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, size) in [
        ("y", 365 * 24 * 3_600_000),
        ("w", 7 * 24 * 3_600_000),
        ("d", 24 * 3_600_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

/// A quoted string starting at `i` (`"..."` and `'...'` with Go's escapes, or a raw `` `...` ``): its
/// value and its length in the source.
fn string(src: &str, i: usize) -> Result<(String, usize), QueryError> {
    let quote = src.as_bytes()[i] as char;
    let mut out = String::new();
    let mut chars = src[i + 1..].char_indices();
    while let Some((k, c)) = chars.next() {
        if c == quote {
            return Ok((out, k + 2));
        }
        if c == '\n' && quote != '`' {
            break;
        }
        if c != '\\' || quote == '`' {
            out.push(c);
            continue;
        }
        let Some((_, e)) = chars.next() else { break };
        let escaped = match e {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'a' => '\x07',
            'b' => '\x08',
            'f' => '\x0c',
            'v' => '\x0b',
            '\\' => '\\',
            '"' => '"',
            '\'' => '\'',
            'x' | 'u' | 'U' => {
                let n = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = chars.by_ref().take(n).map(|(_, c)| c).collect();
                let ch = u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| hex.len() == n)
                    .and_then(char::from_u32)
                    .ok_or_else(|| {
                        QueryError::syntax(src, i + 1 + k, format!("invalid escape \\{e}{hex} in a string"))
                    })?;
                out.push(ch);
                continue;
            }
            other => {
                return Err(QueryError::syntax(
                    src,
                    i + 1 + k,
                    format!("unknown escape \\{other} in a string"),
                ));
            }
        };
        out.push(escaped);
    }
    Err(QueryError::syntax(src, i, "string not closed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<Tok> {
        lex(s).unwrap().into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn tokens_of_a_rule() {
        assert_eq!(
            kinds("rate(lab:x_total{a=~\"b.*\"}[3s]) > 0 != 4"),
            vec![
                Tok::Ident("rate".into()),
                Tok::LParen,
                Tok::Ident("lab:x_total".into()),
                Tok::LBrace,
                Tok::Ident("a".into()),
                Tok::ReMatch,
                Tok::Str("b.*".into()),
                Tok::RBrace,
                Tok::LBracket,
                Tok::Duration(3000),
                Tok::RBracket,
                Tok::RParen,
                Tok::Gt,
                Tok::Number(0.0),
                Tok::Ne,
                Tok::Number(4.0),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn numbers_durations_and_strings() {
        assert_eq!(
            kinds("1e3 .5 0x1f Inf")[..4],
            [
                Tok::Number(1000.0),
                Tok::Number(0.5),
                Tok::Number(31.0),
                Tok::Number(f64::INFINITY)
            ]
        );
        assert!(matches!(kinds("NaN")[0], Tok::Number(v) if v.is_nan()));
        assert_eq!(kinds("1h30m")[0], Tok::Duration(5_400_000));
        assert_eq!(kinds("500ms")[0], Tok::Duration(500));
        assert_eq!(
            kinds(r#"'a\'b' "c\n" `d\e`"#)[..3],
            [
                Tok::Str("a'b".into()),
                Tok::Str("c\n".into()),
                Tok::Str("d\\e".into())
            ]
        );
        assert_eq!(kinds("x # a comment\n+ 1").len(), 4);
    }

    #[test]
    fn durations_round_trip() {
        for (s, ms) in [
            ("3s", 3000),
            ("1m", 60_000),
            ("1h30m", 5_400_000),
            ("500ms", 500),
            ("1d", 86_400_000),
        ] {
            assert_eq!(parse_duration(s), Some(ms));
            assert_eq!(format_duration(ms), s);
        }
        for bad in ["", "3", "s", "1m1h", "1x", "1s1s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn errors_say_where() {
        let e = lex("up{a=\"b}").unwrap_err();
        assert_eq!(e.to_string(), "line 1, column 6: string not closed");
        let e = lex("a\n  $").unwrap_err();
        assert_eq!(e.to_string(), "line 2, column 3: unexpected character '$'");
        assert!(lex("3x").is_err());
    }
}
