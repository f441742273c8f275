//! The GPU forward pass over a batch of new tokens at positions `start_pos..start_pos + T`,
//! reading and extending a sequence's KV pages through its page table.
//!
//! Every buffer, bind group and staging buffer is created once, sized for `max_batch` tokens;
//! a call writes the token ids, the step parameters and the page table, then encodes one
//! compute pass and submits it once. A greedy step ends the pass with the top-2 pick and reads
//! back its 16 bytes, a top-k step its 512; under a grammar the pick first takes the step's
//! mask (V / 32 words written before the pass); other steps read back the logits.

use crate::gpu::context::Gpu;
use crate::gpu::ops::{
    topk, AttentionInput, AttentionMask, AttentionPaged, AttentionPlan, AttentionPagedBinding, Embed, EmbedBinding, Glu, GluBinding, KernelShapes, Matmul, MatmulBinding, PickParams, QkNorm,
    QkNormBinding, RmsNorm, RmsNormBinding, RopeTable, SplitParams, Top2, Top2Binding, Top2Op, TopKBinding, TopKOp, TOP2_BYTES, TOPK_BYTES,
};
use crate::gpu::profile::{OpRole, Profiler, Recorder};
use crate::gpu::readback::map_read;
use crate::gpu::{GpuWeight, StepParams};
use super::kv_pool::KvPool;
use crate::model::{Config, ModelError};

use super::model_weights::{AttnIn, FfnIn, ModelWeights};
use crate::engine::backend::Pick;
use crate::engine::EngineError;

/// One layer's ops, each with its bindings (pipelines are shared through the device's
/// pipeline cache). The RMSNorms are the prologues of the q/k/v and gate/up products; RoPE and
/// the KV-page write are the epilogue of q/k/v (with per-head q/k norms, of `qk_norm`).
struct Layer {
    /// A sliding-window layer: its attention runs the local plan (`Forward::split[1]`).
    local: bool,
    /// q, k and v: one product where the weights are one (`AttnIn::Qkv`), else three.
    attn_in: Vec<(Matmul, MatmulBinding)>,
    qk_norm: Option<(QkNorm, QkNormBinding)>,
    attn: (AttentionPaged, AttentionPagedBinding),
    /// x += a·Woᵀ, or with post norms `post` = a·Woᵀ and then x += rmsnorm(post) (the second op).
    o: (Matmul, MatmulBinding),
    o_post: Option<(RmsNorm, RmsNormBinding)>,
    ffn_in: FfnInput,
    down: (Matmul, MatmulBinding),
    down_post: Option<(RmsNorm, RmsNormBinding)>,
}

