//! The dataset card (`README.md` of an exported dataset): what the files are, every field (from
//! the record's JSON schema, so the card cannot describe fields that are not there), statistics
//! in the shape of the paper's Table 1, where the data came from, and what may and may not be
//! redistributed. Everything in it follows from the records and their sources, so equal
//! benchmarks get equal cards.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::record::BenchmarkRecord;
use crate::annotation::{
    ConflictCharacteristic, ConflictIntensity, DialogueType, Emotion, ExpressionStyle,
    VisionDependenceClass, Vocabulary,
};
use crate::dag::cost::AnswersCost;
use crate::manifest::EpisodeSource;

/// The benchmark's statistics: counts over scenarios, roles and tasks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Statistics {
    pub scenarios: usize,
    /// Episodes and shows with at least one scenario.
    pub episodes: usize,
    pub shows: usize,
    pub roles: usize,
    /// Distinct characters (a character in several scenarios counts once per show).
    pub characters: usize,
    /// Four per role: expression, characteristic, interaction regulation, interaction outcome.
    pub tasks: usize,
    /// Dialogue lines per scenario in the source.
    pub mean_turns: f64,
    pub mean_roles: f64,
    pub dialogue_types: Vec<(DialogueType, usize)>,
    /// Scenarios by number of roles, ascending.
    pub group_sizes: Vec<(usize, usize)>,
    pub conflict_intensities: Vec<(ConflictIntensity, usize)>,
    /// Scenarios by dialogue type (rows, vocabulary order) and conflict intensity (columns).
    pub type_by_intensity: Vec<(DialogueType, Vec<usize>)>,
    /// Interaction-outcome tasks by vision dependence.
    pub vision_dependence: Vec<(VisionDependenceClass, usize)>,
    /// Scenarios with at least one strongly vision-dependent outcome task.
    pub scenarios_strongly_vision_dependent: usize,
    pub expression_styles: Vec<(ExpressionStyle, usize)>,
    pub conflict_characteristics: Vec<(ConflictCharacteristic, usize)>,
    pub emotions: Vec<(Emotion, usize)>,
    pub group_images: usize,
    pub portraits: usize,
}

/// Counts per label, every label of the vocabulary in its order, zeros included.
fn tally<V: Vocabulary + Ord>(values: impl Iterator<Item = V>) -> Vec<(V, usize)> {
    let mut counts: BTreeMap<V, usize> = BTreeMap::new();
    for value in values {
        *counts.entry(value).or_default() += 1;
    }
    V::ALL
        .iter()
        .map(|v| (*v, counts.get(v).copied().unwrap_or(0)))
        .collect()
}

fn mean(total: usize, count: usize) -> f64 {
    if count == 0 {
        0.0
    } else {
        total as f64 / count as f64
    }
}

impl Statistics {
    pub fn of(records: &[BenchmarkRecord]) -> Self {
        let roles = || records.iter().flat_map(|r| &r.roles);
        let role_count = roles().count();
        let mut group_sizes: BTreeMap<usize, usize> = BTreeMap::new();
        for record in records {
            *group_sizes.entry(record.roles.len()).or_default() += 1;
        }
        let type_by_intensity = DialogueType::ALL
            .iter()
            .map(|dialogue_type| {
                let row = ConflictIntensity::ALL
                    .iter()
                    .map(|intensity| {
                        records
                            .iter()
                            .filter(|r| {
                                r.dialogue_type == *dialogue_type
                                    && r.conflict_intensity == *intensity
                            })
                            .count()
                    })
                    .collect();
                (*dialogue_type, row)
            })
            .collect();
        Statistics {
            scenarios: records.len(),
            episodes: records
                .iter()
                .map(|r| &r.episode)
                .collect::<BTreeSet<_>>()
                .len(),
            shows: records
                .iter()
                .map(|r| &r.show)
                .collect::<BTreeSet<_>>()
                .len(),
            roles: role_count,
            characters: records
                .iter()
                .flat_map(|r| r.roles.iter().map(move |role| (&r.show, &role.name)))
                .collect::<BTreeSet<_>>()
                .len(),
            tasks: role_count * 4,
            mean_turns: mean(records.iter().map(|r| r.turns).sum(), records.len()),
            mean_roles: mean(role_count, records.len()),
            dialogue_types: tally(records.iter().map(|r| r.dialogue_type)),
            group_sizes: group_sizes.into_iter().collect(),
            conflict_intensities: tally(records.iter().map(|r| r.conflict_intensity)),
            type_by_intensity,
            vision_dependence: tally(roles().map(|r| r.vision_dependence)),
            scenarios_strongly_vision_dependent: records
                .iter()
                .filter(|r| {
                    r.roles
                        .iter()
                        .any(|role| role.vision_dependence == VisionDependenceClass::Strongly)
                })
                .count(),
            expression_styles: tally(roles().map(|r| r.expression_style)),
            conflict_characteristics: tally(roles().map(|r| r.conflict_characteristic)),
            emotions: tally(roles().map(|r| r.emotion)),
            group_images: records.iter().filter(|r| r.group_image.is_some()).count(),
            portraits: roles().filter(|r| r.portrait.is_some()).count(),
        }
    }
}

