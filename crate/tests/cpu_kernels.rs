//! Every CPU kernel against the CPU reference (model/reference.rs, gguf/blocks.rs) on seeded
//! random inputs with odd sizes, in the build's SIMD ([`Native`]) and in the scalar twin.
//!
//! Tolerances: a quantized product is checked twice. Against the reference on the same
//! quantized activations (the weights dequantized by gguf/blocks.rs, the activations as the
//! kernel quantized them) only f32 summation order differs: 1e-5 normalised. Against the exact
//! f32 product, the 16-bit activations cost up to 1/65534 of each block's largest value per
//! element: 1e-4 normalised. Float weights meet f32 activations: 1e-5.

mod common;

use common::{odd_k, randn, TYPES};
use radixlm::cpu::attention::{attention, AttentionMask, AttentionShape, IntKv};
use radixlm::cpu::dot::{quantize_q16, takes_q16, Q16Block};
use radixlm::cpu::kv::KvPages;
use radixlm::cpu::matmul::{matmul, CpuWeight, Input};
use radixlm::cpu::simd::{Native, Scalar, Simd};
use radixlm::cpu::threads::{Spawner, Threads};
use radixlm::gguf::blocks::{dequantize, quantize};
use radixlm::gguf::GgmlType;
use radixlm::model::reference;
use radixlm::model::synthetic::SplitMix64;



/// Max |got - want| over max |want|.
fn norm_err(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale
}


struct Case {
    w: CpuWeight,
    /// The weights as gguf/blocks.rs dequantizes them: (N, K).
    w_f32: Vec<f32>,
    x: Vec<f32>,
}

fn case(ty: GgmlType, k: usize, n: usize, t: usize, seed: u64) -> Case {
    let mut rng = SplitMix64(seed);
    let w_raw = randn(&mut rng, n * k);
    let bytes = quantize(ty, &w_raw);
    let mut w_f32 = vec![0f32; n * k];
    dequantize(ty, &bytes, &mut w_f32);
    let x = randn(&mut rng, t * k);
    Case { w: CpuWeight::new(ty, k, n, bytes).expect("a valid weight"), w_f32, x }
}

/// Runs the product of `c` for `t` tokens in `S`, with `threads`; `add` onto `base`.
fn run<S: Simd>(c: &Case, t: usize, threads: &Threads, base: Option<&[f32]>) -> (Vec<f32>, Vec<f32>) {
    let k = c.w.k;
    let mut q16 = vec![Q16Block::default(); t * k / 32];
    if takes_q16(c.w.ty) {
        quantize_q16(&c.x, &mut q16);
    } else {
        q16.clear();
    }
    let input = Input { t, k, x: &c.x, q16: &q16 };
    let mut y = base.map_or_else(|| vec![0f32; t * c.w.n], |b| b.to_vec());
    matmul::<S>(threads, &[&c.w], &input, &mut y, c.w.n, 0, base.is_some());
    // The activations as the kernel saw them.
    let seen: Vec<f32> = if takes_q16(c.w.ty) { q16.iter().flat_map(|b| b.qs.map(|q| q as f32 * b.d)).collect() } else { c.x.clone() };
    (y, seen)
}

#[test]
fn products_of_every_type_match_the_reference_in_simd_and_scalar() {
    let threads = Threads::new(Some(2), &Spawner::Os).unwrap();
    for ty in TYPES {
        let k = odd_k(ty);
        // 1 token (decode), 7 (a four-token group and three alone), 33 rows (a partial block).
        for (t, n) in [(1, 33), (7, 45)] {
            let c = case(ty, k, n, t, 7 + t as u64);
            let exact = reference::matmul(&c.x, &c.w_f32, k, n);
            let (native, seen) = run::<Native>(&c, t, &threads, None);
            let (scalar, _) = run::<Scalar>(&c, t, &threads, None);
            let same_input = reference::matmul(&seen, &c.w_f32, k, n);
            let (e_same, e_exact, e_twin) = (norm_err(&native, &same_input), norm_err(&native, &exact), norm_err(&native, &scalar));
            assert!(e_same < 1e-5, "{ty:?} t={t}: {e_same} from the reference on the kernel's own activations");
            let exact_bound = if takes_q16(ty) { 1e-4 } else { 1e-5 };
            assert!(e_exact < exact_bound, "{ty:?} t={t}: {e_exact} from the exact product (bound {exact_bound})");
            assert!(e_twin < 1e-5, "{ty:?} t={t}: SIMD and scalar differ by {e_twin}");
        }
    }
}

