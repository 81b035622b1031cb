//! What `viss status` reports: the plan of a dry-run build (what would run and why), what the
//! store holds per stage, the flagged items, and the totals of the simulation and judging, of
//! AgentViSS and AgentSense runs alike.

use std::fmt::Write as _;

use serde::Serialize;

use crate::dag::scheduler::{BuildOptions, BuildReport};
use crate::dag::status::{self, StoredSummary};
use crate::dag::store::StoreError;
use crate::stages::evaluate::{self, EvaluateError, JudgingSummary};
use crate::stages::evaluate_sense::{self, EvaluateSenseError, SenseJudgingSummary};
use crate::stages::simulate::{self, RunsSummary, SimulateError};
use crate::stages::simulate_sense::{self, SenseRunsSummary};
use crate::workspace::{Workspace, WorkspaceError};

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Simulate(#[from] SimulateError),
    #[error(transparent)]
    Evaluate(#[from] EvaluateError),
    #[error(transparent)]
    EvaluateSense(#[from] EvaluateSenseError),
    #[error(
        "this project has no shared cache: add `[remote]` with its `url` to viss.toml (see \
         docs/remote-cache.md)"
    )]
    NoRemote,
}

/// A project's state, from a dry-run build and one pass over the store.
#[derive(Debug)]
pub struct ProjectStatus {
    pub plan: BuildReport,
    pub stored: StoredSummary,
    pub simulation: Option<RunsSummary>,
    pub evaluation: Option<JudgingSummary>,
    pub sense_runs: Option<SenseRunsSummary>,
    pub sense_evaluation: Option<SenseJudgingSummary>,
    /// Batches submitted to an endpoint's batch API and not yet seen finished.
    pub pending_batches: Vec<crate::llm::batch::PendingBatch>,
    /// The item whose plan is explained (`viss status --why ITEM`), if any.
    pub why: Option<String>,
}

/// The JSON form, `viss status --json`.
#[derive(Serialize)]
struct StatusJson<'a> {
    plan: &'a BuildReport,
    stored: &'a std::collections::BTreeMap<String, status::StageTotals>,
    flags: &'a [status::Flag],
    flagged: &'a [status::GateFlagged],
    simulation: &'a Option<RunsSummary>,
    evaluation: &'a Option<JudgingSummary>,
    sense_runs: &'a Option<SenseRunsSummary>,
    sense_evaluation: &'a Option<SenseJudgingSummary>,
    pending_batches: &'a [crate::llm::batch::PendingBatch],
}

impl ProjectStatus {
    /// Plans a build of `workspace` without running it (explaining `why`'s decisions when
    /// given) and reads what its store holds.
    pub fn of(workspace: &Workspace, why: Option<String>) -> Result<Self, StatusError> {
        let options = BuildOptions {
            dry_run: true,
            jobs: 1,
            explain: why.clone(),
            ..BuildOptions::default()
        };
        Ok(Self {
            plan: workspace.build(&options)?,
            stored: status::stored_summary(workspace.store().index())?,
            simulation: simulate::runs_summary(workspace.store())?,
            evaluation: evaluate::judging_summary(workspace.store())?,
            sense_runs: simulate_sense::sense_runs_summary(workspace.store())?,
            sense_evaluation: evaluate_sense::sense_judging_summary(workspace.store())?,
            pending_batches: crate::dag::pending_batches(workspace.store()),
            why,
        })
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::to_value(StatusJson {
            plan: &self.plan,
            stored: &self.stored.totals,
            flags: &self.stored.flags,
            flagged: &self.stored.gate_flagged,
            simulation: &self.simulation,
            evaluation: &self.evaluation,
            sense_runs: &self.sense_runs,
            sense_evaluation: &self.sense_evaluation,
            pending_batches: &self.pending_batches,
        })
        .expect("a status serializes")
    }

