//! The radixlm command line: model info, generation, a terminal chat, and benchmarks.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use radixlm::api::tools::ChatMessage;
use radixlm::api::{self, Dialect, Logprobs, RequestFields, Sampling};
use radixlm::engine::sampling::SamplingParams;
use radixlm::engine::session::ChatSession;
use radixlm::cpu::CpuOptions;
use radixlm::engine::{ChoiceStep, Choices, Engine, EngineOptions, Generation, Poller, Sequence, Target};
use radixlm::gguf::{GgmlType, GgufFile};
use radixlm::gpu::context::LimitsPolicy;
use radixlm::gpu::executor::{block_on, open};
use radixlm::gpu::ops::KernelShapes;
use radixlm::kv::spill::dir_store::DirStore;
use radixlm::kv::spill::SpillFormat;
use radixlm::model::synthetic::{SyntheticArch, SyntheticSpec};
use radixlm::model::Config;
use radixlm::tokenizer::ChatTemplate;

const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

#[derive(Parser)]
#[command(name = "radixlm", version, about = "Run GGUF language models on the GPU through wgpu, or on the CPU")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct ModelArgs {
    /// Path of a GGUF model.
    #[arg(long, default_value = DEFAULT_MODEL)]
    model: PathBuf,
    /// KV cache budget in MiB.
    #[arg(long, default_value_t = 256)]
    kv_mib: u64,
    /// Use only WebGPU's default limits, as a phone browser would offer.
    #[arg(long)]
    webgpu_limits: bool,
    /// Folder of the spill store, where quantized KV pages outlive the process
    /// [default: the user's cache folder, e.g. ~/.cache/radixlm/kv].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Keep no KV pages outside the GPU.
    #[arg(long)]
    no_spill: bool,
    /// How spilled KV pages are quantized.
    #[arg(long, value_enum, default_value_t = SpillArg::Q8)]
    spill: SpillArg,
    /// Spill store budget in MiB (least recently used pages go first).
    #[arg(long, default_value_t = 1024)]
    spill_mib: u64,
    /// GPU kernel shapes: the adapter's (CPU-shaped on CPU adapters), or one set whatever the adapter.
    #[arg(long, value_enum, default_value_t = KernelsArg::Auto)]
    kernels: KernelsArg,
    /// What computes: a hardware GPU where there is one and the CPU otherwise (auto), the GPU
    /// through wgpu whatever its adapter (software ones too), or the CPU.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// Threads of the CPU backend [default: every core].
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
enum BackendArg {
    Auto,
    Gpu,
    Cpu,
}

#[derive(clap::ValueEnum, Clone, Copy)]
enum KernelsArg {
    /// Chosen from the adapter's type.
    Auto,
    /// Shaped for real GPUs (the default on them).
    Gpu,
    /// Shaped for CPU adapters such as llvmpipe and SwiftShader.
    Cpu,
}

#[derive(clap::ValueEnum, Clone, Copy)]
enum SpillArg {
    /// 8-bit affine, groups of 64 (about half the GPU's f16 bytes).
    Q8,
    /// 4-bit affine, groups of 64 (about a quarter).
    Q4,
}

/// Where a command keeps spilled pages.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SpillDir {
    /// `--cache-dir`, or the user's cache folder.
    User,
    /// A fresh folder removed afterwards: benchmarks must not read or clear the user's cache.
    Scratch,
}

