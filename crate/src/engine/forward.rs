//! The GPU forward pass over a batch of new tokens at positions `start_pos..start_pos + T`,
//! reading and extending a sequence's KV pages through its page table.
//!
//! Every buffer, bind group and staging buffer is created once, sized for `max_batch` tokens;
//! a call writes the token ids, the step parameters and the page table, then encodes one
//! compute pass and submits it once. A greedy step ends the pass with the top-2 pick and reads
//! back its 16 bytes; a sampled step reads back the logits.

use crate::gpu::context::Gpu;
use crate::gpu::ops::{
    AttentionPaged, AttentionPagedBinding, Embed, EmbedBinding, KvStore, KvStoreBinding, Matmul, MatmulBinding,
    topk, KernelShapes, PickParams, Rope, RopeBinding, SplitParams, RmsNorm, RmsNormBinding, SiluMul, SiluMulBinding, Top2, Top2Binding, Top2Op,
    TopKBinding, TopKOp, TOP2_BYTES, TOPK_BYTES,
};
use crate::gpu::profile::{OpRole, Profiler, Recorder};
use crate::gpu::readback::map_read;
use crate::gpu::{GpuWeight, StepParams};
use crate::kv::pool::KvPool;
use crate::model::Config;

use super::weights::{AttnIn, FfnIn, ModelWeights};
use super::EngineError;

struct LayerPlan {
    attn_in: AttnInPlan,
    rope_q: RopeBinding,
    rope_k: RopeBinding,
    store: KvStoreBinding,
    attn: AttentionPagedBinding,
    o: MatmulBinding,
    ffn_in: FfnInPlan,
    down: MatmulBinding,
}

/// Attention's q, k, v: one product where the weights are one (`AttnIn`).
enum AttnInOps {
    Qkv(Matmul),
    Apart { q: Matmul, k: Matmul, v: Matmul },
}

enum AttnInPlan {
    Qkv(MatmulBinding),
    Apart { q: MatmulBinding, k: MatmulBinding, v: MatmulBinding },
}

/// The FFN's gate, up and SiLU·mul: one gated product where the weights are one (`FfnIn`).
enum FfnInOps {
    GateUp(Matmul),
    Apart { gate: Matmul, up: Matmul, silu: SiluMul },
}

enum FfnInPlan {
    GateUp(MatmulBinding),
    Apart { gate: MatmulBinding, up: MatmulBinding, silu: SiluMulBinding },
}

/// The ops of one layer; pipelines are shared through the device's pipeline cache. The
/// attention and FFN RMSNorms are the prologues of the q/k/v and gate/up products.
struct LayerOps {
    attn_in: AttnInOps,
    rope_q: Rope,
    rope_k: Rope,
    store: KvStore,
    attn: AttentionPaged,
    o: Matmul,
    ffn_in: FfnInOps,
    down: Matmul,
}

pub struct Forward {
    pub max_batch: usize,
    /// Most pages one sequence's page table can hold.
    pub max_pages: usize,
    vocab: usize,
    step: wgpu::Buffer,       // StepParams for the batch
    step_last: wgpu::Buffer,  // StepParams for the LM head: one row
    ids: wgpu::Buffer,        // (T) u32
    page_table: wgpu::Buffer, // (max_pages) u32
    split: wgpu::Buffer,      // SplitParams: how attention splits this step's keys
    logits: wgpu::Buffer,     // (1, V) f32
    logits_staging: wgpu::Buffer,
    /// The ids a greedy pick may skip (the end-of-sequence tokens) and how many to skip.
    pick_params: wgpu::Buffer,
    n_banned: u32,
    picked: wgpu::Buffer, // TOP2_BYTES
    picked_staging: wgpu::Buffer,
    /// Top-k candidates on the GPU, where the kernel shapes say so.
    topk: Option<(TopKOp, TopKBinding)>,
    topk_staging: wgpu::Buffer,
    embed: (Embed, EmbedBinding),
    layer_ops: Vec<LayerOps>,
    layers: Vec<LayerPlan>,
    final_norm: (RmsNorm, RmsNormBinding),
    lm_head: (Matmul, MatmulBinding),
    top2: (Top2Op, Top2Binding),
    /// Set by `bench throughput --profile`: each op in its own timestamped pass.
    pub profiler: Option<Profiler>,
}

