//! What there is to review: every stored answer of the reviewable stages, with its problems and
//! the verdicts on it, and the selections `viss review` offers (all not yet reviewed, the
//! flagged, or a sample stratified by problem kind).

use std::collections::BTreeMap;

use serde_json::Value;

use super::verdicts::{Reviews, Verdict, VerdictKind};
use super::{ReviewError, Reviewable, reviewables};
use crate::dag::problem::Problem;
use crate::dag::store::Store;
use crate::hash::ContentHash;
use crate::stages::instantiate::{Instance, Instances};
use crate::stages::llm_step::StepRecord;

/// One stored answer a person may review.
#[derive(Debug, Clone)]
pub struct ReviewItem {
    pub reviewable: Reviewable,
    /// What verdicts name: the scenario, or `<scenario>/i<index>` for a synthetic cast.
    pub item: String,
    /// The scenario it belongs to: the scene shown beside it.
    pub scenario: String,
    /// The hash of what is judged (the stored record, or the one instance in it): what a
    /// verdict names.
    pub answer: ContentHash,
    /// The answer as a person reads it: the scene's fields, and per role (`roles`, each with
    /// its `name`) the role's.
    pub shown: Value,
    pub problems: Vec<Problem>,
}

impl ReviewItem {
    pub fn stage(&self) -> &'static str {
        self.reviewable.stage()
    }

    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    pub fn flagged(&self) -> bool {
        !self.problems.is_empty()
    }

    /// Whether a field of it may be edited: a step's answer, field by field; a synthetic cast
    /// is accepted or rejected as a whole.
    pub fn editable(&self) -> bool {
        matches!(self.reviewable, Reviewable::Step(_))
    }

    /// A verdict of `kind` on this answer, given now; an edit's role, field and value are set
    /// by the caller.
    pub fn verdict(&self, kind: VerdictKind, comment: Option<String>) -> Verdict {
        Verdict {
            item: self.item.clone(),
            stage: self.stage().to_string(),
            answer: self.answer,
            role: None,
            field: None,
            verdict: kind,
            value: None,
            comment,
            time: super::verdicts::now(),
        }
    }

    /// The verdicts given on this (stage, item) for an answer it no longer has.
    pub fn stale<'r>(&self, reviews: &'r Reviews) -> Vec<(&'r str, &'r Verdict)> {
        reviews
            .all()
            .filter(|(_, v)| {
                v.stage == self.stage() && v.item == self.item && v.answer != self.answer
            })
            .collect()
    }
}

/// The answers the store holds for `stages` (every reviewable stage when empty), in pipeline
/// order and by item. Failed items have none.
pub fn stored_answers(store: &Store, stages: &[&str]) -> Result<Vec<ReviewItem>, ReviewError> {
    let mut items = Vec::new();
    for reviewable in reviewables() {
        if !stages.is_empty() && !stages.contains(&reviewable.stage()) {
            continue;
        }
        let output = reviewable.output();
        for (scenario, record) in store.index().scan_stage(reviewable.stage())? {
            let Some(&answer) = record.outputs.get(&output) else {
                continue;
            };
            let bytes = store.get_blob(&answer)?;
            let bad_record = |e: serde_json::Error| ReviewError::BadRecord {
                stage: reviewable.stage().to_string(),
                item: scenario.clone(),
                message: e.to_string(),
            };
            match reviewable {
                Reviewable::Step(_) => {
                    let record: StepRecord<Value> =
                        serde_json::from_slice(&bytes).map_err(bad_record)?;
                    items.push(ReviewItem {
                        reviewable,
                        item: scenario.clone(),
                        scenario,
                        answer,
                        shown: record.answer,
                        problems: record.problems,
                    });
                }
                Reviewable::Instance => {
                    let record: Instances = serde_json::from_slice(&bytes).map_err(bad_record)?;
                    for instance in record.instances {
                        items.push(ReviewItem {
                            reviewable,
                            item: instance_item(&scenario, instance.index),
                            scenario: scenario.clone(),
                            answer: instance_hash(&instance),
                            shown: instance_shown(&instance),
                            problems: instance.problems,
                        });
                    }
                }
            }
        }
    }
    Ok(items)
}

/// The item verdicts on instance `index` of `scenario` name.
pub fn instance_item(scenario: &str, index: u32) -> String {
    format!("{scenario}/i{index}")
}

/// What a verdict on an instance names: the hash of the instance as stored (never with a
/// review mark in it).
pub fn instance_hash(instance: &Instance) -> ContentHash {
    ContentHash::of(&serde_json::to_vec(instance).expect("instances serialize"))
}

