//! Content hashes: every artifact, input and cache key is named by the blake3 hash of its bytes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, schemars::JsonSchema)]
pub struct ContentHash([u8; 32]);

impl ContentHash {
    pub fn of(bytes: &[u8]) -> Self {
        Self(*blake3::hash(bytes).as_bytes())
    }

    pub fn from_hasher(hasher: &blake3::Hasher) -> Self {
        Self(*hasher.finalize().as_bytes())
    }

    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    /// The first 12 hex digits: enough to tell hashes apart in messages.
    pub fn short(&self) -> String {
        self.to_hex()[..12].to_string()
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({})", self.short())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("not a blake3 hash: {0:?} (expected 64 hex digits)")]
pub struct ParseHashError(String);

impl FromStr for ContentHash {
    type Err = ParseHashError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        blake3::Hash::from_hex(s)
            .map(|h| Self(*h.as_bytes()))
            .map_err(|_| ParseHashError(s.to_string()))
    }
}

/// Hex in human-readable formats (JSON records a person may read), raw bytes in binary ones
/// (the index, where decoding speed is the no-op rebuild's cost).
impl Serialize for ContentHash {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&self.to_hex())
        } else {
            self.0.serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for ContentHash {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
            text.parse().map_err(serde::de::Error::custom)
        } else {
            <[u8; 32]>::deserialize(deserializer).map(Self)
        }
    }
}

/// `value` as compact JSON with every object's keys sorted, so that equal values give equal
/// bytes however their maps were built (serde_json's maps keep insertion order in this build).
/// The bytes are what `serde_json::to_string` wrote when its maps were sorted, so keys hashed
/// over them before stay the same.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (name, field)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(name.as_str()).to_string());
                out.push(':');
                write_canonical(field, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_level_whatever_the_insertion_order() {
        let value = serde_json::json!({"b": {"z": 1, "a": [true, null, "x\"y"]}, "a": 2.5});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":2.5,"b":{"a":[true,null,"x\"y"],"z":1}}"#
        );
        let other_order = serde_json::json!({"a": 2.5, "b": {"a": [true, null, "x\"y"], "z": 1}});
        assert_eq!(canonical_json(&value), canonical_json(&other_order));
    }

    #[test]
    fn hex_round_trip() {
        let hash = ContentHash::of(b"viss");
        let parsed: ContentHash = hash.to_hex().parse().unwrap();
        assert_eq!(hash, parsed);
        assert_eq!(hash.short().len(), 12);
        assert!("xyz".parse::<ContentHash>().is_err());
    }

    #[test]
    fn serde_is_hex_in_json_and_raw_in_postcard() {
        let hash = ContentHash::of(b"viss");
        let json = serde_json::to_string(&hash).unwrap();
        assert_eq!(json, format!("\"{}\"", hash.to_hex()));
        assert_eq!(serde_json::from_str::<ContentHash>(&json).unwrap(), hash);
        let binary = postcard::to_stdvec(&hash).unwrap();
        assert_eq!(binary.len(), 32);
        assert_eq!(postcard::from_bytes::<ContentHash>(&binary).unwrap(), hash);
    }
}
