//! The wasm-bindgen surface the package's worker drives: a loader that streams a GGUF file onto
//! a backend (WebGPU, or the CPU in wasm memory), and an engine run one step at a time. Requests,
//! events and stats cross as JS values of the types in `crate::api` and `contract`, whose
//! TypeScript declarations are generated into the glue's `.d.ts`; every failure is a JS `Error`
//! whose `name` is a stable code the package maps to its error classes. Nothing here panics on input: a
//! panic would kill the module, and the panic hook reports the bugs that remain.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::api::tools;
use crate::api::{Dialect, LogprobEntry, RequestFields, RequestResult, Sampling};
use crate::engine::constraint::ConstraintError;
use crate::cpu::threads::{Seat, Spawner};
use crate::cpu::{CpuError, CpuOptions};
use crate::engine::{ChoiceStep, Choices, Engine, EngineError, EngineOptions, Generation, ModelLoader, Request, Target};
use crate::gpu::context::{Gpu, GpuError, LimitsPolicy};
use crate::kv::spill::idb_store::IdbStore;
use crate::kv::spill::SpillFormat;
use crate::kv::Sequence;

mod contract;

use contract::{from_js, to_js, EngineStats, LoadOptions, ModelInfo, Prefix, StepEvent};

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
    if let EngineError::Gpu(GpuError::Uncaptured(_)) = e {
        // A validation error is a bug in the engine, not in the user's input: report it. (A failed
        // readback is not: it is how a lost device first shows, and the worker reloads.)
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
    pub async fn create(
        total_bytes: Option<f64>,
        #[wasm_bindgen(unchecked_param_type = "LoadOptions")] options: JsValue,
        #[wasm_bindgen(unchecked_param_type = "((module: WebAssembly.Module, memory: WebAssembly.Memory, seat: number) => void) | undefined")] spawn_thread: Option<js_sys::Function>,
    ) -> Result<WasmLoader, JsValue> {
        let options: LoadOptions = from_js(options, "engine options")?;
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
    #[wasm_bindgen(unchecked_return_type = "Promise<WasmEngine>")]
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
    req.sampling(engine.cfg.vocab_size, engine.tool_dialect(), || (js_sys::Math::random() * (1u64 << 53) as f64) as u64).map_err(invalid)
}

struct State {
    engine: Engine,
    /// Why spilling is off although it was asked for.
    spill_note: Option<String>,
    current: Option<Running>,
    /// A "done" or "choice_done" event held back while the text it ends is given as a last
    /// "token" event.
    pending_done: Option<StepEvent>,
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
    fn begin(&self, n: usize, logprobs: bool, calls: Option<Dialect>, start: impl FnOnce(&mut Engine, &mut Sequence) -> Result<Request, EngineError>) -> Result<(), JsValue> {
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

/// A request's choices in flight, whether its events carry log-probabilities, and the dialect
/// of its replies' tool calls where they may make them.
struct Running {
    choices: Choices,
    logprobs: bool,
    calls: Option<Dialect>,
}

impl Running {
    fn release(self, engine: &mut Engine) {
        for mut seq in self.choices.into_sequences() {
            engine.release(&mut seq);
        }
    }
}

/// The result of a request: every choice, the usage and the stats.
fn result(engine: &Engine, generations: &[Generation], run: &Running) -> Result<RequestResult, JsValue> {
    RequestResult::new(&engine.tokenizer, generations, run.logprobs, run.calls).ok_or_else(|| named_error("InternalError", "a request ended without choices"))
}

#[wasm_bindgen]
impl WasmEngine {
    #[wasm_bindgen(unchecked_return_type = "ModelInfo")]
    pub fn info(&self) -> Result<JsValue, JsValue> {
        let st = self.borrow()?;
        let e = &st.engine;
        let backend = e.backend_info();
        let tools = e.tool_dialect();
        to_js(&ModelInfo {
            model_name: e.model_name.clone(),
            architecture: e.cfg.arch.clone(),
            n_layers: e.cfg.n_layers,
            n_embd: e.cfg.n_embd,
            vocab_size: e.cfg.vocab_size,
            n_ctx: e.cfg.n_ctx_train,
            max_context: e.max_context,
            page_size: e.cache_stats().page_size,
            adapter: backend.device,
            backend: backend.backend,
            threads: backend.threads,
            fingerprint: format!("{:032x}", e.fingerprint),
            has_chat_template: e.chat_template.is_some(),
            tool_format: tools.name().into(),
            tool_call_opener: tools.call_opener().into(),
        })
    }

    /// Starts a chat request (`messages`).
    pub fn start_chat(&self, #[wasm_bindgen(unchecked_param_type = "RequestFields")] request: JsValue) -> Result<(), JsValue> {
        let req: RequestFields = from_js(request, "chat request")?;
        let (chat, calls) = req.conversation(self.borrow()?.engine.tool_dialect()).map_err(invalid)?;
        let s = sampling(&req, &self.borrow()?.engine)?;
        self.begin(s.n, s.params.logprobs.is_some(), calls, |engine, seq| engine.start_chat(seq, &chat, &s.params))
    }

    /// Starts a text completion request (`prompt`).
    pub fn start_completion(&self, #[wasm_bindgen(unchecked_param_type = "RequestFields")] request: JsValue) -> Result<(), JsValue> {
        let req: RequestFields = from_js(request, "completion request")?;
        let prompt = req.completion_prompt().map_err(invalid)?;
        let s = sampling(&req, &self.borrow()?.engine)?;
        self.begin(s.n, s.params.logprobs.is_some(), None, |engine, seq| {
            let prompt = engine.tokenizer.encode(prompt, true)?;
            engine.start(seq, &prompt, &s.params)
        })
    }

    /// One step of the current request: one prefill batch or one decoded token.
    #[wasm_bindgen(unchecked_return_type = "Promise<StepEvent>")]
    pub fn step(&self) -> js_sys::Promise {
        let state = self.state.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut st = state.try_borrow_mut().map_err(|_| busy())?;
            if let Some(done) = st.pending_done.take() {
                return to_js(&done);
            }
            let State { engine, current, pending_done, .. } = &mut *st;
            let run = current.as_mut().ok_or_else(|| named_error("InvalidRequestError", "no request is running"))?;
            let step = engine.step_choices(&mut run.choices).await;
            let event = match step {
                Ok(ChoiceStep::Prefill { done, total }) => StepEvent::Prefill { done, total },
                Ok(ChoiceStep::Token { index, token, text }) => {
                    let logprob = run.logprobs.then(|| run.choices.last_logprob(index).map(|lp| LogprobEntry::new(&engine.tokenizer, lp))).flatten();
                    StepEvent::Token { index, token: Some(token), text, logprob }
                }
                Ok(ChoiceStep::ChoiceDone { index, tail }) => tail_then(index, tail, StepEvent::ChoiceDone { index }, pending_done),
                Ok(ChoiceStep::Done { generations, tail }) => {
                    let index = run.choices.n() - 1;
                    let done = result(engine, &generations, run);
                    if let Some(run) = current.take() {
                        run.release(engine);
                    }
                    tail_then(index, tail, StepEvent::Done(done?), pending_done)
                }
                Err(e) => {
                    if let Some(run) = current.take() {
                        run.release(engine);
                    }
                    return Err(js_error(&e, Phase::Request));
                }
            };
            to_js(&event)
        })
    }

    /// Ends the current request between steps: its result (finish_reason "abort"), or null when
    /// none runs.
    #[wasm_bindgen(unchecked_return_type = "RequestResult | null")]
    pub fn abort(&self) -> Result<JsValue, JsValue> {
        let mut st = self.borrow()?;
        // A held-back "done" ends the request; a held-back "choice_done" is dropped by the abort.
        let pending = st.pending_done.take();
        let State { engine, current, .. } = &mut *st;
        let Some(mut run) = current.take() else {
            return match pending {
                Some(StepEvent::Done(done)) => to_js(&done),
                _ => Ok(JsValue::NULL),
            };
        };
        let generations = engine.abort_choices(&mut run.choices);
        let done = result(engine, &generations, &run);
        run.release(engine);
        to_js(&done?)
    }

    #[wasm_bindgen(unchecked_return_type = "EngineStats")]
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        let st = self.borrow()?;
        let (requests, tokens_reused) = st.engine.usage_totals();
        to_js(&EngineStats { cache: st.engine.cache_stats(), requests, tokens_reused, spill: st.engine.spill_stats(), spill_note: st.spill_note.clone() })
    }

    /// Writes up to `max_pages` cached pages the spill store lacks to IndexedDB, prefixes first;
    /// for idle time between requests. Resolves to whether more remain.
    #[wasm_bindgen(unchecked_return_type = "Promise<boolean>")]
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
    #[wasm_bindgen(unchecked_return_type = "Promise<number>")]
    pub fn pin(&self, #[wasm_bindgen(unchecked_param_type = "Prefix")] prefix: JsValue) -> js_sys::Promise {
        let state = self.state.clone();
        let prefix = from_js::<Prefix>(prefix, "pin");
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

    /// Undoes one pin of the same prefix; false if it was not pinned.
    pub fn unpin(&self, #[wasm_bindgen(unchecked_param_type = "Prefix")] prefix: JsValue) -> Result<bool, JsValue> {
        let prefix: Prefix = from_js(prefix, "unpin")?;
        let mut st = self.borrow()?;
        let tokens = prefix_tokens(&mut st.engine, &prefix).map_err(|e| js_error(&e, Phase::Request))?;
        Ok(st.engine.unpin(&tokens))
    }

    /// Empties both tiers: the GPU's cached prefixes and this model's spill records.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
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
fn tail_then(index: usize, tail: String, then: StepEvent, pending: &mut Option<StepEvent>) -> StepEvent {
    if tail.is_empty() {
        return then;
    }
    *pending = Some(then);
    StepEvent::Token { index, token: None, text: tail, logprob: None }
}

fn prefix_tokens(engine: &mut Engine, prefix: &Prefix) -> Result<Vec<u32>, EngineError> {
    match prefix {
        Prefix::Conversation { tools, messages } => {
            if tools.is_empty() && messages.is_empty() {
                return Err(EngineError::InvalidRequest("a prefix needs messages or tools".into()));
            }
            tools::check_tools(tools).map_err(EngineError::InvalidRequest)?;
            let chat = tools::template_messages(tools, messages, engine.tool_dialect()).map_err(EngineError::InvalidRequest)?;
            engine.chat_prefix_tokens(&chat)
        }
        Prefix::Text { text } => Ok(engine.tokenizer.encode(text, true)?),
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
