//! The truth file: what an episode's scenarios are meant to be, written by hand from its script
//! (the demo's is `crates/dev/src/demo/s01e01.truth.toml`). Every fact carries the script line
//! that justifies it (`evidence`), or, when its value is `unknown`, a `note` saying why.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::annotation::{DialogueType, Gender};

/// A truth file, read and checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Truth {
    pub show: String,
    pub episode: String,
    pub characters: Vec<CharacterTruth>,
    pub scenarios: Vec<ScenarioTruth>,
}

/// One fact and why it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fact<T> {
    pub value: T,
    /// A verbatim excerpt of the script that justifies the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    /// Why the value is `unknown` (no cue in the script), or any other remark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What the script says about one character, for the whole episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CharacterTruth {
    pub name: String,
    pub gender: Fact<Gender>,
    /// `"A-B"` (years, inclusive) or `"unknown"`.
    pub age: Fact<String>,
    pub occupation: OccupationTruth,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OccupationTruth {
    /// The job, or `"unknown"`.
    pub value: String,
    /// Words or phrases an answer must contain one of (whole words, any case) to be right;
    /// empty means `value` itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accept: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioTruth {
    /// The scenario id as the pipeline gives it (`show/episode/sc…`).
    pub id: String,
    /// A label for humans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scene: Option<String>,
    pub participants: Fact<Vec<String>>,
    pub dialogue_type: Fact<DialogueType>,
    #[serde(default)]
    pub roles: Vec<RoleTruth>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleTruth {
    pub name: String,
    /// Whether the role's natural conflict characteristic is `competing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub competes: Option<Fact<bool>>,
    /// What the role wants, for humans (not scored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wants: Option<String>,
}

/// A truth file that cannot be used: where, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{}: {message}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct TruthError {
    pub file: PathBuf,
    /// 1-based line, when the problem has one.
    pub line: Option<usize>,
    pub message: String,
}

/// An age range in years, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AgeRange {
    pub low: f64,
    pub high: f64,
}

impl AgeRange {
    pub fn middle(self) -> f64 {
        (self.low + self.high) / 2.0
    }

    pub fn contains(self, years: f64) -> bool {
        self.low <= years && years <= self.high
    }
}

pub const UNKNOWN: &str = "unknown";

impl Truth {
    /// Reads and checks a truth file.
    pub fn load(path: &Path) -> Result<Truth, TruthError> {
        let text = std::fs::read_to_string(path).map_err(|error| TruthError {
            file: path.to_path_buf(),
            line: None,
            message: format!("cannot read the truth file: {error}"),
        })?;
        Truth::parse(&text, path)
    }

