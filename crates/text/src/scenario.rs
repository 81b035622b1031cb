//! Scenes -> scenario units: contiguous stretches of one scene in which a
//! stable group of at least two characters talk.
//!
//! # How a scene is split
//!
//! Only dialogue lines count as "turns"; crowd lines (`All:`) are turns but
//! nobody's participation. A speaker has *left* when, after their latest
//! turn, more than [`ScenarioParams::max_silence`] turns pass without them:
//! their next turn is further away than that, or never comes although the
//! scene does go on for that long. (A speaker whose silence is cut short by
//! the end of the scene has not been seen to leave.)
//!
//! Walking the scene's turns in order, the current unit has a participant
//! set. When a speaker who is not in the set takes a turn (an *arrival*)
//! while at least one participant has left, the unit closes and a new one
//! begins: a character leaving and another arriving is a change of
//! scenario, while arrivals alone (someone joins) or departures alone
//! (someone goes quiet) are not. The new unit starts right after the last
//! dialogue line of the old one, so the action line that brings the new
//! character in belongs to the new unit; its participants are the old ones
//! who have not left, plus the arrival. A participant who left and comes back
//! within the same unit simply rejoins it.
//!
//! Units with fewer than `min_lines` dialogue lines (crowd lines included)
//! or fewer than `min_speakers` distinct individual speakers are dropped.
//!
//! # Ids
//! A unit's id comes from what it opens with, not from where it is: `sc` and
//! four hex digits of the blake3 hash of its first two dialogue lines (speakers
//! and words, as normalised by the script parsers, so a Fountain and a
//! Friends-style version of a script give the same ids). Inserting a scene, or
//! editing lines further into a unit, leaves every other id alone, so the
//! cache keeps the work done on them. Two units that open alike get eight
//! digits, then a `-2`, `-3` suffix in script order.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::script::{Script, ScriptLine};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ScenarioParams {
    /// Minimum dialogue lines per unit, 0 to 100,000. The default of 10 follows the
    /// AgentSense benchmark, which dropped scenes with fewer than 10
    /// dialogue lines.
    pub min_lines: usize,
    /// Minimum distinct individual speakers per unit, 1 to 1,000.
    pub min_speakers: usize,
    /// How many other turns a speaker may stay silent and still be present, 1 to 100,000: a
    /// speaker silent for longer has left the scenario; a departure plus an arrival starts a new
    /// unit.
    pub max_silence: usize,
    /// Set to false to keep each scene whole (one unit per scene).
    pub split_on_turnover: bool,
    /// Keep lines a transcript marks as extra "uncut version" material.
    pub include_uncut: bool,
}

impl Default for ScenarioParams {
    fn default() -> Self {
        ScenarioParams {
            min_lines: 10,
            min_speakers: 2,
            max_silence: 12,
            split_on_turnover: true,
            include_uncut: true,
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum ScenarioError {
    #[error(
        "scenario params: max_silence must be at least 1 (got 0); use split_on_turnover = false to \
         keep scenes whole"
    )]
    ZeroMaxSilence,
    #[error(
        "scenario params: min_speakers must be at least 1 (got 0); a unit needs someone speaking"
    )]
    ZeroMinSpeakers,
}

impl viss_engine::range::Validate for ScenarioParams {
    fn validate(&self) -> Result<(), viss_engine::range::BadSetting> {
        use viss_engine::range::{Range, check};
        check("min_lines", self.min_lines, Range::new(0.0, 100_000.0))?;
        check("min_speakers", self.min_speakers, Range::new(1.0, 1_000.0))?;
        check("max_silence", self.max_silence, Range::new(1.0, 100_000.0))
    }
}

