//! Property tests over mutated real headers: the header of a synthetic model and of the real
//! SmolLM2 file take random byte flips, extreme values written over their counts, lengths,
//! type ids, dimensions and offsets, copied and shifted ranges, and truncation. Parsing must
//! never panic; when it succeeds every tensor view must lie inside the file, small tensors must
//! dequantize, and `Config::from_gguf` must not panic either.
//!
//! Mutations stay inside the header (the bytes before the data section), so one copy of each
//! file serves every case and only its header is restored between cases.

use std::cell::RefCell;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use radixlm::gguf::reader::{MAX_ARRAY_LEN, MAX_METADATA_ENTRIES, MAX_STRING_LEN, MAX_TENSORS};
use radixlm::gguf::{GgmlType, GgufFile, MetaValue};
use radixlm::model::config::Config;
use radixlm::model::synthetic::SyntheticSpec;

const REAL_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/SmolLM2-135M-Instruct.Q4_1.gguf");

fn real_model() -> Vec<u8> {
    std::fs::read(REAL_MODEL).unwrap_or_else(|e| panic!("the real model must be at {REAL_MODEL}: {e}"))
}

#[test]
fn real_model_parses_with_known_metadata() {
    let bytes = real_model();
    let f = GgufFile::parse(&bytes).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.tensors.len(), 272);
    assert_eq!(f.alignment, 32);
    assert_eq!(f.require_str("general.architecture").unwrap(), "llama");
    for (key, want) in [
        ("llama.block_count", 30),
        ("llama.embedding_length", 576),
        ("llama.feed_forward_length", 1536),
        ("llama.attention.head_count", 9),
        ("llama.attention.head_count_kv", 3),
        ("llama.context_length", 8192),
        ("llama.vocab_size", 49152),
    ] {
        assert_eq!(f.require_u64(key).unwrap(), want, "{key}");
    }
    assert_eq!(f.require_f64("llama.rope.freq_base").unwrap(), 100_000.0);
    let tokens = f.get("tokenizer.ggml.tokens").and_then(MetaValue::as_array).unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(tokens[0], MetaValue::String("<|endoftext|>".into()));

    let cfg = Config::from_gguf(&f).unwrap();
    assert_eq!(
        (cfg.n_layers, cfg.n_embd, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.vocab_size),
        (30, 576, 9, 3, 64, 49152)
    );
    assert_eq!(cfg.rope_base, 100_000.0);
    assert!(cfg.tied_embeddings);

    // The views are zero-copy slices of the file, laid end to end in the data section.
    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.info.dims, [576, 49152]);
    assert_eq!(embd.info.ty, GgmlType::Q8_0);
    assert_eq!(embd.info.n_bytes, 576 / 32 * 34 * 49152);
    let start = (f.data_offset + embd.info.offset) as usize;
    assert!(std::ptr::eq(embd.data, &bytes[start..start + embd.data.len()]));
    let used: u64 = f.tensors.iter().map(|t| t.n_bytes).sum();
    assert!(used <= f.data_section().len() as u64);
    assert!(f.tensors.iter().filter(|t| t.name.ends_with("attn_q.weight")).all(|t| t.ty == GgmlType::Q4_1));
}