#[derive(clap::Args, Clone)]
struct SamplingArgs {
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// 0 picks the most likely token every step.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stop when the reply contains this text (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// A JSON file holding an OpenAI `response_format` object (`{"type": "json_schema",
    /// "json_schema": {"name": …, "schema": …}}`, `json_object`, or radixlm's `grammar` (Lark)
    /// and `regex`): the reply is constrained to it.
    #[arg(long)]
    response_format: Option<PathBuf>,
    /// llama.cpp's repetition penalty over the last --penalty-last-n tokens (1: off).
    #[arg(long)]
    repetition_penalty: Option<f32>,
    /// Lowers a recent token's logit by this much per occurrence (OpenAI's, -2 to 2).
    #[arg(long)]
    frequency_penalty: Option<f32>,
    /// Lowers a recent token's logit by this much once (OpenAI's, -2 to 2).
    #[arg(long)]
    presence_penalty: Option<f32>,
    /// How many recent tokens (prompt and reply) the penalties count (64 by default).
    #[arg(long)]
    penalty_last_n: Option<usize>,
    /// ID=BIAS: add BIAS (-100 to 100) to token ID's logit (repeatable).
    #[arg(long, value_parser = parse_bias)]
    logit_bias: Vec<(String, f32)>,
    /// Report each token's log-probability with this many likeliest alternatives (with --json).
    #[arg(long)]
    logprobs: Option<usize>,
}

fn parse_bias(s: &str) -> Result<(String, f32), String> {
    let (id, bias) = s.split_once('=').ok_or("expected ID=BIAS")?;
    Ok((id.to_string(), bias.parse().map_err(|e| format!("{bias}: {e}"))?))
}

impl SamplingArgs {
    /// The sampling, checked as the wasm engine checks a request's.
    fn sampling(&self, engine: &Engine, n: usize) -> Result<Sampling, AnyError> {
        Ok(self.fields(n)?.sampling(engine.cfg.vocab_size, engine.tool_dialect(), || self.seed)?)
    }

    /// The request's sampling fields.
    fn fields(&self, n: usize) -> Result<RequestFields, AnyError> {
        let response_format = self.response_format.as_deref().map(read_json).transpose()?;
        let fields = RequestFields {
            max_tokens: Some(self.max_tokens),
            temperature: Some(self.temperature),
            top_k: Some(self.top_k),
            top_p: Some(self.top_p),
            seed: Some(self.seed),
            stop: self.stop.clone(),
            response_format,
            repetition_penalty: self.repetition_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            penalty_last_n: self.penalty_last_n,
            logit_bias: (!self.logit_bias.is_empty()).then(|| self.logit_bias.iter().cloned().collect()),
            logprobs: self.logprobs.map(Logprobs::Top),
            n: Some(n),
            ..Default::default()
        };
        Ok(fields)
    }
}

/// A JSON file's value, naming the file when it cannot be read or parsed.
fn read_json<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<T, AnyError> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?)
}

