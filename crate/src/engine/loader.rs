//! Loading a model as its bytes arrive. The header is parsed from the first bytes; then every
//! weight's buffers are allocated and each chunk of tensor data is written to the buffers it
//! belongs to (and into the fingerprint) as it comes, so the file is never whole in memory: in
//! the browser a 1 GB model costs GPU memory, not 1 GB of wasm heap that never shrinks.

use std::sync::Arc;

use crate::gguf::{GgufError, GgufHeader};
use crate::gpu::context::{AllocScope, Gpu};
use crate::gpu::weights::write_padded;
use crate::model::fingerprint::Fingerprinter;
use crate::model::Config;
use crate::tokenizer::{ChatTemplate, Tokenizer};

use super::weights::{Destination, ModelWeights, UploadTarget};
use super::{Engine, EngineError, EngineOptions};

/// First guess at the header's size; a longer header tells the parser how much more it needs.
const HEADER_GUESS: usize = 1 << 20;
/// Bytes gathered for one `write_buffer`: large enough to amortise the call, small enough to
/// keep the wasm heap small.
const WRITE_CHUNK: usize = 4 << 20;

/// A model being loaded: `push` the file's bytes in order, then `finish`.
pub struct ModelLoader {
    gpu: Arc<Gpu>,
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
    weights: ModelWeights,
    /// Sorted by offset; `next` is the first not yet complete.
    targets: Vec<UploadTarget>,
    next: usize,
    /// Bytes of `targets[next]` written so far, and those gathered but not yet written.
    written: u64,
    pending: Vec<u8>,
    /// The bytes of `Destination::Host` targets, in order.
    host: Vec<u8>,
    /// Header padding still to arrive before the data section starts.
    padding_left: u64,
    /// Offset in the data section of the next byte to arrive.
    pos: u64,
    fingerprint: Fingerprinter,
    /// Captures out-of-memory and validation errors of the weight buffers.
    alloc: AllocScope,
}

impl ModelLoader {
    pub fn new(gpu: Arc<Gpu>, opts: EngineOptions, file_len: Option<u64>) -> Self {
        Self { gpu, opts, file_len, pushed: 0, state: State::Header { prefix: Vec::new(), need: HEADER_GUESS } }
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
            State::Data(s) => s.feed(&self.gpu, chunk),
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
                let mut s = Streaming::start(&self.gpu, header)?;
                let data_start = (s.header.data_offset as usize).min(prefix.len());
                s.padding_left = s.header.data_offset - data_start as u64;
                s.feed(&self.gpu, &prefix[data_start..])?;
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
    /// forward pass and returns the engine.
    pub async fn finish(mut self) -> Result<Engine, EngineError> {
        // A file smaller than the first guess at its header, or of unknown length, is whole now.
        self.try_header(true)?;
        let mut s = match std::mem::replace(&mut self.state, State::Failed) {
            State::Data(s) => s,
            State::Header { .. } | State::Failed => return Err(EngineError::LoaderFailed),
        };
        if let Some(t) = s.targets.get(s.next) {
            let what = s.header.tensors.iter().find(|i| i.offset <= t.offset && t.offset < i.offset + i.n_bytes).map_or("tensor data".to_string(), |i| format!("tensor {:?}", i.name));
            let end = s.header.data_offset + t.offset + t.len;
            return Err(GgufError::Truncated { what, offset: self.pushed, needed: end - self.pushed, len: self.pushed }.into());
        }
        if s.cfg.rope_factors {
            // The only host tensor: f32, its shape checked with the config.
            s.weights.rope_factors = Some(s.host.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect());
        }
        s.alloc.finish().await?;
        let name = s.header.get("general.name").and_then(|v| v.as_str()).unwrap_or("model").to_string();
        Engine::assemble(name, self.gpu, s.cfg, s.tokenizer, s.chat_template, s.fingerprint.finish(), s.weights, &self.opts).await
    }
}

impl Streaming {
    fn start(gpu: &Gpu, header: GgufHeader) -> Result<Self, EngineError> {
        let cfg = Config::from_gguf(&header)?;
        let tokenizer = Tokenizer::from_gguf(&header)?;
        let chat_template = ChatTemplate::from_gguf(&header)?;
        let fingerprint = Fingerprinter::new(&header);
        let alloc = gpu.alloc_scope("the model's weights");
        let (weights, targets) = ModelWeights::allocate(gpu, &header, &cfg)?;
        Ok(Self { header, cfg, tokenizer, chat_template, weights, targets, next: 0, written: 0, pending: Vec::new(), host: Vec::new(), padding_left: 0, pos: 0, fingerprint, alloc })
    }

    /// Takes the data section's next bytes: each run that belongs to a weight buffer is
    /// gathered and written to it; padding between tensors is only fingerprinted.
    fn feed(&mut self, gpu: &Gpu, mut bytes: &[u8]) -> Result<(), EngineError> {
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
                match &t.dest {
                    Destination::Gpu { buffer, dst_offset } => write_padded(gpu, buffer, dst_offset + self.written, &self.pending[..n]),
                    Destination::Host => self.host.extend_from_slice(&self.pending[..n]),
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
