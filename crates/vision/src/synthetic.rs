//! The records of the benchmark's images: the stylised group image G and the role portraits.
//!
//! These are the contract between the stages that make images (`group_image`, `portraits`) and
//! the stage that ships them (`export`). Every PNG is also an output of the stage that made it,
//! so the store keeps it and the lock file lists it; the record names it by hash.

use serde::{Deserialize, Serialize};

use viss_engine::hash::ContentHash;

/// An image viss made rather than took from the source. `synthetic` is always true in what
/// viss writes: it is in the record so that a consumer of the dataset never has to infer it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyntheticImage {
    /// The PNG's content hash (also an output of the stage that made it).
    pub png: ContentHash,
    pub width: u32,
    pub height: u32,
    pub synthetic: bool,
    /// What made it: `local:<filter>/<version>` offline, `ENDPOINT:MODEL` for an image endpoint.
    pub backend: String,
}

/// The scenario's stylised group image G.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupImageRecord {
    pub scenario: String,
    pub image: SyntheticImage,
    /// Time in the source video of the frame it was made from, in seconds.
    pub source_frame_seconds: f64,
}

/// One portrait per role; a role with no usable face has `image: None` and says why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PortraitsRecord {
    pub scenario: String,
    pub roles: Vec<RolePortrait>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RolePortrait {
    pub name: String,
    pub image: Option<SyntheticImage>,
    /// Why there is no portrait (no face matched to this role, ...), when there is none.
    pub missing_reason: Option<String>,
}
