//! GGUF writer for synthetic test and benchmark models.
//!
//! It writes what it is given without judging it (duplicate keys, shapes that disagree with
//! the data, an invalid `general.alignment`), so tests can build the files the reader must
//! reject.

use super::blocks::{quantize, GgmlType};
use super::reader::{MetaValue, DEFAULT_ALIGNMENT, MAX_ALIGNMENT};

/// Builds a GGUF file in memory: metadata in insertion order, then tensors.
pub struct GgufWriter {
    version: u32,
    /// Each entry with the element type an empty array is written with (GGUF arrays carry one).
    metadata: Vec<(String, MetaValue, u32)>,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self { version: 3, metadata: Vec::new(), tensors: Vec::new() }
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// The version number in the header (3 by default). Versions 2 and 3 share a layout; any
    /// other number is written as is, over the same layout.
    pub fn version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Adds a metadata entry. Panics on an array whose elements differ in type, which GGUF
    /// cannot represent (nested arrays may differ from each other).
    pub fn meta(&mut self, key: &str, value: MetaValue) -> &mut Self {
        assert!(is_homogeneous(&value), "GGUF arrays hold one element type; metadata {key:?} mixes them");
        self.metadata.push((key.to_string(), value, type_id(&MetaValue::U8(0))));
        self
    }

    /// Adds an empty array whose element type is `like`'s: readers such as llama.cpp's check
    /// the element type of arrays they expect (an empty `tokenizer.ggml.merges` must be strings).
    pub fn meta_empty_array(&mut self, key: &str, like: &MetaValue) -> &mut Self {
        self.metadata.push((key.to_string(), MetaValue::Array(Vec::new()), type_id(like)));
        self
    }

    /// Adds a tensor already in `ty`'s block format. `dims` are in ggml order (row first).
    pub fn tensor_raw(&mut self, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.to_string(), dims.to_vec(), ty, data));
        self
    }

    /// Quantizes f32 values into `ty` and adds them.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType, values: &[f32]) -> &mut Self {
        self.tensor_raw(name, dims, ty, quantize(ty, values))
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        // An invalid alignment is written as given, but the data is laid out with the default.
        let alignment = self
            .metadata
            .iter()
            .find(|(k, _, _)| k == "general.alignment")
            .and_then(|(_, v, _)| v.as_u64())
            .filter(|a| a.is_power_of_two() && *a <= MAX_ALIGNMENT)
            .unwrap_or(DEFAULT_ALIGNMENT) as usize;
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v, empty_elem) in &self.metadata {
            write_str(&mut out, k);
            out.extend_from_slice(&type_id(v).to_le_bytes());
            write_value(&mut out, v, *empty_elem);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::new();
        for (name, dims, ty, data) in &self.tensors {
            write_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            dims.iter().for_each(|d| out.extend_from_slice(&d.to_le_bytes()));
            out.extend_from_slice(&ty.id().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + data.len()).div_ceil(alignment) * alignment;
        }
        out.resize(out.len().div_ceil(alignment) * alignment, 0);
        let base = out.len();
        for ((_, _, _, data), off) in self.tensors.iter().zip(offsets) {
            out.resize(base + off, 0);
            out.extend_from_slice(data);
        }
        out
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn is_homogeneous(v: &MetaValue) -> bool {
    match v {
        MetaValue::Array(items) => {
            items.windows(2).all(|w| type_id(&w[0]) == type_id(&w[1])) && items.iter().all(is_homogeneous)
        }
        _ => true,
    }
}

fn type_id(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::String(_) => 8,
        MetaValue::Array(_) => 9,
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    }
}

