//! `parse_script`: the episode's transcript or screenplay (Friends-style fan transcript,
//! Fountain, or plain `NAME: line`; detected unless the manifest says) becomes scenes of typed
//! lines, and each scene is cut into scenario units, contiguous stretches in which a stable
//! group of at least two characters talk. Units with fewer than `min_lines` dialogue lines are
//! dropped (AgentSense filtered scenes under 10). Every unit becomes a scenario item of its own
//! and gets its record scoped to it, so editing one scene re-runs only that scenario's work.

use serde::{Deserialize, Serialize};

use crate::annotation::{
    CastMember, ContextLine, ContextLineKind, EarlierAnswers, ScenarioContext,
};
use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::{AppCtx, Env, JobCtx, JobError, Level, Outputs, Stage, StageFailure};
use crate::manifest::RawReadError;
use crate::panic_context::{ParsePanic, catch_parse_panic};
use crate::text::encoding::{DecodeError, EncodingUsed, decode_text_owned};
use crate::text::scenario::{ScenarioError, ScenarioParams, ScenarioUnit, scenario_units};
use crate::text::script::{
    LineKind, ParseOptions, PlainSceneBreaks, Script, ScriptError, parse_script,
};

/// One scenario unit, per scenario: what every scenario-level stage starts from.
pub const SCENARIO: Port<ScenarioRecord> = Port::child(NAME, "scenario");
/// The scenario as the LLM steps see it, per scenario: it leaves out where the unit sits in
/// the file, so a scene inserted above it changes its line numbers, not what the steps are asked.
pub const CONTEXT: Port<ScenarioContext> = Port::child(NAME, "context");
/// The episode's whole parsed script, for episode-level consumers only.
pub const SCRIPT: Port<ParsedScript> = Port::private(NAME, "script");

const NAME: &str = "parse_script";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "transcripts and screenplays -> scenes -> scenario units",
    version: 3,
    prompts: &[],
    defaults: Defaults::of::<ParseScriptParams>(),
    load: load_stage::<ParseScriptParams, ParseScript>,
};

/// parse_script: the episode's transcript or screenplay -> scenes -> scenario units. Each unit
/// is a contiguous stretch of one scene with a stable group of at least two speaking
/// characters, and becomes a scenario item (show/episode/sc001, ...).
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ParseScriptParams {
    /// How a plain `NAME: line` script without separators is cut into scenes: auto,
    /// blank_lines, separators_only.
    pub plain_scene_breaks: PlainSceneBreaks,
    /// How scenes are cut into scenario units.
    pub scenarios: ScenarioParams,
}

impl crate::range::Validate for ParseScriptParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        crate::range::check_table("scenarios", &self.scenarios)
    }
}

pub struct ParseScript(ParseScriptParams);

impl From<ParseScriptParams> for ParseScript {
    fn from(params: ParseScriptParams) -> Self {
        Self(params)
    }
}

/// The whole parsed script of one episode (private to episode-level consumers such as `align`).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ParsedScript {
    pub episode: String,
    pub file: String,
    pub encoding: EncodingUsed,
    pub script: Script,
    /// The scenario ids, in script order.
    pub scenarios: Vec<String>,
}

/// One scenario unit: what every scenario-level stage starts from.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScenarioRecord {
    pub id: String,
    pub episode: String,
    pub show: String,
    pub script_file: String,
    pub unit: ScenarioUnit,
}

impl ScenarioRecord {
    /// The scenario as the LLM steps see it, before any of them has answered.
    pub fn context(&self) -> ScenarioContext {
        let unit = &self.unit;
        let lines = unit
            .lines
            .iter()
            .filter_map(|line| context_line(&line.kind))
            .collect();
        ScenarioContext {
            scenario_id: self.id.clone(),
            show: self.show.clone(),
            episode: self.episode.clone(),
            heading: unit.scene_heading.clone(),
            participants: unit.participants.clone(),
            lines,
            cast: Vec::new(),
            places: Vec::new(),
            visual_evidence: None,
            earlier: EarlierAnswers::default(),
            instructions: Default::default(),
        }
    }
}

