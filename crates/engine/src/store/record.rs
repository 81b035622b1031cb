//! What the index keeps of one run: its [`Record`] (outputs, children, time, usage, error,
//! flags, problems, statistics) and how it is laid out in bytes, so that every store written
//! since layout 3 still reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hash::ContentHash;

/// Usage of paid or slow resources by one run, summed per stage by `viss status`: in all, and
/// per model (`local`, `openai:gpt-4o-mini`, ...).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Every answer a model gave (and was paid for), usable or not.
    pub llm_calls: u64,
    /// Of `llm_calls`, the answers that could not be used (not JSON, not a chat completion, or
    /// rejected by the stage's checks): the model was asked again, or the item failed. Their
    /// tokens and cost are in the totals.
    pub rejected_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
    pub by_model: BTreeMap<String, ModelUsage>,
}

/// What one model was asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelUsage {
    pub calls: u64,
    /// Of `calls`, the unusable answers (see [`Usage::rejected_calls`]).
    pub rejected_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
}

impl ModelUsage {
    fn add(&mut self, other: &ModelUsage) {
        self.calls += other.calls;
        self.rejected_calls += other.rejected_calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cost_usd += other.cost_usd;
    }
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.llm_calls += other.llm_calls;
        self.rejected_calls += other.rejected_calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cost_usd += other.cost_usd;
        for (model, usage) in &other.by_model {
            self.by_model.entry(model.clone()).or_default().add(usage);
        }
    }

    /// Adds calls answered by `model`.
    pub fn add_model(&mut self, model: &str, usage: &ModelUsage) {
        self.add(&Usage {
            llm_calls: usage.calls,
            rejected_calls: usage.rejected_calls,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cost_usd: usage.cost_usd,
            by_model: [(model.to_string(), usage.clone())].into(),
        });
    }
}

/// What the index remembers of the last run of one (stage, item). Stored in postcard (a
/// compact binary format without field names: every field is always written), as
/// [`Record::encode`] lays it out.
///
/// The outputs are a function of the item's inputs; everything else here is about the run that
/// made them (when, how long, what it spent and counted), and is never part of an output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `None` when the item failed before a key could be computed (bad manifest entry).
    pub key: Option<ContentHash>,
    pub outputs: BTreeMap<String, ContentHash>,
    /// Items of a finer level this run introduced (an episode's scenarios).
    pub children: Vec<String>,
    pub finished_unix_ms: u64,
    pub duration_ms: u64,
    pub usage: Usage,
    pub error: Option<String>,
    /// Warnings about a successful run; see `Outputs::flags`.
    pub flags: Vec<String>,
    /// The quality gates the kept answer failed: the item is flagged (see `Outputs::problems`).
    pub problems: Vec<crate::problem::Problem>,
    /// What the run counted (texts embedded vs taken from the memo, answers read from the LLM
    /// response cache, ...), by name; see `JobCtx::count`.
    pub stats: BTreeMap<String, u64>,
}

impl Record {
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// The index's bytes: the fields layout 3 was first written with, then [`RecordAdditions`].
    /// Records written before the additions existed decode with them empty, and an older viss
    /// reads a newer record up to where its own fields end (postcard ignores the rest), so no
    /// store, and no paid LLM answer in its memo, is lost to the change.
    pub fn encode(&self) -> Vec<u8> {
        let usage = &self.usage;
        let first = RecordFirst {
            key: self.key,
            outputs: self.outputs.clone(),
            children: self.children.clone(),
            finished_unix_ms: self.finished_unix_ms,
            duration_ms: self.duration_ms,
            usage: UsageFirst {
                llm_calls: usage.llm_calls,
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cost_usd: usage.cost_usd,
                by_model: usage
                    .by_model
                    .iter()
                    .map(|(model, m)| {
                        let first = ModelUsageFirst {
                            calls: m.calls,
                            prompt_tokens: m.prompt_tokens,
                            completion_tokens: m.completion_tokens,
                            cost_usd: m.cost_usd,
                        };
                        (model.clone(), first)
                    })
                    .collect(),
            },
            error: self.error.clone(),
            flags: self.flags.clone(),
        };
        let additions = RecordAdditions {
            rejected_calls: usage.rejected_calls,
            rejected_by_model: usage
                .by_model
                .iter()
                .filter(|(_, m)| m.rejected_calls > 0)
                .map(|(model, m)| (model.clone(), m.rejected_calls))
                .collect(),
            stats: self.stats.clone(),
        };
        let mut bytes = postcard::to_stdvec(&first).expect("records serialize");
        bytes.extend(postcard::to_stdvec(&additions).expect("records serialize"));
        if !self.problems.is_empty() {
            let later = RecordLaterAdditions {
                problems: self.problems.clone(),
            };
            bytes.extend(postcard::to_stdvec(&later).expect("records serialize"));
        }
        bytes
    }

    /// Reads what [`Record::encode`] wrote, or a record written before [`RecordAdditions`].
    pub fn decode(bytes: &[u8]) -> Result<Self, postcard::Error> {
        let (first, rest) = postcard::take_from_bytes::<RecordFirst>(bytes)?;
        let (additions, rest) = if rest.is_empty() {
            (RecordAdditions::default(), rest)
        } else {
            postcard::take_from_bytes::<RecordAdditions>(rest)?
        };
        let later: RecordLaterAdditions = if rest.is_empty() {
            RecordLaterAdditions::default()
        } else {
            postcard::from_bytes(rest)?
        };
        let by_model = first
            .usage
            .by_model
            .into_iter()
            .map(|(model, m)| {
                let rejected_calls = additions
                    .rejected_by_model
                    .get(&model)
                    .copied()
                    .unwrap_or(0);
                let usage = ModelUsage {
                    calls: m.calls,
                    rejected_calls,
                    prompt_tokens: m.prompt_tokens,
                    completion_tokens: m.completion_tokens,
                    cost_usd: m.cost_usd,
                };
                (model, usage)
            })
            .collect();
        Ok(Record {
            key: first.key,
            outputs: first.outputs,
            children: first.children,
            finished_unix_ms: first.finished_unix_ms,
            duration_ms: first.duration_ms,
            usage: Usage {
                llm_calls: first.usage.llm_calls,
                rejected_calls: additions.rejected_calls,
                prompt_tokens: first.usage.prompt_tokens,
                completion_tokens: first.usage.completion_tokens,
                cost_usd: first.usage.cost_usd,
                by_model,
            },
            error: first.error,
            flags: first.flags,
            stats: additions.stats,
            problems: later.problems,
        })
    }
}

