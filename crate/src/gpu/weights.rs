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
    /// Rows from a point on in another type than `ty` (a weight of one part only).
    pub hi: Option<HiRows>,
    pub parts: Vec<WeightPart>,
}

/// The rows of a stacked weight from `first_row` on, in type `ty` rather than the weight's: a
/// q/k/v weight whose v (or k and v) a quantization mix keeps in more bits (matmul_io.wgsl HI_ROW).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HiRows {
    pub first_row: usize,
    pub ty: GgmlType,
}

impl GpuWeight {
    /// Uploads `data` (n rows of k values in `ty`'s format), split so that no part exceeds the
    /// device's `max_storage_buffer_binding_size` (128 MiB on llvmpipe and the WebGPU floor).
    pub fn upload(gpu: &Gpu, name: &str, ty: GgmlType, k: usize, n: usize, data: &[u8]) -> Result<Self, GpuError> {
        Self::upload_with_max_part_bytes(gpu, name, ty, k, n, data, max_part_bytes(gpu))
    }

    /// As `upload`, with an explicit cap on each part's bytes (tests force splitting with it).
    pub fn upload_with_max_part_bytes(gpu: &Gpu, name: &str, ty: GgmlType, k: usize, n: usize, data: &[u8], max_part_bytes: u64) -> Result<Self, GpuError> {
        Self::allocate_with_max_part_bytes(gpu, name, ty, k, n, max_part_bytes)?.filled(gpu, name, data)
    }

    /// The weight with `data` (the whole weight's bytes) written into its parts.
    fn filled(self, gpu: &Gpu, name: &str, data: &[u8]) -> Result<Self, GpuError> {
        if data.len() != self.n_bytes() {
            let (n, k) = (self.n, self.k);
            let types = match self.hi {
                None => self.ty.name().to_string(),
                Some(hi) => format!("in {} then {} from row {}", self.ty.name(), hi.ty.name(), hi.first_row),
            };
            let reason = format!("{} bytes given, {n} rows of {k} {types} need {}", data.len(), self.n_bytes());
            return Err(GpuError::Weight { name: name.into(), reason });
        }
        for (buffer, range) in self.part_ranges() {
            write_padded(gpu, buffer, 0, &data[range]);
        }
        Ok(self)
    }

    /// Buffers for the weight, split by rows to fit the device's storage-binding limit, to be
    /// filled with `queue.write_buffer` as the bytes arrive (`part_ranges` says which go where).
    pub fn allocate(gpu: &Gpu, name: &str, ty: GgmlType, k: usize, n: usize) -> Result<Self, GpuError> {
        Self::allocate_with_max_part_bytes(gpu, name, ty, k, n, max_part_bytes(gpu))
    }

    /// As `allocate_two_types`, written with `data` (the rows of both types one after another).
    pub fn upload_two_types(gpu: &Gpu, name: &str, ty: GgmlType, k: usize, n: usize, hi: HiRows, data: &[u8]) -> Result<Option<Self>, GpuError> {
        Self::allocate_two_types(gpu, name, ty, k, n, hi)?.map(|w| w.filled(gpu, name, data)).transpose()
    }

    /// One buffer for `n` rows of `k`, those before `hi.first_row` of `ty` and the rest of
    /// `hi.ty`; None where they do not fit one storage binding.
    pub fn allocate_two_types(gpu: &Gpu, name: &str, ty: GgmlType, k: usize, n: usize, hi: HiRows) -> Result<Option<Self>, GpuError> {
        let err = |reason: String| GpuError::Weight { name: name.into(), reason };
        let row_bytes = |ty: GgmlType| ty.row_bytes(k).ok_or_else(|| err(format!("row length {k} is not a whole number of {} blocks", ty.name())));
        if k == 0 || hi.first_row == 0 || hi.first_row >= n {
            return Err(err(format!("{n} rows of {k} with the second type from row {}", hi.first_row)));
        }
        let bytes = (hi.first_row as u64) * row_bytes(ty)? as u64 + ((n - hi.first_row) as u64) * row_bytes(hi.ty)? as u64;
        if bytes.next_multiple_of(4) > max_part_bytes(gpu) {
            return Ok(None);
        }
        let part = WeightPart { buffer: gpu.storage(&format!("{name}[0..]"), bytes), first_row: 0, rows: n };
        Ok(Some(Self { ty, k, n, hi: Some(hi), parts: vec![part] }))
    }

