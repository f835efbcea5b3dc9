//! The parsed expression: what the parser builds and the evaluator walks. Every node keeps the byte
//! offset it starts at, and has a static type checked as it is built, as Prometheus' parser checks it.

use regex::Regex;

/// The label that carries the metric name inside an evaluated label set.
pub const NAME: &str = "__name__";

/// A parsed expression.
#[derive(Debug, Clone)]
pub struct Expr {
    pub kind: ExprKind,
    /// Byte offset of its first character in the expression text.
    pub at: usize,
}

/// The kinds of expression the lab evaluates.
#[derive(Debug, Clone)]
pub enum ExprKind {
    /// A number literal.
    Number(f64),
    /// A string literal (a function argument in PromQL; no function the lab evaluates takes one).
    Str(String),
    /// An instant vector selector: `name{matchers} offset d`.
    Selector(Selector),
    /// A range vector selector: `name{matchers}[range] offset d`.
    Matrix { selector: Selector, range_ms: i64 },
    /// A function call.
    Call { func: Func, args: Vec<Expr> },
    /// An aggregation: `sum by (l) (expr)`, `quantile(0.5, expr)`.
    Aggregate {
        op: AggOp,
        param: Option<Box<Expr>>,
        grouping: Grouping,
        expr: Box<Expr>,
    },
    /// A binary operation.
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
        /// `bool`: a comparison that returns 0 or 1 instead of filtering.
        return_bool: bool,
        /// `on (...)` / `ignoring (...)`.
        matching: Option<Matching>,
    },
    /// Unary minus.
    Neg(Box<Expr>),
    /// `( expr )`.
    Paren(Box<Expr>),
}

/// The type of value an expression evaluates to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    Scalar,
    Vector,
    Matrix,
    String,
}

impl std::fmt::Display for ValueType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ValueType::Scalar => "scalar",
            ValueType::Vector => "instant vector",
            ValueType::Matrix => "range vector",
            ValueType::String => "string",
        })
    }
}

impl Expr {
    /// The type the expression evaluates to.
    pub fn value_type(&self) -> ValueType {
        match &self.kind {
            ExprKind::Number(_) => ValueType::Scalar,
            ExprKind::Str(_) => ValueType::String,
            ExprKind::Selector(_) | ExprKind::Aggregate { .. } => ValueType::Vector,
            ExprKind::Matrix { .. } => ValueType::Matrix,
            ExprKind::Call { func, .. } => func.returns(),
            ExprKind::Binary { lhs, rhs, .. } => {
                if lhs.value_type() == ValueType::Scalar && rhs.value_type() == ValueType::Scalar {
                    ValueType::Scalar
                } else {
                    ValueType::Vector
                }
            }
            ExprKind::Neg(e) | ExprKind::Paren(e) => e.value_type(),
        }
    }

    /// Every selector in the expression, with the range it reads (0 for an instant selector).
    pub fn selectors(&self) -> Vec<(&Selector, i64)> {
        let mut out = Vec::new();
        self.walk(&mut |e| match &e.kind {
            ExprKind::Selector(s) => out.push((s, 0)),
            ExprKind::Matrix { selector, range_ms } => out.push((selector, *range_ms)),
            _ => {}
        });
        out
    }

    fn walk<'a>(&'a self, f: &mut impl FnMut(&'a Expr)) {
        f(self);
        match &self.kind {
            ExprKind::Call { args, .. } => args.iter().for_each(|a| a.walk(f)),
            ExprKind::Aggregate { param, expr, .. } => {
                if let Some(p) = param {
                    p.walk(f);
                }
                expr.walk(f);
            }
            ExprKind::Binary { lhs, rhs, .. } => {
                lhs.walk(f);
                rhs.walk(f);
            }
            ExprKind::Neg(e) | ExprKind::Paren(e) => e.walk(f),
            _ => {}
        }
    }
}

/// A series selector: the metric name and label matchers.
#[derive(Debug, Clone)]
pub struct Selector {
    pub name: String,
    pub matchers: Vec<Matcher>,
    pub offset_ms: i64,
}

impl Selector {
    /// The matchers and offset as text: with the name, what makes two selectors select the same.
    pub fn key(&self) -> String {
        let mut k = String::new();
        for m in &self.matchers {
            k.push_str(&format!("{}{:?}{:?},", m.label, m.op, m.value));
        }
        k.push_str(&self.offset_ms.to_string());
        k
    }

    /// Whether a series' labels (without the metric name) pass every matcher. A missing label matches as
    /// the empty string, as in Prometheus.
    pub fn matches(&self, labels: &crate::labels::Labels) -> bool {
        self.matchers
            .iter()
            .all(|m| m.matches(labels.get(&m.label).unwrap_or("")))
    }
}

/// One label matcher.
#[derive(Debug, Clone)]
pub struct Matcher {
    pub label: String,
    pub op: MatchOp,
    pub value: String,
    /// The anchored regular expression of `=~` and `!~`.
    pub regex: Option<Regex>,
}

impl Matcher {
    /// Whether the label value `v` passes.
    pub fn matches(&self, v: &str) -> bool {
        match self.op {
            MatchOp::Eq => v == self.value,
            MatchOp::Ne => v != self.value,
            MatchOp::Re => self.regex.as_ref().is_some_and(|r| r.is_match(v)),
            MatchOp::NotRe => !self.regex.as_ref().is_some_and(|r| r.is_match(v)),
        }
    }
}

/// `=`, `!=`, `=~`, `!~`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchOp {
    Eq,
    Ne,
    Re,
    NotRe,
}