#[derive(Subcommand)]
enum Command {
    /// Print a GGUF model's architecture, shapes, tensor types and chat template.
    Info { model: PathBuf },
    /// Generate a continuation of a prompt, streaming it, then print a stats line.
    Generate {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long)]
        prompt: String,
        /// Wrap the prompt as a user message in the model's chat template.
        #[arg(long)]
        chat: bool,
        /// With --chat: a system message before the prompt.
        #[arg(long, requires = "chat")]
        system: Option<String>,
        /// Print one line of JSON, OpenAI's response (`choices`, `usage`) with the prompt's and
        /// the first choice's ids, top-2 logit gaps, text, finish reason and stats beside it,
        /// instead of streaming text.
        #[arg(long)]
        json: bool,
        /// Choices to generate (with --json): the prompt is computed once, each choice
        /// sampled with the seed plus its index.
        #[arg(long, default_value_t = 1, requires = "json")]
        n: usize,
        /// With --chat: a JSON file holding an OpenAI `tools` array; the reply may call them
        /// (with --json, `choices[0].message.tool_calls`).
        #[arg(long, requires = "chat")]
        tools: Option<PathBuf>,
        /// With --tools: "auto" (the default), "none", "required", or a function's name.
        #[arg(long, requires = "tools")]
        tool_choice: Option<String>,
        #[command(flatten)]
        sampling: SamplingArgs,
    },
    /// Write a synthetic GGUF model with seeded random weights (test and benchmark models).
    Synth {
        #[arg(long, value_enum, default_value_t = SynthPreset::Tiny)]
        preset: SynthPreset,
        /// Type of the projection matrices (the preset's own when absent); a float type is the
        /// embedding's too.
        #[arg(long, value_enum)]
        r#type: Option<SynthType>,
        /// A separate LM head (with tied embeddings a random model mostly repeats its input).
        #[arg(long)]
        untied: bool,
        /// Llama 3.x's RoPE: base 500000 and its frequency factors (`rope_freqs.weight`).
        #[arg(long)]
        llama3_rope: bool,
        /// qwen2's architecture (biases on q, k and v; NEOX RoPE) in place of llama's.
        #[arg(long, conflicts_with = "qwen3")]
        qwen2: bool,
        /// qwen3's architecture (per-head q and k norms, NEOX RoPE, heads twice the preset's
        /// width, as Qwen3's are wider than n_embd / n_heads) in place of llama's.
        #[arg(long, conflicts_with_all = ["qwen2", "gemma3"])]
        qwen3: bool,
        /// gemma3's architecture with sliding windows of this many positions (qwen3's attention,
        /// every sixth layer global, post norms, GELU, scaled embeddings) in place of llama's.
        #[arg(long, value_name = "WINDOW", conflicts_with = "qwen2")]
        gemma3: Option<usize>,
        /// Layers (the preset's own when absent).
        #[arg(long)]
        layers: Option<usize>,
        #[arg(long)]
        out: PathBuf,
    },
    /// Chat with a model in the terminal.
    Chat {
        #[command(flatten)]
        model: ModelArgs,
        /// System prompt (the template's default when absent).
        #[arg(long)]
        system: Option<String>,
        #[command(flatten)]
        sampling: SamplingArgs,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: Bench,
    },
}

#[derive(clap::ValueEnum, Clone, Copy)]
enum SynthPreset {
    /// Two layers, 192 wide, a 512-token byte-level vocabulary: a few MB.
    Tiny,
    /// The tiny model 256 wide: rows of whole K-quant super-blocks.
    #[value(name = "tiny-256")]
    Tiny256,
    /// SmolLM2-135M's shapes.
    Smollm2_135m,
    /// Llama-3.2-1B's shapes.
    #[value(name = "llama-3.2-1b")]
    Llama3_2_1b,
    /// Llama-3.2-3B's shapes.
    #[value(name = "llama-3.2-3b")]
    Llama3_2_3b,
    /// Qwen2.5-0.5B's shapes.
    #[value(name = "qwen2.5-0.5b")]
    Qwen2_5_0_5b,
}

#[derive(clap::ValueEnum, Clone, Copy)]
#[allow(non_camel_case_types)] // ggml's own names
enum SynthType {
    F32,
    F16,
    Bf16,
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q4_1")]
    Q4_1,
    #[value(name = "q5_0")]
    Q5_0,
    #[value(name = "q5_1")]
    Q5_1,
    #[value(name = "q4_k")]
    Q4_K,
    #[value(name = "q5_k")]
    Q5_K,
    #[value(name = "q6_k")]
    Q6_K,
    /// llama.cpp's Q4_K_M mix: Q4_K, with Q6_K for attention's V and the embedding.
    #[value(name = "q4_k_m")]
    Q4_K_M,
}

