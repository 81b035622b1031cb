//! Verdicts as inputs: what later stages read of a reviewed answer. The stage's own record is
//! never rewritten (its hash is what the verdicts name); the engine hands its readers the
//! reviewed record instead, so an edit re-runs exactly the stages that read the answer, and a
//! verdict withdrawn or gone stale gives them the stored answer back.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::queue::{instance_hash, instance_item};
use super::verdicts::{Reviews, Standing};
use super::{Reviewable, reviewables};
use crate::dag::problem::Problem;
use crate::dag::store::Store;
use crate::hash::ContentHash;
use crate::stages::descriptor::StepDescriptor;
use crate::stages::instantiate::Instances;
use crate::stages::llm_step::{ReviewMark, ReviewOutcome, StepRecord};

/// The project's verdicts, handed to the engine ([`crate::dag::OutputOverlay`]).
pub struct ReviewOverlay {
    reviews: Arc<Reviews>,
    /// (stage, item) pairs some verdict names: the cheap first check.
    named: BTreeSet<(String, String)>,
}

impl ReviewOverlay {
    pub fn new(reviews: Arc<Reviews>) -> Self {
        // A verdict on an instance names `<scenario>/i<index>`: it covers the scenario's record.
        let instantiate = Reviewable::Instance.stage();
        let named = reviews
            .all()
            .map(|(_, v)| {
                let item = match v.item.rsplit_once('/') {
                    Some((scenario, _)) if v.stage == instantiate => scenario,
                    _ => v.item.as_str(),
                };
                (v.stage.clone(), item.to_string())
            })
            .collect();
        Self { reviews, named }
    }
}

impl crate::dag::OutputOverlay for ReviewOverlay {
    fn covers(&self, stage: &str, item: &str) -> bool {
        self.named.contains(&(stage.to_string(), item.to_string()))
    }

    fn replace(
        &self,
        store: &Store,
        stage: &str,
        item: &str,
        output: &str,
        hash: ContentHash,
    ) -> Result<Option<Vec<u8>>, String> {
        let Some(reviewable) = reviewables().find(|r| r.stage() == stage) else {
            return Ok(None);
        };
        if output != reviewable.output() {
            return Ok(None);
        }
        let read = || {
            store
                .get_blob(&hash)
                .map_err(|e| format!("reading the reviewed answer: {e}"))
        };
        match reviewable {
            Reviewable::Step(step) => {
                let standing = self.reviews.standing(stage, item, hash);
                if standing.is_empty() {
                    // Every verdict on it judged another answer: stale, so not applied.
                    return Ok(None);
                }
                reviewed_record(step, &read()?, &standing).map(Some)
            }
            Reviewable::Instance => reviewed_instances(&self.reviews, item, &read()?),
        }
    }
}

/// The instances record `bytes` of `scenario` with each reviewed instance marked as its
/// verdicts stand (accepted: its problems settled; rejected), or `None` when no verdict holds
/// for any of them.
pub fn reviewed_instances(
    reviews: &Reviews,
    scenario: &str,
    bytes: &[u8],
) -> Result<Option<Vec<u8>>, String> {
    let mut record: Instances =
        serde_json::from_slice(bytes).map_err(|e| format!("the stored instances: {e}"))?;
    let stage = Reviewable::Instance.stage();
    let mut marked = false;
    for instance in &mut record.instances {
        let item = instance_item(scenario, instance.index);
        let standing = reviews.standing(stage, &item, instance_hash(instance));
        if standing.is_empty() {
            continue;
        }
        if let Some((_, edit)) = standing.edits.values().next() {
            return Err(format!(
                "{item}: a synthetic cast is accepted or rejected as a whole, not edited (the \
                 verdict of {} on {}); delete that line of the verdict file",
                edit.time,
                edit.field_path().unwrap_or_default()
            ));
        }
        let rejected = standing.rejected();
        instance.review = Some(ReviewMark {
            verdict: if rejected {
                ReviewOutcome::Rejected
            } else {
                ReviewOutcome::Accepted
            },
            reviewers: standing.reviewers(),
            edited: Vec::new(),
            resolved: if rejected {
                Vec::new()
            } else {
                std::mem::take(&mut instance.problems)
            },
        });
        marked = true;
    }
    if !marked {
        return Ok(None);
    }
    let mut out = serde_json::to_vec_pretty(&record).expect("records serialize");
    out.push(b'\n');
    Ok(Some(out))
}

