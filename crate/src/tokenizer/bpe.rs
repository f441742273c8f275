//! The byte-level BPE tokenizer of `tokenizer.ggml.model = "gpt2"` models (GPT-2, SmolLM,
//! Llama 3, Qwen 2, ...), built from GGUF metadata.
//!
//! Encoding is the `tokenizers` crate: control and user-defined tokens are added tokens
//! (matched in the raw text first, each becoming its one id), the rest is split by the
//! pre-tokenizer regexes of `tokenizer.ggml.pre`, mapped to the byte-level alphabet and
//! merged by rank. Decoding does not need it: every token's bytes are computed once at load.

use tokenizers::models::bpe::{BpeBuilder, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::byte_level::token_text_to_bytes;
use super::pretokenize::spec_for;
use super::TokenizerError;
use crate::gguf::{GgufHeader, MetaValue};

/// llama.cpp's `tokenizer.ggml.token_type` values (`llama_token_type`).
const TYPE_UNKNOWN: u64 = 2;
const TYPE_CONTROL: u64 = 3;
const TYPE_USER_DEFINED: u64 = 4;

/// Token texts that end generation besides the EOS/EOT ids: the chat-turn terminators of
/// common families, a subset of llama.cpp's `special_eog_ids` detection.
const STOP_TEXTS: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|end|>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<end_of_turn>",
];

/// A byte-level BPE tokenizer with the model's special ids.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Every token's bytes, concatenated: token `i` is `bytes[offsets[i]..offsets[i + 1]]`.
    bytes: Vec<u8>,
    offsets: Vec<usize>,
    bos: Option<u32>,
    eos: u32,
    add_bos: bool,
    stop: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Builds the tokenizer from `tokenizer.ggml.*` metadata.
    pub fn from_gguf(f: &GgufHeader) -> Result<Self, TokenizerError> {
        let model = f
            .get("tokenizer.ggml.model")
            .and_then(MetaValue::as_str)
            .ok_or(TokenizerError::Metadata { key: "tokenizer.ggml.model", expected: "a string" })?;
        if model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(model.into()));
        }
        let pre = match f.get("tokenizer.ggml.pre") {
            None => None,
            Some(v) => Some(v.as_str().ok_or(TokenizerError::Metadata {
                key: "tokenizer.ggml.pre",
                expected: "a string",
            })?),
        };
        let spec = spec_for(pre).ok_or_else(|| TokenizerError::UnsupportedPre(pre.unwrap_or_default().into()))?;

        let tokens = string_array(f, "tokenizer.ggml.tokens")?;
        let types = token_types(f, tokens.len())?;
        let n_vocab = tokens.len();

        let mut vocab = Vocab::with_capacity(n_vocab);
        for (id, text) in tokens.iter().enumerate() {
            if let Some(first) = vocab.insert(text.to_string(), id as u32) {
                return Err(TokenizerError::DuplicateToken { text: text.to_string(), first, second: id as u32 });
            }
        }
        let merges = string_array(f, "tokenizer.ggml.merges")?
            .into_iter()
            .enumerate()
            .map(|(index, merge)| split_merge(merge).ok_or(TokenizerError::BadMerge { index, merge: merge.into() }))
            .collect::<Result<Vec<_>, _>>()?;
        let bpe = BpeBuilder::new()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(spec.ignore_merges)
            .build()
            .map_err(|e| TokenizerError::Build(e.to_string()))?;

        let mut splits: Vec<PreTokenizerWrapper> = Vec::with_capacity(spec.regexes.len() + 1);
        for re in spec.regexes {
            let split = Split::new(SplitPattern::Regex(re.to_string()), SplitDelimiterBehavior::Isolated, false)
                .map_err(|e| TokenizerError::Build(format!("pre-tokenizer regex {re:?}: {e}")))?;
            splits.push(split.into());
        }
        // Splitting is done above; ByteLevel only maps bytes to the vocabulary's alphabet.
        splits.push(ByteLevel::new(false, false, false).into());

        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(Sequence::new(splits)));
        let added = tokens.iter().zip(&types).filter_map(|(text, &ty)| match ty {
            TYPE_CONTROL | TYPE_UNKNOWN => Some(AddedToken::from(*text, true)),
            TYPE_USER_DEFINED => Some(AddedToken::from(*text, false).normalized(false)),
            _ => None,
        });
        inner.add_special_tokens(added).map_err(|e| TokenizerError::Build(e.to_string()))?;

        // Control and user-defined tokens are their literal text; the rest are byte-level.
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(n_vocab + 1);
        offsets.push(0);
        for (text, &ty) in tokens.iter().zip(&types) {
            match ty {
                TYPE_CONTROL | TYPE_USER_DEFINED | TYPE_UNKNOWN => bytes.extend_from_slice(text.as_bytes()),
                _ => token_text_to_bytes(text, &mut bytes),
            }
            offsets.push(bytes.len());
        }

        let bos = optional_id(f, "tokenizer.ggml.bos_token_id", n_vocab)?;
        let eos = optional_id(f, "tokenizer.ggml.eos_token_id", n_vocab)?.ok_or(TokenizerError::Metadata {
            key: "tokenizer.ggml.eos_token_id",
            expected: "a token id",
        })?;
        let eot = optional_id(f, "tokenizer.ggml.eot_token_id", n_vocab)?;
        let add_bos = match f.get("tokenizer.ggml.add_bos_token") {
            None => spec.add_bos_default,
            Some(v) => v.as_bool().ok_or(TokenizerError::Metadata {
                key: "tokenizer.ggml.add_bos_token",
                expected: "a bool",
            })?,
        };
        if add_bos && bos.is_none() {
            return Err(TokenizerError::MissingBos);
        }

        let mut stop = vec![eos];
        let named = STOP_TEXTS.iter().filter_map(|text| inner.token_to_id(text));
        for id in eot.into_iter().chain(named) {
            if !stop.contains(&id) {
                stop.push(id);
            }
        }

        Ok(Self { inner, bytes, offsets, bos, eos, add_bos, stop })
    }

    /// Token ids of `text`. Control tokens written in the text (`<|im_start|>`) become their
    /// single id. BOS is prepended when `add_bos` is asked for and the model adds one
    /// (`tokenizer.ggml.add_bos_token`).
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self.inner.encode_fast(text, false).map_err(|e| TokenizerError::Encode(e.to_string()))?;
        let bos = self.bos.filter(|_| add_bos && self.add_bos);
        Ok(bos.into_iter().chain(encoding.get_ids().iter().copied()).collect())
    }

    /// The text of `ids`, special tokens written out. Bytes that are not valid UTF-8 become
    /// U+FFFD. No spaces are cleaned up, so `decode(encode(s)) == s`.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.token_bytes(id)?);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The raw bytes of one token; a multi-byte character may be split across tokens.
    pub fn token_bytes(&self, id: u32) -> Result<&[u8], TokenizerError> {
        let i = id as usize;
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&start), Some(&end)) => Ok(&self.bytes[start..end]),
            _ => Err(TokenizerError::UnknownTokenId { id, vocab_size: self.vocab_size() }),
        }
    }

    /// The id of a token given its vocabulary text (`"<|im_end|>"`, `"Ġthe"`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    pub fn vocab_size(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos_id(&self) -> u32 {
        self.eos
    }

    /// Whether `encode(text, true)` prepends BOS (`tokenizer.ggml.add_bos_token`).
    pub fn adds_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// Ids that end generation: EOS, EOT when set, and the chat-turn terminators present
    /// in the vocabulary (`<|im_end|>`, `<|eot_id|>`, `<|end|>`, `<|endoftext|>`, ...).
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop
    }
}

