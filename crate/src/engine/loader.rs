//! Loading a model as its bytes arrive. The header is parsed from the first bytes; then every
//! weight's home is allocated on the target backend (GPU buffers, or host memory for the CPU)
//! and each chunk of tensor data is written where it belongs (and into the fingerprint) as it
//! comes, so the file is never whole in memory: in the browser a 1 GB model costs its weights
//! once, not a second copy in a wasm heap that never shrinks.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cpu::weights::{f32s, CpuModel};
use crate::cpu::CpuBackend;
use crate::gguf::{GgufError, GgufHeader};
use crate::gpu::backend::GpuBackend;
use crate::gpu::context::{AllocScope, Gpu};
use crate::gpu::kv_pool::KvPool;
use crate::gpu::model_weights::{Destination, ModelWeights, UploadTarget};
use crate::gpu::weights::write_padded;
use crate::kv::page_bytes;
use crate::model::fingerprint::Fingerprinter;
use crate::model::Config;
use crate::tokenizer::{ChatTemplate, Tokenizer};

use super::backend::{Backend, Target};
use super::{context_limit, Engine, EngineError, EngineOptions};

/// First guess at the header's size; a longer header tells the parser how much more it needs.
const HEADER_GUESS: usize = 1 << 20;
/// Bytes gathered for one `write_buffer`: large enough to amortise the call, small enough to
/// keep the wasm heap small.
const WRITE_CHUNK: usize = 4 << 20;

/// A model being loaded: `push` the file's bytes in order, then `finish`.
pub struct ModelLoader {
    target: Target,
    opts: EngineOptions,
    /// The file's size when known (a `Content-Length`, a file's length).
    file_len: Option<u64>,
    pushed: u64,
    state: State,
}

enum State {
    /// The first bytes, until they hold the whole header; `need` is the length to try next.
    Header { prefix: Vec<u8>, need: usize },
    Data(Box<Streaming>),
    /// An error was returned; the loader takes nothing more.
    Failed,
}

struct Streaming {
    header: GgufHeader,
    cfg: Config,
    tokenizer: Tokenizer,
    chat_template: Option<ChatTemplate>,
    /// The GPU's weight buffers and the scope catching their allocation errors (none on the CPU).
    gpu: Option<(Arc<Gpu>, ModelWeights, AllocScope)>,
    /// Sorted by offset; `next` is the first not yet complete.
    targets: Vec<UploadTarget>,
    next: usize,
    /// Bytes of `targets[next]` written so far, and those gathered but not yet written.
    written: u64,
    pending: Vec<u8>,
    /// The bytes of each `Destination::Host` target, by tensor name.
    host: Vec<(String, Vec<u8>)>,
    /// Header padding still to arrive before the data section starts.
    padding_left: u64,
    /// Offset in the data section of the next byte to arrive.
    pos: u64,
    fingerprint: Fingerprinter,
}

impl ModelLoader {
    pub fn new(target: Target, opts: EngineOptions, file_len: Option<u64>) -> Self {
        Self { target, opts, file_len, pushed: 0, state: State::Header { prefix: Vec::new(), need: HEADER_GUESS } }
    }

