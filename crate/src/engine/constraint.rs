//! Structured output: a request's `response_format` (OpenAI's `json_object` and `json_schema`,
//! radixlm's Lark `grammar` and `regex`) compiled by llguidance into a matcher that says which
//! tokens may come next, so every reply parses.

use std::sync::{Arc, Mutex};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory, TokenParser};
use serde::Deserialize;

use crate::tokenizer::Tokenizer;

/// What a reply must be: OpenAI's `response_format`, with radixlm's `grammar` and `regex`.
#[derive(Debug, Clone, PartialEq, Deserialize, tsify::Tsify)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ResponseFormat {
    /// Any text (no constraint).
    Text {},
    /// Any JSON object.
    JsonObject {},
    /// JSON valid against `json_schema.schema`.
    JsonSchema { json_schema: JsonSchemaFormat },
    /// Text in a Lark grammar (llguidance's dialect).
    Grammar { grammar: String },
    /// Text matching a regular expression, whole.
    Regex { pattern: String },
}

/// OpenAI's `json_schema` object.
#[derive(Debug, Clone, PartialEq, Deserialize, tsify::Tsify)]
#[tsify(missing_as_null)]
#[serde(deny_unknown_fields)]
pub struct JsonSchemaFormat {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[tsify(type = "Record<string, unknown>")]
    pub schema: serde_json::Value,
    #[serde(default)]
    pub strict: Option<bool>,
}

impl ResponseFormat {
    /// Parses an OpenAI-shaped `response_format` object.
    pub fn from_json(value: serde_json::Value) -> Result<Self, ConstraintError> {
        serde_json::from_value(value).map_err(|e| ConstraintError::Format(e.to_string()))
    }

    /// llguidance's grammar for it; None for plain text.
    fn grammar(&self) -> Option<TopLevelGrammar> {
        Some(match self {
            Self::Text {} => return None,
            Self::JsonObject {} => TopLevelGrammar::from_json_schema(single_line(serde_json::json!({ "type": "object" }))),
            Self::JsonSchema { json_schema } => TopLevelGrammar::from_json_schema(single_line(json_schema.schema.clone())),
            Self::Grammar { grammar } => TopLevelGrammar::from_lark(grammar.clone()),
            Self::Regex { pattern } => TopLevelGrammar::from_regex(pattern),
        })
    }
}

/// JSON on one line with a space after each comma and colon, unless the schema sets its own
/// layout (llguidance's `x-guidance`): with free whitespace a small model can pad forever.
pub(crate) fn single_line(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(object) = schema.as_object_mut() {
        object.entry("x-guidance").or_insert_with(|| serde_json::json!({ "whitespace_flexible": false, "item_separator": ", ", "key_separator": ": " }));
    }
    schema
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConstraintError {
    /// A response format that does not parse or that the grammar compiler refused: the request's fault.
    #[error("response_format: {0}")]
    Format(String),
    /// The matcher failed on a token it allowed: the engine's fault.
    #[error("structured output: {0}")]
    Matcher(String),
}

/// The model's vocabulary as llguidance's token trie: each token's bytes, control tokens marked
/// as special (never text), the end of sequence as its EOS.
struct VocabEnv {
    trie: TokTrie,
}

impl TokenizerEnv for VocabEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// One model's grammar compiler (built once, on the first constrained request).
pub struct Grammars {
    factory: Arc<ParserFactory>,
    eos: u32,
    /// The parsers of the latest formats, most recent first, as compiled (no token consumed): a
    /// request repeating a format, as an app's tools come with every request, starts from a copy
    /// instead of compiling it again (the default model's tools grammar: ~4 ms natively).
    compiled: Mutex<Vec<(ResponseFormat, TokenParser)>>,
}

/// How many formats' parsers are kept.
const COMPILED_FORMATS: usize = 8;

impl Grammars {
    pub fn new(tokenizer: &Tokenizer) -> Result<Self, ConstraintError> {
        let n = tokenizer.vocab_size() as u32;
        let words = (0..n)
            .map(|id| {
                let bytes = tokenizer.token_bytes(id).map_err(|e| ConstraintError::Matcher(e.to_string()))?;
                Ok(if tokenizer.is_control(id) { [&[TokTrie::SPECIAL_TOKEN_MARKER], bytes].concat() } else { bytes.to_vec() })
            })
            .collect::<Result<Vec<_>, ConstraintError>>()?;
        let info = TokRxInfo { tok_bos: tokenizer.bos_id(), ..TokRxInfo::new(n, tokenizer.eos_id()) };
        let env: TokEnv = Arc::new(VocabEnv { trie: TokTrie::from(&info, &words) });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| ConstraintError::Matcher(e.to_string()))?;
        factory.quiet();
        Ok(Self { factory: Arc::new(factory), eos: tokenizer.eos_id(), compiled: Mutex::new(Vec::new()) })
    }

    /// The constraint of one request, or None for plain text. A grammar llguidance refuses (a
    /// bad schema, regex or Lark) is an error naming its problem, before any token is computed.
    pub fn constraint(&self, format: &ResponseFormat) -> Result<Option<Constraint>, ConstraintError> {
        // Before the grammar is built from the format (a copy of its schema): a kept parser needs none.
        if let Some(parser) = self.recall(format) {
            return Ok(Some(Constraint { matcher: Matcher::new(Ok(parser)), eos: self.eos }));
        }
        let Some(grammar) = format.grammar() else { return Ok(None) };
        let parser = self.factory.create_parser(grammar).map_err(|e| ConstraintError::Format(e.to_string()))?;
        let fresh = parser.deep_clone();
        let matcher = Matcher::new(Ok(parser));
        match matcher.get_error() {
            Some(e) => Err(ConstraintError::Format(e.to_string())),
            None => {
                self.remember(format, fresh);
                Ok(Some(Constraint { matcher, eos: self.eos }))
            }
        }
    }

    /// A copy of the parser compiled for `format`, if it is among the latest.
    fn recall(&self, format: &ResponseFormat) -> Option<TokenParser> {
        let mut compiled = self.compiled.lock().ok()?;
        let i = compiled.iter().position(|(f, _)| f == format)?;
        let entry = compiled.remove(i);
        let copy = entry.1.deep_clone();
        compiled.insert(0, entry);
        Some(copy)
    }

    fn remember(&self, format: &ResponseFormat, parser: TokenParser) {
        if let Ok(mut compiled) = self.compiled.lock() {
            compiled.insert(0, (format.clone(), parser));
            compiled.truncate(COMPILED_FORMATS);
        }
    }
}

