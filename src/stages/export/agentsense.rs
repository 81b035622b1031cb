//! The AgentSense half of the dataset: the scenario templates and their synthetic instances as
//! two Hugging Face configs (`templates`, `instances`: JSON lines and Parquet), the same
//! instances as one AgentSense-style scenario file, and SOTOPIA's agent profiles, environment
//! profiles and the combinations that pair them, as JSON lines with SOTOPIA's field names.
//!
//! Nothing here names the show: a template is known by an opaque id (a hash of its scenario's
//! id; `viss check leakage` prints each beside its scenario), and the replacements
//! anonymisation made stay in the store for the dataset's owner (`viss show template
//! <scenario>`). A template whose answers are flagged, and an instance whose cast still breaks
//! a rule, are left out (kept with `include_flagged`) and counted in the card.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::stages::export::leakage::LeakageReport;
use crate::stages::instantiate::{Instance, Instances, fill_slots};
use crate::stages::llm_step::ReviewOutcome;
use crate::stages::template::{Similarity, TemplateRecord};
use crate::text::role::RoleId;

pub const TEMPLATES_JSONL: &str = "agentsense/templates.jsonl";
pub const TEMPLATES_PARQUET: &str = "agentsense/templates.parquet";
pub const INSTANCES_JSONL: &str = "agentsense/instances.jsonl";
pub const INSTANCES_PARQUET: &str = "agentsense/instances.parquet";
/// Every instance in one JSON array, as AgentSense's own scenario files hold them.
pub const SCENARIOS_JSON: &str = "agentsense/scenarios.json";
pub const SOTOPIA_AGENTS: &str = "sotopia/agent_profiles.jsonl";
pub const SOTOPIA_ENVIRONMENTS: &str = "sotopia/environment_profiles.jsonl";
/// Which agents play which environment (SOTOPIA's `EnvAgentComboStorage`).
pub const SOTOPIA_COMBOS: &str = "sotopia/env_agent_combos.jsonl";

/// One scenario's AgentSense records, as the export stage found them.
pub struct AgentSenseSources {
    pub scenario: String,
    pub template: TemplateRecord,
    /// `None`: `instantiate` has not made (or failed to make) this template's casts.
    pub instances: Option<Instances>,
    pub prediction: Option<crate::stages::script_prediction::ScriptPrediction>,
    pub blind: Option<crate::stages::blind_test::BlindTest>,
    /// What the answers behind the template, its casts and the probes cost, by stage.
    pub costs: BTreeMap<String, crate::dag::cost::AnswersCost>,
}