    fn allocate_with_max_part_bytes(gpu: &Gpu, name: &str, ty: GgmlType, k: usize, n: usize, max_part_bytes: u64) -> Result<Self, GpuError> {
        let err = |reason: String| GpuError::Weight { name: name.into(), reason };
        let row_bytes = ty.row_bytes(k).ok_or_else(|| err(format!("row length {k} is not a whole number of {} blocks", ty.name())))?;
        if k == 0 || n == 0 {
            return Err(err(format!("empty shape ({n} rows of {k})")));
        }
        row_bytes.checked_mul(n).ok_or_else(|| err(format!("{n} rows of {row_bytes} bytes overflow")))?;
        // Parts are padded to 4 bytes; the padding must fit under the cap too.
        let mut rows_per_part = (max_part_bytes / row_bytes as u64).min(n as u64) as usize;
        if ((rows_per_part * row_bytes).next_multiple_of(4)) as u64 > max_part_bytes {
            rows_per_part -= 1;
        }
        // Parts of a split weight hold whole pairs of rows: RoPE turns rows 2i and 2i + 1
        // together in the attention input's epilogue.
        if rows_per_part < n {
            rows_per_part -= rows_per_part % 2;
        }
        if rows_per_part == 0 {
            return Err(err(format!("one row ({row_bytes} bytes) exceeds the {max_part_bytes}-byte storage binding limit")));
        }
        let parts = (0..n)
            .step_by(rows_per_part)
            .map(|first_row| {
                let rows = rows_per_part.min(n - first_row);
                WeightPart { buffer: gpu.storage(&format!("{name}[{first_row}..]"), (rows * row_bytes) as u64), first_row, rows }
            })
            .collect();
        Ok(Self { ty, k, n, hi: None, parts })
    }

    /// The byte where row r starts in the GGUF data of the whole weight.
    fn row_offset(&self, r: usize) -> usize {
        // Row lengths were checked when the weight was allocated.
        let row_bytes = |ty: GgmlType| ty.row_bytes(self.k).unwrap_or(0);
        match self.hi {
            Some(hi) if r > hi.first_row => hi.first_row * row_bytes(self.ty) + (r - hi.first_row) * row_bytes(hi.ty),
            _ => r * row_bytes(self.ty),
        }
    }

    /// Bytes of the whole weight as stored in the GGUF file.
    pub fn n_bytes(&self) -> usize {
        self.row_offset(self.n)
    }

    /// Each part's buffer and the byte range of the weight's data it holds.
    pub fn part_ranges(&self) -> impl Iterator<Item = (&wgpu::Buffer, std::ops::Range<usize>)> {
        self.parts.iter().map(move |p| (&p.buffer, self.row_offset(p.first_row)..self.row_offset(p.first_row + p.rows)))
    }
}

fn max_part_bytes(gpu: &Gpu) -> u64 {
    gpu.limits.max_storage_buffer_binding_size.min(gpu.limits.max_buffer_size)
}

/// Writes `data` at byte `offset` (a multiple of 4) of `buffer`, zero-padding its tail to the
/// 4-byte multiple `write_buffer` requires (buffers are allocated rounded up to 4).
pub fn write_padded(gpu: &Gpu, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
    let whole = data.len() / 4 * 4;
    if whole > 0 {
        gpu.queue.write_buffer(buffer, offset, &data[..whole]);
    }
    if whole < data.len() {
        let mut tail = [0u8; 4];
        tail[..data.len() - whole].copy_from_slice(&data[whole..]);
        gpu.queue.write_buffer(buffer, offset + whole as u64, &tail);
    }
}
