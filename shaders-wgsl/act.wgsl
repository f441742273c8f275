// The gated FFN's activation, shared by matmul.wgsl's GATED epilogue and glu.wgsl: each declares
// `override GELU: bool`. SiLU (SwiGLU), or GELU's tanh approximation (GeGLU: gemma3) as ggml's
// and PyTorch's "tanh" GELU.
fn act4(g: vec4<f32>) -> vec4<f32> {
    if (GELU) {
        // tanh's argument clamped: tanh(10) is 1 in f32, and exp-based tanh overflows beyond.
        return 0.5 * g * (1.0 + tanh(clamp(0.7978845608 * g * (1.0 + 0.044715 * g * g), vec4<f32>(-10.0), vec4<f32>(10.0))));
    }
    return g / (1.0 + exp(-g));
}