/// Writes `v`; an empty array (at any depth) is written with element type `empty_elem`.
fn write_value(out: &mut Vec<u8>, v: &MetaValue, empty_elem: u32) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(*x as u8),
        MetaValue::String(s) => write_str(out, s),
        MetaValue::Array(items) => {
            let elem = items.first().map(type_id).unwrap_or(empty_elem);
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            items.iter().for_each(|i| write_value(out, i, empty_elem));
        }
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufFile;

    /// One entry of every value type, arrays of each, empty arrays and arrays of arrays.
    fn every_value_type() -> Vec<(&'static str, MetaValue)> {
        use MetaValue::*;
        let s = |v: &str| String(v.into());
        vec![
            ("u8", U8(250)),
            ("i8", I8(-120)),
            ("u16", U16(65_000)),
            ("i16", I16(-32_000)),
            ("u32", U32(4_000_000_000)),
            ("i32", I32(-2_000_000_000)),
            ("f32", F32(-1.5e-7)),
            ("bool", Bool(true)),
            ("string", s("héllo, wörld")),
            ("empty.string", s("")),
            ("u64", U64(u64::MAX)),
            ("i64", I64(i64::MIN)),
            ("f64", F64(std::f64::consts::PI)),
            ("array.u8", Array(vec![U8(0), U8(255)])),
            ("array.i16", Array(vec![I16(-1), I16(2)])),
            ("array.f32", Array(vec![F32(0.25), F32(-8.0), F32(f32::MAX)])),
            ("array.bool", Array(vec![Bool(false), Bool(true)])),
            ("array.string", Array(vec![s("a"), s(""), s("ccc")])),
            ("array.u64", Array(vec![U64(1), U64(u64::MAX)])),
            ("array.i64", Array(vec![I64(-1)])),
            ("array.f64", Array(vec![F64(-0.5)])),
            ("array.empty", Array(vec![])),
            (
                "array.nested",
                Array(vec![
                    Array(vec![U32(1), U32(2)]),
                    Array(vec![]),
                    Array(vec![s("x")]),
                    Array(vec![Array(vec![I8(-3)])]),
                ]),
            ),
        ]
    }

    fn round_trip(version: u32) {
        let entries = every_value_type();
        let mut w = GgufWriter::new();
        w.version(version);
        for (k, v) in &entries {
            w.meta(k, v.clone());
        }
        let weights: Vec<f32> = (0..12).map(|i| i as f32 - 5.5).collect();
        w.tensor("t", &[4, 3], GgmlType::F32, &weights);
        let bytes = w.to_bytes();
        let f = GgufFile::parse(&bytes).unwrap();
        assert_eq!(f.version, version);
        assert_eq!(f.metadata.len(), entries.len());
        for (k, v) in &entries {
            assert_eq!(f.get(k), Some(v), "metadata {k:?}");
        }
        assert_eq!(f.tensor("t").unwrap().to_f32(), weights);
    }

    #[test]
    fn every_value_type_round_trips_in_version_3() {
        round_trip(3);
    }

    #[test]
    fn every_value_type_round_trips_in_version_2() {
        round_trip(2);
    }

    #[test]
    fn tensors_are_aligned_views_of_the_file() {
        let mut w = GgufWriter::new();
        w.meta("general.alignment", MetaValue::U32(64))
            .tensor_raw("odd", &[3], GgmlType::F16, vec![1, 2, 3, 4, 5, 6])
            .tensor_raw("next", &[2], GgmlType::F32, vec![7; 8]);
        let bytes = w.to_bytes();
        let f = GgufFile::parse(&bytes).unwrap();
        assert_eq!(f.alignment, 64);
        assert_eq!(f.data_offset % 64, 0);
        let file = bytes.as_ptr_range();
        for (name, want) in [("odd", &[1u8, 2, 3, 4, 5, 6][..]), ("next", &[7; 8][..])] {
            let view = f.tensor(name).unwrap();
            assert_eq!(view.data, want);
            assert_eq!(view.info.offset % 64, 0);
            assert!(file.contains(&view.data.as_ptr()), "{name} is not borrowed from the file");
        }
    }

    #[test]
    fn an_empty_array_carries_the_element_type_it_was_given() {
        let bytes = GgufWriter::new().meta_empty_array("merges", &MetaValue::String(String::new())).to_bytes();
        let key = bytes.windows(6).position(|w| w == b"merges").unwrap() + 6;
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        assert_eq!((u32_at(key), u32_at(key + 4)), (9, 8), "an array of strings");
        assert_eq!(GgufFile::parse(&bytes).unwrap().get("merges"), Some(&MetaValue::Array(vec![])));
    }

    #[test]
    #[should_panic(expected = "mixes them")]
    fn mixed_arrays_are_refused() {
        GgufWriter::new().meta("mixed", MetaValue::Array(vec![MetaValue::U8(1), MetaValue::I8(1)]));
    }
}