/// The record `bytes` (a [`StepRecord`] of `reviewable`) as `standing` makes it: edits in
/// place, the problems they settle moved into its review mark; rejected, marked so.
pub fn reviewed_record(
    reviewable: &'static StepDescriptor,
    bytes: &[u8],
    standing: &Standing,
) -> Result<Vec<u8>, String> {
    let mut record: StepRecord<Value> =
        serde_json::from_slice(bytes).map_err(|e| format!("the stored answer: {e}"))?;
    let mut edited = Vec::new();
    let mut resolved = Vec::new();
    if !standing.rejected() {
        for ((role, field), (_, verdict)) in &standing.edits {
            let value = verdict.value.clone().unwrap_or(Value::Null);
            check_field_against_schema(
                Reviewable::Step(reviewable),
                role.as_deref(),
                field,
                &value,
            )?;
            set_field(&mut record.answer, role.as_deref(), field, value)?;
            edited.push(verdict.field_path().unwrap_or_default());
            let (settled, left): (Vec<Problem>, Vec<Problem>) =
                std::mem::take(&mut record.problems)
                    .into_iter()
                    .partition(|p| p.field.as_deref() == Some(field) && p.role == *role);
            resolved.extend(settled);
            record.problems = left;
        }
        if standing.accepted() {
            resolved.append(&mut record.problems);
        }
    }
    let verdict = if standing.rejected() {
        ReviewOutcome::Rejected
    } else if !edited.is_empty() {
        ReviewOutcome::Edited
    } else {
        ReviewOutcome::Accepted
    };
    record.review = Some(ReviewMark {
        verdict,
        reviewers: standing.reviewers(),
        edited,
        resolved,
    });
    let mut out = serde_json::to_vec_pretty(&record).expect("records serialize");
    out.push(b'\n');
    Ok(out)
}

/// Sets `field` of the answer (of `role`'s entry in `roles` when a role is named) to `value`.
pub fn set_field(
    answer: &mut Value,
    role: Option<&str>,
    field: &str,
    value: Value,
) -> Result<(), String> {
    let target = match role {
        None => answer,
        Some(role) => answer
            .get_mut("roles")
            .and_then(Value::as_array_mut)
            .and_then(|roles| roles.iter_mut().find(|r| r["name"] == role))
            .ok_or_else(|| format!("the answer has no entry for {role}"))?,
    };
    let slot = target
        .as_object_mut()
        .and_then(|fields| fields.get_mut(field))
        .ok_or_else(|| format!("the answer has no field `{field}`"))?;
    *slot = value;
    Ok(())
}

/// Whether `value`, as `field` (of `role`'s entry when one is named), has the shape the
/// stage's schema asks of the model: a person's edit is held to what the model was, and the
/// other fields are not re-judged by it.
pub fn check_field_against_schema(
    reviewable: Reviewable,
    role: Option<&str>,
    field: &str,
    value: &Value,
) -> Result<(), String> {
    let Reviewable::Step(step) = reviewable else {
        return Err("a synthetic cast is accepted or rejected as a whole, not edited".to_string());
    };
    let schema = (step.schema)();
    let owner = match role {
        None => &schema,
        Some(_) => &schema["properties"]["roles"]["items"],
    };
    let Some(field_schema) = owner["properties"].get(field) else {
        return Err(format!("the answer's schema has no field `{field}`"));
    };
    let validator =
        jsonschema::validator_for(field_schema).map_err(|e| format!("the answer's schema: {e}"))?;
    let problems: Vec<String> = validator
        .iter_errors(value)
        .map(|e| e.to_string())
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the new value does not fit what the stage asks of `{field}`: {}",
            problems.join("; ")
        ))
    }
}
