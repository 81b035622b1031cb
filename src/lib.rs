//! viss: rebuild multimodal social-intelligence benchmarks from licensed screen media as one DAG
//! of content-addressed, resumable stages.

pub mod annotation;
pub mod bench;
pub mod config;
pub mod dag;
pub mod demo;
pub mod export;
#[cfg(test)]
mod fuzz;
pub mod imagegen;
pub mod llm;
pub mod manifest;
pub mod media;
pub mod models;
pub mod project;
pub mod redact;
pub mod stages;
pub mod text;
pub mod vision;
pub mod workspace;

// The engine's generic helpers, under the paths the app has always used.
pub use viss_engine::{fsutil, hash, panic_context, range};