impl ScenarioParams {
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.max_silence == 0 {
            return Err(ScenarioError::ZeroMaxSilence);
        }
        if self.min_speakers == 0 {
            return Err(ScenarioError::ZeroMinSpeakers);
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScenarioUnit {
    /// `sc` and hex digits of the hash of the unit's opening lines (see the module docs).
    pub id: String,
    pub scene_index: usize,
    pub scene_heading: Option<String>,
    /// Individual speakers in order of their first line in the unit.
    pub participants: Vec<String>,
    pub dialogue_line_count: usize,
    pub source_line_start: usize,
    pub source_line_end: usize,
    pub lines: Vec<ScriptLine>,
}

pub fn build_scenarios(
    script: &Script,
    params: &ScenarioParams,
) -> Result<Vec<ScenarioUnit>, ScenarioError> {
    Ok(scenario_units(script, params)?.collect())
}

/// The units of [`build_scenarios`] one at a time, in script order: a caller that stores each
/// as it comes holds one unit's copy of its lines, not a second copy of the whole script.
pub fn scenario_units<'a>(
    script: &'a Script,
    params: &'a ScenarioParams,
) -> Result<impl Iterator<Item = ScenarioUnit> + 'a, ScenarioError> {
    params.validate()?;
    let mut ids = UnitIds::default();
    Ok(script.scenes.iter().flat_map(move |scene| {
        let lines: Vec<&ScriptLine> = scene
            .lines
            .iter()
            .filter(|l| params.include_uncut || !l.uncut)
            .collect();
        let mut units = Vec::new();
        for range in split_scene(&lines, params) {
            let unit_lines: Vec<ScriptLine> = lines[range].iter().map(|l| (*l).clone()).collect();
            let participants = participants_of(&unit_lines);
            let dialogue_line_count = unit_lines
                .iter()
                .filter(|l| l.dialogue().is_some_and(|d| !d.text.is_empty()))
                .count();
            if dialogue_line_count < params.min_lines || participants.len() < params.min_speakers {
                continue;
            }
            units.push(ScenarioUnit {
                id: ids.assign(&unit_lines),
                scene_index: scene.index,
                scene_heading: scene.heading.clone(),
                participants,
                dialogue_line_count,
                source_line_start: unit_lines
                    .iter()
                    .map(|l| l.source_line_start)
                    .min()
                    .unwrap_or(scene.start_line),
                source_line_end: unit_lines
                    .iter()
                    .map(|l| l.source_line_end)
                    .max()
                    .unwrap_or(scene.end_line),
                lines: unit_lines,
            });
        }
        units
    }))
}

/// The ids given so far in one script.
#[derive(Default)]
struct UnitIds {
    taken: std::collections::HashSet<String>,
}

impl UnitIds {
    const OPENING_LINES: usize = 2;

    fn assign(&mut self, lines: &[ScriptLine]) -> String {
        let mut hasher = blake3::Hasher::new();
        for dialogue in lines
            .iter()
            .filter_map(ScriptLine::dialogue)
            .take(Self::OPENING_LINES)
        {
            hasher.update(dialogue.speakers.join(" & ").as_bytes());
            hasher.update(b": ");
            hasher.update(dialogue.text.as_bytes());
            hasher.update(b"\n");
        }
        let hex = hasher.finalize().to_hex();
        let short = format!("sc{}", &hex[..4]);
        let long = format!("sc{}", &hex[..8]);
        let id = if !self.taken.contains(&short) {
            short
        } else if !self.taken.contains(&long) {
            long
        } else {
            (2..)
                .map(|n| format!("{long}-{n}"))
                .find(|candidate| !self.taken.contains(candidate))
                .expect("an unused suffix exists")
        };
        self.taken.insert(id.clone());
        id
    }
}

fn individual_speakers(line: &ScriptLine) -> &[String] {
    match line.dialogue() {
        Some(dialogue) if !dialogue.group => &dialogue.speakers,
        _ => &[],
    }
}

fn participants_of(lines: &[ScriptLine]) -> Vec<String> {
    let mut participants: Vec<String> = Vec::new();
    for speaker in lines.iter().flat_map(individual_speakers) {
        if !participants.contains(speaker) {
            participants.push(speaker.clone());
        }
    }
    participants
}

/// Index ranges into `lines`, one per unit, covering every line.
fn split_scene(lines: &[&ScriptLine], params: &ScenarioParams) -> Vec<std::ops::Range<usize>> {
    if lines.is_empty() {
        return Vec::new();
    }
    if !params.split_on_turnover {
        return std::iter::once(0..lines.len()).collect();
    }
    let turns: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].dialogue().is_some())
        .collect();
    let mut turns_by_speaker: HashMap<&str, Vec<usize>> = HashMap::new();
    for (turn, &line) in turns.iter().enumerate() {
        for speaker in individual_speakers(lines[line]) {
            turns_by_speaker
                .entry(speaker.as_str())
                .or_default()
                .push(turn);
        }
    }
    let has_left = |speaker: &str, last_turn: usize| {
        let first_turn_proving_absence = last_turn + params.max_silence + 1;
        if first_turn_proving_absence >= turns.len() {
            return false;
        }
        let own = &turns_by_speaker[speaker];
        let next = own.iter().find(|&&t| t > last_turn);
        next.is_none_or(|&next| next > first_turn_proving_absence)
    };

    let mut ranges = Vec::new();
    let mut unit_start = 0;
    let mut participants: Vec<&str> = Vec::new();
    let mut last_turn_of: HashMap<&str, usize> = HashMap::new();
    for (turn, &line) in turns.iter().enumerate() {
        let speakers = individual_speakers(lines[line]);
        let arrives = speakers.iter().any(|s| !participants.contains(&s.as_str()));
        if arrives && turn > 0 {
            let departed: Vec<&str> = participants
                .iter()
                .copied()
                .filter(|p| has_left(p, last_turn_of[p]))
                .collect();
            if !departed.is_empty() {
                let boundary = turns[turn - 1] + 1;
                ranges.push(unit_start..boundary);
                unit_start = boundary;
                participants.retain(|p| !departed.contains(p));
            }
        }
        for speaker in speakers {
            if !participants.contains(&speaker.as_str()) {
                participants.push(speaker);
            }
            last_turn_of.insert(speaker, turn);
        }
    }
    ranges.push(unit_start..lines.len());
    ranges
}

