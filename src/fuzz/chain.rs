//! What consumes the parsers' output, fed with whatever they accept from mutated files:
//! scenario units (`text::scenario`), the script-to-subtitle alignment (`text::align`) and the
//! context the annotation steps are prompted with.

use proptest::prelude::*;

use super::strategies::near_valid;
use super::{Outcomes, runner};
use crate::stages::parse_script::ScenarioRecord;
use crate::text::align::{
    AlignCue, AlignParams, align_lines, scenario_spans, script_dialogue, unit_line_ranges,
};
use crate::text::scenario::{ScenarioParams, build_scenarios};
use crate::text::script::{ParseOptions, parse_script};
use crate::text::subtitles::non_dialogue::{ScreenOptions, screen_cues};
use crate::text::subtitles::parse_subtitles;

const SCRIPTS: &[&str] = &[
    include_str!("../../tests/fixtures/text/friends_episode.txt"),
    include_str!("../../tests/fixtures/text/screenplay.fountain"),
    include_str!("../../tests/fixtures/text/plain_script.txt"),
    include_str!("../../tests/fixtures/text/scenario_scene.txt"),
    crate::demo::plan::SCRIPT,
];

const SUBTITLES: &[&str] = &[
    include_str!("../../tests/fixtures/text/sample.srt"),
    include_str!("../../tests/fixtures/text/sample.vtt"),
    include_str!("../../tests/fixtures/text/sample.ass"),
];

fn scenario_params() -> impl Strategy<Value = ScenarioParams> {
    (
        0..12usize,
        0..5usize,
        0..8usize,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(min_lines, min_speakers, max_silence, split_on_turnover, include_uncut)| {
                ScenarioParams {
                    min_lines,
                    min_speakers,
                    max_silence,
                    split_on_turnover,
                    include_uncut,
                }
            },
        )
}

/// A script and subtitles that parse, however mutated, go through scenario cutting,
/// alignment, span timing and the annotation context without a panic; the parsers' output
/// always meets the aligner's input contract (sorted cues, ends after starts).
#[test]
fn parsed_files_go_through_scenarios_alignment_and_contexts() {
    let outcomes = Outcomes::default();
    let inputs = (
        near_valid(SCRIPTS, 6),
        near_valid(SUBTITLES, 6),
        scenario_params(),
    );
    runner()
        .run(&inputs, |(script, subtitles, params)| {
            let Ok(script) = parse_script(&script, "fuzz.txt", &ParseOptions::default()) else {
                outcomes.add("script refused");
                return Ok(());
            };
            let Ok(units) = build_scenarios(&script, &params) else {
                outcomes.add("params refused");
                return Ok(());
            };
            outcomes.add(if units.is_empty() {
                "no units"
            } else {
                "units"
            });
            for unit in &units {
                prop_assert!(unit.dialogue_line_count >= params.min_lines);
                prop_assert!(unit.source_line_start <= unit.source_line_end);
                let record = ScenarioRecord {
                    id: format!("show/e01/{}", unit.id),
                    episode: "show/e01".into(),
                    show: "show".into(),
                    script_file: "e01.txt".into(),
                    unit: unit.clone(),
                };
                let context = record.context();
                let _ = (context.absent_cast_names(), serde_json::to_string(&context));
            }
            let Ok(subtitles) = parse_subtitles(&subtitles, "fuzz.srt", None) else {
                outcomes.add("subtitles refused");
                return Ok(());
            };
            let dialogue = script_dialogue(&script);
            let screened = screen_cues(subtitles.cues, &ScreenOptions::default());
            if screened.dialogue.is_empty() {
                outcomes.add("no dialogue cues");
                return Ok(());
            }
            let cues: Vec<AlignCue> = screened.dialogue.iter().map(AlignCue::from).collect();
            let align = AlignParams::default();
            let alignment = align_lines(&dialogue.lines, &cues, None, &align).unwrap();
            outcomes.add("aligned");
            for range in unit_line_ranges(&dialogue, &units).into_iter().flatten() {
                for span in scenario_spans(&alignment, &cues, &[range], &align) {
                    outcomes.add("span");
                    if let (Some(start), Some(end)) = (span.start_ms, span.end_ms) {
                        prop_assert!(start <= end);
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    outcomes.check("chain", &["units", "aligned", "span"]);
}
