//! The GPU forward pass over a batch of new tokens at positions `start_pos..start_pos + T`,
//! reading and extending a sequence's KV pages through its page table.
//!
//! Every buffer and bind group is created once, sized for `max_batch` tokens; a call writes
//! the token ids, the step parameters and the page table, then encodes one compute pass.

use crate::gpu::context::Gpu;
use crate::gpu::ops::{
    AttentionPaged, AttentionPagedBinding, Embed, EmbedBinding, KvStore, KvStoreBinding, Matmul, MatmulBinding,
    Rope, RopeBinding, RmsNorm, RmsNormBinding, SiluMul, SiluMulBinding,
};
use crate::gpu::readback::read_f32;
use crate::gpu::StepParams;
use crate::kv::pool::KvPool;
use crate::model::Config;

use super::weights::ModelWeights;
use super::EngineError;

struct LayerPlan {
    attn_norm: RmsNormBinding,
    q: MatmulBinding,
    k: MatmulBinding,
    v: MatmulBinding,
    rope_q: RopeBinding,
    rope_k: RopeBinding,
    store: KvStoreBinding,
    attn: AttentionPagedBinding,
    o: MatmulBinding,
    ffn_norm: RmsNormBinding,
    gate: MatmulBinding,
    up: MatmulBinding,
    silu: SiluMulBinding,
    down: MatmulBinding,
}

/// The ops of one layer; pipelines are shared through the device's pipeline cache.
struct LayerOps {
    norm: RmsNorm,
    q: Matmul,
    k: Matmul,
    v: Matmul,
    rope_q: Rope,
    rope_k: Rope,
    store: KvStore,
    attn: AttentionPaged,
    o: Matmul,
    gate: Matmul,
    up: Matmul,
    silu: SiluMul,
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
    logits: wgpu::Buffer,     // (1, V) f32
    embed: (Embed, EmbedBinding),
    layer_ops: Vec<LayerOps>,
    layers: Vec<LayerPlan>,
    final_norm: (RmsNorm, RmsNormBinding),
    lm_head: (Matmul, MatmulBinding),
}

