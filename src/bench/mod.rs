//! `viss bench`: measurements of viss itself, each side by side with its reference where one
//! exists, reported as ratios. Never timed assertions in tests. The capability crates'
//! benchmarks live in `viss-dev`; the DAG's and the video stages' here, beside what they run.

pub mod align_build;
pub mod dag;
pub mod scripted;
pub mod simulate;
pub mod video;

pub use viss_dev::bench::{align, align_truth, embed, llm, local_llm, pelt, scrfd, sface};
