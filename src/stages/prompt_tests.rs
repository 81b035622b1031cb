//! The exact prompt every LLM step renders for the fixture scenario, with every subset of the
//! earlier answers it reads present (none, each one, ..., all), against
//! `testdata/prompts.txt`. The LLM memo and the demo's `viss.lock` depend on these bytes: a
//! change to how a step's context is built must leave them alone. After an intended change to
//! a prompt, `VISS_BLESS=1 cargo test --lib prompt_tests` rewrites the file.

use std::path::Path;

use crate::annotation::context::fixture;
use crate::annotation::{DEFAULT_PROMPTS, ScenarioContext};
use crate::llm::prompt::render_prompt_source;
use crate::llm::{Message, Part};

/// Each step's template and the earlier answers its stage reads, in the stage's order.
const STEPS: &[(&str, &[&str])] = &[
    ("annotate", &[]),
    ("describe", &["annotation", "visual_evidence"]),
    ("profiles", &["annotation", "description"]),
    ("bdi_risk", &["annotation", "description", "profiles"]),
    ("tasks", &["annotation", "description", "profiles", "bdi"]),
    ("affect", &["annotation", "description", "profiles", "bdi"]),
    ("vision_dependence", &["description", "tasks"]),
];

/// The fixture as a step sees it when the earlier answers `present` are there.
fn context(present: &[&str]) -> ScenarioContext {
    let filled = fixture::filled_context();
    let mut ctx = fixture::context();
    for name in present {
        match *name {
            "annotation" => ctx.annotation = filled.annotation.clone(),
            "description" => ctx.description = filled.description.clone(),
            "profiles" => ctx.profiles = filled.profiles.clone(),
            "bdi" => ctx.bdi = filled.bdi.clone(),
            "tasks" => ctx.tasks = filled.tasks.clone(),
            "visual_evidence" => ctx.visual_evidence = filled.visual_evidence.clone(),
            other => panic!("{other}"),
        }
    }
    ctx
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
    for (step, reads) in STEPS {
        let name = format!("{step}.j2");
        let source = DEFAULT_PROMPTS.iter().find(|(n, _)| *n == name).unwrap().1;
        for subset in 0..1usize << reads.len() {
            let present: Vec<&str> = (0..reads.len())
                .filter(|i| subset & 1 << i != 0)
                .map(|i| reads[i])
                .collect();
            out.push_str(&format!("=== {step} with [{}]\n", present.join(", ")));
            match render_prompt_source(&name, source, &context(&present)) {
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
