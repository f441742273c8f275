//! The tokenizers of the real SmolLM2 (byte-level BPE) and Gemma 3 (SentencePiece BPE) files
//! against llama.cpp's ids, and SmolLM2's chat template against Python jinja2's renderings
//! (tests/fixtures/tokenizer_golden.json and gemma3_tokenizer_golden.json, written by
//! scripts/make_tokenizer_goldens.py: ~50 chosen strings then 300 random ones built from
//! fragments that probe pre-tokenizers, whitespace runs, byte fallback and special tokens), plus
//! llama.cpp's own vocab tests and error cases on small hand-built GGUF files.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use radixlm::gguf::{GgufFile, GgufWriter, MetaValue};
use radixlm::tokenizer::{ChatTemplate, Conversation, Message, StreamDecoder, Tokenizer, TokenizerError};
use serde::Deserialize;

const SMOLLM: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const GEMMA3: &str = "gemma-3-270m/gemma-3-270m-q4_k_m.gguf";

#[derive(Deserialize)]
struct Golden {
    n_vocab: usize,
    bos_id: u32,
    eos_id: u32,
    checksum_chunk: usize,
    token_checksums: Vec<String>,
    strings: Vec<GoldenString>,
    chat: Vec<GoldenChat>,
}

#[derive(Deserialize)]
struct GoldenString {
    text: String,
    ids: Vec<u32>,
    detokenized: String,
}

#[derive(Deserialize)]
struct GoldenChat {
    messages: Vec<Message>,
    add_generation_prompt: bool,
    rendered: String,
}

/// A real model's tokenizer beside llama.cpp's goldens for it.
struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    golden: Golden,
    tokenizer: Tokenizer,
}

impl Case {
    fn load(file: &'static str, golden: &str) -> Self {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models").join(file);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (scripts/setup.sh fetches it)", path.display()));
        let golden: Golden = serde_json::from_str(golden).expect("the golden file parses");
        let start = Instant::now();
        let tokenizer = Tokenizer::from_gguf(&GgufFile::parse(&bytes).expect("model parses")).expect("tokenizer builds");
        eprintln!("{file}: tokenizer built in {:?}", start.elapsed());
        Self { name: file, bytes, golden, tokenizer }
    }

    fn file(&self) -> GgufFile<'_> {
        GgufFile::parse(&self.bytes).unwrap()
    }
}

fn smollm() -> &'static Case {
    static CASE: OnceLock<Case> = OnceLock::new();
    CASE.get_or_init(|| Case::load(SMOLLM, include_str!("fixtures/tokenizer_golden.json")))
}

fn gemma3() -> &'static Case {
    static CASE: OnceLock<Case> = OnceLock::new();
    CASE.get_or_init(|| Case::load(GEMMA3, include_str!("fixtures/gemma3_tokenizer_golden.json")))
}

fn golden() -> &'static Golden {
    &smollm().golden
}

fn model_file() -> GgufFile<'static> {
    smollm().file()
}

fn tokenizer() -> &'static Tokenizer {
    &smollm().tokenizer
}

#[test]
fn loads_with_the_model_special_ids() {
    for case in [smollm(), gemma3()] {
        let (tok, g) = (&case.tokenizer, &case.golden);
        assert_eq!(tok.vocab_size(), g.n_vocab, "{}", case.name);
        assert_eq!(tok.bos_id(), Some(g.bos_id), "{}", case.name);
        assert_eq!(tok.eos_id(), g.eos_id, "{}", case.name);
    }
    assert!(!smollm().tokenizer.adds_bos(), "SmolLM2 has tokenizer.ggml.add_bos_token = false");
    // EOS is <|im_end|>; llama.cpp also stops on <|endoftext|>.
    assert_eq!(smollm().tokenizer.stop_ids(), &[2, 0]);
    // Gemma 3: BOS <bos> is added; generation ends at <eos> and at <end_of_turn>.
    assert!(gemma3().tokenizer.adds_bos());
    assert_eq!(gemma3().tokenizer.stop_ids(), &[1, 106]);
}

