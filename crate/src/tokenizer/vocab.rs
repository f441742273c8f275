//! The tokenizer of a GGUF vocabulary: its encoder (byte-level BPE for
//! `tokenizer.ggml.model = "gpt2"`, SentencePiece-style BPE for `"llama"`), every token's bytes
//! for decoding (computed once at load), and the special ids.

use super::byte_level::token_text_to_bytes;
use super::pretokenize::spec_for;
use super::spm::{byte_token, Spm, SPACE};
use super::{bpe, TokenizerError};
use crate::gguf::{GgufHeader, MetaValue};

/// llama.cpp's `tokenizer.ggml.token_type` values (`llama_token_type`); anything else is normal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TokenType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    fn from_gguf(v: u64) -> Self {
        match v {
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Normal,
        }
    }

    /// Tokens that stand for their literal text, in the raw text and when decoded.
    fn is_special(self) -> bool {
        matches!(self, Self::Control | Self::UserDefined | Self::Unknown)
    }
}

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

enum Encoder {
    Bpe(Box<tokenizers::Tokenizer>),
    Spm(Spm),
}

/// A tokenizer with the model's special ids.
pub struct Tokenizer {
    encoder: Encoder,
    /// Every token's bytes, concatenated: token `i` is `bytes[offsets[i]..offsets[i + 1]]`.
    bytes: Vec<u8>,
    offsets: Vec<usize>,
    bos: Option<u32>,
    eos: u32,
    add_bos: bool,
    stop: Vec<u32>,
    /// Control and unknown tokens (never text), ascending.
    control: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("model", &match self.encoder {
                Encoder::Bpe(_) => "gpt2",
                Encoder::Spm(_) => "llama",
            })
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
        let tokens = string_array(f, "tokenizer.ggml.tokens")?;
        let types = token_types(f, tokens.len())?;
        let n_vocab = tokens.len();

        // The encoder, and llama.cpp's default for add_bos.
        let (encoder, add_bos_default) = match model {
            "gpt2" => {
                let pre = match f.get("tokenizer.ggml.pre") {
                    None => None,
                    Some(v) => Some(v.as_str().ok_or(TokenizerError::Metadata { key: "tokenizer.ggml.pre", expected: "a string" })?),
                };
                let spec = spec_for(pre).ok_or_else(|| TokenizerError::UnsupportedPre(pre.unwrap_or_default().into()))?;
                (Encoder::Bpe(Box::new(bpe::build(f, &tokens, &types, spec)?)), spec.add_bos_default)
            }
            "llama" => {
                let scores = scores(f, n_vocab)?;
                let special: Vec<bool> = types.iter().map(|t| t.is_special()).collect();
                let add_space_prefix = optional_bool(f, "tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
                (Encoder::Spm(Spm::new(&tokens, scores, &special, add_space_prefix)), true)
            }
            other => return Err(TokenizerError::UnsupportedModel(other.into())),
        };

        // Special tokens are their literal text; the rest as llama.cpp's token_to_piece writes them.
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(n_vocab + 1);
        offsets.push(0);
        for (text, &ty) in tokens.iter().zip(&types) {
            match (&encoder, ty) {
                _ if ty.is_special() => bytes.extend_from_slice(text.as_bytes()),
                (Encoder::Bpe(_), _) => token_text_to_bytes(text, &mut bytes),
                (Encoder::Spm(_), TokenType::Byte) => match byte_token(text) {
                    Some(b) => bytes.push(b),
                    None => bytes.extend_from_slice(text.as_bytes()),
                },
                (Encoder::Spm(_), TokenType::Unused) => {}
                (Encoder::Spm(_), _) => bytes.extend_from_slice(text.replace(SPACE, " ").as_bytes()),
            }
            offsets.push(bytes.len());
        }

        let bos = optional_id(f, "tokenizer.ggml.bos_token_id", n_vocab)?;
        let eos = optional_id(f, "tokenizer.ggml.eos_token_id", n_vocab)?.ok_or(TokenizerError::Metadata {
            key: "tokenizer.ggml.eos_token_id",
            expected: "a token id",
        })?;
        let eot = optional_id(f, "tokenizer.ggml.eot_token_id", n_vocab)?;
        let add_bos = optional_bool(f, "tokenizer.ggml.add_bos_token")?.unwrap_or(add_bos_default);
        if add_bos && bos.is_none() {
            return Err(TokenizerError::MissingBos);
        }

        let control = (0..n_vocab as u32).filter(|&i| matches!(types[i as usize], TokenType::Control | TokenType::Unknown)).collect();
        let mut tokenizer = Self { encoder, bytes, offsets, bos, eos, add_bos, stop: vec![eos], control };
        let named: Vec<u32> = STOP_TEXTS.iter().filter_map(|text| tokenizer.token_id(text)).collect();
        for id in eot.into_iter().chain(named) {
            if !tokenizer.stop.contains(&id) {
                tokenizer.stop.push(id);
            }
        }
        Ok(tokenizer)
    }

