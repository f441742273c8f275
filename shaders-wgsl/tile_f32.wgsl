// matmul_tiled's workgroup tiles in f32 (gpu/ops/matmul.rs KERNEL).
alias TileVec = vec4<f32>;
// f32 holds x ⊙ norm_w whatever its outliers: the sums are scaled by 1 / rms(x) at the end.
const TILE_PRENORM: bool = false;
