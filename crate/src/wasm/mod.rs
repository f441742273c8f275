//! The wasm-bindgen surface the package's worker drives: a loader that streams a GGUF file onto
//! a backend (WebGPU, or the CPU in wasm memory), and an engine run one step at a time. Requests and events cross as JSON (typed on
//! the TypeScript side, `pkg/src/wasm/radixlm.d.ts`); every failure is a JS `Error` whose `name`
//! is a stable code the package maps to its error classes. Nothing here panics on input: a
//! panic would kill the module, and the panic hook reports the bugs that remain.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::api::tools::{self, ChatMessage, Tool};
use crate::api::{self, RequestFields, Sampling};
use crate::engine::constraint::ConstraintError;
use crate::cpu::threads::{Seat, Spawner};
use crate::cpu::{CpuError, CpuOptions};
use crate::engine::{ChoiceStep, Choices, Engine, EngineError, EngineOptions, Generation, ModelLoader, Request, Target};
use crate::gpu::context::{Gpu, GpuError, LimitsPolicy};
use crate::kv::spill::idb_store::IdbStore;
use crate::kv::spill::SpillFormat;
use crate::kv::Sequence;

#[wasm_bindgen(start)]
fn start() {
    console_error_panic_hook::set_once();
}

/// Where an error arose: a tokenizer error while loading means a bad file, while serving a
/// request a bad request.
#[derive(Clone, Copy)]
enum Phase {
    Load,
    Request,
}

fn js_error(e: &EngineError, phase: Phase) -> JsValue {
    let name = match e {
        // Logits that are all NaN or -inf come from NaN or infinite weights.
        EngineError::Gguf(_) | EngineError::Model(_) | EngineError::NoFiniteLogits => "ModelFormatError",
        EngineError::Tokenizer(_) => match phase {
            Phase::Load => "ModelFormatError",
            Phase::Request => "InvalidRequestError",
        },
        EngineError::Gpu(g) => match g {
            GpuError::NoAdapter(_) => "NoAdapterError",
            GpuError::RequestDevice(_) | GpuError::Weight { .. } => "AdapterLimitsError",
            GpuError::OutOfMemory { .. } => "GpuOutOfMemoryError",
            GpuError::DeviceLost(_) => "DeviceLostError",
            GpuError::Readback(_) | GpuError::ReadbackRange { .. } | GpuError::Uncaptured(_) | GpuError::NoTimestamps(_) => "GpuError",
        },
        EngineError::Cpu(c) => match c {
            CpuError::OutOfMemory(_) => "OutOfMemoryError",
            CpuError::TokenId { .. } => "InvalidRequestError",
            CpuError::Threads(_) | CpuError::Batch => "InternalError",
        },
        EngineError::OutOfMemory(_) => "OutOfMemoryError",
        EngineError::PromptTooLong { .. } | EngineError::Cache(_) => "PromptTooLongError",
        EngineError::EmptyPrompt | EngineError::NoChatTemplate | EngineError::Unsupported(_) | EngineError::InvalidRequest(_) => "InvalidRequestError",
        EngineError::Constraint(ConstraintError::Format(_)) => "InvalidRequestError",
        EngineError::LoaderFailed | EngineError::RequestOver | EngineError::Internal(_) | EngineError::Constraint(ConstraintError::Matcher(_)) => "InternalError",
    };
    if name == "GpuError" {
        // A validation error is a bug in the engine, not in the user's input: report it.
        web_sys::console::error_1(&format!("radixlm: {e}").into());
    }
    named_error(name, &e.to_string())
}

fn named_error(name: &str, message: &str) -> JsValue {
    let err = js_sys::Error::new(message);
    err.set_name(name);
    err.into()
}

fn invalid(message: impl std::fmt::Display) -> JsValue {
    named_error("InvalidRequestError", &message.to_string())
}

fn busy() -> JsValue {
    named_error("EngineBusyError", "the engine is running a step; wait for it before calling again")
}