/// A template as the dataset has it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateRow {
    /// `t` and twelve hex digits: stable for the scenario, and not its name.
    pub template_id: String,
    /// The background, participants as slots (`{r1}`).
    pub background: String,
    /// personal_domain, small_society or large_society.
    pub domain: String,
    /// Whether any slot holds information only it knows.
    pub private_information: bool,
    pub slots: Vec<SlotRow>,
    /// How much the template still reads like its source script segment, 0 to 1.
    pub similarity: SimilarityRow,
    /// The stages whose flagged answers the template rests on (empty unless flagged templates
    /// are exported).
    pub flagged_upstream: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlotRow {
    /// `r1`, `r2`, ...
    pub slot: String,
    pub goals: Vec<GoalRow>,
    /// What only this slot knows, each with the question that asks others about it.
    pub private_info: Vec<String>,
    pub questions: Vec<QuestionRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GoalRow {
    pub goal: String,
    /// One of AgentSense's seven goal categories.
    pub category: String,
    /// existence, relatedness or growth.
    pub erg: String,
}

/// A multiple-choice question about what one slot alone knows, asked of the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionRow {
    pub question: String,
    /// Four options, in the order asked.
    pub options: Vec<String>,
    /// The right option's letter, `A` to `D`.
    pub answer: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SimilarityRow {
    pub jaccard: f64,
    pub gestalt: f64,
    pub levenshtein: f64,
}

/// One synthetic instance of a template: the template's text with the characters' names in
/// the slots, and every character's profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstanceRow {
    /// The template's id and the instance's number: `t0123456789ab-i3`.
    pub instance_id: String,
    pub template_id: String,
    /// The seed its cast was asked for with.
    pub seed: u64,
    pub background: String,
    pub domain: String,
    pub characters: Vec<CharacterRow>,
    pub relationships: Vec<RelationRow>,
    /// The rules the cast still breaks (empty unless flagged instances are exported).
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CharacterRow {
    pub slot: String,
    pub first_name: String,
    pub last_name: String,
    pub gender: String,
    pub pronouns: String,
    pub age: u32,
    pub occupation: String,
    /// SOTOPIA's one-line form: "Openness to Experience - High; ...".
    pub big_five: String,
    pub moral_values: Vec<String>,
    pub decision_making_style: String,
    pub public_info: String,
    pub secret: String,
    pub goals: Vec<GoalRow>,
    pub private_info: Vec<String>,
    /// Questions about what this character alone knows, asked of the others.
    pub questions: Vec<QuestionRow>,
}

impl CharacterRow {
    /// The name the character goes by in a run: first and last.
    pub fn full_name(&self) -> String {
        format!("{} {}", self.first_name, self.last_name)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RelationRow {
    /// The slots of the pair.
    pub first: String,
    pub second: String,
    /// family, friend, romantic, acquaintance or stranger.
    pub relationship: String,
    /// What each sees of the other: all_but_secret, name_occupation_pronouns or pronouns.
    pub sees: String,
}

/// What the card says of the AgentSense half.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentSenseCounts {
    pub templates: usize,
    pub instances: usize,
    pub private_information: usize,
    pub goals_by_erg: BTreeMap<String, usize>,
    pub goals_by_category: BTreeMap<String, usize>,
    pub domains: BTreeMap<String, usize>,
    /// Templates left out because an answer behind them is flagged, by stage.
    pub flagged_templates: BTreeMap<String, usize>,
    /// Instances left out because their cast breaks a rule, by rule.
    pub flagged_instances: BTreeMap<String, usize>,
    /// Templates exported without instances (`instantiate` failed or is not built).
    pub without_instances: usize,
    /// Casts a person accepted (`viss review`), flagged ones included, and exported.
    pub accepted_instances: usize,
    /// Casts a person rejected: always left out.
    pub rejected_instances: usize,
    pub leakage: LeakageReport,
    /// What the answers behind the exported templates cost, by stage.
    pub costs: super::card::Costs,
}

/// The AgentSense files and what the card says of them.
pub struct AgentSenseDataset {
    pub files: Vec<(&'static str, Vec<u8>)>,
    pub counts: AgentSenseCounts,
    /// The Hugging Face configs: name and Parquet file.
    pub configs: Vec<(&'static str, &'static str)>,
}

/// A template's id in the dataset: opaque, stable for its scenario.
pub fn template_id(scenario: &str) -> String {
    format!("t{}", &blake3::hash(scenario.as_bytes()).to_hex()[..12])
}

impl From<Similarity> for SimilarityRow {
    fn from(s: Similarity) -> Self {
        SimilarityRow {
            jaccard: s.jaccard,
            gestalt: s.gestalt,
            levenshtein: s.levenshtein,
        }
    }
}

/// The template's slots, questions with their stored options.
fn slot_rows(record: &TemplateRecord, fill: &dyn Fn(&str) -> String) -> Vec<SlotRow> {
    record
        .template
        .roles
        .iter()
        .map(|role| SlotRow {
            slot: role.role.to_string(),
            goals: role
                .goals
                .iter()
                .map(|goal| GoalRow {
                    goal: fill(&goal.goal),
                    category: goal.category.as_str().to_string(),
                    erg: goal.erg.as_str().to_string(),
                })
                .collect(),
            private_info: role
                .questions
                .iter()
                .map(|q| fill(&q.private_info))
                .collect(),
            questions: record
                .choices
                .iter()
                .filter(|choice| choice.role == role.role)
                .map(|choice| QuestionRow {
                    question: fill(&choice.question),
                    options: choice.options.iter().map(|o| fill(o)).collect(),
                    answer: choice.answer.to_string(),
                })
                .collect(),
        })
        .collect()
}

fn template_row(scenario: &str, record: &TemplateRecord) -> TemplateRow {
    let slots = slot_rows(record, &|text| text.to_string());
    TemplateRow {
        template_id: template_id(scenario),
        background: record.template.background.clone(),
        domain: record.template.domain.as_str().to_string(),
        private_information: slots.iter().any(|slot| !slot.questions.is_empty()),
        slots,
        similarity: record.similarity.into(),
        flagged_upstream: record.flagged_upstream.clone(),
    }
}

/// Instance `instance` of `scenario`'s template as the dataset exports it (and as an
/// AgentSense run plays it).
pub fn instance_row(
    scenario: &str,
    record: &TemplateRecord,
    instances: &Instances,
    instance: &Instance,
) -> InstanceRow {
    let fill = |text: &str| fill_slots(text, &instance.characters);
    let slots = slot_rows(record, &fill);
    let characters = instance
        .characters
        .iter()
        .map(|c| {
            let slot = slots.iter().find(|s| s.slot == c.slot.to_string());
            CharacterRow {
                slot: c.slot.to_string(),
                first_name: c.first_name.trim().to_string(),
                last_name: c.last_name.trim().to_string(),
                gender: c.gender.as_str().to_string(),
                pronouns: c.pronouns.trim().to_string(),
                age: c.age,
                occupation: c.occupation.trim().to_string(),
                big_five: c.big_five.sotopia(),
                moral_values: c
                    .moral_values
                    .iter()
                    .map(|v| v.as_str().to_string())
                    .collect(),
                decision_making_style: c.decision_making_style.as_str().to_string(),
                public_info: c.public_info.trim().to_string(),
                secret: c.secret.trim().to_string(),
                goals: slot.map(|s| s.goals.clone()).unwrap_or_default(),
                private_info: slot.map(|s| s.private_info.clone()).unwrap_or_default(),
                questions: slot.map(|s| s.questions.clone()).unwrap_or_default(),
            }
        })
        .collect();
    let relationships = instances
        .pairs
        .iter()
        .map(|pair| RelationRow {
            first: pair.first.to_string(),
            second: pair.second.to_string(),
            relationship: pair.relationship.as_str().to_string(),
            sees: sees_name(instance, pair.first, pair.second),
        })
        .collect();
    let template_id = template_id(scenario);
    InstanceRow {
        instance_id: format!("{template_id}-i{}", instance.index),
        template_id,
        seed: instance.seed,
        background: fill(&record.template.background),
        domain: record.template.domain.as_str().to_string(),
        characters,
        relationships,
        problems: instance
            .problems
            .iter()
            .map(|p| p.message.clone())
            .collect(),
    }
}

fn sees_name(instance: &Instance, first: RoleId, second: RoleId) -> String {
    instance
        .sees
        .iter()
        .find(|(a, b, _)| *a == first && *b == second)
        .map(|(_, _, sees)| {
            serde_json::to_value(sees)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        })
        .unwrap_or_default()
}

/// SOTOPIA's agent profile of one character of an instance (its `BaseAgentProfile` fields).
fn sotopia_agent(instance: &InstanceRow, character: &CharacterRow) -> Value {
    serde_json::json!({
        "pk": format!("{}-{}", instance.instance_id, character.slot),
        "first_name": character.first_name,
        "last_name": character.last_name,
        "age": character.age,
        "occupation": character.occupation,
        "gender": sotopia_gender(&character.gender),
        "gender_pronoun": sotopia_pronoun(&character.pronouns),
        "public_info": character.public_info,
        "big_five": character.big_five,
        "moral_values": character.moral_values.iter().map(|v| capitalized(v)).collect::<Vec<_>>(),
        "decision_making_style": capitalized(&character.decision_making_style),
        "secret": character.secret,
        "tag": "viss-agentsense",
    })
}

/// SOTOPIA's environment profile of an instance (its `BaseEnvironmentProfile` fields): the
/// background with the characters' names, each agent's goals with its private information as
/// SOTOPIA's `<extra_info>`, the relationship of the first two characters (SOTOPIA's
/// environments have two agents; every pair is in `relationships`, an extra field SOTOPIA's
/// model allows), and each slot's age range.
fn sotopia_environment(instance: &InstanceRow, instances: &Instances) -> Value {
    let goals: Vec<String> = instance
        .characters
        .iter()
        .map(|c| {
            let mut text = c
                .goals
                .iter()
                .map(|g| g.goal.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            if !c.private_info.is_empty() {
                text.push_str(&format!(
                    " <extra_info>{}</extra_info>",
                    c.private_info.join(" ")
                ));
            }
            text
        })
        .collect();
    let relationship = instances
        .pairs
        .first()
        .map_or(0, |pair| pair.relationship.sotopia());
    let ages: Vec<String> = instances
        .constraints
        .iter()
        .map(|rule| format!("({}, {})", rule.age.0, rule.age.1))
        .collect();
    let occupations: Option<String> = instances
        .constraints
        .iter()
        .map(|rule| {
            rule.occupation
                .as_ref()
                .map(|o| format!("['{}']", o.replace('\'', "")))
        })
        .collect::<Option<Vec<String>>>()
        .map(|each| format!("[{}]", each.join(", ")));
    serde_json::json!({
        "pk": instance.instance_id,
        "codename": instance.instance_id,
        "source": "viss AgentSense",
        "scenario": instance.background,
        "agent_goals": goals,
        "relationship": relationship,
        "age_constraint": format!("[{}]", ages.join(", ")),
        "occupation_constraint": occupations,
        "tag": "viss-agentsense",
        "relationships": instance.relationships,
    })
}

fn sotopia_gender(gender: &str) -> &'static str {
    match gender {
        "female" => "Woman",
        "male" => "Man",
        _ => "Nonbinary",
    }
}

fn sotopia_pronoun(pronouns: &str) -> String {
    pronouns
        .split('/')
        .map(capitalized)
        .collect::<Vec<_>>()
        .join("/")
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn values<T: Serialize>(rows: &[T]) -> Vec<Value> {
    rows.iter()
        .map(|row| serde_json::to_value(row).expect("a row serializes"))
        .collect()
}

/// `rows` as JSON lines, one row per line.
pub(crate) fn json_lines<T: Serialize>(rows: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    for row in rows {
        serde_json::to_writer(&mut out, row).expect("a row serializes");
        out.push(b'\n');
    }
    out
}

/// The AgentSense files of `sources` (templates in scenario order), the flagged ones left out
/// unless `include_flagged`. `None` when no scenario has a template.
pub fn assemble(
    mut sources: Vec<AgentSenseSources>,
    include_flagged: bool,
) -> Result<Option<AgentSenseDataset>, viss_parquet::ParquetError> {
    if sources.is_empty() {
        return Ok(None);
    }
    sources.sort_by(|a, b| a.scenario.cmp(&b.scenario));
    let mut counts = AgentSenseCounts::default();
    let mut templates = Vec::new();
    let mut instances = Vec::new();
    let mut agents = Vec::new();
    let mut environments = Vec::new();
    let mut combos = Vec::new();
    for source in &sources {
        let record = &source.template;
        if !record.flagged_upstream.is_empty() {
            for stage in &record.flagged_upstream {
                *counts.flagged_templates.entry(stage.clone()).or_default() += 1;
            }
            if !include_flagged {
                continue;
            }
        }
        let row = template_row(&source.scenario, record);
        counts.templates += 1;
        counts.costs.add_stages(&source.costs);
        counts.private_information += usize::from(row.private_information);
        *counts.domains.entry(row.domain.clone()).or_default() += 1;
        for goal in row.slots.iter().flat_map(|slot| &slot.goals) {
            *counts.goals_by_erg.entry(goal.erg.clone()).or_default() += 1;
            *counts
                .goals_by_category
                .entry(goal.category.clone())
                .or_default() += 1;
        }
        counts
            .leakage
            .templates
            .push((row.template_id.clone(), record.similarity));
        templates.push(row);
        let Some(made) = &source.instances else {
            counts.without_instances += 1;
            continue;
        };
        for instance in &made.instances {
            match instance.review.as_ref().map(|mark| mark.verdict) {
                Some(ReviewOutcome::Rejected) => {
                    counts.rejected_instances += 1;
                    continue;
                }
                Some(_) => counts.accepted_instances += 1,
                None => {}
            }
            if !instance.problems.is_empty() {
                for problem in &instance.problems {
                    *counts
                        .flagged_instances
                        .entry(problem.kind.clone())
                        .or_default() += 1;
                }
                if !include_flagged {
                    continue;
                }
            }
            let row = instance_row(&source.scenario, record, made, instance);
            let agent_ids: Vec<String> = row
                .characters
                .iter()
                .map(|character| {
                    let agent = sotopia_agent(&row, character);
                    let id = agent["pk"].as_str().expect("a pk").to_string();
                    agents.push(agent);
                    id
                })
                .collect();
            environments.push(sotopia_environment(&row, made));
            combos.push(serde_json::json!({
                "pk": row.instance_id,
                "env_id": row.instance_id,
                "agent_ids": agent_ids,
            }));
            counts.instances += 1;
            instances.push(row);
        }
    }
    let exported: Vec<&AgentSenseSources> = sources
        .iter()
        .filter(|source| include_flagged || source.template.flagged_upstream.is_empty())
        .collect();
    counts.leakage = LeakageReport::of(std::mem::take(&mut counts.leakage.templates)).with_probes(
        exported
            .iter()
            .filter_map(|source| source.prediction.as_ref()),
        exported.iter().filter_map(|source| source.blind.as_ref()),
    );
    let templates_schema = super::record::schema_of::<TemplateRow>("agentsense-template");
    let instances_schema = super::record::schema_of::<InstanceRow>("agentsense-instance");
    let (template_values, instance_values) = (values(&templates), values(&instances));
    let mut files = vec![
        (TEMPLATES_JSONL, json_lines(&templates)),
        (
            TEMPLATES_PARQUET,
            viss_parquet::write_parquet(&template_values, &templates_schema)?,
        ),
    ];
    let mut configs = vec![("templates", TEMPLATES_PARQUET)];
    if !instances.is_empty() {
        files.push((INSTANCES_JSONL, json_lines(&instances)));
        files.push((
            INSTANCES_PARQUET,
            viss_parquet::write_parquet(&instance_values, &instances_schema)?,
        ));
        files.push((
            SCENARIOS_JSON,
            serde_json::to_vec_pretty(&instances).expect("rows serialize"),
        ));
        files.push((SOTOPIA_AGENTS, json_lines(&agents)));
        files.push((SOTOPIA_ENVIRONMENTS, json_lines(&environments)));
        files.push((SOTOPIA_COMBOS, json_lines(&combos)));
        configs.push(("instances", INSTANCES_PARQUET));
    }
    Ok(Some(AgentSenseDataset {
        files,
        counts,
        configs,
    }))
}

/// The card's AgentSense section.
pub fn card_section(counts: &AgentSenseCounts) -> String {
    let list = |map: &BTreeMap<String, usize>| {
        if map.is_empty() {
            "none".to_string()
        } else {
            map.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut out = String::from("\n## AgentSense: templates and synthetic instances\n\n");
    out.push_str(&format!(
        "- templates: {} (config `templates`, `{TEMPLATES_JSONL}`), of which {} involve \
         private information\n- instances: {} (config `instances`, `{INSTANCES_JSONL}`; the \
         same as one AgentSense-style file, `{SCENARIOS_JSON}`; SOTOPIA's profiles in \
         `{SOTOPIA_AGENTS}`, `{SOTOPIA_ENVIRONMENTS}` and `{SOTOPIA_COMBOS}`)\n- goals by ERG \
         class: {}\n- goals by category: {}\n- domains: {}\n",
        counts.templates,
        counts.private_information,
        counts.instances,
        list(&counts.goals_by_erg),
        list(&counts.goals_by_category),
        list(&counts.domains),
    ));
    let flagged: Vec<String> = [
        (
            &counts.flagged_templates,
            "templates resting on a flagged answer of",
        ),
        (&counts.flagged_instances, "instances whose cast breaks"),
    ]
    .into_iter()
    .filter(|(counted, _)| !counted.is_empty())
    .map(|(counted, what)| format!("{what} {}", list(counted)))
    .collect();
    if !flagged.is_empty() {
        out.push_str(&format!(
            "- flagged, left out unless `include_flagged`: {}\n",
            flagged.join("; ")
        ));
    }
    if counts.accepted_instances > 0 || counts.rejected_instances > 0 {
        out.push_str(&format!(
            "- casts reviewed by a person (`viss review instantiate`): {} accepted, {} \
             rejected and left out\n",
            counts.accepted_instances, counts.rejected_instances
        ));
    }
    if counts.without_instances > 0 {
        out.push_str(&format!(
            "- templates without instances (`instantiate` failed or is not built): {}\n",
            counts.without_instances
        ));
    }
    out.push_str(
        "\nLeakage: how much each template still reads like its source script segment \
         (AgentSense reports Jaccard 10.58, Gestalt 3.35, Levenshtein 11.62 percent on \
         average). Jaccard over lowercased word sets, Gestalt (Ratcliff-Obershelp) by the \
         `difflib-fast` crate, normalised Levenshtein by `strsim`. Then how often a model named \
         the source show and episode from a template (`script_prediction`), and how often the \
         private-information questions were answered right from the template alone, before \
         any interaction (`blind_test`).\n\n```text\n",
    );
    out.push_str(&counts.leakage.render());
    out.push_str("```\n");
    out
}

/// How a scenario's AgentViSS record is written when the export anonymises names
/// (`anonymize_names`): every text with `anonymize`'s replacements applied and each
/// participant's name replaced by a synthetic character's, from the first clean instance whose
/// genders agree with the record's roles (so no he or she in the record contradicts the name).
pub struct Renaming {
    replacements: Vec<crate::stages::anonymize::answer::Replacement>,
    context: crate::annotation::ScenarioContext,
    characters: Vec<crate::stages::instantiate::answer::Character>,
}

/// The record's fields that name the source rather than tell the scene: left as they are.
const SOURCE_FIELDS: [&str; 8] = [
    "id",
    "show",
    "show_title",
    "episode",
    "episode_title",
    "script_file",
    "group_image",
    "portrait",
];

impl Renaming {
    /// The renaming of a scenario, or `None` when no clean instance fits its roles' genders
    /// (`genders` in role order; unknown fits any).
    pub fn new(
        anonymization: &crate::stages::anonymize::answer::Anonymization,
        context: crate::annotation::ScenarioContext,
        instances: &Instances,
        genders: &[crate::annotation::vocab::Gender],
    ) -> Option<Renaming> {
        use crate::annotation::vocab::Gender;
        let fits = |instance: &&Instance| {
            instance.clean()
                && instance.characters.len() == genders.len()
                && instance
                    .characters
                    .iter()
                    .zip(genders)
                    .all(|(c, g)| *g == Gender::Unknown || c.gender == *g)
        };
        let instance = instances.instances.iter().find(fits)?;
        Some(Renaming {
            replacements: anonymization.replacements.clone(),
            context,
            characters: instance.characters.clone(),
        })
    }

    pub fn text(&self, text: &str) -> String {
        let slotted = crate::stages::anonymize::answer::anonymize_text(
            text,
            &self.replacements,
            &self.context,
        );
        fill_slots(&slotted, &self.characters)
    }

    /// `record` with every text but those naming its source renamed.
    pub fn record(&self, record: super::record::BenchmarkRecord) -> super::record::BenchmarkRecord {
        fn walk(value: &mut Value, renaming: &Renaming) {
            match value {
                Value::String(text) => *text = renaming.text(text),
                Value::Array(items) => items.iter_mut().for_each(|v| walk(v, renaming)),
                Value::Object(fields) => {
                    for (key, field) in fields.iter_mut() {
                        if !SOURCE_FIELDS.contains(&key.as_str()) {
                            walk(field, renaming);
                        }
                    }
                }
                _ => {}
            }
        }
        let mut value = serde_json::to_value(&record).expect("a record serializes");
        walk(&mut value, self);
        serde_json::from_value(value).expect("renaming keeps the record's shape")
    }
}
