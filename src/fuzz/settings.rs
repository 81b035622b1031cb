//! Settings files: every built-in stage's `stages/<name>.toml` (`dag::spec` and each stage's
//! params), the stage graph they make, and `viss.toml` (`config.rs`).

use proptest::prelude::*;
use proptest::sample::select;

use super::runner;
use super::strategies::{apply, mutation, tricky_lines, tricky_text};
use crate::config::{Config, DEFAULT_CONFIG_TOML};
use crate::dag::spec::Pipeline;
use crate::stages::{BUILTIN, DEFAULT_PROMPTS};

/// `viss.toml` with the commented-out sections of the default file written out.
const FULL_CONFIG: &str = r#"
[paths]
artifacts = "artifacts"
[build]
jobs = 2
cpu = 1
[models.text_embedder.files]
model_onnx = "models/m.onnx"
tokenizer_json = "models/tokenizer.json"
[models.text_embedder.options]
pooling = "cls"
max_tokens = 512
batch_size = 8
intra_threads = 1
[models.image_embedder]
model_onnx = "models/clip.onnx"
input_size = 336
[models.person_detector]
model_onnx = "models/yolov8n.onnx"
classes = [0]
score_threshold = 0.25
[llm.roles]
annotator = "openai:gpt-4o-mini"
writer = "local"
describer = "local"
agents = ["local", "openai:gpt-4o"]
judges = ["local"]
image_edit = "openai:gpt-image-1"
[llm.endpoints.openai]
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"
max_in_flight = 8
requests_per_minute = 500
tokens_per_minute = 0
timeout_seconds = 120
max_retries = 5
retry_backoff_seconds = 1.0
[llm.endpoints.openai.prices."gpt-4o-mini"]
input_per_mtok = 0.15
output_per_mtok = 0.60
[llm.local]
context_tokens = 8192
threads = 0
max_tokens = 1024
"#;

/// A TOML value of any type, with the numbers that break range checks and arithmetic.
fn toml_value() -> impl Strategy<Value = toml::Value> {
    let stage_names: Vec<&'static str> = BUILTIN.iter().map(|k| k.name).collect();
    let leaf = prop_oneof![
        any::<i64>().prop_map(toml::Value::Integer),
        select(&[0, -1, 1, 2, i64::MAX, i64::MIN, u32::MAX as i64 + 1, 65536][..])
            .prop_map(toml::Value::Integer),
        any::<f64>().prop_map(toml::Value::Float),
        select(
            &[
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                -0.0,
                1e308,
                1e-310
            ][..]
        )
        .prop_map(toml::Value::Float),
        any::<bool>().prop_map(toml::Value::Boolean),
        tricky_text(10).prop_map(toml::Value::String),
        select(
            &[
                "local",
                "openai:gpt-4o",
                ":",
                "local:",
                "mean",
                "cls",
                "auto"
            ][..]
        )
        .prop_map(|s| toml::Value::String(s.to_string())),
    ];
    prop_oneof![
        6 => leaf.clone(),
        1 => prop::collection::vec(leaf, 0..4).prop_map(toml::Value::Array),
        1 => prop::collection::vec(select(stage_names), 0..4).prop_map(|names| {
            toml::Value::Array(names.into_iter().map(|n| toml::Value::String(n.into())).collect())
        }),
        1 => Just(toml::Value::Table(toml::Table::new())),
    ]
}

/// Every key path to a value in `table` (tables are descended into, arrays are values).
fn key_paths(table: &toml::Table, prefix: &[String], out: &mut Vec<Vec<String>>) {
    for (key, value) in table {
        let mut path = prefix.to_vec();
        path.push(key.clone());
        if let toml::Value::Table(inner) = value {
            key_paths(inner, &path, out);
        }
        out.push(path);
    }
}

/// `text` (a valid file) with the values at some key paths replaced, some keys added, and
/// then maybe a few text mutations.
fn replace_values(text: &'static str) -> BoxedStrategy<String> {
    let edit = (0..1000u16, toml_value(), prop::option::of(tricky_text(6)));
    (
        prop::collection::vec(edit, 1..4),
        prop::collection::vec(mutation(), 0..2),
    )
        .prop_map(move |(edits, mutations)| {
            let mut table: toml::Table = toml::from_str(text).expect("seed parses");
            for (at, value, new_key) in edits {
                let mut paths = Vec::new();
                key_paths(&table, &[], &mut paths);
                let Some(path) = paths.get(paths.len() * usize::from(at) / 1000) else {
                    table.insert(new_key.unwrap_or_default(), value);
                    continue;
                };
                let mut slot = &mut table;
                for key in &path[..path.len() - 1] {
                    match slot.get_mut(key) {
                        Some(toml::Value::Table(inner)) => slot = inner,
                        _ => unreachable!("key paths lead through tables"),
                    }
                }
                let key = new_key.unwrap_or_else(|| path[path.len() - 1].clone());
                slot.insert(key, value);
            }
            let text = toml::to_string(&table).unwrap_or_default();
            mutations.iter().fold(text, |text, m| apply(&text, m))
        })
        .boxed()
}

