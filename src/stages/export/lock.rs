//! `viss.lock`: the blake3 hash of every file of an exported dataset and of every record each
//! scenario was assembled from. It holds nothing that depends on when or where it was built
//! (no times, no absolute paths, no run statistics), so two builds that made the same
//! benchmark have byte-identical locks, and `diff` of two locks names the scenario, and the
//! stage's record within it, where they part.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hash::ContentHash;

pub const LOCK_FILE: &str = "viss.lock";

/// Bumped when the lock's layout changes.
pub const LOCK_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetLock {
    pub version: u32,
    /// Every file of the dataset but the lock itself, by path relative to the dataset directory.
    pub files: BTreeMap<String, ContentHash>,
    pub scenarios: BTreeMap<String, ScenarioLock>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioLock {
    /// blake3 of the scenario's line in data.jsonl (without the newline).
    pub record: ContentHash,
    /// The artifact hash of each stage's record the line was made from, by stage.
    pub inputs: BTreeMap<String, ContentHash>,
}

const HEADER: &str = "# viss.lock: blake3 of every file of this dataset and of every stage record \
                      each scenario was\n\
# assembled from. Two builds of the same benchmark have identical locks; diff two locks to find\n\
# the scenario and the stage where they differ. Written by `viss export`; do not edit.\n";

impl DatasetLock {
    pub fn render(&self) -> String {
        let body = toml::to_string(self).expect("the lock serializes");
        format!("{HEADER}\n{body}")
    }

    pub fn parse(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_renders_sorted_and_parses_back() {
        let hash = |s: &str| ContentHash::of(s.as_bytes());
        let lock = DatasetLock {
            version: LOCK_VERSION,
            files: [
                ("data.jsonl".to_string(), hash("d")),
                ("README.md".to_string(), hash("r")),
            ]
            .into(),
            scenarios: [(
                "van/e1/sc001".to_string(),
                ScenarioLock {
                    record: hash("line"),
                    inputs: [
                        ("tasks".to_string(), hash("t")),
                        ("annotate".to_string(), hash("a")),
                    ]
                    .into(),
                },
            )]
            .into(),
        };
        let text = lock.render();
        assert!(text.starts_with("# viss.lock"));
        assert!(
            text.find("README.md").unwrap() < text.find("data.jsonl").unwrap(),
            "{text}"
        );
        assert!(
            text.find("annotate").unwrap() < text.find("tasks").unwrap(),
            "{text}"
        );
        assert!(text.contains(&hash("line").to_hex()));
        assert_eq!(DatasetLock::parse(&text).unwrap(), lock);
    }
}