#[cfg(test)]
mod tests {
    use super::super::script::{ParseOptions, ScriptFormat, parse_script};
    use super::*;

    const DESIGNED_SCENE: &str = include_str!("../../../tests/fixtures/text/scenario_scene.txt");

    fn parse(text: &str) -> Script {
        let options = ParseOptions {
            format: Some(ScriptFormat::FriendsTranscript),
            ..Default::default()
        };
        parse_script(text, "scene.txt", &options).unwrap()
    }

    fn small(min_lines: usize, max_silence: usize) -> ScenarioParams {
        ScenarioParams {
            min_lines,
            max_silence,
            ..Default::default()
        }
    }

    fn summary(units: &[ScenarioUnit]) -> Vec<(usize, Vec<String>, usize, usize, usize)> {
        units
            .iter()
            .map(|u| {
                (
                    u.scene_index,
                    u.participants.clone(),
                    u.dialogue_line_count,
                    u.source_line_start,
                    u.source_line_end,
                )
            })
            .collect()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn designed_scene_splits_when_one_leaves_and_another_arrives() {
        let script = parse(DESIGNED_SCENE);
        let units = build_scenarios(&script, &ScenarioParams::default()).unwrap();
        assert_eq!(
            summary(&units),
            vec![
                (0, names(&["Nadia", "Felix"]), 13, 3, 15),
                (0, names(&["Gus", "Nadia"]), 14, 16, 31),
            ]
        );
        assert_eq!(units[1].lines[0].source_line_start, 16);
        assert!(units[1].lines[0].dialogue().is_none());
        assert_eq!(
            units[0].scene_heading.as_deref(),
            Some("The bakery, Nadia and Felix are icing cakes.")
        );
    }

    #[test]
    fn designed_scene_second_scene_is_too_short_and_crowd_lines_do_not_count() {
        let script = parse(DESIGNED_SCENE);
        let units = build_scenarios(&script, &small(3, 12)).unwrap();
        let last = units.last().unwrap();
        assert_eq!(last.scene_index, 1);
        assert_eq!(last.participants, names(&["Gus", "Nadia"]));
        assert_eq!(last.dialogue_line_count, 5);
        let default_units = build_scenarios(&script, &ScenarioParams::default()).unwrap();
        assert!(default_units.iter().all(|u| u.scene_index == 0));
    }

    #[test]
    fn no_split_when_disabled() {
        let script = parse(DESIGNED_SCENE);
        let params = ScenarioParams {
            split_on_turnover: false,
            ..Default::default()
        };
        let units = build_scenarios(&script, &params).unwrap();
        assert_eq!(
            summary(&units),
            vec![(0, names(&["Nadia", "Felix", "Gus"]), 27, 3, 31)]
        );
    }

    #[test]
    fn an_arrival_alone_does_not_split() {
        let text = "[Scene: Park]\nA: 1\nB: 2\nA: 3\nB: 4\nC: 5\nA: 6\nB: 7\nC: 8";
        let units = build_scenarios(&parse(text), &small(1, 2)).unwrap();
        assert_eq!(summary(&units), vec![(0, names(&["A", "B", "C"]), 8, 2, 9)]);
    }

    #[test]
    fn a_departure_alone_does_not_split() {
        let text = "[Scene: Park]\nA: 1\nB: 2\nC: 3\nA: 4\nB: 5\nA: 6\nB: 7\nA: 8\nB: 9";
        let units = build_scenarios(&parse(text), &small(1, 2)).unwrap();
        assert_eq!(units.len(), 1);
    }

    #[test]
    fn a_short_scene_is_not_split_by_its_ending() {
        let text = "[Scene: Park]\nA: 1\nA: 2\nA: 3\nB: 4";
        let units = build_scenarios(&parse(text), &small(1, 1)).unwrap();
        assert_eq!(summary(&units), vec![(0, names(&["A", "B"]), 4, 2, 5)]);
    }

    #[test]
    fn a_returning_speaker_rejoins_without_split() {
        let text = "[Scene: Park]\nA: 1\nB: 2\nA: 3\nA: 4\nA: 5\nB: 6";
        let units = build_scenarios(&parse(text), &small(1, 1)).unwrap();
        assert_eq!(units.len(), 1);
    }

    #[test]
    fn turnover_with_short_silence_limit() {
        let text = "[Scene: Park]\nA: 1\nB: 2\nA: 3\nB: 4\nA: 5\nA: 6\nC: 7\nA: 8\nC: 9";
        let units = build_scenarios(&parse(text), &small(1, 2)).unwrap();
        assert_eq!(
            summary(&units),
            vec![
                (0, names(&["A", "B"]), 6, 2, 7),
                (0, names(&["C", "A"]), 3, 8, 10)
            ]
        );
    }

    #[test]
    fn units_need_two_individual_speakers() {
        let text = "[Scene: Park]\nA: 1\nAll: 2\nA: 3\nEveryone: 4";
        assert!(
            build_scenarios(&parse(text), &small(1, 12))
                .unwrap()
                .is_empty()
        );
        let params = ScenarioParams {
            min_speakers: 1,
            ..small(4, 12)
        };
        let units = build_scenarios(&parse(text), &params).unwrap();
        assert_eq!(units[0].participants, names(&["A"]));
        assert_eq!(units[0].dialogue_line_count, 4);
    }

    #[test]
    fn uncut_lines_can_be_excluded() {
        let text = "[Scene: Park]\nA: 1\nB: 2\n{Uncut} A: 3\n{Uncut} B: 4";
        let params = ScenarioParams {
            include_uncut: false,
            ..small(1, 12)
        };
        let units = build_scenarios(&parse(text), &params).unwrap();
        assert_eq!(units[0].dialogue_line_count, 2);
        let units = build_scenarios(&parse(text), &small(1, 12)).unwrap();
        assert_eq!(units[0].dialogue_line_count, 4);
    }

    #[test]
    fn params_defaults_validation_and_unknown_fields() {
        let params: ScenarioParams = serde_json::from_str(r#"{"min_lines": 4}"#).unwrap();
        assert_eq!(
            params,
            ScenarioParams {
                min_lines: 4,
                ..Default::default()
            }
        );
        let err = serde_json::from_str::<ScenarioParams>(r#"{"min_line": 4}"#).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `min_line`"),
            "{err}"
        );
        let zero = ScenarioParams {
            max_silence: 0,
            ..Default::default()
        };
        assert_eq!(
            build_scenarios(&parse("A: 1\nB: 2"), &zero).unwrap_err(),
            ScenarioError::ZeroMaxSilence
        );
    }

    #[test]
    fn ids_survive_inserting_a_scene_and_differ_between_units() {
        let text = "[Scene: One]\nA: 1\nB: 2\n\n[Scene: Two]\nA: 1\n\n[Scene: Three]\nC: 1\nD: 2";
        let units = build_scenarios(&parse(text), &small(2, 12)).unwrap();
        let ids: Vec<&str> = units.iter().map(|u| u.id.as_str()).collect();
        assert_eq!(
            units.iter().map(|u| u.scene_index).collect::<Vec<_>>(),
            [0, 2]
        );
        assert_ne!(ids[0], ids[1]);
        assert!(
            ids.iter().all(|id| id.len() == 6 && id.starts_with("sc")),
            "{ids:?}"
        );

        let inserted = text.replace("[Scene: Two]", "[Scene: New]\nE: hi\nF: ho\n\n[Scene: Two]");
        let after = build_scenarios(&parse(&inserted), &small(2, 12)).unwrap();
        let after_ids: Vec<&str> = after.iter().map(|u| u.id.as_str()).collect();
        assert_eq!(after_ids.len(), 3);
        assert_eq!((after_ids[0], after_ids[2]), (ids[0], ids[1]));
        assert!(!ids.contains(&after_ids[1]));
    }

    #[test]
    fn units_that_open_alike_get_distinct_ids_in_script_order() {
        let text = "[Scene: One]\nA: hi\nB: ho\n\n[Scene: Two]\nA: hi\nB: ho\n\n[Scene: Three]\nA: \
                    hi\nB: ho";
        let units = build_scenarios(&parse(text), &small(2, 12)).unwrap();
        let ids: Vec<&str> = units.iter().map(|u| u.id.as_str()).collect();
        assert_eq!(ids.len(), 3);
        assert_eq!(ids[1], format!("{}{}", ids[0], &ids[1][6..]));
        assert_eq!(ids[1].len(), 10);
        assert_eq!(ids[2], format!("{}-2", ids[1]));
    }
}
