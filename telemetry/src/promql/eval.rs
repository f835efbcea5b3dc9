//! The evaluator: a parsed expression at one instant over the lab's [`Store`], with Prometheus 2.x's
//! semantics: selectors with the 5-minute lookback and staleness, ranges that include both ends,
//! `rate`'s extrapolation, comparison operators that filter (or return 0/1 with `bool`), one-to-one
//! vector matching with `on`/`ignoring`, set operators, and the metric name dropped where Prometheus
//! drops it.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

use super::ast::{AggOp, BinOp, Expr, ExprKind, Func, Grouping, Matching, NAME};
use super::functions::{
    avg_over_time, extrapolated_rate, histogram_quantile, min_over_time, quantile, stddev_over_time,
};
use crate::error::QueryError;
use crate::labels::Labels;
use crate::store::Store;

/// The value of an expression at one instant.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Scalar(f64),
    /// One value per series; the labels carry the metric name as `__name__` where it was kept.
    Vector(Vec<(Labels, f64)>),
    Matrix(Rc<Matrix>),
    String(String),
}

/// A range vector: each series' samples in `[end - range, end]`, both ends included, as Prometheus 2.x
/// selects them.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    /// The metric name every series has (kept apart: every function of a range drops it).
    pub name: String,
    /// Each series' labels (without the metric name) and samples.
    pub series: Vec<(Labels, Vec<(i64, f64)>)>,
    /// The end of the range, ms.
    pub end: i64,
    /// The range as selected, ms (after any cut to what was watched).
    pub range_ms: i64,
}

/// Range selections already read at one instant, shared by the rules and views of a tick: the same
/// `rate(x[3s])` in five rules reads the store once. A recording rule that writes a series
/// [`forget`](Cache::forget)s its selections.
#[derive(Debug, Default)]
pub struct Cache {
    matrices: RefCell<HashMap<SelectionKey, Rc<Matrix>>>,
}

/// A selection at one instant: the metric name, the matchers and offset ([`super::ast::Selector::key`]),
/// the range's end and length.
type SelectionKey = (String, String, i64, i64);

impl Cache {
    /// Forgets the selections of series named `name` (a rule just wrote it).
    pub fn forget(&self, name: &str) {
        self.matrices.borrow_mut().retain(|k, _| k.0 != name);
    }
}

/// Where and when an expression is evaluated.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub store: &'a Store,
    /// The evaluation instant, ms.
    pub t: i64,
    /// The earliest instant a range may reach back to, when set: a collector that has watched for less
    /// than a window reads its rates over what it watched (Prometheus has the history; a fresh collector
    /// does not, and would count the time before it started as idle). `None`: ranges as written.
    pub earliest: Option<i64>,
    /// Selections already read at this instant, when shared.
    pub cache: Option<&'a Cache>,
}

