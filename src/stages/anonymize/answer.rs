//! Step `anonymize` (AgentSense): the entities in a scenario's background, goals and private
//! information that would tell a reader which show and episode it comes from (people who are
//! not in the scene, places, organisations, distinctive events), each with a replacement that
//! keeps what the scene needs of it. The model proposes the replacements; the code applies them,
//! turns the participants into slots (`{r1}`, `{r2}`, ...) and checks that no name, alias or
//! place of the show's manifest and no participant's name survives in the template, ignoring
//! case and a plural or possessive ending. The answer is the list of replacements: the record a
//! dataset owner audits or reverses; the template is made from it by [`template`].

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{
    Checked, Problems, Rejection, contains_word, deserialize_whole, replace_word, require_text,
};
use crate::annotation::context::{CastMember, ScenarioContext, distinctive_words};
use crate::annotation::gates::forbid_copies;
use crate::annotation::schema;
use crate::annotation::vocab::vocabulary;
use crate::annotation::words::words;
use crate::stages::goals::answer::{ErgClass, GoalCategory, Goals, SocialDomain};
use crate::stages::private_info::answer::{PrivateInfo, PrivateQuestion};
use crate::text::role::RoleId;

/// Replacements an answer may list.
pub const MAX_REPLACEMENTS: usize = 12;

vocabulary! {
    /// What an identifying entity is.
    EntityKind {
        Person = "person",
        Place = "place",
        Organisation = "organisation",
        Event = "event",
        Other = "other",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Anonymization {
    pub replacements: Vec<Replacement>,
}

/// One entity of the source and what stands for it in the template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Replacement {
    pub original: String,
    pub kind: EntityKind,
    pub revised: String,
}

pub type Answer = Anonymization;

/// A scenario template: the scenario with its participants as slots and its identifying
/// entities replaced, ready to be instantiated with other characters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Template {
    pub scenario: String,
    pub background: String,
    pub domain: SocialDomain,
    pub roles: Vec<TemplateRole>,
}

/// One slot of a template: its goals and what only it knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateRole {
    #[schemars(with = "String")]
    pub role: RoleId,
    pub goals: Vec<TemplateGoal>,
    pub questions: Vec<TemplateQuestion>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateGoal {
    pub goal: String,
    pub category: GoalCategory,
    pub erg: ErgClass,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateQuestion {
    pub question: String,
    pub answer: String,
    pub private_info: String,
    pub wrong_options: Vec<String>,
}

/// The slot a participant becomes in the template's text.
pub fn slot(role: RoleId) -> String {
    format!("{{{role}}}")
}

/// The first slot ([`slot`]'s spelling, `{r2}`) `text` holds, if any: what a text written for
/// one cast must not hold.
pub fn first_slot_in(text: &str) -> Option<&str> {
    static SLOT: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"\{r[0-9]+\}").expect("a valid pattern"));
    SLOT.find(text).map(|found| found.as_str())
}

pub fn schema() -> Value {
    schema::object(
        "The entities that would tell which show or episode the scenario comes from, each with \
         its replacement.",
        &[(
            "replacements",
            schema::array(
                "Every name of a person who is not a participant, every named place, \
                 organisation and distinctive event in the texts; empty when there is none.",
                schema::object(
                    "One entity and its replacement.",
                    &[
                        (
                            "original",
                            schema::text("The entity exactly as the text writes it."),
                        ),
                        ("kind", schema::label::<EntityKind>("What the entity is.")),
                        (
                            "revised",
                            schema::text(
                                "A generic stand-in that keeps what the scene needs of it \
                                 ('a neighbourhood cafe', 'her older sister').",
                            ),
                        ),
                    ],
                ),
                None,
                Some(MAX_REPLACEMENTS),
            ),
        )],
    )
}