fn context_line(kind: &LineKind) -> Option<ContextLine> {
    match kind {
        LineKind::Dialogue(dialogue) => {
            let speaker = if dialogue.group || dialogue.speakers.is_empty() {
                dialogue.raw_speaker.trim().to_string()
            } else {
                dialogue
                    .speakers
                    .join(crate::annotation::context::JOINT_SPEAKERS)
            };
            Some(ContextLine {
                kind: ContextLineKind::Dialogue,
                speaker: Some(speaker),
                text: dialogue.text.clone(),
                directions: dialogue.directions.clone(),
            })
        }
        LineKind::Action { text } => Some(ContextLine {
            kind: ContextLineKind::Action,
            speaker: None,
            text: text.clone(),
            directions: Vec::new(),
        }),
        // Transitions, credits, notes and lyrics outside dialogue say nothing about the
        // interaction and would only distract a small model.
        _ => None,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ParseScriptError {
    #[error(transparent)]
    Raw(#[from] RawReadError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Script(#[from] ScriptError),
    #[error(transparent)]
    Panic(#[from] ParsePanic),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    Job(#[from] JobError),
}

#[async_trait::async_trait]
impl Stage<Env> for ParseScript {
    fn level(&self) -> Level {
        Level::Episode
    }

    fn spawns(&self) -> Option<Level> {
        Some(Level::Scenario)
    }

    fn inputs(&self) -> Vec<PortId> {
        [
            crate::stages::ingest::SCRIPT.id(),
            crate::stages::ingest::CAST.id(),
        ]
        .into()
    }

    fn outputs(&self) -> Vec<PortId> {
        [SCENARIO.id(), CONTEXT.id(), SCRIPT.id()].into()
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let source = ctx.read(&crate::stages::ingest::SCRIPT)?;
        // The show's named characters, so the LLM steps' checks can tell a character who is not
        // in the scene (and so must not be brought into it) from one who is.
        let show_cast = ctx.read(&crate::stages::ingest::CAST)?;
        let places = show_cast.places;
        let cast: Vec<CastMember> = show_cast
            .characters
            .into_iter()
            .map(|character| CastMember {
                name: character.name,
                aliases: character.aliases,
            })
            .collect();
        let file = source.file.clone();
        let raw_dir = ctx.project().raw_dir();
        let options = ParseOptions {
            format: source.format,
            markup: None,
            plain_scene_breaks: self.0.plain_scene_breaks,
        };
        let scenario_params = self.0.scenarios.clone();
        let parsed = ctx
            .cpu(move || -> Result<_, ParseScriptError> {
                let bytes = file.read(&raw_dir, crate::manifest::RawKind::Script)?;
                let label = format!("raw/{}", file.path);
                // A parser panic becomes an error naming the file and line (see panic_context).
                let parse = || -> Result<_, ParseScriptError> {
                    let (text, encoding) = decode_text_owned(bytes, &label)?;
                    Ok((encoding, parse_script(&text, &label, &options)?))
                };
                let (encoding, script) = catch_parse_panic(&label, parse)??;
                Ok(ParsedScript {
                    episode: String::new(),
                    file: file.path,
                    encoding,
                    script,
                    scenarios: Vec::new(),
                })
            })
            .await?;
        let mut outputs = Outputs::default();
        let mut ids = Vec::new();
        // Each unit is stored as it is cut: one unit's copy of its lines at a time.
        for unit in scenario_units(&parsed.script, &scenario_params)? {
            let id = format!("{}/{}", ctx.item, unit.id);
            let record = ScenarioRecord {
                id: id.clone(),
                episode: ctx.item.clone(),
                show: source.show.clone(),
                script_file: parsed.file.clone(),
                unit,
            };
            let context = record
                .context()
                .with_cast(cast.clone())
                .with_places(places.clone());
            outputs.put_child(ctx, &CONTEXT, &id, &context)?;
            outputs.put_child(ctx, &SCENARIO, &id, &record)?;
            ids.push(id);
        }
        if ids.is_empty() {
            let longest = parsed
                .script
                .scenes
                .iter()
                .map(|scene| {
                    scene
                        .lines
                        .iter()
                        .filter(|l| l.dialogue().is_some())
                        .count()
                })
                .max();
            outputs.flags.push(format!(
                "no scenario unit passed the filters (min_lines {}, min_speakers {}): {} \
                 scene(s), the longest with {} dialogue line(s); lower them in \
                 stages/parse_script.toml if that is intended",
                self.0.scenarios.min_lines,
                self.0.scenarios.min_speakers,
                parsed.script.scenes.len(),
                longest.unwrap_or(0)
            ));
        }
        let parsed = ParsedScript {
            episode: ctx.item.clone(),
            scenarios: ids.clone(),
            ..parsed
        };
        outputs.put(ctx, &SCRIPT, &parsed)?;
        outputs.children = ids;
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use crate::annotation::ContextLineKind;
    use crate::stages::fixture;

    #[test]
    fn the_context_keeps_dialogue_actions_and_participants() {
        let ctx = fixture::record().context();
        assert_eq!(ctx.participants, ["Ross", "Rachel"]);
        assert_eq!(ctx.lines.len(), 6);
        assert_eq!(ctx.lines[0].kind, ContextLineKind::Action);
        assert_eq!(ctx.lines[0].speaker, None);
        assert_eq!(ctx.lines[2].speaker.as_deref(), Some("Rachel"));
        assert_eq!(ctx.lines[2].directions, ["wiping the counter"]);
        assert_eq!(ctx.heading.as_deref(), Some("Central Perk, late evening"));
    }

    #[test]
    fn the_stored_context_holds_the_scenario_and_no_answer() {
        let value = serde_json::to_value(fixture::context()).unwrap();
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        let expected = [
            "scenario_id",
            "show",
            "episode",
            "heading",
            "participants",
            "lines",
            "cast",
            "places",
            "visual_evidence",
        ];
        assert_eq!(keys, expected);
        assert!(value["visual_evidence"].is_null());
    }
}
