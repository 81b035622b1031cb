//! viss: rebuild multimodal social-intelligence benchmarks from licensed screen media as one DAG
//! of content-addressed, resumable stages.

pub mod annotation;
pub mod bench;
pub mod config;
pub mod dag;
pub mod demo;
pub mod estimate;
pub mod export;
#[cfg(test)]
mod fuzz;
pub mod inspect;
pub mod live;
pub mod manifest;
#[cfg(test)]
mod module_tests;
pub mod play;
pub mod project;
pub mod quality;
pub mod redact;
pub mod report;
pub mod review;
pub mod stages;
pub mod status;
pub mod workspace;

// The engine's generic helpers and the capability crates, under the paths the app has always
// used.
pub use viss_engine::{fsutil, hash, panic_context, range};
pub use viss_eval as eval;
pub use viss_imagegen as imagegen;
pub use viss_llm as llm;
pub use viss_media as media;
pub use viss_models as models;
pub use viss_sim as sim;
pub use viss_text as text;
pub use viss_vision as vision;
