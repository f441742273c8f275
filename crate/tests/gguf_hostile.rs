//! Hostile GGUF files built by hand: a small valid file from the writer, corrupted at offsets
//! computed from its layout. Each test asserts the exact error and that its message names the
//! field or tensor at fault; forged counts must also fail without a large allocation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use radixlm::gguf::reader::{
    MAX_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_METADATA_ELEMENTS, MAX_METADATA_ENTRIES, MAX_STRING_LEN,
    MAX_TENSORS,
};
use radixlm::gguf::{GgmlType, GgufError, GgufFile, GgufWriter, MetaValue};

/// Records the largest single allocation each thread makes, so a test can show that a forged
/// count was refused before anything was sized from it.
struct PeakAlloc;

thread_local! {
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = PEAK.try_with(|p| p.set(p.get().max(size)));
}

unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

const F32_TENSOR: &str = "tensor.f32";
const Q4_TENSOR: &str = "tensor.q4_0";

fn s(v: &str) -> MetaValue {
    MetaValue::String(v.into())
}

/// A small valid file: a few keys (one a string array) and two tensors.
fn small_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", s("llama"))
        .meta("general.name", s("hostile"))
        .meta("tokenizer.ggml.tokens", MetaValue::Array(vec![s("hello"), s("world")]))
        .meta("answer", MetaValue::U32(42));
    let f32s: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let q4s: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) / 8.0).collect();
    w.tensor(F32_TENSOR, &[4, 2], GgmlType::F32, &f32s).tensor(Q4_TENSOR, &[32, 2], GgmlType::Q4_0, &q4s);
    w
}

fn small() -> Vec<u8> {
    small_writer().to_bytes()
}

