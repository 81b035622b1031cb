//! The built-in stages' files against the engine's loader: defaults in range, a bad value
//! named with its file, key and range, a stage file that is not a file refused.

use std::path::Path;

use crate::dag::spec::{Pipeline, SpecError};

fn load(stages: &Path) -> Result<Pipeline, SpecError> {
    let prompts = stages.parent().unwrap().join("prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    for (name, text) in crate::stages::DEFAULT_PROMPTS {
        std::fs::write(prompts.join(name), text).unwrap();
    }
    Pipeline::load(crate::stages::BUILTIN, stages, &prompts)
}

#[test]
fn every_built_in_stage_file_is_in_range() {
    let temp = tempfile::tempdir().unwrap();
    assert!(load(&temp.path().join("stages")).is_ok());
}

#[test]
fn a_param_out_of_range_names_the_stage_file_key_and_range() {
    let temp = tempfile::tempdir().unwrap();
    let stages = temp.path().join("stages");
    std::fs::create_dir(&stages).unwrap();
    let cases = [
        ("align", "alpha = 2", "params.alpha = 2"),
        (
            "detect",
            "[params.faces]\ndet_size = 650",
            "params.faces.det_size = 650",
        ),
        (
            "match_roles",
            "[params.faces.yunet]\nnms_iou = -1",
            "params.faces.yunet.nms_iou",
        ),
        ("keyframes", "jump = 0", "params.jump = 0"),
        (
            "portraits",
            "[params.local]\nline_width = 1e30",
            "params.local.line_width = 1e30",
        ),
        (
            "parse_script",
            "[params.scenarios]\nmax_silence = 0",
            "scenarios.max_silence",
        ),
        ("annotate", "temperature = inf", "params.temperature = inf"),
        ("profiles", "max_tokens = 0", "params.max_tokens = 0"),
    ];
    for (stage, params, key) in cases {
        let file = stages.join(format!("{stage}.toml"));
        let params = if params.starts_with('[') {
            params.to_string()
        } else {
            format!("[params]\n{params}")
        };
        std::fs::write(&file, format!("version = 9\n{params}\n")).unwrap();
        let error = load(&stages).err().expect("refused").to_string();
        assert!(error.contains(&format!("stages/{stage}.toml: ")), "{error}");
        assert!(
            error.contains(key) && error.contains("is out of range"),
            "{error}"
        );
        std::fs::remove_file(&file).unwrap();
    }
}

#[test]
fn a_stage_file_that_is_not_a_file_is_refused_not_replaced_by_defaults() {
    let temp = tempfile::tempdir().unwrap();
    let stages = temp.path().join("stages");
    std::fs::create_dir_all(stages.join("align.toml")).unwrap();
    let error = load(&stages).err().expect("refused").to_string();
    assert!(
        error.contains("stages/align.toml is a directory"),
        "{error}"
    );
    std::fs::remove_dir(stages.join("align.toml")).unwrap();

    #[cfg(unix)]
    {
        std::os::unix::fs::symlink("align.toml", stages.join("frames.toml")).unwrap();
        std::os::unix::fs::symlink("frames.toml", stages.join("align.toml")).unwrap();
        let error = load(&stages).err().expect("refused").to_string();
        assert!(error.contains("is a symlink loop"), "{error}");
        std::fs::remove_file(stages.join("align.toml")).unwrap();
        std::fs::remove_file(stages.join("frames.toml")).unwrap();
    }

    std::fs::write(stages.join("Align.TOML"), "version = 2\n").unwrap();
    let error = load(&stages).err().expect("refused").to_string();
    assert!(
        error.contains("Align.TOML") && error.contains("rename it to Align.toml"),
        "{error}"
    );
}

/// Raising the shared answer checks' version re-runs exactly the LLM steps whose validators use
/// them: those are the stages whose fingerprint holds it.
#[test]
fn exactly_the_llm_steps_rest_on_the_shared_answer_checks() {
    let temp = tempfile::tempdir().unwrap();
    let pipeline = load(&temp.path().join("stages")).unwrap();
    let resting: Vec<&str> = pipeline
        .stages
        .iter()
        .filter(|spec| {
            let code = spec.stage.code();
            code.get("answer_checks")
                == Some(&crate::annotation::check::ANSWER_CHECKS_VERSION.to_string())
                && code.contains_key("answer_schema")
        })
        .map(|spec| spec.name.as_str())
        .collect();
    let mut llm_steps: Vec<&str> = crate::stages::STEPS
        .iter()
        .map(|step| step.stage())
        .collect();
    // The LLM stages that are not scenario steps, whose answers pass the shared checks too.
    let after = llm_steps
        .iter()
        .position(|s| *s == "relationships")
        .unwrap()
        + 1;
    for (at, stage) in ["instantiate", "script_prediction", "blind_test"]
        .into_iter()
        .enumerate()
    {
        llm_steps.insert(after + at, stage);
    }
    assert_eq!(resting, llm_steps);
    // The others rest on no shared code. What every stage writes is in its key by the schema
    // of each port's record type (the engine adds it); those of the stages whose records keep
    // refused answers hold the refusal's form, so a change to it re-runs exactly them.
    let mut with_refusals = Vec::new();
    for spec in &pipeline.stages {
        if !resting.contains(&spec.name.as_str()) {
            assert!(spec.stage.code().is_empty(), "{}", spec.name);
        }
        let outputs = spec.stage.outputs();
        let mut schemas = outputs
            .iter()
            .map(|port| port.shape().to_value().to_string());
        if schemas.any(|schema| schema.contains("\"Refusal\"")) {
            with_refusals.push(spec.name.as_str());
        }
    }
    let mut expected = llm_steps.clone();
    // `balance` keeps the refusals of the `profiles` answer it balanced.
    expected.extend([
        "balance",
        "simulate",
        "evaluate",
        "simulate_sense",
        "evaluate_sense",
    ]);
    expected.sort();
    with_refusals.sort();
    assert_eq!(with_refusals, expected);
}
