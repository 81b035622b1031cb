//! Step `goals` (AgentSense): the scenario's background made self-contained for role-play, the
//! social domain it belongs to, and each speaking character's social goals, each goal's draft
//! with what was wrong with it, if anything, and what became of it (kept, rewritten, dropped).
//! Only characters with at least two lines get goals, and a scenario needs two of them.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::annotation::check::{
    Checked, Problems, Rejection, absent_cast_mentioned, deserialize_answer, forbid_absent_cast,
    match_roles, named_role, require_prose, require_text, sentence_count,
};
use crate::annotation::context::ScenarioContext;
use crate::annotation::gates::{
    FIRST_PERSON_WORDS, Field, OtherRoles, forbid_near_duplicates, gate_free_text,
};
use crate::annotation::schema;
use crate::annotation::vocab::vocabulary;
use crate::annotation::words::{marked_words, words};
use crate::stages::llm_step::SceneFields;
use crate::stages::relationships::stated::kin_relations;

/// Lines a character must speak to get goals; a scenario needs [`MIN_GOAL_HOLDERS`] of them.
pub const MIN_LINES_FOR_GOALS: usize = 2;
pub const MIN_GOAL_HOLDERS: usize = 2;
/// Drafts per character at most: AgentSense's characters have one to three goals.
pub const MAX_GOALS: usize = 3;

vocabulary! {
    /// What a social goal is about (AgentSense's seven categories).
    GoalCategory {
        InformationExchange = "information_exchange",
        RelationshipBuilding = "relationship_building",
        /// Relationship maintenance or emotional support.
        RelationshipMaintenance = "relationship_maintenance",
        IdentityRecognition = "identity_recognition",
        Cooperation = "cooperation",
        Competition = "competition",
        ConflictResolution = "conflict_resolution",
    }
}

vocabulary! {
    /// Alderfer's existence / relatedness / growth needs, the classes AgentSense reports goal
    /// completion by.
    ErgClass {
        Existence = "existence",
        Relatedness = "relatedness",
        Growth = "growth",
    }
}

vocabulary! {
    /// The social sphere a scenario takes place in.
    SocialDomain {
        /// Family, friends, partners: private life.
        PersonalDomain = "personal_domain",
        /// A workplace, a school, a neighbourhood: a group whose members know each other.
        SmallSociety = "small_society",
        /// Public life among strangers: shops, offices, institutions.
        LargeSociety = "large_society",
    }
}

vocabulary! {
    /// What is wrong with a goal's draft, if anything: a goal that is any of these is rewritten
    /// or dropped.
    GoalIssue {
        /// Nothing: the draft is kept as it is.
        NoIssue = "none",
        /// It needs a character who is not in the scene.
        AbsentCharacter = "absent_character",
        /// It needs information the character cannot have.
        UnknowableInformation = "unknowable_information",
        /// It is a physical action rather than a social aim.
        PhysicalAction = "physical_action",
        TooAbstract = "too_abstract",
        TooSubjective = "too_subjective",
        Meaningless = "meaningless",
        /// It can only succeed if another character's goal does, or fails.
        DependsOnOtherGoal = "depends_on_other_goal",
        /// It turns on a chance event rather than on what the characters do.
        DependsOnChance = "depends_on_chance",
    }
}