#[test]
fn products_add_onto_the_residual_stream_and_split_rows_across_weights() {
    let threads = Threads::new(Some(2), &Spawner::Os).unwrap();
    let (k, t) = (256, 5);
    let a = case(GgmlType::Q4_K, k, 40, t, 1);
    let mut rng = SplitMix64(9);
    let base = randn(&mut rng, t * a.w.n);
    let (y, seen) = run::<Native>(&a, t, &threads, Some(&base));
    let mut want = reference::matmul(&seen, &a.w_f32, k, a.w.n);
    want.iter_mut().zip(&base).for_each(|(w, b)| *w += b);
    assert!(norm_err(&y, &want) < 1e-5, "residual add: {}", norm_err(&y, &want));

    // Two weights of different types as one product: columns [0, 40) and [40, 40 + 19).
    let b = Case { x: a.x.clone(), ..case(GgmlType::Q6_K, k, 19, t, 2) };
    let mut q16 = vec![Q16Block::default(); t * k / 32];
    quantize_q16(&a.x, &mut q16);
    let input = Input { t, k, x: &a.x, q16: &q16 };
    let cols = a.w.n + b.w.n;
    let mut y = vec![0f32; t * cols];
    matmul::<Native>(&threads, &[&a.w, &b.w], &input, &mut y, cols, 0, false);
    let (ya, yb) = (reference::matmul(&seen, &a.w_f32, k, a.w.n), reference::matmul(&seen, &b.w_f32, k, b.w.n));
    for ti in 0..t {
        let row = &y[ti * cols..(ti + 1) * cols];
        assert!(norm_err(&row[..a.w.n], &ya[ti * a.w.n..(ti + 1) * a.w.n]) < 1e-5);
        assert!(norm_err(&row[a.w.n..], &yb[ti * b.w.n..(ti + 1) * b.w.n]) < 1e-5);
    }
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let c = case(GgmlType::Q4_1, 576, 200, 9, 3);
    let one = run::<Native>(&c, 9, &Threads::new(Some(1), &Spawner::Os).unwrap(), None).0;
    let three = run::<Native>(&c, 9, &Threads::new(Some(3), &Spawner::Os).unwrap(), None).0;
    assert_eq!(one, three);
}

#[test]
fn activation_blocks_keep_codes_within_32767_and_their_sums() {
    let mut rng = SplitMix64(5);
    let mut x = randn(&mut rng, 96);
    x[40] = 1e4; // one outlier owns its block's scale
    x[64..].iter_mut().for_each(|v| *v = 0.0); // an all-zero block
    let mut q = vec![Q16Block::default(); 3];
    quantize_q16(&x, &mut q);
    for b in &q {
        let codes: Vec<i32> = b.qs.iter().map(|&c| c as i32).collect();
        assert!(codes.iter().all(|c| c.abs() <= 32767), "{codes:?}");
        assert!((b.s - b.d * codes.iter().sum::<i32>() as f32).abs() <= 1e-6 * b.s.abs().max(1.0));
    }
    assert_eq!(q[1].qs[8], 32767);
    assert_eq!((q[2].d, q[2].s), (0.0, 0.0));
}

