//! Unit tests for the GGUF validator on crafted files, valid and corrupt.

use std::io::Cursor;

use super::*;

/// Builds small GGUF images byte by byte.
#[derive(Default)]
struct Builder {
    kv: Vec<u8>,
    n_kv: u64,
    tensors: Vec<u8>,
    n_tensors: u64,
    data_len: u64,
}

impl Builder {
    fn string(buf: &mut Vec<u8>, s: &[u8]) {
        buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
        buf.extend_from_slice(s);
    }

    fn kv_str(mut self, key: &str, value: &str) -> Self {
        Self::string(&mut self.kv, key.as_bytes());
        self.kv.extend_from_slice(&8u32.to_le_bytes());
        Self::string(&mut self.kv, value.as_bytes());
        self.n_kv += 1;
        self
    }

    fn kv_u32(mut self, key: &str, value: u32) -> Self {
        Self::string(&mut self.kv, key.as_bytes());
        self.kv.extend_from_slice(&4u32.to_le_bytes());
        self.kv.extend_from_slice(&value.to_le_bytes());
        self.n_kv += 1;
        self
    }

    fn kv_raw(mut self, bytes: &[u8]) -> Self {
        self.kv.extend_from_slice(bytes);
        self.n_kv += 1;
        self
    }

    fn tensor(mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> Self {
        Self::string(&mut self.tensors, name.as_bytes());
        self.tensors
            .extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            self.tensors.extend_from_slice(&d.to_le_bytes());
        }
        self.tensors.extend_from_slice(&type_id.to_le_bytes());
        self.tensors.extend_from_slice(&offset.to_le_bytes());
        self.n_tensors += 1;
        self
    }

    fn data(mut self, len: u64) -> Self {
        self.data_len = len;
        self
    }

    fn build_with(&self, version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&n_tensors.to_le_bytes());
        out.extend_from_slice(&n_kv.to_le_bytes());
        out.extend_from_slice(&self.kv);
        out.extend_from_slice(&self.tensors);
        while !out.len().is_multiple_of(32) {
            out.push(0);
        }
        out.extend(std::iter::repeat_n(0u8, self.data_len as usize));
        out
    }

    fn build(&self) -> Vec<u8> {
        self.build_with(3, self.n_tensors, self.n_kv)
    }
}

fn check(bytes: &[u8]) -> Result<GgufSummary, GgufError> {
    validate(Cursor::new(bytes), bytes.len() as u64)
}

fn valid() -> Builder {
    Builder::default()
        .kv_str("general.architecture", "llama")
        .kv_str("general.name", "tiny")
        .kv_u32("llama.context_length", 2048)
        .kv_str("tokenizer.chat_template", "{{ messages }}")
        // 64 x 2 f32 = 512 bytes, then a Q4_1 tensor of 64 elements = 2 blocks * 20 bytes.
        .tensor("a", &[64, 2], 0, 0)
        .tensor("b", &[64], 3, 512)
        .data(512 + 40)
}

#[test]
fn accepts_a_well_formed_file() {
    let s = check(&valid().build()).expect("valid");
    assert_eq!(s.version, 3);
    assert_eq!(s.tensor_count, 2);
    assert_eq!(s.metadata_count, 4);
    assert_eq!(s.architecture.as_deref(), Some("llama"));
    assert_eq!(s.name.as_deref(), Some("tiny"));
    assert_eq!(s.context_length, Some(2048));
    assert!(s.has_chat_template);
    assert_eq!(s.tensor_bytes, 552);
    assert_eq!(s.data_offset % 32, 0);
}

#[test]
fn rejects_wrong_magic() {
    let mut bytes = valid().build();
    bytes[..4].copy_from_slice(b"GGML");
    assert!(matches!(check(&bytes), Err(GgufError::BadMagic { found }) if found == "GGML"));
}

#[test]
fn rejects_empty_and_tiny_files() {
    assert!(matches!(
        check(b""),
        Err(GgufError::Truncated { what: "magic", .. })
    ));
    assert!(matches!(
        check(b"GGUF\x03\0"),
        Err(GgufError::Truncated {
            what: "version",
            ..
        })
    ));
}

#[test]
fn rejects_unsupported_versions() {
    for v in [0u32, 1, 4, 0x0300_0000] {
        let bytes = valid().build_with(v, 2, 4);
        assert!(
            matches!(check(&bytes), Err(GgufError::UnsupportedVersion(x)) if x == v),
            "version {v}"
        );
    }
}

#[test]
fn rejects_every_truncation_without_panicking() {
    let bytes = valid().build();
    for cut in 0..bytes.len() {
        let r = check(&bytes[..cut]);
        assert!(r.is_err(), "truncation at {cut} accepted");
    }
}

