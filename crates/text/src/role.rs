//! A role's identity within its scenario.
//!
//! A role is one participant of a scenario unit, and its id is its place among the unit's
//! participants (in order of their first line), written `r1`, `r2`, and so on. A name is only
//! what a role is shown as: anonymisation and instantiation give the same role other names,
//! so per-role records are joined by the id, never by the name.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct RoleId(u16);

impl RoleId {
    /// The role at 0-based `index` among a scenario's participants.
    ///
    /// # Panics
    /// On an index past 65,534: a scenario unit has a handful of participants.
    pub fn at(index: usize) -> Self {
        let index = u16::try_from(index)
            .ok()
            .filter(|&i| i < u16::MAX)
            .expect("a scenario has fewer than 65,535 participants");
        Self(index)
    }

    /// The role's 0-based place among the scenario's participants.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The ids of a scenario with `count` participants, in order.
    pub fn all(count: usize) -> impl Iterator<Item = RoleId> {
        (0..count).map(RoleId::at)
    }
}

impl fmt::Display for RoleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", u32::from(self.0) + 1)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a role id; role ids are r1, r2, ... (the role's place in the scenario)")]
pub struct BadRoleId(String);

impl FromStr for RoleId {
    type Err = BadRoleId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadRoleId(text.to_string());
        let digits = text.strip_prefix('r').ok_or_else(bad)?;
        if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let number: u16 = digits.parse().map_err(|_| bad())?;
        Ok(Self(number - 1))
    }
}

impl From<RoleId> for String {
    fn from(id: RoleId) -> Self {
        id.to_string()
    }
}

impl TryFrom<String> for RoleId {
    type Error = BadRoleId;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl schemars::JsonSchema for RoleId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RoleId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^r[1-9][0-9]*$",
            "description": "the role's place among the scenario's participants: r1, r2, ..."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_written_from_one_and_read_back() {
        let ids: Vec<String> = RoleId::all(3).map(|id| id.to_string()).collect();
        assert_eq!(ids, ["r1", "r2", "r3"]);
        for id in RoleId::all(12) {
            assert_eq!(id.to_string().parse::<RoleId>(), Ok(id));
        }
        assert_eq!(RoleId::at(9).index(), 9);
        let json = serde_json::to_string(&RoleId::at(1)).unwrap();
        assert_eq!(json, "\"r2\"");
        assert_eq!(
            serde_json::from_str::<RoleId>(&json).unwrap(),
            RoleId::at(1)
        );
    }

    #[test]
    fn anything_else_is_not_a_role_id() {
        for text in [
            "", "r", "r0", "r01", "R1", "1", "r1 ", "r-1", "r65536", "ross",
        ] {
            assert!(
                text.parse::<RoleId>().is_err(),
                "{text:?} was read as a role id"
            );
        }
        assert!(serde_json::from_str::<RoleId>("\"Ross\"").is_err());
    }
}
