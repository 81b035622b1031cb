//! viss: rebuild multimodal social-intelligence benchmarks from licensed screen media as one DAG
//! of content-addressed, resumable stages.

pub mod annotation;
pub mod bench;
pub mod config;
pub mod dag;
pub mod demo;
pub mod export;
pub mod fsutil;
#[cfg(test)]
mod fuzz;
pub mod hash;
pub mod imagegen;
pub mod llm;
pub mod manifest;
pub mod media;
pub mod models;
pub mod panic_context;
pub mod project;
pub mod range;
pub mod redact;
pub mod stages;
pub mod text;
pub mod vision;
pub mod workspace;