/// Index just past the length-prefixed string `text` (a key or a tensor name), which must
/// occur exactly once in `bytes`.
fn after(bytes: &[u8], text: &str) -> usize {
    let mut needle = (text.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(text.as_bytes());
    let hits: Vec<usize> = bytes.windows(needle.len()).enumerate().filter(|(_, w)| *w == needle).map(|(i, _)| i).collect();
    assert_eq!(hits.len(), 1, "{text:?} occurs {} times", hits.len());
    hits[0] + needle.len()
}

/// Offset of the value of metadata `key` (past its type).
fn value_at(bytes: &[u8], key: &str) -> usize {
    after(bytes, key) + 4
}

/// Offsets of the fields of a tensor info with `n_dims` dimensions.
struct TensorFields {
    n_dims: usize,
    dims: usize,
    ty: usize,
    offset: usize,
}

fn tensor_fields(bytes: &[u8], name: &str, n_dims: usize) -> TensorFields {
    let n = after(bytes, name);
    TensorFields { n_dims: n, dims: n + 4, ty: n + 4 + 8 * n_dims, offset: n + 8 + 8 * n_dims }
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Parses `bytes`, expecting `want` with a message containing every one of `words`; the
/// parse may make no allocation of 1 MiB or more.
fn expect_err(bytes: &[u8], want: GgufError, words: &[&str]) {
    PEAK.with(|p| p.set(0));
    let err = GgufFile::parse(bytes).expect_err("a hostile file must not parse");
    let peak = PEAK.with(Cell::get);
    assert_eq!(err, want);
    let msg = err.to_string();
    for w in words {
        assert!(msg.contains(w), "message {msg:?} does not mention {w:?}");
    }
    assert!(peak < 1 << 20, "parse allocated {peak} bytes at once");
}

fn truncated(what: &str, offset: usize, needed: u64, len: usize) -> GgufError {
    GgufError::Truncated { what: what.into(), offset: offset as u64, needed, len: len as u64 }
}

#[test]
fn the_small_file_is_valid() {
    let bytes = small();
    let f = GgufFile::parse(&bytes).unwrap();
    assert_eq!(f.tensors.len(), 2);
    assert_eq!(f.get("answer"), Some(&MetaValue::U32(42)));
    assert_eq!(f.tensor(F32_TENSOR).unwrap().to_f32(), (0..8).map(|i| i as f32).collect::<Vec<_>>());
}

#[test]
fn wrong_magic() {
    let mut bytes = small();
    bytes[..4].copy_from_slice(b"GGML");
    expect_err(&bytes, GgufError::BadMagic(*b"GGML"), &["\"GGML\"", "expected \"GGUF\""]);
    bytes[..4].copy_from_slice(&[0x7f, b'E', b'L', b'F']);
    expect_err(&bytes, GgufError::BadMagic(*b"\x7fELF"), &["\\x7fELF"]);
}

#[test]
fn versions_other_than_2_and_3() {
    for version in [0, 1, 4, u32::MAX] {
        let bytes = small_writer().version(version).to_bytes();
        expect_err(&bytes, GgufError::UnsupportedVersion(version), &[&format!("version {version}")]);
    }
    // A big-endian file reads its version 3 as 0x0300_0000.
    let mut bytes = small();
    put_u32(&mut bytes, 4, 3u32.swap_bytes());
    expect_err(&bytes, GgufError::UnsupportedVersion(0x0300_0000), &["50331648"]);
}

#[test]
fn version_2_reads_like_version_3() {
    let v2 = small_writer().version(2).to_bytes();
    let v3 = small();
    let (a, b) = (GgufFile::parse(&v2).unwrap(), GgufFile::parse(&v3).unwrap());
    assert_eq!((a.version, b.version), (2, 3));
    assert_eq!(a.metadata, b.metadata);
    assert_eq!(a.tensors, b.tensors);
    assert_eq!(a.data_section(), b.data_section());
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = small();
    let data_offset = GgufFile::parse(&bytes).unwrap().data_offset as usize;
    for len in 0..bytes.len() {
        PEAK.with(|p| p.set(0));
        let err = GgufFile::parse(&bytes[..len]).expect_err("a truncated file must not parse");
        assert!(PEAK.with(Cell::get) < 1 << 20);
        match err {
            // Cut inside the header: the read that ran out says what it was reading.
            GgufError::Truncated { offset, needed, len: l, what } => {
                assert!(len < data_offset, "cut at {len} in the data reported truncated {what}");
                assert_eq!(l, len as u64);
                assert!(offset + needed > l, "cut at {len}: {what} at {offset} + {needed} fits");
            }
            // Cut in the padding or the data: some tensor's data is missing.
            GgufError::TensorOutOfBounds { end, len: data_len, .. } => {
                assert_eq!(data_len, len.saturating_sub(data_offset) as u64);
                assert!(end > data_len);
            }
            other => panic!("cut at {len}: unexpected error {other}"),
        }
    }
}

#[test]
fn truncation_names_the_field() {
    let bytes = small();
    let name = value_at(&bytes, "general.name");
    // Cut inside the string "hostile".
    expect_err(&bytes[..name + 10], truncated("metadata \"general.name\"", name + 8, 7, name + 10), &[
        "metadata \"general.name\"",
        "needs 7 bytes",
    ]);
    let t = tensor_fields(&bytes, Q4_TENSOR, 2);
    expect_err(&bytes[..t.dims + 12], truncated("dimension 1 of tensor \"tensor.q4_0\"", t.dims + 8, 8, t.dims + 12), &[
        "dimension 1 of tensor \"tensor.q4_0\"",
    ]);
}

#[test]
fn forged_metadata_count() {
    let mut bytes = small();
    put_u64(&mut bytes, 16, u64::MAX);
    expect_err(
        &bytes,
        GgufError::OverCap { what: "metadata count".into(), value: u64::MAX, cap: MAX_METADATA_ENTRIES },
        &["metadata count", "18446744073709551615"],
    );
    // Under the cap, but more entries than the bytes could hold: refused before reading one.
    put_u64(&mut bytes, 16, MAX_METADATA_ENTRIES);
    let len = bytes.len();
    expect_err(&bytes, truncated("metadata", 24, MAX_METADATA_ENTRIES * 13, len), &["metadata"]);
}

#[test]
fn forged_tensor_count() {
    let mut bytes = small();
    put_u64(&mut bytes, 8, 1 << 40);
    expect_err(
        &bytes,
        GgufError::OverCap { what: "tensor count".into(), value: 1 << 40, cap: MAX_TENSORS },
        &["tensor count"],
    );
    put_u64(&mut bytes, 8, MAX_TENSORS);
    let table = tensor_fields(&bytes, F32_TENSOR, 2).n_dims - 8 - F32_TENSOR.len();
    let len = bytes.len();
    expect_err(&bytes, truncated("tensor table", table, MAX_TENSORS * 24, len), &["tensor table"]);
}

#[test]
fn forged_string_lengths() {
    let mut bytes = small();
    // The first key's length.
    put_u64(&mut bytes, 24, u64::MAX);
    expect_err(
        &bytes,
        GgufError::OverCap { what: "length of metadata key 0".into(), value: u64::MAX, cap: MAX_STRING_LEN },
        &["length of metadata key 0"],
    );

    let mut bytes = small();
    let at = value_at(&bytes, "general.name");
    put_u64(&mut bytes, at, MAX_STRING_LEN);
    let len = bytes.len();
    expect_err(&bytes, truncated("metadata \"general.name\"", at + 8, MAX_STRING_LEN, len), &["general.name"]);

    // An element of a string array is named by its index.
    let mut bytes = small();
    let at = after(&bytes, "world") - "world".len() - 8;
    put_u64(&mut bytes, at, u64::MAX - 1);
    let what = "length of metadata \"tokenizer.ggml.tokens\"[1]";
    expect_err(&bytes, GgufError::OverCap { what: what.into(), value: u64::MAX - 1, cap: MAX_STRING_LEN }, &[what]);

    let mut bytes = small();
    let name_len = tensor_fields(&bytes, Q4_TENSOR, 2).n_dims - Q4_TENSOR.len() - 8;
    put_u64(&mut bytes, name_len, 1 << 50);
    expect_err(
        &bytes,
        GgufError::OverCap { what: "length of name of tensor 1".into(), value: 1 << 50, cap: MAX_STRING_LEN },
        &["name of tensor 1"],
    );
}

#[test]
fn forged_array_lengths() {
    let key = "tokenizer.ggml.tokens";
    let mut bytes = small();
    let len_at = value_at(&bytes, key) + 4;
    assert_eq!(get_u64(&bytes, len_at), 2);
    put_u64(&mut bytes, len_at, u64::MAX);
    expect_err(
        &bytes,
        GgufError::OverCap { what: format!("length of metadata {key:?}"), value: u64::MAX, cap: MAX_ARRAY_LEN },
        &[key],
    );
    // Under the cap, but each string needs at least its 8-byte length.
    put_u64(&mut bytes, len_at, MAX_ARRAY_LEN);
    let len = bytes.len();
    expect_err(&bytes, truncated(&format!("metadata {key:?}"), len_at + 8, MAX_ARRAY_LEN * 8, len), &[key]);
}

#[test]
fn too_many_array_elements_in_all() {
    // Each array is under its own cap; together they pass the metadata's.
    let per_array = MAX_ARRAY_LEN as usize;
    let n_arrays = (MAX_METADATA_ELEMENTS as usize).div_ceil(per_array) + 1;
    let mut w = GgufWriter::new();
    for i in 0..n_arrays {
        w.meta(&format!("bytes.{i}"), MetaValue::Array(vec![MetaValue::U8(0); per_array]));
    }
    let last = format!("bytes.{}", n_arrays - 1);
    let err = GgufFile::parse(&w.to_bytes()).unwrap_err();
    assert_eq!(err, GgufError::OverCap {
        what: format!("array element count of the metadata (reached at metadata {last:?})"),
        value: (n_arrays * per_array) as u64,
        cap: MAX_METADATA_ELEMENTS,
    });
    assert!(err.to_string().contains(&last));
}

#[test]
fn unknown_value_type() {
    let mut bytes = small();
    let at = after(&bytes, "answer");
    put_u32(&mut bytes, at, 13);
    expect_err(&bytes, GgufError::UnknownValueType { key: "answer".into(), ty: 13 }, &["\"answer\"", "type 13"]);
}

#[test]
fn unknown_array_element_type() {
    let key = "tokenizer.ggml.tokens";
    let mut bytes = small();
    let at = value_at(&bytes, key);
    put_u32(&mut bytes, at, 0xdead);
    expect_err(&bytes, GgufError::UnknownArrayElementType { key: key.into(), ty: 0xdead }, &[key, "57005"]);
}

fn nested(depth: u32) -> MetaValue {
    (0..depth).fold(MetaValue::U8(1), |inner, _| MetaValue::Array(vec![inner]))
}

#[test]
fn arrays_nested_too_deep() {
    let ok = GgufWriter::new().meta("deep", nested(MAX_ARRAY_DEPTH)).to_bytes();
    assert_eq!(GgufFile::parse(&ok).unwrap().get("deep"), Some(&nested(MAX_ARRAY_DEPTH)));
    let bytes = GgufWriter::new().meta("deeper", nested(MAX_ARRAY_DEPTH + 1)).to_bytes();
    expect_err(&bytes, GgufError::ArrayTooDeep { key: "deeper".into() }, &["\"deeper\"", "deeper than 8"]);
}

#[test]
fn duplicate_key() {
    let bytes = small_writer().meta("answer", MetaValue::U32(43)).to_bytes();
    expect_err(&bytes, GgufError::DuplicateKey("answer".into()), &["\"answer\" appears twice"]);
}

#[test]
fn bad_alignment() {
    for a in [0u64, 3, 48, MAX_ALIGNMENT * 2, u64::MAX] {
        let bytes = small_writer().meta("general.alignment", MetaValue::U64(a)).to_bytes();
        expect_err(&bytes, GgufError::BadAlignment(a), &[&format!("general.alignment is {a}")]);
    }
    let bytes = small_writer().meta("general.alignment", s("32")).to_bytes();
    expect_err(
        &bytes,
        GgufError::WrongType { key: "general.alignment".into(), expected: "an unsigned integer" },
        &["general.alignment"],
    );
    // A valid alignment moves the data section and the offsets with it.
    let bytes = small_writer().meta("general.alignment", MetaValue::U32(MAX_ALIGNMENT as u32)).to_bytes();
    let f = GgufFile::parse(&bytes).unwrap();
    assert_eq!(f.data_offset % MAX_ALIGNMENT, 0);
    assert!(f.tensors.iter().all(|t| t.offset.is_multiple_of(MAX_ALIGNMENT)));
}

#[test]
fn too_many_dimensions() {
    let bytes = small_writer().tensor_raw("5d", &[1; 5], GgmlType::F32, vec![0; 4]).to_bytes();
    expect_err(&bytes, GgufError::TooManyDims { name: "5d".into(), n_dims: 5 }, &["\"5d\"", "5 dimensions"]);
    let mut bytes = small();
    let at = tensor_fields(&bytes, F32_TENSOR, 2).n_dims;
    put_u32(&mut bytes, at, u32::MAX);
    expect_err(&bytes, GgufError::TooManyDims { name: F32_TENSOR.into(), n_dims: u32::MAX }, &[F32_TENSOR]);
}

#[test]
fn bad_shapes() {
    let bad = |name: &str, dims: &[u64], reason| GgufError::BadShape { name: name.into(), dims: dims.to_vec(), reason };
    let bytes = small_writer().tensor_raw("empty", &[4, 0], GgmlType::F32, vec![]).to_bytes();
    expect_err(&bytes, bad("empty", &[4, 0], "a dimension is zero"), &["\"empty\"", "[4, 0]", "zero"]);

    let bytes = small_writer().tensor_raw("scalar", &[], GgmlType::F32, vec![0; 4]).to_bytes();
    expect_err(&bytes, bad("scalar", &[], "it has no dimensions"), &["\"scalar\"", "no dimensions"]);

    for dims in [[1 << 32, 1 << 32], [u64::MAX, 2], [1 << 49, 1]] {
        let bytes = small_writer().tensor_raw("huge", &dims, GgmlType::F32, vec![0; 4]).to_bytes();
        expect_err(&bytes, bad("huge", &dims, "more than 2^48 elements"), &["\"huge\"", "2^48"]);
    }
}

#[test]
fn unsupported_tensor_types() {
    for (id, name) in [(11, "Q3_K (ggml type id 11)"), (23, "IQ4_XS (ggml type id 23)"), (200, "unknown ggml type id 200")] {
        let mut bytes = small();
        let at = tensor_fields(&bytes, Q4_TENSOR, 2).ty;
        put_u32(&mut bytes, at, id);
        expect_err(&bytes, GgufError::UnsupportedTensorType { name: Q4_TENSOR.into(), ty: name.into() }, &[
            Q4_TENSOR, name,
        ]);
    }
}

#[test]
fn row_not_a_block_multiple() {
    let bytes = small_writer().tensor_raw("ragged", &[48, 2], GgmlType::Q8_0, vec![0; 34 * 3]).to_bytes();
    expect_err(
        &bytes,
        GgufError::RowNotBlockAligned { name: "ragged".into(), row: 48, ty: "Q8_0", block: 32 },
        &["\"ragged\"", "row length 48", "Q8_0 block size 32"],
    );
}

#[test]
fn misaligned_offset() {
    let mut bytes = small();
    let at = tensor_fields(&bytes, Q4_TENSOR, 2).offset;
    let offset = get_u64(&bytes, at) + 2;
    put_u64(&mut bytes, at, offset);
    expect_err(&bytes, GgufError::MisalignedTensor { name: Q4_TENSOR.into(), offset, alignment: 32 }, &[
        Q4_TENSOR,
        &format!("offset {offset}"),
    ]);
}

#[test]
fn tensor_out_of_bounds() {
    let clean = small();
    let data_len = GgufFile::parse(&clean).unwrap().data_section().len() as u64;
    let at = tensor_fields(&clean, Q4_TENSOR, 2).offset;
    let q4_bytes = 2 * 18;
    // Just past the end, and so far out that offset + size overflows.
    for start in [data_len.next_multiple_of(32), u64::MAX - 31] {
        let mut bytes = clean.clone();
        put_u64(&mut bytes, at, start);
        let end = start.saturating_add(q4_bytes);
        expect_err(
            &bytes,
            GgufError::TensorOutOfBounds { name: Q4_TENSOR.into(), start, end, len: data_len },
            &[Q4_TENSOR, &format!("{data_len} bytes of tensor data")],
        );
    }
    // Dimensions that claim more data than the file holds.
    let mut bytes = clean.clone();
    let dim1 = tensor_fields(&bytes, Q4_TENSOR, 2).dims + 8;
    put_u64(&mut bytes, dim1, 1 << 20);
    let start = get_u64(&bytes, at);
    expect_err(
        &bytes,
        GgufError::TensorOutOfBounds { name: Q4_TENSOR.into(), start, end: start + 18 * (1 << 20), len: data_len },
        &[Q4_TENSOR],
    );
}

#[test]
fn overlapping_tensors() {
    let mut bytes = small();
    let at = tensor_fields(&bytes, Q4_TENSOR, 2).offset;
    put_u64(&mut bytes, at, 0);
    let err = GgufFile::parse(&bytes).unwrap_err();
    // Both start at 0; either order names both.
    assert!(matches!(&err, GgufError::OverlappingTensors { a, b }
        if [a.as_str(), b.as_str()] == [F32_TENSOR, Q4_TENSOR] || [a.as_str(), b.as_str()] == [Q4_TENSOR, F32_TENSOR]));
    let msg = err.to_string();
    assert!(msg.contains(F32_TENSOR) && msg.contains(Q4_TENSOR) && msg.contains("overlap"), "{msg}");
}

#[test]
fn duplicate_tensor_names() {
    let bytes = small_writer().tensor_raw(F32_TENSOR, &[1], GgmlType::F32, vec![0; 4]).to_bytes();
    expect_err(&bytes, GgufError::DuplicateTensor(F32_TENSOR.into()), &[F32_TENSOR, "appears twice"]);
}

#[test]
fn non_utf8_strings() {
    let mut bytes = small();
    let key = after(&bytes, "answer");
    bytes[key - 1] = 0xff; // "answe\xff"
    expect_err(
        &bytes,
        GgufError::InvalidUtf8 { what: "metadata key 3".into(), lossy: "answe\u{fffd}".into() },
        &["metadata key 3", "UTF-8", "answe"],
    );

    let mut bytes = small();
    let name = tensor_fields(&bytes, Q4_TENSOR, 2).n_dims;
    bytes[name - 1] = 0xc0;
    expect_err(&bytes, GgufError::InvalidUtf8 { what: "name of tensor 1".into(), lossy: "tensor.q4_\u{fffd}".into() }, &[
        "name of tensor 1",
    ]);

    let mut bytes = small();
    let value = value_at(&bytes, "general.name") + 8;
    bytes[value] = 0x80;
    expect_err(
        &bytes,
        GgufError::InvalidUtf8 { what: "metadata \"general.name\"".into(), lossy: "\u{fffd}ostile".into() },
        &["general.name"],
    );
}

#[test]
fn long_invalid_strings_are_quoted_by_their_start() {
    // A string length forged to run through the rest of the file, into the tensor data.
    let mut bytes = small();
    let at = value_at(&bytes, "general.name");
    let rest = bytes.len() - at - 8;
    put_u64(&mut bytes, at, rest as u64);
    let err = GgufFile::parse(&bytes).unwrap_err();
    let GgufError::InvalidUtf8 { what, lossy } = &err else { panic!("unexpected error {err}") };
    assert_eq!(what, "metadata \"general.name\"");
    assert!(lossy.starts_with("hostile") && lossy.ends_with('…'), "{lossy:?}");
    assert!(lossy.chars().count() <= 65);
    assert!(err.to_string().len() < 400, "{err}");
}
