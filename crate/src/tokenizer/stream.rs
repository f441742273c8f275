//! Text from ids that arrive one at a time. A byte-level token may end in the middle of a
//! multi-byte character (emoji and CJK often do), so the bytes of an unfinished character
//! wait for the next token instead of coming out as U+FFFD.

use super::{Tokenizer, TokenizerError};

/// Turns a stream of ids into text that is complete so far. It holds no reference to the
/// tokenizer, so it can live next to one in a session.
///
/// The pieces `push` returns, followed by `finish`, concatenate to exactly
/// `Tokenizer::decode` of all the ids.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    /// Bytes of a character whose end has not arrived yet (at most 3).
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one token and returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String, TokenizerError> {
        self.pending.extend_from_slice(tokenizer.token_bytes(id)?);
        let mut text = String::new();
        let mut start = 0;
        while start < self.pending.len() {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(valid) => {
                    text.push_str(valid);
                    start = self.pending.len();
                }
                Err(e) => {
                    let valid_end = start + e.valid_up_to();
                    text.push_str(&String::from_utf8_lossy(&self.pending[start..valid_end]));
                    match e.error_len() {
                        // Bytes no continuation can repair: one U+FFFD, as `decode` writes.
                        Some(bad) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            start = valid_end + bad;
                        }
                        // The start of a character that the next token may finish.
                        None => {
                            start = valid_end;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        Ok(text)
    }

    /// Ends the stream: a character left unfinished becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}
