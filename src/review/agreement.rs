//! How far reviewers agree, per stage and per field (Cohen's kappa for two reviewers, Fleiss'
//! for more, over the answers every one of them judged), and how their verdicts compare with
//! the quality gates: how often a person accepted what a gate flagged, and rejected or edited
//! what the gates passed.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::queue::{ReviewItem, field_label};
use super::verdicts::{Reviews, Verdict, VerdictKind};
use crate::eval::agreement::{cohen_kappa, fleiss_kappa_of};
use crate::hash::ContentHash;

/// What one reviewer said of one answer as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemCall {
    Accept,
    /// Edited one field or more (and did not reject).
    Edit,
    Reject,
}

impl std::fmt::Display for ItemCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ItemCall::Accept => "accept",
            ItemCall::Edit => "edit",
            ItemCall::Reject => "reject",
        })
    }
}

/// What one reviewer said of one field of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldCall {
    /// Left as the model wrote it.
    Keep,
    Edit,
    /// The whole answer was rejected.
    Reject,
}

impl std::fmt::Display for FieldCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FieldCall::Keep => "keep",
            FieldCall::Edit => "edit",
            FieldCall::Reject => "reject",
        })
    }
}

/// One reviewer's verdicts on one answer, summed up.
#[derive(Debug, Clone, Default)]
struct Judged {
    rejected: bool,
    accepted: bool,
    edited: BTreeSet<String>,
}

impl Judged {
    fn call(&self) -> Option<ItemCall> {
        if self.rejected {
            Some(ItemCall::Reject)
        } else if !self.edited.is_empty() {
            Some(ItemCall::Edit)
        } else if self.accepted {
            Some(ItemCall::Accept)
        } else {
            None
        }
    }

    fn field_call(&self, field: &str) -> FieldCall {
        if self.rejected {
            FieldCall::Reject
        } else if self.edited.contains(field) {
            FieldCall::Edit
        } else {
            FieldCall::Keep
        }
    }
}

/// The agreement of the reviewers of one stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageAgreement {
    pub stage: String,
    pub reviewers: Vec<String>,
    /// Answers every reviewer judged.
    pub shared_items: usize,
    /// `cohen` for two reviewers, `fleiss` for more.
    pub measure: &'static str,
    /// Over the whole-answer calls (accept / edit / reject).
    pub kappa: Kappa,
    pub fields: Vec<FieldAgreement>,
}

/// A kappa, or why it is undefined (one call only, no shared answers).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Kappa {
    pub value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undefined: Option<String>,
}

