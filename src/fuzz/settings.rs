//! Settings files: every built-in stage's `stages/<name>.toml` (`dag::spec` and each stage's
//! params), the stage graph they make, and `viss.toml` (`config.rs`).

use proptest::prelude::*;
use proptest::sample::select;

use super::strategies::{apply, mutation, tricky_lines, tricky_text};
use super::{Outcomes, runner};
use crate::config::{Config, DEFAULT_CONFIG_TOML};
use crate::dag::spec::{Pipeline, SpecError};
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
max_response_mib = 64
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

/// How a value of a valid file is changed.
#[derive(Debug, Clone)]
enum ValueEdit {
    /// A value of the same type, often an extreme one (the seed picks which).
    SameType(u8, i64, f64, String),
    /// A value of any type.
    Any(toml::Value),
    /// The key is removed (its default applies).
    Remove,
    /// A key the file does not know, next to it.
    Unknown(String, toml::Value),
}

fn value_edit() -> impl Strategy<Value = ValueEdit> {
    prop_oneof![
        16 => (any::<u8>(), any::<i64>(), any::<f64>(), tricky_text(8))
            .prop_map(|(choice, n, f, s)| ValueEdit::SameType(choice, n, f, s)),
        1 => toml_value().prop_map(ValueEdit::Any),
        1 => Just(ValueEdit::Remove),
        1 => (tricky_text(6), toml_value()).prop_map(|(k, v)| ValueEdit::Unknown(k, v)),
    ]
}

/// A value of the type of `original`: the extremes that break range checks and arithmetic
/// (0, -1, the largest integers, NaN, infinities, empty strings and lists) or a random one.
fn same_type(original: &toml::Value, choice: u8, n: i64, f: f64, s: &str) -> toml::Value {
    use toml::Value;
    match original {
        Value::Integer(old) => Value::Integer(match choice % 8 {
            0 => 0,
            1 => -1,
            2 => i64::MAX,
            3 => i64::MIN,
            4 => i64::from(u32::MAX) + 1,
            5 => old.saturating_mul(1000),
            6 => old.saturating_add(1),
            _ => n,
        }),
        Value::Float(old) => Value::Float(match choice % 9 {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3 => 0.0,
            4 => -1.0,
            5 => 1e300,
            6 => old * 1e6,
            7 => -old,
            _ => f,
        }),
        Value::String(old) => Value::String(match choice % 5 {
            0 => String::new(),
            1 => old.to_uppercase(),
            2 => format!("{old}{s}"),
            3 => format!("{s}:{old}"),
            _ => s.to_string(),
        }),
        Value::Boolean(old) => Value::Boolean(!old),
        Value::Array(items) => Value::Array(match (choice % 4, items.first()) {
            (0, _) | (_, None) => Vec::new(),
            (1, Some(first)) => vec![first.clone(); 1 + usize::from(choice) % 40],
            (2, Some(first)) => vec![same_type(first, choice / 4, n, f, s)],
            _ => items.iter().chain(items).cloned().collect(),
        }),
        other => other.clone(),
    }
}

