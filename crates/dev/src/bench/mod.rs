//! Benchmarks of the capability crates, each side by side with its reference where one exists,
//! reported as ratios. `viss bench` runs them; the app's own (DAG, video stages) live in the app.

pub mod align;
pub mod align_truth;
pub mod embed;
pub mod llm;
pub mod local_llm;
pub mod pelt;
pub mod scrfd;
pub mod sface;
