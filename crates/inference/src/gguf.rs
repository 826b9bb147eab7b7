//! A small, bounded GGUF header validator that runs before llama.cpp ever opens a file.
//!
//! Owns: reading the GGUF header, metadata and tensor table, checking every count, length
//! and dimension against the file's real size, and summarising the few metadata values the
//! engine needs. Must not touch: llama.cpp (this module is what keeps a hostile file away
//! from it) or tensor data (never read, only bounds-checked).
//!
//! Every length read from the file is checked against the bytes left before anything is
//! allocated or skipped, so a truncated or malicious file costs at most a few small reads.
//! Values of keys the engine does not need are skipped with seeks, never materialised.
//! The rules mirror llama.cpp's own `gguf.cpp` (version 2 and 3, no nested arrays, at most
//! four dimensions, tensor names shorter than 64 bytes, power-of-two alignment, element
//! rows divisible by the block size) so anything that passes here is also accepted there.

use car_proto::safe_file::{open_regular, SafeFileError};
use std::collections::HashSet;
use std::io::{BufReader, Read, Seek};
use std::path::Path;

/// Largest metadata key accepted; real keys are tens of bytes.
const MAX_KEY_LEN: u64 = 64 * 1024;
/// Largest string value materialised (chat templates are a few KiB).
const MAX_KEPT_STRING_LEN: u64 = 1024 * 1024;
/// llama.cpp's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// llama.cpp's `GGML_MAX_NAME` (names must be strictly shorter).
const MAX_TENSOR_NAME: u64 = 64;
const DEFAULT_ALIGNMENT: u64 = 32;

/// A precise reason a file is not an acceptable GGUF model.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or read.
    #[error("read failed: {0}")]
    Io(#[from] std::io::Error),
    /// The path is a FIFO, a device, a directory or a symlink (never opened for reading).
    #[error("the path {0}")]
    NotRegular(car_proto::safe_file::SafeFileError),
    /// The first four bytes are not `GGUF`.
    #[error("bad magic {found:?}, expected \"GGUF\"")]
    BadMagic {
        /// The bytes found (lossily decoded).
        found: String,
    },
    /// Version 1, a future version, or a byte-swapped file.
    #[error("unsupported gguf version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// The file ends before the structure it declares.
    #[error("truncated at byte {offset} while reading {what}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// The file offset where the read would have started.
        offset: u64,
    },
    /// A declared count cannot fit in the remaining bytes.
    #[error("{what} count {count} cannot fit in the {remaining} bytes left")]
    CountTooLarge {
        /// `tensor`, `metadata`, `array element`.
        what: &'static str,
        /// The declared count.
        count: u64,
        /// Bytes left in the file.
        remaining: u64,
    },
    /// A declared string length is over a limit or past the end of the file.
    #[error("{what} length {len} exceeds limit {limit}")]
    StringTooLong {
        /// `metadata key`, `tensor name`, `string value`.
        what: &'static str,
        /// The declared length.
        len: u64,
        /// The applicable limit (remaining bytes or a fixed cap).
        limit: u64,
    },
    /// A metadata value type id outside the GGUF spec, or a nested array.
    #[error("metadata key {key:?} has invalid value type {type_id}")]
    InvalidValueType {
        /// The key.
        key: String,
        /// The type id read.
        type_id: u32,
    },
    /// Two metadata entries share a key.
    #[error("duplicate metadata key {0:?}")]
    DuplicateKey(String),
    /// A metadata key is empty or not UTF-8.
    #[error("metadata key {index} is empty or not utf-8")]
    BadKey {
        /// Position of the entry.
        index: u64,
    },
    /// `general.alignment` is not a power of two (or not a u32).
    #[error("general.alignment {0} is not a power of two")]
    BadAlignment(u64),
    /// A tensor declares more than four dimensions.
    #[error("tensor {name:?} has {n_dims} dimensions (max 4)")]
    TooManyDims {
        /// The tensor.
        name: String,
        /// Declared dimension count.
        n_dims: u32,
    },
    /// A tensor's element count or byte size overflows 64 bits.
    #[error("tensor {name:?} shape {dims:?} overflows")]
    ShapeOverflow {
        /// The tensor.
        name: String,
        /// Its declared dimensions.
        dims: Vec<u64>,
    },
    /// A tensor type id llama.cpp does not know.
    #[error("tensor {name:?} has unknown ggml type {type_id}")]
    UnknownTensorType {
        /// The tensor.
        name: String,
        /// The type id read.
        type_id: u32,
    },
    /// The first dimension is not a multiple of the type's block size.
    #[error("tensor {name:?} row of {row} elements is not a multiple of block size {block}")]
    BadRowSize {
        /// The tensor.
        name: String,
        /// Elements per row.
        row: u64,
        /// Block size of its type.
        block: u64,
    },
    /// Two tensors share a name.
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    /// A tensor's data offset is not aligned.
    #[error("tensor {name:?} offset {offset} is not a multiple of alignment {alignment}")]
    MisalignedTensor {
        /// The tensor.
        name: String,
        /// Declared offset in the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor's data would extend past the end of the file.
    #[error(
        "tensor {name:?} needs bytes {start}..{end} of the data section but it holds {available}"
    )]
    TensorOutOfBounds {
        /// The tensor.
        name: String,
        /// Start offset in the data section.
        start: u64,
        /// End offset in the data section.
        end: u64,
        /// Size of the data section.
        available: u64,
    },
}

