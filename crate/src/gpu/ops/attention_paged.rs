//! Causal GQA attention over the paged f16 KV cache (attention_paged.wgsl), within a sliding
//! window where the layer has one (its keys start at the window's first). Split over the keys:
//! `partial` per (split, KV head, token), `decode` for a single token, or `lanes` on CPU
//! adapters, then `combine` per (head, token) unless the step's keys are one split. On CPU
//! adapters a step of several tokens runs as two products instead
//! (`rows_scores`, `rows_softmax`, `rows_pv`), its score matrix in the scratch buffer.

use super::wgsl;
use crate::gpu::pipelines::{dispatch_linear, Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;

pub const KERNEL: Kernel = Kernel {
    op: OpKind::AttentionPaged,
    source: wgsl!("attention_paged.wgsl"),
    slots: &[Slot::Uniform, Slot::Uniform, Slot::Read, Slot::Read, Slot::Read, Slot::Read, Slot::ReadWrite, Slot::ReadWrite],
};

/// Largest head dimension the kernel holds (attention_paged.wgsl MAX_D).
pub const MAX_HEAD_DIM: usize = 256;
/// Most query heads per KV head (attention_paged.wgsl MAX_G).
pub const MAX_GROUP: usize = 8;
/// Refuses, by name, the heads the kernel cannot serve (at load, not at its first dispatch).
pub fn check_shape(cfg: &crate::model::Config) -> Result<(), crate::model::ModelError> {
    let bad = |m: String| Err(crate::model::ModelError::BadConfig(m));
    if cfg.head_dim > MAX_HEAD_DIM {
        return bad(format!("head dimension {} is over the WebGPU attention kernel's {MAX_HEAD_DIM}", cfg.head_dim));
    }
    let group = cfg.n_heads / cfg.n_kv_heads;
    if group > MAX_GROUP {
        return bad(format!(
            "{group} query heads per KV head ({} heads over {} KV heads): the WebGPU attention kernel serves at most {MAX_GROUP}",
            cfg.n_heads, cfg.n_kv_heads
        ));
    }
    Ok(())
}

/// Workgroup words for a tile of keys or values (attention_paged.wgsl TILE_WORDS), and the most
/// keys in a tile (MAX_TK).
const TILE_WORDS: u32 = 1040;
const MAX_TILE_KEYS: u32 = 32;
/// `partial`'s (token, query head) rows a workgroup (attention_paged.wgsl MAX_ROWS), its score
/// words a tile (PROB_WORDS) and its query words (MAX_G · MAX_D).
const MAX_BLOCK_ROWS: u32 = 32;
const PROB_WORDS: u32 = 768;
const QUERY_WORDS: u32 = (MAX_GROUP * MAX_HEAD_DIM) as u32;
/// Workgroups a step should give the GPU at least, so that one decoded token over a long
/// prefix fills a phone's or a desktop's GPU; splits stop at two tiles of keys each.
const TARGET_WORKGROUPS: u32 = 256;
const MIN_TILES_PER_SPLIT: u32 = 2;
/// Splits per (token, head) the scratch buffer has room for when a step is a single token.
const SPLITS_AT_ONE_TOKEN: u32 = 64;
/// `decode`: the most keys of a split (attention_paged.wgsl DEC_KEYS), and the fewest worth a
/// workgroup when a token's keys are split to fill the GPU. A token with at most
/// DECODE_SPLIT_KEYS keys is one split, with no `combine`; one with more than SPLITS_AT_ONE_TOKEN
/// such splits runs `partial`.
const DECODE_SPLIT_KEYS: u32 = 128;
const MIN_DECODE_SPLIT_KEYS: u32 = 32;
/// The CPU variant: lanes per workgroup (attention_paged.wgsl LANES), lanes a step should have
/// (a few workgroups per CPU thread) and the fewest keys a lane walks.
const LANES: u32 = 16;
const TARGET_LANES: u32 = 128;
const MIN_KEYS_PER_LANE: u32 = 64;
/// The rows variant: lanes per workgroup (attention_paged.wgsl ROW_LANES), the fewest tokens a
/// step needs to take it, and the most scratch its score matrix may use (a step whose matrix
/// is larger takes `lanes`).
const ROW_LANES: u32 = 16;
const MIN_ROWS_TOKENS: u32 = 2;
const MAX_ROWS_SCRATCH_BYTES: u64 = 32 << 20;

/// How the kernel is shaped for the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionShape {
    /// Workgroups of 64 lanes over tiles of keys in workgroup memory: real GPUs, the default.
    Tiled,
    /// One lane per (token, head, split), no workgroup memory or barriers: CPU adapters
    /// (llvmpipe, SwiftShader), where a barrier costs more than a tile's arithmetic. Steps of
    /// several tokens run as two products, whose lanes share each key among 4 queries.
    Lanes,
}

