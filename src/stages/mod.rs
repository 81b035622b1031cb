//! The stages compiled into viss, in the order of the paper's pipeline. Each file reads like
//! the paper's paragraph for its stage; the heavy lifting lives in the capability modules.

mod step_params;

pub mod affect;
pub mod align;
pub mod annotate;
pub mod anonymize;
pub mod balance;
pub mod bdi_risk;
pub mod blind_test;
pub mod cast;
pub mod describe;
pub mod descriptor;
pub mod detect;
pub mod evaluate;
pub mod evaluate_sense;
pub mod export;
pub mod frames;
pub mod goals;
pub mod group_image;
pub mod ingest;
pub mod instantiate;
pub mod keyframes;
pub(crate) mod llm_step;
pub mod match_roles;
pub mod parse_script;
pub mod parse_subtitles;
pub mod plan_runs;
pub mod plan_sense_runs;
pub mod portraits;
pub mod private_info;
pub mod profiles;
pub mod questions;
pub mod relationships;
pub mod script_prediction;
pub mod simulate;
pub mod simulate_sense;
pub mod tasks;
pub mod template;
pub mod vision_dependence;

#[cfg(test)]
pub(crate) mod fixture;
#[cfg(test)]
mod prompt_tests;
#[cfg(test)]
mod spec_tests;

pub use llm_step::PART_MAX_REASKS;

use crate::dag::spec::StageKind;
use descriptor::{DefaultPrompt, StepDescriptor};

/// A built-in stage: an LLM step, known by its descriptor, or any other stage, by its kind.
pub enum Builtin {
    Stage(StageKind),
    Step(&'static StepDescriptor),
}

impl Builtin {
    pub const fn kind(&self) -> StageKind {
        match self {
            Builtin::Stage(kind) => *kind,
            Builtin::Step(step) => step.kind,
        }
    }
}

/// Every stage compiled into viss, once each, in the order of the paper's pipeline: adding a
/// stage is its directory, its prompt and a line here.
pub const REGISTRY: &[Builtin] = &[
    Builtin::Stage(ingest::KIND),
    Builtin::Stage(parse_script::KIND),
    Builtin::Stage(parse_subtitles::KIND),
    Builtin::Stage(align::KIND),
    Builtin::Stage(frames::KIND),
    Builtin::Stage(keyframes::KIND),
    Builtin::Stage(detect::KIND),
    Builtin::Stage(group_image::KIND),
    Builtin::Stage(match_roles::KIND),
    Builtin::Stage(portraits::KIND),
    Builtin::Step(&annotate::STEP),
    Builtin::Step(&describe::STEP),
    Builtin::Step(&profiles::STEP),
    Builtin::Stage(balance::KIND),
    Builtin::Step(&bdi_risk::STEP),
    Builtin::Step(&tasks::STEP),
    Builtin::Step(&affect::STEP),
    Builtin::Step(&vision_dependence::STEP),
    Builtin::Step(&goals::STEP),
    Builtin::Step(&private_info::STEP),
    Builtin::Step(&anonymize::STEP),
    Builtin::Stage(questions::KIND),
    Builtin::Step(&relationships::STEP),
    Builtin::Stage(template::KIND),
    Builtin::Stage(instantiate::KIND),
    Builtin::Stage(script_prediction::KIND),
    Builtin::Stage(blind_test::KIND),
    Builtin::Stage(cast::KIND),
    Builtin::Stage(export::KIND),
    Builtin::Stage(plan_runs::KIND),
    Builtin::Stage(simulate::KIND),
    Builtin::Stage(evaluate::KIND),
    Builtin::Stage(plan_sense_runs::KIND),
    Builtin::Stage(simulate_sense::KIND),
    Builtin::Stage(evaluate_sense::KIND),
];

/// The kinds of [`REGISTRY`], in its order: what a workspace loads.
pub const BUILTIN: &[StageKind] = &kinds::<{ REGISTRY.len() }>();

const fn kinds<const N: usize>() -> [StageKind; N] {
    let mut kinds = [REGISTRY[0].kind(); N];
    let mut at = 1;
    while at < N {
        kinds[at] = REGISTRY[at].kind();
        at += 1;
    }
    kinds
}

const STEP_COUNT: usize = {
    let mut count = 0;
    let mut at = 0;
    while at < REGISTRY.len() {
        if let Builtin::Step(_) = REGISTRY[at] {
            count += 1;
        }
        at += 1;
    }
    count
};

/// The LLM steps of [`REGISTRY`], in its order.
pub const STEPS: &[&StepDescriptor] = &steps::<STEP_COUNT>();

const fn steps<const N: usize>() -> [&'static StepDescriptor; N] {
    let mut steps = [&annotate::STEP; N];
    let (mut at, mut filled) = (0, 0);
    while at < REGISTRY.len() {
        if let Builtin::Step(step) = REGISTRY[at] {
            steps[filled] = step;
            filled += 1;
        }
        at += 1;
    }
    steps
}

/// The templates the stages render besides each LLM step's own: the casts of `instantiate`,
/// the part-by-part template every step shares, and those of the simulation and the judges.
const OTHER_PROMPTS: &[DefaultPrompt] = &[
    DefaultPrompt {
        file: instantiate::PROMPT,
        text: include_str!("../../prompts/instantiate.j2"),
    },
    DefaultPrompt {
        file: script_prediction::PROMPT,
        text: include_str!("../../prompts/script_prediction.j2"),
    },
    DefaultPrompt {
        file: blind_test::PROMPT,
        text: include_str!("../../prompts/blind_test.j2"),
    },
    DefaultPrompt {
        file: llm_step::ONE_PART_PROMPT,
        text: include_str!("../../prompts/one_part.j2"),
    },
    DefaultPrompt {
        file: simulate::TEMPLATE,
        text: include_str!("../../prompts/simulate.j2"),
    },
    DefaultPrompt {
        file: simulate::pictures::SCENE_TEMPLATE,
        text: include_str!("../../prompts/simulate_scene.j2"),
    },
    DefaultPrompt {
        file: simulate::pictures::PEOPLE_TEMPLATE,
        text: include_str!("../../prompts/simulate_people.j2"),
    },
    DefaultPrompt {
        file: evaluate::ENACTMENT_TEMPLATE,
        text: include_str!("../../prompts/evaluate_enactment.j2"),
    },
    DefaultPrompt {
        file: evaluate::INTERACTION_TEMPLATE,
        text: include_str!("../../prompts/evaluate_interaction.j2"),
    },
    DefaultPrompt {
        file: evaluate::SOTOPIA_TEMPLATE,
        text: include_str!("../../prompts/evaluate_sotopia.j2"),
    },
    DefaultPrompt {
        file: simulate_sense::TEMPLATE,
        text: include_str!("../../prompts/simulate_sense.j2"),
    },
    DefaultPrompt {
        file: evaluate_sense::INTERVIEW_TEMPLATE,
        text: include_str!("../../prompts/evaluate_sense_interview.j2"),
    },
    DefaultPrompt {
        file: evaluate_sense::JUDGE_TEMPLATE,
        text: include_str!("../../prompts/evaluate_sense_judge.j2"),
    },
];

/// The prompt templates the built-in stages render, as (file name, text), as `viss init`
/// writes them into `prompts/`: each step's, then the others.
pub const DEFAULT_PROMPTS: &[(&str, &str)] =
    &default_prompts::<{ STEP_COUNT + OTHER_PROMPTS.len() }>();

const fn default_prompts<const N: usize>() -> [(&'static str, &'static str); N] {
    let mut prompts = [("", ""); N];
    let mut at = 0;
    while at < STEP_COUNT {
        let prompt = STEPS[at].prompt;
        prompts[at] = (prompt.file, prompt.text);
        at += 1;
    }
    while at < N {
        let prompt = OTHER_PROMPTS[at - STEP_COUNT];
        prompts[at] = (prompt.file, prompt.text);
        at += 1;
    }
    prompts
}

/// The templates every project has had since `viss init` first wrote `prompts/`.
const FIRST_PROMPTS: &[&str] = &[
    "annotate.j2",
    "describe.j2",
    "profiles.j2",
    "bdi_risk.j2",
    "tasks.j2",
    "affect.j2",
    "vision_dependence.j2",
];

/// The default templates added after projects were first made, which an older project gets
/// written into its prompts/ when it is opened ([`crate::project::Project::add_missing_prompts`]):
/// every default template but the first ones, so a new step's prompt is one of them.
pub fn added_prompts() -> Vec<(&'static str, &'static str)> {
    DEFAULT_PROMPTS
        .iter()
        .filter(|(file, _)| !FIRST_PROMPTS.contains(file))
        .copied()
        .collect()
}

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