#[derive(Subcommand)]
enum Bench {
    /// Prefill tokens/s on a long prompt and decode tokens/s over a run of greedy tokens.
    Throughput {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, default_value_t = 512)]
        prefill_tokens: usize,
        #[arg(long, default_value_t = 128)]
        decode_tokens: usize,
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Then one more run with GPU time per op (timestamp queries), dispatches and bytes read
        /// back per decoded token.
        #[arg(long)]
        profile: bool,
        /// With --profile: a prefix of this many tokens cached first, so the profiled run
        /// computes its --prefill-tokens over it (the warm path).
        #[arg(long, default_value_t = 0, requires = "profile")]
        cached_tokens: usize,
    },
    /// GPU memory bandwidth as buffer-to-buffer copies see it (read + write bytes per second).
    Bandwidth {
        /// Bytes of each copy in MiB (at most the adapter's largest buffer).
        #[arg(long, default_value_t = 1024)]
        mib: u64,
        /// Copies per timed submit.
        #[arg(long, default_value_t = 20)]
        copies: usize,
        #[arg(long, default_value_t = 5)]
        repeats: usize,
    },
    /// TTFT of chat requests whose tool definitions (crate/src/bench_tools.json) are cached,
    /// beside the same requests without tools, with correctness controls (exits non-zero if
    /// one fails).
    Tools {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, default_value_t = 5)]
        repeats: usize,
        /// Greedy tokens the controls compare.
        #[arg(long, default_value_t = 16)]
        check_tokens: usize,
    },
    /// TTFT with and without a cached prefix, with correctness controls (exits non-zero if one fails).
    Prefix {
        #[command(flatten)]
        model: ModelArgs,
        /// Prefix lengths in tokens.
        #[arg(long, value_delimiter = ',', default_value = "128,512,1024")]
        prefix_lens: Vec<usize>,
        /// Also run 2048 and 4096 (slow on software GPUs).
        #[arg(long)]
        long: bool,
        /// New tokens after the prefix.
        #[arg(long, default_value_t = 32)]
        delta: usize,
        #[arg(long, default_value_t = 5)]
        repeats: usize,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

type AnyError = Box<dyn std::error::Error>;

fn read_model(path: &PathBuf) -> Result<Vec<u8>, AnyError> {
    std::fs::read(path).map_err(|e| format!("cannot read model {}: {e}", path.display()).into())
}

/// The backend `args` ask for: "auto" takes the GPU on a hardware adapter and the CPU where
/// there is no adapter or only a software one.
fn target(args: &ModelArgs) -> Result<Target, AnyError> {
    let policy = if args.webgpu_limits { LimitsPolicy::WebGpuDefault } else { LimitsPolicy::Adapter };
    let cpu = CpuOptions { threads: args.threads, ..Default::default() };
    Ok(match args.backend {
        BackendArg::Gpu => Target::Gpu(std::sync::Arc::new(open(policy)?)),
        BackendArg::Cpu => Target::Cpu(cpu),
        BackendArg::Auto => Target::auto(open(policy).ok(), cpu),
    })
}

fn load_engine(args: &ModelArgs, dir: SpillDir) -> Result<Engine, AnyError> {
    let bytes = read_model(&args.model)?;
    let target = target(args)?;
    let spill = (!args.no_spill).then_some(match args.spill {
        SpillArg::Q8 => SpillFormat::Q8,
        SpillArg::Q4 => SpillFormat::Q4,
    });
    let kernels = match (args.kernels, &target) {
        (KernelsArg::Gpu, Target::Gpu(gpu)) => Some(KernelShapes::for_gpu(gpu)),
        (KernelsArg::Cpu, _) => Some(KernelShapes::CPU),
        _ => None,
    };
    let opts = EngineOptions { kv_budget_bytes: args.kv_mib << 20, spill, spill_budget_bytes: args.spill_mib << 20, kernels, ..EngineOptions::default() };
    let poller = Poller::for_target(&target);
    let mut engine = poller.block_on(Engine::load(target, &bytes, &opts))?;
    if spill.is_some() {
        let folder = match dir {
            SpillDir::User => args.cache_dir.clone().or_else(|| dirs::cache_dir().map(|d| d.join("radixlm").join("kv"))),
            SpillDir::Scratch => Some(scratch_dir()),
        };
        let Some(folder) = folder else {
            eprintln!("note: no cache folder found (pass --cache-dir); KV pages will not be kept");
            return Ok(engine);
        };
        let store = DirStore::open(&folder, opts.spill_budget_bytes).map_err(|e| format!("spill store {}: {e}", folder.display()))?;
        if !poller.block_on(engine.attach_spill_store(Box::new(store))) {
            eprintln!("note: this model's head size has no spill quantization group; KV pages will not be kept");
        }
    }
    Ok(engine)
}

fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("radixlm-bench-{}", std::process::id()))
}

