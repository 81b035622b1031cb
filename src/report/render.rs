//! The tables as files a researcher pastes or loads: Markdown for reading, and one row per cell
//! (long format) as CSV and Parquet for pandas, R or polars.

use serde_json::{Value, json};

use super::tables::{AgreementRow, Cell, JudgeRow, Tables};

/// A cell's number with its interval (or "-"), what it counts, and why a number or interval
/// is absent.
pub fn cell_parts(cell: &Cell) -> (String, String, Option<String>) {
    let value = match (cell.value, cell.interval) {
        (Some(value), Some(interval)) => {
            format!("{value:.1} [{:.1}, {:.1}]", interval.low, interval.high)
        }
        (Some(value), None) => format!("{value:.1}"),
        (None, _) => "-".to_string(),
    };
    let mut counts = Vec::new();
    match (&cell.counted, cell.rated) {
        (Some(counted), _) => {
            counts.push(format!("n={} {}", counted.n, counted.of));
            if counted.missing > 0 {
                counts.push(format!("{} missing", counted.missing));
            }
        }
        (None, Some(rated)) => {
            counts.push(format!("n={} characters", rated.rated));
            if rated.unrated > 0 {
                counts.push(format!("{} unrated", rated.unrated));
            }
        }
        (None, None) => {
            counts.push(format!("n={}", cell.tally.scored()));
            if cell.tally.missing > 0 {
                counts.push(format!("{} unscored", cell.tally.missing));
            }
        }
    }
    if let Some(p) = cell.p_holm.or(cell.p_value) {
        let which = if cell.p_holm.is_some() { "p_holm" } else { "p" };
        counts.push(format!("{which}={p:.3}"));
    }
    (value, counts.join(", "), cell.note.clone())
}

/// A cell as one line of text: `value [low, high] (n=.., ..) - note`.
pub fn cell_text(cell: &Cell) -> String {
    let (value, counts, note) = cell_parts(cell);
    match note {
        Some(note) => format!("{value} ({counts}) - {note}"),
        None => format!("{value} ({counts})"),
    }
}

/// An agreement row's cells: scope, tasks (complete ones), kappa, all agree, all differ,
/// alpha, note.
pub fn agreement_cells(row: &AgreementRow) -> [String; 7] {
    let number = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.3}"));
    let share =
        |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
    [
        row.scope.clone(),
        format!("{} ({})", row.tasks, row.complete_tasks),
        number(row.fleiss_kappa),
        share(row.all_agree),
        share(row.all_differ),
        number(row.krippendorff_alpha),
        row.note.clone().unwrap_or_default(),
    ]
}

/// A judge's cells: its number, model, and its labels counted worst to best, then missing.
pub fn judge_cells(judge: &JudgeRow) -> [String; 6] {
    let [not, partially, achieved] = judge.labels.counts;
    [
        judge.judge.to_string(),
        judge.model.clone(),
        not.to_string(),
        partially.to_string(),
        achieved.to_string(),
        judge.labels.missing.to_string(),
    ]
}

fn escape(text: &str) -> String {
    text.replace('|', "\\|")
}

