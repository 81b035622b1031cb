//! SubRip (`.srt`). Tolerates a BOM, CRLF, missing or out-of-sequence cue
//! numbers, `.` instead of `,` before the milliseconds, coordinates after the
//! end time, and a missing blank line between cues or at the end.

use super::super::markup::split_physical_lines;
use super::{RawCue, SubtitleError, parse_timing_line, split_tagged_line};
use viss_engine::panic_context::at_line;

const EXPECTED: &str = "HH:MM:SS,mmm";

pub(super) fn parse(text: &str, file: &str) -> Result<Vec<RawCue>, SubtitleError> {
    let lines = split_physical_lines(text);
    let is_timing = |i: usize| lines.get(i).is_some_and(|l| l.contains("-->"));
    let is_cue_number = |i: usize| {
        let t = lines[i].trim();
        !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) && is_timing(i + 1)
    };
    let mut cues: Vec<RawCue> = Vec::new();
    let mut pending_id: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        at_line(i + 1);
        let line = lines[i].trim();
        if line.is_empty() {
            i += 1;
        } else if is_cue_number(i) {
            pending_id = Some(line.to_string());
            i += 1;
        } else if is_timing(i) {
            let (start_ms, end_ms, _) = parse_timing_line(line, file, i + 1, EXPECTED)?;
            let mut text_lines = Vec::new();
            let mut j = i + 1;
            while j < lines.len()
                && !lines[j].trim().is_empty()
                && !is_timing(j)
                && !is_cue_number(j)
            {
                at_line(j + 1);
                text_lines.push(split_tagged_line(lines[j]));
                j += 1;
            }
            cues.push(RawCue {
                source_id: pending_id.take(),
                start_ms,
                end_ms,
                source_line: i + 1,
                lines: text_lines,
                name_field: None,
            });
            i = j;
        } else {
            // Text after a blank line inside a cue: some tools write
            // paragraph breaks into cue text.
            if let Some(last) = cues.last_mut() {
                last.lines.push(split_tagged_line(lines[i]));
            }
            i += 1;
        }
    }
    Ok(cues)
}

#[cfg(test)]
mod tests {
    use super::super::{Cue, SubtitleError, SubtitleFormat, parse_subtitles};

    const SAMPLE: &str = include_str!("../../../../tests/fixtures/text/sample.srt");

