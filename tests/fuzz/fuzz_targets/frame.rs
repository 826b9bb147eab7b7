//! The inbound frame decoders: binary frames (`car_proto::frame::parse_frame`, with a
//! round trip through `build_frame`) and JSON-RPC envelopes (`car_proto::jsonrpc::classify`).
//! Never a panic; a refused envelope never echoes a planted `session.auth` token.
#![no_main]

use car_fuzz::PLANTED;
use car_proto::frame::{build_frame, parse_frame};
use car_proto::jsonrpc::{classify, Incoming};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = parse_frame(data) {
        let again = build_frame(&frame);
        let reparsed = parse_frame(&again).expect("a built frame parses");
        assert_eq!(build_frame(&reparsed), again);
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match classify(text) {
        Ok(
            Incoming::Request { .. } | Incoming::Notification { .. } | Incoming::Response { .. },
        ) => {}
        Err(rejected) => {
            let _ = rejected.to_frame();
        }
    }
    // The fuzzer's bytes as the rest of a session.auth call carrying a secret token.
    let wrapped = format!(
        r#"{{"jsonrpc":"2.0","method":"session.auth","params":{{"token":"{PLANTED}","x":{text}}}"#
    );
    for candidate in [
        wrapped.clone(),
        format!("{wrapped}}}"),
        format!("{wrapped},\"id\":1}}"),
    ] {
        if let Err(rejected) = classify(&candidate) {
            let frame = rejected.to_frame();
            assert!(!frame.contains(PLANTED), "leaked: {frame}");
        }
    }
});