/// Options of `WasmLoader.create`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LoadOptions {
    kv_budget_bytes: Option<f64>,
    max_batch: Option<usize>,
    max_context: Option<usize>,
    /// "q8" (the default), "q4" or "off".
    spill: Option<String>,
    spill_budget_bytes: Option<f64>,
    /// "webgpu" (the default) or "cpu"; the package's worker resolves "auto" first, since only
    /// it sees whether the adapter is a software one.
    backend: Option<String>,
    /// The CPU backend's threads (1 by default); more than one needs the threaded build and a
    /// `spawn_thread` function.
    threads: Option<usize>,
}

impl LoadOptions {
    fn engine_options(&self) -> Result<EngineOptions, JsValue> {
        let mut opts = EngineOptions::default();
        if let Some(b) = self.kv_budget_bytes {
            if !(b.is_finite() && b >= 1.0) {
                return Err(invalid(format!("kvBudgetBytes must be a positive number of bytes, got {b}")));
            }
            opts.kv_budget_bytes = b as u64;
        }
        if let Some(b) = self.max_batch {
            if b == 0 {
                return Err(invalid("maxBatch must be at least 1"));
            }
            opts.max_batch = b;
        }
        opts.max_context = self.max_context;
        opts.spill = match self.spill.as_deref() {
            None | Some("q8") => Some(SpillFormat::Q8),
            Some("q4") => Some(SpillFormat::Q4),
            Some("off") => None,
            Some(other) => return Err(invalid(format!("spill must be \"q8\", \"q4\" or \"off\", got {other:?}"))),
        };
        if let Some(b) = self.spill_budget_bytes {
            if !(b.is_finite() && b >= 0.0) {
                return Err(invalid(format!("spillBudgetBytes must be a number of bytes, got {b}")));
            }
            opts.spill_budget_bytes = b as u64;
        }
        Ok(opts)
    }
}

/// Streams a GGUF file onto the backend: `create`, `push` each chunk in order, `finish`.
#[wasm_bindgen]
pub struct WasmLoader {
    inner: Option<ModelLoader>,
    /// The spill store's budget, when spilling is on.
    spill_budget: Option<u64>,
}

#[wasm_bindgen]
impl WasmLoader {
    /// Opens the WebGPU adapter and a device with the adapter's limits, or readies the CPU
    /// backend. `spawn_thread(module, memory, seat)` starts each CPU thread beyond the worker's
    /// own: a Web Worker that instantiates `module` on `memory` and calls `cpu_thread_run(seat)`.
    pub async fn create(total_bytes: Option<f64>, options_json: String, spawn_thread: Option<js_sys::Function>) -> Result<WasmLoader, JsValue> {
        let options: LoadOptions = serde_json::from_str(&options_json).map_err(|e| invalid(format!("engine options: {e}")))?;
        let opts = options.engine_options()?;
        let target = match options.backend.as_deref() {
            None | Some("webgpu") => {
                let gpu = Gpu::new(LimitsPolicy::Adapter).await.map_err(|e| match e {
                    // wgpu's text lists the native backends it was built without; a browser user
                    // needs only to know that no adapter came.
                    GpuError::NoAdapter(_) => named_error("NoAdapterError", "the browser offers WebGPU but returned no GPU adapter"),
                    e => js_error(&e.into(), Phase::Load),
                })?;
                Target::Gpu(Arc::new(gpu))
            }
            Some("cpu") => Target::Cpu(cpu_options(options.threads.unwrap_or(1), spawn_thread)?),
            Some(other) => return Err(invalid(format!("backend must be \"webgpu\" or \"cpu\", got {other:?}"))),
        };
        let file_len = total_bytes.filter(|n| n.is_finite() && *n >= 0.0).map(|n| n as u64);
        let spill_budget = opts.spill.map(|_| opts.spill_budget_bytes);
        Ok(WasmLoader { inner: Some(ModelLoader::new(target, opts, file_len)), spill_budget })
    }

