//! The embedded model (Qwen2.5-Coder-0.5B-Instruct Q4_K_M through llama.cpp, fetched from PyPI
//! in setup like every default model) annotating one small scenario through `viss build`:
//! the stored answer must validate against the step's schema and name exactly the scenario's
//! participants. No mock anywhere.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;

fn viss(project: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_viss"))
        .arg("-C")
        .arg(project)
        .args(args)
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

const SCRIPT: &str = "[Scene: A bakery at dawn. Ines and Paolo.]\n\
Ines: The oven is cold again.\nPaolo: I lit it at four.\nInes: Then someone opened the door.\n\
Paolo: (shrugging) The wind did.\nInes: The wind does not have a key.\nPaolo: Fine. I went out for \
milk.\n\
Ines: We have milk.\nPaolo: We had milk.\nInes: How much is left?\nPaolo: Enough for one batch.\n\
Ines: Then we bake one batch.\nPaolo: And I buy milk.\n";

#[test]
fn embedded_model_annotates_a_scenario_and_the_answer_validates_against_the_schema() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("p");
    assert!(
        Command::new(env!("CARGO_BIN_EXE_viss"))
            .arg("init")
            .arg(&root)
            .status()
            .unwrap()
            .success()
    );
    std::fs::create_dir_all(root.join("raw/bake")).unwrap();
    std::fs::write(root.join("raw/bake/e1.txt"), SCRIPT).unwrap();
    std::fs::write(
        root.join("manifests/shows/bake.toml"),
        "license = \"test text written for viss\"\n\n[[episodes]]\nid = \"e1\"\nscript = \
         \"bake/e1.txt\"\n",
    )
    .unwrap();

    let build = viss(&root, &["build", "--until", "annotate"]);
    assert!(build.status.success(), "{}", text(&build));
    let scenario = common::scenario_ids(&root, "bake/e1").remove(0);
    let shown = viss(&root, &["show", "annotate", &scenario, "annotation"]);
    assert!(shown.status.success(), "{}", text(&shown));
    let record: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(record["model"], "local");

    // The schema, checked by hand: strict object, enum members, exactly the participants.
    let answer = &record["answer"];
    let schema = viss::stages::annotate::answer::schema();
    let keys: Vec<&String> = answer.as_object().unwrap().keys().collect();
    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    required.sort();
    assert_eq!(keys, required, "{answer}");
    let dialogue_types = &schema["properties"]["dialogue_type"]["enum"];
    assert!(
        dialogue_types
            .as_array()
            .unwrap()
            .contains(&answer["dialogue_type"]),
        "{answer}"
    );
    let mut names: Vec<&str> = answer["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["Ines", "Paolo"]);
    let genders = &schema["properties"]["roles"]["items"]["properties"]["gender"]["enum"];
    for role in answer["roles"].as_array().unwrap() {
        assert!(
            genders.as_array().unwrap().contains(&role["gender"]),
            "{role}"
        );
        assert!(
            !role["occupation"].as_str().unwrap().trim().is_empty(),
            "{role}"
        );
    }
    // And it is exactly what the step's validator accepts.
    let record_in: viss::stages::parse_script::ScenarioRecord = serde_json::from_slice(
        &viss(
            &root,
            &[
                "show",
                "parse_script",
                "bake/e1",
                &format!("scenario@{scenario}"),
            ],
        )
        .stdout,
    )
    .unwrap();
    let context = record_in.context();
    viss::stages::annotate::answer::validate(answer, &context).unwrap();
}