fn check_ids(case: &Case) {
    let tok = &case.tokenizer;
    let mut failures = Vec::new();
    for s in &case.golden.strings {
        let ids = tok.encode(&s.text, false).unwrap();
        if ids != s.ids {
            failures.push(format!("{:?}\n   got  {ids:?}\n   want {:?}", s.text, s.ids));
        }
    }
    assert!(failures.is_empty(), "{}: {} of {} strings differ:\n{}", case.name, failures.len(), case.golden.strings.len(), failures.join("\n"));
}

#[test]
fn ids_match_llama_cpp() {
    check_ids(smollm());
}

#[test]
fn gemma3_ids_match_llama_cpp() {
    check_ids(gemma3());
    // BOS comes first when asked for.
    assert_eq!(gemma3().tokenizer.encode("hi", true).unwrap()[0], 2);
}

fn check_token_bytes(case: &Case) {
    let (tok, g) = (&case.tokenizer, &case.golden);
    assert_eq!(g.token_checksums.len(), g.n_vocab.div_ceil(g.checksum_chunk));
    for (chunk, want) in g.token_checksums.iter().enumerate() {
        let start = chunk * g.checksum_chunk;
        let ids = start..(start + g.checksum_chunk).min(g.n_vocab);
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for id in ids.clone() {
            let bytes = tok.token_bytes(id as u32).unwrap();
            for &b in (bytes.len() as u32).to_le_bytes().iter().chain(bytes) {
                h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        }
        assert_eq!(&format!("{h:016x}"), want, "{}: token bytes differ from llama.cpp's in ids {ids:?}", case.name);
    }
    assert!(matches!(tok.token_bytes(g.n_vocab as u32), Err(TokenizerError::UnknownTokenId { .. })));
}

#[test]
fn every_token_has_llama_cpp_bytes() {
    check_token_bytes(smollm());
    check_token_bytes(gemma3());
}

/// `spaces_from_u2581`: a SentencePiece vocabulary writes spaces as U+2581, so a literal U+2581
/// in the text comes back as a space (in llama.cpp too).
fn check_decode(case: &Case, spaces_from_u2581: bool) {
    let tok = &case.tokenizer;
    for s in &case.golden.strings {
        let ids = tok.encode(&s.text, false).unwrap();
        let want = if spaces_from_u2581 { s.text.replace('\u{2581}', " ") } else { s.text.clone() };
        assert_eq!(tok.decode(&ids).unwrap(), want, "{}", case.name);
        assert_eq!(tok.decode(&s.ids).unwrap(), s.detokenized, "{}: llama.cpp detokenizes {:?} differently", case.name, s.text);
    }
    assert!(tok.decode(&[0, case.golden.n_vocab as u32]).is_err());
}

#[test]
fn decode_inverts_encode() {
    check_decode(smollm(), false);
    check_decode(gemma3(), true);
}

#[test]
fn stream_decoding_never_splits_a_character() {
    for case in [smollm(), gemma3()] {
        let tok = &case.tokenizer;
        let mut split_characters = 0;
        for s in &case.golden.strings {
            let mut decoder = StreamDecoder::new();
            let mut text = String::new();
            for &id in &s.ids {
                split_characters += usize::from(std::str::from_utf8(tok.token_bytes(id).unwrap()).is_err());
                let piece = decoder.push(tok, id).unwrap();
                assert!(!piece.contains('\u{FFFD}'), "{}: {:?}: U+FFFD after id {id}", case.name, s.text);
                text.push_str(&piece);
            }
            text.push_str(&decoder.finish());
            assert_eq!(text, tok.decode(&s.ids).unwrap());
        }
        assert!(split_characters > 0, "{}: no golden string has a character split across tokens", case.name);
    }
}

#[test]
fn stream_decoder_flushes_bad_bytes_as_decode_does() {
    let tok = tokenizer();
    // "😀" is F0 9F 98 80; find byte tokens for a lone continuation and a truncated start.
    let byte_token = |b: u8| (0..tok.vocab_size() as u32).find(|&id| tok.token_bytes(id).unwrap() == [b]).unwrap();
    let ids = [byte_token(0x80), byte_token(b'a'), byte_token(0xF0), byte_token(0x9F)];
    let mut decoder = StreamDecoder::new();
    let mut text: String = ids.iter().map(|&id| decoder.push(tok, id).unwrap()).collect();
    text.push_str(&decoder.finish());
    assert_eq!(text, tok.decode(&ids).unwrap());
    assert_eq!(text, "\u{FFFD}a\u{FFFD}");
}

#[test]
fn special_tokens_are_single_ids() {
    let tok = tokenizer();
    for (text, id) in [("<|endoftext|>", 0), ("<|im_start|>", 1), ("<|im_end|>", 2), ("<file_sep>", 5)] {
        assert_eq!(tok.encode(text, false).unwrap(), [id], "{text}");
        assert_eq!(tok.token_id(text), Some(id));
        assert_eq!(tok.decode(&[id]).unwrap(), text);
    }
    let ids = tok.encode("<|im_start|>user\nhi<|im_end|>", false).unwrap();
    assert_eq!((ids[0], *ids.last().unwrap()), (1, 2));
    // add_bos_token is false for SmolLM2, so asking for BOS adds nothing.
    assert_eq!(tok.encode("hi", true).unwrap(), tok.encode("hi", false).unwrap());
}

const SYSTEM_DEFAULT: &str =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";

#[test]
fn chat_template_renders_the_default_system_prompt() {
    let template = ChatTemplate::from_gguf(&model_file()).unwrap().expect("SmolLM2 has a chat template");
    let messages = [Message::new("user", "What is 2+2?")];
    let want = format!("{SYSTEM_DEFAULT}<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
    assert_eq!(template.render(&messages.to_vec().into(), false).unwrap(), want);
    assert_eq!(template.render(&messages.to_vec().into(), true).unwrap(), format!("{want}<|im_start|>assistant\n"));
}

#[test]
fn chat_template_matches_jinja2() {
    let template = ChatTemplate::from_gguf(&model_file()).unwrap().unwrap();
    let chats = &golden().chat;
    assert!(!chats.is_empty(), "the golden file has no jinja2 renderings");
    for c in chats {
        let got = template.render(&c.messages.clone().into(), c.add_generation_prompt).unwrap();
        assert_eq!(got, c.rendered, "{:?} add_generation_prompt={}", c.messages, c.add_generation_prompt);
    }
}

#[test]
fn rendered_chat_tokenizes_turn_markers_as_single_ids() {
    let template = ChatTemplate::from_gguf(&model_file()).unwrap().unwrap();
    let tok = tokenizer();
    let prompt = template.render(&vec![Message::new("user", "Hi")].into(), true).unwrap();
    let ids = tok.encode(&prompt, false).unwrap();
    assert_eq!(ids.iter().filter(|&&id| id == 1).count(), 3, "three <|im_start|>");
    assert_eq!(ids.iter().filter(|&&id| id == 2).count(), 2, "two <|im_end|>");
    assert_eq!(tok.decode(&ids).unwrap(), prompt);
}

/// GPT-2's byte alphabet in byte order, so a vocabulary of these 256 strings covers all text.
fn byte_alphabet() -> Vec<String> {
    let self_mapped = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut shifted = 0;
    (0..=255u8)
        .map(|b| {
            let code = if self_mapped(b) {
                u32::from(b)
            } else {
                shifted += 1;
                255 + shifted
            };
            char::from_u32(code).unwrap().to_string()
        })
        .collect()
}

/// A small byte-level vocabulary: the alphabet, "ab" (merged from "a b"), and `<s>` as BOS.
fn small_gguf(model: &str, pre: Option<&str>, add_bos: bool) -> Vec<u8> {
    let mut tokens = byte_alphabet();
    tokens.extend(["ab".to_string(), "<s>".to_string()]);
    let mut types = vec![1i32; 256];
    types.extend([1, 3]);
    let strings = |v: Vec<String>| MetaValue::Array(v.into_iter().map(MetaValue::String).collect());
    let mut w = GgufWriter::new();
    w.meta("tokenizer.ggml.model", MetaValue::String(model.into()));
    if let Some(pre) = pre {
        w.meta("tokenizer.ggml.pre", MetaValue::String(pre.into()));
    }
    w.meta("tokenizer.ggml.tokens", strings(tokens))
        .meta("tokenizer.ggml.token_type", MetaValue::Array(types.into_iter().map(MetaValue::I32).collect()))
        .meta("tokenizer.ggml.merges", strings(vec!["a b".into()]))
        .meta("tokenizer.ggml.bos_token_id", MetaValue::U32(257))
        .meta("tokenizer.ggml.eos_token_id", MetaValue::U32(257))
        .meta("tokenizer.ggml.add_bos_token", MetaValue::Bool(add_bos));
    w.to_bytes()
}

fn small_tokenizer(model: &str, pre: Option<&str>, add_bos: bool) -> Result<Tokenizer, TokenizerError> {
    let bytes = small_gguf(model, pre, add_bos);
    Tokenizer::from_gguf(&GgufFile::parse(&bytes).unwrap())
}

#[test]
fn small_vocabulary_merges_and_adds_bos() {
    let tok = small_tokenizer("gpt2", Some("smollm"), true).unwrap();
    assert!(tok.adds_bos());
    let ids = tok.encode("ab<s>a b", true).unwrap();
    assert_eq!(ids, [257, 256, 257, u32::from(b'a'), u32::from(b' '), u32::from(b'b')]);
    assert_eq!(tok.decode(&ids).unwrap(), "<s>ab<s>a b");
    assert_eq!(tok.encode("ab", false).unwrap(), [256]);
}

#[test]
fn unsupported_model_is_a_clear_error() {
    let err = small_tokenizer("bert", Some("default"), false).unwrap_err();
    assert_eq!(err, TokenizerError::UnsupportedModel("bert".into()));
    assert!(err.to_string().contains("\"bert\"") && err.to_string().contains("\"llama\""), "{err}");
}

#[test]
fn unsupported_pre_is_a_clear_error() {
    let err = small_tokenizer("gpt2", Some("no-such-pre"), false).unwrap_err();
    assert_eq!(err, TokenizerError::UnsupportedPre("no-such-pre".into()));
    assert!(err.to_string().contains("\"no-such-pre\"") && err.to_string().contains("smollm"), "{err}");
    // An absent pre-tokenizer falls back to llama.cpp's "default", as llama.cpp does.
    assert!(small_tokenizer("gpt2", None, false).is_ok());
}

/// A file of llama.cpp's vocab tests in models/vocab/ (`scripts/fetch_vocabs.sh` puts them there).
fn vocab_file(file: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/vocab").join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch_vocabs.sh)", path.display()))
}

