//! `cast`: the scenario's cast, one character sheet per role. A role is known by its id (its
//! place among the participants, from `parse_script`), and its sheet gathers what the steps said
//! of it as a character: the name it is shown as, gender, age and occupation (`annotate`), its
//! profile (`profiles` as balanced), and what it sees of each other role. Simulation,
//! evaluation and the export read a role's character from here and its other answers (tasks,
//! affect, ...) by the same id, so a renamed role (anonymised, or re-cast with synthetic
//! characters) is still the same role.

use serde::{Deserialize, Serialize};

use crate::annotation::vocab::{ConflictCharacteristic, ExpressionStyle, Gender};
use crate::dag::port::{Port, PortId};
use crate::dag::spec::{Defaults, StageKind, load_stage};
use crate::dag::{Env, JobCtx, Level, Outputs, Stage, StageFailure};
use crate::stages::profiles::answer::ScenarioProfiles;
use crate::stages::{annotate, balance, parse_script};
use crate::text::role::RoleId;

/// The scenario's cast, per scenario.
pub const CAST: Port<Cast> = Port::item(NAME, "cast");

pub const NAME: &str = "cast";

pub const KIND: StageKind = StageKind {
    name: NAME,
    summary: "one character sheet per role, by role id (name, gender, age, occupation, profile)",
    version: 1,
    prompts: &[],
    defaults: Defaults::of::<CastParams>(),
    load: load_stage::<CastParams, CastStage>,
};

/// cast: one character sheet per role of a scenario: the name it is shown as, gender, age and
/// occupation (annotate), profile (profiles, as balanced) and what it sees of each other role.
/// Simulation, evaluation and the export read it; per-role records are joined by role id
/// (r1, r2, ...: the role's place among the participants), never by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CastParams {}

impl crate::range::Validate for CastParams {
    fn validate(&self) -> Result<(), crate::range::BadSetting> {
        Ok(())
    }
}

pub struct CastStage;

impl From<CastParams> for CastStage {
    fn from(_: CastParams) -> Self {
        Self
    }
}

/// One scenario's roles as characters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cast {
    pub scenario: String,
    /// Every role, in the order of its id.
    pub roles: Vec<CharacterSheet>,
}

/// One role as a character.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CharacterSheet {
    pub id: RoleId,
    /// What the role is called in this cast.
    pub name: String,
    pub gender: Gender,
    pub age: String,
    pub occupation: String,
    pub profile: String,
    pub expression_style: ExpressionStyle,
    pub conflict_characteristic: ConflictCharacteristic,
    /// The characteristic read in the scene before balancing moved it.
    pub natural_conflict_characteristic: ConflictCharacteristic,
    /// What this role is shown of each other role before the interaction.
    pub knows: Vec<Acquaintance>,
}

/// What one role is shown of another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Acquaintance {
    pub role: RoleId,
    pub sees: Visibility,
}

/// How much of another role's sheet a role is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// The other's name: the roles of a scene taken from a show know one another by name, and
    /// learn the rest in the interaction.
    Name,
}

/// A record that does not fit the scenario's roles. Every step's kept answer has one entry per
/// role, and a run has one seat per role, so none of these can come from a user's input: each
/// is a bug in viss, reported as such rather than papered over with a default.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CastError {
    #[error(
        "scenario {scenario}: `{stage}` has {entries} role entries, so none for role {role} \
         (the scenario has {roles} roles); this is a bug in viss, please report it"
    )]
    MissingEntry {
        scenario: String,
        stage: &'static str,
        role: RoleId,
        entries: usize,
        roles: usize,
    },
    #[error(
        "scenario {scenario}: `{stage}` has {entries} role entries but the scenario has {roles} \
         roles; this is a bug in viss, please report it"
    )]
    OtherRoles {
        scenario: String,
        stage: &'static str,
        entries: usize,
        roles: usize,
    },
    #[error(
        "scenario {scenario}: a run has {seats} seats but the scenario's cast has {roles} roles; \
         this is a bug in viss, please report it"
    )]
    OtherSeats {
        scenario: String,
        seats: usize,
        roles: usize,
    },
}

