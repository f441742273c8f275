//! The SentencePiece-style BPE of `tokenizer.ggml.model = "llama"` vocabularies (Llama 2,
//! TinyLlama, Mistral, Gemma), as llama.cpp's `llm_tokenizer_spm` encodes: pieces carry scores,
//! not merge ranks; spaces are written `▁`; a piece no token covers falls back to `<0xXX>`
//! byte tokens.
//!
//! Special tokens are cut out of the raw text first (llama.cpp's `tokenizer_st_partition`:
//! control, user-defined and unknown tokens, longest text first, every occurrence), each
//! becoming its one id. Each run of text between them is escaped (a leading space added when
//! the vocabulary asks for one and the run starts the text or follows a special token) and
//! split into characters, and adjacent symbols are merged while some pair is a token, the
//! pair whose token scores highest first (the leftmost among equals).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::TokenizerError;

/// The escaped space, U+2581.
pub(super) const SPACE: &str = "\u{2581}";

pub(super) struct Spm {
    /// Every token's text to its id (a later duplicate wins, as in llama.cpp's map).
    ids: HashMap<Box<str>, u32>,
    scores: Vec<f32>,
    /// Control, user-defined and unknown tokens, longest text first (ties by id).
    specials: Vec<(Box<str>, u32)>,
    /// The `<0xXX>` token of each byte (or the byte's own one-character token).
    byte_ids: Box<[Option<u32>; 256]>,
    add_space_prefix: bool,
}

/// A pair of adjacent symbols whose joined text is a token.
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    /// The joined text's length in bytes, to notice a symbol that changed since.
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// The heap's top: the highest score, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

/// A run of the text being merged: `text[start..start + len]`, linked to its neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    /// 0 once merged into its left neighbour.
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Spm {
    /// `special[i]`: whether token `i` is cut out of raw text as itself (control, user-defined
    /// or unknown).
    pub(super) fn new(tokens: &[&str], scores: Vec<f32>, special: &[bool], add_space_prefix: bool) -> Self {
        let ids: HashMap<Box<str>, u32> = tokens.iter().enumerate().map(|(id, &t)| (Box::from(t), id as u32)).collect();
        let mut specials: Vec<(Box<str>, u32)> = tokens
            .iter()
            .zip(special)
            .enumerate()
            .filter(|&(_, (t, &s))| s && !t.is_empty())
            .map(|(id, (&t, _))| (Box::from(t), id as u32))
            .collect();
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let mut byte_ids = Box::new([None; 256]);
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            let hex = format!("<0x{b:02X}>");
            *slot = ids.get(hex.as_str()).copied().or_else(|| {
                let c = char::from_u32(b as u32).filter(|c| c.is_ascii())?;
                ids.get(c.to_string().as_str()).copied()
            });
        }
        Self { ids, scores, specials, byte_ids, add_space_prefix }
    }

    pub(super) fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// The ids of `text`, special tokens in it parsed (no BOS: the caller adds it).
    pub(super) fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let mut out = Vec::new();
        let mut prev_special = true;
        for fragment in self.partition(text) {
            match fragment {
                Fragment::Special(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(raw) => {
                    let mut escaped = String::with_capacity(raw.len() + 3);
                    if self.add_space_prefix && prev_special {
                        escaped.push_str(SPACE);
                    }
                    escaped.push_str(&raw.replace(' ', SPACE));
                    self.merge(&escaped, &mut out)?;
                    prev_special = false;
                }
            }
        }
        Ok(out)
    }

    /// The text cut at every occurrence of each special token, longest tokens first.
    fn partition<'t>(&self, text: &'t str) -> Vec<Fragment<'t>> {
        let mut fragments = if text.is_empty() { Vec::new() } else { vec![Fragment::Text(text)] };
        for (special, id) in &self.specials {
            if !fragments.iter().any(|f| matches!(f, Fragment::Text(t) if t.contains(&**special))) {
                continue;
            }
            let mut cut = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(mut rest) = fragment else {
                    cut.push(fragment);
                    continue;
                };
                while let Some(at) = rest.find(&**special) {
                    if at > 0 {
                        cut.push(Fragment::Text(&rest[..at]));
                    }
                    cut.push(Fragment::Special(*id));
                    rest = &rest[at + special.len()..];
                }
                if !rest.is_empty() {
                    cut.push(Fragment::Text(rest));
                }
            }
            fragments = cut;
        }
        fragments
    }

    /// Merges the characters of `text` (already escaped) and appends their ids.
    fn merge(&self, text: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        let n = starts.len();
        let mut symbols: Vec<Symbol> = (0..n)
            .map(|i| Symbol {
                start: starts[i],
                len: starts.get(i + 1).copied().unwrap_or(text.len()) - starts[i],
                prev: i.checked_sub(1),
                next: (i + 1 < n).then_some(i + 1),
            })
            .collect();
        let mut queue = BinaryHeap::new();
        let bigram = |symbols: &[Symbol], left: Option<usize>, right: Option<usize>| -> Option<Bigram> {
            let (l, r) = (symbols[left?], symbols[right?]);
            let joined = &text[l.start..r.start + r.len];
            let id = self.token_id(joined)?;
            Some(Bigram { left: left?, right: right?, score: self.scores[id as usize], len: joined.len() })
        };
        for i in 1..n {
            queue.extend(bigram(&symbols, Some(i - 1), Some(i)));
        }
        while let Some(top) = queue.pop() {
            let (l, r) = (symbols[top.left], symbols[top.right]);
            // A pair one of whose symbols has merged since it was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != top.len {
                continue;
            }
            symbols[top.left].len += r.len;
            symbols[top.right].len = 0;
            symbols[top.left].next = r.next;
            if let Some(next) = r.next {
                symbols[next].prev = Some(top.left);
            }
            queue.extend(bigram(&symbols, l.prev, Some(top.left)));
            queue.extend(bigram(&symbols, Some(top.left), symbols[top.left].next));
        }
        // Every merge made a token, so a symbol without one is a single character: its bytes.
        let mut at = (n > 0).then_some(0);
        while let Some(i) = at {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match self.token_id(piece) {
                Some(id) => out.push(id),
                None => {
                    for b in piece.bytes() {
                        out.push(self.byte_ids[b as usize].ok_or(TokenizerError::NoByteToken(b))?);
                    }
                }
            }
            at = s.next;
        }
        Ok(())
    }
}

