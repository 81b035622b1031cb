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
pub mod schema;
pub mod vocab;

pub use balance::{
    BalanceError, BalancedProfile, Quotas, RoleProfileAssignment, RoleSuggestion,
    ScenarioSuggestion, balance_conflict_intensity,
};
pub use context::{CastMember, ContextLine, ContextLineKind, ScenarioContext};
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
];

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::llm::prompt::{PromptError, render_prompt, render_prompt_source};
    use crate::llm::{Part, Role};

    fn texts(messages: &[crate::llm::Message]) -> (String, String) {
        assert_eq!(messages.len(), 2);
        assert_eq!(
            (messages[0].role, messages[1].role),
            (Role::System, Role::User)
        );
        let text = |m: &crate::llm::Message| match &m.content[..] {
            [Part::Text(text)] => text.clone(),
            other => panic!("{other:?}"),
        };
        (text(&messages[0]), text(&messages[1]))
    }

    #[test]
    fn default_prompts_are_the_files_in_prompts() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
        assert_eq!(DEFAULT_PROMPTS.len(), 7);
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

    #[test]
    fn every_prompt_renders_the_dialogue_with_and_without_earlier_answers() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
        let bare = context::fixture::context();
        let filled = context::fixture::filled_context();
        for (name, _) in DEFAULT_PROMPTS {
            let path = dir.join(name);
            let (system, user) =
                texts(&render_prompt(&path, &filled).unwrap_or_else(|e| panic!("{e}")));
            assert!(system.contains("JSON"), "{name}: {system}");
            assert!(
                user.contains("Ross, Rachel"),
                "{name} lists the participants"
            );
            assert!(
                !user.contains("\n\n\n"),
                "{name} leaves no runs of blank lines"
            );
            if *name == "vision_dependence.j2" {
                assert!(
                    user.contains("- Rachel: Rachel gets Ross to drop it."),
                    "{user}"
                );
                // It needs the tasks; without them rendering fails rather than silently omitting
                // them.
                let error = render_prompt(&path, &bare).unwrap_err().to_string();
                assert!(error.contains("vision_dependence.j2:"), "{error}");
                continue;
            }
            assert!(
                user.contains("Rachel: I said I'd think about it. (wiping the counter)"),
                "{name}: {user}"
            );
            assert!(
                user.contains("[Ross and Rachel are alone in the coffee house, closing up.]"),
                "{name}: {user}"
            );
            render_prompt(&path, &bare)
                .unwrap_or_else(|e| panic!("{name} without earlier answers: {e}"));
        }
    }

    #[test]
    fn later_prompts_use_earlier_answers() {
        let filled = context::fixture::filled_context();
        let render = |name: &str| {
            let source = DEFAULT_PROMPTS.iter().find(|(n, _)| *n == name).unwrap().1;
            texts(&render_prompt_source(name, source, &filled).unwrap()).1
        };
        assert!(render("describe.j2").contains("Two people behind a coffee-house counter."));
        assert!(render("describe.j2").contains("Dialogue type: persuasion"));
        assert!(render("profiles.j2").contains("At closing time Ross asks Rachel to reveal it."));
        // One scenario alone fills the high quota, so balancing made Rachel compete.
        assert!(render("bdi_risk.j2").contains("- Rachel: competing"));
        let tasks = render("tasks.j2");
        assert!(
            tasks.contains("REVISED: Ross presses Rachel")
                && !tasks.contains("At closing time Ross asks"),
            "{tasks}"
        );
        assert!(tasks.contains("Expression style: suppression"), "{tasks}");
        assert!(render("affect.j2").contains("- Ross wants: The truth out."));
    }

    #[test]
    fn an_undefined_context_field_names_the_template_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.j2");
        std::fs::write(
            &path,
            "{# test #}\n[system]\nS\n[user]\nScene {{ scenario_id }}\n{{ scene_location }}\n",
        )
        .unwrap();
        let error = render_prompt(&path, &context::fixture::context()).unwrap_err();
        assert!(
            matches!(error, PromptError::Render { line: Some(6), .. }),
            "{error}"
        );
        let message = error.to_string();
        assert!(
            message.contains("broken.j2:6: undefined") && message.contains("scene_location"),
            "{message}"
        );
        assert!(
            message.contains("heading"),
            "lists the context's fields: {message}"
        );
    }
}
