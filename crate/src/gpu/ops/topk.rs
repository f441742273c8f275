//! The MAX_TOP_K largest logits with their ids (topk.wgsl), so sampling with top-k reads back
//! 512 bytes a step instead of the vocabulary's logits. Passes of the same kernel shrink the
//! candidates by CHUNK / MAX_TOP_K each until one chunk remains.

use super::wgsl;
use crate::gpu::pipelines::{Kernel, OpKind, PipelineKey, Slot};
use crate::gpu::Gpu;

pub const KERNEL: Kernel = Kernel {
    op: OpKind::TopK,
    source: wgsl!("topk.wgsl", "pick_filter.wgsl"),
    slots: &[Slot::Uniform, Slot::Read, Slot::Read, Slot::Read, Slot::Read, Slot::ReadWrite],
};

/// Candidates kept (topk.wgsl K_OUT): the largest `top_k` the GPU can serve.
pub const MAX_TOP_K: usize = 64;
/// Candidates one workgroup sorts (topk.wgsl CHUNK).
const CHUNK: u32 = 1024;
/// Bytes of the result: MAX_TOP_K (id, logit) pairs.
pub const TOPK_BYTES: u64 = MAX_TOP_K as u64 * 8;

/// topk.wgsl `SelectParams`.
#[repr(C)]
#[derive(bytemuck::Pod, bytemuck::Zeroable, Clone, Copy, Debug, Default)]
struct SelectParams {
    n_in: u32,
    from_logits: u32,
    n_banned: u32,
    masked: u32,
}

/// Decodes the kernel's output: (id, logit) pairs, largest logit first, without the padding
/// (ids past the vocabulary: fewer than MAX_TOP_K candidates) or non-finite logits.
pub fn candidates(words: &[u32]) -> Vec<(u32, f32)> {
    words.chunks_exact(2).map(|p| (p[0], f32::from_bits(p[1]))).filter(|&(id, l)| id != u32::MAX && l > f32::NEG_INFINITY && l.is_finite()).collect()
}

pub struct TopKOp {
    vocab: u32,
    pipeline: wgpu::ComputePipeline,
}

/// The passes for one logits buffer: each its own parameters and bind group.
pub struct TopKBinding {
    passes: Vec<(wgpu::BindGroup, u32)>,
    first_params: wgpu::Buffer,
    /// Where the last pass leaves the result (its first TOPK_BYTES).
    pub out: wgpu::Buffer,
}

impl TopKOp {
    pub fn new(gpu: &Gpu, vocab: usize) -> Self {
        Self { vocab: vocab as u32, pipeline: gpu.pipeline(&KERNEL, PipelineKey::new(OpKind::TopK, "select_top")) }
    }

    /// Binds `logits` (V) f32, `banned` (u32 ids, at least one word) and `allowed` (a bitmask
    /// of V bits in whole words).
    pub fn bind(&self, gpu: &Gpu, logits: &wgpu::Buffer, banned: &wgpu::Buffer, allowed: &wgpu::Buffer) -> TopKBinding {
        let k = MAX_TOP_K as u32;
        let first_chunks = self.vocab.div_ceil(CHUNK);
        // Two buffers the passes write in turn, each large enough for the first pass's output.
        let bytes = first_chunks as u64 * k as u64 * 8;
        let bufs = [gpu.storage("topk.a", bytes), gpu.storage("topk.b", bytes)];
        let first_params = gpu.uniform("topk.params", &self.first_pass(0, false));
        let mut passes = Vec::new();
        let mut n_in = self.vocab;
        loop {
            let chunks = n_in.div_ceil(CHUNK);
            let pass = passes.len();
            let (read, write) = (&bufs[(pass + 1) % 2], &bufs[pass % 2]);
            let later = (pass > 0).then(|| gpu.uniform("topk.params", &SelectParams { n_in, from_logits: 0, n_banned: 0, masked: 0 }));
            let p = later.as_ref().unwrap_or(&first_params);
            passes.push((gpu.bind_group("topk", KERNEL.slots, &[p, logits, banned, allowed, read, write]), chunks));
            if chunks == 1 {
                break;
            }
            n_in = chunks * k;
        }
        let [a, b] = bufs;
        let out = if passes.len() % 2 == 1 { a } else { b };
        TopKBinding { passes, first_params, out }
    }

    /// Sets how many of the banned ids the next passes skip, and whether they keep only the ids
    /// set in the `allowed` bitmask.
    pub fn set_filter(&self, gpu: &Gpu, binding: &TopKBinding, n_banned: u32, masked: bool) {
        gpu.queue.write_buffer(&binding.first_params, 0, bytemuck::bytes_of(&self.first_pass(n_banned, masked)));
    }

    /// The first pass's parameters: every logit in, skipping `n_banned` of the banned ids and,
    /// when `masked`, those clear in `allowed`.
    fn first_pass(&self, n_banned: u32, masked: bool) -> SelectParams {
        SelectParams { n_in: self.vocab, from_logits: 1, n_banned, masked: masked as u32 }
    }

    /// Dispatches one op makes: one per pass.
    pub fn dispatches(binding: &TopKBinding) -> u32 {
        binding.passes.len() as u32
    }

    pub fn encode(&self, pass: &mut wgpu::ComputePass, binding: &TopKBinding) {
        pass.set_pipeline(&self.pipeline);
        for (group, chunks) in &binding.passes {
            pass.set_bind_group(0, group, &[]);
            // A chunk per workgroup along x: 65535 chunks are a 67M-token vocabulary.
            pass.dispatch_workgroups(*chunks, 1, 1);
        }
    }
}
