//! Where a forward pass's dispatches go, and what each one cost.
//!
//! A `Recorder` either puts every op into one compute pass (how the engine always runs), or,
//! when profiling, gives each op its own pass with GPU timestamps at its start and end
//! (`wgpu::Features::TIMESTAMP_QUERY`: Vulkan drivers, llvmpipe included, and Chromium have
//! it). Either way it counts the dispatches each op made, so `bench throughput --profile` can
//! print dispatches per layer, GPU time per op and bytes read back per token.

use super::readback::map_read_untracked;
use super::{Gpu, GpuError};

/// What an op is, for the profile's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpRole {
    Embed,
    QkvMatmul,
    QkNorm,
    Attention,
    OutMatmul,
    GateUpMatmul,
    Glu,
    GatedMatmul,
    DownMatmul,
    PostNorm,
    FinalNorm,
    LmHead,
    Top2,
    TopK,
}

impl OpRole {
    pub fn name(self) -> &'static str {
        match self {
            OpRole::Embed => "embed",
            OpRole::QkvMatmul => "rmsnorm + q/k/v matmul + rope + kv write",
            OpRole::QkNorm => "q/k norm + rope + k write",
            OpRole::Attention => "attention",
            OpRole::OutMatmul => "o matmul (+ residual)",
            OpRole::GateUpMatmul => "rmsnorm + gate/up matmul",
            OpRole::Glu => "act·mul",
            OpRole::GatedMatmul => "rmsnorm + gate/up matmul + act·mul",
            OpRole::DownMatmul => "down matmul (+ residual)",
            OpRole::PostNorm => "post norm + residual",
            OpRole::FinalNorm => "final rmsnorm",
            OpRole::LmHead => "lm head",
            OpRole::Top2 => "greedy pick (top-2)",
            OpRole::TopK => "top-k candidates",
        }
    }

    /// Whether the op runs once per layer (the rest run once per forward pass).
    pub fn per_layer(self) -> bool {
        !matches!(self, OpRole::Embed | OpRole::FinalNorm | OpRole::LmHead | OpRole::Top2 | OpRole::TopK)
    }
}

/// One op as recorded: its role and how many dispatches it made.
#[derive(Debug, Clone, Copy)]
pub struct RecordedOp {
    pub role: OpRole,
    pub dispatches: u32,
}

// One lives on the stack for the length of a forward pass: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
enum Mode<'e> {
    /// Every op into this one pass.
    OnePass(wgpu::ComputePass<'static>),
    /// Each op in its own pass on `enc`, timestamped into `queries` (two per op).
    Timed { enc: &'e mut wgpu::CommandEncoder, queries: &'e wgpu::QuerySet, capacity: u32 },
}

pub struct Recorder<'e> {
    mode: Mode<'e>,
    ops: Vec<RecordedOp>,
}

impl<'e> Recorder<'e> {
    /// Records into one compute pass on `enc`, ended by `finish`.
    pub fn one_pass(enc: &'e mut wgpu::CommandEncoder, label: &str) -> Self {
        let pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(label), timestamp_writes: None }).forget_lifetime();
        Self { mode: Mode::OnePass(pass), ops: Vec::new() }
    }

    /// Records each op into its own timestamped pass (ops past the query set's capacity run
    /// untimed, and `Profiler::collect` refuses the pass).
    fn timed(enc: &'e mut wgpu::CommandEncoder, profiler: &'e Profiler) -> Self {
        Self { mode: Mode::Timed { enc, queries: &profiler.queries, capacity: profiler.capacity }, ops: Vec::new() }
    }

    /// Encodes one op of `role` that makes `dispatches` dispatches.
    pub fn op(&mut self, role: OpRole, dispatches: u32, encode: impl FnOnce(&mut wgpu::ComputePass<'_>)) {
        let index = self.ops.len() as u32;
        self.ops.push(RecordedOp { role, dispatches });
        match &mut self.mode {
            Mode::OnePass(pass) => encode(pass),
            Mode::Timed { enc, queries, capacity } => {
                let timestamp_writes = (2 * index + 1 < *capacity).then(|| wgpu::ComputePassTimestampWrites {
                    query_set: queries,
                    beginning_of_pass_write_index: Some(2 * index),
                    end_of_pass_write_index: Some(2 * index + 1),
                });
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(role.name()), timestamp_writes });
                encode(&mut pass);
            }
        }
    }

    /// Ends the recording: the ops in order.
    pub fn finish(self) -> Vec<RecordedOp> {
        self.ops
    }
}

/// One profiled forward pass: its batch size and each op with its GPU time.
#[derive(Debug, Clone)]
pub struct PassProfile {
    pub n_tokens: usize,
    pub ops: Vec<(RecordedOp, f64)>,
}

/// Timestamp queries for the ops of forward passes, and what they measured.
pub struct Profiler {
    queries: wgpu::QuerySet,
    capacity: u32,
    resolve: wgpu::Buffer,
    staging: wgpu::Buffer,
    period_ns: f64,
    pub passes: Vec<PassProfile>,
}

impl Profiler {
    /// A profiler for passes of up to `max_ops` ops, or `None` when the device has no
    /// timestamp queries.
    pub fn new(gpu: &Gpu, max_ops: usize) -> Option<Self> {
        if !gpu.device.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            return None;
        }
        // WebGPU caps a query set at 4096 queries.
        let capacity = (2 * max_ops).min(4096) as u32;
        let bytes = capacity as u64 * 8;
        let queries = gpu.device.create_query_set(&wgpu::QuerySetDescriptor { label: Some("profile"), ty: wgpu::QueryType::Timestamp, count: capacity });
        let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile.resolve"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile.staging"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Some(Self { queries, capacity, resolve, staging, period_ns: gpu.queue.get_timestamp_period() as f64, passes: Vec::new() })
    }

    pub fn recorder<'e>(&'e self, enc: &'e mut wgpu::CommandEncoder) -> Recorder<'e> {
        Recorder::timed(enc, self)
    }

    /// Appends to `enc` the copy of the timestamps of `n_ops` ops to the CPU side.
    pub fn resolve(&self, enc: &mut wgpu::CommandEncoder, n_ops: usize) {
        let n = (2 * n_ops as u32).min(self.capacity);
        enc.resolve_query_set(&self.queries, 0..n, &self.resolve, 0);
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.staging, 0, n as u64 * 8);
    }

    /// Reads the timestamps of a submitted pass (after `resolve`) and keeps its profile.
    pub async fn collect(&mut self, n_tokens: usize, ops: Vec<RecordedOp>) -> Result<(), GpuError> {
        if 2 * ops.len() > self.capacity as usize {
            return Err(GpuError::Readback(format!("a pass of {} ops is over the profiler's {} timestamps", ops.len(), self.capacity)));
        }
        let bytes = map_read_untracked(&self.staging, ops.len() as u64 * 16).await?;
        let ticks: &[u64] = bytemuck::cast_slice(&bytes);
        let timed = ops.into_iter().enumerate().map(|(i, op)| (op, ticks[2 * i + 1].saturating_sub(ticks[2 * i]) as f64 * self.period_ns)).collect();
        self.passes.push(PassProfile { n_tokens, ops: timed });
        Ok(())
    }
}
