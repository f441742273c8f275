// y = x · wᵀ (or y += x · wᵀ) for the rows of one weight part, the weights dequantized from
// their GGUF blocks as they are read. Two entry points share one binding layout:
// `matvec` for decode (T <= MATVEC_MAX_T, one thread per output column) and `matmul_tiled`
// for prefill (64×64 output tiles staged through workgroup memory, 4×8 per thread).

override DTYPE: u32;               // ggml type id of w
override K: u32;                   // row length of w = columns of x
override N: u32;                   // rows of the whole weight = columns of y
override ACCUMULATE: bool = false; // y += x · wᵀ (residual adds) instead of y = x · wᵀ

@group(0) @binding(0) var<uniform> params: StepParams;
@group(0) @binding(1) var<uniform> part: Part;
@group(0) @binding(2) var<storage, read> x: array<f32>;       // (T, K)
@group(0) @binding(3) var<storage, read> w: array<u32>;       // (part.rows, row_bytes(K)) GGUF blocks
@group(0) @binding(4) var<storage, read_write> y: array<f32>; // (T, N)

fn weight_word(i: u32) -> u32 {
    return w[i];
}

fn store(t: u32, r: u32, v: f32) {
    let i = t * N + part.first_row + r;
    if (ACCUMULATE) {
        y[i] += v;
    } else {
        y[i] = v;
    }
}

const MATVEC_MAX_T: u32 = 4u; // gpu/ops/matmul.rs MATVEC_MAX_T
const MATVEC_WG: u32 = 64u;

@compute @workgroup_size(MATVEC_WG)
fn matvec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let r = linear_group(wid, nwg) * MATVEC_WG + lid;
    if (r >= part.rows) {
        return;
    }
    let row = r * row_bytes(K);
    let nt = min(params.n_tokens, MATVEC_MAX_T);
    var acc = array<f32, MATVEC_MAX_T>();
    var k = 0u;
    if (DTYPE >= TYPE_Q4_0) {
        // Quantized rows are whole 32-blocks: dequantize a block at a time.
        for (; k < K; k += 32u) {
            let wb = block32(row, k / 32u);
            for (var t = 0u; t < nt; t++) {
                var s = 0.0;
                for (var j = 0u; j < 8u; j++) {
                    let xi = t * K + k + 4u * j;
                    s += dot(wb[j], vec4<f32>(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u]));
                }
                acc[t] += s;
            }
        }
    }
    for (; k + 4u <= K; k += 4u) {
        let wv = weights4(row, k);
        for (var t = 0u; t < nt; t++) {
            let xi = t * K + k;
            acc[t] += dot(wv, vec4<f32>(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u]));
        }
    }
    for (; k < K; k++) {
        let wv = weight1(row, k);
        for (var t = 0u; t < nt; t++) {
            acc[t] += wv * x[t * K + k];
        }
    }
    for (var t = 0u; t < nt; t++) {
        store(t, r, acc[t]);
    }
}

const TILE: u32 = 64u;  // output tile is TILE tokens × TILE columns
const TILE_K: u32 = 32u;
const QUADS: u32 = TILE / 4u;
const THREADS: u32 = 128u; // 16 × 8: each thread 4 tokens × 8 columns (two quads, 32 apart)
// [TILE_K][TILE / 4] vec4s each: 2 × 8 KiB, WebGPU's 16 KiB workgroup-storage floor.
var<workgroup> xs: array<vec4<f32>, TILE_K * QUADS>; // xs[kk][m / 4][m % 4] = x[t0 + m, k0 + kk]
var<workgroup> ws: array<vec4<f32>, TILE_K * QUADS>; // ws[kk][n / 4][n % 4] = w[n0 + n, k0 + kk]

@compute @workgroup_size(8, 16)
fn matmul_tiled(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let n0 = wid.x * TILE;
    let t0 = wid.y * TILE;
    let nt = params.n_tokens;
    if (t0 >= nt) {
        return;
    }
    let rb = row_bytes(K);
    // acc[i][c] and acc[4 + i][c]: token t0 + 4·lid.y + i, columns n0 + 4·lid.x + c and
    // n0 + TILE / 2 + 4·lid.x + c. More outputs per thread means fewer workgroup-memory loads
    // per multiply-add.
    var acc = array<vec4<f32>, 8>();
    for (var k0 = 0u; k0 < K; k0 += TILE_K) {
        // x tile: TILE × TILE_K values, consecutive threads along k.
        for (var e = lid; e < TILE * TILE_K; e += THREADS) {
            let m = e / TILE_K;
            let kk = e % TILE_K;
            let t = t0 + m;
            let k = k0 + kk;
            var v = 0.0;
            if (t < nt && k < K) {
                v = x[t * K + k];
            }
            xs[kk * QUADS + m / 4u][m % 4u] = v;
        }
        // w tile: TILE rows × TILE_K / 4 groups of 4 weights.
        for (var u = lid; u < TILE * TILE_K / 4u; u += THREADS) {
            let n = u / (TILE_K / 4u);
            let kq = u % (TILE_K / 4u) * 4u;
            let r = n0 + n;
            let k = k0 + kq;
            var v = vec4<f32>(0.0);
            if (r < part.rows) {
                if (k + 4u <= K) {
                    v = weights4(r * rb, k);
                } else {
                    for (var c = 0u; c < 4u && k + c < K; c++) {
                        v[c] = weight1(r * rb, k + c);
                    }
                }
            }
            for (var c = 0u; c < 4u; c++) {
                ws[(kq + c) * QUADS + n / 4u][n % 4u] = v[c];
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TILE_K; kk++) {
            let a = xs[kk * QUADS + lid3.y];
            let b0 = ws[kk * QUADS + lid3.x];
            let b1 = ws[kk * QUADS + QUADS / 2u + lid3.x];
            acc[0] += a.x * b0;
            acc[1] += a.y * b0;
            acc[2] += a.z * b0;
            acc[3] += a.w * b0;
            acc[4] += a.x * b1;
            acc[5] += a.y * b1;
            acc[6] += a.z * b1;
            acc[7] += a.w * b1;
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let t = t0 + lid3.y * 4u + i;
        for (var c = 0u; c < 4u; c++) {
            let r0 = n0 + lid3.x * 4u + c;
            let r1 = r0 + TILE / 2u;
            if (t < nt && r0 < part.rows) {
                store(t, r0, acc[i][c]);
            }
            if (t < nt && r1 < part.rows) {
                store(t, r1, acc[4u + i][c]);
            }
        }
    }
}
