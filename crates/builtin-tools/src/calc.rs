//! `calculate`: a small arithmetic evaluator (hand-written, no dependencies, no side
//! effects).
//!
//! Params: `expression` (string, required, at most [`MAX_EXPRESSION_CHARS`] characters).
//! Result: `{"expression": "2 + 3 * 4", "result": 14}`. A whole result within ±2^53 is
//! returned as a JSON integer, anything else as a float.
//!
//! Grammar, loosest binding first:
//! ```text
//! expr    := term (('+' | '-') term)*
//! term    := unary (('*' | '/' | '%') unary)*
//! unary   := ('-' | '+') unary | power
//! power   := primary (('^' | '**') unary)?          right-associative
//! primary := number | '(' expr ')' | name | name '(' expr (',' expr)* ')'
//! number  := digits ['.' digits] | '.' digits, optionally followed by e[+-]digits
//! ```
//! So `-2^2` is `-4`, `2^3^2` is `512`, `2^-1` is `0.5`. `%` is the remainder with the sign
//! of the dividend. Names: constants `pi`, `e`; functions `sqrt`, `abs`, `floor`, `ceil`,
//! `round` (one argument) and `min`, `max` (one or more).
//!
//! Errors: a syntax error, unknown name, wrong argument count, or nesting deeper than
//! [`MAX_DEPTH`] is `InvalidParams` on `expression` (with the character position);
//! division or remainder by zero, `sqrt` of a negative number, and a non-finite result are
//! `Failed`.

use serde_json::{json, Value};

use crate::error::ToolError;
use crate::params::Params;

/// Longest expression accepted, in characters.
pub const MAX_EXPRESSION_CHARS: usize = 1000;
/// Deepest nesting of parentheses, signs and exponents.
pub const MAX_DEPTH: usize = 64;

pub(crate) fn calculate(params: &Params<'_>) -> Result<Value, ToolError> {
    let expression = params.str_req("expression")?;
    let value = evaluate(expression)?;
    let result = if value.fract() == 0.0 && value.abs() <= 9_007_199_254_740_992.0 {
        // Exact: |value| <= 2^53 and whole, so the cast loses nothing.
        json!(value as i64)
    } else {
        json!(value)
    };
    Ok(json!({ "expression": expression, "result": result }))
}

/// Evaluates an arithmetic expression (see the module docs for the grammar).
pub fn evaluate(expression: &str) -> Result<f64, ToolError> {
    if expression.chars().count() > MAX_EXPRESSION_CHARS {
        return Err(syntax(format!(
            "is longer than {MAX_EXPRESSION_CHARS} characters"
        )));
    }
    let tokens = tokenize(expression)?;
    if tokens.is_empty() {
        return Err(syntax("is empty"));
    }
    let mut parser = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let value = parser.expr()?;
    if let Some(t) = parser.tokens.get(parser.pos) {
        return Err(syntax(format!(
            "has an unexpected {} at position {}",
            t.kind.describe(),
            t.at
        )));
    }
    if !value.is_finite() {
        return Err(ToolError::failed(
            "the result is not a finite number (overflow or an undefined operation)",
        ));
    }
    // Normalize -0 to 0.
    Ok(if value == 0.0 { 0.0 } else { value })
}

fn syntax(message: impl Into<String>) -> ToolError {
    ToolError::invalid("expression", message)
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Num(f64),
    Name(String),
    Op(char),
    Open,
    Close,
    Comma,
}

