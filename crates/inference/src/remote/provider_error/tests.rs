use serde_json::json;

use super::*;

const KEY: &str = "sk-unit-secret-0123456789";

fn reason(body: &str) -> String {
    ErrorBody::new(body.as_bytes(), false).reason(Some(KEY))
}

#[test]
fn json_messages_are_taken_in_order_of_preference() {
    assert_eq!(
        reason(r#"{"error": {"message": "rate limited"}}"#),
        "rate limited"
    );
    assert_eq!(
        reason(r#"{"error": "model not loaded"}"#),
        "model not loaded"
    );
    assert_eq!(
        reason(r#"{"message": "bad request", "code": 7}"#),
        "bad request"
    );
    assert_eq!(
        reason(r#"{"error": {"message": "first"}, "message": "second"}"#),
        "first"
    );
    let no_message = r#"{"detail": "not a message field"}"#;
    assert_eq!(
        reason(no_message),
        format!(
            "the provider's error body has no message ({} bytes of JSON)",
            no_message.len()
        )
    );
    assert_eq!(reason(""), "empty response body");
    assert_eq!(reason(" \n"), "empty response body");
}

#[test]
fn a_non_json_body_is_never_echoed() {
    let html = "<html><body>Authorization: Bearer sk-other secret page</body></html>";
    let got = reason(html);
    assert_eq!(
        got,
        format!(
            "the provider's error body is not JSON ({} bytes)",
            html.len()
        )
    );
    assert!(!got.contains("Bearer") && !got.contains("<html>"));
    let got = ErrorBody::new(b"{\"error\": {\"message\": \"cut of", true).reason(None);
    assert_eq!(
        got,
        "the provider's error body is not JSON (more than 29 bytes)"
    );
}

#[test]
fn messages_are_sanitized_and_cut() {
    let long = "x".repeat(10 * 1024);
    let got = reason(&json!({"error": {"message": long}}).to_string());
    assert_eq!(got.chars().count(), MAX_REASON_CHARS);
    assert_eq!(got, "x".repeat(MAX_REASON_CHARS));
    // Multi-byte characters are cut on character boundaries.
    let got = reason(&json!({"error": {"message": "é".repeat(500)}}).to_string());
    assert_eq!(got, "é".repeat(MAX_REASON_CHARS));

    let got =
        reason(&json!({"error": {"message": "a\r\nb\u{1b}[31mc\u{202e}d\u{0}e"}}).to_string());
    assert_eq!(got, "a  b [31mc d e");
    // Only control characters: no message.
    assert!(
        reason(&json!({"error": {"message": "\u{1}\u{2}"}}).to_string())
            .starts_with("the provider's error body has no message")
    );
}

#[test]
fn the_key_is_redacted_even_across_the_cut() {
    let got = reason(
        &json!({"error": {"message": format!("Incorrect API key provided: {KEY}.")}}).to_string(),
    );
    assert_eq!(got, "Incorrect API key provided: [redacted].");
    // The key starts just before the cut: redaction comes first, so no prefix of it survives.
    let padded = format!("{}{KEY}{KEY}", "p".repeat(MAX_REASON_CHARS - 5));
    let got = reason(&json!({"error": {"message": padded}}).to_string());
    assert!(!got.contains(&KEY[..5]), "{got}");
    assert!(got.ends_with("[reda"), "{got}");
}

#[test]
fn refusals_are_detected_and_sanitized() {
    let body =
        json!({"error": {"code": "content_filter", "message": format!("blocked\nfor {KEY}")}});
    let err = ErrorBody::new(body.to_string().as_bytes(), false);
    assert_eq!(
        err.refusal(Some(KEY)).as_deref(),
        Some("blocked for [redacted]")
    );
    for body in [
        json!({"error": {"type": "content_policy_violation"}}),
        json!({"error": {"code": "x", "innererror": {"code": "ResponsibleAIPolicyViolation"}}}),
    ] {
        let err = ErrorBody::new(body.to_string().as_bytes(), false);
        assert_eq!(
            err.refusal(None).as_deref(),
            Some("provider content filter")
        );
    }
    let plain = ErrorBody::new(br#"{"error": {"code": "rate_limit"}}"#, false);
    assert_eq!(plain.refusal(None), None);
    assert_eq!(
        ErrorBody::new(b"<html>content_filter</html>", false).refusal(None),
        None
    );
}

#[test]
fn error_objects_in_successful_answers_are_sanitized() {
    check_error_object(&json!({"choices": [], "error": null}), Some(KEY)).unwrap();
    let err = check_error_object(
        &json!({"error": {"message": format!("upstream said {KEY}\n{}", "y".repeat(1000))}}),
        Some(KEY),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("provider error: upstream said [redacted] yyy"),
        "{msg}"
    );
    assert_eq!(
        msg.chars().count(),
        "provider error: ".len() + MAX_REASON_CHARS
    );
    // An error object without a message is not dumped either.
    let err = check_error_object(
        &json!({"error": {"echo": {"authorization": KEY}}}),
        Some(KEY),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "provider error: the provider answered with an error that has no message"
    );
    let err = check_error_object(
        &json!({"error": {"code": "moderation_blocked", "message": "no"}}),
        None,
    )
    .unwrap_err();
    assert!(matches!(err, InferenceError::ContentRefused { reason } if reason == "no"));
}
