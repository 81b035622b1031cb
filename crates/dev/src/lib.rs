//! Development tooling, kept out of the app's library: the demo show's generator, the
//! broadcast-subtitle generator (subtitles derived from a script, with the true line-to-cue
//! mapping), and the benchmarks of the capability crates against their Python references.
//! It sits beside the app: it uses the capability crates and no stage.

pub mod bench;
pub mod broadcast;
pub mod demo;
pub mod download;
