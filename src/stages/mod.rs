//! The stages compiled into viss, in the order of the paper's pipeline. Each file reads like
//! the paper's paragraph for its stage; the heavy lifting lives in the capability modules.

mod step_params;

pub mod affect;
pub mod align;
pub mod annotate;
pub mod balance;
pub mod bdi_risk;
pub mod cast;
pub mod describe;
pub mod detect;
pub mod evaluate;
pub mod export;
pub mod frames;
pub mod group_image;
pub mod ingest;
pub mod keyframes;
pub(crate) mod llm_step;
pub mod match_roles;
pub mod parse_script;
pub mod parse_subtitles;
pub mod plan_runs;
pub mod portraits;
pub mod profiles;
pub mod simulate;
pub mod tasks;
pub mod vision_dependence;

#[cfg(test)]
pub(crate) mod fixture;
#[cfg(test)]
mod prompt_tests;
#[cfg(test)]
mod spec_tests;

pub use llm_step::PART_MAX_REASKS;

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
    balance::KIND,
    bdi_risk::KIND,
    tasks::KIND,
    affect::KIND,
    vision_dependence::KIND,
    cast::KIND,
    export::KIND,
    plan_runs::KIND,
    simulate::KIND,
    evaluate::KIND,
];

/// The prompt templates the built-in stages render, as `viss init` writes them into `prompts/`.
pub const DEFAULT_PROMPTS: &[(&str, &str)] = crate::annotation::DEFAULT_PROMPTS;

/// The default templates added after projects were first made, which an older project gets
/// written into its prompts/ when it is opened ([`crate::project::Project::add_missing_prompts`]).
pub const ADDED_PROMPTS: &[(&str, &str)] = &[
    (
        crate::stages::llm_step::ONE_PART_PROMPT,
        include_str!("../../prompts/one_part.j2"),
    ),
    (
        crate::stages::simulate::TEMPLATE,
        include_str!("../../prompts/simulate.j2"),
    ),
    (
        crate::stages::simulate::pictures::SCENE_TEMPLATE,
        include_str!("../../prompts/simulate_scene.j2"),
    ),
    (
        crate::stages::simulate::pictures::PEOPLE_TEMPLATE,
        include_str!("../../prompts/simulate_people.j2"),
    ),
    (
        crate::stages::evaluate::ENACTMENT_TEMPLATE,
        include_str!("../../prompts/evaluate_enactment.j2"),
    ),
    (
        crate::stages::evaluate::INTERACTION_TEMPLATE,
        include_str!("../../prompts/evaluate_interaction.j2"),
    ),
    (
        crate::stages::evaluate::SOTOPIA_TEMPLATE,
        include_str!("../../prompts/evaluate_sotopia.j2"),
    ),
];

/// The default `stages/<name>.toml` of every built-in stage, as `viss init` writes them:
/// rendered from each stage's params type (its defaults and doc comments).
pub fn default_configs() -> Vec<(&'static str, String)> {
    BUILTIN
        .iter()
        .map(|k| (k.name, k.default_config()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rendered stage file loads, and what it states is exactly the code's defaults: its
    /// params parse to the same values as a file without a `[params]` table.
    #[test]
    fn every_default_stage_file_states_the_code_defaults() {
        for kind in BUILTIN {
            let text = kind.default_config();
            let written = (kind.load)(&text).unwrap_or_else(|e| panic!("{}: {e}", kind.name));
            let mut table: toml::Table = toml::from_str(&text).unwrap();
            table.remove("params");
            let bare = (kind.load)(&toml::to_string(&table).unwrap()).unwrap();
            assert_eq!(
                written.params, bare.params,
                "the rendered stages/{}.toml differs from the code defaults",
                kind.name
            );
            let too_wide = text
                .lines()
                .find(|line| line.starts_with('#') && line.len() > 100);
            assert_eq!(too_wide, None, "stages/{}.toml", kind.name);
        }
    }

    /// The checkout's `stages/*.toml` are what `viss init` writes, rendered from the params
    /// types; `VISS_BLESS=1 cargo test --lib stages::tests` rewrites them after a change to a
    /// params struct's defaults or doc comments.
    #[test]
    fn the_checked_in_stage_files_are_the_rendered_defaults() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("stages");
        let bless = std::env::var_os("VISS_BLESS").is_some_and(|v| v == "1");
        let mut stale = Vec::new();
        for (name, text) in default_configs() {
            let path = dir.join(format!("{name}.toml"));
            if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
                continue;
            }
            if bless {
                std::fs::write(&path, &text).unwrap();
            } else {
                stale.push(path.display().to_string());
            }
        }
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let stem = path
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            assert!(
                BUILTIN.iter().any(|k| k.name == stem),
                "{} is no built-in stage's file: delete it",
                path.display()
            );
        }
        assert!(
            stale.is_empty(),
            "{} differ from what the params types render (their defaults and doc comments); \
             regenerate them with `VISS_BLESS=1 cargo test --lib stages::tests`",
            stale.join(", ")
        );
    }
}
