//! Bearer secrets and random ids: minting them and comparing them. One rule for every credential
//! the daemon hands out (the daemon, host, dashboard and agent tokens, and the dashboard's
//! one-time login secret): 32 bytes from the operating system's random source, written as
//! base64url without padding (43 characters, safe in a URL, a header or a file), and
//! compared in constant time so a caller cannot learn a prefix from response timing.

use base64::Engine;
use subtle::ConstantTimeEq;

/// Bytes of entropy in a token (43 base64url characters without padding).
pub const TOKEN_BYTES: usize = 32;

/// A fresh random token: [`TOKEN_BYTES`] bytes, base64url without padding.
pub fn mint_token() -> String {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `bytes` random bytes from the operating system's random source as lower-case hex: the
/// one way ids (runs, messages, sessions, tasks) are minted.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the operating system's random source");
    hex::encode(buf)
}

/// Length-checked constant-time comparison.
pub fn tokens_match(expected: &str, presented: &str) -> bool {
    expected.len() == presented.len() && bool::from(expected.as_bytes().ct_eq(presented.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_url_safe_and_compared_exactly() {
        let a = mint_token();
        let b = mint_token();
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert!(tokens_match(&a, &a.clone()));
        assert!(!tokens_match(&a, &b));
        assert!(!tokens_match(&a, &a[..42]));
        assert!(!tokens_match(&a, ""));
    }

    #[test]
    fn random_hex_has_two_digits_per_byte_and_differs() {
        let a = random_hex(8);
        assert_eq!(a.len(), 16);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, random_hex(8));
    }
}
