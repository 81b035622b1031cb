//! The prompts the LLM steps render, with their contexts built as the stages build them: from
//! the earlier steps' ports each declares (`READS`).
//!
//! The first test holds the exact prompt every step renders for the fixture scenario, with
//! every subset of the earlier answers it reads present (none, each one, ..., all), against
//! `testdata/prompts.txt`. The LLM memo and the demo's `viss.lock` depend on these bytes: a
//! change to how a step's context is built must leave them alone. After an intended change to
//! a prompt, `VISS_BLESS=1 cargo test --lib prompt_tests` rewrites the file.

use std::path::Path;

use serde_json::Value;

use crate::annotation::ScenarioContext;
use crate::llm::prompt::{PromptError, render_prompt, render_prompt_source};
use crate::llm::{Message, Part, Role};
use crate::stages::fixture;
use crate::stages::llm_step::{PromptRead, prompt_context};
use crate::stages::{STEPS, bdi_risk, tasks, vision_dependence};

/// The earlier steps' ports `step` declares.
fn reads_of(step: &str) -> &'static [&'static dyn PromptRead] {
    STEPS.iter().find(|s| s.stage() == step).unwrap().reads
}

/// The names of the answers a step reads, in its order.
fn read_names(reads: &[&dyn PromptRead]) -> Vec<&'static str> {
    reads
        .iter()
        .filter(|r| r.is_read())
        .map(|r| r.name())
        .collect()
}

/// The fixture as a step declaring `reads` sees it when the earlier answers `present` are there.
fn context(reads: &[&dyn PromptRead], present: &[&str]) -> ScenarioContext {
    let filled = fixture::filled_context();
    prompt_context(fixture::context(), reads, |read| {
        Ok(if present.contains(&read.name()) {
            filled.earlier_json(read.name())
        } else {
            Value::Null
        })
    })
    .unwrap()
}

/// What `step` sees with every answer it reads present.
fn filled(step: &str) -> ScenarioContext {
    let reads = reads_of(step);
    context(reads, &read_names(reads))
}

/// What `step` sees with no answer present.
fn bare(step: &str) -> ScenarioContext {
    context(reads_of(step), &[])
}

fn source(step: &str) -> &'static str {
    STEPS
        .iter()
        .find(|s| s.stage() == step)
        .unwrap()
        .prompt
        .text
}

fn show(messages: &[Message]) -> String {
    let mut out = String::new();
    for message in messages {
        out.push_str(&format!("[{:?}]\n", message.role));
        for part in &message.content {
            match part {
                Part::Text(text) => out.push_str(text),
                other => panic!("{other:?}"),
            }
            out.push('\n');
        }
    }
    out
}

fn rendered() -> String {
    let mut out = String::new();
    for descriptor in STEPS {
        let (step, reads) = (descriptor.stage(), descriptor.reads);
        let names = read_names(reads);
        for subset in 0..1usize << names.len() {
            let present: Vec<&str> = (0..names.len())
                .filter(|i| subset & 1 << i != 0)
                .map(|i| names[i])
                .collect();
            out.push_str(&format!("=== {step} with [{}]\n", present.join(", ")));
            let name = descriptor.prompt.file;
            match render_prompt_source(name, source(step), &context(reads, &present)) {
                Ok(messages) => out.push_str(&show(&messages)),
                Err(_) => out.push_str("(does not render)\n"),
            }
        }
    }
    out
}

#[test]
fn every_step_renders_exactly_the_recorded_prompts() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/stages/testdata/prompts.txt");
    let rendered = rendered();
    if std::env::var_os("VISS_BLESS").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let recorded = std::fs::read_to_string(&path).unwrap();
    assert!(
        rendered == recorded,
        "the rendered prompts differ from {}",
        path.display()
    );
}

fn texts(messages: &[Message]) -> (String, String) {
    assert_eq!(messages.len(), 2);
    assert_eq!(
        (messages[0].role, messages[1].role),
        (Role::System, Role::User)
    );
    let text = |m: &Message| match &m.content[..] {
        [Part::Text(text)] => text.clone(),
        other => panic!("{other:?}"),
    };
    (text(&messages[0]), text(&messages[1]))
}

