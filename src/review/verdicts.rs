//! The verdict files: `manifests/reviews/<reviewer>.jsonl`, one JSON object a line, appended as
//! a person decides, committed with the project like its manifests. A verdict names the answer
//! it judged by its content hash, so it holds for as long as a rebuild gives that same answer
//! and is stale once the answer changes.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ReviewError;
use crate::hash::ContentHash;

/// What a person said of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// The answer is right as it stands, its flagged problems included.
    Accept,
    /// The answer is wrong: its scenario is left out of the export.
    Reject,
    /// One field is wrong: `value` replaces it for every later stage.
    Edit,
}

impl VerdictKind {
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Accept => "accept",
            VerdictKind::Reject => "reject",
            VerdictKind::Edit => "edit",
        }
    }
}

/// One line of a verdict file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    /// The scenario, e.g. `demo/s01e01/scd51d`.
    pub item: String,
    pub stage: String,
    /// The content hash of the stored answer (the stage's record) judged.
    pub answer: ContentHash,
    /// For an edit: the participant whose entry it changes (`None`: a field of the scene).
    #[serde(default)]
    pub role: Option<String>,
    /// For an edit: the field it changes.
    #[serde(default)]
    pub field: Option<String>,
    pub verdict: VerdictKind,
    /// For an edit: the field's new value.
    #[serde(default)]
    pub value: Option<Value>,
    #[serde(default)]
    pub comment: Option<String>,
    /// When it was given, RFC 3339 in UTC (`2026-12-02T14:03:11Z`).
    pub time: String,
}

impl Verdict {
    /// The field it edits as a person names it: `background`, or `Ada.age` for a role's.
    pub fn field_path(&self) -> Option<String> {
        let field = self.field.as_deref()?;
        Some(super::queue::field_label(self.role.as_deref(), field))
    }
}

/// The time now as verdicts write it.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A reviewer's name as it may name a file: letters, digits, `-`, `_` and `.`, not starting
/// with a dot.
pub fn check_reviewer(name: &str) -> Result<(), ReviewError> {
    let fine = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if fine {
        Ok(())
    } else {
        Err(ReviewError::BadReviewer(name.to_string()))
    }
}

/// Every reviewer's verdicts, as the files hold them.
#[derive(Debug, Clone, Default)]
pub struct Reviews {
    /// By reviewer, each reviewer's verdicts in the order given.
    pub by_reviewer: BTreeMap<String, Vec<Verdict>>,
}

/// The verdicts that hold for one answer: the latest accept or reject, and per field the latest
/// edit (across reviewers, by time; within one reviewer's file, the later line).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Standing {
    pub decision: Option<(String, Verdict)>,
    pub edits: BTreeMap<(Option<String>, String), (String, Verdict)>,
}

impl Standing {
    pub fn is_empty(&self) -> bool {
        self.decision.is_none() && self.edits.is_empty()
    }

    pub fn rejected(&self) -> bool {
        self.decision
            .as_ref()
            .is_some_and(|(_, v)| v.verdict == VerdictKind::Reject)
    }

    pub fn accepted(&self) -> bool {
        self.decision
            .as_ref()
            .is_some_and(|(_, v)| v.verdict == VerdictKind::Accept)
    }

    /// Who gave the verdicts that hold, each once.
    pub fn reviewers(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .decision
            .iter()
            .chain(self.edits.values())
            .map(|(reviewer, _)| reviewer.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

impl Reviews {
    /// Reads every `*.jsonl` under `dir` (none: no reviews).
    pub fn load(dir: &Path) -> Result<Self, ReviewError> {
        let mut reviews = Reviews::default();
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(reviews),
            Err(source) => {
                return Err(ReviewError::Io {
                    path: dir.to_path_buf(),
                    source,
                });
            }
        };
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        files.sort();
        for path in files {
            let reviewer = path
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let verdicts = read_file(&path)?;
            reviews.by_reviewer.insert(reviewer, verdicts);
        }
        Ok(reviews)
    }

    pub fn is_empty(&self) -> bool {
        self.by_reviewer.values().all(Vec::is_empty)
    }

    /// Every verdict with its reviewer.
    pub fn all(&self) -> impl Iterator<Item = (&str, &Verdict)> {
        self.by_reviewer
            .iter()
            .flat_map(|(name, verdicts)| verdicts.iter().map(move |v| (name.as_str(), v)))
    }

    /// The verdicts on (stage, item) whose answer is `answer`, as they stand.
    pub fn standing(&self, stage: &str, item: &str, answer: ContentHash) -> Standing {
        let mut standing = Standing::default();
        let mut on: Vec<(&str, &Verdict)> = self
            .all()
            .filter(|(_, v)| v.stage == stage && v.item == item && v.answer == answer)
            .collect();
        // Stable: equal times keep their file order.
        on.sort_by(|a, b| a.1.time.cmp(&b.1.time));
        for (reviewer, verdict) in on {
            let given = (reviewer.to_string(), verdict.clone());
            match verdict.verdict {
                VerdictKind::Accept | VerdictKind::Reject => standing.decision = Some(given),
                VerdictKind::Edit => {
                    let field = verdict.field.clone().unwrap_or_default();
                    standing.edits.insert((verdict.role.clone(), field), given);
                }
            }
        }
        standing
    }

    /// Whether `reviewer` has a verdict on this very answer.
    pub fn reviewed_by(
        &self,
        reviewer: &str,
        stage: &str,
        item: &str,
        answer: ContentHash,
    ) -> bool {
        self.by_reviewer.get(reviewer).is_some_and(|verdicts| {
            verdicts
                .iter()
                .any(|v| v.stage == stage && v.item == item && v.answer == answer)
        })
    }
}

fn read_file(path: &Path) -> Result<Vec<Verdict>, ReviewError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReviewError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut verdicts = Vec::new();
    for (at, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let verdict: Verdict = serde_json::from_str(line).map_err(|e| ReviewError::BadLine {
            path: path.to_path_buf(),
            line: at + 1,
            message: e.to_string(),
        })?;
        let edit = verdict.verdict == VerdictKind::Edit;
        if edit != (verdict.field.is_some() && verdict.value.is_some()) {
            return Err(ReviewError::BadLine {
                path: path.to_path_buf(),
                line: at + 1,
                message: "an edit names a `field` and its `value`; accept and reject name neither"
                    .to_string(),
            });
        }
        verdicts.push(verdict);
    }
    Ok(verdicts)
}

/// Appends `verdict` to `reviewer`'s file under `dir`, synced before it returns: a verdict once
/// confirmed is not lost to a crash.
pub fn append(dir: &Path, reviewer: &str, verdict: &Verdict) -> Result<(), ReviewError> {
    check_reviewer(reviewer)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReviewError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join(format!("{reviewer}.jsonl"));
    let mut line = serde_json::to_string(verdict).expect("verdicts serialize");
    line.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io(&path))?;
    file.write_all(line.as_bytes()).map_err(io(&path))?;
    file.sync_data().map_err(io(&path))
}