/// The paged KV of `len` positions for one layer in pages scattered over the pool.
fn paged_kv(rng: &mut SplitMix64, kv_dim: usize, page_size: usize, len: usize) -> (KvPages, Vec<u32>, Vec<f32>, Vec<f32>) {
    let n_pages = len.div_ceil(page_size) * 2 + 1;
    let mut kv = KvPages::new(1, kv_dim, page_size, n_pages).unwrap();
    // Every other page, backwards: the page table, not the pool order, gives the positions.
    let pages: Vec<u32> = (0..len.div_ceil(page_size)).map(|i| (n_pages - 1 - 2 * i) as u32).collect();
    let (k, v) = (randn(rng, len * kv_dim), randn(rng, len * kv_dim));
    for p in 0..len {
        kv.write_token(0, &pages, p, &k[p * kv_dim..(p + 1) * kv_dim], &v[p * kv_dim..(p + 1) * kv_dim]);
    }
    let f16 = |x: &[f32]| x.iter().map(|v| half::f16::from_f32(*v).to_f32()).collect::<Vec<_>>();
    (kv, pages, f16(&k), f16(&v))
}

#[test]
fn attention_over_pages_matches_the_reference() {
    // (heads, KV heads, head dim, cached, new tokens, window): decode (over one chunk of keys
    // and over many; two tokens, one of which sees no key of the last chunk), a warm step, a warm step
    // over a long cache, a cold prefill with partial token blocks, a head size no multiple of
    // 8, multi-head attention; sliding windows (Gemma 3's heads) past, across and wider than
    // the step.
    let cases = [
        (9, 3, 64, 40, 1, None),
        (9, 3, 64, 1000, 1, None),
        (9, 3, 64, 300, 2, None),
        (6, 2, 32, 127, 2, None),
        (9, 3, 64, 47, 17, None),
        (9, 3, 64, 1808, 22, None),
        (4, 2, 32, 0, 35, None),
        (6, 2, 20, 15, 3, None),
        (4, 4, 64, 16, 16, None),
        (4, 1, 256, 600, 1, Some(512)),
        (4, 1, 256, 500, 40, Some(512)),
        (6, 2, 32, 20, 35, Some(7)),
        (6, 2, 32, 0, 20, Some(64)),
    ];
    for (h, hkv, d, start, t, window) in cases {
        let mut rng = SplitMix64((h * 100 + start + t) as u64);
        let (kv, pages, k, v) = paged_kv(&mut rng, hkv * d, 16, start + t);
        let q = randn(&mut rng, t * h * d);
        let mask = AttentionMask { window, scale: if window.is_some() { 0.8 } else { 1.0 } / (d as f32).sqrt() };
        let want = reference::attention(&q, &k, &v, h, hkv, d, start, mask);
        for threads in [1, 2] {
            let shape = AttentionShape { n_heads: h, n_kv_heads: hkv, head_dim: d };
            let mut got = vec![0f32; t * h * d];
            attention::<Native>(&Threads::new(Some(threads), &Spawner::Os).unwrap(), &shape, mask, &kv, &mut IntKv::default(), 0, &pages, start, &q, &mut got);
            // Decode's few rows run in f32; a step's tiles take integer products over queries,
            // keys, values and weights of 14 to 15 bits (random scores, as here, weigh keys
            // near-evenly: their rounding errors add up most).
            let bound = if t * h / hkv < 8 { 1e-5 } else { 3e-4 };
            let e = norm_err(&got, &want);
            assert!(e < bound, "h={h} hkv={hkv} d={d} start={start} t={t} window={window:?} threads={threads}: {e}");
            let mut twin = vec![0f32; t * h * d];
            attention::<Scalar>(&Threads::new(Some(threads), &Spawner::Os).unwrap(), &shape, mask, &kv, &mut IntKv::default(), 0, &pages, start, &q, &mut twin);
            assert!(norm_err(&twin, &want) < bound);
        }
    }
}

