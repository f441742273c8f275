//! `y = x · wᵀ` (or `y += x · wᵀ`) with `w` in its GGUF block format (matmul.wgsl).

use crate::model::config::FfnAct;
use super::wgsl;
use crate::gguf::GgmlType;
use crate::gpu::pipelines::{dispatch_linear, Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::{Gpu, GpuWeight, HiRows, WeightPart};

pub const KERNEL: Kernel = Kernel {
    op: OpKind::Matmul,
    source: wgsl!("matmul.wgsl", "matmul_io.wgsl", "tile_f32.wgsl", "blocks.wgsl", "rope.wgsl", "act.wgsl"),
    slots: &[Slot::Uniform, Slot::Uniform, Slot::Read, Slot::Read, Slot::ReadWrite, Slot::Read, Slot::Read, Slot::ReadWrite, Slot::ReadWrite, Slot::Uniform, Slot::Read],
};

/// The same kernels with `matmul_tiled`'s tiles in f16, for adapters with shader-f16.
pub const KERNEL_F16: Kernel = Kernel { op: OpKind::MatmulF16, source: wgsl!(enable f16; "matmul.wgsl", "matmul_io.wgsl", "tile_f16.wgsl", "blocks.wgsl", "rope.wgsl", "act.wgsl"), slots: KERNEL.slots };

/// The same kernels and `matvec_subgroup`, for native adapters with subgroup operations.
pub const KERNEL_SUBGROUP: Kernel = Kernel { op: OpKind::MatmulSubgroup, source: wgsl!("matmul.wgsl", "matmul_io.wgsl", "tile_f32.wgsl", "blocks.wgsl", "matvec_subgroup.wgsl", "rope.wgsl", "act.wgsl"), slots: KERNEL.slots };

/// One-token products per block type (`BlockLanes`), with matmul.wgsl's bindings and epilogues.
pub const KERNEL_BLOCKS: Kernel = Kernel { op: OpKind::MatvecBlocks, source: wgsl!("matvec_blocks.wgsl", "matmul_io.wgsl", "blocks.wgsl", "rope.wgsl", "act.wgsl"), slots: KERNEL.slots };

/// Steps of at most this many tokens use the one-token-per-thread pipeline.
pub const MATVEC_MAX_T: u32 = 4;
/// Tokens per thread of `matmul_rows` (matmul.wgsl TOKENS): a prefill thread reuses each
/// weight it dequantizes over 4 tokens.
const MATVEC_TOKENS: u32 = 1;
const PREFILL_TOKENS: u32 = 4;
/// Weight rows per thread of `matmul_rows`: each activation it loads serves 8 rows.
const ROWS_PER_THREAD: u32 = 8;
/// Threads per workgroup (matmul.wgsl WG): small, so that even a 576-row decode product
/// spreads over several workgroups (CPU adapters share workgroups, not threads, among their
/// CPU threads).
const WG: u32 = 16;
/// `matvec_wide`: lanes per workgroup and rows per workgroup (matmul.wgsl WIDE_WG, WIDE_ROWS).
const WIDE_ROWS: u32 = 4;
/// `matvec_blocks`: the fewest lanes per workgroup, and weight rows per lane group
/// (matvec_blocks.wgsl MV_WG, MV_ROWS).
const MV_WG: u32 = 64;
const MV_ROWS: u32 = 4;
/// `matmul_tiled`: weight rows and tokens per workgroup (matmul.wgsl TILE_ROWS, TILE_TOKENS).
const TILE_ROWS: u32 = 64;
const TILE_TOKENS: u32 = 64;

/// How products are shaped for the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulShape {
    /// Real GPUs, the default. Decode steps (at most MATVEC_MAX_T tokens) in `matvec_wide`: 64
    /// lanes split each row's weights with coalesced loads and add their sums in workgroup
    /// memory (with `subgroups`, by subgroup operations: `matvec_subgroup`), four rows per
    /// workgroup. Prefill in `matmul_tiled`: tiles of 64 rows × 64 tokens through workgroup
    /// memory, in f16 with `f16_tiles` (tile_f16.wgsl).
    Wide { f16_tiles: bool, subgroups: bool },
    /// `matmul_rows`, each thread computing 8 rows for one token (decode) or four (prefill):
    /// CPU adapters (llvmpipe, SwiftShader), where every non-uniform load is a loop over the
    /// SIMD lanes.
    Rows,
}

