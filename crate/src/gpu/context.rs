//! The device, its limits and small buffer helpers.

use super::pipelines::PipelineCache;
use wgpu::util::DeviceExt;

/// Why the GPU could not be used or an upload/readback failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no WebGPU/Vulkan adapter found: {0}")]
    NoAdapter(String),
    #[error("device request failed: {0}")]
    RequestDevice(String),
    #[error("buffer readback failed: {0}")]
    Readback(String),
    #[error("readback of {bytes} bytes at byte {offset} exceeds the buffer's {size} bytes")]
    ReadbackRange { offset: u64, bytes: u64, size: u64 },
    #[error("weight `{name}`: {reason}")]
    Weight { name: String, reason: String },
}

/// Which limits to request from the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitsPolicy {
    /// Everything the adapter offers (`required_limits = adapter.limits()`).
    Adapter,
    /// `wgpu::Limits::default()`: the WebGPU floor every browser guarantees, to test that the
    /// kernels fit where the most constrained devices (iOS Safari) stand.
    WebGpuDefault,
}

/// Per-forward-call parameters, one small uniform buffer written by the engine with
/// `queue.write_buffer` before each step; every kernel reads its row count from it.
#[repr(C)]
#[derive(bytemuck::Pod, bytemuck::Zeroable, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepParams {
    /// Rows (tokens) in this step; kernels skip rows at or past it.
    pub n_tokens: u32,
    /// Sequence position of row 0 (RoPE position, KV slot, causal limit).
    pub start_pos: u32,
    pub _pad: [u32; 2],
}

impl StepParams {
    pub fn new(n_tokens: u32, start_pos: u32) -> Self {
        Self { n_tokens, start_pos, _pad: [0; 2] }
    }
}

/// A device and queue with the pipeline cache every op builds through.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    pub info: wgpu::AdapterInfo,
    pub(crate) pipelines: PipelineCache,
}

impl Gpu {
    /// Opens the default adapter and a device with the limits `policy` asks for.
    pub async fn new(policy: LimitsPolicy) -> Result<Gpu, GpuError> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| GpuError::NoAdapter(e.to_string()))?;
        let required_limits = match policy {
            LimitsPolicy::Adapter => adapter.limits(),
            LimitsPolicy::WebGpuDefault => wgpu::Limits::default(),
        };
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("radixlm"),
                required_features: wgpu::Features::empty(),
                required_limits: required_limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| GpuError::RequestDevice(e.to_string()))?;
        Ok(Gpu { limits: device.limits(), info: adapter.get_info(), device, queue, pipelines: PipelineCache::default() })
    }

    /// A storage buffer of `bytes` (rounded up to 4) that can be written and read back.
    pub fn storage(&self, label: &str, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// A storage buffer holding `data`, zero-padded to a multiple of 4 bytes.
    pub fn upload(&self, label: &str, data: &[u8]) -> wgpu::Buffer {
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        if data.len() % 4 == 0 && !data.is_empty() {
            return self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents: data, usage });
        }
        let mut padded = data.to_vec();
        padded.resize(data.len().max(1).next_multiple_of(4), 0);
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents: &padded, usage })
    }

    /// A uniform buffer holding `v`, writable later with `queue.write_buffer`.
    pub fn uniform<T: bytemuck::Pod>(&self, label: &str, v: &T) -> wgpu::Buffer {
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytemuck::bytes_of(v),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        })
    }
}