    /// The next bytes of the file.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), JsValue> {
        let loader = self.inner.as_mut().ok_or_else(|| named_error("InternalError", "the loader has finished"))?;
        loader.push(chunk).map_err(|e| js_error(&e, Phase::Load))
    }

    pub fn bytes_pushed(&self) -> f64 {
        self.inner.as_ref().map_or(0.0, |l| l.pushed() as f64)
    }

    /// After the last chunk: resolves to a `WasmEngine`.
    pub fn finish(&mut self) -> Result<js_sys::Promise, JsValue> {
        let loader = self.inner.take().ok_or_else(|| named_error("InternalError", "the loader has finished"))?;
        let spill_budget = self.spill_budget;
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            let mut engine = loader.finish().await.map_err(|e| js_error(&e, Phase::Load))?;
            // Without IndexedDB (a private window, a blocked origin) the engine runs with its
            // GPU tier only; `stats()` says why.
            let mut spill_note = None;
            if let Some(budget) = spill_budget {
                match IdbStore::open(budget).await {
                    Ok(store) => {
                        if !engine.attach_spill_store(Box::new(store)).await {
                            spill_note = Some("this model's head size has no spill quantization group".to_string());
                        }
                    }
                    Err(e) => spill_note = Some(e.to_string()),
                }
            }
            Ok(WasmEngine::new(engine, spill_note).into())
        }))
    }
}

/// The CPU backend on `threads` threads: the worker's and `threads - 1` started by `spawn`.
fn cpu_options(threads: usize, spawn: Option<js_sys::Function>) -> Result<CpuOptions, JsValue> {
    if threads <= 1 {
        return Ok(CpuOptions { threads: Some(1), ..Default::default() });
    }
    if !cfg!(target_feature = "atomics") {
        return Err(invalid(format!("{threads} threads need radixlm's threaded build (this one runs on one thread)")));
    }
    let spawn = spawn.ok_or_else(|| invalid(format!("{threads} threads need a function that starts them")))?;
    let start = move |seat: Seat| {
        let raw = JsValue::from(seat.into_raw() as u32);
        spawn.call3(&JsValue::NULL, &wasm_bindgen::module(), &wasm_bindgen::memory(), &raw).map(drop).map_err(|e| format!("cannot start a CPU thread: {e:?}"))
    };
    Ok(CpuOptions { threads: Some(threads), spawner: Spawner::External(Rc::new(start)) })
}

/// A CPU thread's body, in the Web Worker `spawn_thread` started: takes tasks until the engine
/// is dropped.
#[wasm_bindgen]
pub fn cpu_thread_run(seat: u32) {
    // SAFETY: `seat` is what `cpu_options` handed to `spawn_thread`, which passes each seat to
    // one worker only.
    unsafe { Seat::from_raw(seat as usize) }.run()
}

/// A request's fields checked into sampling parameters and a choice count.
fn sampling(req: &RequestFields, engine: &Engine) -> Result<Sampling, JsValue> {
    // No seed: a fresh one per request, as OpenAI's API does (a fixed default would give every
    // sampled reply to the same conversation the same words).
    req.sampling(engine.cfg.vocab_size, || (js_sys::Math::random() * (1u64 << 53) as f64) as u64).map_err(invalid)
}

/// A prefix to pin: text, or a conversation and its tools (rendered without opening the
/// assistant's turn).
#[derive(Deserialize)]
#[serde(untagged, deny_unknown_fields)]
enum PrefixJson {
    Text {
        text: String,
    },
    Conversation {
        #[serde(default)]
        tools: Vec<Tool>,
        #[serde(default)]
        messages: Vec<ChatMessage>,
    },
}

fn parse<T: serde::de::DeserializeOwned>(json: &str, what: &str) -> Result<T, JsValue> {
    serde_json::from_str(json).map_err(|e| invalid(format!("{what}: {e}")))
}