/// What the card says besides the records.
pub struct CardContext<'a> {
    /// Every ingested episode's sources (titles, license notes, files and their hashes).
    pub episodes: &'a [EpisodeSource],
    /// The models each annotation stage's records name, by stage.
    pub models: &'a BTreeMap<String, BTreeSet<String>>,
    /// The answers each annotation stage rejected and asked again, by stage.
    pub reasks: &'a BTreeMap<String, Reasks>,
    /// What the answers behind the records cost, by stage.
    pub costs: &'a Costs,
    /// The record's JSON schema ([`super::record::record_schema`]).
    pub schema: &'a Value,
    /// Parquet column names and types.
    pub parquet_columns: &'a [(String, String)],
    /// The dataset's licence as the Hugging Face Hub names it (`[params] license` of export).
    pub license: &'a str,
    /// The scenarios left out and the flagged answers found.
    pub left_out: &'a super::dataset::LeftOut,
}

fn percent(count: usize, total: usize) -> String {
    if total == 0 {
        "-".to_string()
    } else {
        format!("{:.1}%", 100.0 * count as f64 / total as f64)
    }
}

fn count_table<K: std::fmt::Display>(
    out: &mut String,
    heading: &str,
    unit: &str,
    rows: &[(K, usize)],
    total: usize,
) {
    let _ = writeln!(out, "| {heading} | {unit} | share |\n|---|---:|---:|");
    for (key, count) in rows {
        let _ = writeln!(out, "| {key} | {count} | {} |", percent(*count, total));
    }
    let _ = writeln!(out, "| **total** | **{total}** | |\n");
}

/// A field's type in words, from its schema.
fn type_words(schema: &Value) -> String {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        return reference
            .rsplit('/')
            .next()
            .unwrap_or(reference)
            .to_string();
    }
    if let Some(options) = schema.get("anyOf").and_then(Value::as_array) {
        return options
            .iter()
            .map(type_words)
            .collect::<Vec<_>>()
            .join(" or ");
    }
    if let Some(labels) = schema.get("enum").and_then(Value::as_array) {
        let labels: Vec<String> = labels
            .iter()
            .filter_map(Value::as_str)
            .map(|l| format!("`{l}`"))
            .collect();
        return format!("one of {}", labels.join(", "));
    }
    if let Some(constant) = schema.get("const") {
        return format!("always `{constant}`");
    }
    match schema.get("type") {
        Some(Value::String(name)) if name == "array" => {
            format!(
                "list of {}",
                schema.get("items").map(type_words).unwrap_or_default()
            )
        }
        Some(Value::String(name)) => name.clone(),
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_string(),
    }
}

/// The table of `object`'s fields; with `sources`, a column naming the stage each comes from.
fn field_table(
    out: &mut String,
    object: &Value,
    sources: Option<&BTreeMap<&'static str, Vec<&'static str>>>,
) {
    match sources {
        Some(_) => out.push_str("| field | type | from stage | meaning |\n|---|---|---|---|\n"),
        None => out.push_str("| field | type | meaning |\n|---|---|---|\n"),
    }
    let properties = object.get("properties").and_then(Value::as_object);
    let required = object
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    for name in required {
        let property = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
        let meaning = property
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("");
        let from = sources.map(|sources| {
            let stages = sources.get(name).map_or(String::new(), |s| s.join(", "));
            format!(" `{stages}` |")
        });
        let _ = writeln!(
            out,
            "| `{name}` | {} |{} {} |",
            type_words(property).replace('|', "\\|"),
            from.unwrap_or_default(),
            meaning.replace('|', "\\|")
        );
    }
    out.push('\n');
}

/// The answers one LLM stage rejected before the ones the benchmark holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reasks {
    /// Scenarios the stage answered.
    pub scenarios: usize,
    /// Answers rejected by its checks and asked again.
    pub answers: usize,
    /// How often each kind of problem ([`crate::dag::problem::Problem::kind`]) was named in
    /// those rejections.
    pub reasons: BTreeMap<String, u64>,
}

/// Per stage, how many answers were rejected and asked again, and the problems named, most
/// frequent first (at most [`REASONS_SHOWN`] per stage).
fn reask_table(out: &mut String, reasks: &BTreeMap<String, Reasks>) {
    if reasks.is_empty() {
        return;
    }
    out.push_str(
        "\nAnswers the stages' checks rejected and asked again (the answers kept passed every \
         check; each record lists its rejected answers in `rejected`, each problem with its \
         role, field, kind and message):\n\n\
         | stage | scenarios | answers re-asked | kinds of problem named (count) |\n\
         |---|---:|---:|---|\n",
    );
    for (stage, reask) in reasks {
        let mut reasons: Vec<(&String, &u64)> = reask.reasons.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut named: Vec<String> = reasons
            .iter()
            .take(REASONS_SHOWN)
            .map(|(reason, count)| format!("{reason} ({count})"))
            .collect();
        if reasons.len() > REASONS_SHOWN {
            named.push(format!("{} more", reasons.len() - REASONS_SHOWN));
        }
        let named = if named.is_empty() {
            "-".to_string()
        } else {
            named.join("; ").replace('|', "\\|")
        };
        let _ = writeln!(
            out,
            "| `{stage}` | {} | {} | {named} |",
            reask.scenarios, reask.answers
        );
    }
}

