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
/// Most elements in one metadata array (vocabularies reach ~260k tokens).
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// Deepest nesting of arrays inside arrays.
pub const MAX_ARRAY_DEPTH: u32 = 8;
/// Most tensors. Large models have a few thousand.
pub const MAX_TENSORS: u64 = 1 << 16;
/// ggml tensors have at most four dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Largest `general.alignment`; ggml requires a power of two.
pub const MAX_ALIGNMENT: u64 = 1 << 16;
/// The alignment used when `general.alignment` is absent (`GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;

const MAGIC: &[u8; 4] = b"GGUF";

/// Why a GGUF file could not be read. Each variant names the field or tensor at fault.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GgufError {
    #[error("not a GGUF file: magic bytes are {0:?}, expected \"GGUF\"")]
    BadMagic([u8; 4]),
    #[error("unsupported GGUF version {0} (radixlm reads versions 2 and 3)")]
    UnsupportedVersion(u32),
    #[error("GGUF file truncated while reading {what}: needs {needed} bytes at offset {offset}, file has {len}")]
    Truncated { what: String, offset: u64, needed: u64, len: u64 },
    #[error("GGUF {what} is {value}, over the limit of {cap}")]
    OverCap { what: String, value: u64, cap: u64 },
    #[error("GGUF metadata key {key:?} has unknown value type {ty}")]
    UnknownValueType { key: String, ty: u32 },
    #[error("GGUF metadata key {key:?}: arrays nested deeper than {MAX_ARRAY_DEPTH}")]
    ArrayTooDeep { key: String },
    #[error("GGUF string in {what} is not valid UTF-8")]
    InvalidUtf8 { what: String },
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
    #[error("GGUF tensor {name:?} has invalid shape {dims:?}")]
    BadShape { name: String, dims: Vec<u64> },
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

/// A parsed GGUF file borrowing its bytes.
#[derive(Debug)]
pub struct GgufFile<'a> {
    pub version: u32,
    pub metadata: BTreeMap<String, MetaValue>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Offset of the data section in the file.
    pub data_offset: u64,
    data: &'a [u8],
}

impl<'a> GgufFile<'a> {
    /// Parses header, metadata and tensor table, validating every tensor's extent.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, GgufError> {
        let mut r = Cursor { bytes, pos: 0 };
        let magic: [u8; 4] = r.take(4, "magic")?.try_into().unwrap();
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
        // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes.
        r.ensure_room(n_kv, 13, "metadata")?;

        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = r.string("metadata key")?;
            let ty = r.u32(&format!("type of metadata {key:?}"))?;
            let value = r.value(&key, ty, 0)?;
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
                if a == 0 || !a.is_power_of_two() || a > MAX_ALIGNMENT {
                    return Err(GgufError::BadAlignment(a));
                }
                a
            }
        };

        // Each tensor info takes at least 8 (name length) + 4 + 4 + 8 bytes.
        r.ensure_room(n_tensors, 24, "tensor table")?;
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut names = std::collections::HashSet::new();
        for i in 0..n_tensors {
            let name = r.string(&format!("name of tensor {i}"))?;
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
            if offset % alignment != 0 {
                return Err(GgufError::MisalignedTensor { name, offset, alignment });
            }
            if !names.insert(name.clone()) {
                return Err(GgufError::DuplicateTensor(name));
            }
            tensors.push(TensorInfo { name, dims, ty, offset, n_bytes });
        }

        let data_offset = align_up(r.pos as u64, alignment);
        let data_len = (bytes.len() as u64).saturating_sub(data_offset);
        for t in &tensors {
            let end = t.offset.checked_add(t.n_bytes);
            if end.is_none_or(|end| end > data_len) || data_offset > bytes.len() as u64 {
                return Err(GgufError::TensorOutOfBounds {
                    name: t.name.clone(),
                    start: t.offset,
                    end: end.unwrap_or(u64::MAX),
                    len: data_len,
                });
            }
        }
        let mut by_offset: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
        by_offset.sort_by_key(|t| t.offset);
        for w in by_offset.windows(2) {
            if w[0].offset + w[0].n_bytes > w[1].offset {
                return Err(GgufError::OverlappingTensors { a: w[0].name.clone(), b: w[1].name.clone() });
            }
        }
        let data = &bytes[data_offset.min(bytes.len() as u64) as usize..];
        Ok(Self { version, metadata, tensors, alignment, data_offset, data })
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

