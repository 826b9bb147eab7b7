//! What a provider's error answer may put into an `InferenceError`.
//!
//! Owns: reducing an error answer (the body of a non-2xx response, a 2xx body's `error`
//! object, a streamed `{"error": …}` event) to a short sanitized reason, and detecting
//! content refusals in it. Must not touch: HTTP, retries or successful answers (`remote`,
//! `remote::read`).
//!
//! A "provider" is whatever URL was registered: its error body can say anything, and may
//! echo the request back, headers included. Errors reach the daemon's caller, so only this
//! passes:
//! - a JSON body: its `error.message`, else `error` when that is a string, else a top-level
//!   `message`; with the API key replaced by `[redacted]`, control characters (and Unicode bidi
//!   controls) replaced by spaces, and cut to [`MAX_REASON_CHARS`] characters. Without such a
//!   message: "the provider's error body has no message ({n} bytes of JSON)";
//! - a non-JSON body (HTML, plain text) is never echoed: "the provider's error body is not JSON
//!   ({n} bytes)";
//! - an empty body: "empty response body".
//!
//! Refusal reasons taken from an error body are sanitized the same way. As a second line,
//! `remote` passes every error of a remote call through `InferenceError::redact`, so the
//! key cannot surface through any other provider text either (a tool name, a refusal).

use std::borrow::Cow;

use serde_json::Value;

use crate::error::{InferenceError, Result};
use crate::keys::REDACTED;

/// Longest reason taken from a provider's error body, in characters.
pub(crate) const MAX_REASON_CHARS: usize = 200;

const REFUSAL_CODES: [&str; 3] = [
    "content_filter",
    "content_policy_violation",
    "moderation_blocked",
];

/// A non-2xx response's body, as read (at most the read limit).
#[derive(Debug)]
pub(crate) struct ErrorBody {
    json: Option<Value>,
    len: usize,
    /// More bytes followed than were read.
    cut: bool,
    blank: bool,
}

impl ErrorBody {
    /// `bytes` as read; `cut` when the body was longer than that.
    pub(crate) fn new(bytes: &[u8], cut: bool) -> Self {
        Self {
            json: serde_json::from_slice(bytes).ok(),
            len: bytes.len(),
            cut,
            blank: bytes.iter().all(u8::is_ascii_whitespace),
        }
    }

    /// A refusal reason when the body is a refusal (see `remote`'s module docs).
    pub(crate) fn refusal(&self, key: Option<&str>) -> Option<String> {
        refusal_in_error(self.json.as_ref()?, key)
    }

    /// The reason to report (see the module docs).
    pub(crate) fn reason(&self, key: Option<&str>) -> String {
        let size = if self.cut {
            format!("more than {} bytes", self.len)
        } else {
            format!("{} bytes", self.len)
        };
        match &self.json {
            _ if self.blank && !self.cut => "empty response body".into(),
            Some(value) => message_of(value, key).unwrap_or_else(|| {
                format!("the provider's error body has no message ({size} of JSON)")
            }),
            None => format!("the provider's error body is not JSON ({size})"),
        }
    }
}

/// The sanitized message of a JSON error answer, if it has a non-blank one.
fn message_of(value: &Value, key: Option<&str>) -> Option<String> {
    let err = &value["error"];
    let raw = err["message"]
        .as_str()
        .or_else(|| err.as_str())
        .or_else(|| value["message"].as_str())?;
    let clean = sanitize(raw, key);
    (!clean.is_empty()).then_some(clean)
}

/// `text` made safe to report: `key` replaced by `[redacted]` (before cutting, so no
/// prefix of it survives), control and bidi characters replaced by spaces, trimmed, cut to
/// [`MAX_REASON_CHARS`] characters.
pub(crate) fn sanitize(text: &str, key: Option<&str>) -> String {
    let text = match key {
        Some(k) if !k.is_empty() && text.contains(k) => Cow::Owned(text.replace(k, REDACTED)),
        _ => Cow::Borrowed(text),
    };
    let spaced: String = text
        .chars()
        .map(|c| if is_unprintable(c) { ' ' } else { c })
        .collect();
    spaced.trim().chars().take(MAX_REASON_CHARS).collect()
}

fn is_unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Detects a refusal in an `{"error": {...}}` object (see `remote`'s module docs).
fn refusal_in_error(value: &Value, key: Option<&str>) -> Option<String> {
    let err = value.get("error")?;
    let is_refusal = |v: &Value| v.as_str().is_some_and(|s| REFUSAL_CODES.contains(&s));
    if is_refusal(&err["code"])
        || is_refusal(&err["type"])
        || err["innererror"]["code"].as_str() == Some("ResponsibleAIPolicyViolation")
    {
        let msg = message_of(value, key).unwrap_or_else(|| "provider content filter".into());
        return Some(msg);
    }
    None
}

/// Turns a 2xx body's (or a streamed event's) `error` object into an error.
pub(crate) fn check_error_object(value: &Value, key: Option<&str>) -> Result<()> {
    if let Some(reason) = refusal_in_error(value, key) {
        return Err(InferenceError::ContentRefused { reason });
    }
    if value.get("error").is_some_and(|e| !e.is_null()) {
        let reason = message_of(value, key)
            .unwrap_or_else(|| "the provider answered with an error that has no message".into());
        return Err(InferenceError::Provider(reason));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
