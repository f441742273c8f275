//! The device, its limits and small buffer helpers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
    #[error("the GPU ran out of memory while allocating {what}; try a smaller model or KV budget, or close other tabs and apps")]
    OutOfMemory { what: String },
    #[error("the GPU device was lost ({0}); the model must be loaded again")]
    DeviceLost(String),
    #[error("the adapter {0} has no timestamp queries: GPU times per kernel cannot be measured")]
    NoTimestamps(String),
    #[error("GPU error: {0}")]
    Uncaptured(String),
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

/// Features the device gets where the adapter has them. Timestamp queries cost nothing unless
/// used: the profiler uses them. shader-f16 gives the prefill products f16 tiles
/// (gpu/ops/matmul.rs KERNEL_F16), subgroups the decode products their sums (KERNEL_SUBGROUP);
/// wgpu's WebGPU backend cannot ask for subgroups.
#[cfg(not(target_arch = "wasm32"))]
const OPTIONAL_FEATURES: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY.union(wgpu::Features::SHADER_F16).union(wgpu::Features::SUBGROUP);
#[cfg(target_arch = "wasm32")]
const OPTIONAL_FEATURES: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY.union(wgpu::Features::SHADER_F16);

/// A device and queue with the pipeline cache every op builds through.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    pub info: wgpu::AdapterInfo,
    pub(crate) pipelines: PipelineCache,
    health: Arc<Health>,
    /// Bytes copied from the GPU to the CPU so far (`readback::map_read`).
    read_back: AtomicU64,
}

/// What the device reported on its own: errors no scope captured, and its loss. wgpu's default
/// handler panics on an uncaptured error, which in wasm kills the module; ours keeps the error
/// for the engine to return from the request it belongs to.
#[derive(Default)]
struct Health {
    uncaptured: Mutex<Option<String>>,
    lost: Mutex<Option<String>>,
}

/// Allocations whose out-of-memory and validation errors become an error naming `what`.
/// wgpu error scopes are a per-thread stack: pop in reverse order of pushing.
pub struct AllocScope {
    what: String,
    validation: wgpu::ErrorScopeGuard,
    oom: wgpu::ErrorScopeGuard,
}

impl AllocScope {
    pub async fn finish(self) -> Result<(), GpuError> {
        let validation = self.validation.pop().await;
        let oom = self.oom.pop().await;
        match (oom, validation) {
            (Some(_), _) => Err(GpuError::OutOfMemory { what: self.what }),
            (None, Some(e)) => Err(GpuError::Uncaptured(format!("allocating {}: {e}", self.what))),
            (None, None) => Ok(()),
        }
    }
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
                required_features: adapter.features() & OPTIONAL_FEATURES,
                required_limits: required_limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| GpuError::RequestDevice(e.to_string()))?;
        let health = Arc::new(Health::default());
        let h = health.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut slot = h.uncaptured.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| e.to_string());
        }));
        let h = health.clone();
        device.set_device_lost_callback(move |reason, message| {
            let mut slot = h.lost.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| format!("{reason:?}: {message}"));
        });
        Ok(Gpu {
            limits: device.limits(),
            info: adapter.get_info(),
            device,
            queue,
            pipelines: PipelineCache::default(),
            health,
            read_back: AtomicU64::new(0),
        })
    }

    /// Bytes read back from the GPU since the device opened.
    pub fn bytes_read_back(&self) -> u64 {
        self.read_back.load(Ordering::Relaxed)
    }

    pub(crate) fn count_read_back(&self, bytes: u64) {
        self.read_back.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Opens error scopes for allocations of `what`; `AllocScope::finish` reports their errors.
    pub fn alloc_scope(&self, what: impl Into<String>) -> AllocScope {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        AllocScope { what: what.into(), validation, oom }
    }

    /// Whether the device was lost (a driver reset, iOS taking the GPU of a background tab,
    /// `destroy`).
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why the device was lost, if it was (the reason and the driver's message).
    pub fn lost_reason(&self) -> Option<String> {
        self.health.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The device's loss or the first error no scope captured since the last call, if any.
    pub fn check(&self) -> Result<(), GpuError> {
        if let Some(reason) = self.lost_reason() {
            return Err(GpuError::DeviceLost(reason));
        }
        match self.health.uncaptured.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(GpuError::Uncaptured(e)),
            None => Ok(()),
        }
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
