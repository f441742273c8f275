//! The model: its configuration read from GGUF metadata, and the CPU reference forward pass
//! that every GPU kernel and the whole GPU engine are tested against.

pub mod config;
pub mod fingerprint;
pub mod reference;
pub mod rope;
pub mod synthetic;

pub use config::{Config, ModelError};