/// Queries and keys at their largest integers in every dimension with aligned signs (each
/// score's integer sums at their bound) and equal weights over many keys (each block's weight
/// integers at theirs): the tiles' i32 sums must not overflow (the scalar twin's checked
/// arithmetic panics where one would wrap, in the test profile).
#[test]
fn attention_tiles_hold_queries_keys_and_weights_at_their_bounds() {
    let (h, hkv, start, t) = (4, 2, 300usize, 20);
    for d in [32, 64, 128, 256] {
        let kv_dim = hkv * d;
        let len = start + t;
        let mut kv = KvPages::new(1, kv_dim, 16, len.div_ceil(16)).unwrap();
        let pages: Vec<u32> = (0..len.div_ceil(16) as u32).collect();
        // Keys of one value everywhere: every score the same, every weight equal.
        let k = vec![0.5f32; kv_dim];
        let v: Vec<f32> = (0..kv_dim).map(|i| if i % 2 == 0 { -3.0 } else { 3.0 }).collect();
        for p in 0..len {
            kv.write_token(0, &pages, p, &k, &v);
        }
        let q = vec![2.0f32; t * h * d];
        let mask = AttentionMask { window: None, scale: 1.0 / (d as f32).sqrt() };
        let shape = AttentionShape { n_heads: h, n_kv_heads: hkv, head_dim: d };
        let ks = vec![0.5f32; len * kv_dim];
        let vs: Vec<f32> = (0..len).flat_map(|_| v.iter().copied()).collect();
        let want = reference::attention(&q, &ks, &vs, h, hkv, d, start, mask);
        for threads in [1, 2] {
            let mut got = vec![0f32; t * h * d];
            // A sum that wrapped would be off by far more than the integers' rounding.
            attention::<Scalar>(&Threads::new(Some(threads), &Spawner::Os).unwrap(), &shape, mask, &kv, &mut IntKv::default(), 0, &pages, start, &q, &mut got);
            assert!(norm_err(&got, &want) < 3e-4, "d={d} threads={threads}: {}", norm_err(&got, &want));
            attention::<Native>(&Threads::new(Some(threads), &Spawner::Os).unwrap(), &shape, mask, &kv, &mut IntKv::default(), 0, &pages, start, &q, &mut got);
            assert!(norm_err(&got, &want) < 3e-4, "d={d} threads={threads}: {}", norm_err(&got, &want));
        }
    }
}

/// A row's result is the same bits whichever step computes it and on however many threads: a
/// warm request's suffix (the last tokens of a step, over the cached keys) gives each row what
/// the cold prompt's step gave it.
#[test]
fn attention_rows_do_not_depend_on_the_step_split_or_threads() {
    // (heads, KV heads, head dim, tokens, suffix, window); the suffixes of 22 and 20 over
    // several parts of keys, which their steps split over the threads.
    let cases = [(9, 3, 64, 300, 40, None), (4, 1, 32, 200, 24, Some(70)), (6, 2, 32, 150, 12, Some(7)), (9, 3, 64, 700, 22, None), (4, 1, 32, 600, 20, Some(300))];
    for (h, hkv, d, t, suffix, window) in cases {
        let mut rng = SplitMix64((h * 1000 + t) as u64);
        let (kv, pages, _, _) = paged_kv(&mut rng, hkv * d, 16, t);
        let q = randn(&mut rng, t * h * d);
        let mask = AttentionMask { window, scale: 1.0 / (d as f32).sqrt() };
        let shape = AttentionShape { n_heads: h, n_kv_heads: hkv, head_dim: d };
        let run = |threads: usize, start: usize| {
            let mut out = vec![0f32; (t - start) * h * d];
            attention::<Native>(&Threads::new(Some(threads), &Spawner::Os).unwrap(), &shape, mask, &kv, &mut IntKv::default(), 0, &pages, start, &q[start * h * d..], &mut out);
            out
        };
        let cold = run(2, 0);
        assert_eq!(run(1, 0), cold, "h={h} t={t} window={window:?}: one thread vs two");
        let warm = run(2, t - suffix);
        assert!(warm == cold[(t - suffix) * h * d..], "h={h} t={t} suffix={suffix} window={window:?}: the suffix's rows differ from the whole step's");
    }
}

