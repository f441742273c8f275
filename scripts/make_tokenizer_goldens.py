#!/usr/bin/env python3
"""Writes a model's tokenizer goldens: llama.cpp's token ids for a set of strings, a checksum of
every token's bytes, and chat-template renderings by Python jinja2 (when the model has a
template). The strings probe byte-level BPE pre-tokenizers and SentencePiece vocabularies alike:
whitespace runs, byte fallback, CJK, emoji, both families' special tokens.

Usage: python3 scripts/make_tokenizer_goldens.py [model.gguf out.json]
  default: models/SmolLM2-135M-Instruct.Q4_1.gguf -> crate/tests/fixtures/tokenizer_golden.json
  python3 scripts/make_tokenizer_goldens.py models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf \
      crate/tests/fixtures/gemma3_tokenizer_golden.json
Needs llama-cpp-python (vocab_only load, no weights are read) and, for the chat part, jinja2.
"""
import json
import pathlib
import random
import sys

import llama_cpp

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "crate" / "tests" / "fixtures" / "tokenizer_golden.json"

# Ids per checksum chunk, so a mismatch points at a range of the vocabulary.
CHUNK = 1024

STRINGS = [
    "",
    "Hello, world!",
    "hello world",
    " leading space",
    "trailing space ",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see it's what they've done, isn't it? We'd go.",
    "I'M SHOUTING THAT YOU'LL SEE",
    "1234567",
    "3.14 and 2.71828, 1,000,000 and 0.5%",
    "Version 10.2.3-beta (build 98765)",
    "a    b",
    "   ",
    "\t\tindented with tabs\n",
    "line one\nline two\r\nline three\n\n\nafter blank lines",
    "  \n  \n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "fn main() { println!(\"{}\", x.iter().map(|v| v * 2).sum::<i32>()); }",
    "<div class=\"a\">&amp; <b>bold</b></div>",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
    "https://example.com/path?query=1&b=two#frag",
    "email: someone@example.org",
    "Café résumé naïve façade — déjà vu",
    "Ångström Øresund Straße",
    "日本語のテキストです。",
    "中文测试：你好，世界！",
    "한국어 문장입니다",
    "Emoji: 😀🎉👍🏽 and 👨‍👩‍👧‍👦 family",
    "🤖",
    "مرحبا بالعالم",
    "Привет, мир! Как дела?",
    "Ελληνικά γράμματα",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text before<|im_end|>text after",
    "<|im_start |> not special <|im_end",
    "<im_start> and |im_end| look alike",
    "<<|im_start|>>",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<bos><eos><unused0>[multimodal]<table><td>x</td></table><pad>",
    "<start_of_turn  > almost <end_of_turn",
    "a  b   c    d     e\n\n\n\nf\t\t\tg",
    "\u2581 is the escaped space, \u2581\u2581 twice",
    "control \x01\x02\x1f\x7f bytes",
    "private use \ue000\uf8ff and rare \U00020000\U0002a6a5 han",
    "Ⅻ ½ ¾ ₂ ∑ ∞ ≠ ≤ ℃",
    "!!!???...,,,;;;",
    "$100 + 50% = ~¥ | ^ < > =",
    "x" * 64,
    "The history of natural language processing generally started in the 1950s, although work can "
    "be found from earlier periods. In 1950, Alan Turing published an article titled \"Computing "
    "Machinery and Intelligence\" which proposed what is now called the Turing test as a criterion "
    "of intelligence. The Georgetown experiment in 1954 involved fully automatic translation of more "
    "than sixty Russian sentences into English. The authors claimed that within three or five years, "
    "machine translation would be a solved problem. However, real progress was much slower.",
]

# Fragments for random strings that probe the pre-tokenizer's edges: whitespace runs next to
# letters, digits and punctuation, contractions, multi-byte characters, special-token pieces.
FRAGMENTS = list("abcXYZ '\"\t\n\r  0123456789.,!?-_()[]{}<>|/\\$%^~=+") + [
    "'s", "'t", "'ll", "'RE", "é", "ü", "ß", "日", "本", "😀", "👍🏽", "\u200d", "مر", "Ж",
    "\u00a0", "\u3000", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_", "ing", "the",
    " the", "\r\n", "   ", "1234", "<start_of_turn>", "<end_of_turn>", "<bos>", "\x01", "\ue000",
    "\U0002a6a5", "\u2581", "\n\n",
]
N_RANDOM = 300


def random_strings() -> list:
    rng = random.Random(7)
    return ["".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 30))) for _ in range(N_RANDOM)]


CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [
        {"role": "system", "content": "You are a pirate."},
        {"role": "user", "content": "Where is the treasure?"},
        {"role": "assistant", "content": "Arr, buried deep."},
        {"role": "user", "content": "How deep?"},
    ],
    [{"role": "user", "content": "Line one\nLine two\twith tab — and émoji 🎉"}],
    [],
]


def fnv1a64(data: bytes, h: int) -> int:
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def piece(llm, token: int) -> bytes:
    buf = (llama_cpp.ctypes.c_char * 256)()
    n = llama_cpp.llama_token_to_piece(llm._model.vocab, token, buf, 256, 0, True)
    assert 0 <= n <= 256, (token, n)
    return bytes(buf[:n])


def token_checksums(llm) -> list:
    """FNV-1a 64 over (u32 LE length, bytes) of each token, one hash per CHUNK ids."""
    n_vocab = llm.n_vocab()
    sums = []
    for start in range(0, n_vocab, CHUNK):
        h = 0xCBF29CE484222325
        for t in range(start, min(start + CHUNK, n_vocab)):
            p = piece(llm, t)
            h = fnv1a64(len(p).to_bytes(4, "little") + p, h)
        sums.append(f"{h:016x}")
    return sums


def chat_goldens(template: str, bos: str, eos: str) -> list:
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        print("jinja2 not installed: skipping chat goldens", file=sys.stderr)
        return []

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    # The same environment settings as transformers' apply_chat_template.
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(template)
    out = []
    for messages in CONVERSATIONS:
        for add_generation_prompt in (False, True):
            rendered = compiled.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=bos,
                eos_token=eos,
            )
            out.append(
                {"messages": messages, "add_generation_prompt": add_generation_prompt, "rendered": rendered}
            )
    return out


def to_json(golden: dict) -> str:
    """Pretty at the top level, one line per list entry, so diffs stay readable."""
    lines = []
    for key, value in golden.items():
        if isinstance(value, list):
            items = ",\n".join("  " + json.dumps(v, ensure_ascii=False) for v in value)
            lines.append(f" {json.dumps(key)}: [\n{items}\n ]")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main() -> None:
    llm = llama_cpp.Llama(model_path=str(MODEL), vocab_only=True, verbose=False)
    strings = []
    for text in STRINGS + random_strings():
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        detok = llm.detokenize(ids, special=True).decode("utf-8", errors="replace")
        strings.append({"text": text, "ids": ids, "detokenized": detok})

    meta = llm.metadata
    bos = piece(llm, llm.token_bos()).decode()
    eos = piece(llm, llm.token_eos()).decode()
    golden = {
        "model": MODEL.name,
        "llama_cpp_python": llama_cpp.__version__,
        "n_vocab": llm.n_vocab(),
        "bos_id": llm.token_bos(),
        "eos_id": llm.token_eos(),
        "checksum_chunk": CHUNK,
        "token_checksums": token_checksums(llm),
        "strings": strings,
        "chat": chat_goldens(meta["tokenizer.chat_template"], bos, eos) if "tokenizer.chat_template" in meta else [],
    }
    OUT.write_text(to_json(golden))
    print(f"wrote {OUT} ({len(strings)} strings, {len(golden['chat'])} chat renderings)")


if __name__ == "__main__":
    main()