/// attention_paged.wgsl `SplitParams`: how a step's keys are split.
#[repr(C)]
#[derive(bytemuck::Pod, bytemuck::Zeroable, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitParams {
    pub keys_per_split: u32,
    pub splits: u32,
    /// The key split 0 starts at: the step's first position's window start (0 without one).
    pub first: u32,
    pub _pad: u32,
}

/// How a step runs: its keys split over workgroups (the values of the bound `split` uniform),
/// or as two products over its score matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionPlan {
    /// A step's splits by `partial` (or `lanes`), `combine`d when there are several.
    Splits(SplitParams),
    /// A single token's splits by `decode`, `combine`d when there are several.
    Decode(SplitParams),
    Rows,
}

impl AttentionPlan {
    /// What the `split` uniform holds for this step (unread by the rows kernels).
    pub fn split_params(&self) -> SplitParams {
        match self {
            Self::Splits(split) | Self::Decode(split) => *split,
            Self::Rows => SplitParams::default(),
        }
    }

    pub fn dispatches(&self) -> u32 {
        match self {
            Self::Splits(split) | Self::Decode(split) => 1 + u32::from(split.splits > 1),
            Self::Rows => 3,
        }
    }
}

/// The rows kernels' pipelines.
struct RowsKernels {
    /// Scratch bytes the score matrix may use.
    scratch_bytes: u64,
    scores: wgpu::ComputePipeline,
    softmax: wgpu::ComputePipeline,
    pv: wgpu::ComputePipeline,
}

/// Tokens per workgroup of `partial` (attention_paged.wgsl TB): as many as workgroup memory has
/// rows of (token, query head) for, their rows rounded up to whole quads, so that the smaller
/// the head, the more tokens share each tile of keys and values (SmolLM2's heads of 64 in groups
/// of 3: 8 tokens; heads of 256: 2). One token's rows always fit (G <= 8 rows of D <= 256).
fn tokens_per_block(n_heads: u32, n_kv_heads: u32, head_dim: u32, tile_keys: u32) -> u32 {
    let rows = MAX_BLOCK_ROWS.min(QUERY_WORDS / head_dim).min(PROB_WORDS / tile_keys);
    let group = n_heads / n_kv_heads;
    (1..=rows / group).rev().find(|&t| (t * group).next_multiple_of(4) <= rows).unwrap_or(1)
}

/// Lanes of `partial`'s softmax per row (attention_paged.wgsl SOFTMAX_LANES): the workgroup's 64
/// lanes shared out over a block's rows in powers of two (SmolLM2's 24 rows: 2 lanes each;
/// heads of 256 in groups of 4, 8 rows: 8).
fn softmax_lanes(rows: u32) -> u32 {
    1 << (64 / rows.max(1)).ilog2()
}

/// Keys per tile for a head dimension: as many as the tile's workgroup words hold (rows of
/// D/2 words, padded by one), at most MAX_TILE_KEYS.
fn tile_keys(head_dim: usize) -> u32 {
    (TILE_WORDS / (head_dim as u32 / 2 + 1)).min(MAX_TILE_KEYS)
}

/// Which keys a layer's queries see and how their scores scale (model/reference.rs).
pub use crate::model::reference::AttentionMask;

/// q (T, H, D) f32 + the caches through page_table → out (T, H, D) f32: query t (position
/// p = start_pos + t) attends positions mask.first_key(p)..=p of KV head h / (H / Hkv).
pub struct AttentionPaged {
    shape: AttentionShape,
    mask: AttentionMask,
    n_heads: u32,
    n_kv_heads: u32,
    tile_keys: u32,
    head_dim: u32,
    max_batch: u32,
    partial: wgpu::ComputePipeline,
    /// Real GPUs: a single token's splits.
    decode: Option<wgpu::ComputePipeline>,
    combine: wgpu::ComputePipeline,
    /// On CPU adapters, for head dimensions that are a multiple of 8.
    rows: Option<RowsKernels>,
}