impl MatmulShape {
    /// The portable GPU shape: f32 tiles, sums added in workgroup memory.
    pub const WIDE: Self = Self::Wide { f16_tiles: false, subgroups: false };
}

/// x (T, K) f32 · w (N rows of K, any supported type)ᵀ → y (T, N) f32.
pub struct Matmul {
    ty: GgmlType,
    k: usize,
    n: usize,
    hi: Option<HiRows>,
    norm: bool,
    attention_input: bool,
    /// matmul.wgsl `RopeFreqs`: the model's table for attention's input, a placeholder for
    /// other products.
    rope_freqs: wgpu::Buffer,
    shape: MatmulShape,
    matvec: wgpu::ComputePipeline,
    /// One-token steps of the real-GPU shape in `matvec_blocks`, where it has the type.
    matvec1: Option<(wgpu::ComputePipeline, BlockLanes)>,
    prefill: wgpu::ComputePipeline,
}

/// `matvec_blocks`'s lanes per row group (matvec_blocks.wgsl BLOCK_LANES) for a weight of `ty`
/// with rows of `k`: as many as the row has units (32-weight blocks; 64-weight quarters of
/// 256-weight blocks), a power of two from 4 to 256, so that a lane walks one or two units
/// and a token's product is spread over as many lanes as it has units. None for the types
/// it has no loop for, and for rows that are not whole words (an odd number of 18-, 22- or
/// 34-byte blocks), which matvec_wide reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLanes(u32);

/// Whether one product can read a weight whose rows from `hi.first_row` on are of `hi.ty` and
/// those before of `ty` (matmul_io.wgsl HI_ROW): the boundary a multiple of 64, so every
/// workgroup, tile, thread and lane group of every shape reads one type (and a head's rows are on
/// one side), and the same one-token kernel for both types.
pub fn reads_two_types(ty: GgmlType, k: usize, hi: HiRows) -> bool {
    hi.first_row > 0 && hi.first_row.is_multiple_of(TILE_ROWS as usize) && BlockLanes::for_weight(ty, k) == BlockLanes::for_weight(hi.ty, k)
}

impl BlockLanes {
    pub fn for_weight(ty: GgmlType, k: usize) -> Option<Self> {
        let unit = match ty {
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q8_0 => 32,
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => 64,
            _ => return None,
        };
        if k % unit != 0 || ty.row_bytes(k).is_none_or(|b| b % 4 != 0) {
            return None;
        }
        let units = (k / unit) as u32;
        Some(Self((1u32 << units.max(1).ilog2()).clamp(4, 256)))
    }

    /// Lanes per workgroup (matvec_blocks.wgsl MV_WG).
    fn workgroup_lanes(self) -> u32 {
        self.0.max(MV_WG)
    }

    /// Workgroups for `rows` weight rows.
    fn workgroups(self, rows: u32) -> u32 {
        rows.div_ceil(MV_ROWS * (self.workgroup_lanes() / self.0))
    }
}

/// Bind groups for one (step, x, w, y), one per weight part.
pub struct MatmulBinding {
    parts: Vec<(wgpu::BindGroup, u32)>,
}

impl MatmulBinding {
    /// Dispatches one product makes: one per weight part.
    pub fn dispatches(&self) -> u32 {
        self.parts.len() as u32
    }
}

/// A product fused with its neighbours (matmul.wgsl GATED, ATTN_IN).
#[derive(Debug, Clone, Copy)]
enum Fused<'a> {
    No,
    Gated(FfnAct),
    AttentionInput(AttentionInput<'a>),
}

/// Where an attention-input product's rows go (matmul.wgsl ATTN_IN): its rows are rows
/// `first_row ..` of the layer's whole q/k/v weight (`n_q` rows of q in heads of `head_dim`,
/// then `n_kv` of k and `n_kv` of v); q and k are rotated by RoPE, pair i of a head by
/// pos · `rope_freqs[i]` (model/rope.rs; with `rope_neox` pair i is rows i and i + D/2, and
/// q and k come out in the order that makes pairs adjacent: matmul.wgsl ROPE_NEOX), after
/// adding the biases when `bias`; q is written to its buffer and k and v to the KV pages of
/// `page_size` tokens. With `qk_norm`, q and k are written as they are (T, n_q + n_kv) to the
/// buffer bound for q, for `QkNorm` to normalise, rotate and write (v still goes to its pages).
#[derive(Debug, Clone, Copy)]
pub struct AttentionInput<'a> {
    pub n_q: usize,
    pub n_kv: usize,
    pub first_row: usize,
    pub head_dim: usize,
    pub rope_freqs: &'a RopeTable,
    pub rope_neox: bool,
    pub bias: bool,
    pub qk_norm: bool,
    pub page_size: usize,
}