/// Narrows the decoder's schema to [`named_spans`]: each `original` one of them, no more
/// replacements than there are, none when there is none. The 1.5B model, free to write any
/// original, listed the prompt's own examples ("the company party", "the kitchen") and the
/// scene's common nouns ("the van" as "the vehicle") as entities, in nearly every answer of the
/// demo. Endpoints keep the free schema: a distinctive event without a capital ("the
/// barbecue") is theirs to find.
pub fn narrow_decoder(schema: &mut Value, ctx: &ScenarioContext) {
    let names = named_spans(ctx);
    let Some(replacements) = schema.pointer_mut("/properties/replacements") else {
        return;
    };
    replacements["maxItems"] = json!(names.len().min(MAX_REPLACEMENTS));
    if let Some(original) = replacements.pointer_mut("/items/properties/original")
        && !names.is_empty()
    {
        original["enum"] = json!(names);
    }
}

/// What in the scenario's texts (background, goals, private information) can be a name that
/// identifies the show: each run of capitalised words, and each name or place of the show's
/// manifest the texts hold, spelt as the texts spell it; apart from the participants' names,
/// which become slots. A capitalised word that opens a sentence ("To help ...", "She ...")
/// counts only where the texts or the dialogue also capitalise it inside a sentence, or the
/// manifest names it: a false span costs more than a missed one, since the model may replace
/// it ("Despite" by a stand-in) and nothing downstream would notice.
pub fn named_spans(ctx: &ScenarioContext) -> Vec<String> {
    let goals = ctx.earlier(&crate::stages::goals::GOALS);
    let private_info = ctx.earlier(&crate::stages::private_info::PRIVATE_INFO);
    let Some(goals) = goals else {
        return Vec::new();
    };
    let texts = source_texts(&goals, private_info.as_ref());
    let participant_words: Vec<String> = slot_names(ctx)
        .iter()
        .flat_map(|(name, _)| words(name))
        .collect();
    let originals = originals(ctx);
    let manifest_words: Vec<String> = originals.iter().flat_map(|n| words(n)).collect();
    let runs: Vec<(Vec<String>, bool)> = texts.iter().flat_map(|t| capitalised_runs(t)).collect();
    // The dialogue counts as evidence that a word is a name, not as a source of spans.
    let mid_sentence: Vec<String> = runs
        .iter()
        .cloned()
        .chain(
            ctx.lines
                .iter()
                .flat_map(|line| capitalised_runs(&line.text)),
        )
        .filter(|(_, opens)| !opens)
        .flat_map(|(run, _)| run.into_iter().map(|word| word.to_lowercase()))
        .collect();
    let mut spans: Vec<String> = Vec::new();
    for (run, opens_sentence) in runs {
        let first = run[0].to_lowercase();
        let skip = usize::from(
            opens_sentence && !mid_sentence.contains(&first) && !manifest_words.contains(&first),
        );
        let run = &run[skip..];
        if run.is_empty()
            || run
                .iter()
                .all(|w| participant_words.contains(&w.to_lowercase()))
        {
            continue;
        }
        spans.push(run.join(" "));
    }
    for original in originals {
        let own = words(&original)
            .iter()
            .all(|w| participant_words.contains(w));
        if !own && texts.iter().any(|t| contains_word(t, &original)) {
            spans.push(original);
        }
    }
    let mut seen = std::collections::HashSet::new();
    spans.retain(|span| seen.insert(span.to_lowercase()));
    spans
}