impl Kind {
    fn describe(&self) -> String {
        match self {
            Kind::Num(n) => format!("number `{n}`"),
            Kind::Name(n) => format!("name `{n}`"),
            Kind::Op(c) => format!("`{c}`"),
            Kind::Open => "`(`".to_string(),
            Kind::Close => "`)`".to_string(),
            Kind::Comma => "`,`".to_string(),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    /// 0-based character position.
    at: usize,
}

fn tokenize(src: &str) -> Result<Vec<Token>, ToolError> {
    let chars: Vec<char> = src.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = i;
        let kind = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '0'..='9' | '.' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                    i += 1;
                }
                // Exponent only when digits follow (so `2e` stays a syntax error, not `2*e`).
                if i < chars.len() && matches!(chars[i], 'e' | 'E') {
                    let mut j = i + 1;
                    if j < chars.len() && matches!(chars[j], '+' | '-') {
                        j += 1;
                    }
                    if j < chars.len() && chars[j].is_ascii_digit() {
                        while j < chars.len() && chars[j].is_ascii_digit() {
                            j += 1;
                        }
                        i = j;
                    }
                }
                let text: String = chars[start..i].iter().collect();
                let n = text.parse::<f64>().map_err(|_| {
                    syntax(format!("has a malformed number `{text}` at position {at}"))
                })?;
                tokens.push(Token {
                    kind: Kind::Num(n),
                    at,
                });
                continue;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                tokens.push(Token {
                    kind: Kind::Name(chars[start..i].iter().collect::<String>().to_lowercase()),
                    at,
                });
                continue;
            }
            '*' if chars.get(i + 1) == Some(&'*') => {
                i += 1;
                Kind::Op('^')
            }
            '+' | '-' | '*' | '/' | '%' | '^' => Kind::Op(c),
            '(' => Kind::Open,
            ')' => Kind::Close,
            ',' => Kind::Comma,
            other => {
                return Err(syntax(format!(
                    "has an unsupported character `{other}` at position {at}"
                )))
            }
        };
        tokens.push(Token { kind, at });
        i += 1;
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Kind> {
        self.tokens.get(self.pos).map(|t| &t.kind)
    }

    fn eat_op(&mut self, ops: &[char]) -> Option<char> {
        match self.peek() {
            Some(Kind::Op(c)) if ops.contains(c) => {
                let c = *c;
                self.pos += 1;
                Some(c)
            }
            _ => None,
        }
    }

    fn here(&self) -> String {
        match self.tokens.get(self.pos) {
            Some(t) => format!("{} at position {}", t.kind.describe(), t.at),
            None => "the end of the expression".to_string(),
        }
    }

    fn expr(&mut self) -> Result<f64, ToolError> {
        let mut value = self.term()?;
        while let Some(op) = self.eat_op(&['+', '-']) {
            let rhs = self.term()?;
            value = if op == '+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    fn term(&mut self) -> Result<f64, ToolError> {
        let mut value = self.unary()?;
        while let Some(op) = self.eat_op(&['*', '/', '%']) {
            let rhs = self.unary()?;
            value = match op {
                '*' => value * rhs,
                _ if rhs == 0.0 => return Err(ToolError::failed("division by zero")),
                '/' => value / rhs,
                _ => value % rhs,
            };
        }
        Ok(value)
    }

    /// Every recursive cycle of the grammar passes through here, so the depth bound here
    /// bounds the recursion.
    fn unary(&mut self) -> Result<f64, ToolError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(syntax(format!("is nested deeper than {MAX_DEPTH} levels")));
        }
        let result = if let Some(op) = self.eat_op(&['-', '+']) {
            self.unary().map(|v| if op == '-' { -v } else { v })
        } else {
            self.power()
        };
        self.depth -= 1;
        result
    }

    fn power(&mut self) -> Result<f64, ToolError> {
        let base = self.primary()?;
        if self.eat_op(&['^']).is_some() {
            let exponent = self.unary()?;
            return Ok(base.powf(exponent));
        }
        Ok(base)
    }

    fn primary(&mut self) -> Result<f64, ToolError> {
        let Some(token) = self.tokens.get(self.pos).cloned() else {
            return Err(syntax("ends where a number or `(` was expected"));
        };
        self.pos += 1;
        match token.kind {
            Kind::Num(n) => Ok(n),
            Kind::Open => {
                let value = self.expr()?;
                self.expect_close(token.at)?;
                Ok(value)
            }
            Kind::Name(name) if self.peek() == Some(&Kind::Open) => {
                self.pos += 1;
                let mut args = vec![self.expr()?];
                while self.peek() == Some(&Kind::Comma) {
                    self.pos += 1;
                    args.push(self.expr()?);
                }
                self.expect_close(token.at)?;
                call(&name, &args, token.at)
            }
            Kind::Name(name) => match name.as_str() {
                "pi" => Ok(std::f64::consts::PI),
                "e" => Ok(std::f64::consts::E),
                _ => Err(syntax(format!(
                    "uses an unknown name `{name}` at position {}",
                    token.at
                ))),
            },
            other => Err(syntax(format!(
                "has an unexpected {} at position {} (a number or `(` was expected)",
                other.describe(),
                token.at
            ))),
        }
    }

    fn expect_close(&mut self, opened_at: usize) -> Result<(), ToolError> {
        if self.peek() == Some(&Kind::Close) {
            self.pos += 1;
            Ok(())
        } else {
            Err(syntax(format!(
                "has an unclosed `(` from position {opened_at}: found {}",
                self.here()
            )))
        }
    }
}