/// Offsets and widths (4 or 8 bytes) of the structural fields of a valid file: counts, key and
/// string lengths, type ids, array element types and lengths, tensor dimension counts,
/// dimensions, types and offsets. Only the first few elements of each array are listed.
fn structural_fields(b: &[u8]) -> Vec<(usize, usize)> {
    let u32_at = |p: usize| u32::from_le_bytes(b[p..p + 4].try_into().unwrap());
    let u64_at = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().unwrap()) as usize;
    fn skip(b: &[u8], mut pos: usize, ty: u32, out: &mut Vec<(usize, usize)>, record: bool) -> usize {
        let u64_at = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().unwrap()) as usize;
        match ty {
            0 | 1 | 7 => pos + 1,
            2 | 3 => pos + 2,
            4..=6 => pos + 4,
            10..=12 => pos + 8,
            8 => {
                if record {
                    out.push((pos, 8));
                }
                pos + 8 + u64_at(pos)
            }
            9 => {
                let elem = u32::from_le_bytes(b[pos..pos + 4].try_into().unwrap());
                let len = u64_at(pos + 4);
                if record {
                    out.extend([(pos, 4), (pos + 4, 8)]);
                }
                pos += 12;
                for i in 0..len {
                    pos = skip(b, pos, elem, out, record && i < 4);
                }
                pos
            }
            _ => unreachable!("the unmutated file is valid"),
        }
    }
    let mut out = vec![(4, 4), (8, 8), (16, 8)];
    let (n_tensors, n_kv) = (u64_at(8), u64_at(16));
    let mut pos = 24;
    for _ in 0..n_kv {
        out.push((pos, 8));
        pos += 8 + u64_at(pos);
        out.push((pos, 4));
        let ty = u32_at(pos);
        pos = skip(b, pos + 4, ty, &mut out, true);
    }
    for _ in 0..n_tensors {
        out.push((pos, 8));
        pos += 8 + u64_at(pos);
        let n_dims = u32_at(pos) as usize;
        out.push((pos, 4));
        pos += 4;
        out.extend((0..n_dims).map(|d| (pos + 8 * d, 8)));
        pos += 8 * n_dims;
        out.extend([(pos, 4), (pos + 4, 8)]);
        pos += 12;
    }
    out
}

#[derive(Debug, Clone)]
enum Mutation {
    FlipBit { at: Index, bit: u8 },
    SetByte { at: Index, value: u8 },
    /// Writes `value` over a structural field, truncated to the field's width.
    Field { field: Index, value: u64 },
    /// Copies `len` header bytes from one place over another.
    Splice { from: Index, to: Index, len: usize },
    /// Inserts (`by > 0`, as 0xAA bytes) or deletes bytes at `at`, shifting the rest of the
    /// header; the data section stays where it was.
    Shift { at: Index, by: i32 },
}

/// Values that sit on the edges of what the reader checks: zero, one, 32-bit and 64-bit
/// extremes, the caps and one past them, small ids.
fn extreme() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![
            0,
            1,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            i64::MAX as u64,
            1 << 63,
            u64::MAX,
            u64::MAX - 31,
            MAX_STRING_LEN,
            MAX_STRING_LEN + 1,
            MAX_ARRAY_LEN,
            MAX_ARRAY_LEN + 1,
            MAX_METADATA_ENTRIES + 1,
            MAX_TENSORS + 1,
            1 << 48,
        ]),
        0..64u64,
        any::<u64>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => (any::<Index>(), 0..8u8).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(at, value)| Mutation::SetByte { at, value }),
        4 => (any::<Index>(), extreme()).prop_map(|(field, value)| Mutation::Field { field, value }),
        1 => (any::<Index>(), any::<Index>(), 1..64usize).prop_map(|(from, to, len)| Mutation::Splice { from, to, len }),
        1 => (any::<Index>(), -64..64i32).prop_map(|(at, by)| Mutation::Shift { at, by }),
    ]
}

/// A case: a few mutations, then perhaps a cut anywhere in the file.
fn case() -> impl Strategy<Value = (Vec<Mutation>, Option<Index>)> {
    (prop::collection::vec(mutation(), 1..5), prop::option::weighted(0.2, any::<Index>()))
}

