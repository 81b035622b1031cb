//! A subtitle file as people download it, made from a transcript, with its alignment truth.
//!
//! [`crate::broadcast`] derives the dialogue cues a broadcaster would write; a file from a
//! subtitle site carries more, and this adds it the way such files do:
//!
//! - a credit cue at the start ("Subtitles by ...") and one at the end ("Synced and corrected
//!   by ...");
//! - a "Previously on" recap: its opener, then clips of dialogue from earlier episodes;
//! - the theme song's lyrics (`♪ ... ♪`) and a title card before the first scene, and a song at
//!   some scene changes;
//! - hearing-impaired markup: `NAME:` speaker labels and `[sound]` descriptions inside cues,
//!   besides the sound-only cues the broadcast already has;
//! - the site's advert as the file's last cue, timed at the very start.
//!
//! The truth says, by cue number (1-based position in the file), which cues carry each line,
//! where each scenario is, and which cues are not dialogue ([`AlignTruth`]). All of it is written
//! for the project, about its own fixture show; nothing is taken from a real file.

use std::path::PathBuf;

use viss_text::align::{AlignLine, script_dialogue, unit_line_ranges};
use viss_text::scenario::{ScenarioParams, build_scenarios};
use viss_text::script::{ParseOptions, ScriptFormat, parse_script};
use viss_text::subtitles::format_timestamp;
use viss_text::subtitles::non_dialogue::NonDialogue;

use crate::bench::align_truth::{AlignTruth, LineTruth, NonDialogueTruth, ScenarioTruth};
use crate::broadcast::{BroadcastParams, derive_broadcast_subtitles};

/// Clips of the fixture show's earlier episodes, for the recap.
const RECAP_CLIPS: &[&str] = &[
    "You said the bees would be gone by June.",
    "I never signed anything, Odile.",
    "If they find out, we lose the lot.",
    "Kemi, you cannot keep covering for him.",
    "It was one hive. One!",
    "Then who took the key?",
    "I'm not saying sorry to a man in a veil.",
    "We vote on Thursday. Everybody comes.",
    "That letter was never posted.",
    "You knew about the flats all along.",
];

const THEME: &[&str] = &[
    "♪ Dig a little deeper, plant a little seed ♪",
    "♪ Everything we grow is everything we need ♪",
];

const SCENE_SONGS: &[&str] = &[
    "♪ Rain on the roof and mud on my boots ♪",
    "♪ Oh, the marrows are rising ♪",
];

const INLINE_SOUNDS: &[&str] = &["[sighs]", "[chuckles]", "(CLEARS THROAT)", "[scoffs]"];

#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    #[error("the transcript does not parse: {0}")]
    Script(String),
    #[error("deriving the broadcast subtitles: {0}")]
    Broadcast(String),
}

/// One cue of the file being written.
struct Entry {
    start_ms: u64,
    end_ms: u64,
    text: String,
    /// Dialogue line positions it carries.
    carries: Vec<usize>,
    kind: Option<NonDialogue>,
}

