//! SOTOPIA-EVAL as an optional rubric: a judge rates every character on seven dimensions, each
//! an integer on its own range with the reasoning before it. An answer out of range, or without
//! a dimension or a character, is refused with the problem so that the judge can be re-asked;
//! never clamped. SOTOPIA's overall score is the plain mean of the seven, reported as such.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use viss_problem::{Problems, Rejection};

/// One of SOTOPIA-EVAL's seven dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    Believability,
    Relationship,
    Knowledge,
    Secret,
    SocialRules,
    FinancialAndMaterialBenefits,
    Goal,
}

impl Dimension {
    /// In the order a judge answers them (SOTOPIA's order, the goal last).
    pub const ALL: [Dimension; 7] = [
        Dimension::Believability,
        Dimension::Relationship,
        Dimension::Knowledge,
        Dimension::Secret,
        Dimension::SocialRules,
        Dimension::FinancialAndMaterialBenefits,
        Dimension::Goal,
    ];

    /// The dimension's key in an answer and in the tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Believability => "believability",
            Dimension::Relationship => "relationship",
            Dimension::Knowledge => "knowledge",
            Dimension::Secret => "secret",
            Dimension::SocialRules => "social_rules",
            Dimension::FinancialAndMaterialBenefits => "financial_and_material_benefits",
            Dimension::Goal => "goal",
        }
    }

    /// The lowest and highest score allowed.
    pub fn range(self) -> (i64, i64) {
        match self {
            Dimension::Believability | Dimension::Knowledge | Dimension::Goal => (0, 10),
            Dimension::Secret | Dimension::SocialRules => (-10, 0),
            Dimension::Relationship | Dimension::FinancialAndMaterialBenefits => (-5, 5),
        }
    }
}

impl std::fmt::Display for Dimension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A judge's score on one dimension, with the reasoning it gave first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Rating {
    pub reasoning: String,
    pub score: i64,
}

/// A judge's ratings of one character, in [`Dimension::ALL`] order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharacterRatings {
    pub name: String,
    pub ratings: Vec<Rating>,
}

/// SOTOPIA's overall score: the plain mean of the seven dimensions, whatever their ranges.
pub fn overall(scores: &[f64]) -> Option<f64> {
    (scores.len() == Dimension::ALL.len()).then(|| scores.iter().sum::<f64>() / 7.0)
}

fn rating_schema(dimension: Dimension, decoder: bool) -> Value {
    let (low, high) = dimension.range();
    // A constrained decoder is handed the allowed integers; an endpoint the bounds.
    let score = if decoder {
        json!({"type": "integer", "enum": (low..=high).collect::<Vec<i64>>()})
    } else {
        json!({"type": "integer", "minimum": low, "maximum": high})
    };
    json!({
        "type": "object",
        "properties": {
            "reasoning": {"type": "string", "minLength": 1},
            "score": score,
        },
        "required": ["reasoning", "score"],
        "additionalProperties": false,
    })
}

fn entry_schema(names: &[String], decoder: bool) -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert("name".to_string(), json!({"type": "string", "enum": names}));
    for dimension in Dimension::ALL {
        properties.insert(
            dimension.as_str().to_string(),
            rating_schema(dimension, decoder),
        );
    }
    let mut required = vec!["name"];
    required.extend(Dimension::ALL.map(Dimension::as_str));
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// The JSON schema of a rubric answer about `characters`, as an endpoint is given it.
pub fn schema(characters: &[String]) -> Value {
    json!({
        "type": "object",
        "properties": {
            "characters": {
                "type": "array",
                "items": entry_schema(characters, false),
                "minItems": characters.len(),
                "maxItems": characters.len(),
            },
        },
        "required": ["characters"],
        "additionalProperties": false,
    })
}

/// [`schema`] for a constrained decoder: every character once, in order, each score one of the
/// integers its dimension allows.
pub fn decoder_schema(characters: &[String]) -> Value {
    let mut schema = schema(characters);
    let entries: Vec<Value> = characters
        .iter()
        .map(|name| entry_schema(std::slice::from_ref(name), true))
        .collect();
    schema["properties"]["characters"]["items"] = entry_schema(characters, true);
    schema["properties"]["characters"]["prefixItems"] = Value::from(entries);
    schema
}

/// `name`'s rating on `dimension`, or `None` with its problem recorded.
fn rating_of(
    value: Option<&Value>,
    name: &str,
    dimension: Dimension,
    problems: &mut Problems,
) -> Option<Rating> {
    let mut refuse = |kind: &str, problem: &str| {
        let message = format!("{name}'s {dimension}: {problem}");
        problems.unusable(kind, Some(name), dimension.as_str(), message);
        None
    };
    let Some(value) = value else {
        return refuse("not_rated", "not rated");
    };
    let Some(reasoning) = value
        .get("reasoning")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|r| !r.is_empty())
    else {
        return refuse("reason_missing", "no \"reasoning\"");
    };
    let (low, high) = dimension.range();
    let score = match value.get("score") {
        Some(Value::Number(number)) => match number.as_i64() {
            Some(score) => score,
            None => {
                return refuse(
                    "score_out_of_range",
                    &format!("the score {number} is not a whole number from {low} to {high}"),
                );
            }
        },
        Some(other) => {
            return refuse("not_a_score", &format!("the score {other} is not a number"));
        }
        None => return refuse("missing", "no \"score\""),
    };
    if !(low..=high).contains(&score) {
        return refuse(
            "score_out_of_range",
            &format!(
                "the score {score} is out of range: {dimension} is scored from {low} to {high}"
            ),
        );
    }
    Some(Rating {
        reasoning: reasoning.to_string(),
        score,
    })
}

