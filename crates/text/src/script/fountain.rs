//! Fountain 1.1 screenplays.
//!
//! Notes (`[[ ]]`) and boneyard (`/* */`) are removed before anything else,
//! and a line that held nothing but removed material is dropped rather than
//! left blank, so a note between two dialogue lines does not split the block.
//! Sections (`#`) and synopses (`=`) are ignored; page breaks (`===`) become
//! markers. Emphasis markers (`*`, `_`) are stripped; `\*` and `\_` keep the
//! literal character.

use super::super::caseless::strip_prefix_ignore_case;
use super::super::markup::{SourceLine, collapse_whitespace, tidy_spacing};
use super::speakers::{
    extract_directions, is_group_speaker, normalise_speaker, split_speaker_names,
};
use super::{Dialogue, LineKind, MarkerKind, ScriptBuilder, ScriptError, ScriptLine, TitleField};
use viss_engine::panic_context::at_line;

const TITLE_PAGE_KEYS: &[&str] = &[
    "title",
    "credit",
    "author",
    "authors",
    "source",
    "draft date",
    "date",
    "contact",
    "notes",
    "copyright",
    "revision",
    "series",
    "episode",
];

const HEADING_PREFIXES: &[&str] = &["INT./EXT", "INT/EXT", "I/E", "INT", "EXT", "EST"];

struct FountainLine {
    text: String,
    line: usize,
}

impl FountainLine {
    fn is_blank(&self) -> bool {
        self.text.trim().is_empty()
    }
}

