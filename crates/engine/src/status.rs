//! What `viss build` and `viss status` print: per-stage counts, failures, resource usage, and
//! why an item would re-run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::redact::{for_terminal, for_terminal_message};
use crate::scheduler::{BuildReport, Verdict};
use crate::store::{Index, ModelUsage, StoreError, Usage};

/// Totals over the stored records of one stage.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageTotals {
    pub items: usize,
    pub failed: usize,
    /// Items with warnings (see `Outputs::flags`).
    pub flagged: usize,
    /// Items whose kept answer failed quality gates (see `Outputs::problems`).
    pub gate_flagged: usize,
    pub run_seconds: f64,
    pub usage: Usage,
    /// The runs' counts (see `JobCtx::count`), summed.
    pub stats: BTreeMap<String, u64>,
}

/// What the store holds, from one pass over the index: totals per stage, and every flag.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StoredSummary {
    pub totals: BTreeMap<String, StageTotals>,
    pub flags: Vec<Flag>,
    /// Every item whose kept answer failed quality gates, with its problems.
    pub gate_flagged: Vec<GateFlagged>,
}

/// An item kept with problems: built, later stages run on it, left out of the export until a
/// person accepts or edits it.
#[derive(Debug, Clone, Serialize)]
pub struct GateFlagged {
    pub stage: String,
    pub item: String,
    pub problems: Vec<crate::problem::Problem>,
}

pub fn stored_summary(index: &dyn Index) -> Result<StoredSummary, StoreError> {
    let mut summary = StoredSummary::default();
    for (stage, item, record) in index.scan_all()? {
        let entry = summary.totals.entry(stage.clone()).or_default();
        entry.items += 1;
        entry.failed += usize::from(record.failed());
        entry.flagged += usize::from(!record.flags.is_empty());
        entry.gate_flagged += usize::from(!record.problems.is_empty());
        entry.run_seconds += record.duration_ms as f64 / 1000.0;
        entry.usage.add(&record.usage);
        for (name, count) in &record.stats {
            *entry.stats.entry(name.clone()).or_default() += count;
        }
        for flag in record.flags {
            summary.flags.push(Flag {
                stage: stage.clone(),
                item: item.clone(),
                flag,
            });
        }
        if !record.problems.is_empty() {
            summary.gate_flagged.push(GateFlagged {
                stage: stage.clone(),
                item: item.clone(),
                problems: record.problems,
            });
        }
    }
    Ok(summary)
}

/// The per-stage table of a build (or of a dry run, for `status`).
pub fn render_counts(report: &BuildReport, dry_run: bool) -> String {
    let width = report
        .stages
        .iter()
        .map(|(s, _)| s.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut out = String::new();
    let second = if dry_run { "to run" } else { "ran" };
    let _ = writeln!(
        out,
        "{:width$}  {:>7} {:>7} {:>7} {:>7} {:>9}",
        "stage", "fresh", second, "failed", "blocked", "skipped"
    );
    for (stage, c) in &report.stages {
        let acted = if dry_run {
            c.would_run + c.waiting
        } else {
            c.ran
        };
        let _ = writeln!(
            out,
            "{stage:width$}  {:>7} {:>7} {:>7} {:>7} {:>9}",
            c.fresh, acted, c.failed, c.blocked, c.not_selected
        );
    }
    out
}

/// What a build's remote cache gave and took: one line, or nothing without a remote.
pub fn render_remote(counts: Option<&crate::store::RemoteCounts>) -> String {
    let Some(c) = counts else {
        return String::new();
    };
    let mut line = format!(
        "remote cache: {} result(s) taken ({} blob(s) fetched), {} shared ({} blob(s) written), \
         {} memo(s) taken, {} shared",
        c.actions_found,
        c.blobs_fetched,
        c.actions_written,
        c.blobs_written,
        c.memos_found,
        c.memos_written
    );
    if c.corrupt > 0 {
        line.push_str(&format!(
            "; {} damaged object(s) deleted there, not used",
            c.corrupt
        ));
    }
    if c.errors > 0 {
        line.push_str(&format!(
            "; {} request(s) failed (see the warnings)",
            c.errors
        ));
    }
    line + "\n"
}

/// One line on what a build's model calls cost, when it made any.
pub fn render_usage(usage: &Usage) -> String {
    if usage.llm_calls == 0 {
        return String::new();
    }
    format!(
        "llm: {} answer(s) ({} rejected: unusable, paid for), {} tokens, ${:.4}\n",
        usage.llm_calls,
        usage.rejected_calls,
        usage.prompt_tokens + usage.completion_tokens,
        usage.cost_usd
    )
}

pub fn render_failures(report: &BuildReport) -> String {
    let mut out = String::new();
    if report.failures.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "{} item(s) failed; fix them and run `viss build` again (failed items are retried):",
        report.failures.len()
    );
    for failure in &report.failures {
        let _ = writeln!(
            out,
            "  {} {}: {}",
            failure.stage,
            for_terminal(&failure.item),
            for_terminal_message(&failure.error)
        );
    }
    out
}