impl Ctx<'_> {
    /// Evaluates `e`.
    ///
    /// # Errors
    /// [`QueryError::Eval`] where Prometheus fails the query: vector matching that is not one-to-one,
    /// or a result holding two series with the same labels.
    pub fn eval(&self, e: &Expr) -> Result<Value, QueryError> {
        Ok(match &e.kind {
            ExprKind::Number(n) => Value::Scalar(*n),
            ExprKind::Str(s) => Value::String(s.clone()),
            ExprKind::Paren(inner) => self.eval(inner)?,
            ExprKind::Selector(s) => {
                let at = self.t - s.offset_ms;
                let v = self
                    .store
                    .instant(&s.name, at, |l| s.matches(l))
                    .into_iter()
                    .map(|(mut l, v)| {
                        l.set(NAME, s.name.as_str());
                        (l, v)
                    })
                    .collect();
                Value::Vector(v)
            }
            ExprKind::Matrix {
                selector: s,
                range_ms,
            } => {
                let end = self.t - s.offset_ms;
                let range_ms = match self.earliest {
                    Some(e) if end > e => (*range_ms).min(end - e).max(1),
                    _ => *range_ms,
                };
                let key = (s.name.clone(), s.key(), end, range_ms);
                if let Some(m) = self.cache.and_then(|c| c.matrices.borrow().get(&key).cloned()) {
                    return Ok(Value::Matrix(m));
                }
                let m = Rc::new(Matrix {
                    name: s.name.clone(),
                    series: self.store.range(&s.name, end, range_ms, |l| s.matches(l)),
                    end,
                    range_ms,
                });
                if let Some(c) = self.cache {
                    c.matrices.borrow_mut().insert(key, Rc::clone(&m));
                }
                Value::Matrix(m)
            }
            ExprKind::Neg(inner) => match self.eval(inner)? {
                Value::Scalar(v) => Value::Scalar(-v),
                Value::Vector(v) => {
                    Value::Vector(v.into_iter().map(|(l, x)| (l.without(&[NAME]), -x)).collect())
                }
                other => other,
            },
            ExprKind::Call { func, args } => self.call(*func, args)?,
            ExprKind::Aggregate {
                op,
                param,
                grouping,
                expr,
            } => {
                let q = match param {
                    Some(p) => self.scalar(p)?,
                    None => f64::NAN,
                };
                Value::Vector(aggregate(*op, q, grouping, self.vector(expr)?))
            }
            ExprKind::Binary {
                op,
                lhs,
                rhs,
                return_bool,
                matching,
            } => {
                let (l, r) = (self.eval(lhs)?, self.eval(rhs)?);
                binary(*op, l, r, *return_bool, matching.as_ref())?
            }
        })
    }

    fn vector(&self, e: &Expr) -> Result<Vec<(Labels, f64)>, QueryError> {
        match self.eval(e)? {
            Value::Vector(v) => Ok(v),
            Value::Scalar(s) => Ok(vec![(Labels::new(), s)]),
            _ => Err(QueryError::eval("expected an instant vector")),
        }
    }

    fn scalar(&self, e: &Expr) -> Result<f64, QueryError> {
        match self.eval(e)? {
            Value::Scalar(s) => Ok(s),
            _ => Err(QueryError::eval("expected a scalar")),
        }
    }

    fn matrix(&self, e: &Expr) -> Result<Rc<Matrix>, QueryError> {
        match self.eval(e)? {
            Value::Matrix(m) => Ok(m),
            _ => Err(QueryError::eval("expected a range vector")),
        }
    }

    fn call(&self, func: Func, args: &[Expr]) -> Result<Value, QueryError> {
        let over_time = |f: fn(&[(i64, f64)]) -> f64| -> Result<Value, QueryError> {
            let m = self.matrix(&args[0])?;
            let v = m.series.iter().map(|(l, pts)| (l.clone(), f(pts))).collect();
            Ok(Value::Vector(v))
        };
        match func {
            Func::Rate | Func::Increase => {
                let m = self.matrix(&args[0])?;
                // The series of one name have distinct labels: without the name they stay distinct.
                let v = m
                    .series
                    .iter()
                    .filter_map(|(l, pts)| {
                        extrapolated_rate(pts, m.end, m.range_ms, func == Func::Rate).map(|v| (l.clone(), v))
                    })
                    .collect();
                Ok(Value::Vector(v))
            }
            Func::AvgOverTime => over_time(avg_over_time),
            Func::MinOverTime => over_time(min_over_time),
            Func::MaxOverTime => over_time(max_over_time),
            Func::SumOverTime => over_time(|p| p.iter().map(|x| x.1).sum()),
            Func::CountOverTime => over_time(|p| p.len() as f64),
            Func::StddevOverTime => over_time(stddev_over_time),
            Func::HistogramQuantile => {
                let q = self.scalar(&args[0])?;
                let v = self
                    .vector(&args[1])?
                    .into_iter()
                    .map(|(l, x)| (l.without(&[NAME]), x))
                    .collect();
                Ok(Value::Vector(histogram_quantile(q, v)))
            }
            Func::Scalar => {
                let v = self.vector(&args[0])?;
                Ok(Value::Scalar(match v.as_slice() {
                    [(_, x)] => *x,
                    _ => f64::NAN,
                }))
            }
            Func::Vector => Ok(Value::Vector(vec![(Labels::new(), self.scalar(&args[0])?)])),
            Func::Abs => {
                let v = self
                    .vector(&args[0])?
                    .into_iter()
                    .map(|(l, x)| (l.without(&[NAME]), x.abs()))
                    .collect();
                Ok(Value::Vector(unique(v)?))
            }
            Func::Time => Ok(Value::Scalar(self.t as f64 / 1000.0)),
        }
    }
}

