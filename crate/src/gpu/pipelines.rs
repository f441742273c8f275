//! One get-or-create cache of compute pipelines, shader modules and bind-group layouts, so
//! each (kernel, entry point, specialisation) is compiled once per device; and of the
//! placeholder buffers bound where a dispatch reads nothing.

use super::Gpu;
use std::collections::HashMap;
use std::sync::Mutex;

/// The kernel family: one WGSL file each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    Embed,
    RmsNorm,
    Matmul,
    /// matmul.wgsl with its prefill tiles in f16 (shader-f16).
    MatmulF16,
    /// matmul.wgsl with matvec_subgroup.wgsl (subgroup operations).
    MatmulSubgroup,
    /// matvec_blocks.wgsl: one-token products per block type.
    MatvecBlocks,
    KvQuant,
    QkNorm,
    AttentionPaged,
    Glu,
    Top2,
    TopK,
}

/// How a kernel sees one binding of group 0, in binding order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    Uniform,
    Read,
    ReadWrite,
}

/// Identifies one compiled pipeline: kernel file, entry point and the values of its WGSL
/// `override` constants (as f64 bits, the type wgpu passes them in).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PipelineKey {
    pub op: OpKind,
    pub entry: &'static str,
    pub constants: Vec<(&'static str, u64)>,
}

impl PipelineKey {
    pub fn new(op: OpKind, entry: &'static str) -> Self {
        Self { op, entry, constants: Vec::new() }
    }

    /// Sets override constant `name` (u32, f32 and bool overrides all travel as f64).
    pub fn with(mut self, name: &'static str, value: impl Into<f64>) -> Self {
        self.constants.push((name, value.into().to_bits()));
        self
    }
}

/// A kernel's source and binding layout: what is needed to build any of its pipelines.
pub struct Kernel {
    pub op: OpKind,
    pub source: &'static str,
    pub slots: &'static [Slot],
}

#[derive(Default)]
pub(crate) struct PipelineCache {
    placeholders: Mutex<HashMap<&'static str, wgpu::Buffer>>,
    modules: Mutex<HashMap<OpKind, wgpu::ShaderModule>>,
    layouts: Mutex<HashMap<&'static [Slot], (wgpu::BindGroupLayout, wgpu::PipelineLayout)>>,
    pipelines: Mutex<HashMap<PipelineKey, wgpu::ComputePipeline>>,
}

// A poisoned lock only means another thread panicked mid-insert; the maps stay consistent.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Gpu {
    /// The bind-group layout shared by every pipeline of kernels with these `slots`.
    pub fn bind_group_layout(&self, slots: &'static [Slot]) -> wgpu::BindGroupLayout {
        self.layouts(slots).0
    }

    fn layouts(&self, slots: &'static [Slot]) -> (wgpu::BindGroupLayout, wgpu::PipelineLayout) {
        let mut layouts = lock(&self.pipelines.layouts);
        layouts
            .entry(slots)
            .or_insert_with(|| {
                let entries: Vec<_> = slots
                    .iter()
                    .enumerate()
                    .map(|(i, slot)| wgpu::BindGroupLayoutEntry {
                        binding: i as u32,
                        visibility: wgpu::ShaderStages::COMPUTE,
                        ty: wgpu::BindingType::Buffer {
                            ty: match slot {
                                Slot::Uniform => wgpu::BufferBindingType::Uniform,
                                Slot::Read => wgpu::BufferBindingType::Storage { read_only: true },
                                Slot::ReadWrite => wgpu::BufferBindingType::Storage { read_only: false },
                            },
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                        count: None,
                    })
                    .collect();
                let bgl = self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: None, entries: &entries });
                let pl = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: None,
                    bind_group_layouts: &[Some(&bgl)],
                    immediate_size: 0,
                });
                (bgl, pl)
            })
            .clone()
    }

    /// The pipeline for `key`, compiled from `kernel` on first use.
    pub fn pipeline(&self, kernel: &Kernel, key: PipelineKey) -> wgpu::ComputePipeline {
        debug_assert_eq!(kernel.op, key.op);
        if let Some(p) = lock(&self.pipelines.pipelines).get(&key) {
            return p.clone();
        }
        let module = lock(&self.pipelines.modules)
            .entry(kernel.op)
            .or_insert_with(|| {
                self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(&format!("{:?}", kernel.op)),
                    source: wgpu::ShaderSource::Wgsl(kernel.source.into()),
                })
            })
            .clone();
        let (_, layout) = self.layouts(kernel.slots);
        let constants: Vec<(&str, f64)> = key.constants.iter().map(|&(n, bits)| (n, f64::from_bits(bits))).collect();
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(key.entry),
            layout: Some(&layout),
            module: &module,
            entry_point: Some(key.entry),
            compilation_options: wgpu::PipelineCompilationOptions { constants: &constants, zero_initialize_workgroup_memory: false },
            cache: None,
        });
        lock(&self.pipelines.pipelines).insert(key, pipeline.clone());
        pipeline
    }

    /// The buffer named `label` bound where a kernel declares a binding that a dispatch does not
    /// read (WebGPU binds every declared binding): made once per device, zero-filled, `bytes`
    /// long (at least what the binding's type needs).
    pub fn placeholder(&self, label: &'static str, bytes: u64, slot: Slot) -> wgpu::Buffer {
        lock(&self.pipelines.placeholders)
            .entry(label)
            .or_insert_with(|| {
                let usage = match slot {
                    Slot::Uniform => wgpu::BufferUsages::UNIFORM,
                    Slot::Read | Slot::ReadWrite => wgpu::BufferUsages::STORAGE,
                };
                self.device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size: bytes.max(4).next_multiple_of(4), usage, mapped_at_creation: false })
            })
            .clone()
    }

    /// A bind group for a kernel with `slots`, binding `buffers` whole, in order.
    pub fn bind_group(&self, label: &str, slots: &'static [Slot], buffers: &[&wgpu::Buffer]) -> wgpu::BindGroup {
        debug_assert_eq!(slots.len(), buffers.len(), "{label}: one buffer per slot");
        let entries: Vec<_> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor { label: Some(label), layout: &self.bind_group_layout(slots), entries: &entries })
    }
}

/// Splits `groups` workgroups over x and y so neither exceeds 65535 (WebGPU's default
/// `maxComputeWorkgroupsPerDimension`); kernels rebuild the linear id as
/// `wid.y * nwg.x + wid.x` and skip ids at or past their count.
pub fn dispatch_linear(pass: &mut wgpu::ComputePass, groups: u32) {
    const MAX: u32 = 65535;
    if groups == 0 {
        return;
    }
    if groups <= MAX {
        pass.dispatch_workgroups(groups, 1, 1);
    } else {
        pass.dispatch_workgroups(MAX, groups.div_ceil(MAX), 1);
    }
}
