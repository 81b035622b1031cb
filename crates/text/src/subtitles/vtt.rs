//! WebVTT. The header block and `NOTE`, `STYLE` and `REGION` blocks are
//! skipped; cue settings after the end time are ignored; `<v Name>` voice
//! spans give speakers.

use super::super::markup::split_physical_lines;
use super::{RawCue, SubtitleError, parse_timing_line, split_tagged_line};
use viss_engine::panic_context::at_line;

const EXPECTED: &str = "[HH:]MM:SS.mmm";

pub(super) fn parse(text: &str, file: &str) -> Result<Vec<RawCue>, SubtitleError> {
    let lines = split_physical_lines(text);
    let mut cues = Vec::new();
    let mut i = 0;
    if lines.first().is_some_and(|l| l.starts_with("WEBVTT")) {
        while i < lines.len() && !lines[i].trim().is_empty() {
            i += 1;
        }
    }
    while i < lines.len() {
        if lines[i].trim().is_empty() {
            i += 1;
            continue;
        }
        let block_start = i;
        while i < lines.len() && !lines[i].trim().is_empty() {
            i += 1;
        }
        let block = &lines[block_start..i];
        if is_non_cue_block(block[0]) {
            continue;
        }
        let (identifier, timing_offset) = if block[0].contains("-->") {
            (None, 0)
        } else if block.len() > 1 && block[1].contains("-->") {
            (Some(block[0].trim().to_string()), 1)
        } else {
            continue;
        };
        let line_number = block_start + timing_offset + 1;
        at_line(line_number);
        let (start_ms, end_ms, _settings) =
            parse_timing_line(block[timing_offset].trim(), file, line_number, EXPECTED)?;
        cues.push(RawCue {
            source_id: identifier,
            start_ms,
            end_ms,
            source_line: line_number,
            lines: block[timing_offset + 1..]
                .iter()
                .map(|l| split_tagged_line(l))
                .collect(),
            name_field: None,
        });
    }
    Ok(cues)
}

fn is_non_cue_block(first_line: &str) -> bool {
    ["NOTE", "STYLE", "REGION"].iter().any(|keyword| {
        first_line
            .strip_prefix(keyword)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    })
}

#[cfg(test)]
mod tests {
    use super::super::{SubtitleError, SubtitleFormat, parse_subtitles};

    const SAMPLE: &str = include_str!("../../../../tests/fixtures/text/sample.vtt");

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fixture_cues() {
        let subs = parse_subtitles(SAMPLE, "sample.vtt", None).unwrap();
        assert_eq!(subs.format, SubtitleFormat::WebVtt);
        let timing: Vec<(Option<&str>, u64, u64, usize)> = subs
            .cues
            .iter()
            .map(|c| (c.source_id.as_deref(), c.start_ms, c.end_ms, c.source_line))
            .collect();
        assert_eq!(
            timing,
            vec![
                (Some("intro"), 1_000, 3_500, 15),
                (None, 4_000, 6_000, 18),
                (Some("3"), 6_500, 8_000, 23),
                (None, 3_600_000, 3_602_000, 27),
            ]
        );
        let cues = &subs.cues;
        assert_eq!(cues[0].text, "Pass the green bag.");
        assert_eq!(cues[0].speakers, vec![Some("Nadia".to_string())]);
        assert_eq!(cues[1].lines, strings(&["Which one?", "The green one!"]));
        assert_eq!(cues[1].turns, strings(&["Which one?", "The green one!"]));
        assert_eq!(
            cues[1].speakers,
            vec![Some("Felix".to_string()), Some("Nadia".to_string())]
        );
        assert_eq!(cues[2].turns, strings(&["Is it a tree?", "It's a fern."]));
        assert_eq!(cues[3].text, "Gus hums <softly>");
    }

    #[test]
    fn comma_separator_and_missing_header_are_tolerated() {
        let subs = parse_subtitles(
            "00:01,000 --> 00:02,000\nHi",
            "x.vtt",
            Some(SubtitleFormat::WebVtt),
        )
        .unwrap();
        assert_eq!((subs.cues[0].start_ms, subs.cues[0].end_ms), (1_000, 2_000));
    }

    #[test]
    fn malformed_vtt_timestamp_names_expected_form() {
        let err =
            parse_subtitles("WEBVTT\n\n00:01.000 --> 00:0x.000\nHi\n", "e.vtt", None).unwrap_err();
        assert_eq!(
            err,
            SubtitleError::MalformedTimestamp {
                file: "e.vtt".into(),
                line: 3,
                text: "00:0x.000".into(),
                expected: "[HH:]MM:SS.mmm"
            }
        );
    }

    #[test]
    fn header_only_file_has_no_cues() {
        let err = parse_subtitles("WEBVTT\n\nNOTE nothing here\n", "e.vtt", None).unwrap_err();
        assert_eq!(
            err,
            SubtitleError::NoCues {
                file: "e.vtt".into()
            }
        );
    }
}
