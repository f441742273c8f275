//! Chat sessions with token-exact history. Each turn appends only the template tokens of what
//! is new — the user's message and the template text around it — to the ids the session already
//! holds, and the model's reply is kept as the ids it generated, never re-tokenized. So turn
//! N + 1 reuses every cached token of turns 1..N and prefills only the new message.

use crate::kv::Sequence;
use crate::tokenizer::Message;

use super::sampling::SamplingParams;
use super::{Engine, EngineError, Generation};

pub struct ChatSession {
    messages: Vec<Message>,
    /// The conversation rendered by the template, without a generation prompt.
    rendered: String,
    /// Token ids of `rendered` as the model saw and produced them.
    history: Vec<u32>,
    seq: Sequence,
}

impl ChatSession {
    /// A session that starts with an optional system prompt.
    pub fn new(system: Option<&str>) -> Self {
        let messages = system.map(|s| vec![Message::new("system", s)]).unwrap_or_default();
        Self { messages, rendered: String::new(), history: Vec::new(), seq: Sequence::default() }
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The ids of the conversation so far.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// Sends a user message and generates the assistant's reply.
    pub async fn send(
        &mut self,
        engine: &mut Engine,
        user: &str,
        params: &SamplingParams,
        on_text: impl FnMut(&str) -> bool,
    ) -> Result<Generation, EngineError> {
        let render = |engine: &Engine, messages: &[Message], open: bool| -> Result<String, EngineError> {
            let template = engine.chat_template.as_ref().ok_or(EngineError::NoChatTemplate)?;
            Ok(template.render(messages, open)?)
        };
        let mut messages = self.messages.clone();
        messages.push(Message::new("user", user));
        let prompt_text = render(engine, &messages, true)?;
        let mut prompt = self.history.clone();
        match prompt_text.strip_prefix(self.rendered.as_str()) {
            // The template only appended text: tokenize just that.
            Some(new) => prompt.extend(engine.tokenizer.encode(new, self.history.is_empty())?),
            // A template that rewrites earlier turns: start over from the full text.
            None => prompt = engine.tokenizer.encode(&prompt_text, true)?,
        }

        let generation = engine.generate(&mut self.seq, &prompt, params, on_text).await?;

        messages.push(Message::new("assistant", generation.text.clone()));
        let rendered = render(engine, &messages, false)?;
        let closing = rendered.strip_prefix(prompt_text.as_str()).and_then(|s| s.strip_prefix(generation.text.as_str()));
        match closing {
            // The reply as generated, then the template's end of turn (e.g. "<|im_end|>\n").
            Some(closing) if !generation.hit_stop_string => {
                self.history = prompt;
                self.history.extend_from_slice(&generation.tokens);
                self.history.extend(engine.tokenizer.encode(closing, false)?);
            }
            // A stop string cut the reply inside a token, or the template reshapes replies.
            _ => self.history = engine.tokenizer.encode(&rendered, true)?,
        }
        self.rendered = rendered;
        self.messages = messages;
        Ok(generation)
    }

    /// Ends the session; its cached pages stay in the engine's prefix cache.
    pub fn close(mut self, engine: &mut Engine) {
        engine.release(&mut self.seq);
    }
}
