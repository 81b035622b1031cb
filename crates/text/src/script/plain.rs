//! `NAME: line` scripts without transcript scene headers.
//!
//! Dialogue, continuation lines and stage directions follow the transcript
//! rules (see `friends`). Scenes start at explicit separators — a line made
//! of three or more `-`, `=`, `*`, `_`, `~` or `#` characters, optionally
//! around a title (`--- Scene: The roof ---`), or a screenplay heading
//! (`INT.`/`EXT.`) — and, depending on [`PlainSceneBreaks`], at blank lines.

use super::super::markup::SourceLine;
use super::fountain::{is_scene_heading, split_heading};
use super::friends::TranscriptParser;
use super::speakers::split_speaker_prefix;
use super::{PlainSceneBreaks, ScriptBuilder};
use viss_engine::panic_context::at_line;

const SEPARATOR_CHARS: &[char] = &['-', '=', '*', '_', '~', '#'];

pub(super) fn parse(lines: &[SourceLine<'_>], breaks: PlainSceneBreaks) -> ScriptBuilder {
    let has_separators = lines
        .iter()
        .any(|l| separator_title(l.text.trim()).is_some() || is_scene_heading(l.text.trim()));
    let blank_run_that_breaks = match breaks {
        PlainSceneBreaks::SeparatorsOnly => None,
        PlainSceneBreaks::BlankLines => Some(1),
        PlainSceneBreaks::Auto if has_separators => None,
        PlainSceneBreaks::Auto if has_adjacent_dialogue(lines) => Some(1),
        PlainSceneBreaks::Auto => Some(2),
    };
    let mut parser = TranscriptParser::default();
    let mut blank_run = 0;
    for line in lines {
        at_line(line.start_line);
        let text = line.text.trim();
        if text.is_empty() {
            blank_run += 1;
            parser.feed(line);
            continue;
        }
        let after_blank_run = std::mem::take(&mut blank_run);
        if let Some(title) = separator_title(text) {
            parser.start_scene(title, None, None, line.start_line);
        } else if is_scene_heading(text) && !text.starts_with('.') {
            let (heading, location, description) = split_heading(text, true);
            parser.start_scene(Some(heading), location, description, line.start_line);
        } else {
            if blank_run_that_breaks.is_some_and(|run| after_blank_run >= run) {
                parser.close_scene();
            }
            parser.feed(line);
        }
    }
    parser.finish()
}

/// `Some(None)` for a bare separator, `Some(Some(title))` for a titled one.
fn separator_title(text: &str) -> Option<Option<String>> {
    let leading = text
        .chars()
        .take_while(|c| SEPARATOR_CHARS.contains(c))
        .count();
    if leading < 3 {
        return None;
    }
    let title = text.trim_matches(|c: char| SEPARATOR_CHARS.contains(&c) || c.is_whitespace());
    Some((!title.is_empty()).then(|| title.to_string()))
}

fn has_adjacent_dialogue(lines: &[SourceLine<'_>]) -> bool {
    lines.windows(2).any(|pair| {
        split_speaker_prefix(pair[0].text.trim()).is_some()
            && split_speaker_prefix(pair[1].text.trim()).is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::super::{LineKind, ParseOptions, Script, ScriptFormat, parse_script};
    use super::*;

    const PLAIN: &str = include_str!("../../../../tests/fixtures/text/plain_script.txt");

    fn parse_with(text: &str, breaks: PlainSceneBreaks) -> Script {
        let options = ParseOptions {
            format: Some(ScriptFormat::Plain),
            plain_scene_breaks: breaks,
            ..Default::default()
        };
        parse_script(text, "plain.txt", &options).unwrap()
    }

    fn scene_speakers(script: &Script) -> Vec<Vec<String>> {
        script
            .scenes
            .iter()
            .map(|s| {
                s.lines
                    .iter()
                    .filter_map(|l| l.dialogue())
                    .map(|d| d.speakers.join("+"))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn fixture_scenes_follow_explicit_separators() {
        let script = parse_with(PLAIN, PlainSceneBreaks::Auto);
        assert_eq!(
            scene_speakers(&script),
            vec![
                vec!["Alice", "Boris", "Alice", "Boris", "Alice", "Cleo"],
                vec!["Cleo", "Boris"],
                vec!["Alice"],
            ]
        );
        let spans: Vec<(Option<&str>, Option<&str>, usize, usize)> = script
            .scenes
            .iter()
            .map(|s| {
                (
                    s.heading.as_deref(),
                    s.location.as_deref(),
                    s.start_line,
                    s.end_line,
                )
            })
            .collect();
        assert_eq!(
            spans,
            vec![
                (None, None, 1, 9),
                (Some("Scene: The roof"), None, 11, 14),
                (Some("INT. STAIRWELL - NIGHT"), Some("STAIRWELL"), 16, 17),
            ]
        );
    }

    #[test]
    fn fixture_continuation_and_directions() {
        let script = parse_with(PLAIN, PlainSceneBreaks::Auto);
        let boris = &script.scenes[0].lines[3];
        let dialogue = boris.dialogue().unwrap();
        assert_eq!(dialogue.text, "This one does. It told me quite clearly.");
        assert_eq!(dialogue.directions, vec!["watering"]);
        assert_eq!(dialogue.raw_speaker, "BORIS");
        assert_eq!((boris.source_line_start, boris.source_line_end), (4, 5));
        assert_eq!(
            script.scenes[0].lines[4].kind,
            LineKind::Action {
                text: "ALICE sighs.".into()
            }
        );
    }

    #[test]
    fn single_spaced_script_breaks_at_blank_lines() {
        let text = "A: one\nB: two\n\nA: three\nB: four";
        let script = parse_with(text, PlainSceneBreaks::Auto);
        assert_eq!(
            scene_speakers(&script),
            vec![vec!["A", "B"], vec!["A", "B"]]
        );
        assert_eq!(
            (
                script.scenes[1].start_line,
                script.scenes[1].heading.clone()
            ),
            (4, None)
        );
    }

    #[test]
    fn double_spaced_script_needs_two_blank_lines() {
        let text = "A: one\n\nB: two\n\n\nA: three\n\nB: four";
        let script = parse_with(text, PlainSceneBreaks::Auto);
        assert_eq!(
            scene_speakers(&script),
            vec![vec!["A", "B"], vec!["A", "B"]]
        );
        let script = parse_with(text, PlainSceneBreaks::SeparatorsOnly);
        assert_eq!(scene_speakers(&script), vec![vec!["A", "B", "A", "B"]]);
        let script = parse_with(text, PlainSceneBreaks::BlankLines);
        assert_eq!(script.scenes.len(), 4);
    }

    #[test]
    fn separators() {
        assert_eq!(separator_title("---"), Some(None));
        assert_eq!(
            separator_title("=== Scene 2 ==="),
            Some(Some("Scene 2".into()))
        );
        assert_eq!(separator_title("-- not enough"), None);
        assert_eq!(separator_title("***"), Some(None));
    }
}