fn apply(m: &Mutation, bytes: &mut [u8], header: usize, fields: &[(usize, usize)]) {
    match m {
        Mutation::FlipBit { at, bit } => bytes[at.index(header)] ^= 1 << bit,
        Mutation::SetByte { at, value } => bytes[at.index(header)] = *value,
        Mutation::Field { field, value } => {
            let (at, width) = fields[field.index(fields.len())];
            bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        }
        Mutation::Splice { from, to, len } => {
            let (from, to) = (from.index(header), to.index(header));
            let len = (*len).min(header - from).min(header - to);
            bytes.copy_within(from..from + len, to);
        }
        Mutation::Shift { at, by } => {
            let at = at.index(header);
            let n = (by.unsigned_abs() as usize).min(header - at);
            if *by > 0 {
                bytes.copy_within(at..header - n, at + n);
                bytes[at..at + n].fill(0xaa);
            } else {
                bytes.copy_within(at + n..header, at);
                bytes[header - n..header].fill(0);
            }
        }
    }
}

/// What must hold for any input: no panic (proptest reports one as a failure), and a
/// successful parse yields in-bounds views and a configuration check that does not panic.
fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    let f = match GgufFile::parse(bytes) {
        Ok(f) => f,
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            return Ok(());
        }
    };
    let file = bytes.as_ptr_range();
    for t in &f.tensors {
        let end = f.data_offset.checked_add(t.offset).and_then(|s| s.checked_add(t.n_bytes));
        prop_assert!(end.is_some_and(|e| e <= bytes.len() as u64), "tensor {:?} ends past the file", t.name);
        let view = f.view(t);
        prop_assert_eq!(view.data.len() as u64, t.n_bytes);
        let data = view.data.as_ptr_range();
        prop_assert!(file.start <= data.start && data.end <= file.end, "tensor {:?} is not in the file", t.name);
        if t.n_bytes <= 1 << 12 {
            prop_assert_eq!(view.to_f32().len() as u64, t.n_elements());
        }
    }
    let _ = Config::from_gguf(&f);
    Ok(())
}

/// Runs `cases` mutated copies of `original` through `check` (`PROPTEST_CASES` overrides the
/// count, for longer runs than CI's bounded one).
fn fuzz(original: &[u8], cases: u32) {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(cases);
    let header = GgufFile::parse(original).unwrap().data_offset as usize;
    let fields = structural_fields(original);
    let work = RefCell::new(original.to_vec());
    let config = ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() };
    let result = TestRunner::new(config).run(&case(), |(mutations, cut)| {
        let mut bytes = work.borrow_mut();
        for m in &mutations {
            apply(m, &mut bytes, header, &fields);
        }
        let len = cut.map_or(bytes.len(), |c| c.index(bytes.len() + 1));
        let outcome = check(&bytes[..len]);
        bytes[..header].copy_from_slice(&original[..header]);
        outcome
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn structural_fields_are_found() {
    // The walker must agree with the reader, or the field mutations would hit the wrong bytes.
    let bytes = SyntheticSpec::tiny().to_gguf();
    let f = GgufFile::parse(&bytes).unwrap();
    let fields = structural_fields(&bytes);
    let last = fields.last().unwrap();
    assert_eq!(f.data_offset, (last.0 + last.1).next_multiple_of(32) as u64);
    assert_eq!(fields.iter().filter(|&&(_, w)| w == 8).count() - 2, {
        // Counts, key lengths, string lengths, array lengths (and the string lengths of an
        // array's first four elements, all the walker records), names, dimensions, offsets.
        let strings = f.metadata.values().filter(|v| v.as_str().is_some()).count();
        let arrays: usize = f
            .metadata
            .values()
            .filter_map(|v| v.as_array())
            .map(|a| 1 + a.iter().take(4).filter(|e| e.as_str().is_some()).count())
            .sum();
        f.metadata.len() + strings + arrays + f.tensors.iter().map(|t| 2 + t.dims.len()).sum::<usize>()
    });
}

#[test]
fn fuzz_synthetic_header() {
    fuzz(&SyntheticSpec::tiny().to_gguf(), 2000);
}

#[test]
fn fuzz_real_header() {
    // A full parse of the real header (1.7 MB, 150k metadata values) takes tens of
    // milliseconds: fewer cases keep the run bounded.
    fuzz(&real_model(), 200);
}