/// The FFN's gate, up and act·mul: one gated product where the weights are one (`FfnIn`).
enum FfnInput {
    GateUp(Matmul, MatmulBinding),
    Apart { gate: (Matmul, MatmulBinding), up: (Matmul, MatmulBinding), glu: (Glu, GluBinding) },
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
    /// SplitParams: how attention splits this step's keys, for the global layers and (second)
    /// the sliding-window ones.
    split: [wgpu::Buffer; 2],
    logits: wgpu::Buffer,     // (1, V) f32
    logits_staging: wgpu::Buffer,
    /// The ids a greedy pick may skip (the end-of-sequence tokens) and how many to skip.
    pick_params: wgpu::Buffer,
    n_banned: u32,
    /// A grammar's mask for the pick: V bits, written only by steps under a grammar.
    allowed: wgpu::Buffer,
    picked: wgpu::Buffer, // TOP2_BYTES
    picked_staging: wgpu::Buffer,
    /// Top-k candidates on the GPU, where the kernel shapes say so.
    topk: Option<(TopKOp, TopKBinding)>,
    topk_staging: wgpu::Buffer,
    embed: (Embed, EmbedBinding),
    layers: Vec<Layer>,
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
    /// The greedy pick over the last token's logits, skipping the banned ids if asked and,
    /// when masked, the ids clear in `allowed`.
    Top2 { ban: bool, masked: bool },
    /// The MAX_TOP_K largest logits and their ids, filtered as Top2.
    TopK { ban: bool, masked: bool },
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
        let (t, c, f, qd) = (max_batch as u64, cfg.n_embd as u64, cfg.n_ff as u64, cfg.q_dim() as u64);
        let act = |name: &str, cols: u64| gpu.storage(name, t * cols * 4);
        let step = gpu.uniform("step", &StepParams::default());
        let step_last = gpu.uniform("step.last", &StepParams::default());
        let ids = gpu.storage("ids", t * 4);
        let page_table = gpu.storage("page_table", max_pages as u64 * 4);
        let split = [gpu.uniform("attention.split", &SplitParams::default()), gpu.uniform("attention.split.local", &SplitParams::default())];
        let x = act("x", c); // (T, C) the residual stream
        let q = act("q", qd); // (T, H·D), rotated
        // With per-head q/k norms, q and k as the product made them: (T, H·D + Hkv·D).
        let qk_raw = cfg.qk_norm.then(|| act("qk_raw", qd + cfg.kv_dim() as u64));
        let att = act("att", qd); // (T, H·D)
        let ffn = act("ffn", f); // (T, F)
        // With post norms, the o and down products' outputs before their norms: (T, C).
        let post = cfg.post_norms.then(|| act("post", c));
        // Gate and up outputs apart, only for layers whose weights are apart.
        let apart = w.layers.iter().any(|l| matches!(l.ffn_in, FfnIn::Apart { .. })).then(|| (act("gate", f), act("up", f)));
        let last = gpu.storage("last", c * 4); // (1, C)
        let logits = gpu.storage("logits", cfg.vocab_size as u64 * 4);
        let logits_staging = staging(gpu, "logits.staging", cfg.vocab_size as u64 * 4);
        let pick_params = gpu.uniform("pick", &PickParams::default());
        let banned_ids = gpu.upload("banned", bytemuck::cast_slice(if banned.is_empty() { &[u32::MAX] } else { banned }));
        let allowed = gpu.storage("allowed", cfg.vocab_size.div_ceil(32) as u64 * 4);
        let picked = gpu.storage("picked", TOP2_BYTES);
        let picked_staging = staging(gpu, "picked.staging", TOP2_BYTES);