struct State {
    engine: Engine,
    /// Why spilling is off although it was asked for.
    spill_note: Option<String>,
    current: Option<Running>,
    /// A "done" event held back while the text it ends is given as a last "token" event.
    pending_done: Option<String>,
}

/// A loaded model. One request runs at a time, a step per `step()` call; the worker returns to
/// its event loop between steps. A call made while a step is in flight fails with
/// `EngineBusyError` rather than re-entering the engine.
#[wasm_bindgen]
pub struct WasmEngine {
    state: Rc<RefCell<State>>,
}

impl WasmEngine {
    fn new(engine: Engine, spill_note: Option<String>) -> Self {
        Self { state: Rc::new(RefCell::new(State { engine, spill_note, current: None, pending_done: None })) }
    }

    fn borrow(&self) -> Result<std::cell::RefMut<'_, State>, JsValue> {
        self.state.try_borrow_mut().map_err(|_| busy())
    }

    /// Starts a request on a fresh sequence; a request that fails to start releases whatever
    /// pages it had adopted.
    fn begin(&self, n: usize, logprobs: bool, calls: bool, start: impl FnOnce(&mut Engine, &mut Sequence) -> Result<Request, EngineError>) -> Result<(), JsValue> {
        let mut st = self.borrow()?;
        if st.current.is_some() || st.pending_done.is_some() {
            return Err(named_error("EngineBusyError", "a request is already running; requests must be queued"));
        }
        let mut seq = Sequence::default();
        match start(&mut st.engine, &mut seq) {
            Ok(req) => {
                st.current = Some(Running { choices: Choices::new(req, n), logprobs, calls });
                Ok(())
            }
            Err(e) => {
                st.engine.release(&mut seq);
                Err(js_error(&e, Phase::Request))
            }
        }
    }
}

/// A request's choices in flight, whether its events carry log-probabilities, and whether its
/// replies may be tool calls.
struct Running {
    choices: Choices,
    logprobs: bool,
    calls: bool,
}

impl Running {
    fn release(self, engine: &mut Engine) {
        for mut seq in self.choices.into_sequences() {
            engine.release(&mut seq);
        }
    }
}

/// The last event of a request: every choice, the usage and the stats. Its `finish_reason` is
/// "abort" when the request was aborted, else the first choice's.
fn done_event(engine: &Engine, generations: &[Generation], run: &Running) -> String {
    let mut done = api::result(&engine.tokenizer, generations, run.logprobs, run.calls);
    let aborted = generations.iter().any(|g| g.finish_reason == crate::engine::FinishReason::Aborted);
    done["type"] = "done".into();
    done["finish_reason"] = if aborted { "abort".into() } else { generations.first().map_or("abort", |g| api::finish_reason(g.finish_reason)).into() };
    done.to_string()
}

#[wasm_bindgen]
impl WasmEngine {
    pub fn info(&self) -> Result<String, JsValue> {
        let st = self.borrow()?;
        let e = &st.engine;
        let backend = e.backend_info();
        Ok(json!({
            "model_name": e.model_name,
            "architecture": e.cfg.arch,
            "n_layers": e.cfg.n_layers,
            "n_embd": e.cfg.n_embd,
            "vocab_size": e.cfg.vocab_size,
            "n_ctx": e.cfg.n_ctx_train,
            "max_context": e.max_context,
            "page_size": e.cache_stats().page_size,
            "adapter": backend.device,
            "backend": backend.backend,
            "threads": backend.threads,
            "fingerprint": format!("{:032x}", e.fingerprint),
            "has_chat_template": e.chat_template.is_some(),
        })
        .to_string())
    }

    pub fn start_chat(&self, request_json: &str) -> Result<(), JsValue> {
        let req: RequestFields = parse(request_json, "chat request")?;
        let (messages, calls) = req.conversation().map_err(invalid)?;
        let s = sampling(&req, &self.borrow()?.engine)?;
        self.begin(s.n, s.params.logprobs.is_some(), calls, |engine, seq| engine.start_chat(seq, &messages, &s.params))
    }

