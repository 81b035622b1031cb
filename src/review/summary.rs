//! Where the reviews stand: per stage, how many answers were reviewed and what the verdicts
//! that hold say, how many verdicts went stale, the reviewers' agreement and how they compare
//! with the gates (`viss review --summary`, `viss check quality`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::agreement::{GateComparison, Kappa, StageAgreement, against_gates, stage_agreement};
use super::queue::ReviewItem;
use super::verdicts::Reviews;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StageReviews {
    pub stage: String,
    pub answers: usize,
    pub flagged: usize,
    /// Answers with a verdict that holds (on the answer as it is now).
    pub reviewed: usize,
    pub accepted: usize,
    pub edited: usize,
    pub rejected: usize,
    /// Verdicts on an answer the stage has since replaced.
    pub stale_verdicts: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReviewSummary {
    pub reviewers: Vec<String>,
    pub stages: Vec<StageReviews>,
    pub agreement: Vec<StageAgreement>,
    pub against_gates: Vec<GateComparison>,
}

/// The summary of the project's reviews (`reviews_dir`) of the answers in `store`; `None`
/// when nobody has reviewed anything.
pub fn of_project(
    store: &crate::dag::store::Store,
    reviews_dir: &std::path::Path,
) -> Result<Option<ReviewSummary>, super::ReviewError> {
    let reviews = Reviews::load(reviews_dir)?;
    if reviews.is_empty() {
        return Ok(None);
    }
    let items = super::queue::stored_answers(store, &[])?;
    Ok(Some(summarize(&reviews, &items)))
}

pub fn summarize(reviews: &Reviews, items: &[ReviewItem]) -> ReviewSummary {
    let mut stages: BTreeMap<&str, StageReviews> = BTreeMap::new();
    for item in items {
        let row = stages.entry(item.stage()).or_insert_with(|| StageReviews {
            stage: item.stage().to_string(),
            ..StageReviews::default()
        });
        row.answers += 1;
        row.flagged += usize::from(item.flagged());
        row.stale_verdicts += item.stale(reviews).len();
        let standing = reviews.standing(item.stage(), &item.item, item.answer);
        if standing.is_empty() {
            continue;
        }
        row.reviewed += 1;
        if standing.rejected() {
            row.rejected += 1;
        } else if !standing.edits.is_empty() {
            row.edited += 1;
        } else {
            row.accepted += 1;
        }
    }
    // Pipeline order, as the items come.
    let mut order: Vec<&str> = Vec::new();
    for item in items {
        if !order.contains(&item.stage()) {
            order.push(item.stage());
        }
    }
    ReviewSummary {
        reviewers: reviews.by_reviewer.keys().cloned().collect(),
        stages: order
            .into_iter()
            .filter_map(|stage| stages.remove(stage))
            .collect(),
        agreement: stage_agreement(reviews, items),
        against_gates: against_gates(reviews, items),
    }
}

fn kappa_text(kappa: &Kappa) -> String {
    match (kappa.value, &kappa.undefined) {
        (Some(value), _) => format!("{value:.3}"),
        (None, why) => format!("undefined ({})", why.as_deref().unwrap_or("no answers")),
    }
}

impl ReviewSummary {
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.reviewers.is_empty() {
            out.push_str("no reviews yet (`viss review` starts one)\n");
        } else {
            let _ = writeln!(out, "reviewers: {}", self.reviewers.join(", "));
        }
        let _ = writeln!(
            out,
            "{:<18} {:>7} {:>7} {:>8} {:>8} {:>6} {:>8} {:>5}",
            "stage", "answers", "flagged", "reviewed", "accepted", "edited", "rejected", "stale"
        );
        for s in &self.stages {
            let _ = writeln!(
                out,
                "{:<18} {:>7} {:>7} {:>8} {:>8} {:>6} {:>8} {:>5}",
                s.stage,
                s.answers,
                s.flagged,
                s.reviewed,
                s.accepted,
                s.edited,
                s.rejected,
                s.stale_verdicts
            );
        }
        for a in &self.agreement {
            let _ = writeln!(
                out,
                "agreement on {} ({} reviewers, {} answers all judged): {} kappa {}",
                a.stage,
                a.reviewers.len(),
                a.shared_items,
                if a.measure == "cohen" {
                    "Cohen's"
                } else {
                    "Fleiss'"
                },
                kappa_text(&a.kappa)
            );
            for field in &a.fields {
                let _ = writeln!(out, "  {}: kappa {}", field.field, kappa_text(&field.kappa));
            }
        }
        for g in &self.against_gates {
            let _ = writeln!(
                out,
                "{} against the gates: accepted {} of {} flagged verdict(s); faulted {} of {} \
                 that the gates passed",
                g.stage, g.flagged_accepted, g.flagged_judged, g.passed_faulted, g.passed_judged
            );
        }
        out
    }
}