/// `by (...)` or `without (...)`; `by ()` (or none) groups everything into one.
#[derive(Debug, Clone, Default)]
pub struct Grouping {
    pub without: bool,
    pub labels: Vec<String>,
}

/// `on (...)` or `ignoring (...)`.
#[derive(Debug, Clone)]
pub struct Matching {
    pub on: bool,
    pub labels: Vec<String>,
}

/// The functions the lab evaluates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    Rate,
    Increase,
    HistogramQuantile,
    AvgOverTime,
    MinOverTime,
    MaxOverTime,
    SumOverTime,
    CountOverTime,
    StddevOverTime,
    Scalar,
    Vector,
    Abs,
    Time,
}

impl Func {
    /// The function called `name`, if the lab evaluates it.
    pub fn by_name(name: &str) -> Option<Func> {
        Some(match name {
            "rate" => Func::Rate,
            "increase" => Func::Increase,
            "histogram_quantile" => Func::HistogramQuantile,
            "avg_over_time" => Func::AvgOverTime,
            "min_over_time" => Func::MinOverTime,
            "max_over_time" => Func::MaxOverTime,
            "sum_over_time" => Func::SumOverTime,
            "count_over_time" => Func::CountOverTime,
            "stddev_over_time" => Func::StddevOverTime,
            "scalar" => Func::Scalar,
            "vector" => Func::Vector,
            "abs" => Func::Abs,
            "time" => Func::Time,
            _ => return None,
        })
    }

    /// Its name in PromQL.
    pub fn name(self) -> &'static str {
        match self {
            Func::Rate => "rate",
            Func::Increase => "increase",
            Func::HistogramQuantile => "histogram_quantile",
            Func::AvgOverTime => "avg_over_time",
            Func::MinOverTime => "min_over_time",
            Func::MaxOverTime => "max_over_time",
            Func::SumOverTime => "sum_over_time",
            Func::CountOverTime => "count_over_time",
            Func::StddevOverTime => "stddev_over_time",
            Func::Scalar => "scalar",
            Func::Vector => "vector",
            Func::Abs => "abs",
            Func::Time => "time",
        }
    }

    /// The types of its arguments.
    pub fn takes(self) -> &'static [ValueType] {
        match self {
            Func::Rate
            | Func::Increase
            | Func::AvgOverTime
            | Func::MinOverTime
            | Func::MaxOverTime
            | Func::SumOverTime
            | Func::CountOverTime
            | Func::StddevOverTime => &[ValueType::Matrix],
            Func::HistogramQuantile => &[ValueType::Scalar, ValueType::Vector],
            Func::Scalar | Func::Abs => &[ValueType::Vector],
            Func::Vector => &[ValueType::Scalar],
            Func::Time => &[],
        }
    }

    /// The type it returns.
    pub fn returns(self) -> ValueType {
        match self {
            Func::Scalar | Func::Time => ValueType::Scalar,
            _ => ValueType::Vector,
        }
    }
}

/// The aggregations the lab evaluates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggOp {
    Sum,
    Avg,
    Count,
    Min,
    Max,
    Quantile,
}

impl AggOp {
    /// The aggregation called `name`, if the lab evaluates it.
    pub fn by_name(name: &str) -> Option<AggOp> {
        Some(match name {
            "sum" => AggOp::Sum,
            "avg" => AggOp::Avg,
            "count" => AggOp::Count,
            "min" => AggOp::Min,
            "max" => AggOp::Max,
            "quantile" => AggOp::Quantile,
            _ => return None,
        })
    }
}

/// PromQL's aggregation keywords, those the lab does not evaluate included (so that they are named as
/// unsupported rather than misread as a metric name).
pub const ALL_AGGREGATIONS: [&str; 13] = [
    "sum",
    "avg",
    "count",
    "min",
    "max",
    "quantile",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "count_values",
    "limitk",
];

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
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
    And,
    Or,
    Unless,
}

impl BinOp {
    /// Binding strength: `or` < `and unless` < comparisons < `+ -` < `* / %` < `^`.
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And | BinOp::Unless => 2,
            BinOp::Eq | BinOp::Ne | BinOp::Gt | BinOp::Lt | BinOp::Ge | BinOp::Le => 3,
            BinOp::Add | BinOp::Sub => 4,
            BinOp::Mul | BinOp::Div | BinOp::Mod => 5,
            BinOp::Pow => 6,
        }
    }

    pub fn is_comparison(self) -> bool {
        self.precedence() == 3
    }

    pub fn is_set(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or | BinOp::Unless)
    }

    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Pow => "^",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Gt => ">",
            BinOp::Lt => "<",
            BinOp::Ge => ">=",
            BinOp::Le => "<=",
            BinOp::And => "and",
            BinOp::Or => "or",
            BinOp::Unless => "unless",
        }
    }

    /// `a op b` for two numbers: the value, and whether a comparison holds (always true for arithmetic).
    pub fn apply(self, a: f64, b: f64) -> (f64, bool) {
        match self {
            BinOp::Add => (a + b, true),
            BinOp::Sub => (a - b, true),
            BinOp::Mul => (a * b, true),
            BinOp::Div => (a / b, true),
            BinOp::Mod => (a % b, true),
            BinOp::Pow => (a.powf(b), true),
            BinOp::Eq => (a, a == b),
            BinOp::Ne => (a, a != b),
            BinOp::Gt => (a, a > b),
            BinOp::Lt => (a, a < b),
            BinOp::Ge => (a, a >= b),
            BinOp::Le => (a, a <= b),
            BinOp::And | BinOp::Or | BinOp::Unless => (a, true),
        }
    }
}