    pub fn start_completion(&self, request_json: &str) -> Result<(), JsValue> {
        let req: RequestFields = parse(request_json, "completion request")?;
        let prompt = req.completion_prompt().map_err(invalid)?;
        let s = sampling(&req, &self.borrow()?.engine)?;
        self.begin(s.n, s.params.logprobs.is_some(), false, |engine, seq| {
            let prompt = engine.tokenizer.encode(prompt, true)?;
            engine.start(seq, &prompt, &s.params)
        })
    }

    /// One step of the current request; resolves to a step event (JSON).
    pub fn step(&self) -> js_sys::Promise {
        let state = self.state.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut st = state.try_borrow_mut().map_err(|_| busy())?;
            if let Some(done) = st.pending_done.take() {
                return Ok(done.into());
            }
            let State { engine, current, pending_done, .. } = &mut *st;
            let run = current.as_mut().ok_or_else(|| named_error("InvalidRequestError", "no request is running"))?;
            let step = engine.step_choices(&mut run.choices).await;
            let event = match step {
                Ok(ChoiceStep::Prefill { done, total }) => json!({ "type": "prefill", "done": done, "total": total }).to_string(),
                Ok(ChoiceStep::Token { index, token, text }) => {
                    let logprob = run.logprobs.then(|| run.choices.last_logprob(index).map(|lp| api::logprob_entry(&engine.tokenizer, lp))).flatten();
                    json!({ "type": "token", "index": index, "token": token, "text": text, "logprob": logprob }).to_string()
                }
                Ok(ChoiceStep::ChoiceDone { index, tail }) => {
                    let done = json!({ "type": "choice_done", "index": index }).to_string();
                    tail_then(index, tail, done, pending_done)
                }
                Ok(ChoiceStep::Done { generations, tail }) => {
                    let index = run.choices.n() - 1;
                    let done = done_event(engine, &generations, run);
                    if let Some(run) = current.take() {
                        run.release(engine);
                    }
                    tail_then(index, tail, done, pending_done)
                }
                Err(e) => {
                    if let Some(run) = current.take() {
                        run.release(engine);
                    }
                    return Err(js_error(&e, Phase::Request));
                }
            };
            Ok(event.into())
        })
    }

    /// Ends the current request between steps; its "done" event (JSON), or "null" when none runs.
    pub fn abort(&self) -> Result<String, JsValue> {
        let mut st = self.borrow()?;
        // A held-back "done" ends the request; a held-back "choice_done" is dropped by the abort.
        let pending = st.pending_done.take();
        let State { engine, current, .. } = &mut *st;
        let Some(mut run) = current.take() else { return Ok(pending.unwrap_or_else(|| "null".into())) };
        let generations = engine.abort_choices(&mut run.choices);
        let done = done_event(engine, &generations, &run);
        run.release(engine);
        Ok(done)
    }

    pub fn stats(&self) -> Result<String, JsValue> {
        let st = self.borrow()?;
        let (requests, tokens_reused) = st.engine.usage_totals();
        let mut stats = serde_json::to_value(st.engine.cache_stats()).map_err(|e| named_error("InternalError", &e.to_string()))?;
        stats["requests"] = requests.into();
        stats["tokens_reused"] = tokens_reused.into();
        stats["spill"] = serde_json::to_value(st.engine.spill_stats()).map_err(|e| named_error("InternalError", &e.to_string()))?;
        stats["spill_note"] = st.spill_note.clone().into();
        Ok(stats.to_string())
    }

    /// Writes up to `max_pages` cached pages the spill store lacks to IndexedDB, prefixes first;
    /// for idle time between requests. Resolves to whether more remain.
    pub fn write_behind(&self, max_pages: u32) -> js_sys::Promise {
        let state = self.state.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut st = state.try_borrow_mut().map_err(|_| busy())?;
            if st.current.is_some() {
                return Err(named_error("EngineBusyError", "a request is running; write behind between requests"));
            }
            let more = st.engine.write_behind_some(max_pages as usize).await;
            Ok(JsValue::from_bool(more))
        })
    }

    /// Pins a prefix (prefilling it if not cached); resolves to the pinned token count.
    pub fn pin(&self, json: &str) -> js_sys::Promise {
        let state = self.state.clone();
        let prefix = parse::<PrefixJson>(json, "pin");
        wasm_bindgen_futures::future_to_promise(async move {
            let prefix = prefix?;
            let mut st = state.try_borrow_mut().map_err(|_| busy())?;
            if st.current.is_some() {
                return Err(named_error("EngineBusyError", "a request is running; pin between requests"));
            }
            let tokens = prefix_tokens(&mut st.engine, &prefix).map_err(|e| js_error(&e, Phase::Request))?;
            let pinned = st.engine.pin(&tokens).await.map_err(|e| js_error(&e, Phase::Request))?;
            Ok(JsValue::from(pinned as f64))
        })
    }

    pub fn unpin(&self, json: &str) -> Result<bool, JsValue> {
        let prefix: PrefixJson = parse(json, "unpin")?;
        let mut st = self.borrow()?;
        let tokens = prefix_tokens(&mut st.engine, &prefix).map_err(|e| js_error(&e, Phase::Request))?;
        Ok(st.engine.unpin(&tokens))
    }

    /// Empties both tiers: the GPU's cached prefixes and this model's spill records.
    pub fn clear(&self) -> js_sys::Promise {
        let state = self.state.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut st = state.try_borrow_mut().map_err(|_| busy())?;
            st.engine.clear_cache();
            st.engine.clear_spill().await;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Test hook: destroys the device, as iOS does to a backgrounded tab.
    pub fn destroy_device_for_test(&self) -> Result<(), JsValue> {
        match self.borrow()?.engine.gpu() {
            Some(gpu) => {
                gpu.device.destroy();
                Ok(())
            }
            None => Err(invalid("the engine runs on the CPU: there is no device to destroy")),
        }
    }

    pub fn is_device_lost(&self) -> bool {
        self.device_lost_reason().is_some()
    }

    /// Why the device was lost, if it was; `undefined` too while a step holds the engine.
    pub fn device_lost_reason(&self) -> Option<String> {
        self.state.try_borrow().ok().and_then(|st| st.engine.gpu().and_then(|gpu| gpu.lost_reason()))
    }
}