/// llama.cpp's own tokenizer tests for a pre-tokenizer: its vocab-only GGUF, the test strings
/// (`.inp`, separated by `__ggml_vocab_test__` lines) and llama.cpp's ids for each (`.out`, a
/// line each), as `scripts/fetch_vocabs.sh` puts them in models/vocab/. Whitespace runs,
/// digits, emoji, CJK, code, apostrophes, mixed scripts.
fn check_llama_cpp_vocab(name: &str) {
    let read = |ext: &str| vocab_file(&format!("ggml-vocab-{name}.gguf{ext}"));
    let bytes = read("");
    let tok = Tokenizer::from_gguf(&GgufFile::parse(&bytes).unwrap()).unwrap();
    let inp = String::from_utf8(read(".inp")).unwrap();
    let out = String::from_utf8(read(".out")).unwrap();
    // test-tokenizer-0.cpp: the inputs split on "\n__ggml_vocab_test__\n", the last one's
    // trailing separator dropped.
    let inputs: Vec<&str> = inp.strip_suffix("\n__ggml_vocab_test__\n").unwrap_or(&inp).split("\n__ggml_vocab_test__\n").collect();
    let outputs: Vec<&str> = out.lines().collect();
    assert_eq!(inputs.len(), outputs.len(), "{name}: test strings and id lines");
    assert!(inputs.len() > 40, "{name}: {} test strings", inputs.len());
    for (text, line) in inputs.iter().zip(outputs) {
        let want: Vec<u32> = line.split_whitespace().map(|v| v.parse().unwrap()).collect();
        assert_eq!(tok.encode(text, false).unwrap(), want, "{name}: ids of {text:?}");
    }
}

