//! Model answers: JSON extraction from free text (`llm::extract`) and every annotation step's
//! validator (`annotation::*::validate`) against arbitrary and near-valid answers.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::Value;

use super::config;
use super::strategies::{name_word, tricky_char, tricky_text};
use crate::annotation::ScenarioContext;
use crate::annotation::check::Rejection;
use crate::llm::extract::parse_json_tolerant;
use crate::stages::STEPS;
use crate::stages::descriptor::Example;
use crate::stages::fixture;
use crate::stages::llm_step::{RefineRole, bind_roles};
use crate::stages::tasks::answer as tasks;

type Validate = fn(&Value, &ScenarioContext) -> Result<(), Rejection>;

/// Every step's validator, by name, with its example answer for the fixture scene.
fn steps() -> Vec<(&'static str, Validate, Value)> {
    let ctx = fixture::context();
    let lines = |name: &str| ctx.lines.iter().filter(|l| l.spoken_by(name)).count();
    let scene = Example {
        names: &ctx.participants,
        gender: &|_| "unknown",
        lines: &lines,
    };
    STEPS
        .iter()
        .map(|step| (step.stage(), step.validate, (step.example)(&scene)))
        .collect()
}

/// Swaps the fixture's names for ones whose case mapping changes their length.
fn unicode_names(text: &str) -> String {
    text.replace("Ross", "İlker")
        .replace("ross", "i̇lker")
        .replace("Rachel", "Émile")
        .replace("rachel", "émile")
        .replace("Monica", "Işıl")
        .replace("Joey", "Straße")
}

/// The bare fixture, the fixture with every earlier answer, and both with unicode names.
fn contexts() -> Vec<ScenarioContext> {
    let plain = [fixture::context(), fixture::filled_context()];
    let unicode = plain.clone().map(|ctx| {
        let text = unicode_names(&serde_json::to_string(&ctx).unwrap());
        serde_json::from_str(&text).unwrap()
    });
    plain.into_iter().chain(unicode).collect()
}

/// A JSON scalar; floats only when `floats` (serde_json may not read back a float exactly as
/// it wrote it).
fn json_leaf(floats: bool) -> impl Strategy<Value = Value> {
    let float = any::<f64>().prop_map(move |f| if floats { Value::from(f) } else { Value::Null });
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        float,
        tricky_text(16).prop_map(Value::String),
        select(
            &[
                "Ross",
                "rachel",
                " ROSS ",
                "Monica",
                "Joey",
                "İlker",
                "émile",
                "",
                "persuasion",
                "anger",
                "competing",
                "avoiding",
                "strongly",
                "weakly",
                "gaze",
                "unknown",
                "20s",
            ][..]
        )
        .prop_map(|s| Value::String(s.to_string())),
    ]
}

/// Any JSON value, with the keys the answers use.
fn json_value() -> impl Strategy<Value = Value> {
    json_tree(true)
}

fn json_tree(floats: bool) -> impl Strategy<Value = Value> {
    const KEYS: &[&str] = &[
        "roles",
        "name",
        "dialogue_type",
        "gender",
        "age",
        "occupation",
        "background",
        "description",
        "profile",
        "expression_style",
        "conflict_characteristic",
        "non_competing_alternative",
        "belief",
        "desire",
        "intention",
        "risk_if_failed",
        "revised_description",
        "expression_task",
        "emotion",
        "channels",
        "dependence",
        "reason",
    ];
    let key = prop_oneof![3 => select(KEYS).prop_map(str::to_string), 1 => tricky_text(6)];
    json_leaf(floats).prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// An edit of a JSON tree: at the node reached by following `path` (each step picks a child
/// by index modulo the child count), replace, remove or duplicate.
#[derive(Debug, Clone)]
enum Edit {
    Replace(Vec<u8>, Value),
    Remove(Vec<u8>),
    Duplicate(Vec<u8>),
}

fn edit() -> impl Strategy<Value = Edit> {
    let path = prop::collection::vec(any::<u8>(), 0..5);
    prop_oneof![
        3 => (path.clone(), json_value()).prop_map(|(p, v)| Edit::Replace(p, v)),
        1 => path.clone().prop_map(Edit::Remove),
        1 => path.prop_map(Edit::Duplicate),
    ]
}

/// The parent of the node `path` leads to, and the child's key or index.
fn walk<'a>(value: &'a mut Value, path: &[u8]) -> Option<(&'a mut Value, Result<String, usize>)> {
    let (&step, rest) = path.split_first()?;
    let child = match &*value {
        Value::Object(map) if !map.is_empty() => Ok(map
            .keys()
            .nth(usize::from(step) % map.len())
            .unwrap()
            .clone()),
        Value::Array(items) if !items.is_empty() => Err(usize::from(step) % items.len()),
        _ => return None,
    };
    let descends = match (&*value, &child) {
        (Value::Object(map), Ok(key)) => map[key].is_object() || map[key].is_array(),
        (Value::Array(items), Err(i)) => items[*i].is_object() || items[*i].is_array(),
        _ => false,
    };
    if rest.is_empty() || !descends {
        return Some((value, child));
    }
    let next = match child {
        Ok(key) => value.get_mut(&key).unwrap(),
        Err(i) => value.get_mut(i).unwrap(),
    };
    walk(next, rest)
}