const REASONS_SHOWN: usize = 5;

/// What the model's answers behind the dataset's records cost when first asked, by stage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Costs(pub BTreeMap<String, AnswersCost>);

impl Costs {
    /// Adds a record's costs to `stage`'s, each request once.
    pub fn add(&mut self, stage: &str, cost: &AnswersCost) {
        if !cost.is_empty() {
            self.0.entry(stage.to_string()).or_default().add(cost);
        }
    }

    pub fn add_stages(&mut self, costs: &BTreeMap<String, AnswersCost>) {
        for (stage, cost) in costs {
            self.add(stage, cost);
        }
    }

    /// Every stage's requests together, each once.
    pub fn every(&self) -> AnswersCost {
        let mut every = AnswersCost::default();
        for calls in self.0.values() {
            every.add(calls);
        }
        every
    }

    pub fn total(&self) -> crate::dag::cost::Cost {
        self.every().total()
    }
}

/// Per stage and model, the answers behind the records and what they cost, with the totals.
fn cost_table(out: &mut String, costs: &Costs) {
    if costs.0.is_empty() {
        return;
    }
    out.push_str(
        "\nWhat the models' answers behind these records cost when they were first asked, \
         rejected answers included; an answer behind several records counts once, and one the \
         request cache gave again at what it cost then (`viss status` says what was spent on \
         this machine and what its cache saved). Answers marked `(batch)` went through the \
         provider's batch API, at its price:\n\n\
         | stage | model | answers | prompt tokens | completion tokens | cost (USD) |\n\
         |---|---|---:|---:|---:|---:|\n",
    );
    for (stage, calls) in &costs.0 {
        for (model, cost) in calls.by_model() {
            let _ = writeln!(
                out,
                "| `{stage}` | {} | {} | {} | {} | {} |",
                code(model),
                cost.answers,
                cost.prompt_tokens,
                cost.completion_tokens,
                dollars(cost.usd())
            );
        }
    }
    let every = costs.every();
    let all = every.total();
    let unpriced: Vec<String> = every
        .by_model()
        .into_iter()
        .filter(|(_, cost)| cost.micro_usd.is_none())
        .map(|(model, _)| code(model))
        .collect();
    let priced = match (all.usd(), unpriced.is_empty()) {
        (Some(usd), true) => format!("{usd:.4}"),
        (Some(usd), false) => format!("{usd:.4} (without {})", unpriced.join(", ")),
        (None, _) => "no price set".to_string(),
    };
    let _ = writeln!(
        out,
        "| all | | {} | {} | {} | {priced} |",
        all.answers, all.prompt_tokens, all.completion_tokens
    );
}

/// A cost as the card writes it: dollars to four places, or why there is none.
fn dollars(usd: Option<f64>) -> String {
    usd.map_or_else(|| "no price set".to_string(), |usd| format!("{usd:.4}"))
}