#[test]
fn llama3_pre_tokenizer_matches_llama_cpp() {
    check_llama_cpp_vocab("llama-bpe");
}

#[test]
fn qwen2_pre_tokenizer_matches_llama_cpp() {
    check_llama_cpp_vocab("qwen2");
}

#[derive(Deserialize)]
struct ChatGoldens {
    templates: Vec<TemplateGoldens>,
}

#[derive(Deserialize)]
struct TemplateGoldens {
    template_of: String,
    bos_token: String,
    eos_token: String,
    cases: Vec<TemplateCase>,
}

#[derive(Deserialize)]
struct TemplateCase {
    messages: Vec<Message>,
    /// For a template that presents tools itself: OpenAI's tool objects.
    #[serde(default)]
    tools: Vec<serde_json::Value>,
    add_generation_prompt: bool,
    rendered: Option<String>,
    /// The template's own refusal (`raise_exception`), instead of a rendering.
    raises: Option<String>,
}

#[test]
fn chat_templates_render_as_jinja2_does() {
    // scripts/make_chat_goldens.py: Qwen2's template from llama.cpp's vocab file, Gemma's,
    // Qwen3's and Llama 3.2's from llama.cpp's template collection, rendered by jinja2 as
    // transformers does; Qwen3's and Llama 3.2's also with tools, calls and results.
    let goldens: ChatGoldens = serde_json::from_str(include_str!("fixtures/chat_goldens.json")).unwrap();
    assert_eq!(goldens.templates.len(), 4);
    for t in &goldens.templates {
        let bytes = vocab_file(&t.template_of);
        let template = if t.template_of.ends_with(".gguf") {
            ChatTemplate::from_gguf(&GgufFile::parse(&bytes).unwrap()).unwrap().expect("qwen2's vocab carries a chat template")
        } else {
            ChatTemplate::new(std::str::from_utf8(&bytes).unwrap(), t.bos_token.clone(), t.eos_token.clone()).unwrap()
        };
        assert!(t.cases.len() >= 10);
        for case in &t.cases {
            let chat = Conversation { messages: case.messages.clone(), tools: case.tools.clone() };
            let got = template.render(&chat, case.add_generation_prompt);
            match (&case.rendered, &case.raises) {
                (Some(want), None) => assert_eq!(got.as_ref(), Ok(want), "{}: {:?}", t.template_of, case.messages),
                (None, Some(message)) => assert_eq!(got, Err(TokenizerError::TemplateRaised(message.clone())), "{}: {:?}", t.template_of, case.messages),
                _ => panic!("{}: a case must have a rendering or a refusal", t.template_of),
            }
        }
    }
}

#[derive(Deserialize)]
struct VocabGoldens {
    vocabs: std::collections::HashMap<String, Vec<GoldenIds>>,
}

#[derive(Deserialize)]
struct GoldenIds {
    text: String,
    ids: Vec<u32>,
}

#[test]
fn special_tokens_among_text_match_llama_cpp_for_llama3_qwen2_and_llama2() {
    // scripts/make_vocab_goldens.py: each vocabulary's own special tokens become one id, the
    // other family's (and near misses) are text.
    let goldens: VocabGoldens = serde_json::from_str(include_str!("fixtures/vocab_goldens.json")).unwrap();
    assert_eq!(goldens.vocabs.len(), 3);
    for (name, cases) in &goldens.vocabs {
        let bytes = vocab_file(&format!("ggml-vocab-{name}.gguf"));
        let tok = Tokenizer::from_gguf(&GgufFile::parse(&bytes).unwrap()).unwrap();
        for case in cases {
            assert_eq!(tok.encode(&case.text, false).unwrap(), case.ids, "{name}: ids of {:?}", case.text);
        }
    }
}

#[test]
fn llama_spm_vocabulary_matches_llama_cpp() {
    check_llama_cpp_vocab("llama-spm");
}
