//! The memory-namespace file-name encoding (reference `session.auth`, `memory_namespace`).
//!
//! A namespace's snapshot file name is the lower-case percent encoding of its UTF-8
//! bytes: `a-z`, `0-9`, `-`, `_` and `.` pass through; every other byte, including `%`
//! and every upper-case letter (APFS is case-insensitive), becomes `%` plus two lower-case
//! hex digits. Path separators and `..` therefore cannot escape the memory directory, and
//! two different namespaces never share a file. `Proj/A` → `%50roj%2f%41`.
//!
//! `.` and `..` alone would still name directories, so they are encoded as `%2e` and
//! `%2e%2e`; every other name keeps its dots.

/// Encodes a namespace into a file-name stem.
pub fn encode(namespace: &str) -> String {
    if namespace == "." || namespace == ".." {
        return "%2e".repeat(namespace.len());
    }
    let mut out = String::with_capacity(namespace.len());
    for &b in namespace.as_bytes() {
        if matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from_digit((b >> 4) as u32, 16).expect("nibble"));
            out.push(char::from_digit((b & 0xf) as u32, 16).expect("nibble"));
        }
    }
    out
}

/// Decodes a file-name stem made by [`encode`]; `None` for anything `encode` cannot produce.
pub fn decode(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                if !hex.iter().all(|h| matches!(h, b'0'..=b'9' | b'a'..=b'f')) {
                    return None;
                }
                let byte = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                out.push(byte);
                i += 3;
            }
            b @ (b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.') => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    let text = String::from_utf8(out).ok()?;
    (encode(&text) == encoded).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reference_examples() {
        assert_eq!(encode("Proj/A"), "%50roj%2f%41");
        assert_eq!(encode("a-z_0.9"), "a-z_0.9");
        assert_eq!(encode("100%"), "100%25");
        assert_eq!(encode("../x"), "..%2fx");
        assert_eq!(encode(".."), "%2e%2e");
        assert_eq!(encode("."), "%2e");
        assert_eq!(encode("é"), "%c3%a9");
        assert_eq!(decode("%50roj%2f%41").as_deref(), Some("Proj/A"));
        assert_eq!(decode("%2F"), None, "upper-case hex is never produced");
        assert_eq!(decode("A"), None);
        assert_eq!(decode("%2"), None);
    }

    proptest! {
        #[test]
        fn round_trips_and_is_a_safe_file_name(ns in any::<String>()) {
            let enc = encode(&ns);
            prop_assert!(enc.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'%')));
            prop_assert!(!enc.contains('/') && enc != "." && enc != "..");
            prop_assert_eq!(decode(&enc), Some(ns));
        }

        #[test]
        fn distinct_namespaces_never_share_a_file(a in any::<String>(), b in any::<String>()) {
            prop_assume!(a != b);
            prop_assert_ne!(encode(&a), encode(&b));
        }
    }
}
