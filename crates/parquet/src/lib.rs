//! JSON records as a Parquet table, through polars: the only crate of viss that links polars
//! (the heaviest dependency by far), so no other crate compiles against it.
//!
//! Columns and their types come from the record's JSON schema, so the Parquet table cannot
//! drift from data.jsonl: one column per top-level property, in the schema's `required` order;
//! strings and enum labels are `String`, non-negative integers `UInt64`, numbers `Float64`,
//! booleans `Boolean`, arrays `List`, objects `Struct` (so `roles` is a list of structs, which
//! pandas reads as lists of dicts and polars explodes and unnests). Nullable in the schema is
//! nullable in the table.

use std::io::Cursor;

use polars::prelude::*;
use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum ParquetError {
    #[error("the record schema at {at}: {problem}")]
    Schema { at: String, problem: String },
    #[error("record {row}, field {at}: expected {expected}, found {found}")]
    Value {
        row: usize,
        at: String,
        expected: String,
        found: String,
    },
    #[error("polars: {0}")]
    Polars(#[from] PolarsError),
}

/// A column type as the schema declares it.
struct Typed {
    dtype: DataType,
    nullable: bool,
}

/// The polars type of the value `schema` describes; `root` resolves local `$ref`s.
fn typed(schema: &Value, root: &Value, at: &str) -> Result<Typed, ParquetError> {
    let bad = |problem: &str| ParquetError::Schema {
        at: at.to_string(),
        problem: problem.to_string(),
    };
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let target = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
            .ok_or_else(|| bad(&format!("unresolvable $ref {reference:?}")))?;
        return typed(target, root, at);
    }
    if let Some(options) = schema.get("anyOf").and_then(Value::as_array) {
        // Only `X or null` has a column type.
        let not_null: Vec<&Value> = options
            .iter()
            .filter(|o| o.get("type") != Some(&Value::from("null")))
            .collect();
        if not_null.len() != 1 || options.len() != 2 {
            return Err(bad("anyOf other than [X, null] has no column type"));
        }
        return Ok(Typed {
            nullable: true,
            ..typed(not_null[0], root, at)?
        });
    }
    if let Some(labels) = schema.get("enum").and_then(Value::as_array) {
        if !labels.iter().all(Value::is_string) {
            return Err(bad("an enum of non-strings has no column type"));
        }
        return Ok(Typed {
            dtype: DataType::String,
            nullable: false,
        });
    }
    if let Some(constant) = schema.get("const") {
        return match constant {
            Value::Bool(_) => Ok(Typed {
                dtype: DataType::Boolean,
                nullable: false,
            }),
            Value::String(_) => Ok(Typed {
                dtype: DataType::String,
                nullable: false,
            }),
            _ => Err(bad("only string and boolean constants have a column type")),
        };
    }
    let (name, nullable) = match schema.get("type") {
        Some(Value::String(name)) => (name.as_str(), false),
        Some(Value::Array(names)) => {
            let names: Vec<&str> = names
                .iter()
                .filter_map(Value::as_str)
                .filter(|n| *n != "null")
                .collect();
            match names[..] {
                [name] => (name, true),
                _ => return Err(bad("a type list must be one type and null")),
            }
        }
        _ => return Err(bad("no type")),
    };
    let dtype = match name {
        "string" if schema.get("contentEncoding").and_then(Value::as_str) == Some("base64") => {
            DataType::Binary
        }
        "string" => DataType::String,
        "boolean" => DataType::Boolean,
        "number" => DataType::Float64,
        "integer"
            if schema
                .get("minimum")
                .and_then(Value::as_f64)
                .is_some_and(|m| m >= 0.0) =>
        {
            DataType::UInt64
        }
        "integer" => DataType::Int64,
        "array" => {
            let items = schema
                .get("items")
                .ok_or_else(|| bad("array without items"))?;
            DataType::List(Box::new(typed(items, root, &format!("{at}[]"))?.dtype))
        }
        "object" => DataType::Struct(
            properties(schema, at)?
                .into_iter()
                .map(|(field, property)| {
                    Ok(Field::new(
                        field.into(),
                        typed(property, root, &format!("{at}.{field}"))?.dtype,
                    ))
                })
                .collect::<Result<_, ParquetError>>()?,
        ),
        other => return Err(bad(&format!("type {other:?} has no column type"))),
    };
    Ok(Typed { dtype, nullable })
}