enum Fragment<'t> {
    Text(&'t str),
    Special(u32),
}

/// The byte a `<0xXX>` token stands for.
pub(super) fn byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spm(tokens: &[&str], scores: &[f32], add_space_prefix: bool) -> Spm {
        let special: Vec<bool> = tokens.iter().map(|t| t.starts_with('<') && byte_token(t).is_none()).collect();
        Spm::new(tokens, scores.to_vec(), &special, add_space_prefix)
    }

    #[test]
    fn highest_scoring_pair_merges_first() {
        // "abc": "ab" and "bc" both tokens; "bc" scores higher, so a + bc.
        let t = spm(&["a", "b", "c", "ab", "bc"], &[0.0, 0.0, 0.0, -2.0, -1.0], false);
        assert_eq!(t.encode("abc").unwrap(), [0, 4]);
        let t = spm(&["a", "b", "c", "ab", "bc"], &[0.0, 0.0, 0.0, -1.0, -2.0], false);
        assert_eq!(t.encode("abc").unwrap(), [3, 2]);
        // Equal scores: the leftmost pair.
        let t = spm(&["a", "b", "c", "ab", "bc"], &[0.0, 0.0, 0.0, -1.0, -1.0], false);
        assert_eq!(t.encode("abc").unwrap(), [3, 2]);
    }

    #[test]
    fn spaces_escape_and_unknown_characters_fall_back_to_bytes() {
        let mut tokens = vec!["<unk>", "\u{2581}", "a", "\u{2581}a"];
        let hex: Vec<String> = (0..=255).map(|b| format!("<0x{b:02X}>")).collect();
        tokens.extend(hex.iter().map(String::as_str));
        let scores = vec![0.0; tokens.len()];
        let t = spm(&tokens, &scores, true);
        // A leading space is added, then "▁a" merges; "é" is two byte tokens.
        assert_eq!(t.encode("a é").unwrap(), [3, 1, 4 + 0xC3, 4 + 0xA9]);
        // A special token among text is one id, and the text after it gets the space prefix.
        assert_eq!(t.encode("<unk>a").unwrap(), [0, 3]);
        assert_eq!(t.encode("").unwrap(), Vec::<u32>::new());
        assert_eq!(byte_token("<0x0A>"), Some(10));
        assert_eq!(byte_token("<0x0>"), None);
    }
}
