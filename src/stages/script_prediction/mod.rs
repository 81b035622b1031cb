//! `script_prediction` (AgentSense's leakage check): a model reads a scenario template, as an
//! agent under test would see it, and is asked which show and episode it comes from. A template
//! that gives its source away lets a model that knows the episode recall instead of reason;
//! the share of templates whose show is named is the benchmark's script-prediction accuracy
//! (`viss check leakage`, the dataset card). The guess is judged in code against the show's
//! id and title and the episode's id and title, never by the model.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{Checked, Problems, Rejection, deserialize_whole, require_text};
use crate::annotation::schema;
use crate::annotation::words::words;
use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::store::Store;
use crate::dag::{AppCtx, Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::range::{BadSetting, Validate, check};
use crate::stages::llm_step::{ModelRole, Sampling, StepSchema, ask, model_identity, ranges};
use crate::stages::template::{TEMPLATE, template_text};
use crate::stages::{goals, ingest, parse_script};

/// The guess and whether it is right, per scenario.
pub const PREDICTION: Port<ScriptPrediction> = Port::item(NAME, "script_prediction");

const NAME: &str = "script_prediction";
/// Its prompt template.
pub const PROMPT: &str = "script_prediction.j2";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "AgentSense leakage check: a model names the show and episode of each template (LLM)",
    version: 1,
    prompts: &[PROMPT],
    defaults: Defaults::of::<ScriptPredictionParams>(),
    load: load_stage::<ScriptPredictionParams, ScriptPredictionStage>,
};

/// script_prediction: the model of `role` reads each scenario template (background and goals,
/// the characters as {r1}, {r2}, ...) and names the show and episode it comes from, or
/// "unknown". Right when it names the show's id or title (the episode: its id, its title, or
/// its season and number), judged in code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ScriptPredictionParams {
    /// The model of [llm.roles] in viss.toml: annotator, writer or describer. The check is
    /// as strong as the model's knowledge of television: point it at a large model.
    pub role: ModelRole,
    /// Sampling temperature, 0 to 2.
    pub temperature: f32,
    /// Answer tokens at most, 1 to 131072.
    pub max_tokens: u32,
}

impl Default for ScriptPredictionParams {
    fn default() -> Self {
        Self {
            role: ModelRole::Annotator,
            temperature: 0.0,
            max_tokens: 256,
        }
    }
}

impl Validate for ScriptPredictionParams {
    fn validate(&self) -> Result<(), BadSetting> {
        check("temperature", self.temperature, ranges::TEMPERATURE)?;
        check("max_tokens", self.max_tokens, ranges::MAX_TOKENS)
    }
}

pub struct ScriptPredictionStage(ScriptPredictionParams);

impl From<ScriptPredictionParams> for ScriptPredictionStage {
    fn from(params: ScriptPredictionParams) -> Self {
        Self(params)
    }
}

impl ScriptPredictionStage {
    fn sampling(&self) -> Sampling {
        Sampling {
            role: self.0.role,
            temperature: self.0.temperature,
            max_tokens: self.0.max_tokens,
            ..Sampling::annotator()
        }
    }
}

/// What `script_prediction` stores for a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScriptPrediction {
    pub scenario: String,
    pub model: String,
    pub guess: Guess,
    pub show_named: bool,
    pub episode_named: bool,
    /// Why each answer before the kept one was rejected.
    pub rejected: Vec<crate::annotation::check::Refusal>,
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Guess {
    pub show: String,
    pub episode: String,
}

pub fn answer_schema() -> Value {
    schema::object(
        "The source the template seems to come from.",
        &[
            (
                "show",
                schema::text("The TV show's title, or unknown if you cannot tell."),
            ),
            (
                "episode",
                schema::text("The episode (title, or season and number), or unknown."),
            ),
        ],
    )
}

fn check_guess(value: &Value) -> Result<Guess, Rejection> {
    let guess: Guess = deserialize_whole(value)?;
    let mut problems = Problems::new();
    require_text(&mut problems, None, "show", &guess.show);
    require_text(&mut problems, None, "episode", &guess.episode);
    problems.finish()?;
    Ok(guess)
}

/// `text`'s words without a leading "the".
fn title_words(text: &str) -> Vec<String> {
    let mut all = words(text);
    if all.first().is_some_and(|w| w == "the") {
        all.remove(0);
    }
    all
}

/// Whether `guess` is the title `name`, perhaps with a qualifier after it, ignoring case,
/// punctuation and a leading "the" ("The Office (US)" is "the office"; "Best Friends Forever"
/// is not "Friends").
fn is_title(guess: &str, name: &str) -> bool {
    let (guess, name) = (title_words(guess), title_words(name));
    !name.is_empty() && guess.starts_with(&name)
}

/// Whether `guess` holds every word of `name`, in order, ignoring case and punctuation.
fn mentions(guess: &str, name: &str) -> bool {
    let (guess, name) = (words(guess), words(name));
    !name.is_empty()
        && guess
            .windows(name.len())
            .any(|window| window == name.as_slice())
}

/// A season and episode number written as `s01e02`, `1x02` or "season 1, episode 2".
fn season_and_number(text: &str) -> Option<(u32, u32)> {
    let tokens = words(text);
    let pair = |a: &str, b: &str| Some((a.parse().ok()?, b.parse().ok()?));
    let split = |token: &str, first: char, second: char| {
        let rest = if first == '#' {
            token
        } else {
            token.strip_prefix(first)?
        };
        let (season, number) = rest.split_once(second)?;
        pair(season, number)
    };
    tokens
        .iter()
        .find_map(|token| split(token, 's', 'e').or_else(|| split(token, '#', 'x')))
        .or_else(|| {
            let at = |word: &str| tokens.iter().position(|t| t == word);
            let (season, episode) = (at("season")?, at("episode")?);
            pair(tokens.get(season + 1)?, tokens.get(episode + 1)?)
        })
}