/// What the engine learns from a valid header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufSummary {
    /// Format version (2 or 3).
    pub version: u32,
    /// Number of tensors.
    pub tensor_count: u64,
    /// Number of metadata entries.
    pub metadata_count: u64,
    /// `general.architecture`, e.g. `llama`.
    pub architecture: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// `<arch>.context_length`, when present as an integer.
    pub context_length: Option<u64>,
    /// Whether `tokenizer.chat_template` is present.
    pub has_chat_template: bool,
    /// Data section alignment.
    pub alignment: u64,
    /// File offset where tensor data starts.
    pub data_offset: u64,
    /// Total bytes of tensor data referenced.
    pub tensor_bytes: u64,
}

/// Validates the GGUF file at `path` and summarises it.
/// The file is opened with `car_proto::safe_file::open_regular`: a FIFO, device or final
/// symlink is refused at once ([`GgufError::NotRegular`]) and nothing is read.
pub fn validate_file(path: &Path) -> Result<GgufSummary, GgufError> {
    let file = open_regular(path).map_err(|e| match e {
        SafeFileError::Io(e) => GgufError::Io(e),
        other => GgufError::NotRegular(other),
    })?;
    let len = file.metadata()?.len();
    validate(BufReader::with_capacity(64 * 1024, file), len)
}

/// Validates a GGUF stream of `len` bytes.
pub fn validate<R: Read + Seek>(reader: R, len: u64) -> Result<GgufSummary, GgufError> {
    Parser {
        reader,
        pos: 0,
        len,
    }
    .run()
}

/// Block size and bytes per block for each ggml type id, as in llama.cpp's `ggml.c`.
/// Removed types (4, 5, 31–33, 36–38) are `None`.
fn ggml_type_layout(type_id: u32) -> Option<(u64, u64)> {
    Some(match type_id {
        0 => (1, 4),     // F32
        1 => (1, 2),     // F16
        2 => (32, 18),   // Q4_0
        3 => (32, 20),   // Q4_1
        6 => (32, 22),   // Q5_0
        7 => (32, 24),   // Q5_1
        8 => (32, 34),   // Q8_0
        9 => (32, 36),   // Q8_1
        10 => (256, 84), // Q2_K
        11 => (256, 110),
        12 => (256, 144),
        13 => (256, 176),
        14 => (256, 210),
        15 => (256, 292),
        16 => (256, 66), // IQ2_XXS
        17 => (256, 74),
        18 => (256, 98),
        19 => (256, 50),
        20 => (32, 18), // IQ4_NL
        21 => (256, 110),
        22 => (256, 82),
        23 => (256, 136),
        24 => (1, 1), // I8
        25 => (1, 2),
        26 => (1, 4),
        27 => (1, 8),
        28 => (1, 8),    // F64
        29 => (256, 56), // IQ1_M
        30 => (1, 2),    // BF16
        34 => (256, 54), // TQ1_0
        35 => (256, 66),
        39 => (32, 17), // MXFP4
        40 => (64, 36), // NVFP4
        41 => (128, 18),
        42 => (64, 18),
        _ => return None,
    })
}

struct Parser<R> {
    reader: R,
    pos: u64,
    len: u64,
}

