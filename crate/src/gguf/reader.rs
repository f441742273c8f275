//! GGUF reader. A GGUF file is hostile input: every length, count, offset and dimension is
//! checked against the bytes that remain and against the named caps below, with
//! overflow-checked arithmetic, before anything is allocated from it.
//!
//! Layout (versions 2 and 3, little-endian): magic `GGUF`, u32 version, u64 tensor count,
//! u64 metadata count, the metadata key/values, the tensor infos, padding to
//! `general.alignment`, then the tensor data.

use std::collections::BTreeMap;

use super::blocks::GgmlType;

/// Longest string (key or value) accepted. Chat templates run to tens of KiB; 16 MiB is far
/// past any real one and keeps a forged length from reserving gigabytes.
pub const MAX_STRING_LEN: u64 = 16 << 20;
/// Most metadata entries. Real models carry a few dozen.
pub const MAX_METADATA_ENTRIES: u64 = 1 << 16;
/// Most elements in one metadata array. Vocabularies reach ~260k tokens and BPE merge lists
/// ~450k entries.
pub const MAX_ARRAY_LEN: u64 = 1 << 21;
/// Most array elements in the whole metadata. Each becomes a 32-byte `MetaValue` even when it
/// took one byte in the file, so this bounds the memory a header can demand (128 MiB) however
/// many bytes of tensor data a forged length swallows. Real models hold about a million
/// (tokens, scores, token types and merges).
pub const MAX_METADATA_ELEMENTS: u64 = 1 << 22;
/// Most elements reserved up front for one array; longer ones grow as their bytes are read.
const ARRAY_PREALLOC: u64 = 1 << 16;
/// Deepest nesting of arrays inside arrays.
pub const MAX_ARRAY_DEPTH: u32 = 8;
/// Most tensors. Large models have a few thousand.
pub const MAX_TENSORS: u64 = 1 << 16;
/// ggml tensors have at most four dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Largest `general.alignment`; ggml requires a power of two.
pub const MAX_ALIGNMENT: u64 = 1 << 16;
/// Most elements in one tensor (256 Ti): far past any model, and small enough that its byte
/// size cannot overflow.
pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 48;
/// The alignment used when `general.alignment` is absent (`GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;