/// `text` (a valid file) with a few values changed (mostly to values of the right type, so the
/// file still loads and the values reach the code), and sometimes a few text mutations.
fn replace_values(text: &'static str) -> BoxedStrategy<String> {
    let mutations = prop_oneof![
        4 => Just(Vec::new()),
        1 => prop::collection::vec(mutation(), 1..3),
    ];
    (
        prop::collection::vec((0..1000u16, value_edit()), 0..4),
        mutations,
    )
        .prop_map(move |(edits, mutations)| {
            let mut table: toml::Table = toml::from_str(text).expect("seed parses");
            for (at, edit) in edits {
                let mut paths = Vec::new();
                key_paths(&table, &[], &mut paths);
                let Some(path) = paths.get(paths.len() * usize::from(at) / 1000) else {
                    continue;
                };
                let mut slot = &mut table;
                for key in &path[..path.len() - 1] {
                    match slot.get_mut(key) {
                        Some(toml::Value::Table(inner)) => slot = inner,
                        _ => unreachable!("key paths lead through tables"),
                    }
                }
                let key = &path[path.len() - 1];
                match edit {
                    ValueEdit::SameType(choice, n, f, s) => {
                        let value = same_type(&slot[key.as_str()], choice, n, f, &s);
                        slot.insert(key.clone(), value);
                    }
                    ValueEdit::Any(value) => {
                        slot.insert(key.clone(), value);
                    }
                    ValueEdit::Remove => {
                        slot.remove(key);
                    }
                    ValueEdit::Unknown(new_key, value) => {
                        slot.insert(new_key, value);
                    }
                }
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

/// A stage's file, sometimes with its `needs` set to random stages (which makes cycles).
fn stage_file() -> impl Strategy<Value = (usize, String)> {
    let mut names: Vec<&'static str> = BUILTIN.iter().map(|k| k.name).collect();
    names.extend(["", "Parse_Script", "nope", "İngest"]);
    let needs = prop::option::weighted(0.4, prop::collection::vec(select(names), 0..4));
    // Rendered once per strategy, not once per case.
    let defaults: Vec<&'static str> = BUILTIN
        .iter()
        .map(|k| &*Box::leak(k.default_config().into_boxed_str()))
        .collect();
    (0..BUILTIN.len(), needs).prop_flat_map(move |(k, needs)| {
        let text = prop_oneof![
            5 => replace_values(defaults[k]),
            1 => tricky_lines(TOML_SHAPES, 12),
        ]
        .prop_map(
            move |text| match (&needs, toml::from_str::<toml::Table>(&text)) {
                (Some(needs), Ok(mut table)) => {
                    let needs = needs.iter().map(|n| toml::Value::String(n.to_string()));
                    table.insert("needs".into(), toml::Value::Array(needs.collect()));
                    toml::to_string(&table).unwrap_or(text)
                }
                _ => text,
            },
        );
        (Just(k), text)
    })
}

/// Any stage file is loaded or refused with an error; the graph it makes with the built-in
/// files is checked (an old file's `needs` against the ports the stage reads, missing prompts)
/// without panicking, and a graph that loads lists every stage after its needs.
#[test]
fn stage_files_load_or_fail_cleanly_and_the_graph_is_checked() {
    let temp = tempfile::tempdir().unwrap();
    let (stages, prompts) = (temp.path().join("stages"), temp.path().join("prompts"));
    std::fs::create_dir_all(&stages).unwrap();
    std::fs::create_dir_all(&prompts).unwrap();
    for (name, text) in DEFAULT_PROMPTS {
        std::fs::write(prompts.join(name), text).unwrap();
    }
    let outcomes = Outcomes::default();
    runner()
        .run(&stage_file(), |(k, text)| {
            let kind = &BUILTIN[k];
            match (kind.load)(&text) {
                Ok(loaded) => {
                    outcomes.add("stage loaded");
                    let _ = (loaded.stage.level(), loaded.stage.spawns());
                }
                Err(_) => outcomes.add("stage refused"),
            }
            let file = stages.join(format!("{}.toml", kind.name));
            std::fs::write(&file, &text).unwrap();
            let pipeline = Pipeline::load(BUILTIN, &stages, &prompts);
            std::fs::remove_file(&file).unwrap();
            match pipeline {
                Ok(pipeline) => {
                    outcomes.add("graph loaded");
                    for (at, stage) in pipeline.stages.iter().enumerate() {
                        for need in &stage.needs {
                            prop_assert!(pipeline.position(need).is_some_and(|n| n < at));
                        }
                    }
                    let _ = (pipeline.render(), pipeline.render_dot());
                }
                Err(error) => {
                    outcomes.add(match error {
                        SpecError::Cycle { .. } => "graph has a cycle",
                        SpecError::NeedsDiffer { .. } => "needs differ from the ports read",
                        SpecError::MissingPrompt { .. } => "graph misses a prompt",
                        _ => "graph refused otherwise",
                    });
                }
            }
            Ok(())
        })
        .unwrap();
    outcomes.check(
        "stage files",
        &[
            "stage loaded",
            "stage refused",
            "graph loaded",
            "needs differ from the ports read",
        ],
    );
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
    let outcomes = Outcomes::default();
    runner()
        .run(&config_file(), |text| {
            std::fs::write(&path, &text).unwrap();
            match Config::load(&path) {
                Ok(config) => {
                    outcomes.add("loaded");
                    let _ = (config.jobs(), config.cpu());
                }
                Err(error) => {
                    outcomes.add("refused");
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
    outcomes.check("viss.toml", &["loaded", "refused"]);
}

#[test]
fn full_config_seed_is_a_valid_file() {
    let config: Config = toml::from_str(FULL_CONFIG).unwrap();
    config.llm.check().unwrap();
}