    /// Parses and checks the text of a truth file; `file` names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Truth, TruthError> {
        let truth: Truth = toml::from_str(text).map_err(|error| TruthError {
            file: file.to_path_buf(),
            line: error.span().map(|span| line_at(text, span.start)),
            message: error.message().trim().to_string(),
        })?;
        truth.check().map_err(|(needle, message)| TruthError {
            file: file.to_path_buf(),
            line: needle.and_then(|n| line_of(text, &n)),
            message,
        })?;
        Ok(truth)
    }

    pub fn character(&self, name: &str) -> Option<&CharacterTruth> {
        self.characters.iter().find(|c| c.name == name)
    }

    /// Every evidence quote in the file, with what it supports.
    pub fn evidence(&self) -> Vec<(String, &str)> {
        let mut out = Vec::new();
        for c in &self.characters {
            let facts = [
                ("gender", c.gender.evidence.as_deref()),
                ("age", c.age.evidence.as_deref()),
                ("occupation", c.occupation.evidence.as_deref()),
            ];
            for (field, evidence) in facts {
                if let Some(evidence) = evidence {
                    out.push((format!("{} {field}", c.name), evidence));
                }
            }
        }
        for s in &self.scenarios {
            let facts = [
                ("participants", s.participants.evidence.as_deref()),
                ("dialogue_type", s.dialogue_type.evidence.as_deref()),
            ];
            for (field, evidence) in facts {
                if let Some(evidence) = evidence {
                    out.push((format!("{} {field}", s.id), evidence));
                }
            }
            for r in &s.roles {
                if let Some(evidence) = r.competes.as_ref().and_then(|f| f.evidence.as_deref()) {
                    out.push((format!("{} {} competes", s.id, r.name), evidence));
                }
            }
        }
        out
    }

    /// The checks past the file's shape: (a string to find the line by, the problem).
    fn check(&self) -> Result<(), (Option<String>, String)> {
        let mut names = BTreeSet::new();
        for c in &self.characters {
            let at = Some(format!("name = {:?}", c.name));
            let problem =
                |message: String| (at.clone(), format!("character {}: {message}", c.name));
            if !names.insert(c.name.as_str()) {
                return Err(problem("listed twice".into()));
            }
            justified(
                c.gender.value == Gender::Unknown,
                &c.gender.evidence,
                &c.gender.note,
            )
            .map_err(|m| problem(format!("gender: {m}")))?;
            let age_unknown = c.age.value == UNKNOWN;
            if !age_unknown {
                parse_truth_age(&c.age.value).map_err(|m| problem(format!("age: {m}")))?;
            }
            justified(age_unknown, &c.age.evidence, &c.age.note)
                .map_err(|m| problem(format!("age: {m}")))?;
            let o = &c.occupation;
            let occupation_unknown = o.value == UNKNOWN;
            justified(occupation_unknown, &o.evidence, &o.note)
                .map_err(|m| problem(format!("occupation: {m}")))?;
            if occupation_unknown && !o.accept.is_empty() {
                return Err(problem(
                    "occupation: `accept` is for a known occupation".into(),
                ));
            }
            if o.value.trim().is_empty() || o.accept.iter().any(|a| words(a).is_empty()) {
                return Err(problem(
                    "occupation: an empty value or accepted phrase".into(),
                ));
            }
        }
        let mut ids = BTreeSet::new();
        for s in &self.scenarios {
            let at = Some(format!("id = {:?}", s.id));
            let problem = |message: String| (at.clone(), format!("scenario {}: {message}", s.id));
            if !ids.insert(s.id.as_str()) {
                return Err(problem("listed twice".into()));
            }
            let prefix = format!("{}/{}/", self.show, self.episode);
            if !s.id.starts_with(&prefix) {
                return Err(problem(format!("the id does not start with {prefix}")));
            }
            justified(false, &s.participants.evidence, &s.participants.note)
                .map_err(|m| problem(format!("participants: {m}")))?;
            justified(false, &s.dialogue_type.evidence, &s.dialogue_type.note)
                .map_err(|m| problem(format!("dialogue_type: {m}")))?;
            let mut present = BTreeSet::new();
            for p in &s.participants.value {
                if self.character(p).is_none() {
                    return Err(problem(format!("participant {p} is not in [[characters]]")));
                }
                if !present.insert(p.as_str()) {
                    return Err(problem(format!("participant {p} is listed twice")));
                }
            }
            if present.len() < 2 {
                return Err(problem("a scenario has at least two participants".into()));
            }
            let mut seen = BTreeSet::new();
            for r in &s.roles {
                if !present.contains(r.name.as_str()) {
                    return Err(problem(format!("role {} is not a participant", r.name)));
                }
                if !seen.insert(r.name.as_str()) {
                    return Err(problem(format!("role {} is listed twice", r.name)));
                }
                if let Some(competes) = &r.competes {
                    justified(false, &competes.evidence, &competes.note)
                        .map_err(|m| problem(format!("role {} competes: {m}", r.name)))?;
                }
            }
        }
        Ok(())
    }
}

/// A known value needs its evidence; an unknown one a note saying the script gives no cue.
fn justified(
    unknown: bool,
    evidence: &Option<String>,
    note: &Option<String>,
) -> Result<(), String> {
    let filled = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.trim().is_empty());
    match unknown {
        false if !filled(evidence) => Err("no `evidence` (a quote of the script)".into()),
        true if !filled(note) => Err("unknown without a `note` saying why".into()),
        _ => Ok(()),
    }
}

/// A truth age: `"A-B"` in years.
pub fn parse_truth_age(value: &str) -> Result<AgeRange, String> {
    let bad = || format!("\"{value}\" is not a range like \"30-39\" or \"unknown\"");
    let (low, high) = value.split_once('-').ok_or_else(bad)?;
    let low: u32 = low.trim().parse().map_err(|_| bad())?;
    let high: u32 = high.trim().parse().map_err(|_| bad())?;
    if low > high || high > 130 {
        return Err(bad());
    }
    Ok(AgeRange {
        low: f64::from(low),
        high: f64::from(high),
    })
}