#[test]
fn every_prompt_renders_the_dialogue_with_and_without_earlier_answers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
    // The other templates (one_part.j2, simulate's and evaluate's) are rendered by their
    // stages' tests.
    for descriptor in STEPS {
        let step = &descriptor.stage();
        let path = dir.join(descriptor.prompt.file);
        let (system, user) =
            texts(&render_prompt(&path, &filled(step)).unwrap_or_else(|e| panic!("{e}")));
        assert!(system.contains("JSON"), "{step}: {system}");
        assert!(
            user.contains("Ross, Rachel"),
            "{step} lists the participants"
        );
        assert!(
            !user.contains("\n\n\n"),
            "{step} leaves no runs of blank lines"
        );
        if *step == "vision_dependence" {
            assert!(
                user.contains("- Rachel: Rachel gets Ross to drop it."),
                "{user}"
            );
            // It needs the tasks; without them rendering fails rather than silently omitting
            // them.
            let error = render_prompt(&path, &bare(step)).unwrap_err().to_string();
            assert!(error.contains("vision_dependence.j2:"), "{error}");
            continue;
        }
        if *step == "anonymize" {
            // It anonymises the goals and private information, not the dialogue.
            assert!(
                user.contains("Goal of Rachel: To put off the talk."),
                "{user}"
            );
            continue;
        }
        assert!(
            user.contains("Rachel: I said I'd think about it. (wiping the counter)"),
            "{step}: {user}"
        );
        assert!(
            user.contains("[Ross and Rachel are alone in the coffee house, closing up.]"),
            "{step}: {user}"
        );
        render_prompt(&path, &bare(step))
            .unwrap_or_else(|e| panic!("{step} without earlier answers: {e}"));
    }
}

#[test]
fn later_prompts_use_earlier_answers() {
    let render = |step: &str| {
        let name = format!("{step}.j2");
        texts(&render_prompt_source(&name, source(step), &filled(step)).unwrap()).1
    };
    assert!(render("describe").contains("Two people behind a coffee-house counter."));
    assert!(render("describe").contains("Dialogue type: persuasion"));
    assert!(render("profiles").contains("At closing time Ross asks Rachel to reveal it."));
    // One scenario alone fills the high quota, so balancing made Rachel compete.
    assert!(render("bdi_risk").contains("- Rachel: competing"));
    let tasks = render("tasks");
    assert!(
        tasks.contains("REVISED: Ross presses Rachel")
            && !tasks.contains("At closing time Ross asks"),
        "{tasks}"
    );
    // The profile reaches the tasks prompt in plain words: a label shown is a label copied.
    assert!(
        tasks.contains("When talking, Rachel hides their feelings."),
        "{tasks}"
    );
    use crate::annotation::vocab::{ConflictCharacteristic, ExpressionStyle};
    let styles = ExpressionStyle::ALL.iter().map(|label| label.as_str());
    let modes = ConflictCharacteristic::ALL
        .iter()
        .map(|label| label.as_str());
    for label in styles.chain(modes) {
        assert!(!tasks.contains(label), "{label} in {tasks}");
    }
    assert!(render("affect").contains("- Ross wants: The truth out."));
}

#[test]
fn a_step_sees_the_names_it_declares_and_no_other() {
    let value = serde_json::to_value(bare("describe")).unwrap();
    let object = value.as_object().unwrap();
    assert!(object["annotation"].is_null() && object["visual_evidence"].is_null());
    assert!(!object.contains_key("description"), "{value}");
    // A template that uses a name its step does not declare fails to render.
    let error = render_prompt_source(
        "t.j2",
        "[user]\n{% if tasks %}x{% endif %}",
        &bare("describe"),
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("undefined"), "{error}");
    // vision_dependence declares bdi without reading it: the name is there, always null.
    let seen = filled("vision_dependence");
    assert!(serde_json::to_value(&seen).unwrap()["bdi"].is_null());
    assert_eq!(seen.earlier(&bdi_risk::BDI_RISK), None);
    assert_eq!(
        seen.earlier(&tasks::TASKS),
        fixture::filled_context().earlier(&tasks::TASKS)
    );
    let inputs =
        crate::stages::llm_step::step_inputs(&Default::default(), vision_dependence::READS);
    assert!(!inputs.contains(&bdi_risk::BDI_RISK.id()), "{inputs:?}");
}

#[test]
fn a_context_stored_by_older_code_gives_every_step_the_same_context() {
    // Before the steps declared what they read, parse_script stored a null for every step's
    // answer; stores keep those records until the script changes.
    let mut stored = serde_json::to_value(fixture::context()).unwrap();
    for name in ["annotation", "description", "profiles", "bdi", "tasks"] {
        stored[name] = Value::Null;
    }
    let old: ScenarioContext = serde_json::from_value(stored).unwrap();
    let filled = fixture::filled_context();
    for descriptor in STEPS {
        let (step, reads) = (descriptor.stage(), descriptor.reads);
        let build = |scenario: ScenarioContext| {
            prompt_context(scenario, reads, |read| Ok(filled.earlier_json(read.name()))).unwrap()
        };
        assert_eq!(build(old.clone()), build(fixture::context()), "{step}");
    }
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
    let error = render_prompt(&path, &fixture::context()).unwrap_err();
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
