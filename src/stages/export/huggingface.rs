//! The dataset as the Hugging Face `datasets` library and the Hub read it. The card opens with
//! a YAML block (licence, name, task categories, one config per way to load the data, and each
//! config's features from the record schema). `datasets` reads every config of a dataset with
//! one loader, so every config is a Parquet file: `scenarios.parquet` holds the records with
//! each image's bytes in the `{bytes, path}` struct `datasets` opens as an image (on the Hub or
//! from a local copy alike), `data.parquet` the records as they are, `turns.parquet` (from
//! `viss export --traces`) one row per simulated turn, and `results.parquet` (from `viss export
//! --results`) one row per judged task.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::sim::trace::Trace;
use crate::sim::turn::ActionType;
use crate::stages::evaluate::Evaluation;

/// The records with their images embedded, the `scenarios` config.
pub const SCENARIOS_PARQUET: &str = "scenarios.parquet";
/// The run traces `viss export --traces` adds, one run per line.
pub const TRACES_JSONL: &str = "traces.jsonl";
/// The same runs one row per turn, the `traces` config.
pub const TURNS_PARQUET: &str = "turns.parquet";
/// The evaluations `viss export --results` adds, one judged run per line.
pub const RESULTS_JSONL: &str = "results.jsonl";
/// The same evaluations one row per run, character and task, the `results` config.
pub const RESULTS_PARQUET: &str = "results.parquet";
/// The AgentSense evaluations `viss export --sense-results` adds, one judged run per line.
pub const SENSE_RESULTS_JSONL: &str = "sense_results.jsonl";
/// The same one row per run, goal and perspective, the `sense_goals` config.
pub const SENSE_GOALS_PARQUET: &str = "sense_goals.parquet";
/// The same one row per run, question and character asked, the `sense_questions` config.
pub const SENSE_QUESTIONS_PARQUET: &str = "sense_questions.parquet";

/// The image fields of a record and of a role: in the `scenarios` config each is the image
/// (`{bytes, path}`) and `<field>_info` holds everything else about it.
const RECORD_IMAGE: &str = "group_image";
const ROLE_IMAGE: &str = "portrait";

/// The `{bytes, path}` struct `datasets` reads as an image.
fn image_struct_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["bytes", "path"],
        "properties": {
            "bytes": {"type": "string", "contentEncoding": "base64"},
            "path": {"type": "string"},
        },
    })
}

/// `object`'s (a record's or a role's schema) `field` as an embedded image, then its facts.
fn split_image_schema(object: &mut Value, field: &str) {
    let info = format!("{field}_info");
    object["properties"][field.to_string()] =
        json!({"anyOf": [{"$ref": "#/$defs/embedded_image"}, {"type": "null"}]});
    object["properties"][info.clone()] =
        json!({"anyOf": [{"$ref": "#/$defs/image_info"}, {"type": "null"}]});
    if let Some(Value::Array(required)) = object.get_mut("required")
        && let Some(at) = required.iter().position(|r| r == field)
    {
        required.insert(at + 1, Value::from(info));
    }
}

/// The JSON schema of a `scenarios.parquet` row, from the record's.
pub fn scenarios_schema(record: &Value) -> Value {
    let mut schema = record.clone();
    split_image_schema(&mut schema, RECORD_IMAGE);
    split_image_schema(&mut schema["$defs"]["role"], ROLE_IMAGE);
    let mut info = schema["$defs"]["image"].clone();
    if let Some(Value::Object(properties)) = info.get_mut("properties") {
        properties.remove("path");
    }
    if let Some(Value::Array(required)) = info.get_mut("required") {
        required.retain(|r| r != "path");
    }
    schema["$defs"]["image_info"] = info;
    schema["$defs"]["embedded_image"] = image_struct_schema();
    schema
}

fn split_image(
    object: &mut Map<String, Value>,
    field: &str,
    png: &dyn Fn(&str) -> Option<Vec<u8>>,
) {
    let (image, info) = match object.remove(field) {
        Some(Value::Object(mut image)) => {
            let path = image.remove("path").unwrap_or(Value::Null);
            let bytes = path
                .as_str()
                .and_then(png)
                .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes));
            (json!({"bytes": bytes, "path": path}), Value::Object(image))
        }
        _ => (Value::Null, Value::Null),
    };
    object.insert(field.to_string(), image);
    object.insert(format!("{field}_info"), info);
}

