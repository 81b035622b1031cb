//! The cache key of one (stage, item): what must be equal for a stored result to be reused.
//!
//! key = blake3(stage name, code version, canonical params (keys sorted), bytes of every prompt
//! template the stage renders, model identities, the versions of shared code and record schemas
//! it rests on (`Stage::code`), sorted input artifact hashes). Everything but the inputs is
//! the same for all items of a stage, so it is hashed once per build into a [`StageFingerprint`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hash::{ContentHash, canonical_json};

/// The parts of a key, kept beside each record so `viss status --why` can say what changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyParts {
    pub stage: String,
    pub version: u32,
    pub params: serde_json::Value,
    pub prompts: BTreeMap<String, ContentHash>,
    pub models: BTreeMap<String, String>,
    /// What the stage's code rests on beyond its own version (`Stage::code`): shared code's
    /// versions and hashes of the schemas it writes, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub code: BTreeMap<String, String>,
    /// The hash of each written record type's JSON schema, by port (`cast.cast`): a change to
    /// what a record holds re-runs the stage that writes it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub records: BTreeMap<String, String>,
    /// `need:item:output` (or `source` for a root stage's raw inputs) -> artifact hash.
    pub inputs: BTreeMap<String, ContentHash>,
}

/// One input of a key, borrowed: output `name` of stage `need`'s item `item`. A root stage's
/// raw sources are the single input with need `source`.
#[derive(Debug, Clone, Copy)]
pub struct InputRef<'a> {
    pub need: &'a str,
    pub item: &'a str,
    pub name: &'a str,
    pub hash: ContentHash,
}

pub const SOURCE_INPUT: &str = "source";

impl InputRef<'_> {
    /// How `status --why` names this input.
    pub fn label(&self) -> String {
        if self.need == SOURCE_INPUT {
            SOURCE_INPUT.to_string()
        } else {
            format!("{}:{}:{}", self.need, self.item, self.name)
        }
    }
}

/// The item-independent part of a key.
#[derive(Debug, Clone)]
pub struct StageFingerprint {
    pub parts: KeyParts,
    digest: blake3::Hasher,
}

impl StageFingerprint {
    pub fn new(
        stage: &str,
        version: u32,
        params: serde_json::Value,
        prompts: BTreeMap<String, ContentHash>,
        models: BTreeMap<String, String>,
        code: BTreeMap<String, String>,
        records: BTreeMap<String, String>,
    ) -> Self {
        let mut digest = blake3::Hasher::new();
        digest.update(b"viss-key-v1\0");
        field(&mut digest, stage.as_bytes());
        digest.update(&version.to_le_bytes());
        field(&mut digest, canonical_json(&params).as_bytes());
        digest.update(&(prompts.len() as u64).to_le_bytes());
        for (name, hash) in &prompts {
            field(&mut digest, name.as_bytes());
            digest.update(hash.as_bytes());
        }
        digest.update(&(models.len() as u64).to_le_bytes());
        for (role, identity) in &models {
            field(&mut digest, role.as_bytes());
            field(&mut digest, identity.as_bytes());
        }
        named_entries(&mut digest, b"code\0", &code);
        named_entries(&mut digest, b"records\0", &records);
        let parts = KeyParts {
            stage: stage.to_string(),
            version,
            params,
            prompts,
            models,
            code,
            records,
            inputs: BTreeMap::new(),
        };
        Self { parts, digest }
    }