/// The SRT text of a downloaded-looking file for `transcript` and its truth (with `script` and
/// `subtitles` as the truth file should name them).
pub fn downloaded_subtitles(
    transcript: &str,
    script: PathBuf,
    subtitles: PathBuf,
    show_title: &str,
    seed: u64,
) -> Result<(String, AlignTruth), DownloadError> {
    let options = ParseOptions {
        format: Some(ScriptFormat::FriendsTranscript),
        ..ParseOptions::default()
    };
    let parsed = parse_script(transcript, &script.display().to_string(), &options)
        .map_err(|e| DownloadError::Script(e.to_string()))?;
    let units = build_scenarios(&parsed, &ScenarioParams::default())
        .map_err(|e| DownloadError::Script(e.to_string()))?;
    let dialogue = script_dialogue(&parsed);
    let (cues, broadcast_truth) = derive_broadcast_subtitles(
        &dialogue.lines,
        &dialogue.scene_of_line,
        seed,
        &BroadcastParams::default(),
    )
    .map_err(|e| DownloadError::Broadcast(e.to_string()))?;
    let mut rng = fastrand::Rng::with_seed(seed);

    let mut entries: Vec<Entry> = Vec::new();
    let mut clock = 1_000;
    let push = |entries: &mut Vec<Entry>, clock: &mut u64, text: &str, kind, length| {
        entries.push(Entry {
            start_ms: *clock,
            end_ms: *clock + length,
            text: text.to_string(),
            carries: Vec::new(),
            kind,
        });
        *clock += length + 300;
    };
    push(
        &mut entries,
        &mut clock,
        "Subtitles by the viss fixture writers",
        Some(NonDialogue::Credit),
        2_000,
    );
    clock += 1_000;
    let recap = format!("Previously on {show_title}...");
    push(
        &mut entries,
        &mut clock,
        &recap,
        Some(NonDialogue::Recap),
        1_800,
    );
    for clip in RECAP_CLIPS.iter().take(6 + rng.usize(0..=4)) {
        push(
            &mut entries,
            &mut clock,
            clip,
            Some(NonDialogue::Recap),
            2_200,
        );
    }
    clock += 2_500;
    for line in THEME {
        push(
            &mut entries,
            &mut clock,
            line,
            Some(NonDialogue::Lyrics),
            3_000,
        );
    }
    push(
        &mut entries,
        &mut clock,
        &show_title.to_uppercase(),
        Some(NonDialogue::TitleCard),
        2_500,
    );
    clock += 2_000;

    // The broadcast's cues, shifted after the opening, with songs at two scene changes.
    let shift = clock.saturating_sub(cues.first().map_or(0, |c| c.start_ms));
    let scene_of_cue = |position: usize| {
        broadcast_truth
            .line_cues
            .iter()
            .position(|carried| carried.contains(&position))
            .map(|line| dialogue.scene_of_line[line])
    };
    let mut song_scenes: Vec<usize> = dialogue.scene_of_line.clone();
    song_scenes.dedup();
    let songs_at: Vec<usize> = song_scenes
        .iter()
        .skip(1)
        .step_by(3)
        .copied()
        .take(2)
        .collect();
    let mut extra_shift = 0;
    let mut previous_scene = None;
    let mut songs = SCENE_SONGS.iter();
    for (position, cue) in cues.iter().enumerate() {
        let scene = scene_of_cue(position);
        if let Some(scene) = scene {
            if previous_scene.is_some_and(|p| p != scene)
                && songs_at.contains(&scene)
                && let Some(song) = songs.next()
            {
                let start_ms = cue.start_ms + shift + extra_shift;
                entries.push(Entry {
                    start_ms,
                    end_ms: start_ms + 3_000,
                    text: song.to_string(),
                    carries: Vec::new(),
                    kind: Some(NonDialogue::Lyrics),
                });
                extra_shift += 4_000;
            }
            previous_scene = Some(scene);
        }
        let carries: Vec<usize> = broadcast_truth
            .line_cues
            .iter()
            .enumerate()
            .filter(|(_, carried)| carried.contains(&position))
            .map(|(line, _)| line)
            .collect();
        let kind = if !carries.is_empty() {
            None
        } else if cue.text.contains('♪') {
            Some(NonDialogue::Lyrics)
        } else if cue.text.contains('[') {
            Some(NonDialogue::SoundDescription)
        } else {
            // Subtitle-only dialogue ("Hey."): no line carries it, but it is dialogue.
            None
        };
        let text = if carries.is_empty() {
            cue.text.clone()
        } else {
            hearing_impaired(&cue.text, &carries, &dialogue.lines, &mut rng)
        };
        entries.push(Entry {
            start_ms: cue.start_ms + shift + extra_shift,
            end_ms: cue.end_ms + shift + extra_shift,
            text,
            carries,
            kind,
        });
    }
    let last_end = entries.iter().map(|e| e.end_ms).max().unwrap_or(0);
    let mut closing = last_end + 3_000;
    push(
        &mut entries,
        &mut closing,
        "Synced and corrected by a viss fixture",
        Some(NonDialogue::Credit),
        2_500,
    );
    entries.sort_by_key(|e| e.start_ms);
    // The site's advert goes last in the file, timed at the very start.
    entries.push(Entry {
        start_ms: 300,
        end_ms: 900,
        text: "Support us and become VIP member\nto remove all ads from www.example.org"
            .to_string(),
        carries: Vec::new(),
        kind: Some(NonDialogue::Advert),
    });

    let mut srt = String::new();
    for (position, entry) in entries.iter().enumerate() {
        srt.push_str(&format!(
            "{}\n{} --> {}\n{}\n\n",
            position + 1,
            format_timestamp(entry.start_ms),
            format_timestamp(entry.end_ms),
            entry.text
        ));
    }

    let numbers_of_line = |line: usize| -> Vec<usize> {
        entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.carries.contains(&line))
            .map(|(position, _)| position + 1)
            .collect()
    };
    let lines: Vec<LineTruth> = (0..dialogue.lines.len())
        .map(|line| LineTruth {
            script_line: dialogue.source_line_of_line[line],
            cues: numbers_of_line(line),
        })
        .collect();
    let mut scenarios = Vec::new();
    for (unit, range) in units.iter().zip(unit_line_ranges(&dialogue, &units)) {
        let Some((first, last)) = range else {
            continue;
        };
        let carrying: Vec<&Entry> = entries
            .iter()
            .filter(|e| e.carries.iter().any(|l| (first..=last).contains(l)))
            .collect();
        let (Some(start), Some(end)) = (
            carrying.iter().map(|e| e.start_ms).min(),
            carrying.iter().map(|e| e.end_ms).max(),
        ) else {
            continue;
        };
        scenarios.push(ScenarioTruth {
            id: unit.id.clone(),
            start: format_timestamp(start),
            end: format_timestamp(end),
        });
    }
    let not_dialogue = entries
        .iter()
        .enumerate()
        .filter_map(|(position, e)| {
            Some(NonDialogueTruth {
                cue: position + 1,
                kind: e.kind?,
            })
        })
        .collect();
    let truth = AlignTruth {
        script,
        script_format: Some(ScriptFormat::FriendsTranscript),
        subtitles,
        title_cards: vec![show_title.to_string()],
        lines,
        scenarios,
        not_dialogue,
    };
    Ok((srt, truth))
}

