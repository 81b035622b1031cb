//! Advanced SubStation Alpha (`.ass`) and SubStation Alpha v4 (`.ssa`).
//! The `[Events]` `Format:` line decides the field order; Text is split off
//! last so commas inside it survive. `Comment:` events are skipped.

use super::super::markup::{collapse_whitespace, split_physical_lines};
use super::{RawCue, Segment, SubtitleError, check_order, parse_timestamp};
use viss_engine::panic_context::at_line;

const EXPECTED: &str = "H:MM:SS.cc";

const DEFAULT_FORMAT: &[&str] = &[
    "layer", "start", "end", "style", "name", "marginl", "marginr", "marginv", "effect", "text",
];

pub(super) fn parse(text: &str, file: &str) -> Result<Vec<RawCue>, SubtitleError> {
    let mut section = String::new();
    let mut format: Vec<String> = DEFAULT_FORMAT.iter().map(|f| f.to_string()).collect();
    let mut cues = Vec::new();
    for (i, raw) in split_physical_lines(text).into_iter().enumerate() {
        let line_number = i + 1;
        at_line(line_number);
        let line = raw.trim();
        if line.starts_with('[') && line.ends_with(']') {
            section = line.to_ascii_lowercase();
            continue;
        }
        if !(section.is_empty() || section == "[events]") {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "format" => format = read_format(value, file, line_number)?,
            "dialogue" => cues.push(read_dialogue(value, &format, file, line_number)?),
            _ => {}
        }
    }
    Ok(cues)
}

fn read_format(value: &str, file: &str, line_number: usize) -> Result<Vec<String>, SubtitleError> {
    let fields: Vec<String> = value
        .split(',')
        .map(|f| f.trim().to_ascii_lowercase())
        .collect();
    for required in ["start", "end", "text"] {
        if !fields.iter().any(|f| f == required) {
            return Err(SubtitleError::MissingEventField {
                file: file.to_string(),
                line: line_number,
                field: required,
            });
        }
    }
    Ok(fields)
}

fn read_dialogue(
    value: &str,
    format: &[String],
    file: &str,
    line_number: usize,
) -> Result<RawCue, SubtitleError> {
    let values: Vec<&str> = value.trim_start().splitn(format.len(), ',').collect();
    if values.len() < format.len() {
        return Err(SubtitleError::TooFewFields {
            file: file.to_string(),
            line: line_number,
            expected: format.len(),
            found: values.len(),
        });
    }
    let field = |name: &str| format.iter().position(|f| f == name).map(|at| values[at]);
    let time = |name: &str| {
        let token = field(name).unwrap_or("").trim();
        parse_timestamp(token).ok_or_else(|| SubtitleError::MalformedTimestamp {
            file: file.to_string(),
            line: line_number,
            text: token.to_string(),
            expected: EXPECTED,
        })
    };
    let start_ms = time("start")?;
    let end_ms = time("end")?;
    check_order(start_ms, end_ms, file, line_number)?;
    let name_field = field("name")
        .or_else(|| field("actor"))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_string);
    let lines = clean_event_text(field("text").unwrap_or(""))
        .into_iter()
        .map(|text| {
            if text.is_empty() {
                Vec::new()
            } else {
                vec![Segment { voice: None, text }]
            }
        })
        .collect();
    Ok(RawCue {
        source_id: None,
        start_ms,
        end_ms,
        source_line: line_number,
        lines,
        name_field,
    })
}