/// A record (a line of data.jsonl) as a `scenarios.parquet` row; `png` gives an image's bytes
/// by its path in the dataset.
pub fn scenarios_row(record: &Value, png: &dyn Fn(&str) -> Option<Vec<u8>>) -> Value {
    let mut row = record.clone();
    if let Value::Object(object) = &mut row {
        split_image(object, RECORD_IMAGE, png);
        if let Some(Value::Array(roles)) = object.get_mut("roles") {
            for role in roles {
                if let Value::Object(role) = role {
                    split_image(role, ROLE_IMAGE, png);
                }
            }
        }
    }
    row
}

/// `features` with every `{bytes, path}` struct declared as an image.
fn image_features(features: &[Value]) -> Vec<Value> {
    let is_image = |fields: &Value| {
        fields
            == &json!([{"name": "bytes", "dtype": "binary"}, {"name": "path", "dtype": "string"}])
    };
    features
        .iter()
        .map(|feature| {
            let mut feature = feature.clone();
            if feature.get("struct").is_some_and(is_image) {
                feature = json!({"name": feature["name"], "dtype": "image"});
            } else if let Some(Value::Array(fields)) = feature.get("list") {
                let fields = image_features(fields);
                feature["list"] = Value::Array(fields);
            } else if let Some(Value::Array(fields)) = feature.get("struct") {
                let fields = image_features(fields);
                feature["struct"] = Value::Array(fields);
            }
            feature
        })
        .collect()
}

/// The JSON schema of a `turns.parquet` row: one turn of one run.
pub fn turn_schema() -> Value {
    let text = json!({"type": "string"});
    let count = json!({"type": "integer", "minimum": 0});
    let columns = [
        ("run", text.clone()),
        ("scenario", text.clone()),
        ("mode", text.clone()),
        ("replicate", count.clone()),
        ("turn", count.clone()),
        ("round", count.clone()),
        ("speaker", text.clone()),
        ("model", text.clone()),
        ("human", json!({"type": "boolean"})),
        ("emotion", text.clone()),
        ("emotion_description", text.clone()),
        ("facial_expression", text.clone()),
        ("body_actions", text.clone()),
        ("action_type", json!({"type": ["string", "null"]})),
        ("message", text.clone()),
        ("inner_thought", text.clone()),
        ("next_speaker", text.clone()),
        ("refused_answers", count.clone()),
        ("prompt_tokens", count.clone()),
        ("completion_tokens", count.clone()),
        ("portrait_edited", json!({"type": "boolean"})),
    ];
    row_schema(&columns)
}

/// Every turn of `traces` (run id, trace) as a [`turn_schema`] row, in run and turn order.
pub fn turn_rows(traces: &[(String, Trace)]) -> Vec<Value> {
    let mut rows = Vec::new();
    for (run, trace) in traces {
        let settings = &trace.settings;
        for (index, record) in trace.turns.iter().enumerate() {
            let (speaker, model) = settings
                .cast
                .get(record.speaker)
                .cloned()
                .unwrap_or_default();
            let turn = &record.turn;
            rows.push(json!({
                "run": run,
                "scenario": settings.scenario,
                "mode": settings.mode.as_str(),
                "replicate": settings.replicate,
                "turn": index + 1,
                "round": record.round,
                "speaker": speaker,
                "model": model,
                "human": record.human,
                "emotion": turn.emotion.as_str(),
                "emotion_description": turn.emotion_description,
                "facial_expression": turn.facial_expression,
                "body_actions": turn.body_actions,
                "action_type": turn.action_type.map(ActionType::as_str),
                "message": turn.message,
                "inner_thought": turn.inner_thought,
                "next_speaker": turn.next_speaker,
                "refused_answers": record.rejected.len(),
                "prompt_tokens": record.prompt_tokens,
                "completion_tokens": record.completion_tokens,
                "portrait_edited": record.portrait_edited,
            }));
        }
    }
    rows
}

