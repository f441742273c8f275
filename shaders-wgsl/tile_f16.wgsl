// matmul_tiled's workgroup tiles in f16 where the adapter has shader-f16 (gpu/ops/matmul.rs
// KERNEL_F16): half the workgroup memory and its traffic. Weights dequantized and activations
// are rounded to f16 once, as they enter the tile; products and sums stay f32.
alias TileVec = vec4<f16>;
// With the RMSNorm prologue, activations are normalised before they are rounded: x ⊙ norm_w
// alone can pass f16's 65,504 where the residual stream has outliers (a conversion WGSL leaves
// indeterminate), x / rms(x) ⊙ norm_w stays within sqrt(K) · max(norm_w).
const TILE_PRENORM: bool = true;
