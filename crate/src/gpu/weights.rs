//! GGUF tensors on the GPU, kept in their block formats (the kernels dequantize as they read)
//! and split by rows so no buffer exceeds the device's storage-binding limit.

use super::{Gpu, GpuError};
use crate::gguf::GgmlType;

/// One buffer holding rows `first_row .. first_row + rows` of a weight, as stored in GGUF.
pub struct WeightPart {
    /// (rows, row_bytes(k)) bytes in `ty`'s block format, read as `array<u32>`.
    pub buffer: wgpu::Buffer,
    pub first_row: usize,
    pub rows: usize,
}

/// A weight matrix of `n` rows of `k` values each (GGUF's (n, k) row-major layout).
pub struct GpuWeight {
    pub ty: GgmlType,
    /// Row length (the reduction dimension of a matmul).
    pub k: usize,
    /// Rows (the output dimension of a matmul; the vocabulary of an embedding).
    pub n: usize,
    pub parts: Vec<WeightPart>,
}

impl GpuWeight {
    /// Uploads `data` (n rows of k values in `ty`'s format), split so that no part exceeds the
    /// device's `max_storage_buffer_binding_size` (128 MiB on llvmpipe and the WebGPU floor).
    pub fn upload(gpu: &Gpu, name: &str, ty: GgmlType, k: usize, n: usize, data: &[u8]) -> Result<Self, GpuError> {
        let max = gpu.limits.max_storage_buffer_binding_size.min(gpu.limits.max_buffer_size);
        Self::upload_with_max_part_bytes(gpu, name, ty, k, n, data, max)
    }

    /// As `upload`, with an explicit cap on each part's bytes (tests force splitting with it).
    pub fn upload_with_max_part_bytes(gpu: &Gpu, name: &str, ty: GgmlType, k: usize, n: usize, data: &[u8], max_part_bytes: u64) -> Result<Self, GpuError> {
        let err = |reason: String| GpuError::Weight { name: name.into(), reason };
        let row_bytes = ty.row_bytes(k).ok_or_else(|| err(format!("row length {k} is not a whole number of {} blocks", ty.name())))?;
        if k == 0 || n == 0 {
            return Err(err(format!("empty shape ({n} rows of {k})")));
        }
        let expected = row_bytes.checked_mul(n).ok_or_else(|| err(format!("{n} rows of {row_bytes} bytes overflow")))?;
        if data.len() != expected {
            return Err(err(format!("{} bytes given, {n} rows of {k} {} need {expected}", data.len(), ty.name())));
        }
        // Parts are padded to 4 bytes; the padding must fit under the cap too.
        let mut rows_per_part = (max_part_bytes / row_bytes as u64).min(n as u64) as usize;
        if ((rows_per_part * row_bytes).next_multiple_of(4)) as u64 > max_part_bytes {
            rows_per_part -= 1;
        }
        if rows_per_part == 0 {
            return Err(err(format!("one row ({row_bytes} bytes) exceeds the {max_part_bytes}-byte storage binding limit")));
        }
        let parts = (0..n)
            .step_by(rows_per_part)
            .map(|first_row| {
                let rows = rows_per_part.min(n - first_row);
                let bytes = &data[first_row * row_bytes..(first_row + rows) * row_bytes];
                WeightPart { buffer: gpu.upload(&format!("{name}[{first_row}..]"), bytes), first_row, rows }
            })
            .collect();
        Ok(Self { ty, k, n, parts })
    }
}
