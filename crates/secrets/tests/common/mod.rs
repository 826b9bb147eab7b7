//! Shared helpers for the integration tests: temp CAR_HOMEs, modes, and log capture.
#![allow(dead_code)]

use std::cell::RefCell;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Once;

use car_proto::redact::Redacted;

/// A value that must never show up anywhere but `get`'s result.
pub const SENTINEL: &str = "sk-SENTINEL-7f3a9c-do-not-log";

pub fn secret(value: &str) -> Redacted<String> {
    Redacted::new(value.to_owned())
}

/// A fresh temp dir and the CAR_HOME inside it (not yet created).
pub fn home() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let car_home = tmp.path().join("car-home");
    (tmp, car_home)
}

pub fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o777
}

/// Every entry's name in `dir`, sorted.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

thread_local! {
    static CAPTURED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Appends to the calling thread's capture buffer.
struct ThreadBuf;

impl Write for ThreadBuf {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        CAPTURED.with(|b| b.borrow_mut().extend_from_slice(bytes));
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with every `tracing` event at every level captured; returns `f`'s result and
/// the formatted log text (fields included) of the events `f`'s thread emitted.
///
/// One global subscriber for the whole test binary, writing to per-thread buffers: a
/// scoped (`with_default`) subscriber can miss events whose callsite another test thread
/// registered first, and the missed lines would make the "never logged" checks vacuous.
pub fn capture_logs<R>(f: impl FnOnce() -> R) -> (R, String) {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| ThreadBuf)
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    });
    CAPTURED.with(|b| b.borrow_mut().clear());
    let result = f();
    let text = CAPTURED.with(|b| String::from_utf8(std::mem::take(&mut *b.borrow_mut())).unwrap());
    (result, text)
}
