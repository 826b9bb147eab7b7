//! The exact byte length of a graph's snapshot, kept without encoding the snapshot.
//!
//! Owns the arithmetic of serde_json's pretty layout for `{"version", "facts", "skills"}`:
//! a record nested two levels deep (inside the top-level object and its array) prints as
//! it does on its own with four more spaces at the start of every line after the first.
//! The graph keeps each fact's nested length and the running sum, so the store can enforce
//! the snapshot size cap on every journal append in O(1) instead of encoding the whole
//! graph ([`crate::snapshot::encode`]; a test checks both agree). It must not write
//! anything.

use serde::Serialize;

/// Indentation added to each continuation line of a record nested in the snapshot's arrays.
const NESTED_INDENT: u64 = 4;

/// Counts bytes and newlines written to it.
#[derive(Default)]
struct Counter {
    bytes: u64,
    newlines: u64,
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes += buf.len() as u64;
        self.newlines += buf.iter().filter(|&&b| b == b'\n').count() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The length of `record` as it prints inside one of the snapshot's arrays (without the
/// array's own leading indentation and separators).
pub(crate) fn nested_len<T: Serialize>(record: &T) -> u64 {
    let mut counter = Counter::default();
    let mut ser = serde_json::Serializer::pretty(&mut counter);
    // Plain structs of strings and numbers with finite floats cannot fail to serialise
    // (see `snapshot::encode`); a failure would only make the estimate short.
    let _ = record.serialize(&mut ser);
    counter.bytes + NESTED_INDENT * counter.newlines
}

/// The length of a pretty-printed array of `count` records whose nested lengths sum to
/// `sum`: `[]`, or `[\n` + each record indented by four spaces, separated by `,\n` + `\n  ]`.
fn array_len(count: u64, sum: u64) -> u64 {
    if count == 0 {
        2
    } else {
        sum + 6 * count + 4
    }
}

/// The length of the encoded snapshot holding these facts and skills.
pub(crate) fn snapshot_len(facts: u64, fact_bytes: u64, skills: u64, skill_bytes: u64) -> u64 {
    // `{\n  "version": 1,\n  "facts": ` + facts + `,\n  "skills": ` + skills + `\n}`
    const FRAME: u64 = 29 + 14 + 2;
    FRAME + array_len(facts, fact_bytes) + array_len(skills, skill_bytes)
}
