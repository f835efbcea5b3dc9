//! The parser: PromQL text to an [`Expr`], by precedence climbing over the lexer's tokens, checking each
//! node's types as Prometheus' parser does. A PromQL construct the lab does not evaluate (a function, an
//! aggregation, `group_left`, a subquery, `@`) is refused here, named and positioned, so a rule file that
//! uses one is refused when it is loaded, not when the rule first runs.

use regex::Regex;

use super::ast::{
    ALL_AGGREGATIONS, AggOp, BinOp, Expr, ExprKind, Func, Grouping, MatchOp, Matcher, Matching, NAME,
    Selector, ValueType,
};
use super::lexer::{Tok, Token, lex};
use crate::error::QueryError;

/// Parses one PromQL expression.
///
/// # Errors
/// [`QueryError::Syntax`] for text that is not PromQL or whose types do not fit (a `rate` of an instant
/// vector), [`QueryError::Unsupported`] for PromQL the lab does not evaluate; both with line and column.
pub fn parse(src: &str) -> Result<Expr, QueryError> {
    let tokens = lex(src)?;
    let mut p = Parser { src, tokens, pos: 0 };
    let e = p.expr(0)?;
    if p.peek() != &Tok::Eof {
        return Err(p.unexpected("an operator or the end of the expression"));
    }
    Ok(e)
}