    /// The text `viss status` prints: the explanation of one item's plan when asked for,
    /// otherwise the counts per stage, the failures, the store's totals, the runs' and
    /// judging's summaries and the flags.
    pub fn render(&self) -> String {
        if let Some(item) = &self.why {
            return status::render_explanations(item, &self.plan);
        }
        let mut out = status::render_counts(&self.plan, true);
        out.push_str(&status::render_failures(&self.plan));
        out.push_str(&status::render_totals(&self.stored.totals));
        out.push_str(&self.render_cache_savings());
        if let Some(simulation) = &self.simulation {
            out.push('\n');
            out.push_str(&simulation.render());
        }
        if let Some(evaluation) = &self.evaluation {
            out.push_str(&evaluation.render());
        }
        if let Some(runs) = &self.sense_runs {
            out.push_str(&runs.render());
        }
        if let Some(evaluation) = &self.sense_evaluation {
            out.push_str(&evaluation.render());
        }
        out.push_str(&status::render_gate_flagged(&self.stored.gate_flagged));
        out.push_str(&status::render_flags(&self.stored.flags));
        if !self.pending_batches.is_empty() {
            out.push_str(
                "\nbatches submitted and not seen finished (`viss build` waits on them):\n",
            );
            for batch in &self.pending_batches {
                let _ = writeln!(
                    out,
                    "  {} at {} ({}): {} request(s)",
                    batch.id, batch.endpoint, batch.model, batch.requests
                );
            }
        }
        out
    }
}

impl ProjectStatus {
    /// What the request cache spared the stored runs: the answers they took from it instead of
    /// asking, and what those cost when first asked.
    fn render_cache_savings(&self) -> String {
        let stat = |totals: &status::StageTotals, name| totals.stats.get(name).copied();
        let saved: Vec<(&String, u64, u64)> = self
            .stored
            .totals
            .iter()
            .filter_map(|(stage, totals)| {
                let answers = stat(totals, crate::dag::ANSWERS_FROM_CACHE)?;
                let micro_usd = stat(totals, crate::dag::COST_SAVED_MICRO_USD).unwrap_or(0);
                Some((stage, answers, micro_usd))
            })
            .filter(|(_, answers, _)| *answers > 0)
            .collect();
        if saved.is_empty() {
            return String::new();
        }
        let answers: u64 = saved.iter().map(|(_, n, _)| n).sum();
        let micro_usd: u64 = saved.iter().map(|(_, _, m)| m).sum();
        let mut out = format!(
            "\nthe request cache answered {answers} question(s) of the stored runs instead of \
             asking; they cost ${:.4} when first asked:\n",
            micro_usd as f64 / 1e6
        );
        let mut line = String::from(" ");
        for (stage, answers, micro_usd) in saved {
            let entry = format!(" {stage} {answers} (${:.4})", micro_usd as f64 / 1e6);
            if line.len() + entry.len() > 100 {
                let _ = writeln!(out, "{line}");
                line = String::from(" ");
            }
            line.push_str(&entry);
        }
        let _ = writeln!(out, "{line}");
        out
    }
}

/// `viss status --remote`: what the shared cache holds, in all and of this project's results.
#[derive(Debug, Serialize)]
pub struct RemoteStatus {
    pub holdings: crate::dag::store::RemoteHoldings,
    /// Per stage: this project's stored successful results, and how many of them the shared
    /// cache holds (so another machine would take them instead of computing them).
    pub stages: std::collections::BTreeMap<String, RemoteStageShare>,
}

#[derive(Debug, Default, Serialize)]
pub struct RemoteStageShare {
    pub results: usize,
    pub shared: usize,
}

impl RemoteStatus {
    pub fn of(workspace: &Workspace) -> Result<Self, StatusError> {
        let store = workspace.store();
        let remote = store.remote().ok_or(StatusError::NoRemote)?;
        let holdings = remote.holdings()?;
        let mut stages = std::collections::BTreeMap::<String, RemoteStageShare>::new();
        for (stage, item, record) in store.index().scan_all()? {
            let Some(key) = record.key.filter(|_| !record.failed()) else {
                continue;
            };
            let held = remote.holds_action(&stage, &item, &key)?;
            let share = stages.entry(stage).or_default();
            share.results += 1;
            if held {
                share.shared += 1;
            }
        }
        Ok(Self { holdings, stages })
    }

    pub fn render(&self) -> String {
        let h = &self.holdings;
        let mut out = format!(
            "remote cache {}: {} result(s), {} blob(s), {} memo(s) (LLM answers, embeddings)\n",
            h.location, h.actions, h.blobs, h.memos
        );
        for (stage, share) in &self.stages {
            out.push_str(&format!(
                "  {stage:<20} {} of {} result(s) of this project shared\n",
                share.shared, share.results
            ));
        }
        out
    }
}