impl Cast {
    /// The sheet of `role`.
    pub fn sheet(&self, role: RoleId) -> Result<&CharacterSheet, CastError> {
        entry_of(&self.roles, role, NAME, &self.scenario, self.roles.len())
    }

    /// Checks that a run of the scenario has one seat per role: seat `i` plays role `r{i+1}`.
    pub fn check_seats(&self, seats: usize) -> Result<(), CastError> {
        if seats == self.roles.len() {
            return Ok(());
        }
        Err(CastError::OtherSeats {
            scenario: self.scenario.clone(),
            seats,
            roles: self.roles.len(),
        })
    }

    /// The ids of the roles, in order.
    pub fn ids(&self) -> impl Iterator<Item = RoleId> + '_ {
        self.roles.iter().map(|sheet| sheet.id)
    }

    /// `role`'s entry of a step's per-role answer (see [`entry_of`]).
    pub fn entry<'a, R>(
        &self,
        entries: &'a [R],
        role: RoleId,
        stage: &'static str,
    ) -> Result<&'a R, CastError> {
        entry_of(entries, role, stage, &self.scenario, self.roles.len())
    }
}

/// Role `role`'s entry of a step's per-role answer. A step's answer has one entry per role in
/// the roles' order (its checks put them there, or the answer is not kept), so a role's entry
/// is found by its id, whatever name the entry is shown under.
pub fn entry_of<'a, R>(
    entries: &'a [R],
    role: RoleId,
    stage: &'static str,
    scenario: &str,
    roles: usize,
) -> Result<&'a R, CastError> {
    if entries.len() != roles {
        return Err(CastError::OtherRoles {
            scenario: scenario.to_string(),
            stage,
            entries: entries.len(),
            roles,
        });
    }
    entries.get(role.index()).ok_or(CastError::MissingEntry {
        scenario: scenario.to_string(),
        stage,
        role,
        entries: entries.len(),
        roles,
    })
}

#[async_trait::async_trait]
impl Stage<Env> for CastStage {
    fn level(&self) -> Level {
        Level::Scenario
    }

    fn inputs(&self) -> Vec<PortId> {
        vec![
            parse_script::CONTEXT.id(),
            annotate::ANNOTATION.id(),
            balance::PROFILE.id(),
        ]
    }

    fn outputs(&self) -> Vec<PortId> {
        vec![CAST.id()]
    }

    async fn run(&self, ctx: &JobCtx) -> Result<Outputs, StageFailure> {
        let scenario = ctx.read(&parse_script::CONTEXT)?;
        let annotation = ctx.read(&annotate::ANNOTATION)?.answer;
        let profiles = ctx.read(&balance::PROFILE)?.profiles;
        let cast = cast_of(&scenario, &annotation, &profiles)?;
        let mut outputs = Outputs::default();
        outputs.put(ctx, &CAST, &cast)?;
        Ok(outputs)
    }
}