    /// The default templates are exactly the files of the checkout's `prompts/`, each opening
    /// with its comment, and each step's template is one the step's kind renders.
    #[test]
    fn default_prompts_are_the_files_in_prompts() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let mut names: Vec<&str> = DEFAULT_PROMPTS.iter().map(|(name, _)| *name).collect();
        names.sort();
        assert_eq!(files, names);
        for (name, text) in DEFAULT_PROMPTS {
            assert_eq!(
                std::fs::read_to_string(dir.join(name)).unwrap(),
                *text,
                "{name}"
            );
            assert!(
                text.starts_with("{#"),
                "{name} should open with its comment on the marker lines"
            );
        }
        for step in STEPS {
            assert!(
                step.kind.prompts.contains(&step.prompt.file),
                "{}",
                step.stage()
            );
            assert_eq!(
                step.kind.name,
                step.stage(),
                "a step's answer is its own stage's"
            );
        }
        let added: Vec<&str> = added_prompts().iter().map(|(name, _)| *name).collect();
        assert_eq!(
            added,
            [
                "goals.j2",
                "private_info.j2",
                "anonymize.j2",
                "relationships.j2",
                "instantiate.j2",
                "script_prediction.j2",
                "blind_test.j2",
                "one_part.j2",
                "simulate.j2",
                "simulate_scene.j2",
                "simulate_people.j2",
                "evaluate_enactment.j2",
                "evaluate_interaction.j2",
                "evaluate_sotopia.j2",
                "simulate_sense.j2",
                "evaluate_sense_interview.j2",
                "evaluate_sense_judge.j2"
            ]
        );
    }

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