/// Writes the request's new pages to the spill store, as the engine's idle work.
fn write_behind(engine: &mut Engine) {
    engine.poller().block_on(engine.write_behind());
}

fn run(cli: Cli) -> Result<(), AnyError> {
    match cli.command {
        Command::Info { model } => info(&model),
        Command::Generate { model, prompt, chat, system, json, n, tools, tool_choice, sampling } => {
            let mut engine = load_engine(&model, SpillDir::User)?;
            let mut fields = sampling.fields(n)?;
            fields.tools = tools.as_deref().map(read_json).transpose()?;
            fields.tool_choice = tool_choice.map(|c| match c.as_str() {
                "auto" | "none" | "required" => c.into(),
                name => serde_json::json!({ "type": "function", "function": { "name": name } }),
            });
            let message = |role: &str, content: String| ChatMessage { role: role.into(), content: Some(content), tool_calls: None, tool_call_id: None, name: None };
            let (tokens, calls) = if chat {
                fields.messages = Some(system.map(|s| message("system", s)).into_iter().chain([message("user", prompt)]).collect());
                let (chat, calls) = fields.conversation(engine.tool_dialect())?;
                (engine.chat_tokens(&chat)?, calls)
            } else {
                (engine.tokenizer.encode(&prompt, true)?, None)
            };
            let sampling = fields.sampling(engine.cfg.vocab_size, engine.tool_dialect(), || 0)?;
            if json {
                return generate_json(&mut engine, &tokens, &sampling, chat, calls);
            }
            let mut seq = Sequence::default();
            let gen = generate_streaming(&mut engine, &mut seq, &tokens, &sampling.params)?;
            engine.release(&mut seq);
            write_behind(&mut engine);
            println!();
            print_stats(&gen);
            Ok(())
        }
        Command::Synth { preset, r#type, untied, llama3_rope, qwen2, qwen3, gemma3, layers, out } => {
            let mut spec = match preset {
                SynthPreset::Tiny => SyntheticSpec::tiny(),
                SynthPreset::Tiny256 => SyntheticSpec::tiny_256(),
                SynthPreset::Smollm2_135m => SyntheticSpec::smollm2_135m_shape(),
                SynthPreset::Llama3_2_1b => SyntheticSpec::llama_3_2_1b_shape(),
                SynthPreset::Llama3_2_3b => SyntheticSpec::llama_3_2_3b_shape(),
                SynthPreset::Qwen2_5_0_5b => SyntheticSpec::qwen2_5_0_5b_shape(),
            };
            spec.tied_embeddings &= !untied;
            if llama3_rope {
                spec = SyntheticSpec { rope_base: 500_000.0, llama3_rope: true, ..spec };
            }
            if qwen2 {
                spec.arch = SyntheticArch::Qwen2;
            }
            if qwen3 {
                spec = SyntheticSpec { arch: SyntheticArch::Qwen3, head_dim: Some(2 * spec.head_dim()), rope_base: 1_000_000.0, ..spec };
            }
            if let Some(window) = gemma3 {
                spec = SyntheticSpec { arch: SyntheticArch::Gemma3 { window }, head_dim: Some(2 * spec.head_dim()), rope_base: 1_000_000.0, ..spec };
            }
            spec.n_layers = layers.unwrap_or(spec.n_layers).max(1);
            if let Some(ty) = r#type {
                let base = spec.clone();
                let one = |ty| SyntheticSpec { weight_type: ty, ..base.clone() };
                // A float model is float throughout: the base a quantizer starts from.
                let float = |ty| SyntheticSpec { weight_type: ty, embedding_type: ty, ..base.clone() };
                spec = match ty {
                    SynthType::F32 => float(GgmlType::F32),
                    SynthType::F16 => float(GgmlType::F16),
                    SynthType::Bf16 => float(GgmlType::BF16),
                    SynthType::Q8_0 => one(GgmlType::Q8_0),
                    SynthType::Q4_0 => one(GgmlType::Q4_0),
                    SynthType::Q4_1 => one(GgmlType::Q4_1),
                    SynthType::Q5_0 => one(GgmlType::Q5_0),
                    SynthType::Q5_1 => one(GgmlType::Q5_1),
                    SynthType::Q4_K => one(GgmlType::Q4_K),
                    SynthType::Q5_K => one(GgmlType::Q5_K),
                    SynthType::Q6_K => one(GgmlType::Q6_K),
                    SynthType::Q4_K_M => base.clone().q4_k_m(),
                };
            }
            spec.check_shapes().map_err(|e| format!("cannot write this preset in that type: {e}"))?;
            // Written beside the target and renamed, so a reader never sees half a file.
            let tmp = out.with_extension("partial");
            std::fs::write(&tmp, spec.to_gguf()).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
            std::fs::rename(&tmp, &out).map_err(|e| format!("cannot rename to {}: {e}", out.display()))?;
            eprintln!("wrote {}", out.display());
            Ok(())
        }
        Command::Bench { which: Bench::Tools { model, repeats, check_tokens } } => {
            let mut engine = load_engine(&model, SpillDir::Scratch)?;
            let poller = engine.poller();
            let report = poller.block_on(radixlm::bench::tools(&mut engine, repeats, check_tokens));
            let _ = std::fs::remove_dir_all(scratch_dir());
            let report = report?;
            println!("{report}");
            println!("{}", serde_json::to_string(&report)?);
            match report.failed_control() {
                Some((question, c)) => Err(format!("correctness control failed on {question:?}: {c}").into()),
                None => Ok(()),
            }
        }
        Command::Bench { which: Bench::Prefix { model, mut prefix_lens, long, delta, repeats } } => {
            if long {
                prefix_lens.extend(&radixlm::bench::PROTOCOL.long_prefix_lens);
            }
            let mut engine = load_engine(&model, SpillDir::Scratch)?;
            let poller = engine.poller();
            let cfg = radixlm::bench::PrefixBenchConfig { prefix_lens, delta, repeats, ..Default::default() };
            let report = poller.block_on(radixlm::bench::prefix(&mut engine, &cfg));
            let _ = std::fs::remove_dir_all(scratch_dir());
            let report = report?;
            println!("{report}");
            println!("{}", serde_json::to_string(&report)?);
            match report.rows.iter().find_map(|r| r.failed_control.as_ref().map(|c| (r.prefix_len, c))) {
                Some((p, c)) => Err(format!("correctness control failed at prefix {p}: {c}").into()),
                None => Ok(()),
            }
        }
        Command::Chat { model, system, sampling } => chat(&model, system, &sampling),
        Command::Bench { which: Bench::Bandwidth { mib, copies, repeats } } => {
            let gpu = open(LimitsPolicy::Adapter)?;
            let report = block_on(&gpu, radixlm::bench::copy_bandwidth(&gpu, mib << 20, copies, repeats))?;
            println!("{report}");
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
        Command::Bench { which: Bench::Throughput { model, prefill_tokens, decode_tokens, repeats, profile, cached_tokens } } => {
            // Every repeat must prefill its whole prompt: no spill tier to restore it from.
            let mut engine = load_engine(&ModelArgs { no_spill: true, ..model }, SpillDir::Scratch)?;
            let poller = engine.poller();
            let report = poller.block_on(radixlm::bench::throughput(&mut engine, prefill_tokens, decode_tokens, repeats))?;
            println!("{report}");
            println!("{}", serde_json::to_string(&report)?);
            if profile {
                let profile = poller.block_on(radixlm::bench::profile(&mut engine, cached_tokens, prefill_tokens, decode_tokens))?;
                println!("{profile}");
                println!("{}", serde_json::to_string(&profile)?);
            }
            Ok(())
        }
    }
}

