//! The demo show's material: its plan (an original script, the subtitles derived from it, who
//! is on screen when) and its video, rendered with the ffmpeg CLI. `viss demo` (in the app)
//! writes them into a project and builds it.

pub mod plan;
pub mod video;

pub use plan::EpisodePlan;
pub use video::solvay_photo_path;
