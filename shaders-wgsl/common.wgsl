// Shared by every kernel: the per-step parameters (gpu/context.rs `StepParams`).

struct StepParams {
    n_tokens: u32,  // rows in this step; rows at or past it are skipped
    start_pos: u32, // sequence position of row 0
    _pad0: u32,
    _pad1: u32,
}

// Linear workgroup id of a dispatch split over x and y (gpu/pipelines.rs `dispatch_linear`).
fn linear_group(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}