fn apply_edit(value: &mut Value, edit: &Edit) {
    let (path, replacement) = match edit {
        Edit::Replace(path, v) => (path, Some(v)),
        Edit::Remove(path) | Edit::Duplicate(path) => (path, None),
    };
    let Some((parent, child)) = walk(value, path) else {
        if let Edit::Replace(_, v) = edit {
            *value = v.clone();
        }
        return;
    };
    match (parent, child, edit) {
        (Value::Object(map), Ok(key), Edit::Replace(..)) => {
            map.insert(key, replacement.unwrap().clone());
        }
        (Value::Object(map), Ok(key), Edit::Remove(_)) => {
            map.remove(&key);
        }
        (Value::Array(items), Err(i), Edit::Replace(..)) => items[i] = replacement.unwrap().clone(),
        (Value::Array(items), Err(i), Edit::Remove(_)) => {
            items.remove(i);
        }
        (Value::Array(items), Err(i), Edit::Duplicate(_)) => items.insert(i, items[i].clone()),
        _ => {}
    }
}

/// A step and context by index, and a good answer for them with a few edits.
fn near_valid_answer() -> impl Strategy<Value = (usize, usize, Value)> {
    (
        0..7usize,
        0..4usize,
        prop::collection::vec(edit(), 0..4),
        any::<bool>(),
    )
        .prop_map(|(step, ctx, edits, rename)| {
            let mut value = steps()[step].2.clone();
            if ctx >= 2 || rename {
                value = serde_json::from_str(&unicode_names(&value.to_string())).unwrap();
            }
            for edit in &edits {
                apply_edit(&mut value, edit);
            }
            (step, ctx, value)
        })
}

/// Text a model might wrap an answer in: prose without opening brackets or fences.
fn prose() -> impl Strategy<Value = String> {
    prop::collection::vec(tricky_char(), 0..40).prop_map(|chars| {
        chars
            .into_iter()
            .map(|c| if "{[`".contains(c) { ' ' } else { c })
            .collect()
    })
}

/// Whether every character a pattern makes a decoder write literally (outside `[...]`
/// classes) can stand in a JSON string as it is: llama.cpp copies them unescaped.
fn writable_in_json_as_is(pattern: &str) -> bool {
    let (mut in_class, mut escaped) = (false, false);
    for c in pattern.chars() {
        match (escaped, in_class, c) {
            (true, false, '\\') => return false,
            (true, ..) => escaped = false,
            (false, _, '\\') => escaped = true,
            (false, false, '[') => in_class = true,
            (false, true, ']') => in_class = false,
            (false, false, c) if c == '"' || c < ' ' => return false,
            _ => {}
        }
    }
    true
}

/// The steps' schemas, with the narrowing their stage gives the decoder.
fn decoder_steps() -> Vec<(&'static str, Value, RefineRole)> {
    STEPS
        .iter()
        .map(|step| (step.stage(), (step.schema)(), step.refine_role))
        .collect()
}