/// Lowercase alphanumeric words of a label.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// 1-based line of byte `offset`.
fn line_at(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// 1-based line of the first occurrence of `needle`.
fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.find(needle).map(|offset| line_at(text, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
show = "s"
episode = "e1"

[[characters]]
name = "Ada"
gender = { value = "female", evidence = "her" }
age = { value = "30-39", evidence = "thirties" }
occupation = { value = "nurse", evidence = "a nurse" }

[[characters]]
name = "Ben"
gender = { value = "unknown", note = "no cue" }
age = { value = "unknown", note = "no cue" }
occupation = { value = "unknown", note = "no cue" }

[[scenarios]]
id = "s/e1/sc0001"
participants = { value = ["Ada", "Ben"], evidence = "Ada and Ben" }
dialogue_type = { value = "persuasion", evidence = "Ada: Please." }

[[scenarios.roles]]
name = "Ada"
competes = { value = true, evidence = "Ada: Mine." }
wants = "the last biscuit"
"#;

    fn parse(text: &str) -> Result<Truth, TruthError> {
        Truth::parse(text, Path::new("t.toml"))
    }

    #[test]
    fn reads_a_good_file() {
        let truth = parse(GOOD).unwrap();
        assert_eq!(truth.characters.len(), 2);
        assert!(truth.scenarios[0].roles[0].competes.as_ref().unwrap().value);
        assert_eq!(truth.evidence().len(), 6);
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let bad = GOOD.replace("\"female\"", "\"woman\"");
        let error = parse(&bad).unwrap_err();
        assert_eq!(
            (error.file.as_path(), error.line),
            (Path::new("t.toml"), Some(7))
        );
        assert!(error.to_string().starts_with("t.toml:7: "), "{error}");
        assert!(error.message.contains("woman"), "{error}");

        let bad = GOOD.replace("age = { value = \"30-39\"", "age = { value = \"thirty\"");
        let error = parse(&bad).unwrap_err();
        assert_eq!(error.line, Some(6), "{error}");
        assert!(error.message.contains("Ada: age"), "{error}");

        let bad = GOOD.replace(", evidence = \"a nurse\"", "");
        let error = parse(&bad).unwrap_err();
        assert!(
            error.message.contains("occupation: no `evidence`"),
            "{error}"
        );

        let bad = GOOD.replace(
            "value = \"unknown\", note = \"no cue\" }\nage",
            "value = \"unknown\" }\nage",
        );
        let error = parse(&bad).unwrap_err();
        assert_eq!(error.line, Some(12), "{error}");
        assert!(error.message.contains("without a `note`"), "{error}");

        let bad = GOOD.replace("[\"Ada\", \"Ben\"]", "[\"Ada\", \"Cy\"]");
        let error = parse(&bad).unwrap_err();
        assert_eq!(error.line, Some(18), "{error}");
        assert!(error.message.contains("participant Cy is not"), "{error}");

        let error = parse("show = \"s\"\nepisode = 3\n").unwrap_err();
        assert_eq!(error.line, Some(2), "{error}");

        let error = Truth::load(Path::new("/nonexistent/truth.toml")).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("/nonexistent/truth.toml: cannot read")
        );
    }

    /// Every evidence quote of `truth` is in `script` (white space aside).
    fn assert_evidence_in(truth: &Truth, script: &str) {
        let collapse = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let script_text = collapse(script);
        for (fact, evidence) in truth.evidence() {
            assert!(
                script_text.contains(&collapse(evidence)),
                "{fact}: \"{evidence}\" is not in the script"
            );
        }
    }

    /// The demo's truth is about the demo's script as the pipeline cuts it: the same scenario
    /// ids and participants, and every evidence quote is in the script.
    #[test]
    fn the_demo_truth_matches_its_script() {
        use crate::demo::plan;
        let truth = crate::demo::annotation_truth(Path::new("s01e01.truth.toml")).unwrap();
        let script = plan::parse_transcript();
        let units = crate::text::scenario::build_scenarios(&script, &Default::default()).unwrap();
        let cut: Vec<(String, Vec<String>)> = units
            .iter()
            .map(|u| (format!("demo/s01e01/{}", u.id), u.participants.clone()))
            .collect();
        let truth_cut: Vec<(String, Vec<String>)> = truth
            .scenarios
            .iter()
            .map(|s| (s.id.clone(), s.participants.value.clone()))
            .collect();
        assert_eq!(truth_cut, cut);
        assert_evidence_in(&truth, plan::SCRIPT);
        for s in &truth.scenarios {
            let roles: Vec<&str> = s.roles.iter().map(|r| r.name.as_str()).collect();
            assert_eq!(roles.len(), s.participants.value.len(), "{}", s.id);
            assert!(
                s.roles
                    .iter()
                    .all(|r| r.competes.is_some() && r.wants.is_some())
            );
        }
        assert_eq!(truth.evidence().len(), 4 * 3 + 4 * 2 + 12);
    }

    /// The harbour show's truth (tests/fixtures/shows/harbour, the second show measured on) is
    /// about its script as the pipeline cuts it, and every evidence quote is in the script.
    #[test]
    fn the_harbour_truth_matches_its_script() {
        use crate::text::script::{ParseOptions, parse_script};
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/shows/harbour");
        let truth = Truth::load(&dir.join("truth.toml")).unwrap();
        let text = std::fs::read_to_string(dir.join("e1.txt")).unwrap();
        let script = parse_script(&text, "e1.txt", &ParseOptions::default()).unwrap();
        let units = crate::text::scenario::build_scenarios(&script, &Default::default()).unwrap();
        let cut: Vec<(String, Vec<String>)> = units
            .iter()
            .map(|u| (format!("harbour/e1/{}", u.id), u.participants.clone()))
            .collect();
        let truth_cut: Vec<(String, Vec<String>)> = truth
            .scenarios
            .iter()
            .map(|s| (s.id.clone(), s.participants.value.clone()))
            .collect();
        assert_eq!(truth_cut, cut);
        assert_evidence_in(&truth, &text);
        // Unlike the demo's, no heading says who anyone is.
        for unit in &units {
            let heading = unit.scene_heading.clone().unwrap_or_default();
            for character in &truth.characters {
                assert!(!heading.contains(&character.name), "{heading}");
            }
        }
    }

    #[test]
    fn truth_ages_are_ranges() {
        assert_eq!(
            parse_truth_age("30-39").unwrap(),
            AgeRange {
                low: 30.0,
                high: 39.0
            }
        );
        assert!(parse_truth_age("39-30").is_err());
        assert!(parse_truth_age("30s").is_err());
    }
}