/// An object schema's properties in its `required` order (every property must be required:
/// a record never leaves a field out, so a column never has to guess).
fn properties<'a>(schema: &'a Value, at: &str) -> Result<Vec<(&'a str, &'a Value)>, ParquetError> {
    let bad = |problem: String| ParquetError::Schema {
        at: at.to_string(),
        problem,
    };
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("object without required".into()))?;
    let declared = schema
        .get("properties")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("object without properties".into()))?;
    if required.len() != declared.len() {
        return Err(bad("every property must be required".into()));
    }
    required
        .iter()
        .map(|name| {
            let name = name
                .as_str()
                .ok_or_else(|| bad("a required entry is not a string".into()))?;
            let property = declared
                .get(name)
                .ok_or_else(|| bad(format!("required {name:?} is not a property")))?;
            Ok((name, property))
        })
        .collect()
}

fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
    .to_string()
}

/// `value` as a polars value of `dtype`.
fn any_value(
    value: &Value,
    dtype: &DataType,
    row: usize,
    at: &str,
) -> Result<AnyValue<'static>, ParquetError> {
    let mismatch = || ParquetError::Value {
        row,
        at: at.to_string(),
        expected: dtype.to_string(),
        found: kind(value),
    };
    Ok(match (dtype, value) {
        (_, Value::Null) => AnyValue::Null,
        (DataType::String, Value::String(text)) => AnyValue::StringOwned(text.as_str().into()),
        (DataType::Binary, Value::String(text)) => {
            use base64::Engine as _;
            AnyValue::BinaryOwned(
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|_| mismatch())?,
            )
        }
        (DataType::Boolean, Value::Bool(flag)) => AnyValue::Boolean(*flag),
        (DataType::UInt64, Value::Number(n)) => AnyValue::UInt64(n.as_u64().ok_or_else(mismatch)?),
        (DataType::Int64, Value::Number(n)) => AnyValue::Int64(n.as_i64().ok_or_else(mismatch)?),
        (DataType::Float64, Value::Number(n)) => {
            AnyValue::Float64(n.as_f64().ok_or_else(mismatch)?)
        }
        (DataType::List(inner), Value::Array(items)) => {
            let values = items
                .iter()
                .enumerate()
                .map(|(i, item)| any_value(item, inner, row, &format!("{at}[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            AnyValue::List(Series::from_any_values_and_dtype(
                PlSmallStr::EMPTY,
                &values,
                inner,
                true,
            )?)
        }
        (DataType::Struct(fields), Value::Object(object)) => {
            let values = fields
                .iter()
                .map(|field| {
                    let member = object.get(field.name.as_str()).unwrap_or(&Value::Null);
                    any_value(member, &field.dtype, row, &format!("{at}.{}", field.name))
                })
                .collect::<Result<Vec<_>, _>>()?;
            AnyValue::StructOwned(Box::new((values, fields.clone())))
        }
        _ => return Err(mismatch()),
    })
}

/// The top-level columns of the record schema, in order.
fn columns(schema: &Value) -> Result<Vec<(String, Typed)>, ParquetError> {
    properties(schema, "record")?
        .into_iter()
        .map(|(name, property)| Ok((name.to_string(), typed(property, schema, name)?)))
        .collect()
}

/// The records (JSON objects matching `schema`) as a Parquet file, zstd-compressed, one row
/// group. Equal records give equal bytes: the writer is single-threaded and stamps no time.
pub fn write_parquet(records: &[Value], schema: &Value) -> Result<Vec<u8>, ParquetError> {
    let mut series = Vec::new();
    for (name, column) in columns(schema)? {
        let values = records
            .iter()
            .enumerate()
            .map(|(row, record)| {
                let value = record.get(&name).unwrap_or(&Value::Null);
                if value.is_null() && !column.nullable {
                    return Err(ParquetError::Value {
                        row,
                        at: name.clone(),
                        expected: column.dtype.to_string(),
                        found: "null".into(),
                    });
                }
                any_value(value, &column.dtype, row, &name)
            })
            .collect::<Result<Vec<_>, _>>()?;
        series.push(
            Series::from_any_values_and_dtype(name.as_str().into(), &values, &column.dtype, true)?
                .into_column(),
        );
    }
    let mut frame = DataFrame::new(records.len(), series)?;
    let arrow_schema = polars_parquet::write::schema_to_metadata_key(
        &frame.schema().to_arrow(CompatLevel::oldest()),
    );
    let mut bytes = Vec::new();
    ParquetWriter::new(&mut bytes)
        .with_compression(ParquetCompression::Zstd(None))
        .set_parallel(false)
        // The Arrow schema embedded for readers, at the oldest compatibility level: the newest,
        // polars' default, declares strings as Arrow string views, and pandas cannot turn a list
        // of string views into Python objects.
        .with_key_value_metadata(Some(KeyValueMetadata::from_static(vec![(
            arrow_schema.key,
            arrow_schema.value.unwrap_or_default(),
        )])))
        .finish(&mut frame)?;
    Ok(bytes)
}