/// A choice's held-back text as a "token" event first (the event `then` held back), or `then`.
fn tail_then(index: usize, tail: String, then: String, pending: &mut Option<String>) -> String {
    if tail.is_empty() {
        return then;
    }
    *pending = Some(then);
    json!({ "type": "token", "index": index, "token": -1, "text": tail, "logprob": null }).to_string()
}

fn prefix_tokens(engine: &mut Engine, prefix: &PrefixJson) -> Result<Vec<u32>, EngineError> {
    match prefix {
        PrefixJson::Conversation { tools, messages } => {
            if tools.is_empty() && messages.is_empty() {
                return Err(EngineError::InvalidRequest("a prefix needs messages or tools".into()));
            }
            tools::check_tools(tools).map_err(EngineError::InvalidRequest)?;
            engine.chat_prefix_tokens(&tools::template_messages(tools, messages).map_err(EngineError::InvalidRequest)?)
        }
        PrefixJson::Text { text } => Ok(engine.tokenizer.encode(text, true)?),
    }
}

/// Bytes of wasm linear memory now: the high-water mark, since wasm memory never shrinks.
#[wasm_bindgen]
pub fn wasm_memory_bytes() -> f64 {
    wasm_bindgen::memory()
        .dyn_into::<js_sys::WebAssembly::Memory>()
        .map(|m| m.buffer().unchecked_into::<js_sys::ArrayBuffer>().byte_length() as f64)
        .unwrap_or(0.0)
}