fn cap(what: &str, value: u64, cap: u64) -> Result<(), GgufError> {
    if value > cap {
        return Err(GgufError::OverCap { what: what.into(), value, cap });
    }
    Ok(())
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a).saturating_mul(a)
}

/// Byte size of a tensor, rejecting zero-size or overflowing shapes and partial blocks.
fn tensor_bytes(name: &str, dims: &[u64], ty: GgmlType) -> Result<u64, GgufError> {
    let bad = || GgufError::BadShape { name: name.into(), dims: dims.to_vec() };
    if dims.is_empty() || dims.iter().any(|&d| d == 0) {
        return Err(bad());
    }
    let n = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(bad)?;
    // No single tensor can exceed what a 64-bit address space and a byte count can hold.
    if n > (1u64 << 48) {
        return Err(bad());
    }
    let block = ty.block_len() as u64;
    if dims[0] % block != 0 {
        return Err(GgufError::RowNotBlockAligned {
            name: name.into(),
            row: dims[0],
            ty: ty.name(),
            block: ty.block_len(),
        });
    }
    (n / block).checked_mul(ty.block_bytes() as u64).ok_or_else(bad)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn truncated(&self, what: &str, needed: u64) -> GgufError {
        GgufError::Truncated {
            what: what.into(),
            offset: self.pos as u64,
            needed,
            len: self.bytes.len() as u64,
        }
    }

    /// Fails unless `count` items of at least `min_size` bytes each could still fit.
    fn ensure_room(&self, count: u64, min_size: u64, what: &str) -> Result<(), GgufError> {
        let needed = count.saturating_mul(min_size);
        if needed > self.remaining() {
            return Err(self.truncated(what, needed));
        }
        Ok(())
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(self.truncated(what, n));
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        Ok(self.take(N as u64, what)?.try_into().unwrap())
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.u64(&format!("length of {what}"))?;
        cap(&format!("length of {what}"), len, MAX_STRING_LEN)?;
        let b = self.take(len, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| GgufError::InvalidUtf8 { what: what.into() })
    }

    fn value(&mut self, key: &str, ty: u32, depth: u32) -> Result<MetaValue, GgufError> {
        let what = || format!("metadata {key:?}");
        Ok(match ty {
            0 => MetaValue::U8(self.array::<1>(&what())?[0]),
            1 => MetaValue::I8(self.array::<1>(&what())?[0] as i8),
            2 => MetaValue::U16(u16::from_le_bytes(self.array(&what())?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.array(&what())?)),
            4 => MetaValue::U32(u32::from_le_bytes(self.array(&what())?)),
            5 => MetaValue::I32(i32::from_le_bytes(self.array(&what())?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.array(&what())?)),
            7 => MetaValue::Bool(self.array::<1>(&what())?[0] != 0),
            8 => MetaValue::String(self.string(&what())?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::ArrayTooDeep { key: key.into() });
                }
                let elem_ty = self.u32(&format!("element type of {}", what()))?;
                let len = self.u64(&format!("length of {}", what()))?;
                cap(&format!("length of array {}", what()), len, MAX_ARRAY_LEN)?;
                let min_size = match elem_ty {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 => 8,
                    9 => 12,
                    10..=12 => 8,
                    _ => return Err(GgufError::UnknownValueType { key: key.into(), ty: elem_ty }),
                };
                self.ensure_room(len, min_size, &what())?;
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(self.value(key, elem_ty, depth + 1)?);
                }
                MetaValue::Array(items)
            }
            10 => MetaValue::U64(u64::from_le_bytes(self.array(&what())?)),
            11 => MetaValue::I64(i64::from_le_bytes(self.array(&what())?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.array(&what())?)),
            _ => return Err(GgufError::UnknownValueType { key: key.into(), ty }),
        })
    }
}
