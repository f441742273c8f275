//! The pre-tokenizer (how text is split into words before BPE) for each `tokenizer.ggml.pre`
//! value, copied from llama.cpp's `llm_tokenizer_bpe` (src/llama-vocab.cpp) so that ids
//! match llama.cpp's. Each regex splits every piece the previous one produced, keeping both
//! matches and the text between them (llama.cpp's `unicode_regex_split`).

/// The `tokenizer.ggml.pre` values radixlm understands, for error messages.
pub const SUPPORTED_PRE: &str = "default, gpt-2 (phi-2, mpt, olmo), smollm (starcoder, refact, \
command-r, codeshell, exaone, minerva-7b), llama3 (llama-v3, llama-bpe, falcon3, pixtral, dbrx, \
smaug-bpe), qwen2 (deepseek-r1-qwen, megrez, stablelm2)";

/// GPT-2's word regex.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// llama.cpp's fallback for BPE models: punctuation runs first, then GPT-2 words, then
/// digit runs cut into threes.
const DEFAULT: &[&str] = &[
    r"[\p{P}\$\+<=>\^~\|]+",
    GPT2,
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
];

/// StarCoder/SmolLM: every digit is its own word, then GPT-2 words.
const SMOLLM: &[&str] = &[r"\p{N}", GPT2];

/// Llama 3 (the tokenizer.json regex with the case-insensitive group spelled out, since
/// llama.cpp's regex engine lacks `(?i:)`).
const LLAMA3: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// Qwen 2: as Llama 3 but single digits.
const QWEN2: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// How one pre-tokenizer type splits text, and the llama.cpp flags that come with it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PreTokenizerSpec {
    pub regexes: &'static [&'static str],
    /// A word that is already a whole token skips the merges (Llama 3's `ignore_merges`).
    pub ignore_merges: bool,
    /// Whether BOS is added when `tokenizer.ggml.add_bos_token` is absent.
    pub add_bos_default: bool,
}

/// The spec for a `tokenizer.ggml.pre` value; `None` (absent key) means llama.cpp's
/// `default`. Unknown values give `None` so the caller can name them in its error.
pub(crate) fn spec_for(pre: Option<&str>) -> Option<PreTokenizerSpec> {
    let plain = |regexes| PreTokenizerSpec { regexes, ignore_merges: false, add_bos_default: false };
    Some(match pre.unwrap_or("default") {
        "default" => plain(DEFAULT),
        "gpt-2" | "phi-2" | "mpt" | "olmo" => plain(&[GPT2]),
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            plain(SMOLLM)
        }
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "pixtral" => {
            PreTokenizerSpec { regexes: LLAMA3, ignore_merges: true, add_bos_default: true }
        }
        "dbrx" | "smaug-bpe" => plain(LLAMA3),
        "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" => plain(QWEN2),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_pre_is_default_and_unknown_is_none() {
        assert_eq!(spec_for(None), spec_for(Some("default")));
        assert_eq!(spec_for(Some("gpt2")), None, "llama.cpp spells it gpt-2");
        assert_eq!(spec_for(Some("smollm")).map(|s| s.regexes), Some(SMOLLM));
        assert!(spec_for(Some("llama-bpe")).is_some_and(|s| s.ignore_merges && s.add_bos_default));
    }

    #[test]
    fn every_regex_compiles() {
        for pre in ["default", "gpt-2", "smollm", "llama3", "qwen2"] {
            for re in spec_for(Some(pre)).unwrap().regexes {
                assert!(fancy_regex_compiles(re), "{pre}: {re}");
            }
        }
    }

    fn fancy_regex_compiles(re: &str) -> bool {
        tokenizers::pre_tokenizers::split::Split::new(
            tokenizers::pre_tokenizers::split::SplitPattern::Regex(re.into()),
            tokenizers::SplitDelimiterBehavior::Isolated,
            false,
        )
        .is_ok()
    }
}