impl GoalCategory {
    pub fn erg(self) -> ErgClass {
        match self {
            GoalCategory::InformationExchange => ErgClass::Existence,
            GoalCategory::RelationshipBuilding
            | GoalCategory::RelationshipMaintenance
            | GoalCategory::IdentityRecognition => ErgClass::Relatedness,
            GoalCategory::Cooperation
            | GoalCategory::Competition
            | GoalCategory::ConflictResolution => ErgClass::Growth,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Goals {
    /// What a player must know before the scenario starts, told so that it needs neither the
    /// show nor the dialogue.
    pub background: String,
    pub domain: SocialDomain,
    pub roles: Vec<RoleGoals>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleGoals {
    pub name: String,
    /// Empty for a character with fewer than [`MIN_LINES_FOR_GOALS`] lines.
    pub goals: Vec<GoalDraft>,
}

named_role!(RoleGoals);

/// One goal as first read from the scene and as it ends up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GoalDraft {
    pub draft: String,
    pub issue: GoalIssue,
    /// The goal as the benchmark states it: the draft itself, its rewrite, or empty when it is
    /// dropped.
    pub goal: String,
    pub category: GoalCategory,
}

/// What became of a draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalOutcome {
    Kept,
    Rewritten,
    Dropped,
}

impl GoalDraft {
    pub fn outcome(&self) -> GoalOutcome {
        match (self.issue, self.goal.trim().is_empty()) {
            (_, true) => GoalOutcome::Dropped,
            (GoalIssue::NoIssue, false) => GoalOutcome::Kept,
            (_, false) => GoalOutcome::Rewritten,
        }
    }
}

impl Goals {
    /// The goals a role plays (kept or rewritten), with their categories.
    pub fn of_role(&self, name: &str) -> impl Iterator<Item = &GoalDraft> {
        self.roles
            .iter()
            .filter(move |role| role.name == name)
            .flat_map(|role| &role.goals)
            .filter(|goal| goal.outcome() != GoalOutcome::Dropped)
    }
}

pub type Answer = Goals;

/// The participants who speak at least [`MIN_LINES_FOR_GOALS`] lines: those who get goals.
pub fn goal_holders(ctx: &ScenarioContext) -> Vec<&str> {
    ctx.participants
        .iter()
        .map(String::as_str)
        .filter(|name| lines_of(ctx, name) >= MIN_LINES_FOR_GOALS)
        .collect()
}

fn lines_of(ctx: &ScenarioContext, name: &str) -> usize {
    ctx.lines.iter().filter(|line| line.spoken_by(name)).count()
}

/// Why a scenario gets no goals: fewer than [`MIN_GOAL_HOLDERS`] characters speak enough.
pub fn not_applicable(ctx: &ScenarioContext) -> Option<String> {
    let holders = goal_holders(ctx);
    (holders.len() < MIN_GOAL_HOLDERS).then(|| {
        format!(
            "not an AgentSense scenario: {} of its characters speak at least \
             {MIN_LINES_FOR_GOALS} lines ({}), and goals need {MIN_GOAL_HOLDERS}",
            holders.len(),
            if holders.is_empty() {
                "none".to_string()
            } else {
                holders.join(", ")
            }
        )
    })
}

pub fn schema() -> Value {
    let goal = schema::object(
        "One social goal: its first draft, what is wrong with it if anything, and the goal as \
         it stands.",
        &[
            (
                "draft",
                schema::infinitive_sentence(
                    "The goal as first read from the scene, one sentence in the infinitive \
                     ('To ...').",
                    false,
                ),
            ),
            (
                "issue",
                schema::label::<GoalIssue>(
                    "What is wrong with the draft: none, or the reason it is rewritten or dropped.",
                ),
            ),
            (
                "goal",
                schema::infinitive_sentence(
                    "The goal as the character plays it, one sentence in the infinitive ('To \
                     ...'): the draft unchanged when its issue is none, a rewrite that fixes the \
                     issue, or empty to drop it.",
                    true,
                ),
            ),
            (
                "category",
                schema::label::<GoalCategory>("What the goal is about."),
            ),
        ],
    );
    schema::object(
        "The scenario's self-contained background, its social domain, and each participant's \
         social goals.",
        &[
            (
                "background",
                schema::sentences(
                    "What the players must know before the scenario starts, without the show \
                     or the dialogue: who the characters are to each other, where they are and \
                     what happened before.",
                    2,
                    5,
                ),
            ),
            (
                "domain",
                schema::label::<SocialDomain>("The social sphere the scenario takes place in."),
            ),
            (
                "roles",
                schema::roles(
                    "One entry per participant.",
                    &[(
                        "goals",
                        schema::array(
                            "The character's social goals; empty for a character with fewer \
                             than two lines.",
                            goal,
                            None,
                            Some(MAX_GOALS),
                        ),
                    )],
                ),
            ),
        ],
    )
}

/// A goal holder gets one to [`MAX_GOALS`] goals, anyone else none, so a decoder cannot give
/// goals to a character who barely speaks.
pub fn narrow_role_for_decoder(
    role: &mut Value,
    name: &str,
    _: &[String],
    ctx: &ScenarioContext,
    _: Option<&SceneFields>,
) {
    let goals = &mut role["properties"]["goals"];
    if lines_of(ctx, name) >= MIN_LINES_FOR_GOALS {
        goals["minItems"] = json!(1);
        goals["maxItems"] = json!(MAX_GOALS);
    } else {
        goals["minItems"] = json!(0);
        goals["maxItems"] = json!(0);
    }
}

/// What the embedded model may not write in a character's own part of the goals (asked one
/// role at a time): the words of the character's name as the script spells them (a title such
/// as "Mr." aside). A goal is what the character wants of others; the 1.5B model otherwise puts
/// the holder after the goal's verb ("To help Noor" as Noor's goal), which
/// `goal_about_itself` refuses, answer after answer. Only the capitalised spellings are barred,
/// so a name that is also a word ("Will") leaves the word free. The character's other names in
/// the show's manifest are barred too (barred "Theo", the model wrote "Theodore"), apart from
/// words another character's names share ("Geller" of Ross Geller and Monica Geller).
pub fn own_name(role: &str, ctx: &ScenarioContext) -> Vec<String> {
    let other_words: Vec<String> = ctx
        .cast
        .iter()
        .filter(|member| !member.goes_by(role))
        .flat_map(|member| member.names())
        .flat_map(|name| name_words_of(name))
        .collect();
    let mut barred: Vec<String> = Vec::new();
    for word in ctx.names_of(role).iter().flat_map(|n| name_words_of(n)) {
        if !other_words.contains(&word) && !barred.contains(&word) {
            barred.push(word);
        }
    }
    barred
}

/// The capitalised words of `name` of three letters or more, without titles ("Mr.").
fn name_words_of(name: &str) -> Vec<String> {
    name.split_whitespace()
        .filter(|word| !word.ends_with('.') && word.chars().count() >= 3)
        .map(|word| {
            word.trim_matches(|c: char| !c.is_alphanumeric())
                .to_string()
        })
        .filter(|word| word.chars().next().is_some_and(char::is_uppercase))
        .collect()
}

/// The answer, usable or not: an error names what leaves it unusable (with every other
/// problem, for the re-ask); a usable answer carries the quality gates it fails.
pub fn check(value: &Value, ctx: &ScenarioContext) -> Result<Checked<Goals>, Rejection> {
    let answer: Goals = deserialize_answer::<Goals, RoleGoals>(value)?;
    let mut problems = Problems::new();
    let roles = match_roles(answer.roles, ctx, &mut problems);
    let holders = goal_holders(ctx);
    for role in &roles {
        let who = role.name.as_str();
        if !holders.contains(&who) {
            if !role.goals.is_empty() {
                problems.gate(
                    "goals_for_a_minor_role",
                    Some(who),
                    "goals",
                    format!(
                        "{who}: goals are only for characters with at least \
                         {MIN_LINES_FOR_GOALS} lines, and {who} has fewer; give {who} an empty \
                         list"
                    ),
                );
            }
            continue;
        }
        for (index, goal) in role.goals.iter().enumerate() {
            check_goal(&mut problems, ctx, who, index, goal);
        }
        if role
            .goals
            .iter()
            .all(|g| g.outcome() == GoalOutcome::Dropped)
        {
            problems.unusable(
                "no_goal",
                Some(who),
                "goals",
                format!(
                    "{who}: no goal is left; give {who} at least one social goal the scene \
                     shows, one sentence starting with \"To\""
                ),
            );
        }
    }
    let fields: Vec<Field<'_>> = roles
        .iter()
        .flat_map(|role| {
            role.goals
                .iter()
                .filter(|g| g.outcome() != GoalOutcome::Dropped)
                .map(|g| Field {
                    who: &role.name,
                    name: "goal",
                    text: &g.goal,
                })
        })
        .collect();
    forbid_near_duplicates(
        &mut problems,
        &fields,
        OtherRoles::SameField,
        ctx,
        |field| format!("give {} a goal of {}'s own", field.who, field.who),
    );
    if require_prose(&mut problems, None, "background", &answer.background) {
        gate_free_text(&mut problems, None, "background", &answer.background, ctx);
    }
    problems.finish_checked(Goals {
        background: answer.background,
        domain: answer.domain,
        roles,
    })
}

fn check_goal(
    problems: &mut Problems,
    ctx: &ScenarioContext,
    who: &str,
    index: usize,
    goal: &GoalDraft,
) {
    let field = "goals";
    let nth = format!("goal {}", index + 1);
    if !require_text(problems, Some(who), field, &goal.draft) {
        return;
    }
    let text = goal.goal.trim();
    let draft = goal.draft.trim();
    // The draft is read from the scene as a goal too: the 1.5B model copied a line of the
    // dialogue there ("I told you it was there") and then named an issue for it.
    if draft != text {
        require_infinitive(problems, who, &format!("the draft of {nth}"), draft);
        gate_free_text(problems, Some(who), field, draft, ctx);
    }
    // For a person, not a re-ask: the check reads words, and may miss someone the draft needs
    // without naming ("To get the deposit back" needs the rental company). Re-asked, the 1.5B
    // model went back and forth between this and a rewrite under the issue none, 63 answers
    // for the demo's 16 goal parts where it had taken 17, and fixed none.
    if goal.issue == GoalIssue::AbsentCharacter && !refers_to_someone_absent(draft, ctx) {
        problems.review(
            "absent_character_unfounded",
            Some(who),
            field,
            format!(
                "{who}: {nth} has the issue absent_character, but its draft (\"{draft}\") names \
                 nobody who may be outside the scene (participants: {}); check the issue, and if \
                 it is none, the goal is the draft word for word",
                ctx.participants.join(", ")
            ),
        );
    }
    match goal.outcome() {
        GoalOutcome::Dropped => return,
        GoalOutcome::Kept if text != draft => problems.gate(
            "rewrite_without_issue",
            Some(who),
            field,
            format!(
                "{who}: {nth} differs from its draft but its issue is none; name the issue the \
                 rewrite fixes, or keep the draft unchanged"
            ),
        ),
        GoalOutcome::Rewritten if text == draft => problems.gate(
            "issue_not_fixed",
            Some(who),
            field,
            format!(
                "{who}: {nth} has the issue {} but is the draft unchanged; rewrite it so the \
                 issue is gone, or drop it (an empty goal)",
                goal.issue
            ),
        ),
        _ => {}
    }
    let first_words = words(text);
    require_infinitive(problems, who, &nth, text);
    // "To convince Noor ..." as Noor's goal: the 1.5B model wrote the other role's goal
    // under its own name.
    let marked = marked_words(text);
    let own = words(who);
    if marked.len() > own.len() + 1
        && marked[0].0 == "to"
        && marked[2..2 + own.len()]
            .iter()
            .map(|(word, _)| word)
            .eq(own.iter())
        && !marked[1 + own.len()].1
    {
        problems.gate(
            "goal_about_itself",
            Some(who),
            field,
            format!(
                "{who}: {nth} has {who} acting on {who} (\"{} {who}\"); name the other \
                 character {who} wants it from",
                marked[1].0
            ),
        );
    }
    if sentence_count(text) != 1 {
        problems.gate(
            "goal_sentences",
            Some(who),
            field,
            format!("{who}: {nth} is not one sentence; state the goal in one sentence"),
        );
    }
    if first_words.iter().any(|w| w == "you" || w == "your") {
        problems.gate(
            "goal_second_person",
            Some(who),
            field,
            format!(
                "{who}: {nth} addresses someone as \"you\"; write the goal in the third person, \
                 naming the others"
            ),
        );
    }
    forbid_absent_cast(problems, Some(who), field, text, ctx);
    gate_free_text(problems, Some(who), field, text, ctx);
}

/// Reports `text` (what `what` names: "goal 2") when it is not a sentence in the infinitive.
fn require_infinitive(problems: &mut Problems, who: &str, what: &str, text: &str) {
    let first_words = words(text);
    if first_words.first().map(String::as_str) != Some("to") || first_words.len() < 3 {
        problems.gate(
            "goal_not_infinitive",
            Some(who),
            "goals",
            format!(
                "{who}: {what} (\"{text}\") is not in the infinitive; start it with \"To\" and a \
                 verb, e.g. \"To ...\""
            ),
        );
    }
}

/// People a goal's draft may need by what they are rather than by name ("the man with the
/// parcel", "the van people", "her landlord"); relatives and partners count too
/// ([`kin_relations`]). Generous on purpose: it only has to tell a draft that needs nobody but
/// the participants from one that may need someone else.
#[rustfmt::skip]
const PEOPLE_WORDS: &[&str] = &[
    "man", "men", "woman", "women", "people", "person", "someone", "somebody", "anyone",
    "anybody", "everyone", "everybody", "guy", "guys", "lady", "boy", "girl", "kid", "kids",
    "child", "children", "baby", "boss", "landlord", "landlady", "neighbour", "neighbor",
    "neighbours", "neighbors", "colleague", "colleagues", "customer", "customers", "client",
    "clients", "tenant", "tenants", "roommate", "flatmate", "friend", "friends", "doctor",
    "police", "officer", "teacher", "clerk", "manager", "driver", "owner", "staff", "company",
    "parent", "parents", "family", "stranger", "strangers", "guest", "guests", "caller",
];

/// Whether `draft` may need someone who is not in the scene: it names an absent cast member,
/// has a capitalised word (after its first) that is no participant's name ("Dennis"), or names
/// a person by what they are ([`PEOPLE_WORDS`]).
fn refers_to_someone_absent(draft: &str, ctx: &ScenarioContext) -> bool {
    if !absent_cast_mentioned(draft, ctx).is_empty() {
        return true;
    }
    let present: Vec<String> = ctx
        .participants
        .iter()
        .flat_map(|p| ctx.names_of(p))
        .flat_map(|name| words(&name))
        .collect();
    let capitalised_stranger = draft
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '\u{2019}'))
        .filter(|word| !word.is_empty())
        .skip(1)
        .filter(|word| word.chars().next().is_some_and(char::is_uppercase))
        .flat_map(words)
        .any(|word| !FIRST_PERSON_WORDS.contains(&word.as_str()) && !present.contains(&word));
    capitalised_stranger
        || words(draft)
            .iter()
            .any(|word| PEOPLE_WORDS.contains(&word.as_str()) || kin_relations(word).is_some())
}

