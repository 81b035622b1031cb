//! The scorecard: an export's categorical answers against a truth file (accuracy per field, and
//! every wrong item with what was expected and what the export says), and the re-ask statistics
//! of the LLM steps.
//!
//! The export is read loosely (any `data.jsonl` line with an `id`): a field the export lacks is
//! reported as missing, never guessed, and a scenario of the truth that the export lacks counts
//! as wrong in every field.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::truth::{AgeRange, Truth, UNKNOWN, parse_truth_age, words};

/// The scored fields, in report order.
pub const FIELDS: [&str; 6] = [
    "dialogue_type",
    "participants",
    "gender",
    "age",
    "occupation",
    "competes",
];

/// The export's field `competes` is scored on: the role's characteristic before balancing.
pub const NATURAL_CHARACTERISTIC: &str = "natural_conflict_characteristic";

/// What the got side says when there is nothing to compare.
pub const MISSING_SCENARIO: &str = "(scenario missing from the export)";
pub const MISSING_ROLE: &str = "(no role for this participant in the export)";
pub const MISSING_FIELD: &str = "(field missing from the export)";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scorecard {
    /// The data.jsonl read.
    pub export: PathBuf,
    /// Records (lines) in it.
    pub records: usize,
    /// The truth compared with, when one was given.
    pub truth: Option<TruthScore>,
    /// Re-asks and failures of the LLM steps, from the project's store.
    pub gates: Option<GateStats>,
    /// Set when the data.jsonl read is not the one the store's `export` record holds (an export
    /// older than the last build, or none built): says so and what to run.
    pub stale: Option<String>,
    /// Where the reviews stand, with the reviewers' agreement and how they compare with the
    /// gates, when there are any (`viss review`).
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub review: Option<crate::review::summary::ReviewSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TruthScore {
    pub file: PathBuf,
    pub show: String,
    pub episode: String,
    /// Scenarios of the truth.
    pub scenarios: usize,
    /// Truth scenarios the export lacks (each counts as wrong in every field).
    pub missing_scenarios: Vec<String>,
    /// Records of the truth's episode that the truth does not know (not scored).
    pub unknown_scenarios: Vec<String>,
    /// Per field of [`FIELDS`].
    pub fields: Vec<FieldScore>,
    /// Over every field.
    pub correct: usize,
    pub total: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldScore {
    pub field: String,
    pub correct: usize,
    pub total: usize,
    /// `correct / total`; `None` when nothing was scored.
    pub accuracy: Option<f64>,
    pub wrong: Vec<Miss>,
}

/// One wrong item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Miss {
    /// The scenario id, with the role for role fields (`demo/s01e01/scd51d Noor`).
    pub item: String,
    pub expected: String,
    pub got: String,
}

/// Re-asks per LLM stage, from the store's counters (every record the store holds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateStats {
    /// Where the numbers come from.
    pub source: String,
    pub stages: Vec<StageGates>,
    pub llm_calls: u64,
    pub rejected_calls: u64,
    pub failed_items: usize,
    /// Items kept with an answer that still fails quality gates.
    pub flagged_items: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageGates {
    pub stage: String,
    pub items: usize,
    pub llm_calls: u64,
    /// Answers the step's validator rejected and asked again (or that did not parse).
    pub rejected_calls: u64,
    /// Answers rejected before the one the stored records hold, counted from the records
    /// themselves (so also when every answer came from the LLM response cache).
    pub reasked_answers: u64,
    /// Why those answers were rejected: each problem the validator named, with names and quoted
    /// words taken out so that the same gate counts once, and how often it was named.
    pub reasons: BTreeMap<String, u64>,
    pub failed: Vec<FailedItem>,
    /// Items kept flagged, with their problems.
    pub flagged: Vec<FlaggedItem>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlaggedItem {
    pub item: String,
    pub problems: Vec<crate::dag::problem::Problem>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedItem {
    pub item: String,
    pub error: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ScorecardError {
    #[error("{}: cannot read the export: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: not a benchmark record: {message}", path.display())]
    Record {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error(transparent)]
    Store(#[from] crate::dag::store::StoreError),
}

/// The records of a `data.jsonl`, as JSON objects with an `id`.
pub fn read_records(path: &Path) -> Result<Vec<Value>, ScorecardError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScorecardError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut records = Vec::new();
    for (k, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record_error = |message: String| ScorecardError::Record {
            path: path.to_path_buf(),
            line: k + 1,
            message,
        };
        let value: Value = serde_json::from_str(line).map_err(|e| record_error(e.to_string()))?;
        if !value.get("id").is_some_and(Value::is_string) {
            return Err(record_error("no string `id`".into()));
        }
        records.push(value);
    }
    Ok(records)
}

/// Scores `records` against `truth` (read from `file`).
pub fn score(truth: &Truth, file: &Path, records: &[Value]) -> TruthScore {
    let by_id: BTreeMap<&str, &Value> = records
        .iter()
        .filter_map(|r| Some((r.get("id")?.as_str()?, r)))
        .collect();
    let mut fields: BTreeMap<&str, FieldScore> = FIELDS
        .iter()
        .map(|&f| {
            let score = FieldScore {
                field: f.to_string(),
                correct: 0,
                total: 0,
                accuracy: None,
                wrong: Vec::new(),
            };
            (f, score)
        })
        .collect();
    let mut tally = |field: &str, item: String, expected: String, got: Option<String>| {
        let score = fields.get_mut(field).expect("a scored field");
        score.total += 1;
        match got {
            None => score.correct += 1,
            Some(got) => score.wrong.push(Miss {
                item,
                expected,
                got,
            }),
        }
    };
    let mut missing_scenarios = Vec::new();
    for scenario in &truth.scenarios {
        let record = by_id.get(scenario.id.as_str()).copied();
        if record.is_none() {
            missing_scenarios.push(scenario.id.clone());
        }
        let id = &scenario.id;
        // dialogue_type
        let expected = scenario.dialogue_type.value.as_str().to_string();
        let got = match record {
            None => Some(MISSING_SCENARIO.to_string()),
            Some(r) => wrong_label(text_field(r, "dialogue_type"), &expected),
        };
        tally("dialogue_type", id.clone(), expected, got);
        // participants: the roles' names as a set
        let truth_names: BTreeSet<&str> = scenario
            .participants
            .value
            .iter()
            .map(String::as_str)
            .collect();
        let roles: Vec<&Value> = record
            .and_then(|r| r.get("roles"))
            .and_then(Value::as_array)
            .map(|roles| roles.iter().collect())
            .unwrap_or_default();
        let role_names: Vec<&str> = roles
            .iter()
            .filter_map(|r| r.get("name")?.as_str())
            .collect();
        let got_names: BTreeSet<&str> = role_names.iter().copied().collect();
        let expected = join(&truth_names);
        let got = match record {
            None => Some(MISSING_SCENARIO.to_string()),
            Some(r) if r.get("roles").and_then(Value::as_array).is_none() => {
                Some(MISSING_FIELD.to_string())
            }
            Some(_) if got_names == truth_names && role_names.len() == got_names.len() => None,
            Some(_) => Some(describe_names(&role_names, &truth_names)),
        };
        tally("participants", id.clone(), expected, got);
        // per participant of the truth
        for name in &scenario.participants.value {
            let character = truth
                .character(name)
                .expect("a checked truth's participants are characters");
            let role = roles
                .iter()
                .find(|r| r.get("name").and_then(Value::as_str) == Some(name.as_str()));
            let item = format!("{id} {name}");
            // The role's answer, or why there is none.
            let role: Result<&Value, &str> = match (record, role) {
                (None, _) => Err(MISSING_SCENARIO),
                (Some(_), None) => Err(MISSING_ROLE),
                (Some(_), Some(role)) => Ok(role),
            };
            let expected = character.gender.value.as_str().to_string();
            let got = match role {
                Err(why) => Some(why.to_string()),
                Ok(r) => wrong_label(text_field(r, "gender"), &expected),
            };
            tally("gender", item.clone(), expected, got);

            let expected = character.age.value.clone();
            let got = match role {
                Err(why) => Some(why.to_string()),
                Ok(r) => wrong_age(text_field(r, "age"), &expected),
            };
            tally("age", item.clone(), age_expectation(&expected), got);

            let occupation = &character.occupation;
            let expected = occupation.value.clone();
            let got = match role {
                Err(why) => Some(why.to_string()),
                Ok(r) => {
                    wrong_occupation(text_field(r, "occupation"), &expected, &occupation.accept)
                }
            };
            let shown = if occupation.accept.is_empty() || expected == UNKNOWN {
                expected
            } else {
                format!("{expected} (any of: {})", occupation.accept.join(", "))
            };
            tally("occupation", item.clone(), shown, got);

            let Some(competes) = scenario
                .roles
                .iter()
                .find(|r| &r.name == name)
                .and_then(|r| r.competes.as_ref())
            else {
                continue;
            };
            let expected = if competes.value {
                "competing"
            } else {
                "not competing"
            };
            let got = match role {
                Err(why) => Some(why.to_string()),
                // The truth says what the scene suggests; balancing may have moved the label the
                // role plays to meet the benchmark's quotas.
                Ok(r) => match text_field(r, NATURAL_CHARACTERISTIC) {
                    None => Some(MISSING_FIELD.to_string()),
                    Some(c) if (c == "competing") == competes.value => None,
                    Some(c) => Some(c.to_string()),
                },
            };
            tally("competes", item, expected.to_string(), got);
        }
    }
    let prefix = format!("{}/{}/", truth.show, truth.episode);
    let known: BTreeSet<&str> = truth.scenarios.iter().map(|s| s.id.as_str()).collect();
    let unknown_scenarios = by_id
        .keys()
        .filter(|id| id.starts_with(&prefix) && !known.contains(*id))
        .map(|id| id.to_string())
        .collect();
    let mut fields: Vec<FieldScore> = FIELDS
        .iter()
        .map(|f| fields.remove(f).expect("every field"))
        .collect();
    for f in &mut fields {
        f.accuracy = (f.total > 0).then(|| f.correct as f64 / f.total as f64);
    }
    TruthScore {
        file: file.to_path_buf(),
        show: truth.show.clone(),
        episode: truth.episode.clone(),
        scenarios: truth.scenarios.len(),
        missing_scenarios,
        unknown_scenarios,
        correct: fields.iter().map(|f| f.correct).sum(),
        total: fields.iter().map(|f| f.total).sum(),
        fields,
    }
}

fn text_field<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value.get(field)?.as_str()
}

/// `None` when right, else what was got.
fn wrong_label(got: Option<&str>, expected: &str) -> Option<String> {
    match got {
        None => Some(MISSING_FIELD.to_string()),
        Some(got) if got == expected => None,
        Some(got) => Some(got.to_string()),
    }
}

fn wrong_age(got: Option<&str>, expected: &str) -> Option<String> {
    let Some(got) = got else {
        return Some(MISSING_FIELD.to_string());
    };
    let right = match (parse_truth_age(expected).ok(), answer_age(got)) {
        // The truth says the script gives no cue: only "unknown" is right.
        (None, AnswerAge::Unknown) => true,
        (None, _) => false,
        (Some(range), AnswerAge::Range(answer)) => range.contains(answer.middle()),
        (Some(_), _) => false,
    };
    (!right).then(|| match answer_age(got) {
        AnswerAge::Unreadable => format!("{got} (not an age)"),
        _ => got.to_string(),
    })
}

fn age_expectation(expected: &str) -> String {
    if expected == UNKNOWN {
        expected.to_string()
    } else {
        format!("{expected} years")
    }
}

fn wrong_occupation(got: Option<&str>, expected: &str, accept: &[String]) -> Option<String> {
    let Some(got) = got else {
        return Some(MISSING_FIELD.to_string());
    };
    let got_words = words(got);
    let got_unknown = got_words.is_empty() || got_words == [UNKNOWN];
    let right = if expected == UNKNOWN {
        got_unknown
    } else {
        let fallback = [expected.to_string()];
        let accept = if accept.is_empty() {
            &fallback[..]
        } else {
            accept
        };
        !got_unknown && accept.iter().any(|a| contains_words(&got_words, &words(a)))
    };
    (!right).then(|| got.to_string())
}

/// Whether `phrase` occurs in `text` as consecutive whole words.
fn contains_words(text: &[String], phrase: &[String]) -> bool {
    !phrase.is_empty() && text.windows(phrase.len()).any(|w| w == phrase)
}

fn join(names: &BTreeSet<&str>) -> String {
    names.iter().copied().collect::<Vec<_>>().join(", ")
}

/// The export's role names, with what differs from the truth.
fn describe_names(got: &[&str], truth: &BTreeSet<&str>) -> String {
    let got_set: BTreeSet<&str> = got.iter().copied().collect();
    let mut notes = Vec::new();
    let missing: Vec<&str> = truth.difference(&got_set).copied().collect();
    if !missing.is_empty() {
        notes.push(format!("missing {}", missing.join(", ")));
    }
    let extra: Vec<&str> = got_set.difference(truth).copied().collect();
    if !extra.is_empty() {
        notes.push(format!("extra {}", extra.join(", ")));
    }
    if got.len() != got_set.len() {
        notes.push("a name listed twice".to_string());
    }
    format!("{} ({})", got.join(", "), notes.join("; "))
}

/// What an answer's free-text age says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AnswerAge {
    Unknown,
    Range(AgeRange),
    /// Neither "unknown" nor anything read as an age.
    Unreadable,
}

/// Reads a free-text age as the annotate step writes it ("25-30", "30s", "mid thirties", "35",
/// "middle-aged", "unknown"), with the validator's own reading ([`age_range`]).
pub fn answer_age(text: &str) -> AnswerAge {
    let lower = text.to_lowercase();
    let tokens = words(&lower);
    if tokens.is_empty() || tokens.iter().any(|t| t == UNKNOWN) {
        return AnswerAge::Unknown;
    }
    match crate::stages::annotate::answer::age_range(text) {
        Some((low, high)) => AnswerAge::Range(AgeRange {
            low: f64::from(low),
            high: f64::from(high),
        }),
        None => AnswerAge::Unreadable,
    }
}

/// The answers an LLM step's record says were refused before the one it keeps.
#[derive(Deserialize)]
struct History {
    #[serde(default, deserialize_with = "viss_problem::stored::many")]
    rejected: Vec<crate::annotation::check::Refusal>,
}

/// Re-ask statistics from the store: every stage with an LLM call, a re-asked answer or a
/// failed item. The reasons come from the `rejected` list of the records of the stages that
/// render prompts (`llm_stages`) and from failed items' errors.
pub fn gate_stats(
    store: &crate::dag::store::Store,
    llm_stages: &[&str],
) -> Result<GateStats, ScorecardError> {
    let mut stages: BTreeMap<String, StageGates> = BTreeMap::new();
    for (stage, item, record) in store.index().scan_all()? {
        let asks_llm = llm_stages.contains(&stage.as_str());
        let entry = stages.entry(stage.clone()).or_insert_with(|| StageGates {
            stage,
            items: 0,
            llm_calls: 0,
            rejected_calls: 0,
            reasked_answers: 0,
            reasons: BTreeMap::new(),
            failed: Vec::new(),
            flagged: Vec::new(),
        });
        entry.items += 1;
        entry.llm_calls += record.usage.llm_calls;
        entry.rejected_calls += record.usage.rejected_calls;
        if let Some(error) = record.error {
            if asks_llm {
                // The engine keeps a failure as its message alone: its last answer's problems
                // are read back from that text.
                let refusal = crate::annotation::check::Refusal::from_text(error.clone());
                crate::annotation::check::count_refusals([&refusal], &mut entry.reasons);
            }
            entry.failed.push(FailedItem { item, error });
            continue;
        }
        if !record.problems.is_empty() {
            entry.flagged.push(FlaggedItem {
                item: item.clone(),
                problems: record.problems.clone(),
            });
        }
        if !asks_llm {
            continue;
        }
        for hash in record.outputs.values() {
            let bytes = store.get_blob(hash)?;
            // Outputs of other shapes (a picture, a list) have no history.
            let Ok(history) = serde_json::from_slice::<History>(&bytes) else {
                continue;
            };
            entry.reasked_answers += history.rejected.len() as u64;
            crate::annotation::check::count_refusals(&history.rejected, &mut entry.reasons);
        }
    }
    let stages: Vec<StageGates> = stages
        .into_values()
        .filter(|s| {
            s.llm_calls > 0
                || s.rejected_calls > 0
                || s.reasked_answers > 0
                || !s.failed.is_empty()
                || !s.flagged.is_empty()
        })
        .collect();
    Ok(GateStats {
        source: "the store: usage counters (llm_calls, rejected_calls) of the last run of every \
                 item, the rejected answers' reasons kept in the LLM steps' records, and failed \
                 items"
            .to_string(),
        llm_calls: stages.iter().map(|s| s.llm_calls).sum(),
        rejected_calls: stages.iter().map(|s| s.rejected_calls).sum(),
        failed_items: stages.iter().map(|s| s.failed.len()).sum(),
        flagged_items: stages.iter().map(|s| s.flagged.len()).sum(),
        stages,
    })
}

impl Scorecard {
    /// The scorecard for humans.
    pub fn render(&self) -> String {
        let mut out = format!(
            "scorecard of {} ({} record(s))\n",
            self.export.display(),
            self.records
        );
        if let Some(stale) = &self.stale {
            out.push_str(&format!("  warning: {stale}\n"));
        }
        match &self.truth {
            None => out.push_str("  no truth file: accuracy not scored\n"),
            Some(t) => {
                out.push_str(&format!(
                    "  against {} ({}/{}, {} scenario(s)): {}\n",
                    t.file.display(),
                    t.show,
                    t.episode,
                    t.scenarios,
                    ratio(t.correct, t.total)
                ));
                for id in &t.missing_scenarios {
                    out.push_str(&format!("  missing from the export (all wrong): {id}\n"));
                }
                for id in &t.unknown_scenarios {
                    out.push_str(&format!("  not in the truth (not scored): {id}\n"));
                }
                for f in &t.fields {
                    out.push_str(&format!(
                        "  {:<14} {}\n",
                        f.field,
                        ratio(f.correct, f.total)
                    ));
                    for miss in &f.wrong {
                        out.push_str(&format!(
                            "      {}: expected {}, got {}\n",
                            miss.item, miss.expected, miss.got
                        ));
                    }
                }
            }
        }
        if let Some(g) = &self.gates {
            out.push_str(&format!(
                "  LLM answers: {} call(s), {} rejected and re-asked, {} item(s) failed, {} \
                 flagged\n",
                g.llm_calls, g.rejected_calls, g.failed_items, g.flagged_items
            ));
            for s in &g.stages {
                out.push_str(&format!(
                    "  {:<18} {} item(s), {} call(s), {} answer(s) re-asked, {} failed, {} \
                     flagged\n",
                    s.stage,
                    s.items,
                    s.llm_calls,
                    s.reasked_answers.max(s.rejected_calls),
                    s.failed.len(),
                    s.flagged.len()
                ));
                let mut reasons: Vec<(&String, &u64)> = s.reasons.iter().collect();
                reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
                for (reason, count) in reasons {
                    out.push_str(&format!("      {count} x {reason}\n"));
                }
                for f in &s.failed {
                    out.push_str(&format!("      {}: {}\n", f.item, first_line(&f.error)));
                }
                for f in &s.flagged {
                    out.push_str(&format!("      flagged {}:\n", f.item));
                    for problem in &f.problems {
                        out.push_str(&format!("        - {}\n", problem.message));
                    }
                }
            }
        }
        if let Some(review) = &self.review {
            out.push_str("  reviews:\n");
            for line in review.render().lines() {
                out.push_str(&format!("    {line}\n"));
            }
        }
        out
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

fn ratio(correct: usize, total: usize) -> String {
    if total == 0 {
        return "nothing scored".to_string();
    }
    format!(
        "{correct}/{total} correct ({:.0}%)",
        100.0 * correct as f64 / total as f64
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const TRUTH: &str = r#"
show = "s"
episode = "e1"

[[characters]]
name = "Ada"
gender = { value = "female", evidence = "her" }
age = { value = "30-39", evidence = "thirties" }
occupation = { value = "nurse", evidence = "a nurse" }

[[characters]]
name = "Ben"
gender = { value = "male", evidence = "his" }
age = { value = "20-29", evidence = "twenties" }
occupation = { value = "rental clerk", accept = ["clerk", "rental agent"], evidence = "clerk" }

[[characters]]
name = "Cy"
gender = { value = "unknown", note = "no cue" }
age = { value = "unknown", note = "no cue" }
occupation = { value = "unknown", note = "no cue" }

[[scenarios]]
id = "s/e1/sc0001"
participants = { value = ["Ada", "Ben"], evidence = "Ada and Ben" }
dialogue_type = { value = "persuasion", evidence = "Ada: Please." }

[[scenarios.roles]]
name = "Ada"
competes = { value = true, evidence = "Ada: Mine." }

[[scenarios]]
id = "s/e1/sc0002"
participants = { value = ["Ben", "Cy"], evidence = "Ben and Cy" }
dialogue_type = { value = "eristic", evidence = "Cy: No." }

[[scenarios]]
id = "s/e1/sc0003"
participants = { value = ["Ada", "Cy"], evidence = "Ada and Cy" }
dialogue_type = { value = "deliberation", evidence = "Ada: Let us think." }
"#;

    fn truth() -> Truth {
        Truth::parse(TRUTH, Path::new("t.toml")).unwrap()
    }

    fn role(name: &str, gender: &str, age: &str, occupation: &str, conflict: &str) -> Value {
        // Balancing moved every role: what is scored is the natural label.
        json!({"name": name, "gender": gender, "age": age, "occupation": occupation,
               "natural_conflict_characteristic": conflict,
               "conflict_characteristic": "accommodating", "profile": "ignored"})
    }

    fn field<'a>(score: &'a TruthScore, name: &str) -> &'a FieldScore {
        score.fields.iter().find(|f| f.field == name).unwrap()
    }

    fn counts(score: &TruthScore, name: &str) -> (usize, usize) {
        let f = field(score, name);
        (f.correct, f.total)
    }

    #[test]
    fn all_right() {
        let records = vec![
            json!({"id": "s/e1/sc0001", "dialogue_type": "persuasion", "roles": [
                role("Ada", "female", "mid 30s", "Nurse", "competing"),
                role("Ben", "male", "25-28", "car rental clerk", "avoiding"),
            ]}),
            json!({"id": "s/e1/sc0002", "dialogue_type": "eristic", "roles": [
                role("Cy", "unknown", "unknown", "unknown", "competing"),
                role("Ben", "male", "twenties", "rental agent", "competing"),
            ]}),
            json!({"id": "s/e1/sc0003", "dialogue_type": "deliberation", "roles": [
                role("Ada", "female", "thirties", "nurse", "avoiding"),
                role("Cy", "unknown", "unknown", "Unknown", "avoiding"),
            ]}),
        ];
        let score = score(&truth(), Path::new("t.toml"), &records);
        assert!(score.missing_scenarios.is_empty() && score.unknown_scenarios.is_empty());
        for f in &score.fields {
            assert!(f.wrong.is_empty(), "{f:?}");
        }
        assert_eq!(counts(&score, "dialogue_type"), (3, 3));
        assert_eq!(counts(&score, "participants"), (3, 3));
        assert_eq!(counts(&score, "gender"), (6, 6));
        assert_eq!(counts(&score, "competes"), (1, 1));
        assert_eq!((score.correct, score.total), (25, 25));
        assert_eq!(field(&score, "age").accuracy, Some(1.0));
    }

    #[test]
    fn wrong_missing_extra_and_unknown() {
        let records = vec![
            // Wrong labels; an extra role (Cy) and Ben listed but with fields missing.
            json!({"id": "s/e1/sc0001", "dialogue_type": "eristic", "roles": [
                role("Ada", "male", "adult", "unknown", "avoiding"),
                json!({"name": "Ben"}),
                role("Cy", "unknown", "unknown", "unknown", "avoiding"),
            ]}),
            // A missing role (Cy); Ben's age says nothing readable.
            json!({"id": "s/e1/sc0002", "dialogue_type": "eristic", "roles": [
                role("Ben", "male", "he seems nice", "clerical", "competing"),
            ]}),
            // sc0003 is missing; a scenario the truth does not know, and another episode's.
            json!({"id": "s/e1/sc0009", "dialogue_type": "eristic", "roles": []}),
            json!({"id": "s/e2/sc0001", "dialogue_type": "eristic", "roles": []}),
        ];
        let score = score(&truth(), Path::new("t.toml"), &records);
        assert_eq!(score.missing_scenarios, ["s/e1/sc0003"]);
        assert_eq!(score.unknown_scenarios, ["s/e1/sc0009"]);

        let dialogue = field(&score, "dialogue_type");
        assert_eq!((dialogue.correct, dialogue.total), (1, 3));
        assert_eq!(
            dialogue.wrong[0],
            Miss {
                item: "s/e1/sc0001".into(),
                expected: "persuasion".into(),
                got: "eristic".into()
            }
        );
        assert_eq!(dialogue.wrong[1].got, MISSING_SCENARIO);

        let participants = field(&score, "participants");
        assert_eq!((participants.correct, participants.total), (0, 3));
        assert_eq!(participants.wrong[0].got, "Ada, Ben, Cy (extra Cy)");
        assert_eq!(participants.wrong[1].got, "Ben (missing Cy)");
        assert_eq!(participants.wrong[2].got, MISSING_SCENARIO);

        let gender = field(&score, "gender");
        assert_eq!((gender.correct, gender.total), (1, 6));
        let gots: Vec<(&str, &str)> = gender
            .wrong
            .iter()
            .map(|m| (m.item.as_str(), m.got.as_str()))
            .collect();
        assert_eq!(
            gots,
            [
                ("s/e1/sc0001 Ada", "male"),
                ("s/e1/sc0001 Ben", MISSING_FIELD),
                ("s/e1/sc0002 Cy", MISSING_ROLE),
                ("s/e1/sc0003 Ada", MISSING_SCENARIO),
                ("s/e1/sc0003 Cy", MISSING_SCENARIO),
            ]
        );

        // "adult" is 18-64: its middle (41) is not in Ada's thirties; unreadable is wrong.
        let age = field(&score, "age");
        assert_eq!((age.correct, age.total), (0, 6));
        assert_eq!(age.wrong[0].expected, "30-39 years");
        assert_eq!(age.wrong[0].got, "adult");
        assert_eq!(age.wrong[2].got, "he seems nice (not an age)");

        // "unknown" where the script says is wrong; "clerical" is not the word "clerk".
        let occupation = field(&score, "occupation");
        assert_eq!((occupation.correct, occupation.total), (0, 6));
        assert_eq!(occupation.wrong[0].got, "unknown");
        assert_eq!(
            occupation.wrong[2].expected,
            "rental clerk (any of: clerk, rental agent)"
        );

        let competes = field(&score, "competes");
        assert_eq!((competes.correct, competes.total), (0, 1));
        assert_eq!(competes.wrong[0].got, "avoiding");

        let text = Scorecard {
            export: "data.jsonl".into(),
            records: records.len(),
            truth: Some(score),
            gates: None,
            stale: Some("an old export".to_string()),
            review: None,
        }
        .render();
        assert!(text.contains("  warning: an old export\n"), "{text}");
        assert!(
            text.contains("missing from the export (all wrong): s/e1/sc0003"),
            "{text}"
        );
        assert!(text.contains("gender         1/6 correct (17%)"), "{text}");
        assert!(
            text.contains("s/e1/sc0001 Ada: expected female, got male"),
            "{text}"
        );
    }

    #[test]
    fn an_empty_export_scores_zero_and_unknown_truth_wants_unknown() {
        let score = score(&truth(), Path::new("t.toml"), &[]);
        assert_eq!(score.missing_scenarios.len(), 3);
        assert_eq!((score.correct, score.total), (0, 25));
        // A guess where the script gives no cue is wrong.
        assert!(wrong_age(Some("30s"), UNKNOWN).is_some());
        assert!(wrong_age(Some("unknown"), UNKNOWN).is_none());
        assert!(wrong_age(Some("unknown"), "30-39").is_some());
        assert!(wrong_occupation(Some("nurse"), UNKNOWN, &[]).is_some());
        assert!(wrong_label(Some("unknown"), "unknown").is_none());
    }

    #[test]
    fn free_text_ages() {
        let r = |low: u32, high: u32| {
            AnswerAge::Range(AgeRange {
                low: f64::from(low),
                high: f64::from(high),
            })
        };
        assert_eq!(answer_age("30s"), r(30, 39));
        assert_eq!(answer_age("early 30s"), r(30, 33));
        assert_eq!(answer_age("Late thirties"), r(36, 39));
        assert_eq!(answer_age("mid-40s"), r(43, 46));
        assert_eq!(answer_age("25-30"), r(25, 30));
        assert_eq!(answer_age("about 35 years old"), r(35, 35));
        assert_eq!(answer_age("middle-aged"), r(40, 60));
        assert_eq!(answer_age("young adult"), r(18, 29));
        assert_eq!(answer_age("teenager"), r(13, 19));
        assert_eq!(answer_age("Unknown"), AnswerAge::Unknown);
        assert_eq!(answer_age(""), AnswerAge::Unknown);
        assert_eq!(answer_age("he is nice"), AnswerAge::Unreadable);
    }

    #[test]
    fn reads_records_and_names_a_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.jsonl");
        std::fs::write(&path, "{\"id\": \"a\"}\n\n{\"roles\": []}\n").unwrap();
        let error = read_records(&path).unwrap_err().to_string();
        assert!(
            error.ends_with("data.jsonl:3: not a benchmark record: no string `id`"),
            "{error}"
        );
        std::fs::write(&path, "{\"id\": \"a\"}\n").unwrap();
        assert_eq!(read_records(&path).unwrap().len(), 1);
    }
}
