//! PromQL queries over the lab's store, with the evaluator the rules run on: [`instant`] at one time,
//! [`range`] at every step of an interval. Results serialise the way Prometheus' HTTP API writes the
//! `data` of a query answer: `{"resultType": "vector", "result": [{"metric": {...}, "value": [t, "v"]}]}`,
//! with times in seconds and values as strings (`"NaN"`, `"+Inf"`).
//!
//! The subset of PromQL the lab evaluates is listed in `docs/telemetry.md`; anything else is a
//! [`QueryError::Unsupported`] naming the construct and where it is.

use std::collections::BTreeMap;

use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Serialize, Serializer};

use crate::error::QueryError;
use crate::labels::Labels;
use crate::promql::eval::{Ctx, Value};
use crate::promql::parse;
use crate::store::Store;

/// The most steps one [`range`] query evaluates (Prometheus' own limit).
pub const MAX_STEPS: i64 = 11_000;

/// A query's result.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryResult {
    /// A scalar at a time (ms).
    Scalar { t_ms: i64, value: f64 },
    /// One value per series at a time (ms); the labels carry the metric name as `__name__` where the
    /// expression keeps it.
    Vector { t_ms: i64, samples: Vec<(Labels, f64)> },
    /// Values over time per series (a range query, or an instant query of a range selector).
    Matrix(Vec<(Labels, Vec<(i64, f64)>)>),
}

impl QueryResult {
    /// `"scalar"`, `"vector"` or `"matrix"`.
    pub fn result_type(&self) -> &'static str {
        match self {
            QueryResult::Scalar { .. } => "scalar",
            QueryResult::Vector { .. } => "vector",
            QueryResult::Matrix(_) => "matrix",
        }
    }

    /// The samples of a vector result (a scalar as one sample without labels; empty for a matrix).
    pub fn samples(&self) -> Vec<(Labels, f64)> {
        match self {
            QueryResult::Scalar { value, .. } => vec![(Labels::new(), *value)],
            QueryResult::Vector { samples, .. } => samples.clone(),
            QueryResult::Matrix(_) => Vec::new(),
        }
    }
}

/// Evaluates `expr` at `t_ms` over `store`.
///
/// # Errors
/// [`QueryError::Syntax`] or [`QueryError::Unsupported`] (with line and column) for an expression the
/// lab cannot evaluate, [`QueryError::Eval`] where Prometheus would fail the query too (vector matching
/// that is not one-to-one).
pub fn instant(store: &Store, expr: &str, t_ms: i64) -> Result<QueryResult, QueryError> {
    let e = parse(expr)?;
    let ctx = Ctx {
        store,
        t: t_ms,
        earliest: None,
        cache: None,
    };
    Ok(match ctx.eval(&e)? {
        Value::Scalar(value) => QueryResult::Scalar { t_ms, value },
        Value::Vector(samples) => QueryResult::Vector { t_ms, samples },
        Value::Matrix(m) => QueryResult::Matrix(
            m.series
                .iter()
                .map(|(l, pts)| {
                    let mut l = l.clone();
                    l.set(crate::promql::ast::NAME, m.name.as_str());
                    (l, pts.clone())
                })
                .collect(),
        ),
        Value::String(_) => return Err(QueryError::eval("a string is not a query result")),
    })
}

/// Evaluates `expr` at `start_ms`, `start_ms + step_ms`, … up to `end_ms`, as Prometheus' range query
/// does: a matrix with one series per label set seen at any step (a scalar as one series without
/// labels).
///
/// # Errors
/// As [`instant`]; and [`QueryError::Eval`] for a range selector at the top (a range query needs an
/// instant vector or a scalar), an end before the start, a step of 0, or more than [`MAX_STEPS`] steps.
pub fn range(
    store: &Store,
    expr: &str,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
) -> Result<QueryResult, QueryError> {
    let e = parse(expr)?;
    if step_ms <= 0 {
        return Err(QueryError::eval("the step must be more than 0"));
    }
    if end_ms < start_ms {
        return Err(QueryError::eval("the end is before the start"));
    }
    if (end_ms - start_ms) / step_ms + 1 > MAX_STEPS {
        return Err(QueryError::eval(format!(
            "more than {MAX_STEPS} steps: use a longer step or a shorter interval"
        )));
    }
    let mut series: BTreeMap<Labels, Vec<(i64, f64)>> = BTreeMap::new();
    let mut t = start_ms;
    while t <= end_ms {
        let ctx = Ctx {
            store,
            t,
            earliest: None,
            cache: None,
        };
        match ctx.eval(&e)? {
            Value::Scalar(v) => series.entry(Labels::new()).or_default().push((t, v)),
            Value::Vector(v) => {
                for (l, x) in v {
                    series.entry(l).or_default().push((t, x));
                }
            }
            Value::Matrix(_) | Value::String(_) => {
                return Err(QueryError::eval(
                    "a range query needs an expression of type instant vector or scalar, not a range vector",
                ));
            }
        }
        t += step_ms;
    }
    Ok(QueryResult::Matrix(series.into_iter().collect()))
}