const MAGIC: &[u8; 4] = b"GGUF";
/// Bytes of an invalid string quoted in its error.
const INVALID_UTF8_PREVIEW: usize = 64;
/// Fewest bytes one metadata entry takes: key length, empty key, type, a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Fewest bytes one tensor info takes before it can fail: name length, empty name, dimension
/// count, type and offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// Why a GGUF file could not be read. Each variant names the field or tensor at fault.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GgufError {
    #[error("not a GGUF file: it starts with \"{}\", expected \"GGUF\"", .0.escape_ascii())]
    BadMagic([u8; 4]),
    #[error("unsupported GGUF version {0} (radixlm reads versions 2 and 3)")]
    UnsupportedVersion(u32),
    #[error("GGUF file truncated while reading {what}: needs {needed} bytes at offset {offset}, file has {len}")]
    Truncated { what: String, offset: u64, needed: u64, len: u64 },
    #[error("GGUF {what} is {value}, over the limit of {cap}")]
    OverCap { what: String, value: u64, cap: u64 },
    #[error("GGUF metadata key {key:?} has unknown value type {ty}")]
    UnknownValueType { key: String, ty: u32 },
    #[error("GGUF metadata key {key:?} is an array of unknown element type {ty}")]
    UnknownArrayElementType { key: String, ty: u32 },
    #[error("GGUF metadata key {key:?}: arrays nested deeper than {MAX_ARRAY_DEPTH}")]
    ArrayTooDeep { key: String },
    #[error("GGUF {what} is not valid UTF-8 (it reads as {lossy:?})")]
    InvalidUtf8 { what: String, lossy: String },
    #[error("GGUF metadata key {0:?} appears twice")]
    DuplicateKey(String),
    #[error("GGUF metadata {key:?} has the wrong type: expected {expected}")]
    WrongType { key: String, expected: &'static str },
    #[error("GGUF general.alignment is {0}: it must be a power of two no larger than {MAX_ALIGNMENT}")]
    BadAlignment(u64),
    #[error("GGUF tensor {0:?} appears twice")]
    DuplicateTensor(String),
    #[error("GGUF tensor {name:?} has {n_dims} dimensions (at most {MAX_DIMS} are allowed)")]
    TooManyDims { name: String, n_dims: u32 },
    #[error("GGUF tensor {name:?} has invalid shape {dims:?}: {reason}")]
    BadShape { name: String, dims: Vec<u64>, reason: &'static str },
    #[error("GGUF tensor {name:?} has unsupported type {ty}")]
    UnsupportedTensorType { name: String, ty: String },
    #[error("GGUF tensor {name:?}: row length {row} is not a multiple of the {ty} block size {block}")]
    RowNotBlockAligned { name: String, row: u64, ty: &'static str, block: usize },
    #[error("GGUF tensor {name:?}: data offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor { name: String, offset: u64, alignment: u64 },
    #[error("GGUF tensor {name:?}: data [{start}, {end}) lies outside the {len} bytes of tensor data")]
    TensorOutOfBounds { name: String, start: u64, end: u64, len: u64 },
    #[error("GGUF tensors {a:?} and {b:?} overlap in the data section")]
    OverlappingTensors { a: String, b: String },
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<MetaValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetaValue {
    /// Any integer type that fits in `u64` without loss.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One entry of the tensor table.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the contiguous (row) dimension.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Byte offset relative to the start of the data section.
    pub offset: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A tensor's bytes, borrowed from the file.
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    pub info: &'a TensorInfo,
    pub data: &'a [u8],
}

impl TensorView<'_> {
    /// Dequantizes the whole tensor to f32 (CPU reference path).
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.info.n_elements() as usize];
        super::blocks::dequantize(self.info.ty, self.data, &mut out);
        out
    }
}

/// What precedes the tensor data: version, metadata and the tensor table. A model streamed from
/// the network is parsed from its first bytes into this, before its tensor data arrives.
#[derive(Debug)]
pub struct GgufHeader {
    pub version: u32,
    pub metadata: BTreeMap<String, MetaValue>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Offset of the data section in the file.
    pub data_offset: u64,
}

/// A parsed GGUF file borrowing its bytes; its header's fields are reached through `Deref`.
#[derive(Debug)]
pub struct GgufFile<'a> {
    pub header: GgufHeader,
    data: &'a [u8],
}

impl<'a> GgufFile<'a> {
    /// Parses header, metadata and tensor table, validating every tensor's extent.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, GgufError> {
        let header = GgufHeader::parse(bytes, bytes.len() as u64)?;
        // Past the end of a file with no tensor data the data section is simply empty.
        let data = usize::try_from(header.data_offset).ok().and_then(|o| bytes.get(o..)).unwrap_or(&[]);
        Ok(Self { header, data })
    }

    /// A zero-copy view of a tensor's bytes.
    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        let info = self.tensor_info(name)?;
        Some(self.view(info))
    }

    pub fn view<'s>(&'s self, info: &'s TensorInfo) -> TensorView<'s> {
        // Extents were validated in `parse`.
        let start = info.offset as usize;
        TensorView { info, data: &self.data[start..start + info.n_bytes as usize] }
    }

    /// The tensor data section (after the header), for fingerprinting.
    pub fn data_section(&self) -> &'a [u8] {
        self.data
    }
}

impl std::ops::Deref for GgufFile<'_> {
    type Target = GgufHeader;
    fn deref(&self) -> &GgufHeader {
        &self.header
    }
}

