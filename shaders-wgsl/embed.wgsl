// out[t] = dequantized row ids[t] of the embedding table times SCALE, for the table part holding
// it (one dispatch per part; rows outside the part are left to the other parts' dispatches).

override DTYPE: u32;        // ggml type id of the table
override C: u32;            // row length (embedding width)
override SCALE: f32 = 1.0;  // gemma3: sqrt(C)

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<uniform> part: Part;
@group(0) @binding(2) var<storage, read> ids: array<u32>;       // (T) token ids
@group(0) @binding(3) var<storage, read> table: array<u32>;     // (part.rows, row_bytes(DTYPE, C)) GGUF blocks
@group(0) @binding(4) var<storage, read_write> out: array<f32>; // (T, C)

fn weight_word(i: u32) -> u32 {
    return table[i];
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wid, nwg) * 256u + lid;
    let t = i / C;
    let c = i % C;
    if (t >= params.n_tokens) {
        return;
    }
    let id = ids[t];
    if (id < part.first_row || id - part.first_row >= part.rows) {
        return;
    }
    out[i] = weight1(DTYPE, (id - part.first_row) * row_bytes(DTYPE, C), c) * SCALE;
}