    /// The full key for one item. Inputs are sorted first, so their order does not matter.
    pub fn key(&self, inputs: &mut [InputRef<'_>]) -> ContentHash {
        inputs.sort_unstable_by(|a, b| (a.need, a.item, a.name).cmp(&(b.need, b.item, b.name)));
        let mut digest = self.digest.clone();
        digest.update(&(inputs.len() as u64).to_le_bytes());
        for input in inputs.iter() {
            field(&mut digest, input.need.as_bytes());
            field(&mut digest, input.item.as_bytes());
            field(&mut digest, input.name.as_bytes());
            digest.update(input.hash.as_bytes());
        }
        ContentHash::from_hasher(&digest)
    }

    pub fn parts_with(&self, inputs: &[InputRef<'_>]) -> KeyParts {
        let inputs = inputs.iter().map(|i| (i.label(), i.hash)).collect();
        KeyParts {
            inputs,
            ..self.parts.clone()
        }
    }
}

/// Every name whose value differs between `was` and `now` (or is in one only), with both values.
fn changed_entries<'a>(
    was: &'a BTreeMap<String, String>,
    now: &'a BTreeMap<String, String>,
) -> impl Iterator<Item = (String, Option<String>, Option<String>)> + 'a {
    let names: std::collections::BTreeSet<&String> = was.keys().chain(now.keys()).collect();
    names.into_iter().filter_map(|name| {
        let (was, now) = (was.get(name), now.get(name));
        (was != now).then(|| (name.clone(), was.cloned(), now.cloned()))
    })
}

/// A tagged map of names to values, only when there is any, so the keys of a stage resting on
/// none of them stay as they were before the map entered the key.
fn named_entries(digest: &mut blake3::Hasher, tag: &[u8], entries: &BTreeMap<String, String>) {
    if entries.is_empty() {
        return;
    }
    digest.update(tag);
    digest.update(&(entries.len() as u64).to_le_bytes());
    for (name, value) in entries {
        field(digest, name.as_bytes());
        field(digest, value.as_bytes());
    }
}

/// Length-prefixed, so ("ab","c") and ("a","bc") hash differently.
fn field(digest: &mut blake3::Hasher, bytes: &[u8]) {
    digest.update(&(bytes.len() as u64).to_le_bytes());
    digest.update(bytes);
}

/// One reason a stored result no longer applies.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "changed", rename_all = "snake_case")]
pub enum KeyChange {
    Version {
        was: u32,
        now: u32,
    },
    Param {
        name: String,
        was: Option<serde_json::Value>,
        now: Option<serde_json::Value>,
    },
    Prompt {
        name: String,
    },
    Model {
        role: String,
        was: Option<String>,
        now: Option<String>,
    },
    Code {
        name: String,
        was: Option<String>,
        now: Option<String>,
    },
    Record {
        port: String,
        was: Option<String>,
        now: Option<String>,
    },
    Input {
        label: String,
    },
    InputAdded {
        label: String,
    },
    InputRemoved {
        label: String,
    },
}

impl std::fmt::Display for KeyChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<serde_json::Value>| {
            v.as_ref().map_or("(unset)".to_string(), |v| v.to_string())
        };
        match self {
            KeyChange::Version { was, now } => write!(f, "stage code version {was} -> {now}"),
            KeyChange::Param { name, was, now } => {
                write!(f, "param `{name}`: {} -> {}", show(was), show(now))
            }
            KeyChange::Prompt { name } => write!(f, "prompt template `{name}` was edited"),
            KeyChange::Model { role, was, now } => write!(
                f,
                "model `{role}`: {} -> {}",
                was.as_deref().unwrap_or("(none)"),
                now.as_deref().unwrap_or("(none)")
            ),
            KeyChange::Code { name, was, now } => write!(
                f,
                "shared code `{name}`: {} -> {}",
                was.as_deref().unwrap_or("(none)"),
                now.as_deref().unwrap_or("(none)")
            ),
            KeyChange::Record { port, was, now } => write!(
                f,
                "record type of `{port}` changed: schema {} -> {}",
                was.as_deref().unwrap_or("(none)"),
                now.as_deref().unwrap_or("(none)")
            ),
            KeyChange::Input { label } => write!(f, "input `{label}` has new content"),
            KeyChange::InputAdded { label } => write!(f, "new input `{label}`"),
            KeyChange::InputRemoved { label } => write!(f, "input `{label}` is gone"),
        }
    }
}