/// A merge is `"left right"`; the search for the space starts at byte 1, as in llama.cpp,
/// so a left part may itself begin with a space.
fn split_merge(merge: &str) -> Option<(String, String)> {
    // A space byte is never inside a multi-byte character, so both halves are whole.
    let pos = merge.bytes().skip(1).position(|b| b == b' ')? + 1;
    Some((merge[..pos].to_string(), merge[pos + 1..].to_string()))
}

fn string_array<'f>(f: &'f GgufHeader, key: &'static str) -> Result<Vec<&'f str>, TokenizerError> {
    let err = TokenizerError::Metadata { key, expected: "an array of strings" };
    let values = f.get(key).and_then(MetaValue::as_array).ok_or_else(|| err.clone())?;
    values.iter().map(|v| v.as_str().ok_or_else(|| err.clone())).collect()
}

/// The token types, all normal when the key is absent.
fn token_types(f: &GgufHeader, n_tokens: usize) -> Result<Vec<u64>, TokenizerError> {
    let key = "tokenizer.ggml.token_type";
    let Some(value) = f.get(key) else { return Ok(vec![1; n_tokens]) };
    let err = TokenizerError::Metadata { key, expected: "an array of non-negative integers" };
    let types = value
        .as_array()
        .ok_or_else(|| err.clone())?
        .iter()
        .map(|v| v.as_u64().ok_or_else(|| err.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    if types.len() != n_tokens {
        return Err(TokenizerError::TokenTypeCount { types: types.len(), tokens: n_tokens });
    }
    Ok(types)
}

fn optional_id(f: &GgufHeader, key: &'static str, n_vocab: usize) -> Result<Option<u32>, TokenizerError> {
    let Some(value) = f.get(key) else { return Ok(None) };
    let id = value.as_u64().ok_or(TokenizerError::Metadata { key, expected: "a token id" })?;
    if id >= n_vocab as u64 {
        return Err(TokenizerError::SpecialIdOutOfRange { key, id, vocab_size: n_vocab });
    }
    Ok(Some(id as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_split_at_the_first_space_after_byte_zero() {
        assert_eq!(split_merge("Ġ t"), Some(("Ġ".into(), "t".into())));
        assert_eq!(split_merge("  a"), Some((" ".into(), "a".into())));
        assert_eq!(split_merge("ab"), None);
        assert_eq!(split_merge(""), None);
    }
}
