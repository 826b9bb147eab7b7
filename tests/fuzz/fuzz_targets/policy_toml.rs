//! Policy files (`car_proto::policy_rules`): any text parses into rules or an error naming
//! the file, never a panic; parsed rules judge a call without panicking, and an error
//! never carries a planted secret from the call.
#![no_main]

use car_fuzz::PLANTED;
use car_proto::policy_rules::PolicyRules;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match PolicyRules::parse(text, "fuzz.toml") {
        Ok(rules) => {
            let params = json!({"command": text, "token": PLANTED, "nested": [{"a": text}]});
            for finding in rules.findings(text, params.as_object().unwrap()) {
                assert_eq!(finding.severity, "deny");
            }
        }
        Err(e) => {
            assert!(e.starts_with("fuzz.toml: "), "{e}");
            assert!(!e.contains(PLANTED));
        }
    }
});