/// Removes `{...}` override blocks, turns `\N`/`\n` into line breaks and `\h`
/// into a space, and drops vector drawings (text between `{\p1}` and `{\p0}`),
/// which are shapes, not words.
fn clean_event_text(text: &str) -> Vec<String> {
    let mut lines = vec![String::new()];
    let mut drawing = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '{'
            && let Some(close) = rest.find('}')
        {
            if let Some(mode) = drawing_mode(&rest[1..close]) {
                drawing = mode;
            }
            rest = &rest[close + 1..];
            continue;
        }
        if c == '\\' {
            match rest[1..].chars().next() {
                Some('N') | Some('n') => {
                    lines.push(String::new());
                    rest = &rest[2..];
                    continue;
                }
                Some('h') => {
                    lines.last_mut().expect("never empty").push(' ');
                    rest = &rest[2..];
                    continue;
                }
                _ => {}
            }
        }
        if !drawing {
            lines.last_mut().expect("never empty").push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    lines.iter().map(|l| collapse_whitespace(l)).collect()
}

/// `Some(true)` when an override block switches drawing on (`\p1`),
/// `Some(false)` when it switches it off (`\p0`).
fn drawing_mode(block: &str) -> Option<bool> {
    let mut mode = None;
    for tag in block.split('\\').skip(1) {
        if let Some(digits) = tag.strip_prefix('p')
            && !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
        {
            mode = Some(!digits.trim_start_matches('0').is_empty());
        }
    }
    mode
}

#[cfg(test)]
mod tests {
    use super::super::{SubtitleError, SubtitleFormat, parse_subtitles};
    use super::*;

    const SAMPLE: &str = include_str!("../../../../tests/fixtures/text/sample.ass");

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fixture_cues_honour_the_format_line() {
        let subs = parse_subtitles(SAMPLE, "sample.ass", None).unwrap();
        assert_eq!(subs.format, SubtitleFormat::Ass);
        type Summary<'a> = (u64, u64, usize, &'a str, Vec<Option<String>>);
        let summary: Vec<Summary<'_>> = subs
            .cues
            .iter()
            .map(|c| {
                (
                    c.start_ms,
                    c.end_ms,
                    c.source_line,
                    c.text.as_str(),
                    c.speakers.clone(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    1_000,
                    3_500,
                    12,
                    "Pass the bag, please, quickly.",
                    vec![Some("Nadia".to_string())]
                ),
                (2_000, 2_800, 15, "Hi there", vec![Some("Gus".to_string())]),
                (
                    4_000,
                    6_000,
                    13,
                    "Which one? The blue or the green?",
                    vec![Some("Felix".to_string())]
                ),
                (
                    6_500,
                    8_000,
                    14,
                    "- It's a fern. - A tree!",
                    vec![None, None]
                ),
            ]
        );
        assert_eq!(
            subs.cues[2].lines,
            strings(&["Which one?", "The blue or", "the green?"])
        );
        assert_eq!(subs.cues[3].turns, strings(&["It's a fern.", "A tree!"]));
    }

    #[test]
    fn ssa_with_marked_field_and_default_format() {
        let text = "[Script Info]\nScriptType: v4.00\n\n[V4 Styles]\nFormat: Name, \
                    Fontname\n\n[Events]\nFormat: Marked, Start, End, Style, Name, MarginL, \
                    MarginR, MarginV, Effect, Text\nDialogue: \
                    Marked=0,0:00:01.00,0:00:02.00,Default,Ann,0000,0000,0000,,Hello, you.\n";
        let subs = parse_subtitles(text, "old.ssa", None).unwrap();
        assert_eq!(subs.format, SubtitleFormat::Ssa);
        assert_eq!(subs.cues[0].text, "Hello, you.");
        assert_eq!(subs.cues[0].speakers, vec![Some("Ann".to_string())]);
        let bare = parse_subtitles(
            "Dialogue: 0,0:00:01.00,0:00:02.00,Default,,0,0,0,,No header",
            "x.ass",
            None,
        )
        .unwrap();
        assert_eq!(bare.cues[0].text, "No header");
    }

    #[test]
    fn errors_name_file_and_line() {
        let header = "[Events]\nFormat: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, \
                      Effect, Text\n";
        let bad_time = format!("{header}Dialogue: 0,0:00:01.00,0:0x:02.00,Default,,0,0,0,,Hi\n");
        assert_eq!(
            parse_subtitles(&bad_time, "e.ass", None)
                .unwrap_err()
                .to_string(),
            "e.ass:3: malformed timestamp \"0:0x:02.00\"; expected H:MM:SS.cc"
        );
        let short = format!("{header}Dialogue: 0,0:00:01.00,0:00:02.00\n");
        assert_eq!(
            parse_subtitles(&short, "e.ass", None).unwrap_err(),
            SubtitleError::TooFewFields {
                file: "e.ass".into(),
                line: 3,
                expected: 10,
                found: 3
            }
        );
        let no_text = "[Events]\nFormat: Layer, Start, End\n";
        assert_eq!(
            parse_subtitles(no_text, "e.ass", None).unwrap_err(),
            SubtitleError::MissingEventField {
                file: "e.ass".into(),
                line: 2,
                field: "text"
            }
        );
        let backwards = format!("{header}Dialogue: 0,0:00:03.00,0:00:02.00,Default,,0,0,0,,Hi\n");
        assert!(matches!(
            parse_subtitles(&backwards, "e.ass", None).unwrap_err(),
            SubtitleError::EndBeforeStart { line: 3, .. }
        ));
    }

    #[test]
    fn override_blocks_breaks_and_drawings() {
        assert_eq!(
            clean_event_text("{\\i1}A{\\i0}\\Nb\\hc"),
            strings(&["A", "b c"])
        );
        assert_eq!(
            clean_event_text("x{\\p1}m 0 0 l 1 1{\\p0}y"),
            strings(&["xy"])
        );
        assert_eq!(
            clean_event_text("{\\pos(1,2)}Hi {note} there"),
            strings(&["Hi there"])
        );
    }
}
