// matmul_tiled's workgroup tiles in f32 (gpu/ops/matmul.rs KERNEL).
alias TileVec = vec4<f32>;