    /// Token ids of `text`. Control tokens written in the text (`<|im_start|>`) become their
    /// single id. BOS is prepended when `add_bos` is asked for and the model adds one
    /// (`tokenizer.ggml.add_bos_token`).
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, TokenizerError> {
        let bos = self.bos.filter(|_| add_bos && self.add_bos);
        let ids = match &self.encoder {
            Encoder::Bpe(inner) => inner.encode_fast(text, false).map_err(|e| TokenizerError::Encode(e.to_string()))?.get_ids().to_vec(),
            Encoder::Spm(spm) => spm.encode(text)?,
        };
        Ok(bos.into_iter().chain(ids).collect())
    }

    /// The text of `ids`, special tokens written out. Bytes that are not valid UTF-8 become
    /// U+FFFD. No spaces are cleaned up, so `decode(encode(s)) == s`, but for what a
    /// SentencePiece vocabulary cannot tell apart: the space it may put before the text, and a
    /// literal U+2581 (its written space), which comes back as a space.
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

    /// The id of a token given its vocabulary text (`"<|im_end|>"`, `"Ġthe"`, `"▁the"`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        match &self.encoder {
            Encoder::Bpe(inner) => inner.token_to_id(text),
            Encoder::Spm(spm) => spm.token_id(text),
        }
    }

    /// Whether `id` is a control (or unknown) token: markup of the model's format, never text.
    pub fn is_control(&self, id: u32) -> bool {
        self.control.binary_search(&id).is_ok()
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
    /// in the vocabulary (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, ...).
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop
    }
}

pub(super) fn string_array<'f>(f: &'f GgufHeader, key: &'static str) -> Result<Vec<&'f str>, TokenizerError> {
    let err = TokenizerError::Metadata { key, expected: "an array of strings" };
    let values = f.get(key).and_then(MetaValue::as_array).ok_or_else(|| err.clone())?;
    values.iter().map(|v| v.as_str().ok_or_else(|| err.clone())).collect()
}

/// The token types, all normal when the key is absent.
fn token_types(f: &GgufHeader, n_tokens: usize) -> Result<Vec<TokenType>, TokenizerError> {
    let key = "tokenizer.ggml.token_type";
    let Some(value) = f.get(key) else { return Ok(vec![TokenType::Normal; n_tokens]) };
    let err = TokenizerError::Metadata { key, expected: "an array of non-negative integers" };
    let types = value
        .as_array()
        .ok_or_else(|| err.clone())?
        .iter()
        .map(|v| v.as_u64().map(TokenType::from_gguf).ok_or_else(|| err.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    if types.len() != n_tokens {
        return Err(TokenizerError::TokenTypeCount { types: types.len(), tokens: n_tokens });
    }
    Ok(types)
}

/// The pieces' scores (`tokenizer.ggml.scores`), one per token.
fn scores(f: &GgufHeader, n_tokens: usize) -> Result<Vec<f32>, TokenizerError> {
    let key = "tokenizer.ggml.scores";
    let err = TokenizerError::Metadata { key, expected: "an array of numbers, one per token" };
    let values = f.get(key).and_then(MetaValue::as_array).ok_or_else(|| err.clone())?;
    let scores = values.iter().map(|v| v.as_f64().map(|x| x as f32).ok_or_else(|| err.clone())).collect::<Result<Vec<_>, _>>()?;
    if scores.len() != n_tokens {
        return Err(err);
    }
    Ok(scores)
}

fn optional_bool(f: &GgufHeader, key: &'static str) -> Result<Option<bool>, TokenizerError> {
    f.get(key).map(|v| v.as_bool().ok_or(TokenizerError::Metadata { key, expected: "a bool" })).transpose()
}

fn optional_id(f: &GgufHeader, key: &'static str, n_vocab: usize) -> Result<Option<u32>, TokenizerError> {
    let Some(value) = f.get(key) else { return Ok(None) };
    let id = value.as_u64().ok_or(TokenizerError::Metadata { key, expected: "a token id" })?;
    if id >= n_vocab as u64 {
        return Err(TokenizerError::SpecialIdOutOfRange { key, id, vocab_size: n_vocab });
    }
    Ok(Some(id as u32))
}
