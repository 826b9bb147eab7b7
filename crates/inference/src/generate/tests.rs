//! Unit tests for request validation and the text assembler.

use super::*;

fn stops(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| (*s).to_owned()).collect()
}

/// Feeds `pieces` and returns (streamed pieces, final text, stopped).
fn run(stop: &[&str], pieces: &[&str]) -> (Vec<String>, String, bool) {
    let mut a = TextAssembler::new(&stops(stop));
    let mut out = Vec::new();
    let mut stopped = false;
    for p in pieces {
        let (s, hit) = a.push_bytes(p.as_bytes());
        out.push(s);
        if hit {
            stopped = true;
            break;
        }
    }
    if !stopped {
        out.push(a.finish());
    }
    (out, a.text().to_owned(), stopped)
}

#[test]
fn streams_concatenate_to_the_final_text() {
    let (out, text, stopped) = run(&["END"], &["Hel", "lo E", "N", "D tail"]);
    assert!(stopped);
    assert_eq!(text, "Hello ");
    assert_eq!(out.concat(), text);
    // "E" and "EN" were held back while they could still become "END".
    assert_eq!(out, vec!["Hel", "lo ", "", ""]);
}

#[test]
fn held_back_prefix_is_released_when_it_diverges() {
    let (out, text, stopped) = run(&["END"], &["a E", "Nx", "y"]);
    assert!(!stopped);
    assert_eq!(text, "a ENxy");
    assert_eq!(out.concat(), text);
    assert_eq!(out[0], "a ");
}

#[test]
fn earliest_of_several_stops_wins() {
    let (_, text, stopped) = run(&["\n\n", "User:"], &["one User: two\n\nthree"]);
    assert!(stopped);
    assert_eq!(text, "one ");
}

#[test]
fn split_utf8_is_reassembled() {
    let mut a = TextAssembler::new(&[]);
    let bytes = "é€".as_bytes();
    let (p1, _) = a.push_bytes(&bytes[..1]);
    let (p2, _) = a.push_bytes(&bytes[1..3]);
    let (p3, _) = a.push_bytes(&bytes[3..]);
    assert_eq!(p1, "");
    assert_eq!(p2, "é");
    assert_eq!(p3, "€");
    assert_eq!(a.finish(), "");
    // Invalid bytes become replacement characters instead of stalling the stream.
    let mut a = TextAssembler::new(&[]);
    let (p, _) = a.push_bytes(b"\xffok");
    assert_eq!(p, "\u{fffd}ok");
}

#[test]
fn validates_requests() {
    let ok = GenerateRequest {
        prompt: Some("hi".into()),
        ..Default::default()
    };
    assert_eq!(ok.validate(64).unwrap(), 64);
    assert_eq!(ok.conversation().unwrap().len(), 1);

    let with_system = GenerateRequest {
        system: Some("be brief".into()),
        messages: Some(vec![Message::new("user", "hi")]),
        ..Default::default()
    };
    let conv = with_system.conversation().unwrap();
    assert_eq!(conv[0].role, "system");
    assert_eq!(conv[1].content, "hi");

    let cases: Vec<(GenerateRequest, &str)> = vec![
        (
            GenerateRequest::default(),
            "invalid prompt: one of prompt or messages is required",
        ),
        (
            GenerateRequest {
                prompt: Some("a".into()),
                messages: Some(vec![]),
                ..Default::default()
            },
            "invalid prompt: give either prompt or messages, not both",
        ),
        (
            GenerateRequest {
                messages: Some(vec![]),
                ..Default::default()
            },
            "invalid messages: must not be empty",
        ),
    ];
    for (req, msg) in cases {
        assert_eq!(req.conversation().unwrap_err().to_string(), msg);
    }

    let bad = |f: fn(&mut GenerateRequest)| {
        let mut r = ok.clone();
        f(&mut r);
        r.validate(64).unwrap_err().to_string()
    };
    assert_eq!(
        bad(|r| r.max_tokens = Some(0)),
        "invalid max_tokens: 0 is outside 1..=32768"
    );
    assert_eq!(
        bad(|r| r.temperature = Some(f32::NAN)),
        "invalid temperature: NaN is outside 0..=10"
    );
    assert_eq!(
        bad(|r| r.top_p = Some(0.0)),
        "invalid top_p: 0 is outside (0, 1]"
    );
    assert_eq!(
        bad(|r| r.stop = vec![String::new()]),
        "invalid stop: \"\" must be 1..=256 bytes"
    );
}

#[test]
fn request_and_result_json_shapes() {
    let req: GenerateRequest = serde_json::from_value(serde_json::json!({
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8, "temperature": 0, "seed": 7, "stop": ["\n"], "model": "ignored"
    }))
    .unwrap();
    assert_eq!(req.seed, Some(7));
    assert_eq!(
        serde_json::to_value(StopReason::StopSequence).unwrap(),
        "stop_sequence"
    );
}

#[test]
fn cancel_token_is_shared_between_clones() {
    let t = CancelToken::new();
    let c = t.clone();
    assert!(!c.is_cancelled());
    t.cancel();
    assert!(c.is_cancelled());
}

#[test]
fn emitted_text_excludes_held_back_bytes() {
    let mut a = TextAssembler::new(&stops(&["END"]));
    let (p, _) = a.push_str("abc E");
    assert_eq!(p, "abc ");
    assert_eq!(a.emitted_text(), "abc ");
    assert_eq!(a.text(), "abc E");
}