#[test]
fn the_good_answers_pass_every_context() {
    for ctx in contexts() {
        let renamed = ctx.participants.contains(&"İlker".to_string());
        for (name, validate, good) in steps() {
            let good = if renamed {
                serde_json::from_str(&unicode_names(&good.to_string())).unwrap()
            } else {
                good
            };
            validate(&good, &ctx).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// Every validator answers any JSON value with `Ok` or a message, never a panic.
    #[test]
    fn validators_never_panic_on_arbitrary_json(value in json_value()) {
        for ctx in contexts() {
            for (_, validate, _) in steps() {
                if let Err(rejection) = validate(&value, &ctx) {
                    prop_assert!(rejection.problems().all(|p| !p.message.is_empty()));
                }
            }
        }
    }

    /// Near-valid answers (a good one with values replaced, entries removed or repeated, names
    /// in other cases and scripts) are accepted or refused with a message, never a panic.
    #[test]
    fn validators_never_panic_on_mutated_good_answers(
        (step, ctx, value) in near_valid_answer(),
    ) {
        let (_, validate, _) = steps()[step];
        if let Err(rejection) = validate(&value, &contexts()[ctx]) {
            let message = rejection.message();
            prop_assert!(message.starts_with("Fix"), "{}", message);
        }
    }

    /// Participant names come from scripts: whatever they are, each step's schema bound to
    /// them (narrowed per role for the local decoder) becomes a llama.cpp grammar or an error,
    /// and the tasks' sentence patterns are regular expressions that a sentence opening with
    /// the name matches.
    #[test]
    fn schemas_bound_to_any_participant_names_make_grammars_or_errors(
        names in prop::collection::vec(prop_oneof![name_word(), tricky_text(8)], 1..4),
    ) {
        for (step, schema, refine) in decoder_steps() {
            let mut scene = contexts()[0].clone();
            scene.participants = names.clone();
            let bound = bind_roles(step, schema, &scene, refine);
            let decoder = bound.decoder.unwrap_or(bound.portable);
            let _ = llama_cpp_2::json_schema_to_grammar(&decoder.to_string());
        }
        let others: Vec<String> = names[1..].to_vec();
        let mut role = tasks::schema()["properties"]["roles"]["items"].clone();
        tasks::narrow_role_for_decoder(&mut role, &names[0], &others, &contexts()[0], None);
        for field in ["expression_task", "interaction_outcome_task"] {
            let pattern = role["properties"][field]["pattern"].as_str().unwrap();
            prop_assert!(writable_in_json_as_is(pattern), "{}", pattern);
        }
        let pattern = role["properties"]["expression_task"]["pattern"].as_str().unwrap();
        let regex = regex::Regex::new(pattern).unwrap();
        // Names a sentence can hold and a decoder can write (others are left out of patterns).
        let plain = |name: &str| !name.chars().any(|c| ".!?\"\\".contains(c) || c < ' ');
        if plain(&names[0]) {
            let sentence = format!("{} keeps the answers short.", names[0]);
            prop_assert!(regex.is_match(&sentence), "{} !~ {}", sentence, pattern);
        }
        let outcome = role["properties"]["interaction_outcome_task"]["pattern"].as_str();
        let outcome = regex::Regex::new(outcome.unwrap()).unwrap();
        if let Some(other) = others.iter().find(|o| plain(o)).filter(|_| plain(&names[0])) {
            let sentence = format!("{} gets {other} to agree.", names[0]);
            prop_assert!(outcome.is_match(&sentence), "{} !~ {}", sentence, outcome);
        }
    }

    /// Extraction answers any text with a value or a reason, never a panic; what it finds, the
    /// validators take.
    #[test]
    fn extraction_never_panics_on_arbitrary_text(text in tricky_text(120)) {
        match parse_json_tolerant(&text) {
            Ok(value) => {
                let ctx = fixture::context();
                for (_, validate, _) in steps() {
                    let _ = validate(&value, &ctx);
                }
            }
            Err(reason) => prop_assert!(!reason.is_empty()),
        }
    }

    /// An object or array in prose, or in a fence, is found exactly (unless the prose makes
    /// the whole text a JSON value).
    #[test]
    fn extraction_finds_an_answer_wrapped_in_prose_or_a_fence(
        value in prop_oneof![
            prop::collection::vec(json_tree(false), 0..4).prop_map(Value::Array),
            prop::collection::vec((tricky_text(6), json_tree(false)), 0..4)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ],
        before in prose(),
        after in prose(),
        fenced in any::<bool>(),
        pretty in any::<bool>(),
    ) {
        let body = if pretty {
            serde_json::to_string_pretty(&value).unwrap()
        } else {
            value.to_string()
        };
        let text = if fenced {
            format!("{before}\n```json\n{body}\n```\n{after}")
        } else {
            format!("{before}{body}{after}")
        };
        // Prose can make the whole text JSON (`"[]"` is a string): then that is the answer.
        let want = serde_json::from_str::<Value>(text.trim()).unwrap_or(value);
        prop_assert_eq!(parse_json_tolerant(&text), Ok(want));
    }
}