pub struct AttentionPagedBinding {
    group: wgpu::BindGroup,
}

impl AttentionPaged {
    /// Whether the kernel serves these heads: `head_dim` even and at most `MAX_HEAD_DIM`,
    /// `n_kv_heads` dividing `n_heads` with at most `MAX_GROUP` query heads per KV head.
    pub fn supports(n_heads: usize, n_kv_heads: usize, head_dim: usize) -> bool {
        head_dim.is_multiple_of(2) && head_dim <= MAX_HEAD_DIM && n_kv_heads > 0 && n_heads.is_multiple_of(n_kv_heads) && n_heads / n_kv_heads <= MAX_GROUP
    }

    /// For steps of at most `max_batch` tokens; the heads must be `supports`ed.
    #[allow(clippy::too_many_arguments)]
    pub fn new(gpu: &Gpu, shape: AttentionShape, mask: AttentionMask, n_heads: usize, n_kv_heads: usize, head_dim: usize, page_size: usize, max_batch: usize) -> Self {
        let rows = shape == AttentionShape::Lanes && head_dim.is_multiple_of(8);
        assert!(Self::supports(n_heads, n_kv_heads, head_dim), "attention: unsupported heads {n_heads}/{n_kv_heads} × {head_dim}");
        let tile_keys = tile_keys(head_dim);
        let block_tokens = tokens_per_block(n_heads as u32, n_kv_heads as u32, head_dim as u32, tile_keys);
        let key = |entry| {
            PipelineKey::new(OpKind::AttentionPaged, entry)
                .with("H", n_heads as u32)
                .with("HKV", n_kv_heads as u32)
                .with("D", head_dim as u32)
                .with("PAGE", page_size as u32)
                .with("TK", tile_keys)
                .with("TB", block_tokens)
                .with("SOFTMAX_LANES", softmax_lanes(block_tokens * (n_heads / n_kv_heads) as u32))
                .with("WINDOW", mask.window.unwrap_or(0) as u32)
                .with("SCALE", mask.scale)
        };
        Self {
            shape,
            mask,
            n_heads: n_heads as u32,
            n_kv_heads: n_kv_heads as u32,
            tile_keys,
            head_dim: head_dim as u32,
            max_batch: max_batch as u32,
            partial: gpu.pipeline(&KERNEL, key(match shape {
                AttentionShape::Tiled => "partial",
                AttentionShape::Lanes => "lanes",
            })),
            decode: (shape == AttentionShape::Tiled).then(|| gpu.pipeline(&KERNEL, key("decode"))),
            combine: gpu.pipeline(&KERNEL, key("combine")),
            rows: rows.then(|| RowsKernels {
                scratch_bytes: MAX_ROWS_SCRATCH_BYTES.min(gpu.limits.max_storage_buffer_binding_size),
                scores: gpu.pipeline(&KERNEL, key("rows_scores")),
                softmax: gpu.pipeline(&KERNEL, key("rows_softmax")),
                pv: gpu.pipeline(&KERNEL, key("rows_pv")),
            }),
        }
    }

    /// Bytes of the scratch buffer every layer's binding may share (layers run one after another).
    pub fn scratch_bytes(&self) -> u64 {
        let slots = self.max_batch.max(SPLITS_AT_ONE_TOKEN) as u64 * self.n_heads as u64;
        (slots * (self.head_dim as u64 + 2) * 4).max(self.rows.as_ref().map_or(0, |r| r.scratch_bytes))
    }

    /// Scratch words the rows kernels use for a step (attention_paged.wgsl): the score matrix
    /// S[kh][key][row] with rows padded to a multiple of 4, then 1 / sum per (kh, row).
    fn rows_scratch_words(&self, n_tokens: u32, start_pos: u32) -> u64 {
        let rows = (self.n_heads / self.n_kv_heads * n_tokens).next_multiple_of(4) as u64;
        self.n_kv_heads as u64 * (start_pos as u64 + n_tokens as u64 + 1) * rows
    }