/// A cast as a person reads it: each character under its full name, its slot among its fields.
fn instance_shown(instance: &Instance) -> Value {
    let roles: Vec<Value> = instance
        .characters
        .iter()
        .map(|character| {
            let mut fields = serde_json::to_value(character).expect("characters serialize");
            fields["name"] = Value::String(character.full_name());
            fields
        })
        .collect();
    serde_json::json!({ "seed": instance.seed, "roles": roles })
}

/// Which stored answers a session goes through.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// Every answer the reviewer has no verdict on yet, the flagged first.
    Unreviewed,
    /// Only the flagged ones the reviewer has no verdict on yet.
    Flagged,
    /// `size` answers drawn with `seed`, stratified by problem kind: strata (each problem
    /// kind, and "no problem") take turns, so every kind of flag is seen before any is seen
    /// twice, and answers the gates passed are checked too.
    Sample { size: usize, seed: u64 },
}

/// The stratum an answer is drawn from in a stratified sample.
pub const NO_PROBLEM: &str = "no problem";

/// The queue of `items` for `reviewer` under `selection`.
pub fn select(
    items: Vec<ReviewItem>,
    reviews: &Reviews,
    reviewer: &str,
    selection: &Selection,
) -> Vec<ReviewItem> {
    let open: Vec<ReviewItem> = items
        .into_iter()
        .filter(|i| !reviews.reviewed_by(reviewer, i.stage(), &i.item, i.answer))
        .collect();
    match selection {
        Selection::Unreviewed => {
            let (mut flagged, rest): (Vec<_>, Vec<_>) = open.into_iter().partition(|i| i.flagged());
            flagged.extend(rest);
            flagged
        }
        Selection::Flagged => open.into_iter().filter(ReviewItem::flagged).collect(),
        Selection::Sample { size, seed } => stratified(open, *size, *seed),
    }
}

fn stratified(items: Vec<ReviewItem>, size: usize, seed: u64) -> Vec<ReviewItem> {
    let mut rng = fastrand::Rng::with_seed(seed);
    // An answer goes into the stratum of its first problem's kind.
    let mut strata: BTreeMap<String, Vec<ReviewItem>> = BTreeMap::new();
    for item in items {
        let kind = item
            .problems()
            .first()
            .map_or(NO_PROBLEM.to_string(), |p| p.kind.clone());
        strata.entry(kind).or_default().push(item);
    }
    let mut strata: Vec<Vec<ReviewItem>> = strata.into_values().collect();
    for stratum in &mut strata {
        rng.shuffle(stratum);
    }
    rng.shuffle(&mut strata);
    let mut drawn = Vec::with_capacity(size);
    while drawn.len() < size && strata.iter().any(|s| !s.is_empty()) {
        for stratum in &mut strata {
            if drawn.len() == size {
                break;
            }
            if let Some(item) = stratum.pop() {
                drawn.push(item);
            }
        }
    }
    drawn
}

/// The answer's fields as a person reads and names them: the scene's own (`background`), then
/// each role's (`Ada.age`), with their values.
pub fn fields(answer: &Value) -> Vec<(Option<String>, String, Value)> {
    let mut fields = Vec::new();
    let Some(object) = answer.as_object() else {
        return fields;
    };
    for (name, value) in object {
        if name != "roles" {
            fields.push((None, name.clone(), value.clone()));
        }
    }
    for entry in object
        .get("roles")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let role = entry["name"].as_str().unwrap_or_default().to_string();
        for (name, value) in entry.as_object().into_iter().flatten() {
            if name != "name" {
                fields.push((Some(role.clone()), name.clone(), value.clone()));
            }
        }
    }
    fields
}

/// `background` or `Ada.age` as (role, field), checked against the answer's fields.
pub fn parse_field_path(answer: &Value, path: &str) -> Result<(Option<String>, String), String> {
    let known = fields(answer);
    let found = known.iter().find(|(role, field, _)| match role {
        None => field == path,
        Some(role) => {
            path.strip_prefix(role.as_str())
                .and_then(|rest| rest.strip_prefix('.'))
                == Some(field.as_str())
        }
    });
    match found {
        Some((role, field, _)) => Ok((role.clone(), field.clone())),
        None => Err(format!(
            "no field `{path}`; the fields are {}",
            known
                .iter()
                .map(|(role, field, _)| field_label(role.as_deref(), field))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// How a field is named to a person: `background`, `Ada.age`.
pub fn field_label(role: Option<&str>, field: &str) -> String {
    match role {
        Some(role) => format!("{role}.{field}"),
        None => field.to_string(),
    }
}
