//! Typed ports: every artifact a stage writes is declared once, as a [`Port`] naming its record
//! type, the stage that produces it, its output name and its item scope. A stage lists the
//! ports it reads and writes; the DAG's edges and the input part of every cache key follow
//! from those lists, so what a stage reads is stated in one place and checked before anything
//! runs.

use std::fmt;
use std::marker::PhantomData;

/// Which items of a consumer see an output, and how its stored name is spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `name`: one per producing item, seen by same-level consumers and by every descendant.
    Item,
    /// `name@<child>`: one per child item the producer introduced (an episode's record of one
    /// scenario); a finer consumer sees only its own, so adding a scene re-runs that scene only.
    Child,
    /// `name@`: for same-level consumers only; it may change whenever any child changes.
    Private,
    /// `name<key>`: any number of outputs told apart by a key (a portrait per role).
    Keyed,
}

/// A port without its record type: what the engine stores, compares and prints.
#[derive(Clone, Copy)]
pub struct PortId {
    pub stage: &'static str,
    pub name: &'static str,
    pub scope: Scope,
    record: fn() -> &'static str,
    shape: fn() -> schemars::Schema,
}

impl PortId {
    /// Whether a stored output name is this port's.
    pub fn matches(&self, output: &str) -> bool {
        match self.scope {
            Scope::Item => output == self.name,
            Scope::Private => output.strip_suffix('@') == Some(self.name),
            Scope::Child => output
                .strip_prefix(self.name)
                .and_then(|rest| rest.strip_prefix('@'))
                .is_some_and(|child| !child.is_empty()),
            Scope::Keyed => output
                .strip_prefix(self.name)
                .is_some_and(|key| !key.is_empty()),
        }
    }

    /// The record type's name, without its module path (`Detections`, `StepRecord<Tasks>`).
    pub fn record(&self) -> String {
        short_type_name((self.record)())
    }

    /// The record type's JSON schema, as `schemars` derives it.
    pub fn shape(&self) -> schemars::Schema {
        (self.shape)()
    }

    /// The hash of the record type's JSON schema: a stage's cache keys hold it for every port
    /// it writes, so a change to what a record holds re-runs the stage that writes it without a
    /// version raised by hand.
    pub fn shape_hash(&self) -> String {
        let bytes = serde_json::to_vec(&self.shape()).expect("a schema serializes");
        crate::hash::ContentHash::of(&bytes).to_string()
    }

    /// The stored output name for `key`: the child item of a [`Scope::Child`] port, the key of
    /// a [`Scope::Keyed`] one; ignored by the other scopes.
    pub fn output_name(&self, key: &str) -> String {
        match self.scope {
            Scope::Item => self.name.to_string(),
            Scope::Private => format!("{}@", self.name),
            Scope::Child => format!("{}@{key}", self.name),
            Scope::Keyed => format!("{}{key}", self.name),
        }
    }
}

impl PartialEq for PortId {
    fn eq(&self, other: &Self) -> bool {
        (self.stage, self.name, self.scope) == (other.stage, other.name, other.scope)
    }
}

impl Eq for PortId {}

impl fmt::Debug for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for PortId {
    /// `detect.detections`, `parse_script.scenario@<child>`, `portraits.portrait.png:<key>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let suffix = match self.scope {
            Scope::Item => "",
            Scope::Private => "@",
            Scope::Child => "@<child>",
            Scope::Keyed => "<key>",
        };
        write!(f, "{}.{}{suffix}", self.stage, self.name)
    }
}

/// An artifact of record type `T`. `T` is a JSON record, or [`Png`] for image bytes.
pub struct Port<T> {
    id: PortId,
    record: PhantomData<fn() -> T>,
}

impl<T: schemars::JsonSchema> Port<T> {
    const fn new(stage: &'static str, name: &'static str, scope: Scope) -> Self {
        Self {
            id: PortId {
                stage,
                name,
                scope,
                record: std::any::type_name::<T>,
                shape: shape_of::<T>,
            },
            record: PhantomData,
        }
    }

    pub const fn item(stage: &'static str, name: &'static str) -> Self {
        Self::new(stage, name, Scope::Item)
    }

    pub const fn child(stage: &'static str, name: &'static str) -> Self {
        Self::new(stage, name, Scope::Child)
    }

    pub const fn private(stage: &'static str, name: &'static str) -> Self {
        Self::new(stage, name, Scope::Private)
    }

    pub const fn keyed(stage: &'static str, name: &'static str) -> Self {
        Self::new(stage, name, Scope::Keyed)
    }
}

impl<T> Port<T> {
    pub const fn id(&self) -> PortId {
        self.id
    }
}

fn shape_of<T: schemars::JsonSchema>() -> schemars::Schema {
    schemars::SchemaGenerator::default().into_root_schema_for::<T>()
}

/// The record type of image ports: PNG bytes, stored as they are.
#[derive(schemars::JsonSchema)]
#[schemars(description = "PNG bytes, stored as they are")]
pub struct Png;

/// The record type of file ports: bytes stored as they are (an exported file).
#[derive(schemars::JsonSchema)]
#[schemars(description = "bytes, stored as they are")]
pub struct Bytes;

/// `viss::stages::detect::Detections` -> `Detections`, keeping generic arguments short too.
fn short_type_name(full: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    for c in full.chars().chain(std::iter::once('\0')) {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            out.push_str(word.rsplit("::").next().unwrap_or_default());
            word.clear();
            if c != '\0' {
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(schemars::JsonSchema)]
    struct Record;

    #[test]
    fn each_scope_matches_its_own_spelling_only() {
        let item = Port::<Record>::item("detect", "detections").id();
        assert!(item.matches("detections"));
        assert!(!item.matches("detections@x") && !item.matches("detection"));
        let child = Port::<Record>::child("parse_script", "scenario").id();
        assert!(child.matches("scenario@demo/e1/sc001"));
        assert!(!child.matches("scenario@") && !child.matches("scenario"));
        assert!(!child.matches("scenarios@demo/e1/sc001"));
        let private = Port::<Record>::private("parse_script", "script").id();
        assert!(private.matches("script@") && !private.matches("script"));
        let keyed = Port::<Png>::keyed("portraits", "portrait.png:").id();
        assert!(keyed.matches("portrait.png:Ada") && !keyed.matches("portrait.png:"));
        assert_eq!(child.output_name("demo/e1/sc001"), "scenario@demo/e1/sc001");
        assert_eq!(keyed.output_name("Ada"), "portrait.png:Ada");
        assert_eq!(private.output_name(""), "script@");
    }

    #[test]
    fn ports_print_their_stage_name_scope_and_short_record_type() {
        let port = Port::<Vec<Option<Record>>>::child("parse_script", "scenario").id();
        assert_eq!(port.to_string(), "parse_script.scenario@<child>");
        assert_eq!(port.record(), "Vec<Option<Record>>");
    }
}
