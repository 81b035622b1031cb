//! A small hand-written scenario every annotation test starts from, bare and with every earlier
//! step's answer.

use crate::annotation::{CastMember, ScenarioContext};
use crate::stages::parse_script::ScenarioRecord;
use crate::text::scenario::ScenarioUnit;
use crate::text::script::LineKind;
use crate::text::script::{Dialogue, ScriptLine};

fn say(speaker: &str, text: &str, directions: &[&str]) -> ScriptLine {
    ScriptLine {
        kind: LineKind::Dialogue(Dialogue {
            speakers: vec![speaker.to_string()],
            raw_speaker: speaker.to_string(),
            group: false,
            text: text.to_string(),
            directions: directions.iter().map(|d| d.to_string()).collect(),
            extensions: Vec::new(),
            dual: false,
            lyric: false,
        }),
        source_line_start: 1,
        source_line_end: 1,
        uncut: false,
    }
}

fn action(text: &str) -> ScriptLine {
    ScriptLine {
        kind: LineKind::Action {
            text: text.to_string(),
        },
        source_line_start: 1,
        source_line_end: 1,
        uncut: false,
    }
}

pub fn record() -> ScenarioRecord {
    let lines = vec![
        action("Ross and Rachel are alone in the coffee house, closing up."),
        say("Ross", "You said you'd tell her before the party.", &[]),
        say(
            "Rachel",
            "I said I'd think about it.",
            &["wiping the counter"],
        ),
        say(
            "Ross",
            "Joey already knows. Everybody knows but Monica.",
            &[],
        ),
        say(
            "Rachel",
            "Then maybe somebody else should tell her.",
            &["not looking up"],
        ),
        say("Ross", "It's your secret, not mine.", &["to Rachel"]),
    ];
    ScenarioRecord {
        id: "friends/s01e01/sc001".to_string(),
        episode: "friends/s01e01".to_string(),
        show: "friends".to_string(),
        script_file: "friends/s01e01.txt".to_string(),
        unit: ScenarioUnit {
            id: "sc001".to_string(),
            scene_index: 0,
            scene_heading: Some("Central Perk, late evening".to_string()),
            participants: vec!["Ross".to_string(), "Rachel".to_string()],
            dialogue_line_count: 5,
            source_line_start: 1,
            source_line_end: 6,
            lines,
        },
    }
}

pub fn context() -> ScenarioContext {
    record().context().with_cast(vec![
        CastMember {
            name: "Ross Geller".to_string(),
            aliases: vec!["Ross".to_string()],
        },
        CastMember {
            name: "Rachel Green".to_string(),
            aliases: vec!["Rachel".to_string()],
        },
        CastMember {
            name: "Monica Geller".to_string(),
            aliases: vec!["Monica".to_string()],
        },
        CastMember {
            name: "Joey Tribbiani".to_string(),
            aliases: Vec::new(),
        },
    ])
}

/// The fixture with every earlier step's answer filled in, as the last step sees it.
pub fn filled_context() -> ScenarioContext {
    use serde_json::json;

    use crate::annotation::balance_conflict_intensity;
    use crate::stages::{annotate, balance, bdi_risk, describe, profiles, tasks};
    let mut ctx = context();
    let annotation = Some(
        annotate::answer::validate(
            &json!({"dialogue_type": "persuasion", "roles": [
                {"name": "Ross", "gender": "male", "age": "20s", "occupation": "unknown"},
                {"name": "Rachel", "gender": "female", "age": "20s",
                 "occupation": "waitress"}]}),
            &ctx,
        )
        .unwrap(),
    );
    ctx.set_earlier(&annotate::ANNOTATION, annotation);
    let description = Some(describe::answer::Description {
        background: "Ross and Rachel share a secret.".to_string(),
        description: "At closing time Ross asks Rachel to reveal it.".to_string(),
    });
    ctx.set_earlier(&describe::DESCRIPTION, description);
    let suggestions = profiles::answer::validate(
        &json!({"roles": [
            {"name": "Ross", "profile": "A friend who wants the truth out.",
             "expression_style": "honest_signaling",
             "conflict_characteristic": "competing",
             "non_competing_alternative": "compromising"},
            {"name": "Rachel", "profile": "Keeps the secret.",
             "expression_style": "suppression",
             "conflict_characteristic": "avoiding", "non_competing_alternative": "avoiding"}]}),
        &ctx,
    )
    .unwrap();
    let balanced =
        balance_conflict_intensity(&[suggestions.to_suggestion(&ctx.scenario_id)], 0).unwrap();
    let scenario_profiles =
        profiles::answer::ScenarioProfiles::from_balanced(&suggestions, &balanced[0]).unwrap();
    ctx.set_earlier(&balance::PROFILE, Some(scenario_profiles));
    let bdi = Some(
        bdi_risk::answer::validate(
            &json!({"roles": [
                {"name": "Ross", "belief": "Rachel promised.", "desire": "The truth out.",
                 "intention": "Press her.", "risk_if_failed": "Blame."},
                {"name": "Rachel", "belief": "It can wait.", "desire": "Time.",
                 "intention": "Stall.", "risk_if_failed": "Trust."}],
                "revised_description": "REVISED: Ross presses Rachel at closing time."}),
            &ctx,
        )
        .unwrap(),
    );
    ctx.set_earlier(&bdi_risk::BDI_RISK, bdi);
    let tasks = Some(
        tasks::answer::validate(
            &json!({"roles": [
                {"name": "Ross", "expression_task": "Ross says he is tired of the secret.",
                 "characteristic_task": "Ross insists.",
                 "interaction_regulation_task": "Ross steers back to the party.",
                 "interaction_outcome_task": "Ross gets Rachel to set a time."},
                {"name": "Rachel", "expression_task": "Rachel hides her worry.",
                 "characteristic_task": "Rachel sidesteps.",
                 "interaction_regulation_task": "Rachel keeps answers short.",
                 "interaction_outcome_task": "Rachel gets Ross to drop it."}]}),
            &ctx,
        )
        .unwrap(),
    );
    ctx.set_earlier(&tasks::TASKS, tasks);
    let goals = crate::stages::goals::answer::validate(
        &json!({
            "background": "Ross and Rachel close the coffee house together. Rachel has kept a \
                           secret from a friend for weeks.",
            "domain": "personal_domain",
            "roles": [
                {"name": "Ross", "goals": [{"draft": "To get Rachel to tell her friend.",
                  "issue": "none", "goal": "To get Rachel to tell her friend.",
                  "category": "conflict_resolution"}]},
                {"name": "Rachel", "goals": [{"draft": "To put off the talk.", "issue": "none",
                  "goal": "To put off the talk.", "category": "relationship_maintenance"}]}]}),
        &ctx,
    )
    .unwrap();
    ctx.set_earlier(&crate::stages::goals::GOALS, Some(goals));
    ctx.visual_evidence = Some("Two people behind a coffee-house counter.".to_string());
    ctx
}