pub fn render_explanations(item: &str, report: &BuildReport) -> String {
    let mut out = String::new();
    if report.explanations.is_empty() {
        let _ = writeln!(
            out,
            "no stage has an item `{}` (item ids look like show/episode or show/episode/scenario)",
            for_terminal(item)
        );
        return out;
    }
    for e in &report.explanations {
        let text = match &e.verdict {
            Verdict::Fresh => "up to date".to_string(),
            Verdict::Reused => {
                "up to date: built before with exactly these inputs (taken from the \
                                action cache)"
                    .to_string()
            }
            Verdict::NeverBuilt => "never built: will run".to_string(),
            Verdict::FailedLastTime { error } => format!("failed last time, will retry: {error}"),
            Verdict::Waiting { on } => format!("waits for {on}, which will run first"),
            Verdict::Blocked { by } => format!("blocked: {by} failed"),
            Verdict::Changed { changes } if changes.is_empty() => {
                "its cache key changed: will run".to_string()
            }
            Verdict::Changed { changes } => {
                let reasons: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
                format!("will run because {}", reasons.join("; "))
            }
        };
        let _ = writeln!(
            out,
            "{} {}: {}",
            e.stage,
            for_terminal(&e.item),
            for_terminal(&text)
        );
    }
    out
}

pub fn render_totals(totals: &BTreeMap<String, StageTotals>) -> String {
    let mut out = String::new();
    if totals.is_empty() {
        return out;
    }
    let width = totals.keys().map(String::len).max().unwrap_or(5).max(5);
    let _ = writeln!(out, "\nstored results:");
    let _ = writeln!(
        out,
        "{:width$}  {:>7} {:>7} {:>10} {:>9} {:>8} {:>12} {:>9}",
        "stage", "items", "failed", "run s", "llm calls", "rejected", "tokens", "cost $"
    );
    for (stage, t) in totals {
        let _ = writeln!(
            out,
            "{stage:width$}  {:>7} {:>7} {:>10.2} {:>9} {:>8} {:>12} {:>9.4}",
            t.items,
            t.failed,
            t.run_seconds,
            t.usage.llm_calls,
            t.usage.rejected_calls,
            t.usage.prompt_tokens + t.usage.completion_tokens,
            t.usage.cost_usd
        );
    }
    let by_model: Vec<(&String, &String, &ModelUsage)> = totals
        .iter()
        .flat_map(|(stage, t)| {
            t.usage
                .by_model
                .iter()
                .map(move |(model, usage)| (stage, model, usage))
        })
        .collect();
    if !by_model.is_empty() {
        let model_width = by_model
            .iter()
            .map(|(_, model, _)| model.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let _ = writeln!(out, "\nllm usage by stage and model:");
        let _ = writeln!(
            out,
            "{:width$}  {:model_width$} {:>9} {:>8} {:>12} {:>12} {:>9}",
            "stage", "model", "calls", "rejected", "prompt tok", "output tok", "cost $"
        );
        for (stage, model, usage) in by_model {
            let model = for_terminal(model);
            let _ = writeln!(
                out,
                "{stage:width$}  {model:model_width$} {:>9} {:>8} {:>12} {:>12} {:>9.4}",
                usage.calls,
                usage.rejected_calls,
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cost_usd
            );
        }
        let _ = writeln!(
            out,
            "(rejected: answers that could not be used, paid for and then asked again or failed)"
        );
    }
    let counted: Vec<String> = totals
        .iter()
        .filter(|(_, t)| !t.stats.is_empty())
        .map(|(stage, t)| {
            let counts: Vec<String> = t
                .stats
                .iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect();
            format!("{stage:width$}  {}", counts.join(", "))
        })
        .collect();
    if !counted.is_empty() {
        let _ = writeln!(out, "\nrun statistics (how the stored results were made):");
        for line in counted {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// One warning recorded by a successful run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flag {
    pub stage: String,
    pub item: String,
    pub flag: String,
}

/// The items kept with problems, each problem on a line of its own.
pub fn render_gate_flagged(flagged: &[GateFlagged]) -> String {
    let mut out = String::new();
    if flagged.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\n{} answer(s) kept with problems the quality gates found (flagged: later stages run \
         on them, the export leaves them out; `viss review --flagged` puts them before you):",
        flagged.len()
    );
    for item in flagged {
        let _ = writeln!(out, "  {} {}:", item.stage, for_terminal(&item.item));
        for problem in &item.problems {
            let _ = writeln!(out, "    - {}", for_terminal(&problem.message));
        }
    }
    out
}

pub fn render_flags(flags: &[Flag]) -> String {
    let mut out = String::new();
    if flags.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\n{} flagged item(s) to look at (built, but not trustworthy as they stand):",
        flags.len()
    );
    for f in flags {
        let _ = writeln!(
            out,
            "  {} {}: {}",
            f.stage,
            for_terminal(&f.item),
            for_terminal(&f.flag)
        );
    }
    out
}