/// `max_over_time`: a NaN maximum is replaced by any number, as in Prometheus.
fn max_over_time(points: &[(i64, f64)]) -> f64 {
    points
        .iter()
        .map(|p| p.1)
        .fold(f64::NAN, |m, x| if m.is_nan() || x > m { x } else { m })
}

/// Refuses a vector holding two series with the same labels (after a function dropped the metric name).
fn unique(mut v: Vec<(Labels, f64)>) -> Result<Vec<(Labels, f64)>, QueryError> {
    v.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = v.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(QueryError::eval(format!(
            "vector cannot contain metrics with the same labelset {}",
            w[0].0
        )));
    }
    Ok(v)
}

fn group_key(l: &Labels, g: &Grouping, names: &[&str]) -> Labels {
    if g.without {
        l.without(names)
    } else {
        l.only(names)
    }
}

fn aggregate(op: AggOp, q: f64, g: &Grouping, v: Vec<(Labels, f64)>) -> Vec<(Labels, f64)> {
    let mut names: Vec<&str> = g.labels.iter().map(String::as_str).collect();
    if g.without {
        names.push(NAME);
    }
    let mut groups: BTreeMap<Labels, Vec<f64>> = BTreeMap::new();
    for (l, x) in v {
        groups.entry(group_key(&l, g, &names)).or_default().push(x);
    }
    groups
        .into_iter()
        .map(|(l, xs)| {
            let v = match op {
                AggOp::Sum => xs.iter().sum(),
                AggOp::Avg => xs.iter().sum::<f64>() / xs.len() as f64,
                AggOp::Count => xs.len() as f64,
                // A NaN is replaced by any number, as in Prometheus.
                AggOp::Max => xs
                    .iter()
                    .copied()
                    .fold(f64::NAN, |m, x| if m.is_nan() || x > m { x } else { m }),
                AggOp::Min => xs
                    .iter()
                    .copied()
                    .fold(f64::NAN, |m, x| if m.is_nan() || x < m { x } else { m }),
                AggOp::Quantile => quantile(q, &xs),
            };
            (l, v)
        })
        .collect()
}

/// The labels two sides are matched on: the `on` labels, or every label but the `ignoring` ones and the
/// metric name.
struct Signature<'a> {
    on: bool,
    names: Vec<&'a str>,
}

impl<'a> Signature<'a> {
    fn new(m: Option<&'a Matching>) -> Self {
        match m {
            Some(m) if m.on => Signature {
                on: true,
                names: m.labels.iter().map(String::as_str).collect(),
            },
            _ => {
                let mut names: Vec<&str> = m
                    .map(|m| m.labels.iter().map(String::as_str).collect())
                    .unwrap_or_default();
                names.push(NAME);
                Signature { on: false, names }
            }
        }
    }

    fn of(&self, l: &Labels) -> Labels {
        if self.on {
            l.only(&self.names)
        } else {
            l.without(&self.names)
        }
    }
}

