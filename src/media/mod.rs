//! Video, frames and visual change points.

pub mod pelt;