impl GgufHeader {
    /// Parses the header from `bytes`, the first bytes of a file of `file_len` bytes (all of it
    /// or a prefix), checking every tensor's extent against `file_len`. A prefix too short for
    /// the header fails with `Truncated` whose `offset + needed`, when within `file_len`, is
    /// how many bytes a retry needs; past `file_len` the file itself is too short.
    pub fn parse(bytes: &[u8], file_len: u64) -> Result<Self, GgufError> {
        let file_len = file_len.max(bytes.len() as u64);
        let mut r = Cursor { bytes, file_len, pos: 0, elements_left: MAX_METADATA_ELEMENTS };
        let magic = r.fixed::<4>(|| "magic".into())?;
        if &magic != MAGIC {
            return Err(GgufError::BadMagic(magic));
        }
        let version = r.u32("version")?;
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;
        cap("tensor count", n_tensors, MAX_TENSORS)?;
        cap("metadata count", n_kv, MAX_METADATA_ENTRIES)?;
        r.ensure_room(n_kv, MIN_KV_BYTES, "metadata")?;

        let mut metadata = BTreeMap::new();
        for i in 0..n_kv {
            let key = r.string(&|| format!("metadata key {i}"))?;
            let what = format!("metadata {key:?}");
            let ty = r.u32(&format!("type of {what}"))?;
            let value = r.value(&key, &|| what.clone(), ty, 0)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(GgufError::DuplicateKey(key));
            }
        }

        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => {
                let a = v.as_u64().ok_or(GgufError::WrongType {
                    key: "general.alignment".into(),
                    expected: "an unsigned integer",
                })?;
                if !a.is_power_of_two() || a > MAX_ALIGNMENT {
                    return Err(GgufError::BadAlignment(a));
                }
                a
            }
        };

        r.ensure_room(n_tensors, MIN_TENSOR_INFO_BYTES, "tensor table")?;
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut names = std::collections::HashSet::new();
        for i in 0..n_tensors {
            let name = r.string(&|| format!("name of tensor {i}"))?;
            let n_dims = r.u32(&format!("dimension count of tensor {name:?}"))?;
            if n_dims > MAX_DIMS {
                return Err(GgufError::TooManyDims { name, n_dims });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for d in 0..n_dims {
                dims.push(r.u64(&format!("dimension {d} of tensor {name:?}"))?);
            }
            let ty_id = r.u32(&format!("type of tensor {name:?}"))?;
            let offset = r.u64(&format!("offset of tensor {name:?}"))?;
            let ty = GgmlType::from_id(ty_id)
                .map_err(|ty| GgufError::UnsupportedTensorType { name: name.clone(), ty })?;
            let n_bytes = tensor_bytes(&name, &dims, ty)?;
            if !offset.is_multiple_of(alignment) {
                return Err(GgufError::MisalignedTensor { name, offset, alignment });
            }
            if !names.insert(name.clone()) {
                return Err(GgufError::DuplicateTensor(name));
            }
            tensors.push(TensorInfo { name, dims, ty, offset, n_bytes });
        }

        let data_offset = align_up(r.pos as u64, alignment);
        let data_len = file_len.saturating_sub(data_offset);
        for t in &tensors {
            let end = t.offset.checked_add(t.n_bytes);
            if end.is_none_or(|end| end > data_len) {
                return Err(GgufError::TensorOutOfBounds {
                    name: t.name.clone(),
                    start: t.offset,
                    end: end.unwrap_or(u64::MAX),
                    len: data_len,
                });
            }
        }
        // Every tensor has at least one byte (`tensor_bytes` rejects empty shapes), so sorted
        // by offset, each must end before the next begins.
        let mut by_offset: Vec<&TensorInfo> = tensors.iter().collect();
        by_offset.sort_by_key(|t| t.offset);
        for w in by_offset.windows(2) {
            if w[0].offset + w[0].n_bytes > w[1].offset {
                return Err(GgufError::OverlappingTensors { a: w[0].name.clone(), b: w[1].name.clone() });
            }
        }
        Ok(Self { version, metadata, tensors, alignment, data_offset })
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    /// A required unsigned integer; names the key when absent or mistyped.
    pub fn require_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.get(key).and_then(MetaValue::as_u64).ok_or_else(|| GgufError::WrongType {
            key: key.into(),
            expected: "a present unsigned integer",
        })
    }

    /// A required float (any numeric type); names the key when absent or mistyped.
    pub fn require_f64(&self, key: &str) -> Result<f64, GgufError> {
        self.get(key).and_then(MetaValue::as_f64).ok_or_else(|| GgufError::WrongType {
            key: key.into(),
            expected: "a present number",
        })
    }

    /// A required string; names the key when absent or mistyped.
    pub fn require_str(&self, key: &str) -> Result<&str, GgufError> {
        self.get(key).and_then(MetaValue::as_str).ok_or_else(|| GgufError::WrongType {
            key: key.into(),
            expected: "a present string",
        })
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

fn cap(what: &str, value: u64, cap: u64) -> Result<(), GgufError> {
    if value > cap {
        return Err(GgufError::OverCap { what: what.into(), value, cap });
    }
    Ok(())
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a).saturating_mul(a)
}

