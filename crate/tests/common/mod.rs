//! Helpers shared by the integration tests: the default model and the llama.cpp goldens.
#![allow(dead_code)]

use std::path::PathBuf;

pub const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The default model's bytes. The test command fetches it first; a missing file fails the test.
pub fn default_model_bytes() -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models").join(DEFAULT_MODEL);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!("{}: {e}. Run scripts/fetch_model.sh (the test command does).", path.display())
    })
}

#[derive(serde::Deserialize)]
pub struct Goldens {
    pub cases: Vec<GoldenCase>,
}

#[derive(serde::Deserialize)]
pub struct GoldenCase {
    pub name: String,
    pub kind: String,
    pub text: String,
    #[serde(default)]
    pub messages: Vec<radixlm_message::Message>,
    pub prompt_ids: Vec<u32>,
    pub greedy_ids: Vec<u32>,
}

pub mod radixlm_message {
    #[derive(serde::Deserialize, Clone)]
    pub struct Message {
        pub role: String,
        pub content: String,
    }
}

pub fn goldens() -> Goldens {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/goldens.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Relative L2 error of `got` against `want`.
pub fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    let num: f32 = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f32 = want.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}
