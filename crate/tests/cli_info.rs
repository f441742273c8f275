//! `radixlm info` on the models of each architecture and format mix: it names the architecture,
//! the RoPE scaling and the tensors' types, and says why a model it cannot run is refused.

use std::path::{Path, PathBuf};
use std::process::Command;

use radixlm::gguf::{GgufWriter, MetaValue};
use radixlm::model::synthetic::SyntheticSpec;

fn info(path: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_radixlm")).arg("info").arg(path).output().unwrap();
    assert!(out.status.success(), "radixlm info {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The line of `info`'s output starting with `key`, its value trimmed.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("no {key:?} in:\n{text}")).trim()
}

/// The tensor types `info` lists, with their counts.
fn types(text: &str) -> Vec<(String, usize)> {
    text.lines()
        .skip_while(|l| !l.starts_with("tensors:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let mut w = l.split_whitespace();
            (w.next().unwrap().to_string(), w.next().unwrap().parse().unwrap())
        })
        .collect()
}

#[test]
fn info_names_architecture_rope_and_quant_mix_of_each_golden_model() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models");
    let mixes: [(&str, &[&str]); 6] = [
        ("Q4_K_M", &["F32", "Q4_K", "Q6_K"]),
        ("Q5_K_M", &["F32", "Q5_K", "Q6_K"]),
        ("Q6_K", &["F32", "Q6_K"]),
        ("Q5_0", &["F32", "Q5_0", "Q6_K"]),
        ("Q5_1", &["F32", "Q5_1", "Q6_K"]),
        ("BF16", &["BF16", "F32"]),
    ];
    for (arch, file_arch) in [("llama3", "llama"), ("qwen2", "qwen2")] {
        for (mix, want) in mixes {
            let text = info(&dir.join(format!("{arch}-tiny.{mix}.gguf")));
            assert_eq!(field(&text, "architecture:"), file_arch, "{text}");
            assert!(!text.contains("not runnable"), "{text}");
            assert_eq!(text.contains("rope scaling:  Llama 3 frequency factors"), arch == "llama3", "{text}");
            let got: Vec<String> = types(&text).into_iter().map(|(t, _)| t).collect();
            assert_eq!(got, want, "{arch} {mix}: tensor types\n{text}");
        }
    }
}

#[test]
fn info_says_why_a_model_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let sliding = dir.path().join("sliding.gguf");
    let spec = SyntheticSpec { extra_metadata: vec![("llama.attention.sliding_window".into(), MetaValue::U32(4096))], ..SyntheticSpec::tiny() };
    std::fs::write(&sliding, spec.to_gguf()).unwrap();
    let text = info(&sliding);
    assert!(field(&text, "config:").contains("not runnable: invalid model configuration: sliding-window attention"), "{text}");

    let gemma = dir.path().join("gemma2.gguf");
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("gemma2".into()));
    std::fs::write(&gemma, w.to_bytes()).unwrap();
    let text = info(&gemma);
    assert!(field(&text, "config:").contains("unsupported model architecture \"gemma2\""), "{text}");
}
