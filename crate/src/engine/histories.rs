//! Token-exact histories for stateless chat. Each request carries the whole conversation as
//! text, like OpenAI's API; re-tokenizing an earlier reply need not give the ids the model
//! generated (BPE can split the same text differently), and then the cache could not match it.
//! So the ids of each finished conversation — prompt, reply as generated, the template's end
//! of turn — are kept under its rendered text, and a later conversation that starts with that
//! text starts with those ids.

use std::collections::VecDeque;

use crate::tokenizer::{Tokenizer, TokenizerError};

/// Conversations remembered; the oldest used is forgotten first. Each costs its text and ids.
const MAX_HISTORIES: usize = 64;

#[derive(Default)]
pub struct TokenHistories {
    /// (rendered text, its ids), most recently used first.
    entries: VecDeque<(String, Vec<u32>)>,
}

impl TokenHistories {
    /// The ids of `text`: those of the longest remembered conversation it starts with, then the
    /// tokens of the rest (the whole text, with a BOS token as the model wants, when none).
    pub fn encode(&mut self, tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let best = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, (t, _))| text.starts_with(t.as_str()))
            .max_by_key(|(_, (t, _))| t.len())
            .map(|(i, _)| i);
        let Some(i) = best else {
            return tokenizer.encode(text, true);
        };
        let entry = self.entries.remove(i).unwrap_or_default();
        let mut ids = entry.1.clone();
        ids.extend(tokenizer.encode(&text[entry.0.len()..], false)?);
        self.entries.push_front(entry);
        Ok(ids)
    }

    /// Remembers the ids of a rendered conversation.
    pub fn record(&mut self, text: String, ids: Vec<u32>) {
        self.entries.retain(|(t, _)| *t != text);
        self.entries.push_front((text, ids));
        self.entries.truncate(MAX_HISTORIES);
    }
}