/// The JSON schema of a flat row with these columns, every one required.
fn row_schema(columns: &[(&str, Value)]) -> Value {
    let properties: Map<String, Value> = columns
        .iter()
        .map(|(name, schema)| (name.to_string(), schema.clone()))
        .collect();
    let required: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": required,
        "properties": properties,
    })
}

/// A row of `results.parquet`: one task of one character in one judged run.
pub fn result_schema() -> Value {
    let text = json!({"type": "string"});
    let count = json!({"type": "integer", "minimum": 0});
    let columns = [
        ("run", text.clone()),
        ("scenario", text.clone()),
        ("mode", text.clone()),
        ("character", text.clone()),
        ("model", text.clone()),
        ("task", text.clone()),
        // Null when too few judges answered for a vote: the task is unscored, not failed.
        ("label", json!({"type": ["string", "null"]})),
        ("verdict", text.clone()),
        ("judges", count.clone()),
        ("judges_answered", count),
    ];
    row_schema(&columns)
}

/// Every task of `evaluations` (run id, evaluation) as a [`result_schema`] row, in run order
/// and then as each evaluation lists them (cast order, then task).
pub fn result_rows(evaluations: &[(String, Evaluation)]) -> Vec<Value> {
    let mut rows = Vec::new();
    for (run, evaluation) in evaluations {
        for task in &evaluation.tasks {
            let model = evaluation.model_of(task.role).unwrap_or_default();
            let verdict = serde_json::to_value(task.verdict).expect("a verdict serializes");
            rows.push(json!({
                "run": run,
                "scenario": evaluation.scenario,
                "mode": evaluation.mode.as_str(),
                "character": task.character,
                "model": model,
                "task": task.task.as_str(),
                "label": task.verdict.label().map(|label| label.as_str()),
                "verdict": verdict["by"],
                "judges": task.grades.len(),
                "judges_answered": task.grades.iter().flatten().count(),
            }));
        }
    }
    rows
}

/// What the card's metadata says of the dataset.
pub struct CardMetadata<'a> {
    pub pretty_name: &'a str,
    /// As the Hub names licences (`cc-by-4.0`, `other`, `unknown`, ...).
    pub license: &'a str,
    pub scenarios: usize,
    /// Whether any scenario has an image: only then is there an image config.
    pub images: bool,
    /// The record's features ([`viss_parquet::hf_features`] of the record schema).
    pub features: Vec<Value>,
    /// `scenarios.parquet`'s features, when there are images.
    pub image_features: Vec<Value>,
}

fn size_category(rows: usize) -> &'static str {
    match rows {
        0..1_000 => "n<1K",
        1_000..10_000 => "1K<n<10K",
        10_000..100_000 => "10K<n<100K",
        _ => "100K<n<1M",
    }
}

fn config(name: &str, files: Value, default: bool) -> Value {
    let mut config = json!({
        "config_name": name,
        "data_files": [{"split": "test", "path": files}],
    });
    if default {
        config["default"] = Value::Bool(true);
    }
    config
}

/// A config's features. No `splits`: `datasets` checks a split's declared size in bytes of its
/// own Arrow encoding, which only it can compute.
fn info(name: &str, features: Vec<Value>) -> Value {
    json!({
        "config_name": name,
        "features": features,
    })
}

/// The metadata block as a JSON value (rendered as YAML by [`front_matter`]).
pub fn metadata(card: &CardMetadata<'_>) -> Value {
    let mut configs = Vec::new();
    let mut infos = Vec::new();
    let mut categories = vec!["text-generation"];
    if card.images {
        categories.push("image-text-to-text");
        configs.push(config("scenarios", json!(SCENARIOS_PARQUET), true));
        infos.push(info("scenarios", image_features(&card.image_features)));
        configs.push(config("table", json!(super::dataset::DATA_PARQUET), false));
        infos.push(info("table", card.features.clone()));
    } else {
        configs.push(config(
            "scenarios",
            json!(super::dataset::DATA_PARQUET),
            true,
        ));
        infos.push(info("scenarios", card.features.clone()));
    }
    json!({
        "pretty_name": card.pretty_name,
        "license": card.license,
        "task_categories": categories,
        "tags": ["social-intelligence", "role-play", "multimodal", "benchmark", "viss"],
        "size_categories": [size_category(card.scenarios)],
        "configs": configs,
        "dataset_info": infos,
    })
}

