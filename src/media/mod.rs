//! Video, frames and visual change points.

pub mod features;
pub mod pelt;
pub mod shots;
pub mod video;
