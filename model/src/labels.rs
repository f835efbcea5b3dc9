//! Label sets: the identity of one time series, kept sorted so that equal sets compare and hash equal.

use std::fmt;

/// A set of `name="value"` pairs, sorted by name, names unique. The metric name is not part of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Vec<(String, String)>);

impl Labels {
    /// The empty set.
    pub fn new() -> Self {
        Labels(Vec::new())
    }

    /// Builds a set from pairs; a later pair with the same name replaces an earlier one.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut l = Labels::new();
        for (k, v) in pairs {
            l.set(k, v);
        }
        l
    }

    /// The value of label `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| self.0[i].1.as_str())
    }

    /// Sets label `name` to `value`. An empty value removes the label, as in Prometheus.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let (name, value) = (name.into(), value.into());
        match self.0.binary_search_by(|(k, _)| k.as_str().cmp(&name)) {
            Ok(i) if value.is_empty() => {
                self.0.remove(i);
            }
            Ok(i) => self.0[i].1 = value,
            Err(_) if value.is_empty() => {}
            Err(i) => self.0.insert(i, (name, value)),
        }
    }

    /// Removes label `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        let i = self.0.binary_search_by(|(k, _)| k.as_str().cmp(name)).ok()?;
        Some(self.0.remove(i).1)
    }

    /// Only the labels named in `names` (PromQL `by (...)`).
    pub fn only(&self, names: &[&str]) -> Labels {
        Labels(
            self.0
                .iter()
                .filter(|(k, _)| names.contains(&k.as_str()))
                .cloned()
                .collect(),
        )
    }

    /// Every label except those named in `names` (PromQL `without (...)`).
    pub fn without(&self, names: &[&str]) -> Labels {
        Labels(
            self.0
                .iter()
                .filter(|(k, _)| !names.contains(&k.as_str()))
                .cloned()
                .collect(),
        )
    }

    /// The pairs, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// True when the set has no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Labels {
    /// Writes the set the way the text format does: `{a="1",b="x\"y"}`, or nothing when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}=\"")?;
            for c in v.chars() {
                match c {
                    '\\' => f.write_str("\\\\")?,
                    '"' => f.write_str("\\\"")?,
                    '\n' => f.write_str("\\n")?,
                    c => write!(f, "{c}")?,
                }
            }
            f.write_str("\"")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_and_unique() {
        let l = Labels::from_pairs([("server", "storage-1"), ("le", "0.1"), ("server", "storage-2")]);
        assert_eq!(
            l.iter().collect::<Vec<_>>(),
            vec![("le", "0.1"), ("server", "storage-2")]
        );
        assert_eq!(l.get("server"), Some("storage-2"));
        assert_eq!(l.only(&["le"]).to_string(), "{le=\"0.1\"}");
        assert_eq!(l.without(&["le"]).to_string(), "{server=\"storage-2\"}");
    }

    #[test]
    fn empty_value_removes() {
        let mut l = Labels::from_pairs([("a", "1")]);
        l.set("a", "");
        assert!(l.is_empty());
    }

    #[test]
    fn display_escapes() {
        let l = Labels::from_pairs([("a", "x\"y\\z\n")]);
        assert_eq!(l.to_string(), r#"{a="x\"y\\z\n"}"#);
    }
}
