//! The CPU reference forward pass is itself checked against llama.cpp before it judges anything.

mod common;

use radixlm::gguf::GgufFile;
use radixlm::model::reference::{ReferenceCache, ReferenceModel};

fn argmax(x: &[f32]) -> u32 {
    x.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b }).0 as u32
}

#[test]
fn reference_greedy_matches_llama_cpp_on_short_prompts() {
    let bytes = common::default_model_bytes();
    let file = GgufFile::parse(&bytes).unwrap();
    let model = ReferenceModel::load(&file).unwrap();
    let goldens = common::goldens();
    // Prompts whose greedy path has no near tie in its first 8 steps.
    for case in goldens.cases.iter().filter(|c| c.name == "raw-0" || c.name == "raw-3") {
        let mut cache = ReferenceCache::default();
        let v = model.cfg.vocab_size;
        let logits = model.forward(&case.prompt_ids, &mut cache);
        let mut next = argmax(&logits[logits.len() - v..]);
        let mut got = vec![next];
        for _ in 1..8 {
            let l = model.forward(&[next], &mut cache);
            next = argmax(&l);
            got.push(next);
        }
        assert_eq!(got, case.greedy_ids[..8], "{}: reference greedy tokens differ from llama.cpp", case.name);
    }
}

