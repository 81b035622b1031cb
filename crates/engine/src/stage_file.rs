//! A stage's `stages/<name>.toml` as `viss init` writes it, rendered from the stage's params
//! type: its `Default` gives every value and its doc comments (through `schemars::JsonSchema`)
//! every comment, so the file cannot disagree with the code.
//!
//! The file is: the params struct's doc comment as a `#` header, `description = "<summary>"`,
//! then `[params]` with each field's doc comment above `key = <default>`, nested structs as
//! `[params.<key>]` tables after the plain keys (their field's doc above the header). A field
//! whose default is unset (`None`) is shown commented out, with the field's `example` value
//! (`#[schemars(example = ...)]`) when it has one. Comments are wrapped at 100 columns.

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Comment lines are wrapped to this many columns.
const WIDTH: usize = 100;

/// The text of a stage file for params type `P`: its defaults, each with its documentation.
pub fn render_stage_file<P: JsonSchema + Serialize + Default>(summary: &str) -> String {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<P>();
    let schema = schema.as_value();
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    // Through JSON text, as `load_stage` does: it keeps the fields' order, and an f32 0.45 is
    // written 0.45, not widened to 0.44999998807907104.
    let defaults = serde_json::to_string(&P::default()).expect("params serialize");
    let defaults: Node = serde_json::from_str(&defaults).expect("params reparse");
    let mut out = String::new();
    let header = description(schema, &defs);
    comment(&mut out, &header);
    out.push_str(&format!("description = {}\n", toml::Value::from(summary)));
    let Node::Table(fields) = defaults else {
        panic!("a stage's params must serialize as a table");
    };
    if !fields.is_empty() || !properties(schema, &defs).is_empty() {
        out.push_str("\n[params]\n");
        table(&mut out, "params", schema, &fields, &defs);
    }
    out
}

/// A default value with its tables' keys in the order the struct declares them, whether or not
/// serde_json's `Map` keeps insertion order in the build (without `preserve_order` it sorts).
enum Node {
    Leaf(Value),
    Table(Vec<(String, Node)>),
}

impl Node {
    fn into_value(self) -> Value {
        match self {
            Node::Leaf(value) => value,
            Node::Table(entries) => Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, v.into_value()))
                    .collect(),
            ),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Leaf(v.into()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Leaf(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Leaf(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Leaf(v.into()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Leaf(v.into()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Leaf(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item.into_value());
        }
        Ok(Node::Leaf(Value::Array(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Node>()? {
            entries.push((key, value));
        }
        Ok(Node::Table(entries))
    }
}

/// `schema` itself, or the definition its `$ref` names.
fn resolve<'a>(schema: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    let target = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| defs.get(name));
    match target {
        Some(target) => resolve(target, defs),
        None => schema,
    }
}

/// The schema's description, else that of the type it refers to. A newtype (a `$ref` with a
/// description of its own) gives both, its own first.
fn description(schema: &Value, defs: &Map<String, Value>) -> String {
    let own = schema.get("description").and_then(Value::as_str);
    let target = resolve(schema, defs);
    let inner = if std::ptr::eq(target, schema) {
        None
    } else {
        target.get("description").and_then(Value::as_str)
    };
    match (own, inner) {
        (Some(own), Some(inner)) if own != inner => format!("{own}\n\n{inner}"),
        (Some(text), _) | (None, Some(text)) => text.to_string(),
        (None, None) => String::new(),
    }
}

fn properties<'a>(schema: &'a Value, defs: &'a Map<String, Value>) -> &'a Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    resolve(schema, defs)
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

/// The description of property `key`: its field's doc, else its type's.
fn property_doc(schema: &Value, key: &str, defs: &Map<String, Value>) -> String {
    let Some(property) = properties(schema, defs).get(key) else {
        return String::new();
    };
    if let Some(own) = property.get("description").and_then(Value::as_str) {
        return own.to_string();
    }
    // `Option<Struct>` is `anyOf: [{$ref}, {null}]`.
    let inner = property
        .get("anyOf")
        .and_then(Value::as_array)
        .and_then(|options| options.iter().find(|o| o.get("$ref").is_some()))
        .unwrap_or(property);
    resolve(inner, defs)
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The plain keys of one table, then its sub-tables, each under its full dotted name.
fn table(
    out: &mut String,
    path: &str,
    schema: &Value,
    fields: &[(String, Node)],
    defs: &Map<String, Value>,
) {
    let mut first = true;
    let mut separate = |out: &mut String, doc: &str| {
        if !first && !doc.is_empty() {
            out.push('\n');
        }
        first = false;
    };
    for (key, node) in fields {
        let Node::Leaf(value) = node else { continue };
        let doc = property_doc(schema, key, defs);
        separate(out, &doc);
        comment(out, &doc);
        match toml_value(value) {
            Some(value) => out.push_str(&format!("{} = {value}\n", toml_key(key))),
            None => unset(out, schema, key, defs),
        }
    }
    // Fields left out of the defaults (`skip_serializing_if` on an unset option).
    let written: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    for key in properties(schema, defs).keys() {
        if !written.contains(&key.as_str()) {
            let doc = property_doc(schema, key, defs);
            separate(out, &doc);
            comment(out, &doc);
            unset(out, schema, key, defs);
        }
    }
    for (key, node) in fields {
        let Node::Table(inner) = node else { continue };
        let sub = properties(schema, defs)
            .get(key)
            .cloned()
            .unwrap_or(Value::Null);
        out.push('\n');
        comment(out, &property_doc(schema, key, defs));
        let path = format!("{path}.{}", toml_key(key));
        out.push_str(&format!("[{path}]\n"));
        table(out, &path, &sub, inner, defs);
    }
}

/// An unset option: commented out, with its example value when the field gives one.
fn unset(out: &mut String, schema: &Value, key: &str, defs: &Map<String, Value>) {
    let example = properties(schema, defs)
        .get(key)
        .and_then(|p| p.get("examples"))
        .and_then(Value::as_array)
        .and_then(|examples| examples.first())
        .and_then(toml_value);
    match example {
        Some(example) => out.push_str(&format!("# {} = {example}\n", toml_key(key))),
        None => out.push_str(&format!("# {} is unset\n", toml_key(key))),
    }
}

fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_string()
    } else {
        toml::Value::from(key).to_string()
    }
}

/// A JSON default as an inline TOML value; `None` for null, which TOML cannot say.
fn toml_value(value: &Value) -> Option<toml::Value> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => toml::Value::Integer(i),
            (None, Some(f)) if n.is_f64() => toml::Value::Float(f),
            _ => panic!("{n} does not fit a TOML integer"),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(items) => toml::Value::Array(items.iter().filter_map(toml_value).collect()),
        Value::Object(map) => toml::Value::Table(
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), toml_value(v)?)))
                .collect(),
        ),
    })
}