/// The runs of capitalised words in `text` (a comma or a full stop ends one; "of" joins two,
/// as in "Museum of Art"), each without a possessive ending, with whether it opens a sentence.
fn capitalised_runs(text: &str) -> Vec<(Vec<String>, bool)> {
    let is_quote = |c: char| {
        matches!(
            c,
            '"' | '\'' | '\u{2018}' | '\u{2019}' | '\u{201C}' | '\u{201D}'
        )
    };
    let mut runs = Vec::new();
    let mut run: Vec<String> = Vec::new();
    let mut run_opens = false;
    let mut sentence_start = true;
    let tokens: Vec<&str> = text.split_whitespace().collect();
    for (index, token) in tokens.iter().enumerate() {
        let opens = sentence_start;
        let trimmed = token.trim_start_matches(|c: char| is_quote(c) || c == '(');
        let word_end = trimmed
            .char_indices()
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '-' || is_quote(*c)))
            .map_or(trimmed.len(), |(at, _)| at);
        let word = trimmed[..word_end].trim_end_matches(is_quote);
        let word = word
            .strip_suffix("'s")
            .or_else(|| word.strip_suffix("\u{2019}s"))
            .unwrap_or(word);
        let breaks_after = word_end < trimmed.len() || trimmed.ends_with(is_quote);
        sentence_start = trimmed
            .trim_end_matches(|c: char| is_quote(c) || c == ')')
            .ends_with(['.', '!', '?', ':']);
        let capitalised =
            word.chars().next().is_some_and(char::is_uppercase) && word.chars().count() >= 2;
        let joins = word == "of"
            && !run.is_empty()
            && tokens
                .get(index + 1)
                .is_some_and(|next| next.chars().next().is_some_and(char::is_uppercase));
        if capitalised || joins {
            if run.is_empty() {
                run_opens = opens;
            }
            run.push(word.to_string());
        }
        if !(capitalised || joins) || breaks_after {
            if run.last().is_some_and(|w| w == "of") {
                run.pop();
            }
            if !run.is_empty() {
                runs.push((std::mem::take(&mut run), run_opens));
            }
        }
    }
    if !run.is_empty() {
        runs.push((run, run_opens));
    }
    runs
}