/// What a forward pass ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// Nothing: a prefill batch that is not the prompt's last.
    None,
    /// The last token's logits, read back whole.
    Logits,
    /// The greedy pick over the last token's logits, skipping the banned ids if asked.
    Top2 { ban: bool },
    /// The MAX_TOP_K largest logits and their ids, skipping the banned ids if asked.
    TopK { ban: bool },
}

impl Forward {
    /// `banned`: the ids a greedy pick skips when asked to (the end-of-sequence tokens).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gpu: &Gpu,
        cfg: &Config,
        w: &ModelWeights,
        pool: &KvPool,
        shapes: KernelShapes,
        max_batch: usize,
        max_pages: usize,
        banned: &[u32],
    ) -> Result<Self, EngineError> {
        let (t, c, f, kvd) = (max_batch as u64, cfg.n_embd as u64, cfg.n_ff as u64, cfg.kv_dim() as u64);
        let act = |name: &str, cols: u64| gpu.storage(name, t * cols * 4);
        let step = gpu.uniform("step", &StepParams::default());
        let step_last = gpu.uniform("step.last", &StepParams::default());
        let ids = gpu.storage("ids", t * 4);
        let page_table = gpu.storage("page_table", max_pages as u64 * 4);
        let split = gpu.uniform("attention.split", &SplitParams::default());
        let x = act("x", c); // (T, C) the residual stream
        let q = act("q", c); // (T, H·D)
        let k = act("k", kvd); // (T, Hkv·D)
        let v = act("v", kvd); // (T, Hkv·D)
        let att = act("att", c); // (T, H·D)
        let ffn = act("ffn", f); // (T, F)
        // Gate and up outputs apart, only for layers whose weights are apart.
        let apart = w.layers.iter().any(|l| matches!(l.ffn_in, FfnIn::Apart { .. })).then(|| (act("gate", f), act("up", f)));
        let last = gpu.storage("last", c * 4); // (1, C)
        let logits = gpu.storage("logits", cfg.vocab_size as u64 * 4);
        let logits_staging = staging(gpu, "logits.staging", cfg.vocab_size as u64 * 4);
        let pick_params = gpu.uniform("pick", &PickParams::default());
        let banned_ids = gpu.upload("banned", bytemuck::cast_slice(if banned.is_empty() { &[u32::MAX] } else { banned }));
        let picked = gpu.storage("picked", TOP2_BYTES);
        let picked_staging = staging(gpu, "picked.staging", TOP2_BYTES);

        let (nh, nkv, d, ps) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, pool.page_size);
        let embed_op = Embed::new(gpu, w.token_embd.ty, cfg.n_embd);
        let embed_b = embed_op.bind(gpu, &step, &ids, &w.token_embd, &x);
        let mut layer_ops = Vec::with_capacity(cfg.n_layers);
        let mut layers = Vec::with_capacity(cfg.n_layers);
        let mut attn_scratch = None;
        let matmul = |w: &GpuWeight, accumulate| Matmul::with_decode_shape(gpu, shapes.decode, w.ty, w.k, w.n, accumulate);
        let normed = |w: &GpuWeight| Matmul::with_norm(gpu, shapes.decode, w.ty, w.k, w.n, false, cfg.rms_eps);
        for (i, lw) in w.layers.iter().enumerate() {
            let ops = LayerOps {
                attn_in: match &lw.attn_in {
                    AttnIn::Qkv(w) => AttnInOps::Qkv(Matmul::qkv(gpu, shapes.decode, w.ty, w.k, cfg.n_embd, cfg.kv_dim(), cfg.rms_eps)),
                    AttnIn::Apart { wq, wk, wv } => AttnInOps::Apart { q: normed(wq), k: normed(wk), v: normed(wv) },
                },
                rope_q: Rope::new(gpu, nh, d, cfg.rope_base),
                rope_k: Rope::new(gpu, nkv, d, cfg.rope_base),
                store: KvStore::new(gpu, nkv, d, ps),
                attn: AttentionPaged::new(gpu, shapes.attention, nh, nkv, d, ps, max_batch),
                o: matmul(&lw.wo, true),
                ffn_in: match &lw.ffn_in {
                    FfnIn::GateUp(gu) => FfnInOps::GateUp(Matmul::gated(gpu, shapes.decode, gu.ty, gu.k, cfg.n_ff, cfg.rms_eps)),
                    FfnIn::Apart { gate, up } => FfnInOps::Apart { gate: normed(gate), up: normed(up), silu: SiluMul::new(gpu, cfg.n_ff) },
                },
                down: matmul(&lw.w_down, true),
            };
            let (kc, vc) = (&pool.k[i], &pool.v[i]);
            // Layers run one after another: they share one scratch buffer for attention's splits.
            let scratch = attn_scratch.get_or_insert_with(|| gpu.storage("attention.scratch", ops.attn.scratch_bytes(d)));
            layers.push(LayerPlan {
                attn_in: match (&ops.attn_in, &lw.attn_in) {
                    (AttnInOps::Qkv(op), AttnIn::Qkv(w)) => AttnInPlan::Qkv(op.bind_qkv(gpu, &step, &x, &lw.attn_norm, w, &q, &k, &v)),
                    (AttnInOps::Apart { q: oq, k: ok, v: ov }, AttnIn::Apart { wq, wk, wv }) => AttnInPlan::Apart {
                        q: oq.bind_normed(gpu, &step, &x, &lw.attn_norm, wq, &q),
                        k: ok.bind_normed(gpu, &step, &x, &lw.attn_norm, wk, &k),
                        v: ov.bind_normed(gpu, &step, &x, &lw.attn_norm, wv, &v),
                    },
                    _ => return Err(EngineError::Internal("attention ops built for other weights")),
                },
                rope_q: ops.rope_q.bind(gpu, &step, &q),
                rope_k: ops.rope_k.bind(gpu, &step, &k),
                store: ops.store.bind(gpu, &step, &k, &v, &page_table, kc, vc),
                attn: ops.attn.bind(gpu, &step, &split, &q, &page_table, kc, vc, scratch, &att),
                o: ops.o.bind(gpu, &step, &att, &lw.wo, &x),
                ffn_in: match (&ops.ffn_in, &lw.ffn_in, &apart) {
                    (FfnInOps::GateUp(op), FfnIn::GateUp(gu), _) => FfnInPlan::GateUp(op.bind_normed(gpu, &step, &x, &lw.ffn_norm, gu, &ffn)),
                    (FfnInOps::Apart { gate, up, silu }, FfnIn::Apart { gate: wg, up: wu }, Some((g, u))) => FfnInPlan::Apart {
                        gate: gate.bind_normed(gpu, &step, &x, &lw.ffn_norm, wg, g),
                        up: up.bind_normed(gpu, &step, &x, &lw.ffn_norm, wu, u),
                        silu: silu.bind(gpu, &step, g, u, &ffn),
                    },
                    _ => return Err(EngineError::Internal("FFN ops built for other weights")),
                },
                down: ops.down.bind(gpu, &step, &ffn, &lw.w_down, &x),
            });
            layer_ops.push(ops);
        }
        let final_norm_op = RmsNorm::new(gpu, cfg.n_embd, cfg.rms_eps, true);
        let final_norm_b = final_norm_op.bind(gpu, &step, &x, &w.output_norm, &last);
        let head = w.lm_head();
        let lm_head_op = matmul(head, false);
        let lm_head_b = lm_head_op.bind(gpu, &step_last, &last, head, &logits);
        let top2_op = Top2Op::new(gpu, cfg.vocab_size);
        let top2_b = top2_op.bind(gpu, &pick_params, &logits, &banned_ids, &picked);
        let topk = shapes.gpu_top_k.then(|| {
            let op = TopKOp::new(gpu, cfg.vocab_size);
            let binding = op.bind(gpu, &logits, &banned_ids);
            (op, binding)
        });
        let topk_staging = staging(gpu, "topk.staging", TOPK_BYTES);
        Ok(Self {
            max_batch,
            max_pages,
            vocab: cfg.vocab_size,
            step,
            step_last,
            ids,
            page_table,
            split,
            logits,
            logits_staging,
            pick_params,
            n_banned: banned.len() as u32,
            picked,
            picked_staging,
            topk,
            topk_staging,
            embed: (embed_op, embed_b),
            layer_ops,
            layers,
            final_norm: (final_norm_op, final_norm_b),
            lm_head: (lm_head_op, lm_head_b),
            top2: (top2_op, top2_b),
            profiler: None,
        })
    }

    /// Ops in one pass of this model, at most: what a profiler must have room for.
    pub fn max_ops(&self) -> usize {
        1 + 12 * self.layers.len() + 3
    }

    /// Runs `tokens` (at most `max_batch`) at positions `start_pos..`, writing their K/V into
    /// the pages of `page_table` (which must cover every position up to the last token).
    pub async fn run(&mut self, gpu: &Gpu, tokens: &[u32], start_pos: usize, page_table: &[u32]) -> Result<(), EngineError> {
        self.submit(gpu, tokens, start_pos, page_table, Head::None).await
    }

    /// `run`, then reads back the last token's logits.
    pub async fn run_logits(&mut self, gpu: &Gpu, tokens: &[u32], start_pos: usize, page_table: &[u32]) -> Result<Vec<f32>, EngineError> {
        self.submit(gpu, tokens, start_pos, page_table, Head::Logits).await?;
        let bytes = map_read(gpu, &self.logits_staging, self.vocab as u64 * 4).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// `run`, then the greedy pick over the last token's logits (skipping the end-of-sequence
    /// tokens when `ban_stops`), reading back 16 bytes.
    pub async fn run_greedy(&mut self, gpu: &Gpu, tokens: &[u32], start_pos: usize, page_table: &[u32], ban_stops: bool) -> Result<Top2, EngineError> {
        self.submit(gpu, tokens, start_pos, page_table, Head::Top2 { ban: ban_stops }).await?;
        let bytes = map_read(gpu, &self.picked_staging, TOP2_BYTES).await?;
        let words: [u32; 4] = bytemuck::pod_read_unaligned(&bytes);
        Ok(Top2::from_words(words))
    }

    /// Whether `run_top_k` is served on the GPU (else sampling reads the logits back).
    pub fn has_gpu_top_k(&self) -> bool {
        self.topk.is_some()
    }

    /// `run`, then the MAX_TOP_K largest of the last token's logits with their ids, largest
    /// first (skipping the end-of-sequence tokens when `ban_stops`), reading back 512 bytes.
    pub async fn run_top_k(&mut self, gpu: &Gpu, tokens: &[u32], start_pos: usize, page_table: &[u32], ban_stops: bool) -> Result<Vec<(u32, f32)>, EngineError> {
        if self.topk.is_none() {
            return Err(EngineError::Internal("top-k on the GPU asked of a forward pass built without it"));
        }
        self.submit(gpu, tokens, start_pos, page_table, Head::TopK { ban: ban_stops }).await?;
        let bytes = map_read(gpu, &self.topk_staging, TOPK_BYTES).await?;
        Ok(topk::candidates(&bytemuck::pod_collect_to_vec(&bytes)))
    }

    async fn submit(&mut self, gpu: &Gpu, tokens: &[u32], start_pos: usize, page_table: &[u32], head: Head) -> Result<(), EngineError> {
        let n = tokens.len();
        if n == 0 || n > self.max_batch || page_table.len() > self.max_pages {
            return Err(EngineError::Internal("a forward batch outside the sizes its buffers were made for"));
        }
        let q = &gpu.queue;
        q.write_buffer(&self.ids, 0, bytemuck::cast_slice(tokens));
        q.write_buffer(&self.page_table, 0, bytemuck::cast_slice(page_table));
        let step = StepParams { n_tokens: n as u32, start_pos: start_pos as u32, ..Default::default() };
        q.write_buffer(&self.step, 0, bytemuck::bytes_of(&step));
        let last = StepParams { n_tokens: 1, start_pos: (start_pos + n - 1) as u32, ..Default::default() };
        q.write_buffer(&self.step_last, 0, bytemuck::bytes_of(&last));
        let plan = self.layer_ops.first().map_or_else(SplitParams::default, |ops| ops.attn.plan(n as u32, start_pos as u32));
        q.write_buffer(&self.split, 0, bytemuck::bytes_of(&plan));
        match (head, &self.topk) {
            (Head::Top2 { ban }, _) => {
                let pick = PickParams { n_banned: if ban { self.n_banned } else { 0 }, ..Default::default() };
                q.write_buffer(&self.pick_params, 0, bytemuck::bytes_of(&pick));
            }
            (Head::TopK { ban }, Some((op, b))) => op.set_banned(gpu, b, if ban { self.n_banned } else { 0 }),
            _ => {}
        }

        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") });
        let ops = match &self.profiler {
            Some(p) => {
                let mut rec = p.recorder(&mut enc);
                self.record(&mut rec, n as u32, plan, head);
                let ops = rec.finish();
                p.resolve(&mut enc, ops.len());
                Some(ops)
            }
            None => {
                let mut rec = Recorder::one_pass(&mut enc, "forward");
                self.record(&mut rec, n as u32, plan, head);
                rec.finish();
                None
            }
        };
        match head {
            Head::None => {}
            Head::Logits => enc.copy_buffer_to_buffer(&self.logits, 0, &self.logits_staging, 0, self.vocab as u64 * 4),
            Head::Top2 { .. } => enc.copy_buffer_to_buffer(&self.picked, 0, &self.picked_staging, 0, TOP2_BYTES),
            Head::TopK { .. } => {
                if let Some((_, b)) = &self.topk {
                    enc.copy_buffer_to_buffer(&b.out, 0, &self.topk_staging, 0, TOPK_BYTES);
                }
            }
        }
        q.submit([enc.finish()]);
        if let (Some(p), Some(ops)) = (&mut self.profiler, ops) {
            p.collect(n, ops).await?;
        }
        Ok(())
    }

    /// Encodes the pass's ops, in order, for a batch of `t` tokens.
    fn record(&self, rec: &mut Recorder<'_>, t: u32, plan: SplitParams, head: Head) {
        rec.op(OpRole::Embed, 1, |p| self.embed.0.encode(p, &self.embed.1, t));
        for (ops, b) in self.layer_ops.iter().zip(&self.layers) {
            match (&ops.attn_in, &b.attn_in) {
                (AttnInOps::Qkv(op), AttnInPlan::Qkv(qkv)) => rec.op(OpRole::QkvMatmul, qkv.dispatches(), |p| op.encode(p, qkv, t)),
                (AttnInOps::Apart { q, k, v }, AttnInPlan::Apart { q: bq, k: bk, v: bv }) => {
                    rec.op(OpRole::QkvMatmul, bq.dispatches(), |p| q.encode(p, bq, t));
                    rec.op(OpRole::QkvMatmul, bk.dispatches(), |p| k.encode(p, bk, t));
                    rec.op(OpRole::QkvMatmul, bv.dispatches(), |p| v.encode(p, bv, t));
                }
                // Built together in `new`: the ops and the bindings always agree.
                _ => {}
            }
            rec.op(OpRole::Rope, 1, |p| ops.rope_q.encode(p, &b.rope_q, t));
            rec.op(OpRole::Rope, 1, |p| ops.rope_k.encode(p, &b.rope_k, t));
            rec.op(OpRole::KvStore, 1, |p| ops.store.encode(p, &b.store, t));
            rec.op(OpRole::Attention, 2, |p| ops.attn.encode(p, &b.attn, t, plan));
            rec.op(OpRole::OutMatmul, b.o.dispatches(), |p| ops.o.encode(p, &b.o, t));
            match (&ops.ffn_in, &b.ffn_in) {
                (FfnInOps::GateUp(op), FfnInPlan::GateUp(gu)) => rec.op(OpRole::GatedMatmul, gu.dispatches(), |p| op.encode(p, gu, t)),
                (FfnInOps::Apart { gate, up, silu }, FfnInPlan::Apart { gate: bg, up: bu, silu: bs }) => {
                    rec.op(OpRole::GateUpMatmul, bg.dispatches(), |p| gate.encode(p, bg, t));
                    rec.op(OpRole::GateUpMatmul, bu.dispatches(), |p| up.encode(p, bu, t));
                    rec.op(OpRole::SiluMul, 1, |p| silu.encode(p, bs, t));
                }
                // Built together in `new`: the ops and the bindings always agree.
                _ => {}
            }
            rec.op(OpRole::DownMatmul, b.down.dispatches(), |p| ops.down.encode(p, &b.down, t));
        }
        if head != Head::None {
            rec.op(OpRole::FinalNorm, 1, |p| self.final_norm.0.encode(p, &self.final_norm.1, t));
            rec.op(OpRole::LmHead, self.lm_head.1.dispatches(), |p| self.lm_head.0.encode(p, &self.lm_head.1, 1));
        }
        match (head, &self.topk) {
            (Head::Top2 { .. }, _) => rec.op(OpRole::Top2, 1, |p| self.top2.0.encode(p, &self.top2.1)),
            (Head::TopK { .. }, Some((op, b))) => rec.op(OpRole::TopK, TopKOp::dispatches(b), |p| op.encode(p, b)),
            _ => {}
        }
    }
}

/// A buffer the CPU maps to read what a pass copied into it; reused by every pass.
fn staging(gpu: &Gpu, label: &str, bytes: u64) -> wgpu::Buffer {
    gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: bytes.max(4).next_multiple_of(4),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}