/// A value as Prometheus' API writes it: the shortest decimal that reads back the same, `NaN`, `+Inf`.
fn value_string(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v}")
    }
}

/// `[t_seconds, "value"]`.
struct Point(i64, f64);

impl Serialize for Point {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(2))?;
        seq.serialize_element(&(self.0 as f64 / 1000.0))?;
        seq.serialize_element(&value_string(self.1))?;
        seq.end()
    }
}

/// A label set as a JSON object.
struct Metric<'a>(&'a Labels);

impl Serialize for Metric<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter())
    }
}

#[derive(Serialize)]
struct VectorElement<'a> {
    metric: Metric<'a>,
    value: Point,
}

#[derive(Serialize)]
struct MatrixElement<'a> {
    metric: Metric<'a>,
    values: Vec<Point>,
}

impl Serialize for QueryResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("QueryResult", 2)?;
        st.serialize_field("resultType", self.result_type())?;
        match self {
            QueryResult::Scalar { t_ms, value } => st.serialize_field("result", &Point(*t_ms, *value))?,
            QueryResult::Vector { t_ms, samples } => {
                let v: Vec<VectorElement> = samples
                    .iter()
                    .map(|(l, x)| VectorElement {
                        metric: Metric(l),
                        value: Point(*t_ms, *x),
                    })
                    .collect();
                st.serialize_field("result", &v)?;
            }
            QueryResult::Matrix(series) => {
                let v: Vec<MatrixElement> = series
                    .iter()
                    .map(|(l, pts)| MatrixElement {
                        metric: Metric(l),
                        values: pts.iter().map(|(t, x)| Point(*t, *x)).collect(),
                    })
                    .collect();
                st.serialize_field("result", &v)?;
            }
        }
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expo::parse as expo;

    fn store() -> Store {
        let mut s = Store::new(60_000);
        for i in 0..=10 {
            let text = format!(
                "c_total{{server=\"s1\"}} {}\nc_total{{server=\"s2\"}} {}\ng 0.5\n",
                10 * i,
                30 * i
            );
            s.ingest("rank-0", 1_700_000_000_000 + i * 1000, expo(&text).unwrap());
        }
        s
    }

    const T: i64 = 1_700_000_010_000;

    #[test]
    fn instant_vector_in_the_http_apis_shape() {
        let r = instant(&store(), "sum by (server) (rate(c_total[5s])) > 15", T).unwrap();
        assert_eq!(r.samples(), vec![(Labels::from_pairs([("server", "s2")]), 30.0)]);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({
                "resultType": "vector",
                "result": [{"metric": {"server": "s2"}, "value": [1_700_000_010.0, "30"]}]
            })
        );
        let r = instant(&store(), "g", T).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap()["result"][0]["metric"],
            serde_json::json!({"__name__": "g", "instance": "rank-0"})
        );
    }

    #[test]
    fn scalars_and_range_selectors() {
        let r = instant(&store(), "scalar(g) / 0", T).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"resultType": "scalar", "result": [1_700_000_010.0, "+Inf"]})
        );
        let r = instant(&store(), "g[2s]", T).unwrap();
        assert_eq!(r.result_type(), "matrix");
        assert_eq!(
            serde_json::to_value(&r).unwrap()["result"][0]["values"],
            serde_json::json!([
                [1_700_000_008.0, "0.5"],
                [1_700_000_009.0, "0.5"],
                [1_700_000_010.0, "0.5"]
            ])
        );
    }

    #[test]
    fn range_queries_give_a_matrix() {
        let r = range(&store(), "rate(c_total{server=\"s1\"}[2s])", T - 2_000, T, 1_000).unwrap();
        let QueryResult::Matrix(m) = &r else {
            panic!("{r:?}")
        };
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].1, vec![(T - 2_000, 10.0), (T - 1_000, 10.0), (T, 10.0)]);
        assert_eq!(
            m[0].0,
            Labels::from_pairs([("instance", "rank-0"), ("server", "s1")])
        );
        let r = range(&store(), "time()", T - 1_000, T, 1_000).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"resultType": "matrix", "result": [
                {"metric": {}, "values": [[1_700_000_009.0, "1700000009"], [1_700_000_010.0, "1700000010"]]}
            ]})
        );
        assert!(range(&store(), "g[5s]", T, T, 1_000).is_err());
        assert!(range(&store(), "g", T, T - 1, 1_000).is_err());
        assert!(
            range(&store(), "g", 0, T, 1)
                .unwrap_err()
                .to_string()
                .contains("steps")
        );
    }

    #[test]
    fn errors_name_the_construct_and_the_place() {
        let e = instant(
            &store(),
            "sum(rate(c_total[5s])) by (server) + on (server) group_left g",
            T,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 1, column 50: group_left is not supported by the lab's evaluator (docs/telemetry.md lists what it evaluates)"
        );
        assert!(matches!(e, QueryError::Unsupported { .. }));
    }
}