impl<R: Read + Seek> Parser<R> {
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn read_exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), GgufError> {
        if (buf.len() as u64) > self.remaining() {
            return Err(GgufError::Truncated {
                what,
                offset: self.pos,
            });
        }
        self.reader.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => GgufError::Truncated {
                what,
                offset: self.pos,
            },
            _ => GgufError::Io(e),
        })?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        let mut b = [0u8; 4];
        self.read_exact(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        let mut b = [0u8; 8];
        self.read_exact(&mut b, what)?;
        Ok(u64::from_le_bytes(b))
    }

    fn skip(&mut self, n: u64, what: &'static str) -> Result<(), GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what,
                offset: self.pos,
            });
        }
        let delta = i64::try_from(n).map_err(|_| GgufError::Truncated {
            what,
            offset: self.pos,
        })?;
        self.reader.seek_relative(delta)?;
        self.pos += n;
        Ok(())
    }

    /// Reads a length-prefixed string, refusing lengths above `cap` or past the end.
    fn string(&mut self, what: &'static str, cap: u64) -> Result<Vec<u8>, GgufError> {
        let n = self.u64(what)?;
        let limit = cap.min(self.remaining());
        if n > limit {
            return Err(GgufError::StringTooLong {
                what,
                len: n,
                limit,
            });
        }
        let mut buf = vec![0u8; n as usize];
        self.read_exact(&mut buf, what)?;
        Ok(buf)
    }

    fn skip_string(&mut self, what: &'static str) -> Result<(), GgufError> {
        let n = self.u64(what)?;
        if n > self.remaining() {
            return Err(GgufError::StringTooLong {
                what,
                len: n,
                limit: self.remaining(),
            });
        }
        self.skip(n, what)
    }

    fn run(mut self) -> Result<GgufSummary, GgufError> {
        let mut magic = [0u8; 4];
        self.read_exact(&mut magic, "magic")?;
        if &magic != b"GGUF" {
            return Err(GgufError::BadMagic {
                found: String::from_utf8_lossy(&magic).into_owned(),
            });
        }
        let version = self.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let tensor_count = self.u64("tensor count")?;
        let metadata_count = self.u64("metadata count")?;
        // Smallest possible entries: a tensor info is name length (8) + n_dims (4) + type (4)
        // + offset (8); a metadata entry is key length (8) + type (4) + a one-byte value.
        self.check_count("metadata", metadata_count, 13)?;
        self.check_count("tensor", tensor_count, 24)?;

        let mut summary = GgufSummary {
            version,
            tensor_count,
            metadata_count,
            architecture: None,
            name: None,
            context_length: None,
            has_chat_template: false,
            alignment: DEFAULT_ALIGNMENT,
            data_offset: 0,
            tensor_bytes: 0,
        };
        let mut keys = HashSet::new();
        let mut context_lengths: Vec<(String, u64)> = Vec::new();
        for index in 0..metadata_count {
            let raw = self.string("metadata key", MAX_KEY_LEN)?;
            let key = match String::from_utf8(raw) {
                Ok(k) if !k.is_empty() => k,
                _ => return Err(GgufError::BadKey { index }),
            };
            if !keys.insert(key.clone()) {
                return Err(GgufError::DuplicateKey(key));
            }
            let type_id = self.u32("metadata value type")?;
            self.read_value(&key, type_id, &mut summary, &mut context_lengths)?;
        }
        if let Some(arch) = &summary.architecture {
            let wanted = format!("{arch}.context_length");
            summary.context_length = context_lengths
                .iter()
                .find(|(k, _)| *k == wanted)
                .map(|(_, v)| *v);
        }

        let mut names = HashSet::new();
        let mut tensors = Vec::with_capacity(tensor_count.min(4096) as usize);
        for _ in 0..tensor_count {
            let raw = self.string("tensor name", MAX_TENSOR_NAME - 1)?;
            let name = String::from_utf8_lossy(&raw).into_owned();
            if !names.insert(name.clone()) {
                return Err(GgufError::DuplicateTensor(name));
            }
            let n_dims = self.u32("tensor dimension count")?;
            if n_dims > MAX_DIMS {
                return Err(GgufError::TooManyDims { name, n_dims });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(self.u64("tensor dimension")?);
            }
            let type_id = self.u32("tensor type")?;
            let offset = self.u64("tensor offset")?;
            let nbytes = tensor_nbytes(&name, &dims, type_id)?;
            tensors.push((name, offset, nbytes));
        }

        let alignment = summary.alignment;
        let data_offset = self.pos.div_ceil(alignment) * alignment;
        let available = self.len.saturating_sub(data_offset);
        let mut total: u64 = 0;
        for (name, offset, nbytes) in tensors {
            if offset % alignment != 0 {
                return Err(GgufError::MisalignedTensor {
                    name,
                    offset,
                    alignment,
                });
            }
            let end = offset.checked_add(nbytes);
            match end {
                Some(end) if end <= available => {}
                _ => {
                    return Err(GgufError::TensorOutOfBounds {
                        name,
                        start: offset,
                        end: end.unwrap_or(u64::MAX),
                        available,
                    })
                }
            }
            total = total.saturating_add(nbytes);
        }
        summary.data_offset = data_offset;
        summary.tensor_bytes = total;
        Ok(summary)
    }

    fn check_count(&self, what: &'static str, count: u64, min_size: u64) -> Result<(), GgufError> {
        if count
            .checked_mul(min_size)
            .is_none_or(|n| n > self.remaining())
        {
            return Err(GgufError::CountTooLarge {
                what,
                count,
                remaining: self.remaining(),
            });
        }
        Ok(())
    }

    fn read_value(
        &mut self,
        key: &str,
        type_id: u32,
        summary: &mut GgufSummary,
        context_lengths: &mut Vec<(String, u64)>,
    ) -> Result<(), GgufError> {
        let invalid = || GgufError::InvalidValueType {
            key: key.to_owned(),
            type_id,
        };
        match type_id {
            // Integers: keep the ones that may be a context length or the alignment.
            4 | 5 => {
                let v = u64::from(self.u32("metadata value")?);
                self.note_integer(key, v, type_id, summary, context_lengths)?;
            }
            10 | 11 => {
                let v = self.u64("metadata value")?;
                self.note_integer(key, v, type_id, summary, context_lengths)?;
            }
            8 => match key {
                "general.architecture" | "general.name" | "tokenizer.chat_template" => {
                    let raw = self.string("string value", MAX_KEPT_STRING_LEN)?;
                    let value = String::from_utf8_lossy(&raw).into_owned();
                    match key {
                        "general.architecture" => summary.architecture = Some(value),
                        "general.name" => summary.name = Some(value),
                        _ => summary.has_chat_template = true,
                    }
                }
                _ => self.skip_string("string value")?,
            },
            9 => {
                let elem_type = self.u32("array element type")?;
                let count = self.u64("array length")?;
                match elem_type {
                    8 => {
                        self.check_count("array element", count, 8)?;
                        for _ in 0..count {
                            self.skip_string("array string")?;
                        }
                    }
                    _ => {
                        // Nested arrays are rejected, as llama.cpp does.
                        let size = scalar_size(elem_type).ok_or(GgufError::InvalidValueType {
                            key: key.to_owned(),
                            type_id: elem_type,
                        })?;
                        self.check_count("array element", count, size)?;
                        self.skip(count * size, "array values")?;
                    }
                }
            }
            t => {
                let size = scalar_size(t).ok_or_else(invalid)?;
                self.skip(size, "metadata value")?;
            }
        }
        Ok(())
    }

    fn note_integer(
        &mut self,
        key: &str,
        value: u64,
        type_id: u32,
        summary: &mut GgufSummary,
        context_lengths: &mut Vec<(String, u64)>,
    ) -> Result<(), GgufError> {
        if key == "general.alignment" {
            // llama.cpp insists on a u32 power of two.
            if type_id != 4 || value == 0 || !value.is_power_of_two() {
                return Err(GgufError::BadAlignment(value));
            }
            summary.alignment = value;
        } else if key.ends_with(".context_length") {
            context_lengths.push((key.to_owned(), value));
        }
        Ok(())
    }
}

