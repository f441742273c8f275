//! The bytes of one spilled page, self-describing and checked on every read: a record is used
//! only when its magic, format version, checksum, model, chain hashes, shape and token ids all
//! agree with the page the engine is looking for.
//!
//! Layout, little-endian:
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0  | 4  | magic `RXKV` |
//! | 4  | 4  | format version ([`FORMAT_VERSION`]) |
//! | 8  | 1  | bits per value (8 or 4) |
//! | 9  | 1  | zero |
//! | 10 | 2  | group size |
//! | 12 | 4  | page size (tokens) |
//! | 16 | 4  | layers |
//! | 20 | 4  | KV width per token (KV heads × head dim) |
//! | 24 | 16 | model fingerprint |
//! | 40 | 16 | chain hash of the page |
//! | 56 | 16 | chain hash of the page before it |
//! | 72 | 4  | token count *n* |
//! | 76 | 4  | payload word count *w* |
//! | 80 | 4*n* | token ids |
//! | … | 4*w* | payload: per layer, K then V, the page's groups as [`super::QuantLayout`] packs them |
//! | … | 8  | xxh3-64 of every byte before it |

use xxhash_rust::xxh3::xxh3_64;

use super::QuantLayout;

/// Bumped whenever the layout above or the quantization changes, so records of an older build
/// are misses, not misreadings.
pub const FORMAT_VERSION: u32 = 1;

const MAGIC: [u8; 4] = *b"RXKV";
const HEADER_BYTES: usize = 80;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("record is {len} bytes, shorter than its header says ({needed})")]
    Truncated { len: usize, needed: usize },
    #[error("record has {len} bytes, more than its header says ({expected})")]
    TrailingBytes { len: usize, expected: usize },
    #[error("not a spill record (bad magic)")]
    BadMagic,
    #[error("record format version {found}, this build reads {FORMAT_VERSION}")]
    Version { found: u32 },
    #[error("record checksum mismatch")]
    Checksum,
    #[error("record belongs to another model")]
    OtherModel,
    #[error("record is for another page (chain hash or parent hash differ)")]
    OtherPage,
    #[error("record's quantization or shape differs from this engine's: {0}")]
    Shape(String),
    #[error("record's token ids differ from the prompt's")]
    Tokens,
}

/// What a page's record must match besides its tokens: the engine's model and KV shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordShape {
    pub fingerprint: u128,
    pub layout: QuantLayout,
    pub page_size: usize,
    pub n_layers: usize,
    pub kv_dim: usize,
}

impl RecordShape {
    /// Payload words of one page: K and V of every layer.
    pub fn payload_words(&self) -> usize {
        self.layout.bytes_for(self.n_layers * 2 * self.page_size * self.kv_dim) / 4
    }
}

/// One page's quantized K and V with what identifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillRecord {
    pub hash: u128,
    pub parent: u128,
    pub tokens: Vec<u32>,
    pub payload: Vec<u32>,
}