impl Forward {
    pub fn new(gpu: &Gpu, cfg: &Config, w: &ModelWeights, pool: &KvPool, max_batch: usize, max_pages: usize) -> Result<Self, EngineError> {
        let (t, c, f, kvd) = (max_batch as u64, cfg.n_embd as u64, cfg.n_ff as u64, cfg.kv_dim() as u64);
        let act = |name: &str, cols: u64| gpu.storage(name, t * cols * 4);
        let step = gpu.uniform("step", &StepParams::default());
        let step_last = gpu.uniform("step.last", &StepParams::default());
        let ids = gpu.storage("ids", t * 4);
        let page_table = gpu.storage("page_table", max_pages as u64 * 4);
        let x = act("x", c); // (T, C) the residual stream
        let h = act("h", c); // (T, C) normalised input of a block
        let q = act("q", c); // (T, H·D)
        let k = act("k", kvd); // (T, Hkv·D)
        let v = act("v", kvd); // (T, Hkv·D)
        let att = act("att", c); // (T, H·D)
        let gate = act("gate", f); // (T, F)
        let up = act("up", f); // (T, F)
        let ffn = act("ffn", f); // (T, F)
        let last = gpu.storage("last", c * 4); // (1, C)
        let logits = gpu.storage("logits", cfg.vocab_size as u64 * 4);

        let (nh, nkv, d, ps) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, pool.page_size);
        let embed_op = Embed::new(gpu, w.token_embd.ty, cfg.n_embd);
        let embed_b = embed_op.bind(gpu, &step, &ids, &w.token_embd, &x);
        let mut layer_ops = Vec::with_capacity(cfg.n_layers);
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for (i, lw) in w.layers.iter().enumerate() {
            let ops = LayerOps {
                norm: RmsNorm::new(gpu, cfg.n_embd, cfg.rms_eps, false),
                q: Matmul::new(gpu, lw.wq.ty, lw.wq.k, lw.wq.n, false),
                k: Matmul::new(gpu, lw.wk.ty, lw.wk.k, lw.wk.n, false),
                v: Matmul::new(gpu, lw.wv.ty, lw.wv.k, lw.wv.n, false),
                rope_q: Rope::new(gpu, nh, d, cfg.rope_base),
                rope_k: Rope::new(gpu, nkv, d, cfg.rope_base),
                store: KvStore::new(gpu, nkv, d, ps),
                attn: AttentionPaged::new(gpu, nh, nkv, d, ps),
                o: Matmul::new(gpu, lw.wo.ty, lw.wo.k, lw.wo.n, true),
                gate: Matmul::new(gpu, lw.w_gate.ty, lw.w_gate.k, lw.w_gate.n, false),
                up: Matmul::new(gpu, lw.w_up.ty, lw.w_up.k, lw.w_up.n, false),
                silu: SiluMul::new(gpu, cfg.n_ff),
                down: Matmul::new(gpu, lw.w_down.ty, lw.w_down.k, lw.w_down.n, true),
            };
            let (kc, vc) = (&pool.k[i], &pool.v[i]);
            layers.push(LayerPlan {
                attn_norm: ops.norm.bind(gpu, &step, &x, &lw.attn_norm, &h),
                q: ops.q.bind(gpu, &step, &h, &lw.wq, &q),
                k: ops.k.bind(gpu, &step, &h, &lw.wk, &k),
                v: ops.v.bind(gpu, &step, &h, &lw.wv, &v),
                rope_q: ops.rope_q.bind(gpu, &step, &q),
                rope_k: ops.rope_k.bind(gpu, &step, &k),
                store: ops.store.bind(gpu, &step, &k, &v, &page_table, kc, vc),
                attn: ops.attn.bind(gpu, &step, &q, &page_table, kc, vc, &att),
                o: ops.o.bind(gpu, &step, &att, &lw.wo, &x),
                ffn_norm: ops.norm.bind(gpu, &step, &x, &lw.ffn_norm, &h),
                gate: ops.gate.bind(gpu, &step, &h, &lw.w_gate, &gate),
                up: ops.up.bind(gpu, &step, &h, &lw.w_up, &up),
                silu: ops.silu.bind(gpu, &step, &gate, &up, &ffn),
                down: ops.down.bind(gpu, &step, &ffn, &lw.w_down, &x),
            });
            layer_ops.push(ops);
        }
        let final_norm_op = RmsNorm::new(gpu, cfg.n_embd, cfg.rms_eps, true);
        let final_norm_b = final_norm_op.bind(gpu, &step, &x, &w.output_norm, &last);
        let head = w.lm_head();
        let lm_head_op = Matmul::new(gpu, head.ty, head.k, head.n, false);
        let lm_head_b = lm_head_op.bind(gpu, &step_last, &last, head, &logits);
        Ok(Self {
            max_batch,
            max_pages,
            vocab: cfg.vocab_size,
            step,
            step_last,
            ids,
            page_table,
            logits,
            embed: (embed_op, embed_b),
            layer_ops,
            layers,
            final_norm: (final_norm_op, final_norm_b),
            lm_head: (lm_head_op, lm_head_b),
        })
    }

    /// Runs `tokens` (at most `max_batch`) at positions `start_pos..`, writing their K/V into
    /// the pages of `page_table` (which must cover every position up to the last token).
    /// Returns the last token's logits when `want_logits`.
    pub async fn run(&self, gpu: &Gpu, tokens: &[u32], start_pos: usize, page_table: &[u32], want_logits: bool) -> Result<Option<Vec<f32>>, EngineError> {
        let n = tokens.len();
        assert!(n > 0 && n <= self.max_batch, "batch of {n} tokens outside 1..={}", self.max_batch);
        assert!(page_table.len() <= self.max_pages, "page table of {} pages over {}", page_table.len(), self.max_pages);
        let q = &gpu.queue;
        q.write_buffer(&self.ids, 0, bytemuck::cast_slice(tokens));
        q.write_buffer(&self.page_table, 0, bytemuck::cast_slice(page_table));
        let step = StepParams { n_tokens: n as u32, start_pos: start_pos as u32, ..Default::default() };
        q.write_buffer(&self.step, 0, bytemuck::bytes_of(&step));
        let last = StepParams { n_tokens: 1, start_pos: (start_pos + n - 1) as u32, ..Default::default() };
        q.write_buffer(&self.step_last, 0, bytemuck::bytes_of(&last));

        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("forward"), timestamp_writes: None });
            let t = n as u32;
            self.embed.0.encode(&mut pass, &self.embed.1, t);
            for (ops, b) in self.layer_ops.iter().zip(&self.layers) {
                ops.norm.encode(&mut pass, &b.attn_norm, t);
                ops.q.encode(&mut pass, &b.q, t);
                ops.k.encode(&mut pass, &b.k, t);
                ops.v.encode(&mut pass, &b.v, t);
                ops.rope_q.encode(&mut pass, &b.rope_q, t);
                ops.rope_k.encode(&mut pass, &b.rope_k, t);
                ops.store.encode(&mut pass, &b.store, t);
                ops.attn.encode(&mut pass, &b.attn, t);
                ops.o.encode(&mut pass, &b.o, t);
                ops.norm.encode(&mut pass, &b.ffn_norm, t);
                ops.gate.encode(&mut pass, &b.gate, t);
                ops.up.encode(&mut pass, &b.up, t);
                ops.silu.encode(&mut pass, &b.silu, t);
                ops.down.encode(&mut pass, &b.down, t);
            }
            if want_logits {
                self.final_norm.0.encode(&mut pass, &self.final_norm.1, t);
                self.lm_head.0.encode(&mut pass, &self.lm_head.1, 1);
            }
        }
        q.submit([enc.finish()]);
        if !want_logits {
            return Ok(None);
        }
        Ok(Some(read_f32(gpu, &self.logits, 0, self.vocab as u64).await?))
    }
}