/// Whether `guess` names the show of `source`, and then its episode.
pub fn judge(guess: &Guess, source: &crate::manifest::EpisodeSource) -> (bool, bool) {
    let show = is_title(&guess.show, &source.show)
        || source
            .show_title
            .as_deref()
            .is_some_and(|title| is_title(&guess.show, title));
    let episode = show
        && (mentions(&guess.episode, &source.episode)
            || source
                .title
                .as_deref()
                .is_some_and(|title| mentions(&guess.episode, title))
            || season_and_number(&source.episode)
                .is_some_and(|numbers| season_and_number(&guess.episode) == Some(numbers)));
    (show, episode)
}

/// The scripted model's answer: it does not know the show.
pub fn example() -> Value {
    json!({"show": "unknown", "episode": "unknown"})
}

#[derive(Serialize)]
struct PromptContext<'a> {
    template: &'a str,
}

#[async_trait::async_trait]
impl Stage<Env> for ScriptPredictionStage {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![
            parse_script::CONTEXT.id(),
            ingest::EPISODE.id(),
            goals::GOALS.id(),
            TEMPLATE.id(),
        ]
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![
            PREDICTION.id(),
            crate::stages::llm_step::answers_cost(NAME).id(),
        ]
    }

    fn models(
        &self,
        Env { project, .. }: &Env,
        store: &Store,
    ) -> Result<BTreeMap<String, String>, StageFailure> {
        model_identity(&self.sampling(), project, store)
    }

    fn code(&self) -> BTreeMap<String, String> {
        crate::stages::llm_step::step_code(&answer_schema())
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        if let Some(skipped) = goals::skipped_without_goals(ctx) {
            return Ok(skipped);
        }
        let scenario = ctx.read(&parse_script::CONTEXT)?;
        let source = ctx.read(&ingest::EPISODE)?;
        let template = ctx.read(&TEMPLATE)?.template;
        let sampling = self.sampling();
        let model = sampling.role.model(ctx.llm()).clone();
        let text = template_text(&template);
        let context = PromptContext { template: &text };
        let schema = StepSchema {
            name: NAME.to_string(),
            portable: answer_schema(),
            decoder: None,
            avoid_words: Vec::new(),
            avoid_in_own_part: Vec::new(),
            refine_role: None,
        };
        let checked = |value: &Value| check_guess(value).map(Checked::without_gates);
        let asked = ask(
            ctx,
            &sampling,
            PROMPT,
            &context,
            Vec::new(),
            schema,
            checked,
        )
        .await?;
        let (show_named, episode_named) = judge(&asked.answer, &source);
        let record = ScriptPrediction {
            scenario: scenario.scenario_id.clone(),
            model: model.to_string(),
            guess: asked.answer,
            show_named,
            episode_named,
            rejected: asked.rejected,
        };
        let mut outputs = Outputs::default();
        outputs.put(ctx, &PREDICTION, &record)?;
        crate::stages::llm_step::put_answers_cost(ctx, &mut outputs, NAME)?;
        Ok(outputs)
    }
}

/// How many templates the model placed: the show named, the episode named, of all judged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PredictionAccuracy {
    pub templates: usize,
    pub shows_named: usize,
    pub episodes_named: usize,
}

impl PredictionAccuracy {
    pub fn of<'a>(predictions: impl IntoIterator<Item = &'a ScriptPrediction>) -> Self {
        predictions
            .into_iter()
            .fold(Self::default(), |mut accuracy, prediction| {
                accuracy.templates += 1;
                accuracy.shows_named += usize::from(prediction.show_named);
                accuracy.episodes_named += usize::from(prediction.episode_named);
                accuracy
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> crate::manifest::EpisodeSource {
        crate::manifest::EpisodeSource {
            show: "friends".into(),
            episode: "s01e05".into(),
            show_title: Some("Friends".into()),
            title: Some("The One with the East German Laundry Detergent".into()),
            license: String::new(),
            manifest: String::new(),
            script_format: None,
            subtitles_format: None,
            files: BTreeMap::new(),
            characters: Vec::new(),
            places: Vec::new(),
        }
    }

    fn guess(show: &str, episode: &str) -> Guess {
        Guess {
            show: show.into(),
            episode: episode.into(),
        }
    }

    #[test]
    fn a_guess_is_judged_by_the_shows_and_episodes_names_and_numbers() {
        let source = source();
        assert_eq!(
            judge(&guess("Friends (NBC)", "Season 1, Episode 5"), &source),
            (true, true)
        );
        assert_eq!(judge(&guess("friends", "S01E05"), &source), (true, true));
        assert_eq!(
            judge(
                &guess("Friends", "the one with the east german laundry detergent"),
                &source
            ),
            (true, true)
        );
        assert_eq!(judge(&guess("Friends", "1x06"), &source), (true, false));
        assert_eq!(judge(&guess("Seinfeld", "s01e05"), &source), (false, false));
        assert_eq!(judge(&guess("unknown", "unknown"), &source), (false, false));
        // A title that holds the show's title is another show.
        assert!(!judge(&guess("Best Friends Forever", "unknown"), &source).0);
        assert!(!judge(&guess("Friendship", "unknown"), &source).0);
        assert!(judge(&guess("The Friends", "unknown"), &source).0);
    }

    #[test]
    fn an_empty_guess_is_sent_back() {
        let rejection = check_guess(&json!({"show": " ", "episode": "unknown"})).unwrap_err();
        assert_eq!(rejection.kinds(), ["empty"]);
        assert!(check_guess(&example()).is_ok());
    }
}