impl From<Result<f64, String>> for Kappa {
    fn from(result: Result<f64, String>) -> Self {
        match result {
            Ok(value) => Kappa {
                value: Some(value),
                undefined: None,
            },
            Err(why) => Kappa {
                value: None,
                undefined: Some(why),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldAgreement {
    /// `background`, `Ada.age`.
    pub field: String,
    /// Over keep / edit / reject of the field.
    pub kappa: Kappa,
}

/// The reviewers against the gates, for one stage.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GateComparison {
    pub stage: String,
    /// Verdicts on flagged answers, and how many of them accepted the answer as it was.
    pub flagged_judged: usize,
    pub flagged_accepted: usize,
    /// Verdicts on answers the gates passed, and how many rejected or edited them.
    pub passed_judged: usize,
    pub passed_faulted: usize,
}

/// Each reviewer's summed-up verdicts per current answer, (stage, item) → reviewer → judged.
fn judged_by(
    reviews: &Reviews,
    items: &[ReviewItem],
) -> BTreeMap<(String, String), BTreeMap<String, Judged>> {
    let current: BTreeMap<(&str, &str), ContentHash> = items
        .iter()
        .map(|i| ((i.stage(), i.item.as_str()), i.answer))
        .collect();
    let mut judged: BTreeMap<(String, String), BTreeMap<String, Judged>> = BTreeMap::new();
    for (reviewer, verdicts) in &reviews.by_reviewer {
        let mut latest: BTreeMap<(&str, &str), Vec<&Verdict>> = BTreeMap::new();
        for verdict in verdicts {
            // Stale verdicts judged an answer that is gone.
            if current.get(&(verdict.stage.as_str(), verdict.item.as_str()))
                == Some(&verdict.answer)
            {
                latest
                    .entry((verdict.stage.as_str(), verdict.item.as_str()))
                    .or_default()
                    .push(verdict);
            }
        }
        for ((stage, item), verdicts) in latest {
            let mut summed = Judged::default();
            for verdict in verdicts {
                match verdict.verdict {
                    VerdictKind::Accept => {
                        summed.accepted = true;
                        summed.rejected = false;
                    }
                    VerdictKind::Reject => {
                        summed.rejected = true;
                        summed.accepted = false;
                    }
                    VerdictKind::Edit => {
                        summed
                            .edited
                            .insert(verdict.field_path().unwrap_or_default());
                    }
                }
            }
            judged
                .entry((stage.to_string(), item.to_string()))
                .or_default()
                .insert(reviewer.clone(), summed);
        }
    }
    judged
}

/// Agreement per stage that two or more reviewers judged.
pub fn stage_agreement(reviews: &Reviews, items: &[ReviewItem]) -> Vec<StageAgreement> {
    let judged = judged_by(reviews, items);
    let mut stages: BTreeMap<&str, Vec<&BTreeMap<String, Judged>>> = BTreeMap::new();
    for ((stage, _), by) in &judged {
        stages.entry(stage.as_str()).or_default().push(by);
    }
    let problem_fields: BTreeMap<&str, BTreeSet<String>> = {
        let mut fields: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for item in items {
            for problem in item.problems() {
                if let Some(field) = &problem.field {
                    fields
                        .entry(item.stage())
                        .or_default()
                        .insert(field_label(problem.role.as_deref(), field));
                }
            }
        }
        fields
    };
    let mut out = Vec::new();
    for (stage, answers) in stages {
        let reviewers: BTreeSet<&String> = answers.iter().flat_map(|by| by.keys()).collect();
        if reviewers.len() < 2 {
            continue;
        }
        let reviewers: Vec<String> = reviewers.into_iter().cloned().collect();
        // The answers every reviewer judged, each reviewer's summary in reviewer order.
        let shared: Vec<Vec<&Judged>> = answers
            .iter()
            .filter_map(|by| {
                reviewers
                    .iter()
                    .map(|r| by.get(r))
                    .collect::<Option<Vec<_>>>()
            })
            .filter(|row| row.iter().all(|j| j.call().is_some()))
            .collect();
        let calls: Vec<Vec<ItemCall>> = shared
            .iter()
            .map(|row| row.iter().map(|j| j.call().expect("filtered")).collect())
            .collect();
        let mut fields: BTreeSet<String> = problem_fields.get(stage).cloned().unwrap_or_default();
        for row in &shared {
            for judged in row {
                fields.extend(judged.edited.iter().cloned());
            }
        }
        let field_rows = |field: &str| -> Vec<Vec<FieldCall>> {
            shared
                .iter()
                .map(|row| row.iter().map(|j| j.field_call(field)).collect())
                .collect()
        };
        out.push(StageAgreement {
            stage: stage.to_string(),
            measure: if reviewers.len() == 2 {
                "cohen"
            } else {
                "fleiss"
            },
            shared_items: shared.len(),
            kappa: kappa(&calls).into(),
            fields: fields
                .iter()
                .map(|field| FieldAgreement {
                    field: field.clone(),
                    kappa: kappa(&field_rows(field)).into(),
                })
                .collect(),
            reviewers,
        });
    }
    out
}

/// Cohen's kappa for rows of two calls, Fleiss' for more.
fn kappa<T: Ord + Clone + std::fmt::Display>(rows: &[Vec<T>]) -> Result<f64, String> {
    if rows.first().is_some_and(|r| r.len() == 2) {
        let pairs: Vec<(T, T)> = rows.iter().map(|r| (r[0].clone(), r[1].clone())).collect();
        cohen_kappa(&pairs).map_err(|e| e.to_string())
    } else {
        fleiss_kappa_of(rows).map_err(|e| e.to_string())
    }
}

/// Every reviewer's verdicts on current answers against the gates, per stage.
pub fn against_gates(reviews: &Reviews, items: &[ReviewItem]) -> Vec<GateComparison> {
    let judged = judged_by(reviews, items);
    let flagged: BTreeMap<(&str, &str), bool> = items
        .iter()
        .map(|i| ((i.stage(), i.item.as_str()), i.flagged()))
        .collect();
    let mut by_stage: BTreeMap<String, GateComparison> = BTreeMap::new();
    for ((stage, item), by) in &judged {
        let was_flagged = flagged
            .get(&(stage.as_str(), item.as_str()))
            .copied()
            .unwrap_or(false);
        let row = by_stage
            .entry(stage.clone())
            .or_insert_with(|| GateComparison {
                stage: stage.clone(),
                ..GateComparison::default()
            });
        for call in by.values().filter_map(Judged::call) {
            if was_flagged {
                row.flagged_judged += 1;
                row.flagged_accepted += usize::from(call == ItemCall::Accept);
            } else {
                row.passed_judged += 1;
                row.passed_faulted += usize::from(call != ItemCall::Accept);
            }
        }
    }
    by_stage.into_values().collect()
}
