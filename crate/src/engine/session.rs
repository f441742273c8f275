//! Chat sessions for the CLI: a conversation's messages, each turn sent whole through
//! `Engine::start_chat`, as the browser's stateless requests are. The engine's token-exact
//! histories (`histories`) start it with the ids the model saw and produced for the turns
//! before, and the session keeps its sequence (the last partial page too), so turn N + 1 reuses
//! every computed token of turns 1..N and prefills only the new message.

use crate::kv::Sequence;
use crate::tokenizer::Message;

use super::sampling::SamplingParams;
use super::{Engine, EngineError, Generation};

pub struct ChatSession {
    messages: Vec<Message>,
    seq: Sequence,
}

impl ChatSession {
    /// A session that starts with an optional system prompt.
    pub fn new(system: Option<&str>) -> Self {
        Self { messages: system.map(|s| vec![Message::new("system", s)]).unwrap_or_default(), seq: Sequence::default() }
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Sends a user message and generates the assistant's reply; `on_text` receives each piece
    /// of text as it is decoded and returns false to stop.
    pub async fn send(
        &mut self,
        engine: &mut Engine,
        user: &str,
        params: &SamplingParams,
        on_text: impl FnMut(&str) -> bool,
    ) -> Result<Generation, EngineError> {
        let mut messages = self.messages.clone();
        messages.push(Message::new("user", user));
        let mut req = engine.start_chat(&mut self.seq, &messages.clone().into(), params)?;
        let result = engine.run_to_end(&mut req, on_text).await;
        self.seq = req.into_sequence();
        let generation = result?;
        messages.push(Message::new("assistant", generation.text.clone()));
        self.messages = messages;
        Ok(generation)
    }

    /// Ends the session; its cached pages stay in the engine's prefix cache.
    pub fn close(mut self, engine: &mut Engine) {
        engine.release(&mut self.seq);
    }
}