        let (nh, nkv, d, ps) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, pool.page_size);
        let embed_op = Embed::new(gpu, w.token_embd.ty, cfg.n_embd, cfg.embd_scale);
        let embed_b = embed_op.bind(gpu, &step, &ids, &w.token_embd, &x);
        let mut layers = Vec::with_capacity(cfg.n_layers);
        let mut attn_scratch = None;
        let (n_q, n_kv) = (cfg.q_dim(), cfg.kv_dim());
        let global_rope = RopeTable::new(gpu, &cfg.global_rope_freqs(w.rope_factors.as_deref()));
        let local_rope = cfg.local_rope_freqs().map(|f| RopeTable::new(gpu, &f));
        // x += input · wᵀ: the residual adds of o and down; with a post norm, the product into
        // `post` and then x += rmsnorm(post) · norm_w.
        let residual = |input: &wgpu::Buffer, w: &GpuWeight, post_norm: Option<&wgpu::Buffer>| -> Result<_, EngineError> {
            let op = Matmul::with_shape(gpu, shapes.matmul, w.ty, w.k, w.n, post_norm.is_none());
            match (post_norm, &post) {
                (None, _) => {
                    let binding = op.bind(gpu, &step, input, w, &x);
                    Ok(((op, binding), None))
                }
                (Some(norm_w), Some(post)) => {
                    let binding = op.bind(gpu, &step, input, w, post);
                    let norm = RmsNorm::add(gpu, cfg.n_embd, cfg.rms_eps);
                    let norm_b = norm.bind(gpu, &step, post, norm_w, &x);
                    Ok(((op, binding), Some((norm, norm_b))))
                }
                (Some(_), None) => Err(EngineError::Internal("post norm weights without their buffer")),
            }
        };
        let normed = |w: &GpuWeight, norm_w: &wgpu::Buffer, y: &wgpu::Buffer| {
            let op = Matmul::with_norm(gpu, shapes.matmul, w.ty, w.k, w.n, false, cfg.rms_eps);
            let binding = op.bind_normed(gpu, &step, &x, norm_w, w, y);
            (op, binding)
        };
        for (i, lw) in w.layers.iter().enumerate() {
            let caches = [&pool.k[i], &pool.v[i]];
            let local = cfg.is_local(i);
            let rope_table = match (&local_rope, local) {
                (Some(table), true) => table,
                _ => &global_rope,
            };
            let at = |first_row| AttentionInput { n_q, n_kv, first_row, head_dim: d, rope_freqs: rope_table, rope_neox: cfg.rope_neox, bias: cfg.qkv_bias, qk_norm: cfg.qk_norm, page_size: ps };
            let attention_input = |w: &GpuWeight, first_row| {
                // NEOX RoPE pairs rows half a head apart: a weight split over bindings (rows
                // beyond one storage binding) must split between heads.
                if cfg.rope_neox && w.parts.iter().any(|p| p.first_row % d != 0) {
                    return Err(EngineError::from(ModelError::BadConfig(format!("layer {i}'s q/k/v weight is split over storage bindings inside a head, which NEOX RoPE cannot serve"))));
                }
                let op = Matmul::attention_input(gpu, shapes.matmul, w, cfg.rms_eps, at(first_row));
                let binding = op.bind_attention_input(gpu, &step, &x, &lw.attn_norm, w, qk_raw.as_ref().unwrap_or(&q), &page_table, caches, lw.qkv_bias.as_ref());
                Ok((op, binding))
            };
            let attn_in = match &lw.attn_in {
                AttnIn::Qkv(w) => vec![attention_input(w, 0)?],
                AttnIn::Apart { wq, wk, wv } => vec![attention_input(wq, 0)?, attention_input(wk, n_q)?, attention_input(wv, n_q + n_kv)?],
            };
            let qk_norm = match (&lw.qk_norm, &qk_raw) {
                (Some((q_norm, k_norm)), Some(raw)) => {
                    let op = QkNorm::new(gpu, n_q, n_kv, d, ps, cfg.rms_eps, cfg.rope_neox);
                    let binding = op.bind(gpu, &step, raw, q_norm, k_norm, &page_table, &q, caches[0], rope_table);
                    Some((op, binding))
                }
                (None, None) => None,
                _ => return Err(EngineError::Internal("q/k norm weights without their buffer, or the buffer without them")),
            };
            let mask = AttentionMask { window: cfg.window(i), scale: cfg.attn_scale };
            let attn_op = AttentionPaged::new(gpu, shapes.attention, mask, nh, nkv, d, ps, max_batch);
            // Layers run one after another: they share one scratch buffer for attention's splits.
            let scratch = attn_scratch.get_or_insert_with(|| gpu.storage("attention.scratch", attn_op.scratch_bytes()));
            let attn_b = attn_op.bind(gpu, &step, &split[local as usize], &q, &page_table, caches[0], caches[1], scratch, &att);
            let ffn_in = match (&lw.ffn_in, &apart) {
                (FfnIn::GateUp(gu), _) => {
                    let op = Matmul::gated(gpu, shapes.matmul, gu.ty, gu.k, cfg.n_ff, cfg.rms_eps, cfg.ffn_act);
                    let binding = op.bind_normed(gpu, &step, &x, &lw.ffn_norm, gu, &ffn);
                    FfnInput::GateUp(op, binding)
                }
                (FfnIn::Apart { gate, up }, Some((g, u))) => {
                    let glu = Glu::new(gpu, cfg.n_ff, cfg.ffn_act);
                    let glu_b = glu.bind(gpu, &step, g, u, &ffn);
                    FfnInput::Apart { gate: normed(gate, &lw.ffn_norm, g), up: normed(up, &lw.ffn_norm, u), glu: (glu, glu_b) }
                }
                (FfnIn::Apart { .. }, None) => return Err(EngineError::Internal("FFN weights apart without buffers for gate and up")),
            };
            let (o, o_post) = residual(&att, &lw.wo, lw.post_norms.as_ref().map(|(attn, _)| attn))?;
            let (down, down_post) = residual(&ffn, &lw.w_down, lw.post_norms.as_ref().map(|(_, ffn)| ffn))?;
            layers.push(Layer { local, attn_in, qk_norm, attn: (attn_op, attn_b), o, o_post, ffn_in, down, down_post });
        }
        let final_norm_op = RmsNorm::new(gpu, cfg.n_embd, cfg.rms_eps, true);
        let final_norm_b = final_norm_op.bind(gpu, &step, &x, &w.output_norm, &last);
        let head = w.lm_head();
        let lm_head_op = Matmul::with_shape(gpu, shapes.matmul, head.ty, head.k, head.n, false);
        let lm_head_b = lm_head_op.bind(gpu, &step_last, &last, head, &logits);
        let top2_op = Top2Op::new(gpu, cfg.vocab_size);
        let top2_b = top2_op.bind(gpu, &pick_params, &logits, &banned_ids, &allowed, &picked);
        let topk = shapes.gpu_top_k.then(|| {
            let op = TopKOp::new(gpu, cfg.vocab_size);
            let binding = op.bind(gpu, &logits, &banned_ids, &allowed);
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
            allowed,
            picked,
            picked_staging,
            topk,
            topk_staging,
            embed: (embed_op, embed_b),
            layers,
            final_norm: (final_norm_op, final_norm_b),
            lm_head: (lm_head_op, lm_head_b),
            top2: (top2_op, top2_b),
            profiler: None,
        })
    }

    /// Ops in one pass of this model, at most: what a profiler must have room for.
    pub fn max_ops(&self) -> usize {
        let per_layer = |l: &Layer| {
            let ffn = match l.ffn_in {
                FfnInput::GateUp(..) => 1,
                FfnInput::Apart { .. } => 3,
            };
            l.attn_in.len() + l.qk_norm.is_some() as usize + 2 + l.o_post.is_some() as usize + ffn + 1 + l.down_post.is_some() as usize
        };
        // Embed; the layers; the final norm, the LM head and the pick.
        1 + self.layers.iter().map(per_layer).sum::<usize>() + 3
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

    /// `run`, then the greedy pick over the last token's logits among the ids `pick` allows,
    /// reading back 16 bytes.
    pub async fn run_greedy(&mut self, gpu: &Gpu, tokens: &[u32], start_pos: usize, page_table: &[u32], pick: Pick<'_>) -> Result<Top2, EngineError> {
        let masked = self.write_mask(gpu, pick)?;
        self.submit(gpu, tokens, start_pos, page_table, Head::Top2 { ban: pick.ban_stops, masked }).await?;
        let bytes = map_read(gpu, &self.picked_staging, TOP2_BYTES).await?;
        let words: [u32; 4] = bytemuck::pod_read_unaligned(&bytes);
        Ok(Top2::from_words(words))
    }

    /// Whether `run_top_k` is served on the GPU (else sampling reads the logits back).
    pub fn has_gpu_top_k(&self) -> bool {
        self.topk.is_some()
    }

    /// `run`, then the MAX_TOP_K largest of the last token's logits with their ids, largest
    /// first, among the ids `pick` allows, reading back 512 bytes.
    pub async fn run_top_k(&mut self, gpu: &Gpu, tokens: &[u32], start_pos: usize, page_table: &[u32], pick: Pick<'_>) -> Result<Vec<(u32, f32)>, EngineError> {
        if self.topk.is_none() {
            return Err(EngineError::Internal("top-k on the GPU asked of a forward pass built without it"));
        }
        let masked = self.write_mask(gpu, pick)?;
        self.submit(gpu, tokens, start_pos, page_table, Head::TopK { ban: pick.ban_stops, masked }).await?;
        let bytes = map_read(gpu, &self.topk_staging, TOPK_BYTES).await?;
        Ok(topk::candidates(&bytemuck::pod_collect_to_vec(&bytes)))
    }

    /// Writes a grammar's mask for the next pick, if `pick` has one; whether it had.
    fn write_mask(&self, gpu: &Gpu, pick: Pick<'_>) -> Result<bool, EngineError> {
        let Some(words) = pick.allowed else { return Ok(false) };
        if words.len() != self.vocab.div_ceil(32) {
            return Err(EngineError::Internal("a grammar's mask of another vocabulary's size"));
        }
        gpu.queue.write_buffer(&self.allowed, 0, bytemuck::cast_slice(words));
        Ok(true)
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
        // One plan for the global layers and one for the sliding-window ones (their keys start
        // later), each from a layer of its kind.
        let plan_of = |local: bool| {
            self.layers.iter().find(|l| l.local == local).map_or(AttentionPlan::Splits(SplitParams::default()), |layer| layer.attn.0.plan(n as u32, start_pos as u32))
        };
        let plans = [plan_of(false), plan_of(true)];
        for (buffer, plan) in self.split.iter().zip(&plans) {
            q.write_buffer(buffer, 0, bytemuck::bytes_of(&plan.split_params()));
        }
        match (head, &self.topk) {
            (Head::Top2 { ban, masked }, _) => {
                let pick = PickParams { n_banned: if ban { self.n_banned } else { 0 }, masked: masked as u32, ..Default::default() };
                q.write_buffer(&self.pick_params, 0, bytemuck::bytes_of(&pick));
            }
            (Head::TopK { ban, masked }, Some((op, b))) => op.set_filter(gpu, b, if ban { self.n_banned } else { 0 }, masked),
            _ => {}
        }

        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") });
        let ops = match &self.profiler {
            Some(p) => {
                let mut rec = p.recorder(&mut enc);
                self.record(&mut rec, n as u32, start_pos as u32, plans, head);
                let ops = rec.finish();
                p.resolve(&mut enc, ops.len());
                Some(ops)
            }
            None => {
                let mut rec = Recorder::one_pass(&mut enc, "forward");
                self.record(&mut rec, n as u32, start_pos as u32, plans, head);
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

    /// Encodes the pass's ops, in order, for a batch of `t` tokens after `start_pos`.
    fn record(&self, rec: &mut Recorder<'_>, t: u32, start_pos: u32, plans: [AttentionPlan; 2], head: Head) {
        rec.op(OpRole::Embed, 1, |p| self.embed.0.encode(p, &self.embed.1, t));
        for layer in &self.layers {
            for (op, b) in &layer.attn_in {
                rec.op(OpRole::QkvMatmul, b.dispatches(), |p| op.encode(p, b, t));
            }
            if let Some((op, b)) = &layer.qk_norm {
                rec.op(OpRole::QkNorm, 1, |p| op.encode(p, b, t));
            }
            let (attn, attn_b) = &layer.attn;
            let plan = plans[layer.local as usize];
            rec.op(OpRole::Attention, plan.dispatches(), |p| attn.encode(p, attn_b, t, start_pos, plan));
            let (o, o_b) = &layer.o;
            rec.op(OpRole::OutMatmul, o_b.dispatches(), |p| o.encode(p, o_b, t));
            if let Some((norm, norm_b)) = &layer.o_post {
                rec.op(OpRole::PostNorm, 1, |p| norm.encode(p, norm_b, t));
            }
            match &layer.ffn_in {
                FfnInput::GateUp(op, b) => rec.op(OpRole::GatedMatmul, b.dispatches(), |p| op.encode(p, b, t)),
                FfnInput::Apart { gate: (gate, gate_b), up: (up, up_b), glu: (glu, glu_b) } => {
                    rec.op(OpRole::GateUpMatmul, gate_b.dispatches(), |p| gate.encode(p, gate_b, t));
                    rec.op(OpRole::GateUpMatmul, up_b.dispatches(), |p| up.encode(p, up_b, t));
                    rec.op(OpRole::Glu, 1, |p| glu.encode(p, glu_b, t));
                }
            }
            let (down, down_b) = &layer.down;
            rec.op(OpRole::DownMatmul, down_b.dispatches(), |p| down.encode(p, down_b, t));
            if let Some((norm, norm_b)) = &layer.down_post {
                rec.op(OpRole::PostNorm, 1, |p| norm.encode(p, norm_b, t));
            }
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
