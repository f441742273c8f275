//! Text to token ids and back, and chat templates, all from GGUF metadata.
//!
//! `vocab` reads `tokenizer.ggml.*`, picks the encoder and decodes ids to bytes; `bpe` builds
//! a `tokenizers`-crate byte-level BPE (`gpt2` vocabularies) and `pretokenize` chooses its
//! split regexes from `tokenizer.ggml.pre` the way llama.cpp does, so ids match llama.cpp's;
//! `spm` is llama.cpp's SentencePiece-style BPE (`llama` vocabularies: Llama 2, Mistral,
//! Gemma); `byte_level` is GPT-2's byte-to-character table; `stream` turns ids into text one at a time without splitting characters; `chat`
//! renders `tokenizer.chat_template` with minijinja.

mod bpe;
pub(crate) mod byte_level;
pub mod chat;
mod pretokenize;
mod spm;
mod stream;
mod vocab;

pub use vocab::Tokenizer;
pub use chat::{ChatTemplate, Conversation, Message};
pub use pretokenize::SUPPORTED_PRE;
pub use stream::StreamDecoder;

/// Why a tokenizer or chat template could not be built or used. Each variant names the
/// metadata key, token or template at fault.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum TokenizerError {
    #[error("GGUF metadata {key:?} is missing or is not {expected}")]
    Metadata { key: &'static str, expected: &'static str },
    #[error("unsupported tokenizer.ggml.model {0:?}: radixlm supports \"gpt2\" (byte-level BPE) and \"llama\" (SentencePiece BPE)")]
    UnsupportedModel(String),
    #[error("unsupported tokenizer.ggml.pre {0:?}: radixlm supports {SUPPORTED_PRE}")]
    UnsupportedPre(String),
    #[error("tokenizer.ggml.token_type has {types} entries for {tokens} tokens")]
    TokenTypeCount { types: usize, tokens: usize },
    #[error("duplicate token {text:?} in tokenizer.ggml.tokens: ids {first} and {second}")]
    DuplicateToken { text: String, first: u32, second: u32 },
    #[error("tokenizer.ggml.merges[{index}] = {merge:?} is not two tokens separated by a space")]
    BadMerge { index: usize, merge: String },
    #[error("{key} = {id} is outside the vocabulary of {vocab_size} tokens")]
    SpecialIdOutOfRange { key: &'static str, id: u64, vocab_size: usize },
    #[error("tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set")]
    MissingBos,
    #[error("building the BPE tokenizer failed: {0}")]
    Build(String),
    #[error("the vocabulary has no token for byte 0x{0:02X} (no <0x{0:02X}> byte token)")]
    NoByteToken(u8),
    #[error("encoding failed: {0}")]
    Encode(String),
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    UnknownTokenId { id: u32, vocab_size: usize },
    #[error("tokenizer.chat_template does not parse: {0}")]
    TemplateSyntax(String),
    #[error("chat template raised an exception: {0}")]
    TemplateRaised(String),
    #[error("chat template failed to render: {0}")]
    TemplateRender(String),
}