/// A [`Record`] as layout 3 first wrote it. Never change it: add to [`RecordAdditions`].
#[derive(Serialize, Deserialize)]
struct RecordFirst {
    key: Option<ContentHash>,
    outputs: BTreeMap<String, ContentHash>,
    children: Vec<String>,
    finished_unix_ms: u64,
    duration_ms: u64,
    usage: UsageFirst,
    error: Option<String>,
    flags: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct UsageFirst {
    llm_calls: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    cost_usd: f64,
    by_model: BTreeMap<String, ModelUsageFirst>,
}

#[derive(Serialize, Deserialize)]
struct ModelUsageFirst {
    calls: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    cost_usd: f64,
}

/// What a record holds beyond [`RecordFirst`], written after it. Only ever append fields here.
#[derive(Default, Serialize, Deserialize)]
struct RecordAdditions {
    rejected_calls: u64,
    rejected_by_model: BTreeMap<String, u64>,
    stats: BTreeMap<String, u64>,
}

/// What a record holds beyond [`RecordAdditions`], written after it only when there is any
/// (so a record without problems has the bytes it always had). Only ever append fields here.
#[derive(Default, Serialize, Deserialize)]
struct RecordLaterAdditions {
    problems: Vec<crate::problem::Problem>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_record() -> Record {
        let mut usage = Usage::default();
        usage.add_model(
            "mock:m",
            &ModelUsage {
                calls: 6,
                rejected_calls: 5,
                prompt_tokens: 600,
                completion_tokens: 120,
                cost_usd: 0.00084,
            },
        );
        Record {
            key: Some(ContentHash::of(b"key")),
            outputs: [("out".to_string(), ContentHash::of(b"out"))].into(),
            children: vec!["a/b/c".into()],
            finished_unix_ms: 1_700_000_000_000,
            duration_ms: 42,
            usage,
            error: Some("it failed".into()),
            flags: vec!["look at this".into()],
            problems: Vec::new(),
            stats: [("texts_embedded".to_string(), 7)].into(),
        }
    }

    #[test]
    fn records_round_trip_with_rejected_calls_and_run_statistics() {
        let record = sample_record();
        assert_eq!(Record::decode(&record.encode()).unwrap(), record);
    }

    #[test]
    fn a_flagged_record_round_trips_and_an_unflagged_one_keeps_its_bytes() {
        let clean = sample_record();
        let mut flagged = clean.clone();
        flagged.problems = vec![
            crate::problem::Problem {
                role: Some("Noor".into()),
                field: Some("belief".into()),
                kind: "belief states X's own feeling".into(),
                message: "Noor: belief states Noor's own feeling; write what Noor holds true"
                    .into(),
            },
            crate::problem::Problem {
                role: None,
                field: None,
                kind: "the scene's own".into(),
                message: "no role or field".into(),
            },
        ];
        let bytes = flagged.encode();
        assert_eq!(Record::decode(&bytes).unwrap(), flagged);
        // The problems come after everything an older viss reads.
        assert!(bytes.starts_with(&clean.encode()));
        let (_, rest) = postcard::take_from_bytes::<RecordFirst>(&bytes).unwrap();
        assert!(postcard::from_bytes::<RecordAdditions>(rest).is_ok());
    }

    /// Records written before rejected calls and run statistics were kept still decode (so a
    /// store keeps its memo of paid answers across the change), and an older viss reads the
    /// fields it knows from a newer record.
    #[test]
    fn records_of_the_first_layout_3_encoding_still_decode_and_vice_versa() {
        let record = sample_record();
        let usage = &record.usage;
        let first = RecordFirst {
            key: record.key,
            outputs: record.outputs.clone(),
            children: record.children.clone(),
            finished_unix_ms: record.finished_unix_ms,
            duration_ms: record.duration_ms,
            usage: UsageFirst {
                llm_calls: usage.llm_calls,
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cost_usd: usage.cost_usd,
                by_model: [(
                    "mock:m".to_string(),
                    ModelUsageFirst {
                        calls: 6,
                        prompt_tokens: 600,
                        completion_tokens: 120,
                        cost_usd: 0.00084,
                    },
                )]
                .into(),
            },
            error: record.error.clone(),
            flags: record.flags.clone(),
        };
        let old_bytes = postcard::to_stdvec(&first).unwrap();
        let decoded = Record::decode(&old_bytes).unwrap();
        let mut expected = record.clone();
        expected.usage.rejected_calls = 0;
        expected
            .usage
            .by_model
            .get_mut("mock:m")
            .unwrap()
            .rejected_calls = 0;
        expected.stats.clear();
        assert_eq!(decoded, expected);
        // What an older viss does with a newer record: decode its own fields, ignore the rest.
        let seen_by_old: RecordFirst = postcard::from_bytes(&record.encode()).unwrap();
        assert_eq!(postcard::to_stdvec(&seen_by_old).unwrap(), old_bytes);
    }
}