const TOML_SHAPES: &[&str] = &[
    "version = $",
    "version = 1",
    "needs = [\"$\"]",
    "prompts = [\"$\"]",
    "[params]",
    "[params.$]",
    "[$]",
    "$ = $",
    "$ = \"$\"",
    "$ = [$]",
    "$ = nan",
    "$ = -inf",
    "$ = 99999999999999999999",
    "$ = 1e999",
];

fn stage_file() -> impl Strategy<Value = (usize, String)> {
    (0..BUILTIN.len()).prop_flat_map(|k| {
        let text = prop_oneof![
            3 => replace_values(BUILTIN[k].default_config),
            1 => tricky_lines(TOML_SHAPES, 12),
        ];
        (Just(k), text)
    })
}

/// Any stage file is loaded or refused with an error; the graph it makes with the built-in
/// files is checked (unknown needs, cycles, missing prompts) without panicking, and a graph
/// that loads lists every stage after its needs.
#[test]
fn stage_files_load_or_fail_cleanly_and_the_graph_is_checked() {
    let temp = tempfile::tempdir().unwrap();
    let (stages, prompts) = (temp.path().join("stages"), temp.path().join("prompts"));
    std::fs::create_dir_all(&stages).unwrap();
    std::fs::create_dir_all(&prompts).unwrap();
    for (name, text) in DEFAULT_PROMPTS {
        std::fs::write(prompts.join(name), text).unwrap();
    }
    runner()
        .run(&stage_file(), |(k, text)| {
            let kind = &BUILTIN[k];
            if let Ok(loaded) = (kind.load)(&text) {
                let _ = (loaded.stage.level(), loaded.stage.spawns());
            }
            let file = stages.join(format!("{}.toml", kind.name));
            std::fs::write(&file, &text).unwrap();
            let pipeline = Pipeline::load(BUILTIN, &stages, &prompts);
            std::fs::remove_file(&file).unwrap();
            match pipeline {
                Ok(pipeline) => {
                    for (at, stage) in pipeline.stages.iter().enumerate() {
                        for need in &stage.needs {
                            prop_assert!(pipeline.position(need).is_some_and(|n| n < at));
                        }
                    }
                    let _ = (pipeline.render(), pipeline.render_dot());
                }
                Err(error) => {
                    let _ = error.to_string();
                }
            }
            Ok(())
        })
        .unwrap();
}

fn config_file() -> impl Strategy<Value = String> {
    const SHAPES: &[&str] = &[
        "[paths]",
        "[build]",
        "jobs = $",
        "cpu = 18446744073709551616",
        "[llm.roles]",
        "annotator = \"$\"",
        "[llm.endpoints.$]",
        "base_url = \"$\"",
        "[llm.local]",
        "context_tokens = $",
        "$ = $",
    ];
    prop_oneof![
        2 => replace_values(DEFAULT_CONFIG_TOML),
        2 => replace_values(FULL_CONFIG),
        1 => tricky_lines(SHAPES, 12),
    ]
}

/// Any `viss.toml` is loaded or refused with an error naming the file.
#[test]
fn viss_toml_loads_or_fails_with_an_error_naming_the_file() {
    let temp = tempfile::tempdir().unwrap();
    let path = temp.path().join("viss.toml");
    let label = path.display().to_string();
    runner()
        .run(&config_file(), |text| {
            std::fs::write(&path, &text).unwrap();
            match Config::load(&path) {
                Ok(config) => {
                    let _ = (config.jobs(), config.cpu());
                }
                Err(error) => {
                    let message = error.to_string();
                    prop_assert!(
                        message.contains(&label) || message.starts_with("environment variable"),
                        "{}",
                        message
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn full_config_seed_is_a_valid_file() {
    let config: Config = toml::from_str(FULL_CONFIG).unwrap();
    config.llm.check().unwrap();
}