fn generate_streaming(engine: &mut Engine, seq: &mut Sequence, tokens: &[u32], params: &SamplingParams) -> Result<Generation, AnyError> {
    let poller = engine.poller();
    let fut = engine.generate(seq, tokens, params, |piece| {
        print!("{piece}");
        let _ = std::io::stdout().flush();
        true
    });
    Ok(poller.block_on(fut)?)
}

/// Generates the reply's choices and prints them as one JSON line: OpenAI's response shape
/// (a chat's `message`, a completion's `text`) with radixlm's figures beside it.
fn generate_json(engine: &mut Engine, prompt: &[u32], sampling: &Sampling, chat: bool, calls: Option<Dialect>) -> Result<(), AnyError> {
    let poller = engine.poller();
    let mut seq = Sequence::default();
    let mut choices = match engine.start(&mut seq, prompt, &sampling.params) {
        Ok(req) => Choices::new(req, sampling.n),
        Err(e) => {
            engine.release(&mut seq);
            return Err(e.into());
        }
    };
    let generations = loop {
        match poller.block_on(engine.step_choices(&mut choices)) {
            Ok(ChoiceStep::Done { generations, .. }) => break Ok(generations),
            Ok(_) => {}
            Err(e) => break Err(e),
        }
    };
    for mut seq in choices.into_sequences() {
        engine.release(&mut seq);
    }
    let generations = generations?;
    write_behind(engine);
    let result = api::RequestResult::new(&engine.tokenizer, &generations, sampling.params.logprobs.is_some(), calls)
        .ok_or("the request gave no choices")?;
    let mut out = serde_json::to_value(&result)?;
    for (i, choice) in out["choices"].as_array_mut().into_iter().flatten().enumerate() {
        let text = choice["text"].take();
        if chat {
            let tool_calls = choice["tool_calls"].take();
            choice["message"] = match tool_calls.as_array() {
                Some(calls) => {
                    let calls: Vec<_> = calls.iter().enumerate().map(|(k, c)| serde_json::json!({ "id": format!("call_{i}_{k}"), "type": "function", "function": c })).collect();
                    serde_json::json!({ "role": "assistant", "content": null, "tool_calls": calls })
                }
                None => serde_json::json!({ "role": "assistant", "content": text }),
            };
            choice["logprobs"] = serde_json::json!({ "content": choice["logprobs"].take() });
        } else {
            choice["text"] = text;
        }
    }
    let first = &generations[0];
    out["object"] = (if chat { "chat.completion" } else { "text_completion" }).into();
    out["model"] = engine.model_name.clone().into();
    out["prompt_ids"] = prompt.into();
    out["tokens"] = first.tokens.clone().into();
    out["top2_gaps"] = first.top2_gaps.clone().into();
    out["text"] = first.text.clone().into();
    out["finish_reason"] = serde_json::to_value(api::Finish::from(first.finish_reason))?;
    println!("{out}");
    Ok(())
}

