//! The byte-level BPE encoder of `tokenizer.ggml.model = "gpt2"` vocabularies (GPT-2, SmolLM,
//! Llama 3, Qwen 2, ...), built from GGUF metadata.
//!
//! Encoding is the `tokenizers` crate: control and user-defined tokens are added tokens
//! (matched in the raw text first, each becoming its one id), the rest is split by the
//! pre-tokenizer regexes of `tokenizer.ggml.pre`, mapped to the byte-level alphabet and
//! merged by rank.

use tokenizers::models::bpe::{BpeBuilder, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::pretokenize::PreTokenizerSpec;
use super::vocab::{string_array, TokenType};
use super::TokenizerError;
use crate::gguf::GgufHeader;

/// The `tokenizers` encoder of a byte-level BPE vocabulary.
pub(super) fn build(f: &GgufHeader, tokens: &[&str], types: &[TokenType], spec: PreTokenizerSpec) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let mut vocab = Vocab::with_capacity(tokens.len());
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
    let added = tokens.iter().zip(types).filter_map(|(text, ty)| match ty {
        TokenType::Control | TokenType::Unknown => Some(AddedToken::from(*text, true)),
        TokenType::UserDefined => Some(AddedToken::from(*text, false).normalized(false)),
        _ => None,
    });
    inner.add_special_tokens(added).map_err(|e| TokenizerError::Build(e.to_string()))?;
    Ok(inner)
}

/// A merge is `"left right"`; the search for the space starts at byte 1, as in llama.cpp,
/// so a left part may itself begin with a space.
fn split_merge(merge: &str) -> Option<(String, String)> {
    // A space byte is never inside a multi-byte character, so both halves are whole.
    let pos = merge.bytes().skip(1).position(|b| b == b' ')? + 1;
    Some((merge[..pos].to_string(), merge[pos + 1..].to_string()))
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