/// The scenarios left out, and the problems of the flagged answers per stage and kind.
fn flagged_section(out: &mut String, left_out: &super::dataset::LeftOut) {
    if !left_out.incomplete.is_empty() {
        let _ = writeln!(
            out,
            "\n{} scenario(s) are not in the dataset because a stage failed for them (`viss \
             status` says which): {}.",
            left_out.incomplete.len(),
            left_out
                .incomplete
                .iter()
                .map(|id| code(id))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    review_section(out, left_out);
    if left_out.names_anonymised {
        let _ = writeln!(
            out,
            "\nThe records' names are anonymised (`anonymize_names`): every text has \
             `anonymize`'s replacements applied and each character's name replaced by a \
             synthetic one from `instantiate`. {} scenario(s) had no clean synthetic cast to \
             take names from and are left out{}",
            left_out.not_anonymised.len(),
            if left_out.not_anonymised.is_empty() {
                ".".to_string()
            } else {
                format!(
                    ": {}.",
                    left_out
                        .not_anonymised
                        .iter()
                        .map(|id| code(id))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
    }
    if left_out.flagged.is_empty() {
        out.push_str("\nNo answer in the benchmark was flagged by the quality gates.\n");
        return;
    }
    let _ = writeln!(
        out,
        "\n{} scenario(s) have an answer that still failed a quality gate after its re-asks \
         (flagged); {}. Their problems, per stage and kind:\n\n\
         | stage | problem kind | count |\n|---|---|---:|",
        left_out.flagged.len(),
        if left_out.flagged_kept {
            "they are in the dataset, each with its problems in `problems`"
        } else {
            "they are left out (`include_flagged = true` in stages/export.toml keeps them)"
        }
    );
    for (stage, kinds) in &left_out.flagged_kinds {
        for (kind, count) in kinds {
            let _ = writeln!(out, "| {} | {} | {count} |", code(stage), code(kind));
        }
    }
}

fn review_section(out: &mut String, left_out: &super::dataset::LeftOut) {
    if left_out.reviewed.is_empty() {
        out.push_str("\nNo answer has been reviewed by a person (`viss review`).\n");
        return;
    }
    out.push_str(
        "\nAnswers reviewed by a person (`viss review`; verdicts in `manifests/reviews/`), per \
         stage:\n\n| stage | reviewed | accepted | edited | rejected |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|\n");
    for (stage, counts) in &left_out.reviewed {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            code(stage),
            counts.reviewed,
            counts.accepted,
            counts.edited,
            counts.rejected
        );
    }
    if !left_out.rejected.is_empty() {
        let _ = writeln!(
            out,
            "\n{} scenario(s) are left out because a reviewer rejected one of their answers: {}.",
            left_out.rejected.len(),
            left_out
                .rejected
                .iter()
                .map(|id| code(id))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// Text from a manifest, a config or a model as one line of Markdown that shows it as it is:
/// no markup (`<script>`, `**`, links, HTML comments) takes effect, no new line starts a block,
/// and a `|` cannot end a table cell.
fn text(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '#' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `raw` as a Markdown code span: fenced by more backticks than it holds in a row, on one
/// line, and with `|` escaped (GitHub tables end a cell at a bare `|`, even in code).
fn code(raw: &str) -> String {
    let one_line: String = raw
        .chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                ' '
            } else {
                c
            }
        })
        .collect::<String>()
        .replace('|', "\\|");
    let longest = one_line
        .split(|c| c != '`')
        .map(str::len)
        .max()
        .unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if one_line.starts_with('`') || one_line.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{one_line}{pad}{fence}")
}

/// The dataset card as Markdown.
pub fn render_card(records: &[BenchmarkRecord], context: &CardContext<'_>) -> String {
    let stats = Statistics::of(records);
    let mut out = String::new();
    let shows: BTreeMap<&str, &EpisodeSource> = context
        .episodes
        .iter()
        .map(|e| (e.show.as_str(), e))
        .collect();
    let titles: BTreeSet<String> = records
        .iter()
        .map(|r| {
            shows
                .get(r.show.as_str())
                .and_then(|e| e.show_title.clone())
                .unwrap_or_else(|| r.show.clone())
        })
        .collect();
    let pretty_name = titles.into_iter().collect::<Vec<_>>().join(", ");
    let metadata = super::huggingface::metadata(&super::huggingface::CardMetadata {
        pretty_name: &pretty_name,
        license: context.license,
        scenarios: stats.scenarios,
        images: stats.group_images + stats.portraits > 0,
        features: viss_parquet::hf_features(context.schema)
            .expect("the record schema built into viss has column types"),
        image_features: viss_parquet::hf_features(&super::huggingface::scenarios_schema(
            context.schema,
        ))
        .expect("the record schema built into viss has column types"),
    });
    out.push_str(&super::huggingface::front_matter(&metadata));
    let _ = writeln!(out, "\n# {}: a viss benchmark\n", text(&pretty_name));
    let _ = writeln!(
        out,
        "Multimodal social-simulation scenarios rebuilt from screen media by viss \
         (the AgentViSS construction pipeline): {} scenarios from {} episode(s) of {} show(s), \
         with {} roles \
         and {} role-level tasks. Each scenario has a dialogue type, a balanced conflict \
         intensity, a \
         description, and per role a profile, expression style, conflict characteristic, beliefs, \
         desires, \
         intentions and risk (BDI-Risk), initial affect, four tasks, and the vision dependence of \
         its \
         interaction-outcome task.\n",
        stats.scenarios, stats.episodes, stats.shows, stats.roles, stats.tasks
    );

    out.push_str("## Files\n\n");
    out.push_str(
        "| path | what |\n|---|---|\n\
         | `data.jsonl` | one scenario per line, in script order (episode, then place in the \
         script); every field always present (unknown is `null`) |\n\
         | `data.parquet` | the same rows as a Parquet table (zstd) |\n\
         | `scenarios.parquet` | the same rows with every image's bytes embedded as the \
         `{bytes, path}` struct Hugging Face `datasets` opens as an image, its other facts in \
         `group_image_info` / `portrait_info`; when the images were built |\n\
         | `images/<id>/G.png` | the scenario's synthetic group image G, when built |\n\
         | `images/<id>/<role>.png` | a role's synthetic portrait, when built |\n\
         | `viss.lock` | blake3 of every file here and of every stage record behind each scenario \
         |\n\
         | `README.md` | this card |\n\n",
    );
    out.push_str(
        "Load with pandas (`pd.read_parquet(\"data.parquet\")` or `pd.read_json(\"data.jsonl\", \
         lines=True)`) or \
         polars (`pl.read_parquet(\"data.parquet\")`). `roles` is a list of structs in Parquet \
         (pandas: a list \
         of dicts per row); one row per role: \
         `pl.read_parquet(\"data.parquet\").explode(\"roles\").unnest(\"roles\")`. \
         `group_image` and each role's `portrait` are structs (or null) whose `path` is relative \
         to this directory. \
         The Parquet files declare plain Arrow strings (not string views), so pandas, pyarrow, \
         polars and `datasets` read them alike.\n\n\
         With the Hugging Face `datasets` library, from this directory or from the Hub once \
         uploaded: `load_dataset(\"path/to/this/dir\", split=\"test\")` gives the `scenarios` \
         config (scenarios.parquet), where `group_image` and every role's `portrait` load as \
         images (PIL) when the images were built; `load_dataset(..., \"table\")` gives \
         data.parquet's rows as they are, and `load_dataset(..., \"traces\")` one row per \
         simulated turn (turns.parquet) when `viss export --traces` wrote the runs \
         (traces.jsonl holds them whole). The card's metadata block declares these configs and \
         their features.\n\n",
    );

    out.push_str("## Statistics\n\n");
    let _ = writeln!(out, "| | |\n|---|---:|");
    for (label, value) in [
        ("shows", stats.shows.to_string()),
        ("episodes", stats.episodes.to_string()),
        ("scenarios", stats.scenarios.to_string()),
        ("roles (scenario x character)", stats.roles.to_string()),
        ("distinct characters", stats.characters.to_string()),
        ("tasks (4 per role)", stats.tasks.to_string()),
        (
            "mean roles per scenario",
            format!("{:.2}", stats.mean_roles),
        ),
        (
            "mean turns per scenario (source dialogue lines)",
            format!("{:.1}", stats.mean_turns),
        ),
        (
            "scenarios with a strongly vision-dependent outcome task",
            stats.scenarios_strongly_vision_dependent.to_string(),
        ),
        ("group images G", stats.group_images.to_string()),
        ("role portraits", stats.portraits.to_string()),
    ] {
        let _ = writeln!(out, "| {label} | {value} |");
    }
    out.push('\n');
    count_table(
        &mut out,
        "dialogue type",
        "scenarios",
        &stats.dialogue_types,
        stats.scenarios,
    );
    let sizes: Vec<(String, usize)> = stats
        .group_sizes
        .iter()
        .map(|(size, n)| (format!("{size} roles"), *n))
        .collect();
    count_table(&mut out, "group size", "scenarios", &sizes, stats.scenarios);
    count_table(
        &mut out,
        "conflict intensity",
        "scenarios",
        &stats.conflict_intensities,
        stats.scenarios,
    );
    let _ = writeln!(
        out,
        "| dialogue type \\ conflict intensity | {} |\n|---|{}",
        ConflictIntensity::ALL
            .iter()
            .map(|i| i.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
        "---:|".repeat(ConflictIntensity::ALL.len())
    );
    for (dialogue_type, row) in &stats.type_by_intensity {
        let cells: Vec<String> = row.iter().map(usize::to_string).collect();
        let _ = writeln!(out, "| {dialogue_type} | {} |", cells.join(" | "));
    }
    out.push('\n');
    count_table(
        &mut out,
        "vision dependence",
        "outcome tasks",
        &stats.vision_dependence,
        stats.roles,
    );
    count_table(
        &mut out,
        "expression style",
        "roles",
        &stats.expression_styles,
        stats.roles,
    );
    count_table(
        &mut out,
        "conflict characteristic",
        "roles",
        &stats.conflict_characteristics,
        stats.roles,
    );
    count_table(
        &mut out,
        "initial emotion",
        "roles",
        &stats.emotions,
        stats.roles,
    );

    out.push_str("## Images\n\n");
    if stats.group_images == 0 && stats.portraits == 0 {
        out.push_str(
            "**The images were not built.** This export has no group images and no portraits: the \
             project's \
             pipeline did not include the image stages (`group_image`, `portraits`) when it was \
             exported, so \
             `group_image` and every `portrait` are null. The text annotations do not depend on \
             them.\n\n",
        );
    } else {
        let _ = writeln!(
            out,
            "{} of {} scenarios have a group image G and {} of {} roles a portrait. **Every image \
             is synthetic**: \
             made by viss from the source (`synthetic` is true and `backend` names what made it); \
             none is a frame \
             of the source video. A role without a portrait says why in \
             `portrait_missing_reason`.\n",
            stats.group_images, stats.scenarios, stats.portraits, stats.roles
        );
    }

    // The schema now lives at src/stages/export/benchmark-record.schema.json; this line still
    // names an old path because the card is the `export` stage's output: new text here needs the
    // stage's code version in src/stages/export/mod.rs raised with it, or stores would
    // keep cards with the old text.
    out.push_str(
        "## Fields\n\nOne record per scenario (schema: \
         `schemas/benchmark-record.schema.json` in viss).\n\n",
    );
    let sources = super::record::field_sources();
    field_table(&mut out, context.schema, Some(&sources.scenario));
    if let Some(role) = context.schema.pointer("/$defs/role") {
        out.push_str("Each entry of `roles`:\n\n");
        field_table(&mut out, role, Some(&sources.role));
    }
    if let Some(image) = context.schema.pointer("/$defs/image") {
        out.push_str("An `image` (the group image, a portrait):\n\n");
        field_table(&mut out, image, None);
    }
    out.push_str("Parquet columns:\n\n| column | type |\n|---|---|\n");
    for (name, dtype) in context.parquet_columns {
        let _ = writeln!(out, "| `{name}` | `{}` |", dtype.replace('|', "\\|"));
    }
    out.push('\n');

    out.push_str("## Provenance\n\n");
    let per_episode: BTreeMap<&str, usize> = records.iter().fold(BTreeMap::new(), |mut map, r| {
        *map.entry(r.episode.as_str()).or_default() += 1;
        map
    });
    for (show, source) in &shows {
        let _ = writeln!(
            out,
            "- show {}{}: license note from its manifest: \"{}\"",
            code(show),
            source
                .show_title
                .as_ref()
                .map(|t| format!(" ({})", text(t)))
                .unwrap_or_default(),
            text(&source.license)
        );
    }
    out.push_str("\n| episode | title | scenarios | source files (blake3) |\n|---|---|---:|---|\n");
    for episode in context.episodes {
        let id = format!("{}/{}", episode.show, episode.episode);
        let files: Vec<String> = episode
            .files
            .iter()
            .map(|(kind, file)| format!("{kind} {} (`{}`)", code(&file.path), file.blake3))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            code(&id),
            text(episode.title.as_deref().unwrap_or_default()),
            per_episode.get(id.as_str()).copied().unwrap_or(0),
            files.join(", ")
        );
    }
    out.push_str("\nAnnotated by (model per stage, as its records name it):\n\n");
    for (stage, models) in context.models {
        let _ = writeln!(
            out,
            "- `{stage}`: {}",
            models
                .iter()
                .map(|m| code(m))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    reask_table(&mut out, context.reasks);
    cost_table(&mut out, context.costs);
    flagged_section(&mut out, context.left_out);
    out.push_str(
        "\nTime ranges come from aligning each script to the episode's subtitles; \
         `alignment_flagged` marks \
         the ones to check. `viss.lock` lists the hash of every record each scenario was made \
         from, so two \
         builds can be compared.\n\n",
    );

    out.push_str("## License and redistribution\n\n");
    out.push_str(
        "The source media (video, frames, subtitles, scripts) are **not redistributed**: this \
         dataset holds no \
         source frame and no source dialogue, only annotations written about it, each scenario's \
         place in the \
         source (`script_file`, lines, time range), and synthetic images marked `synthetic: true`. \
         To use the \
         scenarios with their source, obtain the media under the license noted above. The \
         annotations were \
         written by language models; check the license terms of the models named above before \
         redistributing \
         them.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::{ConflictCharacteristic as CC, Gender, VisualChannel};
    use crate::hash::ContentHash;
    use crate::stages::export::record::{BenchmarkRole, ImageRef};

    fn role(name: &str, characteristic: CC, dependence: VisionDependenceClass) -> BenchmarkRole {
        BenchmarkRole {
            name: name.to_string(),
            gender: Gender::Unknown,
            age: "30s".into(),
            occupation: "unknown".into(),
            profile: "p".into(),
            expression_style: ExpressionStyle::HonestSignaling,
            conflict_characteristic: characteristic,
            natural_conflict_characteristic: characteristic,
            belief: "b".into(),
            desire: "d".into(),
            intention: "i".into(),
            risk_if_failed: "r".into(),
            emotion: Emotion::Anger,
            facial_expression: "f".into(),
            body_action: "a".into(),
            expression_task: "t1".into(),
            characteristic_task: "t2".into(),
            interaction_regulation_task: "t3".into(),
            interaction_outcome_task: "t4".into(),
            vision_dependence: dependence,
            visual_channels: if dependence == VisionDependenceClass::Strongly {
                vec![VisualChannel::Gaze]
            } else {
                vec![]
            },
            vision_dependence_reason: "why".into(),
            portrait: None,
            portrait_missing_reason: None,
        }
    }

    fn record(
        id: &str,
        dialogue_type: DialogueType,
        intensity: ConflictIntensity,
        turns: usize,
        roles: Vec<BenchmarkRole>,
    ) -> BenchmarkRecord {
        let mut parts = id.split('/');
        let show = parts.next().unwrap().to_string();
        let episode = format!("{show}/{}", parts.next().unwrap());
        BenchmarkRecord {
            id: id.to_string(),
            show,
            show_title: None,
            episode,
            episode_title: None,
            scene_heading: None,
            script_file: "x.txt".into(),
            script_line_start: 1,
            script_line_end: 2,
            start_ms: None,
            end_ms: None,
            alignment_confidence: None,
            alignment_flagged: false,
            turns,
            dialogue_type,
            conflict_intensity: intensity,
            background: "bg".into(),
            description: "desc".into(),
            group_image: None,
            roles,
            problems: Vec::new(),
        }
    }

    fn benchmark() -> Vec<BenchmarkRecord> {
        use VisionDependenceClass::{Strongly, Weakly};
        vec![
            record(
                "a/e1/sc001",
                DialogueType::Persuasion,
                ConflictIntensity::High,
                12,
                vec![
                    role("Ada", CC::Competing, Strongly),
                    role("Ben", CC::Competing, Weakly),
                ],
            ),
            record(
                "a/e1/sc002",
                DialogueType::Persuasion,
                ConflictIntensity::Medium,
                10,
                vec![
                    role("Ada", CC::Competing, Weakly),
                    role("Ben", CC::Avoiding, Weakly),
                    role("Cy", CC::Avoiding, Weakly),
                ],
            ),
            record(
                "b/e7/sc001",
                DialogueType::Eristic,
                ConflictIntensity::Low,
                17,
                vec![
                    role("Ada", CC::Collaborating, Strongly),
                    role("Dee", CC::Accommodating, Strongly),
                ],
            ),
        ]
    }

    #[test]
    fn statistics_count_scenarios_roles_tasks_and_labels() {
        let stats = Statistics::of(&benchmark());
        assert_eq!((stats.scenarios, stats.episodes, stats.shows), (3, 2, 2));
        assert_eq!((stats.roles, stats.tasks), (7, 28));
        // Ada of show `a` twice counts once; Ada of show `b` is another character.
        assert_eq!(stats.characters, 5);
        assert_eq!(stats.mean_turns, 13.0);
        assert!((stats.mean_roles - 7.0 / 3.0).abs() < 1e-12);
        assert_eq!(
            stats.dialogue_types,
            vec![
                (DialogueType::InformationSeeking, 0),
                (DialogueType::Deliberation, 0),
                (DialogueType::Persuasion, 2),
                (DialogueType::Eristic, 1)
            ]
        );
        assert_eq!(stats.group_sizes, vec![(2, 2), (3, 1)]);
        assert_eq!(
            stats
                .conflict_intensities
                .iter()
                .map(|(_, n)| *n)
                .collect::<Vec<_>>(),
            vec![1, 1, 1]
        );
        assert_eq!(
            stats.type_by_intensity[2],
            (DialogueType::Persuasion, vec![1, 1, 0])
        );
        assert_eq!(
            stats.type_by_intensity[3],
            (DialogueType::Eristic, vec![0, 0, 1])
        );
        assert_eq!(
            stats.vision_dependence,
            vec![
                (VisionDependenceClass::Strongly, 3),
                (VisionDependenceClass::Weakly, 4)
            ]
        );
        assert_eq!(stats.scenarios_strongly_vision_dependent, 2);
        assert_eq!(stats.conflict_characteristics[0], (CC::Competing, 3));
        assert_eq!((stats.group_images, stats.portraits), (0, 0));
    }

    #[test]
    fn the_card_has_the_tables_the_fields_and_says_when_images_were_not_built() {
        let schema: Value = crate::stages::export::record::record_schema();
        let models = [("tasks".to_string(), BTreeSet::from(["mock:m".to_string()]))].into();
        let mut tasks = Reasks {
            scenarios: 3,
            ..Reasks::default()
        };
        let mut problems = crate::annotation::check::Problems::new();
        problems.gate(
            "outcome_acts_on_itself",
            Some("Noor"),
            "task",
            "Noor on Noor".into(),
        );
        problems.gate("copies_instructions", Some("Theo"), "task", "copies".into());
        let first = problems.finish().unwrap_err();
        let mut problems = crate::annotation::check::Problems::new();
        problems.gate(
            "outcome_acts_on_itself",
            Some("Mila"),
            "task",
            "Mila on Mila".into(),
        );
        let second = problems.finish().unwrap_err();
        for rejection in [first, second] {
            let refusal = crate::annotation::check::Refusal::of(&rejection, rejection.message());
            tasks.answers += 1;
            crate::annotation::check::count_refusals([&refusal], &mut tasks.reasons);
        }
        let reasks = [("tasks".to_string(), tasks)].into();
        let mut costs = Costs::default();
        let call = |model: &str, answers, micro_usd| crate::dag::cost::CallCost {
            model: model.to_string(),
            cost: crate::dag::cost::Cost {
                answers,
                prompt_tokens: 700 * answers,
                completion_tokens: 200 * answers,
                micro_usd,
            },
        };
        // Two records rest on request k2: it is counted once.
        for (stage, key, call) in [
            ("tasks", "k1", call("openai:gpt-4o-mini", 3, Some(1200))),
            ("tasks", "k2", call("openai:gpt-4o-mini", 2, Some(1000))),
            ("tasks", "k2", call("openai:gpt-4o-mini", 2, Some(1000))),
            (
                "tasks",
                "k3",
                call("openai:gpt-4o-mini (batch)", 4, Some(1100)),
            ),
            ("goals", "k4", call("local", 5, None)),
        ] {
            let mut record = AnswersCost::default();
            record.add_call(key.to_string(), call);
            costs.add(stage, &record);
        }
        let context = CardContext {
            reasks: &reasks,
            costs: &costs,
            episodes: &[],
            models: &models,
            schema: &schema,
            parquet_columns: &[],
            license: "cc-by-4.0",
            left_out: &crate::stages::export::dataset::LeftOut::default(),
        };
        let mut records = benchmark();
        let card = render_card(&records, &context);
        let (metadata, card) = crate::stages::export::huggingface::split_card(&card).unwrap();
        assert!(
            metadata.starts_with("pretty_name: \"a, b\"\nlicense: \"cc-by-4.0\"\n"),
            "{metadata}"
        );
        assert!(card.starts_with("\n# a, b: a viss benchmark"), "{card}");
        assert!(card.contains("| persuasion | 2 | 66.7% |"), "{card}");
        assert!(card.contains("| 3 roles | 1 | 33.3% |"), "{card}");
        assert!(card.contains("| persuasion | 1 | 1 | 0 |"), "{card}");
        assert!(
            card.contains("| mean turns per scenario (source dialogue lines) | 13.0 |"),
            "{card}"
        );
        assert!(card.contains("| strongly | 3 | 42.9% |"), "{card}");
        assert!(card.contains("**The images were not built.**"), "{card}");
        assert!(
            card.contains("| `interaction_outcome_task` | string | `tasks` |"),
            "{card}"
        );
        assert!(
            card.contains("| `group_image` | image or null | `group_image` |"),
            "{card}"
        );
        assert!(
            card.contains("| `belief` | string | `bdi_risk` |"),
            "{card}"
        );
        assert!(card.contains("| `width` | integer | Pixels. |"), "{card}");
        assert!(card.contains("- `tasks`: `mock:m`"), "{card}");
        assert!(
            card.contains(
                "| `tasks` | 3 | 2 | outcome_acts_on_itself (2); copies_instructions (1) |"
            ),
            "{card}"
        );
        assert!(card.contains("**not redistributed**"), "{card}");
        // What each stage's answers cost, by model, batched apart, an unpriced model said so.
        for row in [
            "| `goals` | `local` | 5 | 3500 | 1000 | no price set |",
            "| `tasks` | `openai:gpt-4o-mini` | 5 | 3500 | 1000 | 0.0022 |",
            "| `tasks` | `openai:gpt-4o-mini (batch)` | 4 | 2800 | 800 | 0.0011 |",
            "| all | | 14 | 9800 | 2800 | 0.0033 (without `local`) |",
        ] {
            assert!(card.contains(row), "{row}\n{card}");
        }

        records[0].group_image = Some(ImageRef {
            path: "images/a/e1/sc001/G.png".into(),
            blake3: ContentHash::of(b"png"),
            width: 4,
            height: 4,
            synthetic: true,
            backend: "local:test/1".into(),
        });
        let card = render_card(&records, &context);
        assert!(!card.contains("The images were not built"), "{card}");
        assert!(
            card.contains("1 of 3 scenarios have a group image G"),
            "{card}"
        );
    }

    /// What a manifest may say, meant or not, that a card written raw would render as markup
    /// or that would break its YAML.
    const HOSTILE: &str = "<script>alert(1)</script> <b onmouseover=\"x()\">b</b> <!-- c \
                           --> **bold** [link](http://x) `code` |cell| # h\n---\npretty_name: \
                           other\u{85}\u{2028}\u{0}\u{7f}\u{9b}end";

    #[test]
    fn hostile_manifest_text_reaches_the_card_escaped_and_its_front_matter_stays_yaml() {
        let schema: Value = crate::stages::export::record::record_schema();
        let episode = EpisodeSource {
            show: "a".into(),
            episode: "e1".into(),
            show_title: Some(HOSTILE.into()),
            title: Some(HOSTILE.into()),
            license: HOSTILE.into(),
            manifest: "manifests/shows/a.toml".into(),
            script_format: None,
            subtitles_format: None,
            files: [(
                "script".to_string(),
                crate::manifest::RawFile {
                    path: "a/`e1` | <i>x</i>.txt".into(),
                    bytes: 1,
                    blake3: ContentHash::of(b"s"),
                    sha256: None,
                },
            )]
            .into(),
            places: Vec::new(),
            characters: vec![],
        };
        let context = CardContext {
            reasks: &BTreeMap::new(),
            costs: &Costs::default(),
            episodes: std::slice::from_ref(&episode),
            models: &BTreeMap::new(),
            schema: &schema,
            parquet_columns: &[],
            license: "cc-by-4.0",
            left_out: &crate::stages::export::dataset::LeftOut::default(),
        };
        let card = render_card(&benchmark()[..1], &context);
        let (metadata, body) = crate::stages::export::huggingface::split_card(&card).unwrap();
        // The front matter: one `key: value` per line, every string a quoted scalar that
        // reads back as the manifest's text.
        let pretty = metadata
            .lines()
            .find_map(|line| line.strip_prefix("pretty_name: "))
            .unwrap();
        assert_eq!(serde_json::from_str::<String>(pretty).unwrap(), HOSTILE);
        assert!(!metadata.contains(['\u{85}', '\u{2028}', '\u{0}', '\u{7f}', '\u{9b}']));
        let keys = metadata
            .lines()
            .filter(|line| line.starts_with("pretty_name:"));
        assert_eq!(keys.count(), 1, "{metadata}");
        // The body: no tag, comment, emphasis, link, code span or table cell of the text's.
        for markup in [
            "<script>", "<b ", "<!--", "**bold**", "[link]", "`code`", " |cell|", "\n---\n",
        ] {
            assert!(!body.contains(markup), "{markup} in {body}");
        }
        assert!(
            body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{body}"
        );
        assert!(
            body.contains("\\*\\*bold\\*\\* \\[link\\](http://x)"),
            "{body}"
        );
        let heading = body.lines().find(|line| line.starts_with("# ")).unwrap();
        assert!(
            heading.ends_with("end: a viss benchmark"),
            "one line: {heading}"
        );
        assert!(body.contains("``a/`e1` \\| <i>x</i>.txt``"), "{body}");
    }
}