    /// How a step of `n_tokens` new tokens after `start_pos` cached ones runs. On a CPU adapter,
    /// a step of MIN_ROWS_TOKENS or more whose score matrix fits the scratch runs as products.
    /// Otherwise its keys split into enough splits to give the GPU TARGET_WORKGROUPS, each at
    /// least MIN_TILES_PER_SPLIT tiles (on a CPU adapter TARGET_LANES lanes of at least
    /// MIN_KEYS_PER_LANE keys), within the scratch buffer's room.
    pub fn plan(&self, n_tokens: u32, start_pos: u32) -> AttentionPlan {
        if self.rows.as_ref().is_some_and(|r| n_tokens >= MIN_ROWS_TOKENS && self.rows_scratch_words(n_tokens, start_pos) * 4 <= r.scratch_bytes) {
            return AttentionPlan::Rows;
        }
        let n_tokens = n_tokens.max(1);
        if let Some(split) = self.decode_splits(n_tokens, start_pos) {
            return AttentionPlan::Decode(split);
        }
        let (unit, wanted, min_units) = match self.shape {
            AttentionShape::Tiled => {
                let blocks = n_tokens.div_ceil(tokens_per_block(self.n_heads, self.n_kv_heads, self.head_dim, self.tile_keys));
                (self.tile_keys, TARGET_WORKGROUPS.div_ceil(blocks * self.n_kv_heads), MIN_TILES_PER_SPLIT)
            }
            AttentionShape::Lanes => (1, TARGET_LANES.div_ceil(n_tokens * self.n_heads), MIN_KEYS_PER_LANE),
        };
        // The step's keys: from its first query's window start to its last query.
        let first = self.mask.first_key(start_pos as usize) as u32;
        let units = (start_pos + n_tokens - first).div_ceil(unit);
        let room = self.max_batch.max(SPLITS_AT_ONE_TOKEN) / n_tokens;
        let splits = wanted.min(units.div_ceil(min_units)).min(room).max(1);
        let per_split = units.div_ceil(splits);
        AttentionPlan::Splits(SplitParams { keys_per_split: per_split * unit, splits: units.div_ceil(per_split), first, _pad: 0 })
    }

    /// A single token's keys for `decode`: one split up to DECODE_SPLIT_KEYS keys, else enough
    /// splits of at least MIN_DECODE_SPLIT_KEYS to give the GPU TARGET_WORKGROUPS, each at most
    /// DECODE_SPLIT_KEYS. None for several tokens, on CPU adapters, and past the scratch's room.
    fn decode_splits(&self, n_tokens: u32, start_pos: u32) -> Option<SplitParams> {
        if self.decode.is_none() || n_tokens != 1 {
            return None;
        }
        let first = self.mask.first_key(start_pos as usize) as u32;
        let keys = start_pos + 1 - first;
        let fewest = keys.div_ceil(DECODE_SPLIT_KEYS);
        if fewest > SPLITS_AT_ONE_TOKEN {
            return None;
        }
        let splits = if fewest == 1 { 1 } else { fewest.max(TARGET_WORKGROUPS.div_ceil(self.n_kv_heads).min(keys.div_ceil(MIN_DECODE_SPLIT_KEYS))).min(SPLITS_AT_ONE_TOKEN) };
        let per_split = keys.div_ceil(splits);
        Some(SplitParams { keys_per_split: per_split, splits: keys.div_ceil(per_split), first, _pad: 0 })
    }

    /// Binds `step` (StepParams), `split` (SplitParams), `q` (T, H, D) f32, `page_table` (pages)
    /// u32, the caches (pages, page_size, Hkv, D/2) u32, `scratch` (`scratch_bytes`) and `out`
    /// (T, H, D) f32.
    #[allow(clippy::too_many_arguments)]
    pub fn bind(
        &self,
        gpu: &Gpu,
        step: &wgpu::Buffer,
        split: &wgpu::Buffer,
        q: &wgpu::Buffer,
        page_table: &wgpu::Buffer,
        k_cache: &wgpu::Buffer,
        v_cache: &wgpu::Buffer,
        scratch: &wgpu::Buffer,
        out: &wgpu::Buffer,
    ) -> AttentionPagedBinding {
        AttentionPagedBinding { group: gpu.bind_group("attention_paged", KERNEL.slots, &[step, split, q, page_table, k_cache, v_cache, scratch, out]) }
    }