/// A dialogue cue with the markup of hearing-impaired subtitles added now and then: the
/// speaker's `NAME:` label, or a sound description before the words.
fn hearing_impaired(
    text: &str,
    carries: &[usize],
    lines: &[AlignLine],
    rng: &mut fastrand::Rng,
) -> String {
    let two_speakers = text.starts_with("- ");
    let roll = rng.f64();
    if !two_speakers
        && carries.len() == 1
        && roll < 0.2
        && let Some(speaker) = &lines[carries[0]].speaker
    {
        return format!("{}: {text}", speaker.to_uppercase());
    }
    if roll > 0.95 {
        let sound = INLINE_SOUNDS[rng.usize(0..INLINE_SOUNDS.len())];
        return format!("{sound} {text}");
    }
    text.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in fixture `tests/fixtures/align/download/` is what this module writes for
    /// the test episode; `VISS_BLESS=1 cargo test -p viss-dev download` rewrites it.
    #[test]
    fn the_checked_in_download_fixture_is_what_the_generator_writes() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/align");
        let transcript = std::fs::read_to_string(root.join("episode.txt")).unwrap();
        let (srt, truth) = downloaded_subtitles(
            &transcript,
            PathBuf::from("../episode.txt"),
            PathBuf::from("episode.srt"),
            "Hollybush Lane",
            7,
        )
        .unwrap();
        let header = "# Alignment truth of episode.srt against ../episode.txt, written by \
                      crates/dev/src/download.rs\n# (the fixture show's own text; see its module \
                      docs). Cue numbers are positions in the file.\n";
        let truth_text = format!("{header}{}", toml::to_string(&truth).unwrap());
        let dir = root.join("download");
        if std::env::var_os("VISS_BLESS").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("episode.srt"), &srt).unwrap();
            std::fs::write(dir.join("truth.toml"), &truth_text).unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(dir.join("episode.srt")).unwrap(),
            srt
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("truth.toml")).unwrap(),
            truth_text
        );

        // What the fixture is for: every kind of cue a download carries besides dialogue.
        for kind in [
            NonDialogue::Credit,
            NonDialogue::Advert,
            NonDialogue::TitleCard,
            NonDialogue::Lyrics,
            NonDialogue::SoundDescription,
            NonDialogue::Recap,
        ] {
            assert!(
                truth.not_dialogue.iter().any(|n| n.kind == kind),
                "{kind:?}"
            );
        }
        assert!(srt.contains("ODILE: "), "speaker labels");
        assert!(
            srt.ends_with("www.example.org\n\n"),
            "the advert is the last cue"
        );
    }
}
