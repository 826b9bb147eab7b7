//! The Host/Origin checks every loopback listener applies (`car_proto::loopback`): never a
//! panic, and an accepted origin is always an `http(s)` loopback one (what DNS rebinding
//! and cross-site pages cannot forge).
#![no_main]

use std::net::SocketAddr;

use car_proto::loopback::{is_loopback_authority, is_loopback_origin, is_own_origin};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let own: SocketAddr = "127.0.0.1:9100".parse().unwrap();
    let authority = is_loopback_authority(text);
    let origin = is_loopback_origin(text);
    let own_origin = is_own_origin(text, own);
    if own_origin {
        assert!(origin, "own origin {text:?} is a loopback origin");
        assert!(text.starts_with("http://"));
    }
    if origin {
        let lower = text.to_ascii_lowercase();
        let rest = lower
            .strip_prefix("http://")
            .or_else(|| lower.strip_prefix("https://"))
            .expect("http or https");
        assert!(is_loopback_authority(rest), "{text:?}");
        assert!(!rest.contains('/') && !rest.contains('@'), "{text:?}");
    }
    let _ = authority;
});