/// The scenario's cast from its participants and the steps' answers about them.
pub fn cast_of(
    scenario: &crate::annotation::ScenarioContext,
    annotation: &annotate::answer::Annotation,
    profiles: &ScenarioProfiles,
) -> Result<Cast, CastError> {
    let id = &scenario.scenario_id;
    let count = scenario.participants.len();
    let mut roles = Vec::with_capacity(count);
    for (role, name) in scenario.roles() {
        let annotated = entry_of(&annotation.roles, role, "annotate", id, count)?;
        let profile = entry_of(&profiles.roles, role, "profiles", id, count)?;
        roles.push(CharacterSheet {
            id: role,
            name: name.to_string(),
            gender: annotated.gender,
            age: annotated.age.clone(),
            occupation: annotated.occupation.clone(),
            profile: profile.profile.clone(),
            expression_style: profile.expression_style,
            conflict_characteristic: profile.conflict_characteristic,
            natural_conflict_characteristic: profile.natural_conflict_characteristic,
            knows: RoleId::all(count)
                .filter(|other| *other != role)
                .map(|other| Acquaintance {
                    role: other,
                    sees: Visibility::Name,
                })
                .collect(),
        });
    }
    Ok(Cast {
        scenario: id.clone(),
        roles,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::annotation::ScenarioContext;

    fn scenario() -> ScenarioContext {
        let mut ctx = crate::stages::fixture::context();
        ctx.participants = vec!["Ada".into(), "Mr. Heckles".into()];
        ctx
    }

    fn answers(names: &[&str]) -> (annotate::answer::Annotation, ScenarioProfiles) {
        let annotation = json!({"dialogue_type": "eristic", "roles": names.iter().map(|n| json!({
            "name": n, "gender": "female", "age": "30s", "occupation": format!("{n}'s job")
        })).collect::<Vec<_>>()});
        let profiles = json!({"conflict_intensity": "high", "roles": names.iter().map(|n| json!({
            "name": n, "profile": format!("{n} lives upstairs."),
            "expression_style": "deception", "conflict_characteristic": "competing",
            "natural_conflict_characteristic": "avoiding"
        })).collect::<Vec<_>>()});
        (
            serde_json::from_value(annotation).unwrap(),
            serde_json::from_value(profiles).unwrap(),
        )
    }

    #[test]
    fn every_role_gets_a_sheet_under_its_id_and_knows_the_others_by_name() {
        let (annotation, profiles) = answers(&["Ada", "Mr. Heckles"]);
        let cast = cast_of(&scenario(), &annotation, &profiles).unwrap();
        let ids: Vec<String> = cast.ids().map(|id| id.to_string()).collect();
        assert_eq!(ids, ["r1", "r2"]);
        let second = cast.sheet(RoleId::at(1)).unwrap();
        assert_eq!(second.name, "Mr. Heckles");
        assert_eq!(second.occupation, "Mr. Heckles's job");
        assert_eq!(second.profile, "Mr. Heckles lives upstairs.");
        assert_eq!(
            second.knows,
            [Acquaintance {
                role: RoleId::at(0),
                sees: Visibility::Name
            }]
        );
        let record = serde_json::to_value(&cast).unwrap();
        assert_eq!(record["roles"][1]["id"], "r2");
        assert_eq!(
            record["roles"][1]["knows"][0],
            json!({"role": "r1", "sees": "name"})
        );
    }

    /// The sheet's name is the scenario's; the answers' entries are the roles' by position.
    #[test]
    fn answers_are_taken_by_position_and_a_short_answer_is_an_error_naming_the_stage() {
        let (annotation, profiles) = answers(&["ADA", "heckles"]);
        let cast = cast_of(&scenario(), &annotation, &profiles).unwrap();
        assert_eq!(cast.roles[1].name, "Mr. Heckles");
        assert_eq!(cast.roles[1].occupation, "heckles's job");

        let (mut annotation, profiles) = answers(&["Ada", "Mr. Heckles"]);
        annotation.roles.pop();
        let error = cast_of(&scenario(), &annotation, &profiles).unwrap_err();
        assert_eq!(
            error,
            CastError::OtherRoles {
                scenario: scenario().scenario_id,
                stage: "annotate",
                entries: 1,
                roles: 2
            }
        );
        assert!(
            error.to_string().contains("`annotate` has 1 role entries"),
            "{error}"
        );
        assert!(cast.sheet(RoleId::at(2)).is_err());
        assert!(cast.check_seats(2).is_ok());
        assert_eq!(
            cast.check_seats(3),
            Err(CastError::OtherSeats {
                scenario: scenario().scenario_id,
                seats: 3,
                roles: 2
            })
        );
    }
}