/// `text` as `#` comment lines: its paragraphs (split at blank lines) each re-wrapped at
/// [`WIDTH`] columns, a bare `#` between them.
fn comment(out: &mut String, text: &str) {
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    for (i, paragraph) in text.split("\n\n").enumerate() {
        if i > 0 {
            out.push_str("#\n");
        }
        let mut line = String::from("#");
        for word in paragraph.split_whitespace() {
            if line.len() > 1 && line.len() + 1 + word.len() > WIDTH {
                out.push_str(&line);
                out.push('\n');
                line = String::from("#");
            }
            line.push(' ');
            line.push_str(word);
        }
        out.push_str(&line);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// Shots and how they are cut.
    ///
    /// A second paragraph.
    #[derive(Serialize, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields, default)]
    struct Params {
        /// How hard to cut.
        penalty: f64,
        ratio: f32,
        /// The faces.
        faces: Faces,
        #[serde(skip_serializing_if = "Option::is_none")]
        /// Attach it, N pixels.
        #[schemars(example = 448)]
        attach: Option<u32>,
        mode: Mode,
    }

    /// Face settings.
    #[derive(Serialize, Deserialize, JsonSchema, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Faces {
        size: u32,
        quality: Option<String>,
    }

    /// Which way.
    #[derive(Serialize, Deserialize, JsonSchema, Default)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        #[default]
        Auto,
        #[allow(dead_code)]
        Other,
    }

    impl Default for Params {
        fn default() -> Self {
            Self {
                penalty: 1.0,
                ratio: 0.45,
                faces: Faces {
                    size: 640,
                    quality: None,
                },
                attach: None,
                mode: Mode::Auto,
            }
        }
    }

    /// Docs of the stage.
    #[derive(Serialize, Deserialize, JsonSchema, Default)]
    #[serde(transparent)]
    struct Wrapped(Params);

    #[test]
    fn a_params_type_renders_as_a_documented_stage_file() {
        let text = render_stage_file::<Params>("cut shots");
        assert_eq!(
            text,
            "# Shots and how they are cut.\n#\n# A second paragraph.\n\
             description = \"cut shots\"\n\n[params]\n# How hard to cut.\npenalty = 1.0\n\
             ratio = 0.45\n\n# Which way.\nmode = \"auto\"\n\n# Attach it, N pixels.\n\
             # attach = 448\n\n# The faces.\n[params.faces]\nsize = 640\n# quality is unset\n"
        );
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(parsed["params"]["faces"]["size"].as_integer(), Some(640));
    }

    #[test]
    fn a_documented_newtype_heads_its_inner_types_docs() {
        let text = render_stage_file::<Wrapped>("cut shots");
        assert!(
            text.starts_with(
                "# Docs of the stage.\n#\n# Shots and how they are cut.\n#\n# A second paragraph.\n"
            ),
            "{text}"
        );
        assert!(text.contains("\n[params]\n# How hard to cut.\npenalty = 1.0\n"));
    }

    #[test]
    fn long_comments_wrap_at_100_columns() {
        let mut out = String::new();
        comment(&mut out, &"word ".repeat(60));
        assert!(
            out.lines()
                .all(|l| l.len() <= WIDTH && l.starts_with("# word"))
        );
        assert_eq!(out.lines().count(), 4);
    }
}