fn print_stats(gen: &Generation) {
    let s = &gen.stats;
    eprintln!(
        "[prompt {} tokens ({} reused, {} restored, {} prefilled) | TTFT {:.0} ms | prefill {:.1} tok/s | decode {:.1} tok/s | {} tokens, {:?}]",
        s.prompt_tokens, s.reused_tokens, s.restored_tokens, s.prefilled_tokens, s.ttft_ms, s.prefill_tokens_per_s, s.decode_tokens_per_s,
        s.generated_tokens, gen.finish_reason
    );
    if let Some(m) = &s.mask {
        eprintln!("[response format: token masks {:.2} ms a step (median {:.2}, p99 {:.2}, max {:.2}; {} steps)]", m.mean_ms, m.median_ms, m.p99_ms, m.max_ms, m.steps);
    }
}

fn chat(model: &ModelArgs, system: Option<String>, sampling: &SamplingArgs) -> Result<(), AnyError> {
    eprintln!("loading {} ...", model.model.display());
    let mut engine = load_engine(model, SpillDir::User)?;
    let params = &sampling.sampling(&engine, 1)?.params;
    eprintln!(
        "radixlm chat — {} on {}. Type a message; an empty line or Ctrl-D quits.",
        model.model.file_name().unwrap_or_default().to_string_lossy(),
        engine.backend_info().describe()
    );
    let mut session = ChatSession::new(system.as_deref());
    let stdin = std::io::stdin();
    loop {
        print!("\n> ");
        std::io::stdout().flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            return Ok(());
        }
        let poller = engine.poller();
        let reply = session.send(&mut engine, line.trim_end(), params, |piece| {
            print!("{piece}");
            let _ = std::io::stdout().flush();
            true
        });
        let gen = poller.block_on(reply)?;
        write_behind(&mut engine);
        println!();
        print_stats(&gen);
    }
}

