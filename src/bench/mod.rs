//! `viss bench`: measurements of viss itself, each side by side with its reference where one
//! exists, reported as ratios. Never timed assertions in tests.

pub mod align;
pub mod dag;
pub mod llm;
pub mod pelt;
pub mod scrfd;
pub mod sface;
pub mod video;