    fn timing(cues: &[Cue]) -> Vec<(usize, Option<&str>, u64, u64, usize)> {
        cues.iter()
            .map(|c| {
                (
                    c.index,
                    c.source_id.as_deref(),
                    c.start_ms,
                    c.end_ms,
                    c.source_line,
                )
            })
            .collect()
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fixture_timings_ids_and_order() {
        let subs = parse_subtitles(SAMPLE, "sample.srt", None).unwrap();
        assert_eq!(subs.format, SubtitleFormat::Srt);
        assert_eq!(
            timing(&subs.cues),
            vec![
                (0, Some("1"), 1_000, 3_500, 2),
                (1, Some("2"), 4_000, 6_000, 6),
                (2, Some("5"), 6_500, 8_250, 10),
                (3, Some("6"), 7_000, 7_900, 18),
                (4, None, 9_000, 10_000, 14),
                (5, Some("7"), 11_000, 13_000, 22),
            ]
        );
    }

    #[test]
    fn fixture_text_turns_and_speakers() {
        let subs = parse_subtitles(SAMPLE, "sample.srt", None).unwrap();
        let cues = &subs.cues;
        assert_eq!(cues[0].text, "Previously, at the bakery...");
        assert_eq!(cues[1].text, "NADIA: Where is the van?");
        assert_eq!(cues[1].turns, strings(&["Where is the van?"]));
        assert_eq!(cues[1].speakers, vec![Some("Nadia".to_string())]);
        assert_eq!(
            cues[2].lines,
            strings(&["- It's outside.", "- Outside where?"])
        );
        assert_eq!(cues[2].text, "- It's outside. - Outside where?");
        assert_eq!(cues[2].turns, strings(&["It's outside.", "Outside where?"]));
        assert_eq!(cues[2].speakers, vec![None, None]);
        assert_eq!(cues[3].text, "(van horn honks)");
        assert_eq!(cues[4].turns, strings(&["Near the fern.", "The tree?"]));
        assert_eq!(
            cues[5].lines,
            strings(&["Fine & dandy, it's", "a fern-shaped tree."])
        );
        assert_eq!(
            cues[5].turns,
            strings(&["Fine & dandy, it's a fern-shaped tree."])
        );
    }

    #[test]
    fn bom_and_crlf_give_identical_cues() {
        let plain = parse_subtitles(SAMPLE, "a.srt", None).unwrap();
        let windows = format!("\u{feff}{}", SAMPLE.replace('\n', "\r\n"));
        assert_eq!(parse_subtitles(&windows, "a.srt", None).unwrap(), plain);
        let old_mac = SAMPLE.replace('\n', "\r");
        assert_eq!(parse_subtitles(&old_mac, "a.srt", None).unwrap(), plain);
    }

    #[test]
    fn cues_without_blank_lines_between_them() {
        let text = "1\n00:00:01,000 --> 00:00:02,000\nOne\n2\n00:00:02,000 --> \
                    00:00:03,000\nTwo\n00:00:03,000 --> 00:00:04,000\nThree";
        let subs = parse_subtitles(text, "x.srt", None).unwrap();
        let texts: Vec<(&str, Option<&str>)> = subs
            .cues
            .iter()
            .map(|c| (c.text.as_str(), c.source_id.as_deref()))
            .collect();
        assert_eq!(
            texts,
            vec![("One", Some("1")), ("Two", Some("2")), ("Three", None)]
        );
    }

    #[test]
    fn paragraph_break_inside_cue_text_stays_in_the_cue() {
        let text = "1\n00:00:01,000 --> 00:00:02,000\nOne\n\nstill one\n\n2\n00:00:03,000 --> \
                    00:00:04,000\nTwo\n";
        let subs = parse_subtitles(text, "x.srt", None).unwrap();
        assert_eq!(subs.cues[0].text, "One still one");
        assert_eq!(subs.cues.len(), 2);
    }

    #[test]
    fn malformed_timestamp_names_file_line_and_text() {
        let text =
            "1\n00:00:01,000 --> 00:00:02,000\nOne\n\n2\n00:01:02.5x0 --> 00:01:04,000\nTwo\n";
        let err = parse_subtitles(text, "subs/e01.srt", None).unwrap_err();
        assert_eq!(
            err,
            SubtitleError::MalformedTimestamp {
                file: "subs/e01.srt".into(),
                line: 6,
                text: "00:01:02.5x0".into(),
                expected: "HH:MM:SS,mmm"
            }
        );
        assert_eq!(
            err.to_string(),
            "subs/e01.srt:6: malformed timestamp \"00:01:02.5x0\"; expected HH:MM:SS,mmm"
        );
    }

    #[test]
    fn end_before_start_names_line() {
        let text = "1\n00:00:05,000 --> 00:00:04,000\nBackwards\n";
        let err = parse_subtitles(text, "e02.srt", None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "e02.srt:2: cue ends at 00:00:04,000 before it starts at 00:00:05,000; fix the timing \
             so the end is not earlier than the start"
        );
    }

    #[test]
    fn cues_that_clean_to_nothing_are_dropped_and_all_empty_is_an_error() {
        let text = "1\n00:00:01,000 --> 00:00:02,000\n{\\an8}<i></i>\n";
        assert_eq!(
            parse_subtitles(text, "e.srt", None).unwrap_err(),
            SubtitleError::NoCues {
                file: "e.srt".into()
            }
        );
    }
}