/// Pairs of a head matmul.wgsl `RopeFreqs` holds: head dimensions up to 256.
const MAX_ROPE_PAIRS: usize = super::attention_paged::MAX_HEAD_DIM / 2;

/// A model's RoPE frequency per head pair (model/rope.rs) as matmul.wgsl `RopeFreqs`: one
/// uniform its attention-input products share.
#[derive(Debug)]
pub struct RopeTable(wgpu::Buffer);

impl RopeTable {
    pub fn new(gpu: &Gpu, freqs: &[f32]) -> Self {
        let mut f = [0f32; MAX_ROPE_PAIRS];
        f.iter_mut().zip(freqs).for_each(|(f, v)| *f = *v);
        Self(gpu.uniform("rope_freqs", &f))
    }

    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.0
    }
}

/// blocks.wgsl `Part`: the rows of the weight one buffer holds.
#[repr(C)]
#[derive(bytemuck::Pod, bytemuck::Zeroable, Clone, Copy)]
struct PartParams {
    first_row: u32,
    rows: u32,
    _pad: [u32; 2],
}

/// The uniform describing `part` to the kernels that read weights.
pub(super) fn part_params(gpu: &Gpu, part: &WeightPart) -> wgpu::Buffer {
    gpu.uniform("weight part", &PartParams { first_row: part.first_row as u32, rows: part.rows as u32, _pad: [0; 2] })
}

impl Matmul {
    /// For a weight of `ty` with `n` rows of `k`; `accumulate` adds into y instead of writing.
    /// In the adapter's shape.
    pub fn new(gpu: &Gpu, ty: GgmlType, k: usize, n: usize, accumulate: bool) -> Self {
        Self::with_shape(gpu, super::KernelShapes::for_adapter(gpu).matmul, ty, k, n, accumulate)
    }

    /// `new` in `shape`, whatever the adapter (tests run both).
    pub fn with_shape(gpu: &Gpu, shape: MatmulShape, ty: GgmlType, k: usize, n: usize, accumulate: bool) -> Self {
        Self::build(gpu, shape, ty, k, n, accumulate, None, Fused::No, None)
    }

    /// y = rmsnorm(x)·wᵀ: the RMSNorm with epsilon `eps` (and the weights `bind_normed` binds)
    /// as the product's prologue, in place of a normalisation pass and its copy of x.
    pub fn with_norm(gpu: &Gpu, shape: MatmulShape, ty: GgmlType, k: usize, n: usize, accumulate: bool, eps: f32) -> Self {
        Self::build(gpu, shape, ty, k, n, accumulate, Some(eps), Fused::No, None)
    }

    /// The FFN's first half in one product: y (T, f) = act(rmsnorm(x)·gateᵀ) ⊙ (rmsnorm(x)·upᵀ)
    /// from one weight of 2·`f` rows (the gate's, then up's: `ffn_gate_up`), bound with
    /// `bind_normed`; act·mul is its epilogue.
    #[allow(clippy::too_many_arguments)]
    pub fn gated(gpu: &Gpu, shape: MatmulShape, ty: GgmlType, k: usize, f: usize, eps: f32, act: FfnAct) -> Self {
        Self::build(gpu, shape, ty, k, 2 * f, false, Some(eps), Fused::Gated(act), None)
    }

    /// Attention's input, rmsnorm(x)·wᵀ for `w` (the whole q/k/v weight, of one type or two, or
    /// q, k or v alone, as `at` says), with RoPE and the f16 KV-cache write as its epilogue;
    /// bound with `bind_attention_input`.
    pub fn attention_input(gpu: &Gpu, shape: MatmulShape, w: &GpuWeight, eps: f32, at: AttentionInput<'_>) -> Self {
        Self::build(gpu, shape, w.ty, w.k, w.n, false, Some(eps), Fused::AttentionInput(at), w.hi)
    }