impl SpillRecord {
    pub fn encode(&self, shape: &RecordShape) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_BYTES + 4 * (self.tokens.len() + self.payload.len()) + 8);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        b.push(shape.layout.format.bits() as u8);
        b.push(0);
        b.extend_from_slice(&(shape.layout.group as u16).to_le_bytes());
        for v in [shape.page_size, shape.n_layers, shape.kv_dim] {
            b.extend_from_slice(&(v as u32).to_le_bytes());
        }
        for v in [shape.fingerprint, self.hash, self.parent] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&(self.tokens.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        b.extend(self.tokens.iter().flat_map(|t| t.to_le_bytes()));
        b.extend(self.payload.iter().flat_map(|w| w.to_le_bytes()));
        let checksum = xxh3_64(&b);
        b.extend_from_slice(&checksum.to_le_bytes());
        b
    }

    /// Decodes `bytes` as the record of the page `hash` after `parent` holding `tokens`, for an
    /// engine of `shape`; any disagreement is an error and the record must not be used.
    pub fn decode(bytes: &[u8], shape: &RecordShape, hash: u128, parent: u128, tokens: &[u32]) -> Result<SpillRecord, RecordError> {
        if bytes.len() < HEADER_BYTES + 8 {
            return Err(RecordError::Truncated { len: bytes.len(), needed: HEADER_BYTES + 8 });
        }
        if bytes[..4] != MAGIC {
            return Err(RecordError::BadMagic);
        }
        let u32_at = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let u128_at = |at: usize| u128::from_le_bytes(bytes[at..at + 16].try_into().unwrap_or([0; 16]));
        let version = u32_at(4);
        if version != FORMAT_VERSION {
            return Err(RecordError::Version { found: version });
        }
        let (n_tokens, n_words) = (u32_at(72) as usize, u32_at(76) as usize);
        let body = n_tokens.checked_add(n_words).and_then(|n| n.checked_mul(4)).and_then(|n| n.checked_add(HEADER_BYTES));
        let Some(expected) = body.and_then(|n| n.checked_add(8)) else {
            return Err(RecordError::Truncated { len: bytes.len(), needed: usize::MAX });
        };
        if bytes.len() < expected {
            return Err(RecordError::Truncated { len: bytes.len(), needed: expected });
        }
        if bytes.len() > expected {
            return Err(RecordError::TrailingBytes { len: bytes.len(), expected });
        }
        let stored = u64::from_le_bytes(bytes[expected - 8..].try_into().unwrap_or([0; 8]));
        if xxh3_64(&bytes[..expected - 8]) != stored {
            return Err(RecordError::Checksum);
        }
        if u128_at(24) != shape.fingerprint {
            return Err(RecordError::OtherModel);
        }
        if u128_at(40) != hash || u128_at(56) != parent {
            return Err(RecordError::OtherPage);
        }
        let found = (bytes[8] as u32, u16::from_le_bytes([bytes[10], bytes[11]]) as usize, u32_at(12) as usize, u32_at(16) as usize, u32_at(20) as usize);
        let want = (shape.layout.format.bits(), shape.layout.group, shape.page_size, shape.n_layers, shape.kv_dim);
        if found != want || n_words != shape.payload_words() {
            return Err(RecordError::Shape(format!(
                "(bits, group, page size, layers, kv width) {found:?} against {want:?}, {n_words} payload words"
            )));
        }
        let words = |from: usize, n: usize| -> Vec<u32> { (0..n).map(|i| u32_at(from + 4 * i)).collect() };
        let record_tokens = words(HEADER_BYTES, n_tokens);
        if record_tokens != tokens {
            return Err(RecordError::Tokens);
        }
        Ok(SpillRecord { hash, parent, tokens: record_tokens, payload: words(HEADER_BYTES + 4 * n_tokens, n_words) })
    }
}

#[cfg(test)]
mod tests {
    use super::super::SpillFormat;
    use super::*;

    fn shape() -> RecordShape {
        RecordShape { fingerprint: 0xabc, layout: QuantLayout { format: SpillFormat::Q8, group: 8 }, page_size: 2, n_layers: 1, kv_dim: 8 }
    }

    fn record() -> SpillRecord {
        let words = shape().payload_words();
        SpillRecord { hash: 11, parent: 10, tokens: vec![5, 6], payload: (0..words as u32).collect() }
    }

    #[test]
    fn encodes_and_decodes() {
        let bytes = record().encode(&shape());
        assert_eq!(SpillRecord::decode(&bytes, &shape(), 11, 10, &[5, 6]), Ok(record()));
    }

    #[test]
    fn every_disagreement_is_an_error() {
        let s = shape();
        let bytes = record().encode(&s);
        let decode = |b: &[u8], shape: &RecordShape| SpillRecord::decode(b, shape, 11, 10, &[5, 6]);
        assert!(matches!(decode(&bytes[..bytes.len() - 1], &s), Err(RecordError::Truncated { .. })));
        assert!(matches!(decode(&bytes[..20], &s), Err(RecordError::Truncated { .. })));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(decode(&longer, &s), Err(RecordError::TrailingBytes { .. })));
        for at in [0, 30, 90, bytes.len() - 1] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x10;
            let err = decode(&flipped, &s).unwrap_err();
            assert!(matches!(err, RecordError::BadMagic | RecordError::Checksum), "flip at {at}: {err:?}");
        }
        let mut old = bytes.clone();
        old[4] = 0;
        assert_eq!(decode(&old, &s), Err(RecordError::Version { found: 0 }));
        assert_eq!(decode(&bytes, &RecordShape { fingerprint: 1, ..s }), Err(RecordError::OtherModel));
        assert_eq!(SpillRecord::decode(&bytes, &s, 12, 10, &[5, 6]), Err(RecordError::OtherPage));
        assert_eq!(SpillRecord::decode(&bytes, &s, 11, 9, &[5, 6]), Err(RecordError::OtherPage));
        assert_eq!(SpillRecord::decode(&bytes, &s, 11, 10, &[5, 7]), Err(RecordError::Tokens));
        let q4 = RecordShape { layout: QuantLayout { format: SpillFormat::Q4, group: 8 }, ..s };
        assert!(matches!(decode(&bytes, &q4), Err(RecordError::Shape(_))));
    }
}