fn info(path: &PathBuf) -> Result<(), AnyError> {
    let bytes = read_model(path)?;
    let file = GgufFile::parse(&bytes)?;
    println!("file:          {} (GGUF v{}, {} bytes)", path.display(), file.version, bytes.len());
    let s = |k: &str| file.get(k).and_then(|v| v.as_str()).unwrap_or("-").to_string();
    println!("name:          {}", s("general.name"));
    println!("architecture:  {}", s("general.architecture"));
    match Config::from_gguf(&file) {
        Ok(c) => {
            println!("layers:        {}", c.n_layers);
            println!("embedding:     {}", c.n_embd);
            println!("feed-forward:  {}", c.n_ff);
            println!("heads:         {} ({} KV heads, head dim {})", c.n_heads, c.n_kv_heads, c.head_dim);
            println!("vocab:         {}", c.vocab_size);
            println!("context:       {}", c.n_ctx_train);
            println!("rope base:     {}", c.rope_base);
            match (c.rope_factors, c.rope_freq_scale) {
                (true, _) => println!("rope scaling:  Llama 3 frequency factors (rope_freqs.weight)"),
                (false, s) if s != 1.0 => println!("rope scaling:  linear, factor {}", 1.0 / s),
                _ => {}
            }
            println!("rms eps:       {:e}", c.rms_eps);
            println!("tied embed:    {}", c.tied_embeddings);
        }
        Err(e) => println!("config:        not runnable: {e}"),
    }
    let mut types: std::collections::BTreeMap<&str, (usize, u64)> = Default::default();
    for t in &file.tensors {
        let e = types.entry(t.ty.name()).or_default();
        e.0 += 1;
        e.1 += t.n_bytes;
    }
    println!("tensors:       {}", file.tensors.len());
    for (ty, (n, b)) in types {
        println!("  {ty:<6} {n:>4} tensors, {:>8.1} MiB", b as f64 / (1 << 20) as f64);
    }
    let (read, flops) = per_token_cost(&file);
    println!("per token:     {read} weight bytes read (decode), {flops} matmul FLOPs");
    match ChatTemplate::from_gguf(&file) {
        Ok(Some(_)) => println!("chat template:\n{}", s("tokenizer.chat_template")),
        Ok(None) => println!("chat template: none"),
        Err(e) => println!("chat template: unusable: {e}"),
    }
    Ok(())
}

/// What one decoded token costs in weights: the bytes it reads (every tensor, except that an
/// untied token embedding gives one row) and the FLOPs of its matrix products (2 per weight of
/// every matrix; with tied embeddings the embedding is the LM head). Attention over the context
/// comes on top.
fn per_token_cost(file: &GgufFile) -> (u64, u64) {
    let untied = file.tensors.iter().any(|t| t.name == "output.weight");
    let (mut read, mut flops) = (0, 0);
    for t in &file.tensors {
        let rows = t.dims.get(1).copied().unwrap_or(1).max(1);
        if untied && t.name == "token_embd.weight" {
            read += t.n_bytes / rows;
            continue;
        }
        read += t.n_bytes;
        if t.dims.len() == 2 {
            flops += 2 * t.n_elements();
        }
    }
    (read, flops)
}