fn call(name: &str, args: &[f64], at: usize) -> Result<f64, ToolError> {
    let one = |f: fn(f64) -> f64| -> Result<f64, ToolError> {
        match args {
            [x] => Ok(f(*x)),
            _ => Err(syntax(format!(
                "calls `{name}` at position {at} with {} arguments; it takes 1",
                args.len()
            ))),
        }
    };
    match name {
        "sqrt" => {
            if args.first().is_some_and(|x| *x < 0.0) {
                return Err(ToolError::failed("sqrt of a negative number"));
            }
            one(f64::sqrt)
        }
        "abs" => one(f64::abs),
        "floor" => one(f64::floor),
        "ceil" => one(f64::ceil),
        "round" => one(f64::round),
        "min" => Ok(args.iter().copied().fold(f64::INFINITY, f64::min)),
        "max" => Ok(args.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        _ => Err(syntax(format!(
            "calls an unknown function `{name}` at position {at}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(e: &str) -> f64 {
        evaluate(e).unwrap_or_else(|err| panic!("{e}: {err}"))
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(ok("2 + 3 * 4"), 14.0);
        assert_eq!(ok("(2 + 3) * 4"), 20.0);
        assert_eq!(ok("10 - 4 - 3"), 3.0);
        assert_eq!(ok("64 / 4 / 2"), 8.0);
        assert_eq!(ok("2 ^ 3 ^ 2"), 512.0);
        assert_eq!(ok("2 ** 10"), 1024.0);
        assert_eq!(ok("-2 ^ 2"), -4.0);
        assert_eq!(ok("(-2) ^ 2"), 4.0);
        assert_eq!(ok("2 ^ -1"), 0.5);
        assert_eq!(ok("2 * -3"), -6.0);
        assert_eq!(ok("--3"), 3.0);
        assert_eq!(ok("7 % 3"), 1.0);
        assert_eq!(ok("-7 % 3"), -1.0);
        assert_eq!(ok("1.5 + .5"), 2.0);
        assert_eq!(ok("1e3 + 2.5E-1"), 1000.25);
    }

    #[test]
    fn functions_and_constants() {
        assert_eq!(ok("sqrt(16) + abs(-2)"), 6.0);
        assert_eq!(ok("max(1, 7, 3) - min(4, 2)"), 5.0);
        assert_eq!(ok("floor(2.7) + ceil(2.1) + round(2.5)"), 8.0);
        assert!((ok("2 * pi") - std::f64::consts::TAU).abs() < 1e-12);
        assert!((ok("E") - std::f64::consts::E).abs() < 1e-12);
    }

    #[test]
    fn errors_are_classified() {
        for bad in [
            "",
            "2 +",
            "(1 + 2",
            "1 + 2)",
            "2 $ 3",
            "foo",
            "foo(1)",
            "sqrt(1, 2)",
            "1..2",
            "2e",
            "3 4",
            ",",
        ] {
            match evaluate(bad) {
                Err(ToolError::InvalidParams { field, .. }) => assert_eq!(field, "expression"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        for bad in [
            "1 / 0",
            "5 % 0",
            "1 / (2 - 2)",
            "sqrt(-1)",
            "10 ^ 400",
            "0 ^ -1",
        ] {
            assert!(
                matches!(evaluate(bad), Err(ToolError::Failed { .. })),
                "{bad:?}: {:?}",
                evaluate(bad)
            );
        }
    }

    #[test]
    fn bounds_hold() {
        let deep = format!(
            "{}1{}",
            "(".repeat(MAX_DEPTH + 1),
            ")".repeat(MAX_DEPTH + 1)
        );
        assert!(matches!(
            evaluate(&deep),
            Err(ToolError::InvalidParams { .. })
        ));
        let fine = format!(
            "{}1{}",
            "(".repeat(MAX_DEPTH - 2),
            ")".repeat(MAX_DEPTH - 2)
        );
        assert_eq!(ok(&fine), 1.0);
        assert!(evaluate(&"-".repeat(MAX_DEPTH + 5)).is_err());
        assert!(evaluate(&"2^".repeat(200)).is_err());
        let long = "1+".repeat(MAX_EXPRESSION_CHARS / 2) + "1";
        assert!(matches!(
            evaluate(&long),
            Err(ToolError::InvalidParams { .. })
        ));
    }
}
