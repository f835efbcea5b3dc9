//! The part of Prometheus' alert templates the lab renders: text with `{{ $labels.name }}` (or
//! `{{ .Labels.name }}`) and `{{ $value }}` (or `{{ .Value }}`) in it, with `{{-`/`-}}` trimming. Anything
//! else inside `{{ }}` (a pipeline, a function, `range`, `if`) is refused when the rule file is loaded.

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Label(String),
    Value,
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Parses `text`.
    ///
    /// # Errors
    /// The unsupported action (`{{ humanize $value }}`), or an unclosed `{{`, as a message.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        let mut pending = String::new();
        while let Some(open) = rest.find("{{") {
            pending.push_str(&rest[..open]);
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| format!("a template action is not closed: {:?}", &rest[open..]))?;
            let mut action = &after[..close];
            rest = &after[close + 2..];
            if let Some(a) = action.strip_prefix('-') {
                pending.truncate(pending.trim_end().len());
                action = a;
            }
            let trim_after = action.ends_with('-') && action.len() > 1;
            if trim_after {
                action = &action[..action.len() - 1];
            }
            let part = action_part(action.trim())?;
            if !pending.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut pending)));
            }
            parts.push(part);
            if trim_after {
                rest = rest.trim_start();
            }
        }
        pending.push_str(rest);
        if !pending.is_empty() {
            parts.push(Part::Text(pending));
        }
        Ok(Template { parts })
    }

    /// Whether the template has any action (a label or the value) in it.
    pub fn is_literal(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Text(_)))
    }

    /// The text with each label and the value filled in. A label the alert does not have is empty, as in
    /// Prometheus; the value is written as Go writes a float (`0.488`, `1.2e+07`, `NaN`, `+Inf`).
    pub fn render(&self, labels: &crate::labels::Labels, value: f64) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Label(l) => out.push_str(labels.get(l).unwrap_or("")),
                Part::Value => out.push_str(&go_float(value)),
            }
        }
        out
    }
}

fn action_part(action: &str) -> Result<Part, String> {
    if action == "$value" || action == ".Value" {
        return Ok(Part::Value);
    }
    for prefix in ["$labels.", ".Labels."] {
        if let Some(name) = action.strip_prefix(prefix)
            && !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Ok(Part::Label(name.to_string()));
        }
    }
    if let Some(inner) = action
        .strip_prefix("index $labels \"")
        .and_then(|r| r.strip_suffix('"'))
    {
        return Ok(Part::Label(inner.to_string()));
    }
    Err(format!(
        "the template action {{{{ {action} }}}} is not supported by the lab (it fills in {{{{ $labels.name }}}} and {{{{ $value }}}})"
    ))
}

/// `v` as Go's `fmt` prints a float64 with `%v` (`strconv.FormatFloat(v, 'g', -1, 64)`): the shortest
/// digits that read back the same, in exponent form when the exponent is below -4 or 6 and above.
pub fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `1.2345e7`.
    let e = format!("{v:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let nd = digits.len() as i32;
    // Go: %e when the exponent is below -4 or at least the precision, which is 6 for the shortest form.
    let dp = exp + 1;
    let eprec = 6;
    let sign = if negative { "-" } else { "" };
    if exp < -4 || exp >= eprec {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    // Plain notation with exactly the shortest digits.
    let body = if dp <= 0 {
        format!("0.{}{digits}", "0".repeat((-dp) as usize))
    } else if dp >= nd {
        format!("{digits}{}", "0".repeat((dp - nd) as usize))
    } else {
        format!("{}.{}", &digits[..dp as usize], &digits[dp as usize..])
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;

    #[test]
    fn labels_and_value_are_filled_in() {
        let t = Template::parse("storage server {{ $labels.server }} answers in {{ $value }} s").unwrap();
        let l = Labels::from_pairs([("server", "storage-1")]);
        assert_eq!(t.render(&l, 0.488), "storage server storage-1 answers in 0.488 s");
        let t = Template::parse("{{.Labels.pod}} / {{ index $labels \"pod\" }} {{- \"x\" }}");
        assert!(t.is_err());
        let t =
            Template::parse("{{.Labels.pod}} / {{ index $labels \"pod\" }}  {{- $labels.nope }}.").unwrap();
        assert_eq!(
            t.render(&Labels::from_pairs([("pod", "rank-4")]), 1.0),
            "rank-4 / rank-4."
        );
        assert!(Template::parse("no action").unwrap().is_literal());
    }

    #[test]
    fn unsupported_actions_are_refused_by_name() {
        let e = Template::parse("{{ $value | humanize }}").unwrap_err();
        assert!(e.contains("{{ $value | humanize }} is not supported"), "{e}");
        assert!(Template::parse("{{ if gt $value 1.0 }}x{{ end }}").is_err());
        assert!(
            Template::parse("open {{ $value")
                .unwrap_err()
                .contains("not closed")
        );
    }

    #[test]
    fn floats_are_written_as_go_writes_them() {
        for (v, s) in [
            (0.488, "0.488"),
            (400.0, "400"),
            (1.0, "1"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (12345678.0, "1.2345678e+07"),
            (1e21, "1e+21"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (0.1 + 0.2, "0.30000000000000004"),
        ] {
            assert_eq!(go_float(v), s, "{v}");
        }
    }
}