fn base64_text(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A polars scalar as JSON.
fn json_scalar(value: AnyValue<'_>) -> Value {
    match value {
        AnyValue::Null => Value::Null,
        AnyValue::Boolean(flag) => Value::Bool(flag),
        AnyValue::String(text) => Value::from(text),
        AnyValue::StringOwned(text) => Value::from(text.as_str()),
        AnyValue::UInt8(n) => Value::from(n),
        AnyValue::UInt16(n) => Value::from(n),
        AnyValue::UInt32(n) => Value::from(n),
        AnyValue::UInt64(n) => Value::from(n),
        AnyValue::Int8(n) => Value::from(n),
        AnyValue::Int16(n) => Value::from(n),
        AnyValue::Int32(n) => Value::from(n),
        AnyValue::Int64(n) => Value::from(n),
        AnyValue::Float32(x) => Value::from(f64::from(x)),
        AnyValue::Float64(x) => Value::from(x),
        AnyValue::Binary(bytes) => Value::from(base64_text(bytes)),
        AnyValue::BinaryOwned(bytes) => Value::from(base64_text(&bytes)),
        other => Value::from(other.to_string()),
    }
}

/// Every value of a column as JSON, nested types included.
fn json_values(series: &Series) -> Result<Vec<Value>, ParquetError> {
    match series.dtype() {
        DataType::List(_) => {
            let lists = series.list()?;
            (0..series.len())
                .map(|row| match lists.get_as_series(row) {
                    None => Ok(Value::Null),
                    Some(items) => Ok(Value::Array(json_values(&items)?)),
                })
                .collect()
        }
        DataType::Struct(_) => {
            let fields = series.struct_()?.fields_as_series();
            let columns = fields
                .iter()
                .map(json_values)
                .collect::<Result<Vec<_>, _>>()?;
            (0..series.len())
                .map(|row| {
                    if series.get(row)?.is_null() {
                        return Ok(Value::Null);
                    }
                    let object: Map<String, Value> = fields
                        .iter()
                        .zip(&columns)
                        .map(|(field, values)| (field.name().to_string(), values[row].clone()))
                        .collect();
                    Ok(Value::Object(object))
                })
                .collect()
        }
        _ => (0..series.len())
            .map(|row| Ok(json_scalar(series.get(row)?)))
            .collect(),
    }
}

/// The rows of a Parquet file as JSON objects (what a reader of the dataset gets).
pub fn read_parquet(bytes: &[u8]) -> Result<Vec<Value>, ParquetError> {
    let frame = ParquetReader::new(Cursor::new(bytes)).finish()?;
    let columns = frame
        .columns()
        .iter()
        .map(|column| {
            Ok((
                column.name().to_string(),
                json_values(column.as_materialized_series())?,
            ))
        })
        .collect::<Result<Vec<_>, ParquetError>>()?;
    Ok((0..frame.height())
        .map(|row| {
            Value::Object(
                columns
                    .iter()
                    .map(|(name, values)| (name.clone(), values[row].clone()))
                    .collect(),
            )
        })
        .collect())
}

/// The column names and polars types `schema` gives, for the dataset card.
pub fn column_types(schema: &Value) -> Result<Vec<(String, String)>, ParquetError> {
    Ok(columns(schema)?
        .into_iter()
        .map(|(name, column)| (name, column.dtype.to_string()))
        .collect())
}

/// The columns of `schema` as the Hugging Face `datasets` library declares features in a
/// dataset card (`dataset_info.features`): `{"name", "dtype"}` for a value, `"struct"` for an
/// object, `"list"` for an array, with the same types [`write_parquet`] gives the columns.
pub fn hf_features(schema: &Value) -> Result<Vec<Value>, ParquetError> {
    fn feature(name: &str, dtype: &DataType) -> Value {
        let mut out = Map::new();
        out.insert("name".to_string(), Value::from(name));
        let (key, value) = hf_type(dtype);
        out.insert(key.to_string(), value);
        Value::Object(out)
    }
    fn hf_type(dtype: &DataType) -> (&'static str, Value) {
        match dtype {
            // A list of values or of structs names the item's type or fields directly; a list
            // of lists nests the inner list's own key.
            DataType::List(inner) => match hf_type(inner) {
                ("dtype" | "struct", item) => ("list", item),
                (key, item) => {
                    let mut nested = Map::new();
                    nested.insert(key.to_string(), item);
                    ("list", Value::Object(nested))
                }
            },
            DataType::Struct(fields) => (
                "struct",
                Value::Array(
                    fields
                        .iter()
                        .map(|f| feature(f.name().as_str(), f.dtype()))
                        .collect(),
                ),
            ),
            DataType::String => ("dtype", Value::from("string")),
            DataType::Binary => ("dtype", Value::from("binary")),
            DataType::Boolean => ("dtype", Value::from("bool")),
            DataType::Float64 => ("dtype", Value::from("float64")),
            DataType::UInt64 => ("dtype", Value::from("uint64")),
            DataType::Int64 => ("dtype", Value::from("int64")),
            other => unreachable!("typed() makes no {other} column"),
        }
    }
    Ok(columns(schema)?
        .into_iter()
        .map(|(name, column)| feature(&name, &column.dtype))
        .collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["id", "n", "score", "ok", "tags", "image", "roles"],
            "properties": {
                "id": {"type": "string"},
                "n": {"type": ["integer", "null"], "minimum": 0},
                "score": {"type": ["number", "null"]},
                "ok": {"type": "boolean"},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
                "image": {"anyOf": [{"$ref": "#/$defs/image"}, {"type": "null"}]},
                "roles": {"type": "array",
                          "items": {"type": "object", "required": ["name", "image"], "properties": {
                    "name": {"type": "string"},
                    "image": {"anyOf": [{"$ref": "#/$defs/image"}, {"type": "null"}]}
                }}}
            },
            "$defs": {"image": {"type": "object", "required": ["path", "synthetic"], "properties": {
                "path": {"type": "string"}, "synthetic": {"const": true}
            }}}
        })
    }

    #[test]
    fn nested_nullable_rows_round_trip_and_bytes_are_stable() {
        let rows = vec![
            json!({"id": "a", "n": 3, "score": 0.931, "ok": true, "tags": ["a", "b"],
                   "image": {"path": "x.png", "synthetic": true},
                   "roles": [{"name": "Ada", "image": null},
                             {"name": "Ben", "image": {"path": "b.png", "synthetic": true}}]}),
            json!({"id": "b", "n": null, "score": null, "ok": false, "tags": [], "image": null,
                   "roles": [{"name": "Cy", "image": null}]}),
        ];
        let bytes = write_parquet(&rows, &schema()).unwrap();
        assert_eq!(&bytes[..4], b"PAR1");
        assert_eq!(read_parquet(&bytes).unwrap(), rows);
        assert_eq!(
            write_parquet(&rows, &schema()).unwrap(),
            bytes,
            "same rows, same bytes"
        );
        let types = column_types(&schema()).unwrap();
        assert_eq!(types[1], ("n".to_string(), "u64".to_string()));
        assert!(types[6].1.starts_with("list[struct"), "{types:?}");
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_row_and_field() {
        let rows = vec![
            json!({"id": "a", "n": 1, "score": 1.0, "ok": true, "tags": [], "image": null,
                   "roles": [{"name": 7, "image": null}]}),
        ];
        let error = write_parquet(&rows, &schema()).unwrap_err().to_string();
        assert!(error.contains("record 0, field roles[0].name"), "{error}");
        let rows = vec![
            json!({"id": null, "n": 1, "score": 1.0, "ok": true, "tags": [], "image": null,
                   "roles": []}),
        ];
        let error = write_parquet(&rows, &schema()).unwrap_err().to_string();
        assert!(
            error.contains("field id") && error.contains("null"),
            "{error}"
        );
    }

    /// The card's features for the fixture schema, in the shape `datasets` writes
    /// (`Features._to_yaml_list`): values by dtype, structs by fields, lists by item.
    #[test]
    fn hugging_face_features_follow_the_column_types() {
        let features = hf_features(&schema()).unwrap();
        assert_eq!(
            Value::from(features),
            serde_json::json!([
                {"name": "id", "dtype": "string"},
                {"name": "n", "dtype": "uint64"},
                {"name": "score", "dtype": "float64"},
                {"name": "ok", "dtype": "bool"},
                {"name": "tags", "list": "string"},
                {"name": "image", "struct": [
                    {"name": "path", "dtype": "string"},
                    {"name": "synthetic", "dtype": "bool"},
                ]},
                {"name": "roles", "list": [
                    {"name": "name", "dtype": "string"},
                    {"name": "image", "struct": [
                        {"name": "path", "dtype": "string"},
                        {"name": "synthetic", "dtype": "bool"},
                    ]},
                ]},
            ])
        );
    }

    /// A base64 string column is a binary column: written as bytes, read back as base64.
    #[test]
    fn base64_strings_are_binary_columns() {
        let schema = json!({
            "type": "object",
            "required": ["png"],
            "properties": {"png": {"type": ["string", "null"], "contentEncoding": "base64"}},
        });
        let rows = vec![json!({"png": "iVBORw0K"}), json!({"png": null})];
        let bytes = write_parquet(&rows, &schema).unwrap();
        assert_eq!(read_parquet(&bytes).unwrap(), rows);
        assert_eq!(
            hf_features(&schema).unwrap(),
            vec![json!({"name": "png", "dtype": "binary"})]
        );
        let bad = vec![json!({"png": "not base64!"})];
        assert!(write_parquet(&bad, &schema).is_err());
    }
}