    #[allow(clippy::too_many_arguments)]
    fn build(gpu: &Gpu, shape: MatmulShape, ty: GgmlType, k: usize, n: usize, accumulate: bool, norm_eps: Option<f32>, fused: Fused<'_>, hi: Option<HiRows>) -> Self {
        let gated = matches!(fused, Fused::Gated(_));
        let gelu = matches!(fused, Fused::Gated(FfnAct::GeluTanh));
        let at = match fused {
            Fused::AttentionInput(at) => Some(at),
            _ => None,
        };
        // Each pipeline from the kernel (module) its entry point lives in; matmul_io.wgsl's
        // constants, then the kernel's own.
        let key = |kernel: &Kernel, entry| {
            PipelineKey::new(kernel.op, entry)
                .with("DTYPE", ty.id())
                .with("DTYPE_HI", hi.map_or(ty, |h| h.ty).id())
                .with("HI_ROW", hi.map_or(0, |h| h.first_row) as u32)
                .with("K", k as u32)
                .with("N", if gated { n / 2 } else { n } as u32)
                .with("ACCUMULATE", accumulate as u32)
                .with("NORM", norm_eps.is_some() as u32)
                .with("EPS", norm_eps.unwrap_or(1e-5))
                .with("GATED", gated as u32)
                .with("GELU", gelu as u32)
                .with("ATTN_IN", at.is_some() as u32)
                .with("N_Q", at.map_or(0, |a| a.n_q) as u32)
                .with("N_KV", at.map_or(0, |a| a.n_kv) as u32)
                .with("QKV_FIRST", at.map_or(0, |a| a.first_row) as u32)
                .with("HEAD_DIM", at.map_or(64, |a| a.head_dim) as u32)
                .with("PAGE", at.map_or(16, |a| a.page_size) as u32)
                .with("ROPE_NEOX", at.is_some_and(|a| a.rope_neox) as u32)
                .with("BIAS", at.is_some_and(|a| a.bias) as u32)
                .with("QK_NORM", at.is_some_and(|a| a.qk_norm) as u32)
        };
        let pipeline = |kernel: &Kernel, entry, tokens: u32| gpu.pipeline(kernel, key(kernel, entry).with("TOKENS", tokens));
        let matvec = match shape {
            MatmulShape::Wide { subgroups: true, .. } => pipeline(&KERNEL_SUBGROUP, "matvec_subgroup", MATVEC_TOKENS),
            MatmulShape::Wide { subgroups: false, .. } => pipeline(&KERNEL, "matvec_wide", MATVEC_TOKENS),
            MatmulShape::Rows => pipeline(&KERNEL, "matmul_rows", MATVEC_TOKENS),
        };
        let matvec1 = match shape {
            MatmulShape::Wide { .. } => BlockLanes::for_weight(ty, k).map(|lanes| {
                let key = key(&KERNEL_BLOCKS, "matvec_blocks").with("BLOCK_LANES", lanes.0).with("MV_WG", lanes.workgroup_lanes());
                (gpu.pipeline(&KERNEL_BLOCKS, key), lanes)
            }),
            MatmulShape::Rows => None,
        };
        let prefill = match shape {
            MatmulShape::Wide { f16_tiles: false, .. } => pipeline(&KERNEL, "matmul_tiled", PREFILL_TOKENS),
            MatmulShape::Wide { f16_tiles: true, .. } => pipeline(&KERNEL_F16, "matmul_tiled", PREFILL_TOKENS),
            MatmulShape::Rows => pipeline(&KERNEL, "matmul_rows", PREFILL_TOKENS),
        };
        let rope_freqs = match at {
            Some(at) => at.rope_freqs.0.clone(),
            None => gpu.placeholder("matmul.rope_freqs", (MAX_ROPE_PAIRS * 4) as u64, Slot::Uniform),
        };
        Self { ty, k, n, hi, norm: norm_eps.is_some(), attention_input: at.is_some(), rope_freqs, shape, matvec, matvec1, prefill }
    }

    /// What the KV-cache bindings hold for products other than attention's input: two buffers,
    /// since WebGPU forbids binding one buffer to two writable bindings of a dispatch.
    fn unused_caches(gpu: &Gpu) -> [wgpu::Buffer; 2] {
        [gpu.placeholder("matmul.k_cache", 4, Slot::ReadWrite), gpu.placeholder("matmul.v_cache", 4, Slot::ReadWrite)]
    }

    /// Binds `step` (StepParams), `x` (T, K) f32, the weight and `y` (T, N) f32.
    pub fn bind(&self, gpu: &Gpu, step: &wgpu::Buffer, x: &wgpu::Buffer, w: &GpuWeight, y: &wgpu::Buffer) -> MatmulBinding {
        assert!(!self.norm, "a normalising matmul is bound with bind_normed");
        // The kernel reads no norm weights without NORM, nor a page table without ATTN_IN: x
        // stands in for them.
        let [kc, vc] = &Self::unused_caches(gpu);
        self.bind_parts(gpu, step, x, x, w, y, [x, kc, vc], x)
    }

