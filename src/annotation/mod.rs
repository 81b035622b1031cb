//! What the LLM annotation steps share, free of any LLM call: the scenario context the prompt
//! templates read, the checks validators are made of, the vocabularies, the schema helpers and
//! the benchmark-wide conflict-intensity balancing.
//!
//! Each step's own answer type, JSON schema and validator (whose error a model can act on) live
//! with its stage, in `src/stages/<step>/answer.rs`; its prompt is `prompts/<step>.j2` (the
//! defaults are [`DEFAULT_PROMPTS`]).

pub mod balance;
pub(crate) mod check;
pub mod context;
pub mod gates;
pub mod schema;
pub mod vocab;
pub mod words;

pub use balance::{
    BalanceError, BalancedProfile, Quotas, RoleProfileAssignment, RoleSuggestion,
    ScenarioSuggestion, balance_conflict_intensity,
};
pub use context::{
    CastMember, ContextLine, ContextLineKind, EarlierAnswers, PromptAnswer, ScenarioContext,
    VISUAL_EVIDENCE,
};
pub use vocab::{
    ConflictCharacteristic, ConflictIntensity, DialogueType, Emotion, ExpressionStyle, Gender,
    VisionDependenceClass, VisualChannel, Vocabulary,
};

/// The default prompt templates as (file name, text), for `viss init` to write into `prompts/`.
pub const DEFAULT_PROMPTS: &[(&str, &str)] = &[
    ("annotate.j2", include_str!("../../prompts/annotate.j2")),
    ("describe.j2", include_str!("../../prompts/describe.j2")),
    ("profiles.j2", include_str!("../../prompts/profiles.j2")),
    ("bdi_risk.j2", include_str!("../../prompts/bdi_risk.j2")),
    ("tasks.j2", include_str!("../../prompts/tasks.j2")),
    ("affect.j2", include_str!("../../prompts/affect.j2")),
    (
        "vision_dependence.j2",
        include_str!("../../prompts/vision_dependence.j2"),
    ),
    ("one_part.j2", include_str!("../../prompts/one_part.j2")),
    // Not an annotation step's, but every template `viss init` writes is listed here once.
    ("simulate.j2", include_str!("../../prompts/simulate.j2")),
    (
        "simulate_scene.j2",
        include_str!("../../prompts/simulate_scene.j2"),
    ),
    (
        "simulate_people.j2",
        include_str!("../../prompts/simulate_people.j2"),
    ),
    (
        "evaluate_enactment.j2",
        include_str!("../../prompts/evaluate_enactment.j2"),
    ),
    (
        "evaluate_interaction.j2",
        include_str!("../../prompts/evaluate_interaction.j2"),
    ),
    (
        "evaluate_sotopia.j2",
        include_str!("../../prompts/evaluate_sotopia.j2"),
    ),
];

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn default_prompts_are_the_files_in_prompts() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
        assert_eq!(DEFAULT_PROMPTS.len(), 14);
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
    }
}