    /// Bytes of the file taken so far.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    /// The next bytes of the file.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), EngineError> {
        let result = self.push_inner(chunk);
        if result.is_err() {
            self.state = State::Failed;
        }
        result
    }

    fn push_inner(&mut self, chunk: &[u8]) -> Result<(), EngineError> {
        self.pushed += chunk.len() as u64;
        if let Some(len) = self.file_len.filter(|&len| self.pushed > len) {
            return Err(GgufError::Truncated { what: "the file (more bytes arrived than its stated size)".into(), offset: len, needed: self.pushed - len, len }.into());
        }
        match &mut self.state {
            State::Failed => Err(EngineError::LoaderFailed),
            State::Data(s) => s.feed(chunk),
            State::Header { prefix, need } => {
                prefix.extend_from_slice(chunk);
                let complete = self.file_len == Some(self.pushed);
                if prefix.len() < *need && !complete {
                    return Ok(());
                }
                self.try_header(complete)
            }
        }
    }

    /// Parses the header from the bytes gathered so far; once it is whole, allocates the
    /// weights and moves on to streaming the data. `complete`: no more bytes will come.
    fn try_header(&mut self, complete: bool) -> Result<(), EngineError> {
        let State::Header { prefix, need } = &mut self.state else { return Ok(()) };
        let file_len = if complete { self.pushed } else { self.file_len.unwrap_or(u64::MAX) };
        match GgufHeader::parse(prefix, file_len) {
            Ok(header) => {
                let prefix = std::mem::take(prefix);
                let mut s = Streaming::start(&self.target, header)?;
                let data_start = (s.header.data_offset as usize).min(prefix.len());
                s.padding_left = s.header.data_offset - data_start as u64;
                s.feed(&prefix[data_start..])?;
                self.state = State::Data(Box::new(s));
                Ok(())
            }
            // A prefix short of the header: wait for the bytes the parser asked for.
            Err(GgufError::Truncated { offset, needed, .. })
                if !complete && offset.saturating_add(needed) <= file_len && offset + needed > prefix.len() as u64 =>
            {
                *need = usize::try_from(offset + needed).unwrap_or(usize::MAX).max(prefix.len() * 2);
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// After the last byte: checks that every tensor arrived, sizes the KV pool, builds the
    /// backend and returns the engine.
    pub async fn finish(mut self) -> Result<Engine, EngineError> {
        // A file smaller than the first guess at its header, or of unknown length, is whole now.
        self.try_header(true)?;
        let s = match std::mem::replace(&mut self.state, State::Failed) {
            State::Data(s) => s,
            State::Header { .. } | State::Failed => return Err(EngineError::LoaderFailed),
        };
        if let Some(t) = s.targets.get(s.next) {
            let what = s.header.tensors.iter().find(|i| i.offset <= t.offset && t.offset < i.offset + i.n_bytes).map_or("tensor data".to_string(), |i| format!("tensor {:?}", i.name));
            let end = s.header.data_offset + t.offset + t.len;
            return Err(GgufError::Truncated { what, offset: self.pushed, needed: end - self.pushed, len: self.pushed }.into());
        }
        let Streaming { header, cfg, tokenizer, chat_template, gpu, host, fingerprint, .. } = *s;
        let mut host: HashMap<String, Vec<u8>> = host.into_iter().collect();
        // Llama 3's RoPE factors: f32, their shape checked with the config.
        let rope_factors = if cfg.rope_factors { host.remove(crate::model::rope::FACTORS_TENSOR).map(|b| f32s(&b)) } else { None };
        let (page_size, stops) = (self.opts.page_size, tokenizer.stop_ids().to_vec());
        let (backend, n_pages) = match gpu {
            Some((gpu, mut weights, alloc)) => {
                alloc.finish().await?;
                weights.rope_factors = rope_factors;
                let n_pages = KvPool::pages_for(&gpu, &cfg, page_size, self.opts.kv_budget_bytes);
                let max_pages = context_limit(&self.opts, &cfg, n_pages * page_size).div_ceil(page_size);
                let b = GpuBackend::new(gpu, &cfg, weights, page_size, n_pages, self.opts.kernels, self.opts.max_batch, max_pages, &stops).await?;
                (Backend::Gpu(Box::new(b)), n_pages)
            }
            None => {
                let Target::Cpu(cpu_opts) = &self.target else { return Err(EngineError::Internal("a CPU load without CPU options")) };
                let model = CpuModel::from_tensors(&header, &cfg, |name| host.remove(name))?;
                let n_pages = (self.opts.kv_budget_bytes / page_bytes(&cfg, page_size)).max(1) as usize;
                let b = CpuBackend::new(&cfg, model, rope_factors.as_deref(), page_size, n_pages, self.opts.max_batch, cpu_opts)?;
                (Backend::Cpu(Box::new(b)), n_pages)
            }
        };
        let name = header.get("general.name").and_then(|v| v.as_str()).unwrap_or("model").to_string();
        Ok(Engine::assemble(name, cfg, tokenizer, chat_template, fingerprint.finish(), backend, n_pages, &self.opts))
    }
}

impl Streaming {
    fn start(target: &Target, header: GgufHeader) -> Result<Self, EngineError> {
        let cfg = Config::from_gguf(&header)?;
        let tokenizer = Tokenizer::from_gguf(&header)?;
        let chat_template = ChatTemplate::from_gguf(&header)?;
        let fingerprint = Fingerprinter::new(&header);
        let (gpu, targets) = match target {
            Target::Gpu(gpu) => {
                let alloc = gpu.alloc_scope("the model's weights");
                let (weights, targets) = ModelWeights::allocate(gpu, &header, &cfg)?;
                (Some((gpu.clone(), weights, alloc)), targets)
            }
            Target::Cpu(_) => (None, host_targets(&header, &cfg)),
        };
        Ok(Self { header, cfg, tokenizer, chat_template, gpu, targets, next: 0, written: 0, pending: Vec::new(), host: Vec::new(), padding_left: 0, pos: 0, fingerprint })
    }

    /// Takes the data section's next bytes: each run that belongs to a weight buffer is
    /// gathered and written to it; padding between tensors is only fingerprinted.
    fn feed(&mut self, mut bytes: &[u8]) -> Result<(), EngineError> {
        let padding = self.padding_left.min(bytes.len() as u64) as usize;
        self.padding_left -= padding as u64;
        bytes = &bytes[padding..];
        self.fingerprint.update(bytes);
        while let Some(t) = self.targets.get(self.next) {
            if bytes.is_empty() {
                break;
            }
            let at = t.offset + self.written + self.pending.len() as u64;
            if self.pos < at {
                // Bytes no weight uses (alignment padding, tensors the model does not read).
                let skip = (at - self.pos).min(bytes.len() as u64) as usize;
                bytes = &bytes[skip..];
                self.pos += skip as u64;
                continue;
            }
            let left = t.offset + t.len - at;
            let take = left.min(bytes.len() as u64) as usize;
            self.pending.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            self.pos += take as u64;
            let done = take as u64 == left;
            if done || self.pending.len() >= WRITE_CHUNK {
                // Whole words only until the last, which `write_padded` pads.
                let n = if done { self.pending.len() } else { self.pending.len() / 4 * 4 };
                match (&t.dest, &self.gpu) {
                    (Destination::Gpu { buffer, dst_offset }, Some((gpu, ..))) => write_padded(gpu, buffer, dst_offset + self.written, &self.pending[..n]),
                    (Destination::Gpu { .. }, None) => return Err(EngineError::Internal("a GPU upload without a GPU")),
                    (Destination::Host(name), _) => {
                        if self.written == 0 {
                            let mut bytes = Vec::new();
                            bytes.try_reserve_exact(t.len as usize).map_err(|_| EngineError::OutOfMemory(format!("{} MiB for tensor {name:?}", t.len >> 20)))?;
                            self.host.push((name.clone(), bytes));
                        }
                        if let Some((_, bytes)) = self.host.last_mut() {
                            bytes.extend_from_slice(&self.pending[..n]);
                        }
                    }
                }
                self.written += n as u64;
                self.pending.drain(..n);
            }
            if done {
                self.next += 1;
                self.written = 0;
            }
        }
        self.pos += bytes.len() as u64;
        Ok(())
    }
}

/// Every tensor the model reads, each to its own host allocation: the CPU backend's weights.
fn host_targets(f: &GgufHeader, cfg: &Config) -> Vec<UploadTarget> {
    let mut targets: Vec<UploadTarget> = cfg
        .expected_tensors()
        .into_iter()
        .filter_map(|(name, _)| f.tensor_info(&name).map(|t| UploadTarget { offset: t.offset, len: t.n_bytes, dest: Destination::Host(name) }))
        .collect();
    targets.sort_by_key(|t| t.offset);
    targets
}