fn binary(
    op: BinOp,
    l: Value,
    r: Value,
    return_bool: bool,
    matching: Option<&Matching>,
) -> Result<Value, QueryError> {
    Ok(match (l, r) {
        (Value::Scalar(a), Value::Scalar(b)) => {
            let (v, holds) = op.apply(a, b);
            Value::Scalar(if op.is_comparison() {
                f64::from(u8::from(holds))
            } else {
                v
            })
        }
        (Value::Vector(v), Value::Scalar(s)) => Value::Vector(vector_scalar(op, v, s, false, return_bool)?),
        (Value::Scalar(s), Value::Vector(v)) => Value::Vector(vector_scalar(op, v, s, true, return_bool)?),
        (Value::Vector(a), Value::Vector(b)) => {
            let sig = Signature::new(matching);
            Value::Vector(match op {
                BinOp::And | BinOp::Unless => {
                    let right: HashSet<Labels> = b.iter().map(|(l, _)| sig.of(l)).collect();
                    let keep_matched = op == BinOp::And;
                    a.into_iter()
                        .filter(|(l, _)| right.contains(&sig.of(l)) == keep_matched)
                        .collect()
                }
                BinOp::Or => {
                    let left: HashSet<Labels> = a.iter().map(|(l, _)| sig.of(l)).collect();
                    let mut out = a;
                    out.extend(b.into_iter().filter(|(l, _)| !left.contains(&sig.of(l))));
                    out
                }
                _ => one_to_one(op, a, b, &sig, matching, return_bool)?,
            })
        }
        _ => {
            return Err(QueryError::eval(
                "binary expression on a range vector or a string",
            ));
        }
    })
}

/// Arithmetic drops the metric name; a comparison keeps it (unless `bool`).
fn drops_name(op: BinOp) -> bool {
    !op.is_comparison() && !op.is_set()
}

fn vector_scalar(
    op: BinOp,
    v: Vec<(Labels, f64)>,
    s: f64,
    scalar_on_left: bool,
    return_bool: bool,
) -> Result<Vec<(Labels, f64)>, QueryError> {
    let mut out = Vec::with_capacity(v.len());
    for (l, x) in v {
        let (a, b) = if scalar_on_left { (s, x) } else { (x, s) };
        let (mut value, holds) = op.apply(a, b);
        // A comparison keeps the vector's value, on whichever side it is.
        if op.is_comparison() {
            value = x;
        }
        if return_bool {
            value = f64::from(u8::from(holds));
        } else if !holds {
            continue;
        }
        let l = if drops_name(op) || return_bool {
            l.without(&[NAME])
        } else {
            l
        };
        out.push((l, value));
    }
    if drops_name(op) || return_bool {
        return unique(out);
    }
    Ok(out)
}

