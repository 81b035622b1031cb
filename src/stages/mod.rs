//! The stages compiled into viss, in the order of the paper's pipeline. Each file reads like
//! the paper's paragraph for its stage; the heavy lifting lives in the capability modules.

pub mod ingest;
pub mod parse_script;
pub mod parse_subtitles;

use crate::dag::spec::StageKind;

pub const BUILTIN: &[StageKind] = &[ingest::KIND, parse_script::KIND, parse_subtitles::KIND];

/// The default `stages/<name>.toml` of every built-in stage, as `viss init` writes them.
pub fn default_configs() -> Vec<(&'static str, &'static str)> {
    BUILTIN.iter().map(|k| (k.name, k.default_config)).collect()
}
