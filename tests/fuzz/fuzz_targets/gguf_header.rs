//! The GGUF header reader (`car_inference::gguf::validate`) a caller-named model file goes
//! through before llama.cpp sees it: any bytes give a summary or an error, never a panic,
//! and never an allocation beyond what the bytes justify.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    let _ = car_inference::gguf::validate(std::io::Cursor::new(data), len);
});