/// Every table as one Markdown document.
pub fn markdown(tables: &Tables) -> String {
    let settings = &tables.settings;
    let mut out = format!(
        "# Evaluation report\n\n{} judged run(s) of {} scenario(s). Scores are (2 x achieved + \
         0.5 x partially achieved) / (2 x scored tasks) x 100 over the panel's verdicts; n is \
         the scored tasks, unscored tasks (too few judges answered) are counted beside it. \
         Intervals: {:.0}% percentile bootstrap, {} resamples, seed {}; a cell needs {} \
         scenarios for one.\n",
        tables.runs,
        tables.scenarios,
        settings.bootstrap.level * 100.0,
        settings.bootstrap.resamples,
        settings.bootstrap.seed,
        settings.min_scenarios
    );
    if tables.sense_runs > 0 {
        out.push_str(&format!(
            "\nAgentSense: {} judged run(s) of {} template(s); its tables resample templates \
             and need {} of them for an interval.\n",
            tables.sense_runs, tables.sense_templates, settings.min_scenarios
        ));
    }
    for table in &tables.scores {
        out.push_str(&format!(
            "\n## {}\n\n{}; resampled over {}.\n\n",
            table.title, table.measure, table.resampling_unit
        ));
        if table.rows.is_empty() {
            out.push_str(&format!("No rows: {}.\n", table.when_empty));
            continue;
        }
        let header: Vec<&str> = table
            .row_header
            .iter()
            .chain(&table.columns)
            .map(String::as_str)
            .collect();
        out.push_str(&format!("| {} |\n", header.join(" | ")));
        out.push_str(&format!("|{}\n", "---|".repeat(header.len())));
        for row in &table.rows {
            let cells: Vec<String> = row
                .label
                .iter()
                .map(|label| escape(label))
                .chain(row.cells.iter().map(|cell| escape(&cell_text(cell))))
                .collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
    }
    if !tables.agreement.is_empty() {
        out.push_str(
            "\n## Judge agreement (tables 9 and 10)\n\nFleiss' kappa and the all-agree / \
             all-differ shares over tasks every judge labelled; Krippendorff's alpha (ordinal) \
             over tasks with two or more labels.\n\n| scope | tasks with 2+ labels (every \
             judge) | Fleiss' kappa | all agree | all differ | Krippendorff's alpha | note \
             |\n|---|---|---|---|---|---|---|\n",
        );
        for row in &tables.agreement {
            let cells = agreement_cells(row).map(|cell| escape(&cell));
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
    }
    out.push_str(
        "\n## Each judge's labels\n\n| judge | model | Not Achieved | Partially Achieved | \
         Achieved | missing |\n|---|---|---|---|---|---|\n",
    );
    for judge in &tables.judges {
        let cells = judge_cells(judge).map(|cell| escape(&cell));
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    if !tables.not_shown.is_empty() {
        out.push_str("\n## Not shown\n\n");
        for why in &tables.not_shown {
            out.push_str(&format!("- {why}\n"));
        }
    }
    out
}

/// The columns of a cell's record, in file order.
const CELL_COLUMNS: [&str; 17] = [
    "table",
    "row",
    "column",
    "value",
    "low",
    "high",
    "scored_tasks",
    "unscored_tasks",
    "scenarios",
    "p_value",
    "p_holm",
    "note",
    "rated_characters",
    "unrated_characters",
    "counted",
    "counted_missing",
    "counted_of",
];

/// One record per cell of every score table (the keys of [`CELL_COLUMNS`]).
pub fn cell_records(tables: &Tables) -> Vec<Value> {
    let mut records = Vec::new();
    for table in &tables.scores {
        for row in &table.rows {
            for (column, cell) in table.columns.iter().zip(&row.cells) {
                records.push(json!({
                    "table": table.id,
                    "row": row.label.join(" / "),
                    "column": column,
                    "value": cell.value,
                    "low": cell.interval.map(|i| i.low),
                    "high": cell.interval.map(|i| i.high),
                    "scored_tasks": cell.tally.scored() as u64,
                    "unscored_tasks": cell.tally.missing as u64,
                    "scenarios": cell.scenarios as u64,
                    "p_value": cell.p_value,
                    "p_holm": cell.p_holm,
                    "note": cell.note,
                    "rated_characters": cell.rated.map(|r| r.rated as u64),
                    "unrated_characters": cell.rated.map(|r| r.unrated as u64),
                    "counted": cell.counted.as_ref().map(|c| c.n as u64),
                    "counted_missing": cell.counted.as_ref().map(|c| c.missing as u64),
                    "counted_of": cell.counted.as_ref().map(|c| c.of.clone()),
                }));
            }
        }
    }
    records
}

/// The JSON schema of [`cell_records`], for the Parquet file's columns.
pub fn cell_schema() -> Value {
    let nullable_number = json!({"type": ["number", "null"]});
    let nullable_text = json!({"type": ["string", "null"]});
    json!({
        "type": "object",
        "properties": {
            "table": {"type": "string"},
            "row": {"type": "string"},
            "column": {"type": "string"},
            "value": nullable_number,
            "low": nullable_number,
            "high": nullable_number,
            "scored_tasks": {"type": "integer"},
            "unscored_tasks": {"type": "integer"},
            "scenarios": {"type": "integer"},
            "p_value": nullable_number,
            "p_holm": nullable_number,
            "note": nullable_text,
            "rated_characters": {"type": ["integer", "null"]},
            "unrated_characters": {"type": ["integer", "null"]},
            "counted": {"type": ["integer", "null"]},
            "counted_missing": {"type": ["integer", "null"]},
            "counted_of": nullable_text,
        },
        "required": CELL_COLUMNS,
    })
}

/// [`cell_records`] as CSV, with a header row.
pub fn cells_csv(tables: &Tables) -> Result<Vec<u8>, csv::Error> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(CELL_COLUMNS)?;
    for record in cell_records(tables) {
        let fields: Vec<String> = CELL_COLUMNS
            .iter()
            .map(|column| match &record[column] {
                Value::Null => String::new(),
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect();
        writer.write_record(&fields)?;
    }
    writer
        .into_inner()
        .map_err(|error| csv::Error::from(error.into_error()))
}