/// A request's position in its grammar.
pub struct Constraint {
    matcher: Matcher,
    /// The trie's end of sequence: where the mask allows it, the grammar may end.
    eos: u32,
}

impl Constraint {
    /// The ids the grammar allows next as a bitmask over `n_logits` ids (bit `i % 32` of word
    /// `i / 32`, ids past the vocabulary cleared): the stop tokens are allowed only where the
    /// grammar may end. The GPU's pick kernels read it as it is.
    pub fn allowed(&mut self, stop_ids: &[u32], n_logits: usize) -> Result<Vec<u32>, ConstraintError> {
        let mask = self.matcher.compute_mask_or_eos().map_err(|e| ConstraintError::Matcher(e.to_string()))?;
        let may_end = mask.is_allowed(self.eos);
        let mut words = vec![0u32; n_logits.div_ceil(32)];
        let vocab = mask.len().min(n_logits);
        let full = vocab / 32;
        words[..full].copy_from_slice(&mask.as_slice()[..full]);
        for id in full * 32..vocab {
            set_bit(&mut words, id as u32, mask.is_allowed(id as u32));
        }
        for &id in stop_ids.iter().filter(|&&id| (id as usize) < n_logits) {
            set_bit(&mut words, id, may_end);
        }
        Ok(words)
    }

    /// Sets the logits of the tokens the grammar forbids next to -inf (as [`allowed`](Self::allowed)).
    pub fn mask(&mut self, logits: &mut [f32], stop_ids: &[u32]) -> Result<(), ConstraintError> {
        let words = self.allowed(stop_ids, logits.len())?;
        for (id, l) in logits.iter_mut().enumerate() {
            if !is_allowed(&words, id as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// Advances past the chosen (allowed) token.
    pub fn consume(&mut self, token: u32) -> Result<(), ConstraintError> {
        self.matcher.consume_token(token).map_err(|e| ConstraintError::Matcher(e.to_string()))
    }
}

/// Whether id `id` is set in bitmask `words`.
pub fn is_allowed(words: &[u32], id: u32) -> bool {
    words.get(id as usize / 32).is_some_and(|w| w >> (id % 32) & 1 == 1)
}

fn set_bit(words: &mut [u32], id: u32, on: bool) {
    let (w, bit) = (id as usize / 32, 1u32 << (id % 32));
    words[w] = if on { words[w] | bit } else { words[w] & !bit };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_lsb_first_per_word() {
        let mut words = vec![0u32; 3];
        for id in [0, 31, 32, 70] {
            set_bit(&mut words, id, true);
        }
        assert_eq!(words, vec![1 | 1 << 31, 1, 1 << 6]);
        assert!((0..96).all(|id| is_allowed(&words, id) == [0, 31, 32, 70].contains(&id)));
        set_bit(&mut words, 31, false);
        assert!(!is_allowed(&words, 31) && !is_allowed(&words, 1000));
    }
}
