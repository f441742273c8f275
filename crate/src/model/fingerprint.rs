//! The model fingerprint: one hash of everything that determines a model's KV values — its
//! metadata (architecture, hyper-parameters, tokenizer), its tensor table and its tensor data —
//! so cached pages never cross models, quantizations or tokenizers.

use xxhash_rust::xxh3::Xxh3;

use crate::gguf::{GgufFile, GgufHeader, MetaValue};

/// xxh3-128 over the metadata (in key order), the tensor table and the tensor data section.
pub fn fingerprint(f: &GgufFile) -> u128 {
    let mut h = Fingerprinter::new(f);
    h.update(f.data_section());
    h.finish()
}

/// The fingerprint computed as a file streams in: the header first, then the data section's
/// bytes in file order, so a model loaded from the network never needs to be whole in memory.
pub struct Fingerprinter(Xxh3);

impl Fingerprinter {
    pub fn new(header: &GgufHeader) -> Self {
        let mut h = Xxh3::new();
        h.update(b"radixlm-model-fingerprint-v2");
        h.update(&(header.metadata.len() as u64).to_le_bytes());
        for (key, value) in &header.metadata {
            write_str(&mut h, key);
            write_value(&mut h, value);
        }
        h.update(&(header.tensors.len() as u64).to_le_bytes());
        for t in &header.tensors {
            write_str(&mut h, &t.name);
            h.update(&(t.dims.len() as u64).to_le_bytes());
            t.dims.iter().for_each(|d| h.update(&d.to_le_bytes()));
            h.update(&t.ty.id().to_le_bytes());
            h.update(&t.offset.to_le_bytes());
        }
        Self(h)
    }

    /// The next bytes of the data section.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    pub fn finish(&self) -> u128 {
        self.0.digest128()
    }
}

fn write_str(h: &mut Xxh3, s: &str) {
    h.update(&(s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

/// A tagged, length-prefixed encoding, so distinct values never hash the same bytes.
fn write_value(h: &mut Xxh3, v: &MetaValue) {
    let (tag, bytes): (u8, Vec<u8>) = match v {
        MetaValue::U8(x) => (0, x.to_le_bytes().to_vec()),
        MetaValue::I8(x) => (1, x.to_le_bytes().to_vec()),
        MetaValue::U16(x) => (2, x.to_le_bytes().to_vec()),
        MetaValue::I16(x) => (3, x.to_le_bytes().to_vec()),
        MetaValue::U32(x) => (4, x.to_le_bytes().to_vec()),
        MetaValue::I32(x) => (5, x.to_le_bytes().to_vec()),
        MetaValue::F32(x) => (6, x.to_le_bytes().to_vec()),
        MetaValue::Bool(x) => (7, vec![*x as u8]),
        MetaValue::String(s) => {
            h.update(&[8]);
            write_str(h, s);
            return;
        }
        MetaValue::Array(items) => {
            h.update(&[9]);
            h.update(&(items.len() as u64).to_le_bytes());
            items.iter().for_each(|i| write_value(h, i));
            return;
        }
        MetaValue::U64(x) => (10, x.to_le_bytes().to_vec()),
        MetaValue::I64(x) => (11, x.to_le_bytes().to_vec()),
        MetaValue::F64(x) => (12, x.to_le_bytes().to_vec()),
    };
    h.update(&[tag]);
    h.update(&bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::synthetic::SyntheticSpec;

    fn fp(spec: &SyntheticSpec) -> u128 {
        fingerprint(&GgufFile::parse(&spec.to_gguf()).unwrap())
    }

    #[test]
    fn same_file_same_fingerprint_any_change_another() {
        let base = SyntheticSpec::tiny();
        assert_eq!(fp(&base), fp(&base));
        // Other weights (seed), another quantization, another shape.
        assert_ne!(fp(&base), fp(&SyntheticSpec { seed: base.seed + 1, ..base.clone() }));
        assert_ne!(fp(&base), fp(&SyntheticSpec { weight_type: crate::gguf::GgmlType::Q8_0, ..base.clone() }));
        assert_ne!(fp(&base), fp(&SyntheticSpec { n_ctx: base.n_ctx * 2, ..base.clone() }));
    }

    #[test]
    fn one_flipped_weight_byte_changes_the_fingerprint() {
        let mut bytes = SyntheticSpec::tiny().to_gguf();
        let a = fingerprint(&GgufFile::parse(&bytes).unwrap());
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_ne!(a, fingerprint(&GgufFile::parse(&bytes).unwrap()));
    }
}