/// The integer keys and values a layer keeps between steps give every step the bits a fresh
/// conversion gives: over a long prompt's chunks, a second sequence sharing the first's pages,
/// a shared page rewritten in place (as a spill restore does) or copied over, decode steps
/// writing into a held page, and sliding windows moving past what is held.
#[test]
fn attention_integer_keys_kept_between_steps_match_a_fresh_conversion() {
    let (h, hkv, d, ps) = (6, 2, 32, 16);
    let shape = AttentionShape { n_heads: h, n_kv_heads: hkv, head_dim: d };
    let mut rng = SplitMix64(77);
    let mut kv = KvPages::new(1, hkv * d, ps, 64).unwrap();
    let threads = Threads::new(Some(2), &Spawner::Os).unwrap();
    // Sequence a on pages 40 down to 19; b shares a's first 10 pages, then its own.
    let a: Vec<u32> = (0..22).map(|i| 40 - i).collect();
    let b: Vec<u32> = a[..10].iter().copied().chain(41..53).collect();
    let mut kept = IntKv::default();
    let mut step = |kv: &mut KvPages, kept: &mut IntKv, pages: &[u32], start: usize, t: usize, window: Option<usize>| {
        for p in start..start + t {
            kv.write_token(0, pages, p, &randn(&mut rng, hkv * d), &randn(&mut rng, hkv * d));
        }
        let q = randn(&mut rng, t * h * d);
        let mask = AttentionMask { window, scale: 1.0 / (d as f32).sqrt() };
        let (mut got, mut want) = (vec![0f32; t * h * d], vec![0f32; t * h * d]);
        attention::<Native>(&threads, &shape, mask, kv, kept, 0, pages, start, &q, &mut got);
        attention::<Native>(&threads, &shape, mask, kv, &mut IntKv::default(), 0, pages, start, &q, &mut want);
        assert!(got == want, "start={start} t={t} window={window:?}: kept keys differ from fresh ones");
    };
    for start in (0..300).step_by(60) {
        step(&mut kv, &mut kept, &a, start, 60, None);
    }
    // Each chunk converted its own keys and those of the page its predecessor ended in (which
    // the chunk wrote into), and b only its own past the shared pages.
    let refilled: usize = (60..300).step_by(60).map(|start| start % ps).sum();
    assert_eq!(kept.conversions(), (300 + refilled) as u64);
    step(&mut kv, &mut kept, &b, 160, 90, None);
    assert_eq!(kept.conversions(), (390 + refilled) as u64);
    // Page 3 of both rewritten in place, then page 5 copied over from another.
    kv.page_slice_mut(0, a[3]).iter_mut().for_each(|x| *x ^= 0x8000);
    step(&mut kv, &mut kept, &b, 250, 20, None);
    kv.copy_page(60, a[5]);
    step(&mut kv, &mut kept, &a, 300, 30, None);
    // Decode steps (one token: f32 rows) write into a held page; the next prefill sees them.
    step(&mut kv, &mut kept, &a, 330, 1, None);
    step(&mut kv, &mut kept, &a, 331, 1, None);
    step(&mut kv, &mut kept, &a, 332, 20, None);
    // A sliding window over a's pages: chunks move its first key past what is held.
    for start in (0..340).step_by(37) {
        step(&mut kv, &mut kept, &a, start, 37.min(340 - start), Some(50));
    }
    // A short sequence again from the start, then a full-attention step over b.
    step(&mut kv, &mut kept, &a, 0, 40, Some(50));
    step(&mut kv, &mut kept, &b, 270, 30, None);
}

#[test]
fn f16_widening_is_exact_for_normal_and_subnormal_halves() {
    let bits: [u16; 8] = [0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x7bff];
    let mut got = [0f32; 8];
    Native::f16_to_f32(&bits, &mut got);
    let want = bits.map(|b| half::f16::from_bits(b).to_f32());
    assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits));
}