    /// Encodes a step of `n_tokens` after `start_pos` planned as `plan` (whose split values are
    /// in the bound `split`).
    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &AttentionPagedBinding, n_tokens: u32, start_pos: u32, plan: AttentionPlan) {
        if n_tokens == 0 {
            return;
        }
        pass.set_bind_group(0, &binding.group, &[]);
        let plan = match (plan, &self.rows, &self.decode) {
            (AttentionPlan::Decode(split), _, Some(decode)) => {
                pass.set_pipeline(decode);
                pass.dispatch_workgroups(split.splits, self.n_kv_heads, 1);
                if split.splits > 1 {
                    pass.set_pipeline(&self.combine);
                    pass.dispatch_workgroups(self.n_heads, 1, 1);
                }
                return;
            }
            (AttentionPlan::Decode(_), _, None) => return, // `plan` never gives Decode without the kernel
            (AttentionPlan::Splits(split), _, _) => split,
            (AttentionPlan::Rows, Some(rows), _) => return self.encode_rows(pass, rows, n_tokens, start_pos),
            (AttentionPlan::Rows, None, _) => return, // `plan` never gives Rows without the kernels
        };
        pass.set_pipeline(&self.partial);
        match self.shape {
            // splits ≤ 64, heads and tokens: all far below 65535.
            AttentionShape::Tiled => pass.dispatch_workgroups(plan.splits, self.n_kv_heads, n_tokens.div_ceil(tokens_per_block(self.n_heads, self.n_kv_heads, self.head_dim, self.tile_keys))),
            AttentionShape::Lanes => dispatch_linear(pass, (n_tokens * self.n_heads * plan.splits).div_ceil(LANES)),
        }
        if plan.splits > 1 {
            pass.set_pipeline(&self.combine);
            pass.dispatch_workgroups(self.n_heads, n_tokens, 1);
        }
    }

    fn encode_rows(&self, pass: &mut wgpu::ComputePass, rows: &RowsKernels, n_tokens: u32, start_pos: u32) {
        let row_blocks = (self.n_heads / self.n_kv_heads * n_tokens).div_ceil(4);
        let keys = start_pos + n_tokens;
        let lanes = |per_kv_head: u32| (per_kv_head * self.n_kv_heads).div_ceil(ROW_LANES);
        pass.set_pipeline(&rows.scores);
        dispatch_linear(pass, lanes(row_blocks * keys.div_ceil(8)));
        pass.set_pipeline(&rows.softmax);
        dispatch_linear(pass, lanes(row_blocks * 4));
        pass.set_pipeline(&rows.pv);
        dispatch_linear(pass, lanes(row_blocks * self.head_dim / 8));
    }
}

#[cfg(test)]
mod tests {
    use crate::gguf::GgufFile;
    use crate::model::synthetic::SyntheticSpec;
    use crate::model::Config;

    fn config_of(spec: &SyntheticSpec) -> Config {
        Config::from_gguf(&GgufFile::parse(&spec.to_gguf()).unwrap()).unwrap()
    }

    #[test]
    fn a_group_of_more_than_eight_query_heads_per_kv_head_is_refused_by_the_gpu_kernel() {
        let ok = SyntheticSpec { n_heads: 16, n_kv_heads: 2, n_embd: 256, ..SyntheticSpec::tiny() };
        assert!(super::check_shape(&config_of(&ok)).is_ok());
        let wide = SyntheticSpec { n_heads: 18, n_kv_heads: 2, n_embd: 288, ..SyntheticSpec::tiny() };
        let err = super::check_shape(&config_of(&wide)).unwrap_err().to_string();
        assert!(err.contains("9 query heads per KV head") && err.contains("at most 8"), "{err}");
    }

    #[test]
    fn the_softmax_gives_each_row_of_a_block_as_many_lanes_as_fit() {
        // (heads, KV heads, head dimension): SmolLM2, Llama 3.2 1B, Gemma 3 270M, a group of 8.
        for (h, hkv, d, want) in [(9, 3, 64, 2), (32, 8, 64, 2), (32, 8, 128, 4), (4, 1, 256, 8), (8, 1, 128, 4)] {
            let rows = super::tokens_per_block(h, hkv, d, super::tile_keys(d as usize)) * (h / hkv);
            let lanes = super::softmax_lanes(rows);
            assert_eq!(lanes, want, "{h}/{hkv} × {d}: {rows} rows");
            assert!(lanes.is_power_of_two() && lanes * rows <= 64 && 2 * lanes * rows > 64, "{h}/{hkv} × {d}: {lanes} lanes × {rows} rows");
        }
    }
}