/// Byte size of a tensor, rejecting empty or overflowing shapes and partial blocks.
fn tensor_bytes(name: &str, dims: &[u64], ty: GgmlType) -> Result<u64, GgufError> {
    let bad = |reason| GgufError::BadShape { name: name.into(), dims: dims.to_vec(), reason };
    if dims.is_empty() {
        return Err(bad("it has no dimensions"));
    }
    if dims.contains(&0) {
        return Err(bad("a dimension is zero"));
    }
    let n = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_TENSOR_ELEMENTS)
        .ok_or_else(|| bad("more than 2^48 elements"))?;
    let block = ty.block_len() as u64;
    if !dims[0].is_multiple_of(block) {
        return Err(GgufError::RowNotBlockAligned {
            name: name.into(),
            row: dims[0],
            ty: ty.name(),
            block: ty.block_len(),
        });
    }
    // At most 2^48 / 32 blocks of at most 34 bytes (or 2^48 F32 weights): no overflow.
    Ok(n / block * ty.block_bytes() as u64)
}

/// Fewest bytes one metadata value of type `ty` takes, or `None` for an unknown type.
fn min_value_bytes(ty: u32) -> Option<u64> {
    Some(match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 => 8,  // the length of an empty string
        9 => 12, // element type and length of an empty array
        10..=12 => 8,
        _ => return None,
    })
}

/// Names what is being read, built only when an error needs it (it runs per array element).
type What<'w> = &'w dyn Fn() -> String;

/// Reads the file front to back. Every read checks the bytes that remain first, so a forged
/// length fails here instead of reaching an allocation.
struct Cursor<'a> {
    /// The bytes at hand: the whole file or its first bytes.
    bytes: &'a [u8],
    /// The file's length, which bounds counts and extents even when only a prefix is at hand.
    file_len: u64,
    pos: usize,
    /// Array elements the metadata may still hold (`MAX_METADATA_ELEMENTS` in all).
    elements_left: u64,
}

impl<'a> Cursor<'a> {
    /// Bytes of the file after the cursor, at hand or not.
    fn remaining(&self) -> u64 {
        self.file_len - self.pos as u64
    }

    fn truncated(&self, what: String, needed: u64) -> GgufError {
        GgufError::Truncated { what, offset: self.pos as u64, needed, len: self.file_len }
    }

    /// Fails unless `count` items of at least `min_size` bytes each could still fit.
    fn ensure_room(&self, count: u64, min_size: u64, what: &str) -> Result<(), GgufError> {
        let needed = count.saturating_mul(min_size);
        if needed > self.remaining() {
            return Err(self.truncated(what.into(), needed));
        }
        Ok(())
    }

