//! Step `private_info` (AgentSense): whether the scenario turns on something only some of its
//! characters know and, if it does, per goal holder the questions only that character can
//! answer: the answer, the answer retold as what the character privately knows, and three wrong
//! options as close to the answer as the scene allows. Where the right option stands among the
//! four is not the model's to choose: `questions` balances it across the benchmark.

use std::collections::{BTreeSet, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{
    Checked, Problems, Rejection, deserialize_answer, match_roles, named_role, require_prose,
    require_text,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::gates::{content_words, gate_free_text, name_words};
use crate::annotation::schema;
use crate::annotation::words::words;
use crate::stages::goals::answer::{Goals, goal_holders};
use crate::stages::llm_step::SceneFields;

/// Questions per character at most.
pub const MAX_QUESTIONS: usize = 2;
/// Wrong options per question: with the right one, four.
pub const WRONG_OPTIONS: usize = 3;
/// Words an answer may have: an option is a short phrase, not an explanation.
pub const MAX_ANSWER_WORDS: usize = 15;
/// The share of an answer's content words found in a text that others see, from which the
/// answer counts as given away there.
pub const LEAKED_SHARE: f64 = 0.8;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrivateInfo {
    pub involves_private_info: bool,
    pub roles: Vec<RolePrivateInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RolePrivateInfo {
    pub name: String,
    pub questions: Vec<PrivateQuestion>,
}

named_role!(RolePrivateInfo);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrivateQuestion {
    pub question: String,
    pub answer: String,
    /// The answer as the character's own knowledge, in a sentence: what its agent is told.
    pub private_info: String,
    pub wrong_options: Vec<String>,
}

pub type Answer = PrivateInfo;

pub fn schema() -> Value {
    let question = schema::object(
        "One question only this character can answer.",
        &[
            (
                "question",
                schema::text("A question about what only this character knows, ending in '?'."),
            ),
            (
                "answer",
                schema::text("The right answer, as a short phrase."),
            ),
            (
                "private_info",
                schema::text(
                    "The answer retold as what the character privately knows, in one sentence \
                     about the character.",
                ),
            ),
            (
                "wrong_options",
                schema::array(
                    "Three wrong answers, each as plausible and of the same form as the right \
                     one.",
                    schema::text("A wrong answer, as a short phrase."),
                    Some(WRONG_OPTIONS),
                    Some(WRONG_OPTIONS),
                ),
            ),
        ],
    );
    schema::object(
        "Whether the scenario involves private information, and each participant's questions.",
        &[
            (
                "involves_private_info",
                json!({
                    "type": "boolean",
                    "description": "Whether some character knows something that matters here \
                     and the others do not.",
                }),
            ),
            (
                "roles",
                schema::roles(
                    "One entry per participant.",
                    &[(
                        "questions",
                        schema::array(
                            "Questions only this character can answer; empty when it knows \
                             nothing the others do not, and for a character without goals.",
                            question,
                            None,
                            Some(MAX_QUESTIONS),
                        ),
                    )],
                ),
            ),
        ],
    )
}

/// A character without goals gets no questions, so a decoder cannot give it any.
/// Once the scene's part says the scenario involves no private information, no role can have
/// a question either: the 1.5B model otherwise wrote questions under `false` and was re-asked
/// (10 refused answers in the first 37 minutes of a demo build).
pub fn narrow_role_for_decoder(
    role: &mut Value,
    name: &str,
    _: &[String],
    ctx: &ScenarioContext,
    scene: Option<&SceneFields>,
) {
    let involves = scene.and_then(|scene| scene.get("involves_private_info"));
    if !goal_holders(ctx).contains(&name) || involves == Some(&Value::Bool(false)) {
        role["properties"]["questions"]["minItems"] = json!(0);
        role["properties"]["questions"]["maxItems"] = json!(0);
    }
}

/// The answer, usable or not: an error names what leaves it unusable (with every other
/// problem, for the re-ask); a usable answer carries the quality gates it fails.
pub fn check(value: &Value, ctx: &ScenarioContext) -> Result<Checked<PrivateInfo>, Rejection> {
    let answer: PrivateInfo = deserialize_answer::<PrivateInfo, RolePrivateInfo>(value)?;
    let mut problems = Problems::new();
    let roles = match_roles(answer.roles, ctx, &mut problems);
    let holders = goal_holders(ctx);
    let goals = ctx.earlier(&crate::stages::goals::GOALS);
    let names = name_words(ctx);
    let asked = roles.iter().map(|r| r.questions.len()).sum::<usize>();
    if answer.involves_private_info && asked == 0 {
        problems.unusable_whole(
            "no_question",
            "involves_private_info is true but no character has a question; give the \
             characters who know something the others do not their questions, or set \
             involves_private_info to false"
                .to_string(),
        );
    }
    for role in &roles {
        let who = role.name.as_str();
        if role.questions.is_empty() {
            continue;
        }
        if !answer.involves_private_info {
            problems.unusable(
                "questions_without_private_info",
                Some(who),
                "questions",
                format!(
                    "{who}: has questions but involves_private_info is false; set it to true, \
                     or give {who} an empty list"
                ),
            );
            continue;
        }
        if !holders.contains(&who) {
            problems.unusable(
                "questions_for_a_minor_role",
                Some(who),
                "questions",
                format!(
                    "{who}: only characters with goals get questions; give {who} an empty list"
                ),
            );
            continue;
        }
        // What the others see: the background, and every other character's goals.
        let seen: Vec<(String, BTreeSet<String>)> = goals
            .iter()
            .flat_map(|goals| seen_by_others(goals, who))
            .map(|(source, text)| {
                let content = content_words(&text, &names);
                (source, content)
            })
            .collect();
        for (index, question) in role.questions.iter().enumerate() {
            check_question(&mut problems, ctx, who, index, question, &seen, &names);
        }
    }
    problems.finish_checked(PrivateInfo {
        involves_private_info: answer.involves_private_info,
        roles,
    })
}

/// The texts every character but `who` also sees, by where they come from.
fn seen_by_others(goals: &Goals, who: &str) -> Vec<(String, String)> {
    let mut seen = vec![("the background".to_string(), goals.background.clone())];
    for role in goals.roles.iter().filter(|role| role.name != who) {
        for goal in goals.of_role(&role.name) {
            seen.push((format!("{}'s goal", role.name), goal.goal.clone()));
        }
    }
    seen
}

fn check_question(
    problems: &mut Problems,
    ctx: &ScenarioContext,
    who: &str,
    index: usize,
    question: &PrivateQuestion,
    seen: &[(String, BTreeSet<String>)],
    names: &HashSet<String>,
) {
    let field = "questions";
    let nth = format!("question {}", index + 1);
    let texts = [&question.question, &question.answer, &question.private_info];
    if !texts
        .iter()
        .all(|text| require_text(problems, Some(who), field, text))
    {
        return;
    }
    if !question.question.trim_end().ends_with('?') {
        problems.gate(
            "not_a_question",
            Some(who),
            field,
            format!("{who}: {nth} does not end in \"?\"; ask it as a question"),
        );
    }
    let answer_words = words(&question.answer);
    if answer_words.len() > MAX_ANSWER_WORDS {
        problems.gate(
            "answer_too_long",
            Some(who),
            field,
            format!(
                "{who}: the answer to {nth} has {} words; give it as a short phrase of at most \
                 {MAX_ANSWER_WORDS}",
                answer_words.len()
            ),
        );
    }
    if require_prose(problems, Some(who), field, &question.private_info) {
        gate_free_text(problems, Some(who), field, &question.private_info, ctx);
    }
    let answer = content_words(&question.answer, names);
    let retold = content_words(&question.private_info, names);
    if !answer.is_empty() && answer.intersection(&retold).count() * 2 < answer.len() {
        problems.gate(
            "private_info_without_answer",
            Some(who),
            field,
            format!(
                "{who}: the private_info of {nth} does not tell the answer (\"{}\"); retell \
                 the answer as what {who} knows",
                question.answer.trim()
            ),
        );
    }
    for (source, content) in seen {
        let found = answer.intersection(content).count();
        if !answer.is_empty() && found as f64 >= LEAKED_SHARE * answer.len() as f64 {
            problems.gate(
                "answer_given_away",
                Some(who),
                field,
                format!(
                    "{who}: the answer to {nth} (\"{}\") is stated in {source}, so the others \
                     know it too; ask about something only {who} knows",
                    question.answer.trim()
                ),
            );
            break;
        }
    }
    check_options(problems, who, &nth, question);
}

/// Three wrong options, each its own, none the right answer, each of the right one's form.
fn check_options(problems: &mut Problems, who: &str, nth: &str, question: &PrivateQuestion) {
    let field = "questions";
    if question.wrong_options.len() != WRONG_OPTIONS {
        problems.unusable(
            "option_count",
            Some(who),
            field,
            format!(
                "{who}: {nth} has {} wrong options; give exactly {WRONG_OPTIONS}",
                question.wrong_options.len()
            ),
        );
        return;
    }
    let plain = |text: &str| words(text).join(" ");
    let right = plain(&question.answer);
    let mut seen = vec![right.clone()];
    let right_length = words(&question.answer).len().max(1);
    for option in &question.wrong_options {
        if !require_text(problems, Some(who), field, option) {
            continue;
        }
        let option_plain = plain(option);
        if option_plain == right {
            problems.unusable(
                "option_is_the_answer",
                Some(who),
                field,
                format!(
                    "{who}: a wrong option of {nth} is the right answer (\"{}\"); make it wrong",
                    option.trim()
                ),
            );
        } else if seen.contains(&option_plain) {
            problems.unusable(
                "option_twice",
                Some(who),
                field,
                format!(
                    "{who}: {nth} has the wrong option \"{}\" twice; give three different ones",
                    option.trim()
                ),
            );
        }
        seen.push(option_plain);
        let length = words(option).len();
        if length > 3 * right_length + 2 || 3 * length + 2 < right_length {
            problems.gate(
                "option_form",
                Some(who),
                field,
                format!(
                    "{who}: the wrong option \"{}\" of {nth} is much {} than the right answer, \
                     which gives it away; write it as long as the answer",
                    option.trim(),
                    if length > right_length {
                        "longer"
                    } else {
                        "shorter"
                    }
                ),
            );
        }
    }
}

/// [`check`] for a clean answer: any problem is an error.
pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<PrivateInfo, Rejection> {
    check(value, ctx).and_then(Checked::clean)
}

/// An answer the checks keep clean for a plain scene between `scene.names` (see
/// [`crate::stages::descriptor::StepDescriptor::example`]): one question for the first
/// character who speaks twice.
pub fn example(scene: &crate::stages::descriptor::Example<'_>) -> Value {
    let first_holder = scene
        .names
        .iter()
        .find(|name| (scene.lines)(name) >= crate::stages::goals::answer::MIN_LINES_FOR_GOALS);
    json!({
        "involves_private_info": first_holder.is_some(),
        "roles": scene.roles(&|name, _| {
            if first_holder.map(String::as_str) != Some(name) {
                return json!({"name": name, "questions": []});
            }
            json!({"name": name, "questions": [{
                "question": format!("Where did {name} hide the envelope?"),
                "answer": "inside the piano bench",
                "private_info": format!("{name} hid the envelope inside the piano bench."),
                "wrong_options": ["under the kitchen sink", "behind the bookshelf",
                                  "in the coat pocket"],
            }]})
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;
    use crate::stages::goals;

    fn context() -> ScenarioContext {
        let mut ctx = fixture::context();
        let goals: Goals = serde_json::from_value(json!({
            "background": "Ross and Rachel close the coffee house. Rachel has kept a secret \
                           from a friend for weeks.",
            "domain": "personal_domain",
            "roles": [
                {"name": "Ross", "goals": [{"draft": "To make Rachel tell the truth.",
                  "issue": "none", "goal": "To make Rachel tell the truth.",
                  "category": "conflict_resolution"}]},
                {"name": "Rachel", "goals": [{"draft": "To put off the talk.", "issue": "none",
                  "goal": "To put off the talk.", "category": "relationship_maintenance"}]}
            ]
        }))
        .unwrap();
        ctx.set_earlier(&goals::GOALS, Some(goals));
        ctx
    }

    fn good() -> Value {
        json!({
            "involves_private_info": true,
            "roles": [
                {"name": "Ross", "questions": []},
                {"name": "Rachel", "questions": [{
                    "question": "What did Rachel break at the party last month?",
                    "answer": "her friend's vase",
                    "private_info": "Rachel broke her friend's vase at the party last month.",
                    "wrong_options": ["her friend's mirror", "the host's camera",
                                      "a neighbour's window"]
                }]}
            ]
        })
    }

    #[test]
    fn schema_is_strict() {
        assert_eq!(strictness_problems(&schema()), Vec::<String>::new());
    }

    #[test]
    fn accepts_a_good_answer_and_a_scenario_without_private_information() {
        let info = validate(&good(), &context()).unwrap();
        assert_eq!(info.roles[1].questions[0].wrong_options.len(), 3);
        let none = json!({"involves_private_info": false, "roles": [
            {"name": "Ross", "questions": []}, {"name": "Rachel", "questions": []}]});
        assert!(!validate(&none, &context()).unwrap().involves_private_info);
    }

    #[test]
    fn an_answer_the_others_can_read_is_rejected() {
        let mut value = good();
        value["roles"][1]["questions"][0]["answer"] = json!("a secret kept from a friend");
        value["roles"][1]["questions"][0]["private_info"] =
            json!("Rachel has a secret kept from a friend.");
        let rejection = validate(&value, &context()).unwrap_err();
        assert_eq!(rejection.kinds(), ["answer_given_away"]);
        assert!(rejection.message().contains("stated in the background"));
    }

    #[test]
    fn wrong_options_are_three_distinct_wrong_answers_of_the_answers_form() {
        let mut value = good();
        value["roles"][1]["questions"][0]["wrong_options"][1] = json!("Her friend's vase");
        assert_eq!(
            validate(&value, &context()).unwrap_err().kinds(),
            ["option_is_the_answer"]
        );
        let mut value = good();
        value["roles"][1]["questions"][0]["wrong_options"][2] = json!("her friend's mirror");
        assert_eq!(
            validate(&value, &context()).unwrap_err().kinds(),
            ["option_twice"]
        );
        let mut value = good();
        value["roles"][1]["questions"][0]["wrong_options"][0] =
            json!("a very long wrong option that goes on and on about many other things");
        assert_eq!(
            validate(&value, &context()).unwrap_err().kinds(),
            ["option_form"]
        );
    }

    #[test]
    fn yes_and_no_must_agree_with_the_questions() {
        let mut value = good();
        value["involves_private_info"] = json!(false);
        assert_eq!(
            validate(&value, &context()).unwrap_err().kinds(),
            ["questions_without_private_info"]
        );
        let value = json!({"involves_private_info": true, "roles": [
            {"name": "Ross", "questions": []}, {"name": "Rachel", "questions": []}]});
        assert_eq!(
            validate(&value, &context()).unwrap_err().kinds(),
            ["no_question"]
        );
    }

    #[test]
    fn the_private_info_tells_the_answer() {
        let mut value = good();
        value["roles"][1]["questions"][0]["private_info"] =
            json!("Rachel keeps something from the party to herself.");
        assert_eq!(
            validate(&value, &context()).unwrap_err().kinds(),
            ["private_info_without_answer"]
        );
    }

    #[test]
    fn once_the_scene_says_no_private_information_no_role_may_have_a_question() {
        let ctx = context();
        let role = || schema()["properties"]["roles"]["items"].clone();
        let questions = |role: &Value| {
            (
                role["properties"]["questions"]["minItems"].clone(),
                role["properties"]["questions"]["maxItems"].clone(),
            )
        };
        let scene = |involves: bool| {
            json!({"involves_private_info": involves})
                .as_object()
                .cloned()
                .unwrap()
        };
        let mut bound = role();
        narrow_role_for_decoder(&mut bound, "Ross", &[], &ctx, None);
        assert_eq!(questions(&bound), questions(&role()));
        let mut yes = role();
        narrow_role_for_decoder(&mut yes, "Ross", &[], &ctx, Some(&scene(true)));
        assert_eq!(questions(&yes), questions(&role()));
        let mut no = role();
        narrow_role_for_decoder(&mut no, "Ross", &[], &ctx, Some(&scene(false)));
        assert_eq!(questions(&no), (json!(0), json!(0)));
    }

    #[test]
    fn a_scenario_without_goals_gets_no_private_information() {
        let without_goals = crate::stages::goals::without_goals;
        assert!(without_goals(&fixture::context()).is_some());
        assert_eq!(without_goals(&context()), None);
    }
}