    /// Binds as `bind`, with the RMSNorm's weights `norm_w` (K) f32, for a `with_norm` product.
    pub fn bind_normed(&self, gpu: &Gpu, step: &wgpu::Buffer, x: &wgpu::Buffer, norm_w: &wgpu::Buffer, w: &GpuWeight, y: &wgpu::Buffer) -> MatmulBinding {
        assert!(self.norm && !self.attention_input, "bind_normed on a matmul built without a norm, or for attention's input");
        let [kc, vc] = &Self::unused_caches(gpu);
        self.bind_parts(gpu, step, x, norm_w, w, y, [x, kc, vc], x)
    }

    /// Binds an `attention_input` product: `q` (T, n_q) f32 for the rotated queries, the
    /// sequence's `page_table` (pages) u32, the layer's caches (pages, page_size, n_kv / 2)
    /// u32 of f16 pairs and, for a product built with `bias`, the layer's q, k and v biases
    /// one after another (n_q + 2·n_kv) f32.
    #[allow(clippy::too_many_arguments)]
    pub fn bind_attention_input(
        &self,
        gpu: &Gpu,
        step: &wgpu::Buffer,
        x: &wgpu::Buffer,
        norm_w: &wgpu::Buffer,
        w: &GpuWeight,
        q: &wgpu::Buffer,
        page_table: &wgpu::Buffer,
        [k_cache, v_cache]: [&wgpu::Buffer; 2],
        bias: Option<&wgpu::Buffer>,
    ) -> MatmulBinding {
        assert!(self.attention_input, "bind_attention_input on a matmul not built for attention's input");
        self.bind_parts(gpu, step, x, norm_w, w, q, [page_table, k_cache, v_cache], bias.unwrap_or(x))
    }

    #[allow(clippy::too_many_arguments)]
    fn bind_parts(&self, gpu: &Gpu, step: &wgpu::Buffer, x: &wgpu::Buffer, norm_w: &wgpu::Buffer, w: &GpuWeight, y: &wgpu::Buffer, [pages, k_cache, v_cache]: [&wgpu::Buffer; 3], bias: &wgpu::Buffer) -> MatmulBinding {
        assert!(w.ty == self.ty && w.k == self.k && w.n == self.n && w.hi == self.hi, "matmul built for {:?} ({}, {}, {:?}) bound to {:?} ({}, {}, {:?})", self.ty, self.n, self.k, self.hi, w.ty, w.n, w.k, w.hi);
        let parts = w
            .parts
            .iter()
            .map(|p| {
                let params = part_params(gpu, p);
                (gpu.bind_group("matmul", KERNEL.slots, &[step, &params, x, &p.buffer, y, norm_w, pages, k_cache, v_cache, &self.rope_freqs, bias]), p.rows as u32)
            })
            .collect();
        MatmulBinding { parts }
    }

    /// Encodes the product for the first `n_tokens` rows of x (must equal the step's n_tokens).
    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &MatmulBinding, n_tokens: u32) {
        if n_tokens == 0 {
            return;
        }
        if let (1, Some((pipeline, lanes))) = (n_tokens, &self.matvec1) {
            pass.set_pipeline(pipeline);
            for (group, rows) in &binding.parts {
                pass.set_bind_group(0, group, &[]);
                dispatch_linear(pass, lanes.workgroups(*rows));
            }
            return;
        }
        let decode = n_tokens <= MATVEC_MAX_T;
        let (pipeline, tokens) = if decode { (&self.matvec, MATVEC_TOKENS) } else { (&self.prefill, PREFILL_TOKENS) };
        pass.set_pipeline(pipeline);
        for (group, rows) in &binding.parts {
            pass.set_bind_group(0, group, &[]);
            if decode && self.shape != MatmulShape::Rows {
                // Every token of the step in each workgroup; a 128k-row LM head is 32k workgroups.
                dispatch_linear(pass, rows.div_ceil(WIDE_ROWS));
            } else if self.shape != MatmulShape::Rows {
                pass.dispatch_workgroups(rows.div_ceil(TILE_ROWS), n_tokens.div_ceil(TILE_TOKENS), 1);
            } else {
                pass.dispatch_workgroups(rows.div_ceil(ROWS_PER_THREAD * WG), n_tokens.div_ceil(tokens), 1);
            }
        }
    }
}