/// Checks a judge's rubric answer about `characters`; returns each character's ratings in
/// `characters` order, or every problem found, in words the judge can act on when re-asked.
pub fn check(value: &Value, characters: &[String]) -> Result<Vec<CharacterRatings>, Rejection> {
    crate::judgement::per_character(value, characters, "rate", |name, entry, problems| {
        let ratings: Vec<Option<Rating>> = Dimension::ALL
            .into_iter()
            .map(|dimension| rating_of(entry.get(dimension.as_str()), name, dimension, problems))
            .collect();
        Some(CharacterRatings {
            name: name.to_string(),
            ratings: ratings.into_iter().collect::<Option<_>>()?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cast() -> Vec<String> {
        vec!["Noor".to_string(), "Theo".to_string()]
    }

    fn rated(name: &str, scores: [i64; 7]) -> Value {
        let mut entry = json!({"name": name});
        for (dimension, score) in Dimension::ALL.into_iter().zip(scores) {
            entry[dimension.as_str()] = json!({"reasoning": "Turn 2.", "score": score});
        }
        entry
    }

    #[test]
    fn every_dimension_has_its_range() {
        let ranges: Vec<(&str, (i64, i64))> = Dimension::ALL
            .iter()
            .map(|d| (d.as_str(), d.range()))
            .collect();
        assert_eq!(
            ranges,
            [
                ("believability", (0, 10)),
                ("relationship", (-5, 5)),
                ("knowledge", (0, 10)),
                ("secret", (-10, 0)),
                ("social_rules", (-10, 0)),
                ("financial_and_material_benefits", (-5, 5)),
                ("goal", (0, 10)),
            ]
        );
    }

    #[test]
    fn an_answer_in_range_reads_in_cast_order() {
        let answer = json!({"characters": [
            rated("Theo", [8, -2, 3, 0, -1, 0, 4]),
            rated("Noor", [9, 5, 0, -10, 0, -5, 10]),
        ]});
        let ratings = check(&answer, &cast()).unwrap();
        assert_eq!(ratings[0].name, "Noor");
        let noor: Vec<i64> = ratings[0].ratings.iter().map(|r| r.score).collect();
        assert_eq!(noor, [9, 5, 0, -10, 0, -5, 10]);
        assert_eq!(ratings[1].ratings[1].score, -2);
    }

    /// Out of range is refused with the dimension's range, never clamped; so are fractions,
    /// strings, missing reasoning and missing characters.
    #[test]
    fn a_score_out_of_range_or_not_a_whole_number_is_refused() {
        let answer = json!({"characters": [
            rated("Noor", [11, 0, 0, 3, 0, 0, 5]),
            rated("Theo", [5, 0, 0, 0, 0, 0, 5]),
        ]});
        let problem = check(&answer, &cast()).unwrap_err().message();
        assert!(
            problem.contains(
                "Noor's believability: the score 11 is out of range: believability \
                 is scored from 0 to 10"
            ),
            "{problem}"
        );
        assert!(
            problem.contains(
                "Noor's secret: the score 3 is out of range: secret is scored from \
                 -10 to 0"
            ),
            "{problem}"
        );
        assert!(!problem.contains("missing"), "{problem}");
        let mut fraction = rated("Theo", [5, 0, 0, 0, 0, 0, 5]);
        fraction["goal"]["score"] = json!(7.5);
        fraction["knowledge"]["reasoning"] = json!(" ");
        let answer = json!({"characters": [rated("Noor", [5, 0, 0, 0, 0, 0, 5]), fraction]});
        let problem = check(&answer, &cast()).unwrap_err().message();
        assert!(problem.contains("Theo's goal: the score 7.5 is not a whole number"));
        assert!(problem.contains("Theo's knowledge: no \"reasoning\""));
        let answer = json!({"characters": [rated("Noor", [5, 0, 0, 0, 0, 0, 5])]});
        let missing = check(&answer, &cast()).unwrap_err();
        assert_eq!(missing.kinds(), ["role_missing"]);
        assert_eq!(
            missing.message(),
            "Fix this in your answer: missing: Theo; rate every character"
        );
    }

    #[test]
    fn the_overall_score_is_the_plain_mean_of_the_seven() {
        assert_eq!(overall(&[7.0, 0.0, 7.0, 0.0, 0.0, 0.0, 7.0]), Some(3.0));
        assert_eq!(overall(&[7.0, 0.0]), None);
    }

    #[test]
    fn the_decoder_schema_allows_only_the_range_and_lists_everyone_in_order() {
        let schema = decoder_schema(&cast());
        let first = &schema["properties"]["characters"]["prefixItems"][0]["properties"];
        assert_eq!(first["name"]["enum"], json!(["Noor"]));
        assert_eq!(
            first["secret"]["properties"]["score"]["enum"],
            json!([-10, -9, -8, -7, -6, -5, -4, -3, -2, -1, 0])
        );
        let endpoint = schema_for_endpoint_bounds();
        assert_eq!(endpoint, (json!(-5), json!(5)));
    }

    fn schema_for_endpoint_bounds() -> (Value, Value) {
        let schema = schema(&cast());
        let entry = &schema["properties"]["characters"]["items"]["properties"];
        let score = &entry["relationship"]["properties"]["score"];
        (score["minimum"].clone(), score["maximum"].clone())
    }
}
