//! [`Redacted`]: a value that never shows itself in `Debug` or `Display` output.
//!
//! Tokens, host tokens, API keys and secret values travel inside configuration and
//! environment snapshots that derive `Debug`; a stray `{:?}` in a log line must not print
//! them. Wrapping the field in `Redacted` keeps the struct's derives (clone, equality)
//! while every formatted form reads `[redacted]`. The value is reached only through
//! [`Redacted::expose`], which makes each use visible in review.

use std::fmt;

/// A secret value: formats as `[redacted]`, compares and clones like its inner value.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Redacted<T>(T);

impl<T> Redacted<T> {
    pub fn new(value: T) -> Self {
        Redacted(value)
    }

    /// The secret itself, for the one place that must send or compare it.
    pub fn expose(&self) -> &T {
        &self.0
    }

    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> From<T> for Redacted<T> {
    fn from(value: T) -> Self {
        Redacted(value)
    }
}

/// On the wire a secret is its plain value (`secret.put` params, `secret.get` result):
/// serializing is an explicit exposure, like [`Redacted::expose`].
impl<T: serde::Serialize> serde::Serialize for Redacted<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Redacted<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Redacted)
    }
}

impl<T: schemars::JsonSchema> schemars::JsonSchema for Redacted<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
    fn inline_schema() -> bool {
        true
    }
}

/// Parsing (e.g. a command-line flag) wraps the text as it is.
impl std::str::FromStr for Redacted<String> {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Redacted(s.to_string()))
    }
}

impl<T> fmt::Debug for Redacted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl<T> fmt::Display for Redacted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::Redacted;

    #[test]
    fn formatting_never_shows_the_value() {
        let token = Redacted::new("s3cr3t-token".to_string());
        assert_eq!(format!("{token:?}"), "[redacted]");
        assert_eq!(format!("{token}"), "[redacted]");
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Config {
            token: Option<Redacted<String>>,
        }
        let shown = format!(
            "{:?}",
            Config {
                token: Some(token.clone())
            }
        );
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert_eq!(token.expose(), "s3cr3t-token");
        assert_eq!(token, Redacted::new("s3cr3t-token".to_string()));
    }
}