    /// The next `n` bytes; `what` names them if they are missing.
    fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8], GgufError> {
        if n > (self.bytes.len() - self.pos) as u64 {
            return Err(self.truncated(what(), n));
        }
        // `n` fits in `usize`: it is at most the length of a slice.
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn fixed<const N: usize>(&mut self, what: impl FnOnce() -> String) -> Result<[u8; N], GgufError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        self.fixed(|| what.into()).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        self.fixed(|| what.into()).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: What) -> Result<String, GgufError> {
        let len = u64::from_le_bytes(self.fixed(|| format!("length of {}", what()))?);
        if len > MAX_STRING_LEN {
            let what = format!("length of {}", what());
            return Err(GgufError::OverCap { what, value: len, cap: MAX_STRING_LEN });
        }
        let b = self.take(len, what)?;
        std::str::from_utf8(b).map(str::to_owned).map_err(|_| {
            // A forged length can make the "string" megabytes of tensor data: show its start.
            let mut lossy = String::from_utf8_lossy(&b[..b.len().min(INVALID_UTF8_PREVIEW)]).into_owned();
            if b.len() > INVALID_UTF8_PREVIEW {
                lossy.push('…');
            }
            GgufError::InvalidUtf8 { what: what(), lossy }
        })
    }

    /// A value of type `ty` of metadata `key`; `what` names it (or the array element) in errors.
    fn value(&mut self, key: &str, what: What, ty: u32, depth: u32) -> Result<MetaValue, GgufError> {
        Ok(match ty {
            0 => MetaValue::U8(u8::from_le_bytes(self.fixed(what)?)),
            1 => MetaValue::I8(i8::from_le_bytes(self.fixed(what)?)),
            2 => MetaValue::U16(u16::from_le_bytes(self.fixed(what)?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.fixed(what)?)),
            4 => MetaValue::U32(u32::from_le_bytes(self.fixed(what)?)),
            5 => MetaValue::I32(i32::from_le_bytes(self.fixed(what)?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.fixed(what)?)),
            7 => MetaValue::Bool(self.fixed::<1>(what)?[0] != 0),
            8 => MetaValue::String(self.string(what)?),
            9 => self.array(key, what, depth)?,
            10 => MetaValue::U64(u64::from_le_bytes(self.fixed(what)?)),
            11 => MetaValue::I64(i64::from_le_bytes(self.fixed(what)?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.fixed(what)?)),
            _ => return Err(GgufError::UnknownValueType { key: key.into(), ty }),
        })
    }

    fn array(&mut self, key: &str, what: What, depth: u32) -> Result<MetaValue, GgufError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(GgufError::ArrayTooDeep { key: key.into() });
        }
        let elem_ty = u32::from_le_bytes(self.fixed(|| format!("element type of {}", what()))?);
        let len = u64::from_le_bytes(self.fixed(|| format!("length of {}", what()))?);
        let min_size = min_value_bytes(elem_ty)
            .ok_or_else(|| GgufError::UnknownArrayElementType { key: key.into(), ty: elem_ty })?;
        if len > MAX_ARRAY_LEN {
            let what = format!("length of {}", what());
            return Err(GgufError::OverCap { what, value: len, cap: MAX_ARRAY_LEN });
        }
        self.ensure_room(len, min_size, &what())?;
        self.elements_left = self.elements_left.checked_sub(len).ok_or_else(|| GgufError::OverCap {
            what: format!("array element count of the metadata (reached at {})", what()),
            value: MAX_METADATA_ELEMENTS - self.elements_left + len,
            cap: MAX_METADATA_ELEMENTS,
        })?;
        let mut items = Vec::with_capacity(len.min(ARRAY_PREALLOC) as usize);
        for i in 0..len {
            items.push(self.value(key, &|| format!("{}[{i}]", what()), elem_ty, depth + 1)?);
        }
        Ok(MetaValue::Array(items))
    }
}