impl KeyParts {
    /// What differs between the parts a record was built with (`self`) and the current ones.
    pub fn changes_to(&self, now: &KeyParts) -> Vec<KeyChange> {
        let mut changes = Vec::new();
        if self.version != now.version {
            changes.push(KeyChange::Version {
                was: self.version,
                now: now.version,
            });
        }
        let empty = serde_json::Map::new();
        let was_params = self.params.as_object().unwrap_or(&empty);
        let now_params = now.params.as_object().unwrap_or(&empty);
        let names: std::collections::BTreeSet<&String> =
            was_params.keys().chain(now_params.keys()).collect();
        for name in names {
            let (was, now) = (was_params.get(name), now_params.get(name));
            if was != now {
                changes.push(KeyChange::Param {
                    name: name.clone(),
                    was: was.cloned(),
                    now: now.cloned(),
                });
            }
        }
        for (name, hash) in &now.prompts {
            if self.prompts.get(name) != Some(hash) {
                changes.push(KeyChange::Prompt { name: name.clone() });
            }
        }
        changes.extend(
            changed_entries(&self.models, &now.models).map(|(role, was, now)| KeyChange::Model {
                role,
                was,
                now,
            }),
        );
        changes.extend(
            changed_entries(&self.code, &now.code).map(|(name, was, now)| KeyChange::Code {
                name,
                was,
                now,
            }),
        );
        changes.extend(
            changed_entries(&self.records, &now.records)
                .map(|(port, was, now)| KeyChange::Record { port, was, now }),
        );
        for (label, hash) in &now.inputs {
            match self.inputs.get(label) {
                None => changes.push(KeyChange::InputAdded {
                    label: label.clone(),
                }),
                Some(old) if old != hash => changes.push(KeyChange::Input {
                    label: label.clone(),
                }),
                Some(_) => {}
            }
        }
        for label in self.inputs.keys() {
            if !now.inputs.contains_key(label) {
                changes.push(KeyChange::InputRemoved {
                    label: label.clone(),
                });
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(params: serde_json::Value) -> StageFingerprint {
        StageFingerprint::new(
            "s",
            1,
            params,
            BTreeMap::new(),
            BTreeMap::new(),
            BTreeMap::new(),
            BTreeMap::new(),
        )
    }

    fn input(need: &'static str, hash: &[u8]) -> InputRef<'static> {
        InputRef {
            need,
            item: "i",
            name: "out",
            hash: ContentHash::of(hash),
        }
    }

    #[test]
    fn key_depends_on_params_and_inputs_only_through_their_content() {
        let a = fingerprint(serde_json::json!({"alpha": 0.8}));
        let b = fingerprint(serde_json::json!({"alpha": 0.5}));
        let mut inputs = [input("x", b"1"), input("y", b"2")];
        let mut reordered = [input("y", b"2"), input("x", b"1")];
        assert_eq!(
            a.key(&mut inputs),
            fingerprint(serde_json::json!({"alpha": 0.8})).key(&mut reordered)
        );
        assert_ne!(a.key(&mut inputs), b.key(&mut inputs));
        let mut other = [input("x", b"1"), input("y", b"3")];
        assert_ne!(a.key(&mut inputs), a.key(&mut other));
        // Field boundaries are part of the key: ("ab", "c") is not ("a", "bc").
        let mut split = [InputRef {
            need: "ab",
            item: "c",
            name: "o",
            hash: ContentHash::of(b"1"),
        }];
        let mut moved = [InputRef {
            need: "a",
            item: "bc",
            name: "o",
            hash: ContentHash::of(b"1"),
        }];
        assert_ne!(a.key(&mut split), a.key(&mut moved));
    }

    #[test]
    fn changes_name_what_differs() {
        let old = fingerprint(serde_json::json!({"alpha": 0.8, "k1": 1.5}));
        let new = fingerprint(serde_json::json!({"alpha": 0.5, "k1": 1.5}));
        let changes = old.parts.changes_to(&new.parts);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].to_string(), "param `alpha`: 0.8 -> 0.5");
    }
}
