//! Copies results back to the CPU. The functions await `map_async` through a channel and never
//! poll the device themselves: in the browser the event loop drives mapping, natively
//! `executor::block_on` does.

use super::{Gpu, GpuError};

/// `count` f32 values of `buf` starting at element `offset_elems`.
pub async fn read_f32(gpu: &Gpu, buf: &wgpu::Buffer, offset_elems: u64, count: u64) -> Result<Vec<f32>, GpuError> {
    Ok(bytemuck::cast_slice(&read_bytes(gpu, buf, offset_elems * 4, count * 4).await?).to_vec())
}

/// `count` u32 values of `buf` starting at element `offset_elems`.
pub async fn read_u32(gpu: &Gpu, buf: &wgpu::Buffer, offset_elems: u64, count: u64) -> Result<Vec<u32>, GpuError> {
    Ok(bytemuck::cast_slice(&read_bytes(gpu, buf, offset_elems * 4, count * 4).await?).to_vec())
}

/// Resolves when the GPU has finished the work submitted so far, so a step that queues work
/// without reading anything back still takes as long as that work (and an abort between steps
/// lands after it, not after every queued step).
pub async fn work_done(gpu: &Gpu) -> Result<(), GpuError> {
    let (tx, rx) = futures_channel::oneshot::channel();
    gpu.queue.on_submitted_work_done(move || {
        let _ = tx.send(());
    });
    rx.await.map_err(|_| GpuError::Readback("device dropped the work-done callback".into()))
}

async fn read_bytes(gpu: &Gpu, buf: &wgpu::Buffer, offset: u64, len: u64) -> Result<Vec<u8>, GpuError> {
    if offset.checked_add(len).is_none_or(|end| end > buf.size()) {
        return Err(GpuError::ReadbackRange { offset, bytes: len, size: buf.size() });
    }
    if len == 0 {
        return Ok(Vec::new());
    }
    let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: len,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
    enc.copy_buffer_to_buffer(buf, offset, &staging, 0, len);
    gpu.queue.submit([enc.finish()]);
    map_read(gpu, &staging, len).await
}

/// The first `len` bytes of a `MAP_READ` buffer once the GPU has written it (the copy into it
/// must be submitted already); the buffer is unmapped again, ready for reuse. Counted in
/// `Gpu::bytes_read_back`.
pub async fn map_read(gpu: &Gpu, staging: &wgpu::Buffer, len: u64) -> Result<Vec<u8>, GpuError> {
    gpu.count_read_back(len);
    map_read_untracked(staging, len).await
}

/// `map_read` without counting: the profiler's own timestamps are not the engine's traffic.
pub(crate) async fn map_read_untracked(staging: &wgpu::Buffer, len: u64) -> Result<Vec<u8>, GpuError> {
    let (tx, rx) = futures_channel::oneshot::channel();
    staging.map_async(wgpu::MapMode::Read, ..len, move |r| {
        let _ = tx.send(r);
    });
    rx.await
        .map_err(|_| GpuError::Readback("device dropped the map callback".into()))?
        .map_err(|e| GpuError::Readback(e.to_string()))?;
    let bytes = staging.get_mapped_range(..len).map_err(|e| GpuError::Readback(e.to_string()))?.to_vec();
    staging.unmap();
    Ok(bytes)
}