/// The names of people a template or a synthetic cast may not use: each participant's name,
/// every name and alias of the show's characters, and each distinctive word of them ("Geller"
/// of "Monica Geller").
pub fn person_names(cast: &[CastMember], participants: &[String]) -> Vec<String> {
    let every = cast
        .iter()
        .flat_map(CastMember::names)
        .chain(participants)
        .map(|name| name.trim());
    let mut names: Vec<String> = every
        .flat_map(|name| std::iter::once(name).chain(distinctive_words(name)))
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The names no template may hold: [`person_names`] (the participants become slots) and the
/// show's named places.
fn originals(ctx: &ScenarioContext) -> Vec<String> {
    let mut names = person_names(&ctx.cast, &ctx.participants);
    names.extend(
        ctx.places
            .iter()
            .map(|place| place.trim().to_string())
            .filter(|place| !place.is_empty()),
    );
    names.sort();
    names.dedup();
    names
}

/// Each participant's names (its own, its aliases, and their distinctive words) with its slot,
/// longest first, so "Monica Geller" is replaced before "Monica".
fn slot_names(ctx: &ScenarioContext) -> Vec<(String, String)> {
    let mut names: Vec<(String, String)> = Vec::new();
    for (role, participant) in ctx.roles() {
        for name in ctx.names_of(participant) {
            for word in distinctive_words(&name) {
                names.push((word.to_string(), slot(role)));
            }
            names.push((name, slot(role)));
        }
    }
    names.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
    names.dedup();
    names
}

/// `text` with the replacements applied (longest original first), then the participants'
/// names turned into their slots.
pub fn anonymize_text(text: &str, replacements: &[Replacement], ctx: &ScenarioContext) -> String {
    let mut ordered: Vec<&Replacement> = replacements.iter().collect();
    ordered.sort_by_key(|r| std::cmp::Reverse(r.original.len()));
    let mut text = text.to_string();
    for replacement in ordered {
        text = replace_word(&text, &replacement.original, &replacement.revised);
    }
    for (name, slot) in slot_names(ctx) {
        text = replace_word(&text, &name, &slot);
    }
    text
}

/// The template the replacements make of the scenario's goals and private information.
pub fn template(
    answer: &Anonymization,
    ctx: &ScenarioContext,
    goals: &Goals,
    private_info: Option<&PrivateInfo>,
) -> Template {
    let anonymized = |text: &str| anonymize_text(text, &answer.replacements, ctx);
    let roles = ctx
        .roles()
        .map(|(role, name)| {
            let goals = goals
                .of_role(name)
                .map(|goal| TemplateGoal {
                    goal: anonymized(&goal.goal),
                    category: goal.category,
                    erg: goal.category.erg(),
                })
                .collect();
            let questions = private_info
                .iter()
                .flat_map(|info| &info.roles)
                .filter(|entry| entry.name == name)
                .flat_map(|entry| &entry.questions)
                .map(|question: &PrivateQuestion| TemplateQuestion {
                    question: anonymized(&question.question),
                    answer: anonymized(&question.answer),
                    private_info: anonymized(&question.private_info),
                    wrong_options: question
                        .wrong_options
                        .iter()
                        .map(|o| anonymized(o))
                        .collect(),
                })
                .collect();
            TemplateRole {
                role,
                goals,
                questions,
            }
        })
        .collect();
    Template {
        scenario: ctx.scenario_id.clone(),
        background: anonymized(&goals.background),
        domain: goals.domain,
        roles,
    }
}

impl Template {
    /// Every text of the template with where it stands.
    pub fn texts(&self) -> Vec<(String, &str)> {
        let mut texts = vec![("the background".to_string(), self.background.as_str())];
        for role in &self.roles {
            for (index, goal) in role.goals.iter().enumerate() {
                texts.push((format!("{}'s goal {}", role.role, index + 1), &goal.goal));
            }
            for (index, question) in role.questions.iter().enumerate() {
                let at = format!("{}'s question {}", role.role, index + 1);
                texts.push((at.clone(), &question.question));
                texts.push((at.clone(), &question.answer));
                texts.push((at.clone(), &question.private_info));
                texts.extend(
                    question
                        .wrong_options
                        .iter()
                        .map(|o| (at.clone(), o.as_str())),
                );
            }
        }
        texts
    }
}

/// A word without a plural or possessive ending, for matching names as inflected in prose.
fn stem(word: &str) -> &str {
    match word.strip_suffix('s') {
        Some(stem) if stem.chars().count() >= 3 && !stem.ends_with('s') => stem,
        _ => word,
    }
}

/// Whether `text` holds `name`, ignoring case and a plural or possessive ending on each word.
pub fn holds_name(text: &str, name: &str) -> bool {
    let name_words: Vec<String> = words(name);
    if name_words.is_empty() {
        return false;
    }
    let text_words: Vec<String> = words(text);
    let wanted: Vec<&str> = name_words.iter().map(|w| stem(w)).collect();
    text_words
        .windows(wanted.len())
        .any(|window| window.iter().zip(&wanted).all(|(w, n)| stem(w) == *n))
}

/// The answer, usable or not, checked by applying it: every original it names is in the texts,
/// every replacement is a new text that names nobody of the show, and after it no name of the
/// show survives in the template.
pub fn check(value: &Value, ctx: &ScenarioContext) -> Result<Checked<Anonymization>, Rejection> {
    let answer: Anonymization = deserialize_whole(value)?;
    let mut problems = Problems::new();
    let field = "replacements";
    let goals = ctx.earlier(&crate::stages::goals::GOALS);
    let private_info = ctx.earlier(&crate::stages::private_info::PRIVATE_INFO);
    let source_texts: Vec<String> = goals
        .as_ref()
        .map(|goals| source_texts(goals, private_info.as_ref()))
        .unwrap_or_default();
    let originals = originals(ctx);
    for replacement in &answer.replacements {
        let (original, revised) = (replacement.original.trim(), replacement.revised.trim());
        if !require_text(&mut problems, None, field, original)
            || !require_text(&mut problems, None, field, revised)
        {
            continue;
        }
        if ctx.participant_named(original).is_some() {
            problems.gate(
                "participant_replaced",
                None,
                field,
                format!(
                    "replacements: \"{original}\" is a participant; participants become slots by \
                     themselves, so leave them out of the list"
                ),
            );
        } else if !source_texts.iter().any(|t| contains_word(t, original)) {
            problems.gate(
                "not_in_the_texts",
                None,
                field,
                format!(
                    "replacements: \"{original}\" is not in the texts; list only entities the \
                     background, goals and private information write"
                ),
            );
        }
        if words(original) == words(revised) {
            problems.gate(
                "replacement_unchanged",
                None,
                field,
                format!(
                    "replacements: \"{original}\" is replaced by itself; give a generic stand-in"
                ),
            );
        } else if holds_name(revised, original) {
            // "Dennis" by "Dennis the customer": the template would still name him.
            problems.gate(
                "replacement_unchanged",
                None,
                field,
                format!(
                    "replacements: the stand-in \"{revised}\" still holds \"{original}\"; give a \
                     generic stand-in without it"
                ),
            );
        }
        // The 1.5B model, held to the names the texts hold, replaced one by the prompt's own
        // example ("Dennis" by "the company party").
        forbid_copies(&mut problems, None, field, revised, ctx);
        let named: Vec<&String> = originals
            .iter()
            .filter(|name| holds_name(revised, name))
            .collect();
        if !named.is_empty() {
            problems.gate(
                "replacement_names_the_show",
                None,
                field,
                format!(
                    "replacements: the stand-in \"{revised}\" names {}; use a generic description",
                    quoted(&named)
                ),
            );
        }
    }
    if let Some(goals) = &goals {
        let template = template(&answer, ctx, goals, private_info.as_ref());
        for (at, text) in template.texts() {
            let survivors: Vec<&String> = originals
                .iter()
                .filter(|name| holds_name(text, name))
                .collect();
            // Kept flagged after the re-asks rather than failed: a person can add the missing
            // replacement in review, and nothing reads a flagged template as clean.
            if !survivors.is_empty() {
                problems.gate(
                    "original_survives",
                    None,
                    field,
                    format!(
                        "replacements: {at} still holds {} after the replacements; add a \
                         replacement for each",
                        quoted(&survivors)
                    ),
                );
            }
        }
    }
    problems.finish_checked(answer)
}

fn quoted(names: &[&String]) -> String {
    names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The texts the replacements are made in, as the goals and private information write them.
fn source_texts(goals: &Goals, private_info: Option<&PrivateInfo>) -> Vec<String> {
    let mut texts = vec![goals.background.clone()];
    for role in &goals.roles {
        texts.extend(goals.of_role(&role.name).map(|g| g.goal.clone()));
    }
    for question in private_info
        .iter()
        .flat_map(|info| &info.roles)
        .flat_map(|entry| &entry.questions)
    {
        texts.push(question.question.clone());
        texts.push(question.answer.clone());
        texts.push(question.private_info.clone());
        texts.extend(question.wrong_options.iter().cloned());
    }
    texts
}

/// [`check`] for a clean answer: any problem is an error.
pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<Anonymization, Rejection> {
    check(value, ctx).and_then(Checked::clean)
}

/// An answer the checks keep clean for the scripted scenes: nothing in them identifies a show.
pub fn example(_: &crate::stages::descriptor::Example<'_>) -> Value {
    json!({"replacements": []})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::{fixture, goals, private_info};

    /// The fixture scene with goals and private information that name an absent character
    /// (Monica, in the possessive) and a place of the show (Central Perk).
    fn context() -> ScenarioContext {
        let mut ctx = fixture::context().with_places(vec!["Central Perk".to_string()]);
        let goals: Goals = serde_json::from_value(json!({
            "background": "Ross and Rachel close Central Perk for the night. Rachel has kept \
                           Monica's secret for weeks.",
            "domain": "personal_domain",
            "roles": [
                {"name": "Ross", "goals": [{"draft": "To get Rachel to speak up.",
                  "issue": "none", "goal": "To get Rachel to speak up.",
                  "category": "conflict_resolution"}]},
                {"name": "Rachel", "goals": [{"draft": "To put off the talk.", "issue": "none",
                  "goal": "To put off the talk with Ross Geller.",
                  "category": "relationship_maintenance"}]}
            ]
        }))
        .unwrap();
        let info: PrivateInfo = serde_json::from_value(json!({
            "involves_private_info": true,
            "roles": [
                {"name": "Ross", "questions": []},
                {"name": "Rachel", "questions": [{
                    "question": "What did Rachel break at the Gellers' party?",
                    "answer": "a vase", "private_info": "Rachel broke a vase at the party.",
                    "wrong_options": ["a mirror", "a lamp", "a window"]}]}
            ]
        }))
        .unwrap();
        ctx.set_earlier(&goals::GOALS, Some(goals));
        ctx.set_earlier(&private_info::PRIVATE_INFO, Some(info));
        ctx
    }

    fn good() -> Value {
        json!({"replacements": [
            {"original": "Central Perk", "kind": "place", "revised": "the cafe where they work"},
            {"original": "Monica", "kind": "person", "revised": "a close friend"},
            {"original": "the Gellers'", "kind": "person", "revised": "the neighbours'"}
        ]})
    }

    #[test]
    fn the_decoder_may_list_only_the_names_the_texts_hold_apart_from_the_participants() {
        let ctx = context();
        assert_eq!(named_spans(&ctx), ["Central Perk", "Monica", "Gellers"]);
        let mut decoder = schema();
        narrow_decoder(&mut decoder, &ctx);
        let replacements = &decoder["properties"]["replacements"];
        assert_eq!(replacements["maxItems"], json!(3));
        assert_eq!(
            replacements["items"]["properties"]["original"]["enum"],
            json!(["Central Perk", "Monica", "Gellers"])
        );
        // What endpoints get is left as it is.
        assert!(
            schema()["properties"]["replacements"]["items"]["properties"]["original"]
                .get("enum")
                .is_none()
        );
    }

    #[test]
    fn a_word_that_opens_a_sentence_is_a_name_only_where_it_is_capitalised_inside_one() {
        let mut ctx = context();
        let mut goals = ctx.earlier(&goals::GOALS).unwrap();
        goals.background = "Despite the rain, Ross waits for Dennis at Pier Nine. Dennis owes \
                            Rachel. Later, Rachel calls."
            .to_string();
        ctx.set_earlier(&goals::GOALS, Some(goals));
        ctx.set_earlier(&private_info::PRIVATE_INFO, None);
        assert_eq!(named_spans(&ctx), ["Dennis", "Pier Nine"]);
    }

    #[test]
    fn with_no_name_in_the_texts_the_decoder_allows_no_replacement() {
        let mut ctx = context();
        let mut goals = ctx.earlier(&goals::GOALS).unwrap();
        goals.background = "Ross and Rachel close the cafe for the night.".to_string();
        for role in &mut goals.roles {
            for goal in &mut role.goals {
                goal.goal = "To get the other to speak up.".to_string();
            }
        }
        ctx.set_earlier(&goals::GOALS, Some(goals));
        ctx.set_earlier(&private_info::PRIVATE_INFO, None);
        let mut decoder = schema();
        narrow_decoder(&mut decoder, &ctx);
        assert_eq!(decoder["properties"]["replacements"]["maxItems"], json!(0));
    }

    #[test]
    fn an_alias_that_describes_becomes_the_slot_as_a_whole_and_its_words_stay_free() {
        let ctx = context().with_cast(vec![CastMember {
            name: "Ross".to_string(),
            aliases: vec!["the clerk".to_string()],
        }]);
        assert_eq!(
            anonymize_text("Ross, a rental clerk, calls the clerk.", &[], &ctx),
            "{r1}, a rental clerk, calls {r1}."
        );
    }

    #[test]
    fn a_stand_in_that_is_the_prompts_example_is_refused() {
        let mut ctx = context();
        ctx.instructions = crate::annotation::words::Instructions::from_prompt(
            include_str!("../../../prompts/anonymize.j2"),
            &schema(),
        );
        validate(&good(), &ctx).unwrap();
        let mut value = good();
        value["replacements"][1]["revised"] = json!("the company party");
        let error = validate(&value, &ctx).unwrap_err().message();
        assert!(
            error.contains("replacements is the instructions' example \"the company party\""),
            "{error}"
        );
    }

    #[test]
    fn schema_is_strict() {
        assert_eq!(strictness_problems(&schema()), Vec::<String>::new());
    }

    #[test]
    fn the_template_has_slots_and_the_replacements_and_no_original() {
        let ctx = context();
        let answer = validate(&good(), &ctx).unwrap();
        let goals = ctx.earlier(&goals::GOALS).unwrap();
        let info = ctx.earlier(&private_info::PRIVATE_INFO);
        let template = template(&answer, &ctx, &goals, info.as_ref());
        assert_eq!(
            template.background,
            "{r1} and {r2} close the cafe where they work for the night. {r2} has kept a close \
             friend's secret for weeks."
        );
        assert_eq!(
            template.roles[1].goals[0].goal,
            "To put off the talk with {r1}."
        );
        assert_eq!(template.roles[1].goals[0].erg, ErgClass::Relatedness);
        assert_eq!(
            template.roles[1].questions[0].question,
            "What did {r2} break at the neighbours' party?"
        );
        for (_, text) in template.texts() {
            for name in ["Ross", "Rachel", "Monica", "Geller", "Central Perk"] {
                assert!(!holds_name(text, name), "{name} in {text}");
            }
        }
    }

    #[test]
    fn an_original_that_survives_is_refused_naming_it_and_where() {
        let ctx = context();
        let mut value = good();
        value["replacements"].as_array_mut().unwrap().remove(0);
        let rejection = validate(&value, &ctx).unwrap_err();
        assert_eq!(rejection.kinds(), ["original_survives"]);
        assert!(
            rejection
                .message()
                .contains("the background still holds \"Central Perk\""),
            "{rejection}"
        );
        // Inflected: "Monica's" and "the Gellers'" are Monica and Geller.
        let mut value = good();
        value["replacements"].as_array_mut().unwrap().truncate(1);
        let message = validate(&value, &ctx).unwrap_err().message();
        assert!(message.contains("\"Monica\""), "{message}");
        assert!(
            message.contains("r2's question 1 still holds \"Geller\""),
            "{message}"
        );
    }

    #[test]
    fn a_stand_in_that_names_the_show_or_changes_nothing_is_refused() {
        let ctx = context();
        let mut value = good();
        value["replacements"][1]["revised"] = json!("Joey's sister");
        // Joey is then in the template too.
        assert_eq!(
            validate(&value, &ctx).unwrap_err().kinds(),
            ["replacement_names_the_show", "original_survives"]
        );
        // Usable, so kept flagged after the re-asks for a person to mend.
        assert_eq!(check(&value, &ctx).unwrap().gates.len(), 2);
        let mut value = good();
        value["replacements"][0]["revised"] = json!("central perk");
        let kinds = validate(&value, &ctx).unwrap_err().kinds().join(" ");
        assert!(kinds.contains("replacement_unchanged"), "{kinds}");
        // A stand-in that keeps the original ("Dennis the customer" for "Dennis").
        let mut value = good();
        value["replacements"][0]["revised"] = json!("the Central Perk coffee house");
        let message = validate(&value, &ctx).unwrap_err().message();
        assert!(
            message.contains(
                "the stand-in \"the Central Perk coffee house\" still holds \"Central Perk\""
            ),
            "{message}"
        );
    }

    #[test]
    fn names_match_whole_words_ignoring_case_plural_and_possessive() {
        assert!(holds_name("the Gellers' flat", "Geller"));
        assert!(holds_name("MONICA's flat", "Monica"));
        assert!(holds_name("near central perks", "Central Perk"));
        assert!(!holds_name("Rossini plays", "Ross"));
        assert_eq!(
            replace_word("Ross met ross and Rossini.", "Ross", "{r1}"),
            "{r1} met {r1} and Rossini."
        );
    }
}