#[test]
fn rejects_absurd_counts_before_allocating() {
    let b = valid();
    let bytes = b.build_with(3, u64::MAX, 4);
    assert!(matches!(
        check(&bytes),
        Err(GgufError::CountTooLarge { what: "tensor", .. })
    ));
    let bytes = b.build_with(3, 2, 1 << 60);
    assert!(matches!(
        check(&bytes),
        Err(GgufError::CountTooLarge {
            what: "metadata",
            ..
        })
    ));
}

#[test]
fn rejects_absurd_string_lengths() {
    let mut raw = Vec::new();
    raw.extend_from_slice(&u64::MAX.to_le_bytes());
    let bytes = Builder::default().kv_raw(&raw).data(64).build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::StringTooLong {
            what: "metadata key",
            ..
        })
    ));

    // A string value claiming more bytes than the file holds.
    let mut raw = Vec::new();
    Builder::string(&mut raw, b"some.key");
    raw.extend_from_slice(&8u32.to_le_bytes());
    raw.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let bytes = Builder::default().kv_raw(&raw).build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::StringTooLong {
            what: "string value",
            ..
        })
    ));
}

#[test]
fn rejects_absurd_array_lengths_and_nested_arrays() {
    let mut raw = Vec::new();
    Builder::string(&mut raw, b"tokenizer.ggml.scores");
    raw.extend_from_slice(&9u32.to_le_bytes());
    raw.extend_from_slice(&6u32.to_le_bytes());
    raw.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
    let bytes = Builder::default().kv_raw(&raw).build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::CountTooLarge {
            what: "array element",
            ..
        })
    ));

    let mut raw = Vec::new();
    Builder::string(&mut raw, b"nested");
    raw.extend_from_slice(&9u32.to_le_bytes());
    raw.extend_from_slice(&9u32.to_le_bytes());
    raw.extend_from_slice(&1u64.to_le_bytes());
    let bytes = Builder::default().kv_raw(&raw).build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::InvalidValueType { type_id: 9, .. })
    ));
}

#[test]
fn rejects_unknown_value_type_and_duplicate_keys() {
    let mut raw = Vec::new();
    Builder::string(&mut raw, b"k");
    raw.extend_from_slice(&99u32.to_le_bytes());
    raw.push(0);
    let bytes = Builder::default().kv_raw(&raw).build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::InvalidValueType { type_id: 99, .. })
    ));

    let bytes = Builder::default().kv_u32("k", 1).kv_u32("k", 2).build();
    assert!(matches!(check(&bytes), Err(GgufError::DuplicateKey(k)) if k == "k"));
}

#[test]
fn rejects_bad_alignment() {
    let bytes = valid().kv_u32("general.alignment", 24).build();
    assert!(matches!(check(&bytes), Err(GgufError::BadAlignment(24))));
}

#[test]
fn rejects_absurd_tensor_shapes() {
    // Element count overflows 64 bits.
    let bytes = Builder::default()
        .tensor("huge", &[u64::MAX / 2, 4], 0, 0)
        .data(64)
        .build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::ShapeOverflow { .. })
    ));

    // Representable, but terabytes more than the file holds.
    let bytes = Builder::default()
        .tensor("big", &[1 << 20, 1 << 20], 0, 0)
        .data(64)
        .build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::TensorOutOfBounds { name, .. }) if name == "big"
    ));

    let bytes = Builder::default()
        .tensor("t", &[1, 1, 1, 1, 1], 0, 0)
        .data(64)
        .build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::TooManyDims { n_dims: 5, .. })
    ));
}

#[test]
fn rejects_bad_tensor_types_rows_offsets_and_names() {
    let bytes = Builder::default().tensor("t", &[32], 4, 0).data(64).build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::UnknownTensorType { type_id: 4, .. })
    ));

    let bytes = Builder::default().tensor("t", &[33], 2, 0).data(64).build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::BadRowSize { row: 33, .. })
    ));

    let bytes = Builder::default().tensor("t", &[4], 0, 3).data(64).build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::MisalignedTensor { offset: 3, .. })
    ));

    let bytes = Builder::default()
        .tensor("t", &[4], 0, 0)
        .tensor("t", &[4], 0, 32)
        .data(64)
        .build();
    assert!(matches!(check(&bytes), Err(GgufError::DuplicateTensor(n)) if n == "t"));

    let long = "x".repeat(64);
    let bytes = Builder::default()
        .tensor(&long, &[4], 0, 0)
        .data(64)
        .build();
    assert!(matches!(
        check(&bytes),
        Err(GgufError::StringTooLong {
            what: "tensor name",
            ..
        })
    ));
}

#[test]
fn rejects_a_file_cut_inside_tensor_data() {
    let mut bytes = valid().build();
    bytes.truncate(bytes.len() - 1);
    assert!(matches!(
        check(&bytes),
        Err(GgufError::TensorOutOfBounds { name, .. }) if name == "b"
    ));
}

#[test]
fn validates_files_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    std::fs::write(&path, valid().build()).unwrap();
    assert!(validate_file(&path).is_ok());
    assert!(matches!(
        validate_file(&dir.path().join("absent.gguf")),
        Err(GgufError::Io(_))
    ));
}