struct Parser<'a> {
    src: &'a str,
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.tokens[self.pos].kind
    }

    fn peek_at(&self, n: usize) -> &Tok {
        &self.tokens[(self.pos + n).min(self.tokens.len() - 1)].kind
    }

    fn at(&self) -> usize {
        self.tokens[self.pos].at
    }

    fn next(&mut self) -> Token {
        let t = self.tokens[self.pos].clone();
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn syntax(&self, at: usize, message: impl Into<String>) -> QueryError {
        QueryError::syntax(self.src, at, message)
    }

    fn unsupported(&self, at: usize, construct: impl Into<String>) -> QueryError {
        QueryError::unsupported(self.src, at, construct)
    }

    fn unexpected(&self, wanted: &str) -> QueryError {
        self.syntax(
            self.at(),
            format!("unexpected {}, expected {wanted}", self.peek().describe()),
        )
    }

    fn expect(&mut self, t: Tok, wanted: &str) -> Result<Token, QueryError> {
        if *self.peek() == t {
            Ok(self.next())
        } else {
            Err(self.unexpected(wanted))
        }
    }

    fn keyword(&self) -> Option<&str> {
        match self.peek() {
            Tok::Ident(s) => Some(s.as_str()),
            _ => None,
        }
    }

    /// The binary operator at the current token, if any.
    fn binop(&self) -> Option<BinOp> {
        Some(match self.peek() {
            Tok::Add => BinOp::Add,
            Tok::Sub => BinOp::Sub,
            Tok::Mul => BinOp::Mul,
            Tok::Div => BinOp::Div,
            Tok::Mod => BinOp::Mod,
            Tok::Pow => BinOp::Pow,
            Tok::Eq => BinOp::Eq,
            Tok::Ne => BinOp::Ne,
            Tok::Gt => BinOp::Gt,
            Tok::Lt => BinOp::Lt,
            Tok::Ge => BinOp::Ge,
            Tok::Le => BinOp::Le,
            Tok::Ident(s) => match s.to_ascii_lowercase().as_str() {
                "and" => BinOp::And,
                "or" => BinOp::Or,
                "unless" => BinOp::Unless,
                _ => return None,
            },
            _ => return None,
        })
    }

    /// An expression whose operators bind at least as strongly as `min`.
    fn expr(&mut self, min: u8) -> Result<Expr, QueryError> {
        let mut lhs = self.unary()?;
        while let Some(op) = self.binop() {
            if op.precedence() < min {
                break;
            }
            let op_at = self.at();
            self.next();
            let (return_bool, matching) = self.modifiers(op)?;
            // `^` is right-associative; the rest are left-associative.
            let next_min = if op == BinOp::Pow {
                op.precedence()
            } else {
                op.precedence() + 1
            };
            let rhs = self.expr(next_min)?;
            lhs = self.binary(op, op_at, lhs, rhs, return_bool, matching)?;
        }
        Ok(lhs)
    }

    /// `bool`, `on (...)` / `ignoring (...)`, and the refused `group_left` / `group_right`.
    fn modifiers(&mut self, op: BinOp) -> Result<(bool, Option<Matching>), QueryError> {
        let mut return_bool = false;
        if self.keyword().is_some_and(|k| k.eq_ignore_ascii_case("bool")) {
            if !op.is_comparison() {
                return Err(self.syntax(
                    self.at(),
                    "bool modifier can only be used on comparison operators",
                ));
            }
            self.next();
            return_bool = true;
        }
        let mut matching = None;
        if let Some(k) = self.keyword().map(str::to_ascii_lowercase)
            && (k == "on" || k == "ignoring")
        {
            self.next();
            let labels = self.label_list()?;
            matching = Some(Matching {
                on: k == "on",
                labels,
            });
            if let Some(g) = self.keyword().map(str::to_ascii_lowercase)
                && (g == "group_left" || g == "group_right")
            {
                return Err(self.unsupported(self.at(), g));
            }
        }
        Ok((return_bool, matching))
    }

    fn binary(
        &self,
        op: BinOp,
        at: usize,
        lhs: Expr,
        rhs: Expr,
        return_bool: bool,
        matching: Option<Matching>,
    ) -> Result<Expr, QueryError> {
        let (lt, rt) = (lhs.value_type(), rhs.value_type());
        for (t, side) in [(lt, &lhs), (rt, &rhs)] {
            if t != ValueType::Scalar && t != ValueType::Vector {
                return Err(self.syntax(
                    side.at,
                    format!("binary expression must contain only scalar and instant vector types, got {t}"),
                ));
            }
        }
        let scalars = lt == ValueType::Scalar || rt == ValueType::Scalar;
        if op.is_set() && scalars {
            return Err(self.syntax(
                at,
                format!(
                    "set operator \"{}\" not allowed in binary scalar expression",
                    op.symbol()
                ),
            ));
        }
        if matching.is_some() && scalars {
            return Err(self.syntax(at, "vector matching only allowed between instant vectors"));
        }
        if op.is_comparison() && lt == ValueType::Scalar && rt == ValueType::Scalar && !return_bool {
            return Err(self.syntax(at, "comparisons between scalars must use BOOL modifier"));
        }
        Ok(Expr {
            at: lhs.at,
            kind: ExprKind::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
                return_bool,
                matching,
            },
        })
    }

    /// Unary minus or plus, binding less strongly than `^`.
    fn unary(&mut self) -> Result<Expr, QueryError> {
        if matches!(self.peek(), Tok::Sub | Tok::Add) {
            let at = self.at();
            let neg = self.next().kind == Tok::Sub;
            let e = self.expr(BinOp::Pow.precedence())?;
            let t = e.value_type();
            if t != ValueType::Scalar && t != ValueType::Vector {
                return Err(self.syntax(
                    at,
                    format!("unary expression only allowed on expressions of type scalar or instant vector, got {t}"),
                ));
            }
            if !neg {
                return Ok(e);
            }
            return Ok(match e.kind {
                ExprKind::Number(n) => Expr {
                    kind: ExprKind::Number(-n),
                    at,
                },
                _ => Expr {
                    kind: ExprKind::Neg(Box::new(e)),
                    at,
                },
            });
        }
        self.postfix()
    }

    /// A primary expression, then its range `[d]` and `offset d`.
    fn postfix(&mut self) -> Result<Expr, QueryError> {
        let mut e = self.primary()?;
        if *self.peek() == Tok::LBracket {
            let at = self.at();
            self.next();
            let range = match self.next().kind {
                Tok::Duration(ms) => ms,
                _ => return Err(self.syntax(at + 1, "expected a duration in the range, e.g. [5m]")),
            };
            if *self.peek() == Tok::Colon {
                return Err(self.unsupported(at, "a subquery ([range:step])"));
            }
            self.expect(Tok::RBracket, "\"]\"")?;
            e = match e.kind {
                ExprKind::Selector(selector) => Expr {
                    kind: ExprKind::Matrix {
                        selector,
                        range_ms: range,
                    },
                    at: e.at,
                },
                _ => {
                    return Err(self.syntax(
                        at,
                        "ranges only allowed for vector selectors (a subquery needs [range:step], which the lab does not evaluate)",
                    ));
                }
            };
            if range <= 0 {
                return Err(self.syntax(at, "a range must be more than 0s"));
            }
        }
        if self.keyword().is_some_and(|k| k.eq_ignore_ascii_case("offset")) {
            let at = self.at();
            self.next();
            let neg = if *self.peek() == Tok::Sub {
                self.next();
                true
            } else {
                false
            };
            let ms = match self.next().kind {
                Tok::Duration(ms) => ms,
                _ => return Err(self.syntax(at, "expected a duration after offset, e.g. offset 5m")),
            };
            let ms = if neg { -ms } else { ms };
            match &mut e.kind {
                ExprKind::Selector(s) | ExprKind::Matrix { selector: s, .. } => s.offset_ms = ms,
                _ => return Err(self.syntax(at, "offset modifier must be preceded by a vector selector")),
            }
        }
        if *self.peek() == Tok::At {
            return Err(self.unsupported(self.at(), "the @ modifier"));
        }
        Ok(e)
    }

    fn primary(&mut self) -> Result<Expr, QueryError> {
        let at = self.at();
        match self.peek().clone() {
            Tok::Number(n) => {
                self.next();
                Ok(Expr {
                    kind: ExprKind::Number(n),
                    at,
                })
            }
            Tok::Str(s) => {
                self.next();
                Ok(Expr {
                    kind: ExprKind::Str(s),
                    at,
                })
            }
            Tok::LParen => {
                self.next();
                let e = self.expr(0)?;
                self.expect(Tok::RParen, "\")\"")?;
                Ok(Expr {
                    kind: ExprKind::Paren(Box::new(e)),
                    at,
                })
            }
            Tok::LBrace => self.selector(None, at),
            Tok::Ident(name) => {
                let lower = name.to_ascii_lowercase();
                let grouping_next = matches!(self.peek_at(1), Tok::Ident(k)
                    if k.eq_ignore_ascii_case("by") || k.eq_ignore_ascii_case("without"));
                if ALL_AGGREGATIONS.contains(&lower.as_str())
                    && (*self.peek_at(1) == Tok::LParen || grouping_next)
                {
                    return self.aggregate(&lower, at);
                }
                if *self.peek_at(1) == Tok::LParen {
                    return self.call(&name, at);
                }
                if [
                    "by",
                    "without",
                    "on",
                    "ignoring",
                    "bool",
                    "offset",
                    "group_left",
                    "group_right",
                ]
                .contains(&lower.as_str())
                    || self.binop().is_some()
                {
                    return Err(self.unexpected("an expression"));
                }
                self.next();
                self.selector(Some(name), at)
            }
            Tok::Duration(_) => {
                Err(self.syntax(at, "a duration is only allowed in a range [5m] or after offset"))
            }
            _ => Err(self.unexpected("an expression")),
        }
    }

    /// `name{matchers}`, or `{matchers}` naming the metric with `__name__="..."`.
    fn selector(&mut self, name: Option<String>, at: usize) -> Result<Expr, QueryError> {
        let mut matchers = Vec::new();
        if *self.peek() == Tok::LBrace {
            self.next();
            while *self.peek() != Tok::RBrace {
                matchers.push(self.matcher()?);
                match self.peek() {
                    Tok::Comma => {
                        self.next();
                    }
                    Tok::RBrace => {}
                    _ => return Err(self.unexpected("\",\" or \"}\" in the label matchers")),
                }
            }
            self.next();
        }
        let mut name = name;
        let mut rest = Vec::new();
        for m in matchers {
            if m.label != NAME {
                rest.push(m);
            } else if m.op == MatchOp::Eq && name.is_none() {
                name = Some(m.value);
            } else {
                return Err(self.unsupported(
                    at,
                    "a selector matching the metric name other than by one exact name",
                ));
            }
        }
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Err(self.unsupported(at, "a selector without a metric name"));
        };
        Ok(Expr {
            kind: ExprKind::Selector(Selector {
                name,
                matchers: rest,
                offset_ms: 0,
            }),
            at,
        })
    }

    fn matcher(&mut self) -> Result<Matcher, QueryError> {
        let at = self.at();
        let label = match self.next().kind {
            Tok::Ident(l) if is_label_name(&l) => l,
            _ => return Err(self.syntax(at, "expected a label name in the label matchers")),
        };
        let op_at = self.at();
        let op = match self.next().kind {
            Tok::Assign => MatchOp::Eq,
            Tok::Ne => MatchOp::Ne,
            Tok::ReMatch => MatchOp::Re,
            Tok::ReNoMatch => MatchOp::NotRe,
            _ => return Err(self.syntax(op_at, "expected =, !=, =~ or !~ after the label name")),
        };
        let value_at = self.at();
        let value = match self.next().kind {
            Tok::Str(s) => s,
            _ => return Err(self.syntax(value_at, "expected a quoted label value")),
        };
        let regex = match op {
            MatchOp::Re | MatchOp::NotRe => Some(
                // Anchored at both ends, as Prometheus anchors every label regex.
                Regex::new(&format!("^(?:{value})$")).map_err(|e| {
                    self.syntax(value_at, format!("invalid regular expression {value:?}: {e}"))
                })?,
            ),
            _ => None,
        };
        Ok(Matcher {
            label,
            op,
            value,
            regex,
        })
    }

    /// `( l1, l2 )` after by, without, on or ignoring.
    fn label_list(&mut self) -> Result<Vec<String>, QueryError> {
        self.expect(Tok::LParen, "\"(\" and a list of label names")?;
        let mut labels = Vec::new();
        while *self.peek() != Tok::RParen {
            let at = self.at();
            match self.next().kind {
                Tok::Ident(l) if is_label_name(&l) => labels.push(l),
                _ => return Err(self.syntax(at, "expected a label name")),
            }
            match self.peek() {
                Tok::Comma => {
                    self.next();
                }
                Tok::RParen => {}
                _ => return Err(self.unexpected("\",\" or \")\" in the label list")),
            }
        }
        self.next();
        Ok(labels)
    }

    fn grouping(&mut self) -> Result<Option<Grouping>, QueryError> {
        let Some(k) = self.keyword().map(str::to_ascii_lowercase) else {
            return Ok(None);
        };
        if k != "by" && k != "without" {
            return Ok(None);
        }
        self.next();
        Ok(Some(Grouping {
            without: k == "without",
            labels: self.label_list()?,
        }))
    }

    fn aggregate(&mut self, name: &str, at: usize) -> Result<Expr, QueryError> {
        let Some(op) = AggOp::by_name(name) else {
            return Err(self.unsupported(at, format!("aggregation {name}")));
        };
        self.next();
        let before = self.grouping()?;
        self.expect(Tok::LParen, "\"(\" after the aggregation")?;
        let first = self.expr(0)?;
        let (param, expr) = if *self.peek() == Tok::Comma {
            self.next();
            let e = self.expr(0)?;
            (Some(first), e)
        } else {
            (None, first)
        };
        self.expect(Tok::RParen, "\")\" closing the aggregation")?;
        let after = self.grouping()?;
        if before.is_some() && after.is_some() {
            return Err(self.syntax(at, "an aggregation takes one by or without clause"));
        }
        match (op, &param) {
            (AggOp::Quantile, None) => {
                return Err(self.syntax(at, "quantile takes a parameter: quantile(0.5, expr)"));
            }
            (AggOp::Quantile, Some(p)) if p.value_type() != ValueType::Scalar => {
                return Err(self.syntax(p.at, "expected type scalar in aggregation parameter"));
            }
            (AggOp::Quantile, _) => {}
            (_, Some(p)) => {
                return Err(self.syntax(p.at, format!("aggregation {name} takes no parameter")));
            }
            _ => {}
        }
        if expr.value_type() != ValueType::Vector {
            return Err(self.syntax(
                expr.at,
                format!(
                    "expected type instant vector in aggregation expression, got {}",
                    expr.value_type()
                ),
            ));
        }
        Ok(Expr {
            kind: ExprKind::Aggregate {
                op,
                param: param.map(Box::new),
                grouping: before.or(after).unwrap_or_default(),
                expr: Box::new(expr),
            },
            at,
        })
    }

    fn call(&mut self, name: &str, at: usize) -> Result<Expr, QueryError> {
        let Some(func) = Func::by_name(name) else {
            return Err(self.unsupported(at, format!("function {name}")));
        };
        self.next();
        self.expect(Tok::LParen, "\"(\"")?;
        let mut args = Vec::new();
        while *self.peek() != Tok::RParen {
            args.push(self.expr(0)?);
            match self.peek() {
                Tok::Comma => {
                    self.next();
                }
                Tok::RParen => {}
                _ => return Err(self.unexpected("\",\" or \")\" in the arguments")),
            }
        }
        self.next();
        let takes = func.takes();
        if args.len() != takes.len() {
            return Err(self.syntax(
                at,
                format!(
                    "expected {} argument(s) in call to \"{name}\", got {}",
                    takes.len(),
                    args.len()
                ),
            ));
        }
        for (a, want) in args.iter().zip(takes) {
            if a.value_type() != *want {
                return Err(self.syntax(
                    a.at,
                    format!(
                        "expected type {want} in call to function \"{name}\", got {}",
                        a.value_type()
                    ),
                ));
            }
        }
        Ok(Expr {
            kind: ExprKind::Call { func, args },
            at,
        })
    }
}

fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(e: &Expr) -> String {
        match &e.kind {
            ExprKind::Number(n) => format!("{n}"),
            ExprKind::Str(s) => format!("{s:?}"),
            ExprKind::Selector(s) => {
                let m: Vec<String> = s
                    .matchers
                    .iter()
                    .map(|m| format!("{}{:?}{:?}", m.label, m.op, m.value))
                    .collect();
                format!("{}{{{}}}", s.name, m.join(","))
                    + &if s.offset_ms != 0 {
                        format!(" offset {}", s.offset_ms)
                    } else {
                        String::new()
                    }
            }
            ExprKind::Matrix { selector, range_ms } => {
                format!("{}[{range_ms}]", selector.name)
            }
            ExprKind::Call { func, args } => format!(
                "{}({})",
                func.name(),
                args.iter().map(shape).collect::<Vec<_>>().join(", ")
            ),
            ExprKind::Aggregate {
                op,
                param,
                grouping,
                expr,
            } => format!(
                "{op:?}{}{:?}({}{})",
                if grouping.without { " without" } else { " by" },
                grouping.labels,
                param
                    .as_ref()
                    .map_or(String::new(), |p| format!("{}, ", shape(p))),
                shape(expr)
            ),
            ExprKind::Binary {
                op,
                lhs,
                rhs,
                return_bool,
                matching,
            } => format!(
                "({} {}{}{} {})",
                shape(lhs),
                op.symbol(),
                if *return_bool { " bool" } else { "" },
                matching.as_ref().map_or(String::new(), |m| format!(
                    " {}{:?}",
                    if m.on { "on" } else { "ignoring" },
                    m.labels
                )),
                shape(rhs)
            ),
            ExprKind::Neg(e) => format!("-{}", shape(e)),
            ExprKind::Paren(e) => shape(e),
        }
    }

    fn p(s: &str) -> String {
        shape(&parse(s).unwrap_or_else(|e| panic!("{s}: {e}")))
    }

    fn err(s: &str) -> String {
        parse(s).map(|e| shape(&e)).unwrap_err().to_string()
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(p("a + b * c"), "(a{} + (b{} * c{}))");
        assert_eq!(p("a - b - c"), "((a{} - b{}) - c{})");
        assert_eq!(p("2 ^ 3 ^ 2"), "(2 ^ (3 ^ 2))");
        assert_eq!(p("-a ^ 2"), "-(a{} ^ 2)");
        assert_eq!(p("-1 * a"), "(-1 * a{})");
        assert_eq!(
            p("a > 0.25 and on (instance) b > 2 * c"),
            "((a{} > 0.25) and on[\"instance\"] (b{} > (2 * c{})))"
        );
        assert_eq!(p("a or b and c unless d"), "(a{} or ((b{} and c{}) unless d{}))");
        // Chained comparisons filter left to right.
        assert_eq!(
            p("max by (pod) (x) > 0 != 4"),
            "((Max by[\"pod\"](x{}) > 0) != 4)"
        );
        assert_eq!(p("a == bool 1"), "(a{} == bool 1)");
    }

    #[test]
    fn the_rule_files_constructs() {
        assert_eq!(
            p("sum(rate(lab_samples_total[10s])) or vector(0)"),
            "(Sum by[](rate(lab_samples_total[10000])) or vector(0))"
        );
        assert_eq!(
            p("histogram_quantile(0.5, sum by (server, le) (rate(x_bucket{type=\"GET\"}[3s])))"),
            "histogram_quantile(0.5, Sum by[\"server\", \"le\"](rate(x_bucket[3000])))"
        );
        assert_eq!(p("sum(x) without (a)"), "Sum without[\"a\"](x{})");
        assert_eq!(
            p("kube_x{pod=~\"rank-[0-9]+\", a!=\"b\", c!~'d'} offset 1m"),
            "kube_x{podRe\"rank-[0-9]+\",aNe\"b\",cNotRe\"d\"} offset 60000"
        );
        assert_eq!(p("{__name__=\"up\"}"), "up{}");
        assert_eq!(
            p("quantile(0.25, lab:rank_compute_seconds_per_step)"),
            "Quantile by[](0.25, lab:rank_compute_seconds_per_step{})"
        );
    }

    #[test]
    fn unsupported_constructs_are_named_and_placed() {
        assert_eq!(
            err("label_replace(up, \"a\", \"b\", \"c\", \"d\")"),
            "line 1, column 1: function label_replace is not supported by the lab's evaluator \
             (docs/telemetry.md lists what it evaluates)"
        );
        assert!(err("topk(3, up)").contains("aggregation topk is not supported"));
        assert!(err("a * on (x) group_left b").contains("column 12: group_left is not supported"));
        assert!(err("rate(up[5m:1m])").contains("a subquery ([range:step]) is not supported"));
        assert!(err("up @ 100").contains("the @ modifier is not supported"));
        assert!(err("{job=\"x\"}").contains("a selector without a metric name is not supported"));
    }

    #[test]
    fn type_and_syntax_errors() {
        assert_eq!(
            err("rate(up)"),
            "line 1, column 6: expected type range vector in call to function \"rate\", got instant vector"
        );
        assert!(err("1 > 2").contains("comparisons between scalars must use BOOL modifier"));
        assert!(err("1 and up").contains("set operator \"and\" not allowed"));
        assert!(err("up + bool 1").contains("bool modifier can only be used on comparison operators"));
        assert!(err("sum(up").contains("expected \")\" closing the aggregation"));
        assert!(err("up{a=~\"(\"}").contains("invalid regular expression"));
        assert!(err("up[5m] + 1").contains("got range vector"));
        assert!(err("(up)[5m]").contains("ranges only allowed for vector selectors"));
        assert_eq!(
            err("sum by (a)\n  (x +)"),
            "line 2, column 7: unexpected \")\", expected an expression"
        );
        assert!(err("up up").contains("expected an operator or the end of the expression"));
    }
}
