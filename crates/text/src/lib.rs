//! Scripts, subtitles and the lexical side of aligning them.

pub mod align;
pub mod bm25;
pub mod caseless;
pub mod embed;
pub mod encoding;
pub mod markup;
pub mod role;
pub mod scenario;
pub mod script;
pub mod subtitles;