/// Byte size of a scalar GGUF value type; `None` for strings, arrays and unknown ids.
fn scalar_size(type_id: u32) -> Option<u64> {
    match type_id {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

fn tensor_nbytes(name: &str, dims: &[u64], type_id: u32) -> Result<u64, GgufError> {
    let (block, type_size) =
        ggml_type_layout(type_id).ok_or_else(|| GgufError::UnknownTensorType {
            name: name.to_owned(),
            type_id,
        })?;
    let overflow = || GgufError::ShapeOverflow {
        name: name.to_owned(),
        dims: dims.to_vec(),
    };
    let mut elements: u64 = 1;
    for &d in dims {
        // llama.cpp stores dimensions as int64, so anything above i64::MAX is negative there.
        if d > i64::MAX as u64 {
            return Err(overflow());
        }
        elements = elements.checked_mul(d).ok_or_else(overflow)?;
    }
    if elements > i64::MAX as u64 {
        return Err(overflow());
    }
    let row = dims.first().copied().unwrap_or(1);
    if row % block != 0 {
        return Err(GgufError::BadRowSize {
            name: name.to_owned(),
            row,
            block,
        });
    }
    (elements / block)
        .checked_mul(type_size)
        .ok_or_else(overflow)
}

#[cfg(test)]
mod tests;