/// `card` (as [`front_matter`] began it) with the config `name` reading `file` added to its
/// metadata (kept as it is when the card has it already); `None` when the card has no such
/// metadata.
pub fn with_config(card: &str, name: &str, file: &str) -> Option<String> {
    let (metadata, rest) = split_card(card)?;
    if metadata.contains(&format!("- config_name: \"{name}\"\n")) {
        return Some(card.to_string());
    }
    // Keys are written sorted: `configs` is first and its list ends where `dataset_info` begins.
    let end = metadata.find("\ndataset_info:")? + 1;
    let mut entry = String::new();
    yaml(&json!([config(name, json!(file), false)]), 0, &mut entry);
    Some(format!(
        "---\n{}{entry}{}---\n{rest}",
        &metadata[..end],
        &metadata[end..]
    ))
}

/// `value` as block-style YAML at `indent` spaces, keys in sorted order. Strings are written
/// as JSON strings, which YAML reads as double-quoted scalars with the same escapes.
fn yaml(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                out.push_str(&format!("{pad}{key}:"));
                scalar_or_block(item, indent, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                out.push_str(&format!("{pad}-"));
                match item {
                    // The first key on the dash's line, the others under it.
                    Value::Object(map) if !map.is_empty() => {
                        let mut lines = String::new();
                        yaml(item, indent + 2, &mut lines);
                        out.push(' ');
                        out.push_str(&lines[indent + 2..]);
                    }
                    _ => scalar_or_block(item, indent, out),
                }
            }
        }
        scalar => out.push_str(&format!("{pad}{}\n", scalar_text(scalar))),
    }
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(text) => yaml_quoted(text),
        Value::Array(items) if items.is_empty() => "[]".to_string(),
        Value::Object(map) if map.is_empty() => "{}".to_string(),
        other => other.to_string(),
    }
}

/// `text` as a YAML double-quoted scalar that every YAML parser reads back as `text`: what
/// YAML does not allow in a stream (C0 and C1 controls, DEL, U+FEFF, U+FFFE, U+FFFF) or reads
/// as a line break (U+0085, U+2028, U+2029) is escaped, as are the quote and the backslash. The
/// result is also a JSON string.
fn yaml_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control()
                || matches!(
                    c,
                    '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
                ) =>
            {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn scalar_or_block(value: &Value, indent: usize, out: &mut String) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            yaml(value, indent + 2, out);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            yaml(value, indent, out);
        }
        scalar => out.push_str(&format!(" {}\n", scalar_text(scalar))),
    }
}

/// The card's front matter: `metadata` as YAML between `---` lines.
pub fn front_matter(metadata: &Value) -> String {
    let mut out = String::from("---\n");
    yaml(metadata, 0, &mut out);
    out.push_str("---\n");
    out
}