fn one_to_one(
    op: BinOp,
    a: Vec<(Labels, f64)>,
    b: Vec<(Labels, f64)>,
    sig: &Signature,
    matching: Option<&Matching>,
    return_bool: bool,
) -> Result<Vec<(Labels, f64)>, QueryError> {
    if a.is_empty() || b.is_empty() {
        return Ok(Vec::new());
    }
    let mut right: BTreeMap<Labels, (Labels, f64)> = BTreeMap::new();
    for (l, x) in b {
        let s = sig.of(&l);
        if let Some((other, _)) = right.get(&s) {
            return Err(QueryError::eval(format!(
                "found duplicate series for the match group {s} on the right hand-side of the operation: \
                 [{other}, {l}]; many-to-many matching not allowed: matching labels must be unique on one side"
            )));
        }
        right.insert(s, (l, x));
    }
    let keep: Vec<&str> = matching
        .map(|m| m.labels.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let mut matched: HashSet<Labels> = HashSet::new();
    let mut out = Vec::new();
    for (l, x) in a {
        let s = sig.of(&l);
        let Some((_, y)) = right.get(&s) else {
            continue;
        };
        let (mut value, holds) = op.apply(x, *y);
        if return_bool {
            value = f64::from(u8::from(holds));
        } else if !holds {
            continue;
        }
        if !matched.insert(s) {
            return Err(QueryError::eval(
                "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right), \
                 which the lab does not evaluate",
            ));
        }
        let mut labels = if drops_name(op) { l.without(&[NAME]) } else { l };
        labels = match matching {
            Some(m) if m.on => labels.only(&keep),
            Some(_) => labels.without(&keep),
            None => labels,
        };
        if return_bool {
            labels = labels.without(&[NAME]);
        }
        out.push((labels, value));
    }
    unique(out).map_err(|_| {
        QueryError::eval("multiple matches for labels: grouping labels must ensure unique matches")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expo::parse as expo;
    use crate::promql::parse;

    /// A store with `text` scraped from `instance` once a second from 0 to 10 s, each value `v + i * step`
    /// where the text's value is `v` and `step` follows a `+` after it (`x 5+2`).
    fn store(lines: &[(&str, &str)]) -> Store {
        let mut s = Store::new(60_000);
        for i in 0..=10 {
            for (instance, text) in lines {
                let body: String = text
                    .lines()
                    .map(|line| {
                        let (head, v) = line.rsplit_once(' ').unwrap();
                        let (v, step) = v.split_once('+').unwrap_or((v, "0"));
                        let v: f64 = v.parse::<f64>().unwrap() + i as f64 * step.parse::<f64>().unwrap();
                        format!("{head} {v}\n")
                    })
                    .collect();
                s.ingest(instance, i * 1000, expo(&body).unwrap());
            }
        }
        s
    }

    fn eval(s: &Store, q: &str) -> Value {
        Ctx {
            store: s,
            t: 10_000,
            earliest: None,
            cache: None,
        }
        .eval(&parse(q).unwrap())
        .unwrap_or_else(|e| panic!("{q}: {e}"))
    }

    fn vector(s: &Store, q: &str) -> Vec<(String, f64)> {
        match eval(s, q) {
            Value::Vector(v) => v.into_iter().map(|(l, x)| (l.to_string(), x)).collect(),
            other => panic!("{q}: {other:?}"),
        }
    }

    fn lab() -> Store {
        store(&[
            ("rank-0", "c_total{server=\"s0\"} 0+10\ng 1\nw 0.1"),
            ("rank-1", "c_total{server=\"s1\"} 0+30\ng 4\nw 0.9"),
            ("rank-2", "c_total{server=\"s1\"} 0+20\ng 2\nw 0.5"),
        ])
    }

    #[test]
    fn selectors_match_labels_and_keep_the_name() {
        let s = lab();
        assert_eq!(
            vector(&s, "g{instance=~\"rank-[01]\"}"),
            vec![
                ("{__name__=\"g\",instance=\"rank-0\"}".into(), 1.0),
                ("{__name__=\"g\",instance=\"rank-1\"}".into(), 4.0)
            ]
        );
        // Regexes are anchored; a missing label matches as "".
        assert!(vector(&s, "g{instance=~\"rank\"}").is_empty());
        assert_eq!(vector(&s, "g{nope=\"\"}").len(), 3);
        assert_eq!(vector(&s, "g{instance!~\"rank-1|rank-2\"}").len(), 1);
        assert_eq!(vector(&s, "g{instance!=\"rank-1\"}").len(), 2);
    }

    #[test]
    fn rate_sum_and_by() {
        let s = lab();
        assert_eq!(
            vector(&s, "sum by (server) (rate(c_total[3s]))"),
            vec![("{server=\"s0\"}".into(), 10.0), ("{server=\"s1\"}".into(), 50.0)]
        );
        assert_eq!(vector(&s, "sum(increase(c_total[3s]))"), vec![("".into(), 180.0)]);
        assert_eq!(
            vector(&s, "sum without (instance) (rate(c_total[3s]))"),
            vec![("{server=\"s0\"}".into(), 10.0), ("{server=\"s1\"}".into(), 50.0)]
        );
        assert_eq!(vector(&s, "count(g)"), vec![("".into(), 3.0)]);
        assert_eq!(vector(&s, "avg(g)"), vec![("".into(), 7.0 / 3.0)]);
        assert_eq!(vector(&s, "quantile(0.5, g)"), vec![("".into(), 2.0)]);
        assert_eq!(vector(&s, "max by (server) (c_total)")[1].1, 300.0);
        assert_eq!(vector(&s, "min(g)"), vec![("".into(), 1.0)]);
    }

    #[test]
    fn a_young_collector_reads_rates_over_what_it_watched() {
        let s = lab();
        let q = parse("sum(rate(c_total[10s]))").unwrap();
        let at = |earliest| match (Ctx {
            store: &s,
            t: 10_000,
            earliest,
            cache: None,
        })
        .eval(&q)
        .unwrap()
        {
            Value::Vector(v) => v[0].1,
            _ => unreachable!(),
        };
        assert!((at(None) - 60.0).abs() < 1e-9);
        // Watched from 8 s: the window is cut to 2 s, and the rate is still 60/s.
        assert!((at(Some(8_000)) - 60.0).abs() < 1e-9);
    }

    #[test]
    fn comparisons_filter_and_keep_the_vectors_value() {
        let s = lab();
        assert_eq!(
            vector(&s, "g > 1"),
            vec![
                ("{__name__=\"g\",instance=\"rank-1\"}".into(), 4.0),
                ("{__name__=\"g\",instance=\"rank-2\"}".into(), 2.0)
            ]
        );
        assert_eq!(vector(&s, "3 < g").len(), 1);
        assert_eq!(vector(&s, "3 < g")[0].1, 4.0);
        // Chained: > 0 then != 4.
        assert_eq!(vector(&s, "g > 0 != 4").len(), 2);
        assert_eq!(
            vector(&s, "g > bool 1"),
            vec![
                ("{instance=\"rank-0\"}".into(), 0.0),
                ("{instance=\"rank-1\"}".into(), 1.0),
                ("{instance=\"rank-2\"}".into(), 1.0)
            ]
        );
        assert!(matches!(eval(&s, "1 < bool 2"), Value::Scalar(v) if v == 1.0));
        // Arithmetic drops the name.
        assert_eq!(vector(&s, "g * 2")[0].0, "{instance=\"rank-0\"}");
    }

    #[test]
    fn vector_matching_one_to_one_on_and_ignoring() {
        let s = lab();
        assert_eq!(
            vector(&s, "g / w"),
            vec![
                ("{instance=\"rank-0\"}".into(), 10.0),
                ("{instance=\"rank-1\"}".into(), 4.0 / 0.9),
                ("{instance=\"rank-2\"}".into(), 4.0)
            ]
        );
        // A comparison between vectors keeps the left side's value and name.
        assert_eq!(vector(&s, "g > w")[0].0, "{__name__=\"g\",instance=\"rank-0\"}");
        // on () keeps no label.
        assert_eq!(vector(&s, "max(g) - on () max(w)"), vec![("".into(), 4.0 - 0.9)]);
        assert_eq!(
            vector(&s, "rate(c_total[3s]) / ignoring (server) g"),
            vec![
                ("{instance=\"rank-0\"}".into(), 10.0),
                ("{instance=\"rank-1\"}".into(), 7.5),
                ("{instance=\"rank-2\"}".into(), 10.0)
            ]
        );
        // Many on one side of a match group: refused, as Prometheus refuses it.
        let fails = |q: &str| {
            Ctx {
                store: &s,
                t: 10_000,
                earliest: None,
                cache: None,
            }
            .eval(&parse(q).unwrap())
            .unwrap_err()
            .to_string()
        };
        assert!(fails("max(g) + on () g").contains("many-to-many matching not allowed"));
        assert!(fails("g + on () max(w)").contains("many-to-one matching must be explicit"));
    }

    #[test]
    fn set_operators() {
        let s = lab();
        assert_eq!(vector(&s, "g and on (instance) (w > 0.4)").len(), 2);
        assert_eq!(vector(&s, "g unless on (instance) (w > 0.4)").len(), 1);
        // Matched on every label but the name.
        assert_eq!(vector(&s, "g and w").len(), 3);
        assert_eq!(vector(&s, "g and ignoring (x) g").len(), 3);
        assert_eq!(vector(&s, "nothing or vector(0)"), vec![("".into(), 0.0)]);
        assert_eq!(vector(&s, "sum(g) or vector(0)"), vec![("".into(), 7.0)]);
        assert_eq!(vector(&s, "(g > 3) or on (instance) w").len(), 3);
        assert_eq!(vector(&s, "(g > 3) or on (instance) w")[0].1, 4.0);
    }

    #[test]
    fn over_time_scalar_and_quantiles() {
        let s = lab();
        assert_eq!(vector(&s, "count_over_time(g[5s])")[0].1, 6.0);
        assert_eq!(vector(&s, "max_over_time(c_total[2s])")[0].1, 100.0);
        assert_eq!(vector(&s, "min_over_time(c_total[2s])")[0].1, 80.0);
        assert_eq!(vector(&s, "avg_over_time(c_total[2s])")[0].1, 90.0);
        assert_eq!(vector(&s, "sum_over_time(g[1s])")[0].1, 2.0);
        assert!((vector(&s, "stddev_over_time(c_total[2s])")[0].1 - (200.0f64 / 3.0).sqrt()).abs() < 1e-9);
        assert!(matches!(eval(&s, "scalar(max(g))"), Value::Scalar(v) if v == 4.0));
        assert!(matches!(eval(&s, "scalar(g)"), Value::Scalar(v) if v.is_nan()));
        assert_eq!(vector(&s, "g > 1.5 * scalar(quantile(0.5, g))").len(), 1);
        assert!(matches!(eval(&s, "time()"), Value::Scalar(v) if v == 10.0));
        assert_eq!(vector(&s, "-g")[0], ("{instance=\"rank-0\"}".into(), -1.0));
        assert_eq!(vector(&s, "abs(-g)")[2].1, 2.0);
        assert!(matches!(eval(&s, "2 ^ 3 % 5"), Value::Scalar(v) if v == 3.0));
    }

    #[test]
    fn histogram_quantile_over_summed_rates() {
        let s = store(&[
            (
                "rank-0",
                "d_bucket{le=\"0.1\"} 0+10\nd_bucket{le=\"1\"} 0+10\nd_bucket{le=\"+Inf\"} 0+10",
            ),
            (
                "rank-1",
                "d_bucket{le=\"0.1\"} 0+0\nd_bucket{le=\"1\"} 0+10\nd_bucket{le=\"+Inf\"} 0+10",
            ),
        ]);
        let v = vector(&s, "histogram_quantile(0.5, sum by (le) (rate(d_bucket[3s])))");
        assert_eq!(v.len(), 1);
        assert!((v[0].1 - 0.1).abs() < 1e-9, "{v:?}");
        let v = vector(
            &s,
            "histogram_quantile(0.75, sum by (instance, le) (rate(d_bucket[3s])))",
        );
        assert!(
            (v[0].1 - 0.075).abs() < 1e-9 && (v[1].1 - 0.775).abs() < 1e-9,
            "{v:?}"
        );
    }

    #[test]
    fn offset_reads_the_past() {
        let s = lab();
        assert_eq!(vector(&s, "c_total offset 2s")[0].1, 80.0);
        assert_eq!(vector(&s, "max_over_time(c_total[1s] offset 5s)")[0].1, 50.0);
    }
}
