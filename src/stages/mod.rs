//! The stages compiled into viss, in the order of the paper's pipeline. Each file reads like
//! the paper's paragraph for its stage; the heavy lifting lives in the capability modules.

pub mod affect;
pub mod align;
pub mod annotate;
pub mod bdi_risk;
pub mod describe;
pub mod detect;
pub mod export;
pub mod frames;
pub mod group_image;
pub mod ingest;
pub mod keyframes;
pub(crate) mod llm_step;
pub mod match_roles;
pub mod parse_script;
pub mod parse_subtitles;
pub mod portraits;
pub mod profiles;
pub mod tasks;
pub mod vision_dependence;

#[cfg(test)]
pub(crate) mod fixture;
#[cfg(test)]
mod prompt_tests;
#[cfg(test)]
mod spec_tests;

use crate::dag::spec::StageKind;

pub const BUILTIN: &[StageKind] = &[
    ingest::KIND,
    parse_script::KIND,
    parse_subtitles::KIND,
    align::KIND,
    frames::KIND,
    keyframes::KIND,
    detect::KIND,
    group_image::KIND,
    match_roles::KIND,
    portraits::KIND,
    annotate::KIND,
    describe::KIND,
    profiles::KIND,
    bdi_risk::KIND,
    tasks::KIND,
    affect::KIND,
    vision_dependence::KIND,
    export::KIND,
];

/// The prompt templates the built-in stages render, as `viss init` writes them into `prompts/`.
pub const DEFAULT_PROMPTS: &[(&str, &str)] = crate::annotation::DEFAULT_PROMPTS;

/// The default `stages/<name>.toml` of every built-in stage, as `viss init` writes them.
pub fn default_configs() -> Vec<(&'static str, &'static str)> {
    BUILTIN.iter().map(|k| (k.name, k.default_config)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stage files `viss init` writes spell out every param; they must say exactly what the
    /// code's defaults are, or a user reading them would be misled.
    #[test]
    fn every_default_stage_file_states_the_code_defaults() {
        for kind in BUILTIN {
            let written =
                (kind.load)(kind.default_config).unwrap_or_else(|e| panic!("{}: {e}", kind.name));
            let mut table: toml::Table = toml::from_str(kind.default_config).unwrap();
            table.remove("params");
            let bare = (kind.load)(&toml::to_string(&table).unwrap()).unwrap();
            assert_eq!(
                written.params, bare.params,
                "stages/{}.toml differs from the code defaults",
                kind.name
            );
        }
    }
}