/// A card split into its metadata and the rest, when it opens with a front matter this module
/// wrote (as JSON-compatible YAML).
pub fn split_card(card: &str) -> Option<(&str, &str)> {
    let rest = card.strip_prefix("---\n")?;
    let end = rest.find("\n---\n")?;
    Some((&rest[..=end], &rest[end + 5..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_schema() -> Value {
        crate::stages::export::record::record_schema()
    }

    #[test]
    fn images_are_embedded_beside_their_facts() {
        let record = json!({
            "id": "s/e/sc1",
            "group_image": {"path": "images/s/e/sc1/G.png", "width": 640},
            "roles": [
                {"name": "Ada", "portrait": {"path": "images/s/e/sc1/Ada.png", "width": 448}},
                {"name": "Ben", "portrait": null},
            ],
        });
        let png = |path: &str| Some(path.as_bytes().to_vec());
        let encoded = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        assert_eq!(
            scenarios_row(&record, &png),
            json!({
                "id": "s/e/sc1",
                "group_image": {"bytes": encoded("images/s/e/sc1/G.png"),
                                "path": "images/s/e/sc1/G.png"},
                "group_image_info": {"width": 640},
                "roles": [
                    {"name": "Ada",
                     "portrait": {"bytes": encoded("images/s/e/sc1/Ada.png"),
                                  "path": "images/s/e/sc1/Ada.png"},
                     "portrait_info": {"width": 448}},
                    {"name": "Ben", "portrait": null, "portrait_info": null},
                ],
            })
        );
    }

    /// The scenarios config's features: images where the record has image paths, their facts
    /// beside them, every other column as in the table config.
    #[test]
    fn the_image_config_declares_images_and_the_table_config_the_records() {
        let record = record_schema();
        let features = viss_parquet::hf_features(&record).unwrap();
        let image_features = viss_parquet::hf_features(&scenarios_schema(&record)).unwrap();
        let metadata = metadata(&CardMetadata {
            pretty_name: "The Van",
            license: "cc0-1.0",
            scenarios: 4,
            images: true,
            features: features.clone(),
            image_features,
        });
        assert_eq!(metadata["configs"][0]["config_name"], "scenarios");
        assert_eq!(
            metadata["configs"][0]["data_files"][0]["path"],
            "scenarios.parquet"
        );
        assert_eq!(
            metadata["configs"][1]["data_files"][0]["path"],
            "data.parquet"
        );
        let declared = metadata["dataset_info"][0]["features"].as_array().unwrap();
        let named = |name: &str| declared.iter().find(|f| f["name"] == name).unwrap().clone();
        assert_eq!(
            named("group_image"),
            json!({"name": "group_image", "dtype": "image"})
        );
        assert!(!named("group_image_info").to_string().contains("\"path\""));
        let roles = named("roles")["list"].as_array().unwrap().clone();
        assert!(roles.contains(&json!({"name": "portrait", "dtype": "image"})));
        assert!(roles.iter().any(|f| f["name"] == "portrait_info"));
        assert_eq!(declared.len(), features.len() + 1);
        assert_eq!(
            metadata["dataset_info"][1]["features"],
            Value::from(features.clone())
        );
        let text_only = metadata_of_text_only(features);
        assert_eq!(text_only["configs"].as_array().unwrap().len(), 1);
        assert_eq!(
            text_only["configs"][0]["data_files"][0]["path"],
            "data.parquet"
        );
    }

    fn metadata_of_text_only(features: Vec<Value>) -> Value {
        metadata(&CardMetadata {
            pretty_name: "x",
            license: "unknown",
            scenarios: 2,
            images: false,
            features,
            image_features: Vec::new(),
        })
    }

    /// Block-style YAML, strings as JSON strings (read back by `datasets` itself in the
    /// export's integration test).
    #[test]
    fn the_front_matter_is_yaml_of_the_metadata() {
        let value = json!({
            "pretty_name": "The \"Van\": a: b",
            "size": 4,
            "tags": ["a", "b"],
            "configs": [
                {"config_name": "x", "data_files": [{"split": "test", "path": ["m", "i/*"]}]},
            ],
            "empty": [],
        });
        assert_eq!(
            front_matter(&value),
            "---\npretty_name: \"The \\\"Van\\\": a: b\"\nsize: 4\ntags:\n- \"a\"\n- \"b\"\n\
             configs:\n- config_name: \"x\"\n  data_files:\n  - split: \"test\"\n    path:\n    \
             - \"m\"\n    - \"i/*\"\nempty: []\n---\n"
        );
        let metadata = metadata_of_text_only(Vec::new());
        let card = format!("{}# Card\n", front_matter(&metadata));
        let traced = with_config(&card, "traces", TURNS_PARQUET).unwrap();
        assert_eq!(
            with_config(&traced, "traces", TURNS_PARQUET).unwrap(),
            traced
        );
        assert!(
            traced.contains(
                "  default: true\n- config_name: \"traces\"\n  data_files:\n  - split: \
                 \"test\"\n    path: \"turns.parquet\"\ndataset_info:\n"
            ),
            "{traced}"
        );
        let (yaml, rest) = split_card(&traced).unwrap();
        assert!(
            yaml.starts_with("pretty_name: \"x\"\n") && yaml.ends_with("\n"),
            "{yaml}"
        );
        assert!(yaml.contains("\nconfigs:\n"), "{yaml}");
        assert_eq!(rest, "# Card\n");
    }

    /// The turn rows fit their schema's column types.
    #[test]
    fn turn_rows_write_as_parquet() {
        let trace: Trace = serde_json::from_value(json!({
            "settings": {
                "scenario": "s/e/sc1", "mode": "text", "cast": [["Ada", "m1"], ["Ben", "m2"]],
                "replicate": 0, "seed": 7, "rounds": 1, "temperature": 0.7,
                "speaker_policy": "round_robin", "message_budget_words": null,
            },
            "turns": [{
                "round": 1, "speaker": 1, "shown": {"texts": [], "image_hashes": []},
                "turn": {
                    "inner_thought": "Hm.", "emotion": "Joy", "emotion_description": "glad",
                    "image_edit": false, "facial_expression": "smile", "body_actions": "nods",
                    "next_speaker": "Ada", "next_speaker_index": 0, "message": "Yes.",
                },
                "rejected": [{"message": "too long", "problems": []}], "request_key": "k",
                "prompt_tokens": 10,
                "completion_tokens": 5, "portrait_edited": false, "portrait_note": null,
                "portraits_after": [],
            }],
            "end": {"reason": "rounds_done"},
        }))
        .unwrap();
        let rows = turn_rows(&[("s/e/sc1/sim/text/m/r0".to_string(), trace)]);
        assert_eq!(rows[0]["speaker"], "Ben");
        assert_eq!(rows[0]["model"], "m2");
        assert_eq!(rows[0]["refused_answers"], 1);
        let bytes = viss_parquet::write_parquet(&rows, &turn_schema()).unwrap();
        let read = viss_parquet::read_parquet(&bytes).unwrap();
        assert_eq!(read, rows);
    }

    /// A task row per character and task, with the model that played the character; an
    /// unscored task has no label (never a default one); the rows fit their Parquet columns.
    #[test]
    fn result_rows_write_as_parquet() {
        let evaluation: Evaluation = serde_json::from_value(json!({
            "scenario": "s/e/sc1", "mode": "text", "cast": [["Ada", "m1"], ["Ben", "m2"]],
            "message_chars": [10, 12], "dialogue_type": "persuasion",
            "outcome_vision": ["weakly", "strongly"], "rounds": 2,
            "judges": [{"model": "j1", "answers": []}, {"model": "j2", "answers": []}],
            "tasks": [
                {"role": "r1", "character": "Ada", "task": "expression",
                 "grades": [{"label": "Achieved"}, {"label": "Achieved", "reason": "turn 1"}],
                 "verdict": {"by": "unanimous", "label": "Achieved"}},
                {"role": "r2", "character": "Ben", "task": "interaction_outcome",
                 "grades": [{"label": "Not Achieved"}, null],
                 "verdict": {"by": "unscored", "answered": 1, "needed": 2}},
            ],
        }))
        .unwrap();
        let rows = result_rows(&[("s/e/sc1/sim/text/m/r0".to_string(), evaluation)]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["model"], "m1");
        assert_eq!(rows[0]["label"], "Achieved");
        assert_eq!(rows[0]["verdict"], "unanimous");
        assert_eq!(rows[1]["character"], "Ben");
        assert_eq!(rows[1]["model"], "m2");
        assert_eq!(rows[1]["task"], "interaction_outcome");
        assert_eq!(rows[1]["label"], Value::Null);
        assert_eq!(rows[1]["verdict"], "unscored");
        assert_eq!(
            (
                rows[1]["judges"].clone(),
                rows[1]["judges_answered"].clone()
            ),
            (json!(2), json!(1))
        );
        let bytes = viss_parquet::write_parquet(&rows, &result_schema()).unwrap();
        let read = viss_parquet::read_parquet(&bytes).unwrap();
        assert_eq!(read, rows);
    }
}