/// [`check`] for a clean answer: any problem is an error.
pub fn validate(value: &Value, ctx: &ScenarioContext) -> Result<Goals, Rejection> {
    check(value, ctx).and_then(Checked::clean)
}

/// An answer the checks keep clean for a plain scene between `scene.names` (see
/// [`crate::stages::descriptor::StepDescriptor::example`]): goals for those who speak at least
/// twice, one of each kept, rewritten and dropped for the first of them.
pub fn example(scene: &crate::stages::descriptor::Example<'_>) -> Value {
    let holders: Vec<&String> = scene
        .names
        .iter()
        .filter(|name| (scene.lines)(name) >= MIN_LINES_FOR_GOALS)
        .collect();
    json!({
        "background": "The two have shared a flat for a year and split every bill. \
                       A week ago one of them paid a large bill alone.",
        "domain": "personal_domain",
        "roles": scene.roles(&|name, other| {
            let name_string = name.to_string();
            if !holders.contains(&&name_string) {
                return json!({"name": name, "goals": []});
            }
            let topic = scene.topic(name);
            let mut goals = vec![json!({
                "draft": format!("To settle {topic} with {other}."),
                "issue": "none",
                "goal": format!("To settle {topic} with {other}."),
                "category": "conflict_resolution",
            })];
            if holders.first() == Some(&&name_string) {
                goals.push(json!({
                    "draft": format!("To feel better about {topic}."),
                    "issue": "too_subjective",
                    "goal": format!("To get {other} to admit a share of {topic}."),
                    "category": "competition",
                }));
                goals.push(json!({
                    "draft": "To carry the bags upstairs.",
                    "issue": "physical_action",
                    "goal": "",
                    "category": "cooperation",
                }));
            }
            json!({"name": name, "goals": goals})
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::schema::strictness_problems;
    use crate::stages::fixture;

    #[test]
    fn a_roles_own_part_bars_the_capitalised_words_of_its_name_but_not_a_title() {
        let scene = fixture::context();
        assert_eq!(own_name("Noor", &scene), ["Noor"]);
        assert_eq!(own_name("Mr. Heckles", &scene), ["Heckles"]);
        assert_eq!(
            own_name("Mary Jane Watson", &scene),
            ["Mary", "Jane", "Watson"]
        );
        assert!(own_name("Al", &scene).is_empty());
    }

    #[test]
    fn a_roles_own_part_bars_its_other_names_but_not_a_word_another_character_shares() {
        let scene = fixture::context();
        // Ross Geller's "Geller" is Monica Geller's too.
        assert_eq!(own_name("Ross", &scene), ["Ross"]);
        assert_eq!(own_name("Rachel", &scene), ["Rachel", "Green"]);
        assert_eq!(own_name("Joey Tribbiani", &scene), ["Joey", "Tribbiani"]);
    }

    fn good() -> Value {
        json!({
            "background": "Ross and Rachel work the late shift at a coffee house. \
                           Rachel has kept a secret from her friend for weeks.",
            "domain": "personal_domain",
            "roles": [
                {"name": "Ross", "goals": [
                    {"draft": "To make Rachel tell her friend the truth tonight.",
                     "issue": "none",
                     "goal": "To make Rachel tell her friend the truth tonight.",
                     "category": "conflict_resolution"},
                    {"draft": "To win the argument forever.", "issue": "too_abstract",
                     "goal": "To get Rachel to name a day for the talk.",
                     "category": "competition"},
                    {"draft": "To lock the front door.", "issue": "physical_action",
                     "goal": "", "category": "cooperation"}
                ]},
                {"name": "Rachel", "goals": [
                    {"draft": "To put off the talk without losing Ross's support.",
                     "issue": "none",
                     "goal": "To put off the talk without losing Ross's support.",
                     "category": "relationship_maintenance"}
                ]}
            ]
        })
    }

    #[test]
    fn schema_is_strict_and_lists_the_seven_categories() {
        let schema = schema();
        assert_eq!(strictness_problems(&schema), Vec::<String>::new());
        let category = schema
            .pointer("/properties/roles/items/properties/goals/items/properties/category")
            .unwrap();
        assert_eq!(category["enum"].as_array().unwrap().len(), 7);
    }

    #[test]
    fn keeps_rewrites_and_drops_with_the_reason_and_classes_each_goal() {
        let goals = validate(&good(), &fixture::context()).unwrap();
        let outcomes: Vec<(GoalOutcome, GoalIssue)> = goals.roles[0]
            .goals
            .iter()
            .map(|g| (g.outcome(), g.issue))
            .collect();
        assert_eq!(
            outcomes,
            [
                (GoalOutcome::Kept, GoalIssue::NoIssue),
                (GoalOutcome::Rewritten, GoalIssue::TooAbstract),
                (GoalOutcome::Dropped, GoalIssue::PhysicalAction),
            ]
        );
        let played: Vec<ErgClass> = goals.of_role("Ross").map(|g| g.category.erg()).collect();
        assert_eq!(played, [ErgClass::Growth, ErgClass::Growth]);
        assert_eq!(GoalCategory::InformationExchange.erg(), ErgClass::Existence);
        assert_eq!(
            GoalCategory::IdentityRecognition.erg(),
            ErgClass::Relatedness
        );
    }

    #[test]
    fn a_goal_must_be_an_infinitive_sentence_about_those_present() {
        let mut value = good();
        value["roles"][1]["goals"][0]["draft"] = json!("Rachel wants to stall.");
        value["roles"][1]["goals"][0]["goal"] = json!("Rachel wants to stall.");
        let rejection = validate(&value, &fixture::context()).unwrap_err();
        assert_eq!(rejection.kinds(), ["goal_not_infinitive"]);
        let mut value = good();
        value["roles"][1]["goals"][0]["draft"] = json!("To keep Monica from hearing of it.");
        value["roles"][1]["goals"][0]["goal"] = json!("To keep Monica from hearing of it.");
        let rejection = validate(&value, &fixture::context()).unwrap_err();
        assert_eq!(rejection.kinds(), ["absent_cast"], "{rejection}");
    }

    #[test]
    fn absent_character_needs_a_draft_that_needs_someone_outside_the_scene() {
        let with_draft = |draft: &str| {
            let mut value = good();
            value["roles"][1]["goals"][0] = json!({
                "draft": draft,
                "issue": "absent_character",
                "goal": "To get Ross to keep the secret a week longer.",
                "category": "relationship_maintenance",
            });
            check(&value, &fixture::context()).unwrap()
        };
        let unfounded = with_draft("To put off the talk with Ross until tomorrow.");
        // For a person to look at: the answer is clean, and flagged with it.
        assert!(unfounded.gates.is_empty(), "{:?}", unfounded.gates);
        let kinds: Vec<&str> = unfounded.reviews.iter().map(|g| g.kind.as_str()).collect();
        assert_eq!(kinds, ["absent_character_unfounded"]);
        assert!(
            unfounded.reviews[0]
                .message
                .contains("names nobody who may be outside the scene"),
            "{}",
            unfounded.reviews[0].message
        );
        for founded in [
            // An absent cast member, a name that is nobody's in the scene, a person by role,
            // a relative.
            "To keep Monica from hearing of it.",
            "To ask Dennis whether he hit anything.",
            "To find the man who left the parcel.",
            "To win back her sister's trust.",
        ] {
            let checked = with_draft(founded);
            assert!(
                checked.gates.is_empty() && checked.reviews.is_empty(),
                "{founded}: {:?}",
                checked.into_flagged().1
            );
        }
    }

    #[test]
    fn a_draft_is_an_infinitive_goal_in_its_own_words() {
        let with_draft = |draft: &str, issue: &str| {
            let mut value = good();
            value["roles"][1]["goals"][0] = json!({
                "draft": draft,
                "issue": issue,
                "goal": "To get Ross to keep the secret a week longer.",
                "category": "relationship_maintenance",
            });
            check(&value, &fixture::context()).unwrap()
        };
        let kinds = |checked: Checked<Goals>| -> Vec<String> {
            checked.gates.iter().map(|g| g.kind.clone()).collect()
        };
        let copied = with_draft(
            "I told you it was there before you noticed it.",
            "meaningless",
        );
        assert_eq!(
            kinds(copied),
            ["goal_not_infinitive", "first_person"],
            "a line of dialogue as the draft"
        );
        let dropped = {
            let mut value = good();
            value["roles"][0]["goals"][2]["draft"] = json!("Lock the front door.");
            check(&value, &fixture::context()).unwrap()
        };
        assert_eq!(
            kinds(dropped),
            ["goal_not_infinitive"],
            "a dropped goal's draft"
        );
        assert!(
            with_draft("To stall the talk.", "too_abstract")
                .gates
                .is_empty()
        );
    }

    #[test]
    fn the_schema_holds_drafts_and_goals_to_the_infinitive_and_lets_a_goal_be_dropped() {
        let schema = schema();
        let goal = schema
            .pointer("/properties/roles/items/properties/goals/items/properties")
            .unwrap();
        let matches = |field: &str, text: &str| {
            regex::Regex::new(goal[field]["pattern"].as_str().unwrap())
                .unwrap()
                .is_match(text)
        };
        assert!(matches(
            "draft",
            "To make Rachel tell her friend the truth tonight."
        ));
        assert!(!matches("draft", "I told you it was there."));
        assert!(!matches("draft", ""));
        assert!(matches("goal", ""));
        assert!(matches("goal", "To get Rachel to name a day for the talk."));
        assert!(!matches("goal", "Rachel wants to stall."));
        llama_cpp_2::json_schema_to_grammar(&schema.to_string()).unwrap();
    }

    #[test]
    fn a_goal_acting_on_its_own_holder_is_refused() {
        let mut value = good();
        value["roles"][1]["goals"][0]["draft"] = json!("To convince Rachel to wait.");
        value["roles"][1]["goals"][0]["goal"] = json!("To convince Rachel to wait.");
        let rejection = validate(&value, &fixture::context()).unwrap_err();
        assert_eq!(rejection.kinds(), ["goal_about_itself"]);
        assert!(rejection.message().contains("(\"convince Rachel\")"));
        // Her own things are hers to act on.
        value["roles"][1]["goals"][0]["draft"] = json!("To keep Rachel's secret a while longer.");
        value["roles"][1]["goals"][0]["goal"] = json!("To keep Rachel's secret a while longer.");
        validate(&value, &fixture::context()).unwrap();
    }

    #[test]
    fn a_rewrite_names_its_issue_and_fixes_it() {
        let mut value = good();
        value["roles"][0]["goals"][0]["goal"] = json!("To get Rachel to call her friend.");
        let rejection = validate(&value, &fixture::context()).unwrap_err();
        assert_eq!(rejection.kinds(), ["rewrite_without_issue"]);
        // The goal itself is there: the answer is usable, kept flagged after the re-asks.
        let kept = check(&value, &fixture::context()).unwrap();
        assert_eq!(kept.gates[0].kind, "rewrite_without_issue");
        let mut value = good();
        value["roles"][0]["goals"][1]["goal"] = json!("To win the argument forever.");
        let rejection = validate(&value, &fixture::context()).unwrap_err();
        assert_eq!(rejection.kinds(), ["issue_not_fixed"]);
    }

    #[test]
    fn every_goal_holder_keeps_a_goal() {
        let mut value = good();
        value["roles"][1]["goals"][0]["issue"] = json!("meaningless");
        value["roles"][1]["goals"][0]["goal"] = json!("");
        let rejection = validate(&value, &fixture::context()).unwrap_err();
        assert_eq!(rejection.kinds(), ["no_goal"]);
        assert!(rejection.message().contains("Rachel: no goal is left"));
    }

    #[test]
    fn only_characters_with_two_lines_get_goals_and_a_scenario_needs_two_of_them() {
        let mut ctx = fixture::context();
        assert_eq!(goal_holders(&ctx), ["Ross", "Rachel"]);
        assert_eq!(not_applicable(&ctx), None);
        // Rachel's second line goes: she speaks once.
        let at = ctx
            .lines
            .iter()
            .rposition(|line| line.spoken_by("Rachel"))
            .unwrap();
        ctx.lines.remove(at);
        assert_eq!(goal_holders(&ctx), ["Ross"]);
        let reason = not_applicable(&ctx).unwrap();
        assert!(reason.contains("1 of its characters"), "{reason}");
        let rejection = validate(&good(), &ctx).unwrap_err();
        assert_eq!(rejection.kinds(), ["goals_for_a_minor_role"]);
        let mut value = good();
        value["roles"][1]["goals"] = json!([]);
        validate(&value, &ctx).unwrap();
    }

    #[test]
    fn the_decoder_gives_goals_only_to_goal_holders() {
        let mut ctx = fixture::context();
        let mut role = schema()["properties"]["roles"]["items"].clone();
        narrow_role_for_decoder(&mut role, "Rachel", &[], &ctx, None);
        assert_eq!(role["properties"]["goals"]["minItems"], 1);
        let at = ctx
            .lines
            .iter()
            .rposition(|line| line.spoken_by("Rachel"))
            .unwrap();
        ctx.lines.remove(at);
        narrow_role_for_decoder(&mut role, "Rachel", &[], &ctx, None);
        assert_eq!(role["properties"]["goals"]["maxItems"], 0);
    }
}