pub(super) fn parse(lines: &[SourceLine<'_>], file: &str) -> Result<ScriptBuilder, ScriptError> {
    let lines = remove_notes_and_boneyard(lines, file)?;
    let mut builder = ScriptBuilder::default();
    let body_start = read_title_page(&lines, &mut builder.title_page);
    let mut i = body_start;
    while i < lines.len() {
        at_line(lines[i].line);
        let text = lines[i].text.trim();
        if text.is_empty() {
            i += 1;
            continue;
        }
        let previous_blank = i == body_start || lines[i - 1].is_blank();
        let next_blank = lines.get(i + 1).is_none_or(FountainLine::is_blank);
        let line = lines[i].line;
        let single = |kind: LineKind| ScriptLine {
            kind,
            source_line_start: line,
            source_line_end: line,
            uncut: false,
        };
        if let Some(forced) = text.strip_prefix('!') {
            i = push_action(&lines, i, forced, &mut builder);
        } else if is_page_break(text) {
            builder.push(single(LineKind::Marker {
                marker: MarkerKind::PageBreak,
                text: text.to_string(),
            }));
            i += 1;
        } else if text.starts_with('#') || text.starts_with('=') {
            i += 1;
        } else if let Some(lyric) = text.strip_prefix('~') {
            builder.push(single(LineKind::Lyric {
                text: clean_text(lyric),
            }));
            i += 1;
        } else if text.len() >= 2 && text.starts_with('>') && text.ends_with('<') {
            builder.push(single(LineKind::Centered {
                text: clean_text(&text[1..text.len() - 1]),
            }));
            i += 1;
        } else if let Some(transition) = text.strip_prefix('>') {
            builder.push(single(LineKind::Transition {
                text: clean_text(transition),
            }));
            i += 1;
        } else if let Some(forced) = forced_heading(text) {
            start_heading(&mut builder, forced, false, line);
            i += 1;
        } else if previous_blank && is_scene_heading(text) {
            start_heading(&mut builder, text, true, line);
            i += 1;
        } else if previous_blank && next_blank && is_transition(text) {
            builder.push(single(LineKind::Transition {
                text: clean_text(text),
            }));
            i += 1;
        } else if text.starts_with('@') || (previous_blank && !next_blank && is_character_cue(text))
        {
            i = push_dialogue(&lines, i, &mut builder);
        } else {
            i = push_action(&lines, i, text, &mut builder);
        }
    }
    Ok(builder)
}

fn remove_notes_and_boneyard(
    lines: &[SourceLine<'_>],
    file: &str,
) -> Result<Vec<FountainLine>, ScriptError> {
    let mut kept = Vec::with_capacity(lines.len());
    let mut boneyard_opened_at: Option<usize> = None;
    let mut note_opened_at: Option<usize> = None;
    for source in lines {
        at_line(source.start_line);
        let chars: Vec<char> = source.text.chars().collect();
        let mut text = String::with_capacity(source.text.len());
        let mut removed = boneyard_opened_at.is_some() || note_opened_at.is_some();
        let mut i = 0;
        while i < chars.len() {
            let pair = (chars[i], chars.get(i + 1).copied().unwrap_or('\0'));
            if boneyard_opened_at.is_some() {
                if pair == ('*', '/') {
                    boneyard_opened_at = None;
                    i += 2;
                } else {
                    i += 1;
                }
            } else if note_opened_at.is_some() {
                if pair == (']', ']') {
                    note_opened_at = None;
                    i += 2;
                } else {
                    i += 1;
                }
            } else if pair == ('/', '*') {
                boneyard_opened_at = Some(source.start_line);
                removed = true;
                i += 2;
            } else if pair == ('[', '[') {
                note_opened_at = Some(source.start_line);
                removed = true;
                i += 2;
            } else {
                text.push(chars[i]);
                i += 1;
            }
        }
        if removed && text.trim().is_empty() {
            continue;
        }
        kept.push(FountainLine {
            text,
            line: source.start_line,
        });
    }
    if let Some(line) = boneyard_opened_at {
        return Err(ScriptError::UnclosedBoneyard {
            file: file.to_string(),
            line,
        });
    }
    if let Some(line) = note_opened_at {
        return Err(ScriptError::UnclosedNote {
            file: file.to_string(),
            line,
        });
    }
    Ok(kept)
}

pub(crate) fn is_title_page_start(text: &str) -> bool {
    text.split_once(':')
        .is_some_and(|(key, _)| TITLE_PAGE_KEYS.contains(&key.trim().to_lowercase().as_str()))
}

/// Reads `Key: value` pairs up to the first blank line; indented lines
/// continue the previous value. Returns the index of the first body line.
fn read_title_page(lines: &[FountainLine], fields: &mut Vec<TitleField>) -> usize {
    let Some(first) = lines.first() else { return 0 };
    if first.text.starts_with([' ', '\t']) || !is_title_page_start(first.text.trim()) {
        return 0;
    }
    let mut i = 0;
    while i < lines.len() && !lines[i].is_blank() {
        at_line(lines[i].line);
        let raw = &lines[i].text;
        let indented = raw.starts_with('\t') || raw.starts_with("   ");
        match (indented, raw.split_once(':'), fields.last_mut()) {
            (false, Some((key, value)), _) => fields.push(TitleField {
                key: key.trim().to_string(),
                value: clean_text(value),
                source_line: lines[i].line,
            }),
            (_, _, Some(field)) => {
                if !field.value.is_empty() {
                    field.value.push('\n');
                }
                field.value.push_str(&clean_text(raw));
            }
            (_, _, None) => {}
        }
        i += 1;
    }
    i
}

fn is_page_break(text: &str) -> bool {
    text.len() >= 3 && text.chars().all(|c| c == '=')
}

fn forced_heading(text: &str) -> Option<&str> {
    let rest = text.strip_prefix('.')?;
    rest.chars()
        .next()
        .filter(|c| c.is_alphanumeric())
        .map(|_| rest)
}

/// Byte length of the `INT`/`EXT`/... prefix that starts `text`, in `text` itself: lengths
/// taken from an upper-cased copy are wrong (`ﬅ` upper-cases to `ST`).
fn heading_prefix_len(text: &str) -> Option<usize> {
    HEADING_PREFIXES.iter().find_map(|prefix| {
        let rest = strip_prefix_ignore_case(text, prefix)?;
        rest.starts_with(['.', ' '])
            .then_some(text.len() - rest.len())
    })
}

pub(crate) fn is_scene_heading(text: &str) -> bool {
    forced_heading(text).is_some() || heading_prefix_len(text).is_some()
}

fn is_transition(text: &str) -> bool {
    !text.chars().any(char::is_lowercase) && text.ends_with("TO:")
}

/// An upper-case name (extensions in parentheses may be any case), optionally
/// followed by `^` for dual dialogue.
pub(crate) fn is_character_cue(text: &str) -> bool {
    let text = text.trim().trim_end_matches('^').trim();
    let name = text.split('(').next().unwrap_or("").trim();
    !name.is_empty()
        && name.chars().count() <= 50
        && name.chars().any(char::is_alphabetic)
        && !name.chars().any(char::is_lowercase)
        && !name.ends_with(':')
        && heading_prefix_len(name).is_none()
}

fn start_heading(builder: &mut ScriptBuilder, text: &str, has_prefix: bool, line: usize) {
    let (heading, location, description) = split_heading(text, has_prefix);
    builder.start_scene(Some(heading), location, description, line, line);
}

/// `INT. KITCHEN - NIGHT #12#` -> (`INT. KITCHEN - NIGHT`, `KITCHEN`, `NIGHT`).
pub(super) fn split_heading(
    text: &str,
    has_prefix: bool,
) -> (String, Option<String>, Option<String>) {
    let mut heading = text.trim().to_string();
    if heading.ends_with('#')
        && let Some(open) = heading[..heading.len() - 1].rfind('#')
    {
        heading = heading[..open].trim_end().to_string();
    }
    let place = if has_prefix {
        let skip = heading_prefix_len(&heading).unwrap_or(0);
        heading[skip..]
            .trim_start_matches(['.', ' '])
            .trim()
            .to_string()
    } else {
        heading.clone()
    };
    let (location, description) = match place.rfind(" - ") {
        Some(at) => (
            place[..at].trim().to_string(),
            Some(place[at + 3..].trim().to_string()),
        ),
        None => (place, None),
    };
    let location = (!location.is_empty()).then_some(location);
    (heading, location, description)
}

fn push_action(
    lines: &[FountainLine],
    start: usize,
    first: &str,
    builder: &mut ScriptBuilder,
) -> usize {
    let mut parts = vec![clean_text(first)];
    let mut i = start + 1;
    while i < lines.len() && !lines[i].is_blank() {
        at_line(lines[i].line);
        parts.push(clean_text(&lines[i].text));
        i += 1;
    }
    let text = collapse_whitespace(&parts.join(" "));
    builder.push(ScriptLine {
        kind: LineKind::Action { text },
        source_line_start: lines[start].line,
        source_line_end: lines[i - 1].line,
        uncut: false,
    });
    i
}

fn push_dialogue(lines: &[FountainLine], start: usize, builder: &mut ScriptBuilder) -> usize {
    let cue = lines[start].text.trim();
    let cue = cue.strip_prefix('@').unwrap_or(cue).trim();
    let (cue, dual) = match cue.strip_suffix('^') {
        Some(rest) => (rest.trim(), true),
        None => (cue, false),
    };
    let name = cue.split('(').next().unwrap_or("").trim();
    let extensions: Vec<String> = cue
        .split('(')
        .skip(1)
        .map(|part| part.split(')').next().unwrap_or("").trim().to_string())
        .filter(|ext| !ext.is_empty())
        .collect();
    let mut spoken = Vec::new();
    let mut directions = Vec::new();
    let mut lyric = false;
    let mut i = start + 1;
    while i < lines.len() {
        at_line(lines[i].line);
        let raw = &lines[i].text;
        if raw.trim().is_empty() {
            let intentional_blank = raw.len() >= 2 && raw.chars().all(|c| c == ' ');
            if intentional_blank && lines.get(i + 1).is_some_and(|next| !next.is_blank()) {
                i += 1;
                continue;
            }
            break;
        }
        let text = raw.trim();
        if text.starts_with('(') && text.ends_with(')') {
            directions.push(clean_text(&text[1..text.len() - 1]));
        } else if let Some(sung) = text.strip_prefix('~') {
            lyric = true;
            spoken.push(clean_text(sung));
        } else {
            let (words, inline) = extract_directions(&clean_text(text));
            directions.extend(inline);
            spoken.push(words);
        }
        i += 1;
    }
    let names = split_speaker_names(name);
    let group = names.len() == 1 && is_group_speaker(&names[0]);
    if dual && let Some(LineKind::Dialogue(previous)) = builder.last_line_mut().map(|l| &mut l.kind)
    {
        previous.dual = true;
    }
    let dialogue = Dialogue {
        speakers: names.iter().map(|n| normalise_speaker(n)).collect(),
        raw_speaker: cue.to_string(),
        group,
        text: tidy_spacing(&spoken.join(" ")),
        directions,
        extensions,
        dual,
        lyric,
    };
    builder.push(ScriptLine {
        kind: LineKind::Dialogue(dialogue),
        source_line_start: lines[start].line,
        source_line_end: lines[i - 1].line,
        uncut: false,
    });
    i
}

fn clean_text(text: &str) -> String {
    collapse_whitespace(&strip_emphasis(text))
}

fn strip_emphasis(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if matches!(chars.peek(), Some('*') | Some('_')) => {
                out.push(chars.next().unwrap_or(c))
            }
            '*' | '_' => {}
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{ParseOptions, Script, ScriptFormat, parse_script};
    use super::*;

    const SCREENPLAY: &str = include_str!("../../../../tests/fixtures/text/screenplay.fountain");

    fn parse(text: &str) -> Result<Script, ScriptError> {
        let options = ParseOptions {
            format: Some(ScriptFormat::Fountain),
            ..Default::default()
        };
        parse_script(text, "play.fountain", &options)
    }

    fn summary(line: &ScriptLine) -> String {
        let body = match &line.kind {
            LineKind::Dialogue(d) => format!(
                "dialogue {:?} {:?} dir={:?} ext={:?}{}{}",
                d.speakers,
                d.text,
                d.directions,
                d.extensions,
                if d.dual { " dual" } else { "" },
                if d.lyric { " lyric" } else { "" }
            ),
            LineKind::Action { text } => format!("action {text:?}"),
            LineKind::Transition { text } => format!("transition {text:?}"),
            LineKind::Centered { text } => format!("centered {text:?}"),
            LineKind::Lyric { text } => format!("lyric {text:?}"),
            LineKind::Note { text } => format!("note {text:?}"),
            LineKind::Marker { marker, .. } => format!("marker {marker:?}"),
        };
        format!(
            "{}-{} {}",
            line.source_line_start, line.source_line_end, body
        )
    }

    #[test]
    fn fixture_title_page() {
        let script = parse(SCREENPLAY).unwrap();
        let fields: Vec<(&str, &str, usize)> = script
            .title_page
            .iter()
            .map(|f| (f.key.as_str(), f.value.as_str(), f.source_line))
            .collect();
        assert_eq!(
            fields,
            vec![
                ("Title", "The Lighthouse Keeper's Cat", 1),
                ("Credit", "Written by", 2),
                ("Author", "Ines Marlowe", 3),
                ("Draft date", "1 March 2024", 4),
                ("Contact", "Marlowe Scripts\nines@example.org", 5),
            ]
        );
        assert_eq!(
            script.front_matter.iter().map(summary).collect::<Vec<_>>(),
            vec!["13-13 action \"FADE IN:\""]
        );
    }

    #[test]
    fn fixture_scene_headings() {
        let script = parse(SCREENPLAY).unwrap();
        type Heading<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>, usize);
        let headings: Vec<Heading<'_>> = script
            .scenes
            .iter()
            .map(|s| {
                (
                    s.heading.as_deref(),
                    s.location.as_deref(),
                    s.description.as_deref(),
                    s.start_line,
                )
            })
            .collect();
        assert_eq!(
            headings,
            vec![
                (
                    Some("EXT. LIGHTHOUSE - DAWN"),
                    Some("LIGHTHOUSE"),
                    Some("DAWN"),
                    15
                ),
                (
                    Some("INT. LIGHTHOUSE KITCHEN - CONTINUOUS"),
                    Some("LIGHTHOUSE KITCHEN"),
                    Some("CONTINUOUS"),
                    23
                ),
                (Some("BOAT DECK"), Some("BOAT DECK"), None, 54),
                (
                    Some("INT./EXT. CAR - NIGHT"),
                    Some("CAR"),
                    Some("NIGHT"),
                    65
                ),
            ]
        );
    }

    #[test]
    fn fixture_every_element() {
        let script = parse(SCREENPLAY).unwrap();
        let all: Vec<Vec<String>> = script
            .scenes
            .iter()
            .map(|s| s.lines.iter().map(summary).collect())
            .collect();
        assert_eq!(
            all[0],
            vec![
                "17-17 action \"Waves hit the rocks. A lamp turns slowly above.\"",
                "20-21 dialogue [\"Ada\"] \"Every morning the same thing. Coffee, lamp, cat.\" \
                 dir=[] ext=[\"V.O.\"]",
            ]
        );
        assert_eq!(
            all[1],
            vec![
                "25-25 action \"ADA, fifties, pours coffee into two bowls.\"",
                "27-31 dialogue [\"Ada\"] \"Biscuit? Breakfast. He never misses breakfast.\" \
                 dir=[\"calling\", \"to herself\"] ext=[]",
                "36-37 dialogue [\"McGREGOR\"] \"Ada! Your cat is on my boat again!\" dir=[] \
                 ext=[\"O.S.\"]",
                "39-40 dialogue [\"Ada\"] \"Is he eating your fish?\" dir=[] ext=[]",
                "42-44 dialogue [\"McGREGOR\"] \"He is eating my fish. All of it.\" dir=[] \
                 ext=[\"O.S.\", \"CONT'D\"]",
                "46-47 dialogue [\"Ada\"] \"Tell him to give it back.\" dir=[] ext=[] dual",
                "49-50 dialogue [\"McGREGOR\"] \"Tell her to come get it.\" dir=[] ext=[] dual",
                "52-52 transition \"CUT TO:\"",
            ]
        );
        assert_eq!(
            all[2],
            vec![
                "56-56 lyric \"Oh the cat sits on the prow,\"",
                "57-57 lyric \"and the fish are in him now.\"",
                "59-59 centered \"THE END OF THE BEGINNING\"",
                "61-61 marker PageBreak",
                "63-63 transition \"SMASH CUT TO:\"",
            ]
        );
        assert_eq!(
            all[3],
            vec![
                "67-67 action \"ADA WAITS.\"",
                "69-70 dialogue [\"Ada\"] \"Biscuit, come home.\" dir=[] ext=[] lyric",
                "72-73 dialogue [\"Both\"] \"Finally.\" dir=[] ext=[]",
            ]
        );
        let both = script.scenes[3].lines[2].dialogue().unwrap();
        assert!(both.group);
        assert_eq!(both.raw_speaker, "BOTH");
        let cont = script.scenes[1].lines[4].dialogue().unwrap();
        assert_eq!(cont.raw_speaker, "McGREGOR (O.S.) (CONT'D)");
    }

    #[test]
    fn unclosed_boneyard_names_file_and_line() {
        let err = parse("INT. ROOM - DAY\n\nBOB\nHi.\n\n/* never\nclosed").unwrap_err();
        assert_eq!(
            err,
            ScriptError::UnclosedBoneyard {
                file: "play.fountain".into(),
                line: 6
            }
        );
        assert_eq!(
            err.to_string(),
            "play.fountain:6: boneyard comment `/*` is never closed; add the matching `*/`"
        );
    }

    #[test]
    fn unclosed_note_names_file_and_line() {
        let err = parse("BOB\nHi. [[oops\n").unwrap_err();
        assert_eq!(
            err,
            ScriptError::UnclosedNote {
                file: "play.fountain".into(),
                line: 2
            }
        );
    }

    #[test]
    fn escaped_emphasis_and_intentional_blank_in_dialogue() {
        let script = parse("\nBOB\nA \\*real\\* **star**.\n  \nStill me.\n\nSUE\nOk.").unwrap();
        let bob = script.scenes[0].lines[0].dialogue().unwrap();
        assert_eq!(bob.text, "A *real* star. Still me.");
        assert_eq!(script.scenes[0].lines[0].source_line_end, 5);
    }

    #[test]
    fn transition_needs_blank_lines_around_it() {
        let script = parse("\nBOB\nHi.\n\nDISSOLVE TO:\nBOB\nHello.").unwrap();
        let kinds: Vec<String> = script.scenes[0].lines.iter().map(summary).collect();
        assert_eq!(
            kinds,
            vec![
                "2-3 dialogue [\"Bob\"] \"Hi.\" dir=[] ext=[]",
                "5-7 action \"DISSOLVE TO: BOB Hello.\""
            ]
        );
        let script = parse("\nBOB\nHi.\n\nDISSOLVE TO:\n\nSUE\nHello.").unwrap();
        assert_eq!(
            summary(&script.scenes[0].lines[1]),
            "5-5 transition \"DISSOLVE TO:\""
        );
    }

    #[test]
    fn heading_detection() {
        assert!(is_scene_heading("INT. HOUSE - DAY"));
        assert!(is_scene_heading("ext. beach"));
        assert!(is_scene_heading("I/E SHIP"));
        assert!(is_scene_heading(".FLASHBACK"));
        assert!(!is_scene_heading("INTERIOR DESIGN"));
        assert!(!is_scene_heading("ESTHER WAVES"));
        assert!(!is_scene_heading("...and then"));
    }

    /// Issue 16: the prefix length came from an upper-cased copy, where `ﬅ` is `ST`, so
    /// `Eﬅ. KITCHEN` was a heading whose prefix ended inside the `ﬅ` and slicing it panicked.
    #[test]
    fn heading_prefix_is_measured_in_the_text_itself() {
        assert!(!is_scene_heading("Eﬅ. KITCHEN"));
        assert!(!is_scene_heading("ıNT. KITCHEN"));
        let script = parse("\nEﬅ. KITCHEN\n\nANN\nHi.\n").unwrap();
        assert_eq!(
            summary(&script.front_matter[0]),
            "2-2 action \"Eﬅ. KITCHEN\""
        );
        let script = parse("\nint. hall - night\n\nANN\nHi.\n").unwrap();
        assert_eq!(script.scenes[0].location.as_deref(), Some("hall"));
    }

    /// Issue 16: a Fountain cue naming two speakers with letters whose lower case is longer.
    #[test]
    fn dual_speaker_cue_with_turkish_and_french_names() {
        let script = parse("\nINT. HALL - DAY\n\nİLKER & ÉMILE\nHello there.\n").unwrap();
        let dialogue = script.scenes[0].lines[0].dialogue().unwrap();
        assert_eq!(dialogue.speakers, vec!["İlker", "Émile"]);
        assert_eq!(dialogue.raw_speaker, "İLKER & ÉMILE");
    }
}
