//! Subtitle files (SRT, WebVTT, ASS/SSA) -> timed cues with speaker turns.
//!
//! Every format parser produces raw cues (timing plus tagged text segments);
//! this module turns them into [`Cue`]s: markup removed, whitespace
//! collapsed, two-speaker cues split into turns, cues with no text left
//! dropped, and the rest sorted by start time (overlaps are kept).

mod ass;
mod srt;
mod vtt;

pub mod non_dialogue;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::markup::{collapse_whitespace, decode_entities, strip_bom};
use super::script::normalise_speaker;
use viss_engine::panic_context::at_line;

pub use super::encoding::{DecodeError, EncodingUsed, decode_text};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SubtitleFormat {
    Srt,
    WebVtt,
    Ass,
    /// SubStation Alpha v4 (`[V4 Styles]`); parsed exactly like ASS.
    Ssa,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subtitles {
    pub format: SubtitleFormat,
    pub cues: Vec<Cue>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cue {
    /// 0-based position after sorting by start time.
    pub index: usize,
    /// The cue number (SRT) or identifier (WebVTT) as written, if any.
    pub source_id: Option<String>,
    pub start_ms: u64,
    pub end_ms: u64,
    /// Clean text: markup removed, lines joined with single spaces.
    pub text: String,
    /// Clean text, one entry per displayed line.
    pub lines: Vec<String>,
    /// Speaker turns: a cue showing `- Hi.` / `- Hello.` has two.
    pub turns: Vec<String>,
    /// One entry per turn: from `<v Name>` (WebVTT), the Name field (ASS)
    /// or an upper-case `NAME:` label (hearing-impaired subtitles).
    pub speakers: Vec<Option<String>>,
    /// 1-based line of the timing line (SRT, WebVTT) or `Dialogue:` line (ASS).
    pub source_line: usize,
}

#[derive(Debug, Error, PartialEq)]
pub enum SubtitleError {
    #[error("{file}:{line}: malformed timestamp \"{text}\"; expected {expected}")]
    MalformedTimestamp {
        file: String,
        line: usize,
        text: String,
        expected: &'static str,
    },
    #[error(
        "{file}:{line}: cue ends at {end} before it starts at {start}; fix the timing so the end \
         is not earlier than the start"
    )]
    EndBeforeStart {
        file: String,
        line: usize,
        start: String,
        end: String,
    },
    #[error(
        "{file}: no subtitle cues found; the file is empty or every cue is blank. Check that the \
         right file was given"
    )]
    NoCues { file: String },
    #[error(
        "{file}: not a recognised subtitle file; expected SRT (`00:00:01,000 --> 00:00:02,000` \
         timing lines), WebVTT (a `WEBVTT` first line) or ASS/SSA (`Dialogue:` lines under \
         [Events]), or pass the format explicitly"
    )]
    UnknownFormat { file: String },
    #[error(
        "{file}:{line}: the [Events] `Format:` line has no `{field}` field; add it (standard: \
         Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text)"
    )]
    MissingEventField {
        file: String,
        line: usize,
        field: &'static str,
    },
    #[error(
        "{file}:{line}: `Dialogue:` line has {found} comma-separated fields but the `Format:` line \
         declares {expected}; add the missing fields"
    )]
    TooFewFields {
        file: String,
        line: usize,
        expected: usize,
        found: usize,
    },
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Sniffs the format from the content; the file extension only decides
/// when the content is ambiguous.
pub fn detect_subtitle_format(text: &str, file_name: &str) -> Option<SubtitleFormat> {
    let body = strip_bom(text).trim_start();
    if body.starts_with("WEBVTT") {
        return Some(SubtitleFormat::WebVtt);
    }
    let head: String = body
        .chars()
        .take(65536)
        .collect::<String>()
        .to_ascii_lowercase();
    let has_dialogue_lines = head
        .lines()
        .any(|l| l.trim_start().starts_with("dialogue:"));
    if head.contains("[script info]") || head.contains("[events]") || has_dialogue_lines {
        let ssa = (head.contains("[v4 styles]") && !head.contains("[v4+ styles]"))
            || head
                .lines()
                .any(|l| l.trim().replace(' ', "") == "scripttype:v4.00");
        return Some(if ssa {
            SubtitleFormat::Ssa
        } else {
            SubtitleFormat::Ass
        });
    }
    let extension = file_name
        .rsplit('.')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    let from_extension = match extension.as_str() {
        "srt" => Some(SubtitleFormat::Srt),
        "vtt" | "webvtt" => Some(SubtitleFormat::WebVtt),
        "ass" => Some(SubtitleFormat::Ass),
        "ssa" => Some(SubtitleFormat::Ssa),
        _ => None,
    };
    if head.contains("-->") {
        return Some(if from_extension == Some(SubtitleFormat::WebVtt) {
            SubtitleFormat::WebVtt
        } else {
            SubtitleFormat::Srt
        });
    }
    from_extension
}

/// Parses subtitle text. `file` is the display name used in error messages;
/// its extension also helps format detection when `format` is `None`.
pub fn parse_subtitles(
    text: &str,
    file: &str,
    format: Option<SubtitleFormat>,
) -> Result<Subtitles, SubtitleError> {
    let text = strip_bom(text);
    let format = match format.or_else(|| detect_subtitle_format(text, file)) {
        Some(format) => format,
        None if text.trim().is_empty() => {
            return Err(SubtitleError::NoCues {
                file: file.to_string(),
            });
        }
        None => {
            return Err(SubtitleError::UnknownFormat {
                file: file.to_string(),
            });
        }
    };
    let raw_cues = match format {
        SubtitleFormat::Srt => srt::parse(text, file)?,
        SubtitleFormat::WebVtt => vtt::parse(text, file)?,
        SubtitleFormat::Ass | SubtitleFormat::Ssa => ass::parse(text, file)?,
    };
    let mut cues: Vec<Cue> = raw_cues.into_iter().filter_map(RawCue::into_cue).collect();
    if cues.is_empty() {
        return Err(SubtitleError::NoCues {
            file: file.to_string(),
        });
    }
    cues.sort_by_key(|cue| cue.start_ms);
    for (index, cue) in cues.iter_mut().enumerate() {
        cue.index = index;
    }
    Ok(Subtitles { format, cues })
}

/// Decodes the bytes (see [`decode_text`]) and parses them.
pub fn read_subtitles(
    bytes: Vec<u8>,
    file: &str,
    format: Option<SubtitleFormat>,
) -> Result<(Subtitles, EncodingUsed), SubtitleError> {
    let (text, encoding) = crate::encoding::decode_text_owned(bytes, file)?;
    Ok((parse_subtitles(&text, file, format)?, encoding))
}

/// `HH:MM:SS,mmm`, the SRT spelling, used in error messages.
pub fn format_timestamp(ms: u64) -> String {
    format!(
        "{:02}:{:02}:{:02},{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// Reads `[H:]MM:SS<sep>f` where the separator is `,` or `.` and the fraction
/// has 1–3 digits read as a decimal fraction (`.5` and `.50` are 500 ms,
/// which covers ASS centiseconds). Minutes and seconds after the first field
/// must be below 60.
pub fn parse_timestamp(token: &str) -> Option<u64> {
    let token = token.trim();
    let separator = token.rfind([',', '.'])?;
    let (clock, fraction) = (&token[..separator], &token[separator + 1..]);
    if fraction.is_empty() || fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let millis: u64 = format!("{fraction:0<3}").parse().ok()?;
    let fields: Vec<&str> = clock.split(':').collect();
    if !(2..=3).contains(&fields.len()) {
        return None;
    }
    let mut values = Vec::with_capacity(3);
    for (i, field) in fields.iter().enumerate() {
        let max_digits = if i == 0 { 3 } else { 2 };
        if field.is_empty()
            || field.len() > max_digits
            || !field.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let value: u64 = field.parse().ok()?;
        if i > 0 && value >= 60 {
            return None;
        }
        values.push(value);
    }
    let (hours, minutes, seconds) = match values[..] {
        [h, m, s] => (h, m, s),
        [m, s] => (0, m, s),
        _ => return None,
    };
    Some(((hours * 60 + minutes) * 60 + seconds) * 1000 + millis)
}

/// Parses `start --> end [settings]`, returning the times and the settings
/// text. `expected` names the timestamp spelling for the error message.
pub(crate) fn parse_timing_line<'a>(
    line: &'a str,
    file: &str,
    line_number: usize,
    expected: &'static str,
) -> Result<(u64, u64, &'a str), SubtitleError> {
    let (left, right) = line.split_once("-->").unwrap_or((line, ""));
    let right = right.trim();
    let (end_token, settings) = right.split_once(char::is_whitespace).unwrap_or((right, ""));
    let parse = |token: &str| {
        parse_timestamp(token).ok_or_else(|| SubtitleError::MalformedTimestamp {
            file: file.to_string(),
            line: line_number,
            text: token.trim().to_string(),
            expected,
        })
    };
    let start = parse(left)?;
    let end = parse(end_token)?;
    check_order(start, end, file, line_number)?;
    Ok((start, end, settings.trim()))
}

pub(crate) fn check_order(
    start: u64,
    end: u64,
    file: &str,
    line_number: usize,
) -> Result<(), SubtitleError> {
    if end < start {
        return Err(SubtitleError::EndBeforeStart {
            file: file.to_string(),
            line: line_number,
            start: format_timestamp(start),
            end: format_timestamp(end),
        });
    }
    Ok(())
}

/// A run of text on one displayed line, with the voice (`<v Name>`) it was
/// tagged with, if any.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Segment {
    pub voice: Option<String>,
    pub text: String,
}

pub(crate) struct RawCue {
    pub source_id: Option<String>,
    pub start_ms: u64,
    pub end_ms: u64,
    pub source_line: usize,
    pub lines: Vec<Vec<Segment>>,
    /// ASS/SSA `Name` field.
    pub name_field: Option<String>,
}

impl RawCue {
    fn into_cue(self) -> Option<Cue> {
        at_line(self.source_line);
        let lines: Vec<String> = self
            .lines
            .iter()
            .map(|segments| {
                collapse_whitespace(
                    &segments
                        .iter()
                        .map(|s| s.text.as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                )
            })
            .filter(|line| !line.is_empty())
            .collect();
        if lines.is_empty() {
            return None;
        }
        let (turns, mut speakers) = build_turns(&self.lines);
        if let (Some(name), Some(first)) = (self.name_field, speakers.first_mut())
            && first.is_none()
        {
            *first = Some(name);
        }
        Some(Cue {
            index: 0,
            source_id: self.source_id,
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            text: lines.join(" "),
            lines,
            turns,
            speakers,
            source_line: self.source_line,
        })
    }
}

/// Strips HTML-like tags (`<i>`, `<font ...>`, `<c.yellow>`, `<00:00:01.000>`),
/// `{\an8}`-style override blocks and entities from one displayed line,
/// splitting it where a `<v Name>` voice span starts or `</v>` ends.
pub(crate) fn split_tagged_line(line: &str) -> Vec<Segment> {
    let mut segments = vec![Segment {
        voice: None,
        text: String::new(),
    }];
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        if c == '<'
            && let Some(close) = rest.find('>')
        {
            let tag = &rest[1..close];
            if let Some(voice) = voice_of_tag(tag) {
                start_segment(&mut segments, voice);
                rest = &rest[close + 1..];
                continue;
            }
            if tag.trim() == "/v" {
                start_segment(&mut segments, None);
                rest = &rest[close + 1..];
                continue;
            }
            if is_markup_tag(tag) {
                rest = &rest[close + 1..];
                continue;
            }
        }
        if c == '{'
            && rest[1..].starts_with('\\')
            && let Some(close) = rest.find('}')
        {
            rest = &rest[close + 1..];
            continue;
        }
        segments
            .last_mut()
            .expect("segments is never empty")
            .text
            .push(c);
        rest = &rest[c.len_utf8()..];
    }
    segments
        .into_iter()
        .map(|s| Segment {
            voice: s.voice,
            text: collapse_whitespace(&decode_entities(&s.text)),
        })
        .filter(|s| !s.text.is_empty())
        .collect()
}

fn start_segment(segments: &mut Vec<Segment>, voice: Option<String>) {
    let current = segments.last_mut().expect("segments is never empty");
    if current.text.trim().is_empty() {
        current.voice = voice;
    } else {
        segments.push(Segment {
            voice,
            text: String::new(),
        });
    }
}

/// `v Roger Bingham` or `v.loud Esme` -> the voice name.
fn voice_of_tag(tag: &str) -> Option<Option<String>> {
    let after = tag.strip_prefix('v')?;
    if !(after.is_empty() || after.starts_with([' ', '.', '\t'])) {
        return None;
    }
    let name = after
        .split_once([' ', '\t'])
        .map(|(_, name)| collapse_whitespace(name))
        .unwrap_or_default();
    Some((!name.is_empty()).then_some(name))
}

fn is_markup_tag(tag: &str) -> bool {
    let body = tag.strip_prefix('/').unwrap_or(tag);
    match body.chars().next() {
        Some(c) if c.is_ascii_alphabetic() => true,
        Some(c) if c.is_ascii_digit() => parse_timestamp(body).is_some(),
        _ => false,
    }
}

fn strip_leading_dash(text: &str) -> Option<&str> {
    let mut chars = text.chars();
    let first = chars.next()?;
    if !matches!(first, '-' | '\u{2013}' | '\u{2014}') {
        return None;
    }
    let rest = chars.as_str();
    if rest.starts_with(['-', '\u{2013}', '\u{2014}'])
        || rest.starts_with(|c: char| c.is_ascii_digit())
    {
        return None;
    }
    Some(rest.trim_start())
}

/// `Hi. - Hello.` -> [`Hi.`, `Hello.`]: a dash after sentence-ending
/// punctuation starts a new turn; a dash inside a sentence does not.
fn split_inline_dashes(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for k in 1..chars.len() {
        let (at, c) = chars[k];
        if !matches!(c, '-' | '\u{2013}' | '\u{2014}') || chars[k - 1].1 != ' ' {
            continue;
        }
        let before = text[start..chars[k - 1].0].trim_end();
        let ends_sentence =
            before.ends_with(['.', '!', '?', '\u{2026}', '"', '\'', ')', ']', '\u{201d}']);
        let next_ok = chars
            .get(k + 1)
            .is_none_or(|&(_, n)| n == ' ' || n.is_alphabetic());
        if ends_sentence && next_ok && !before.is_empty() {
            pieces.push(before);
            start = at + c.len_utf8();
        }
    }
    pieces.push(text[start..].trim());
    pieces
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// `JOHN: Hello` as written in hearing-impaired subtitles; only upper-case
/// labels count, so `Note: this` stays text.
fn speaker_label(text: &str) -> (Option<String>, &str) {
    if let Some((label, rest)) = text.split_once(':') {
        let label = label.trim();
        if is_speaker_label(label)
            && !rest.trim().is_empty()
            && !rest.starts_with(|c: char| c.is_ascii_digit())
        {
            return (Some(normalise_speaker(label)), rest.trim_start());
        }
    }
    (None, text)
}

/// Whether `label` (the text before a colon, trimmed) reads as a hearing-impaired speaker
/// label: upper case, at least two letters, no more than 30 characters.
fn is_speaker_label(label: &str) -> bool {
    let letters = label.chars().filter(|c| c.is_alphabetic()).count();
    label.chars().count() <= 30
        && letters >= 2
        && !label.chars().any(char::is_lowercase)
        && label
            .chars()
            .all(|c| c.is_alphanumeric() || " .'-#&".contains(c))
}

/// Groups a cue's segments into speaker turns. A turn starts at the first
/// segment, at every leading dash (and at inline dashes on a dashed line),
/// and wherever an explicit speaker (voice or label) differs from the
/// current turn's; anything else continues the current turn.
fn build_turns(lines: &[Vec<Segment>]) -> (Vec<String>, Vec<Option<String>>) {
    let mut turns: Vec<(Option<String>, String)> = Vec::new();
    for segment in lines.iter().flatten() {
        let dashed = strip_leading_dash(&segment.text);
        let body = dashed.unwrap_or(&segment.text);
        let pieces = if dashed.is_some() {
            split_inline_dashes(body)
        } else {
            vec![body]
        };
        for (k, piece) in pieces.into_iter().enumerate() {
            let (label, words) = speaker_label(piece);
            let speaker = if k == 0 {
                segment.voice.clone().or(label)
            } else {
                label
            };
            let current = turns.last().map(|(speaker, _)| speaker);
            let new_turn = dashed.is_some() || (speaker.is_some() && current != Some(&speaker));
            match turns.last_mut() {
                Some((_, text)) if !new_turn => {
                    text.push(' ');
                    text.push_str(words);
                }
                _ => turns.push((speaker, words.to_string())),
            }
        }
    }
    turns.retain(|(_, text)| !text.is_empty());
    turns
        .into_iter()
        .map(|(speaker, text)| (text, speaker))
        .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turns_of(lines: &[&str]) -> Vec<(Option<String>, String)> {
        let lines: Vec<Vec<Segment>> = lines.iter().map(|l| split_tagged_line(l)).collect();
        let (turns, speakers) = build_turns(&lines);
        speakers.into_iter().zip(turns).collect()
    }

    fn turn(speaker: Option<&str>, text: &str) -> (Option<String>, String) {
        (speaker.map(str::to_string), text.to_string())
    }

    #[test]
    fn timestamps_in_all_spellings() {
        assert_eq!(parse_timestamp("00:01:02,500"), Some(62_500));
        assert_eq!(parse_timestamp("00:01:02.500"), Some(62_500));
        assert_eq!(parse_timestamp("01:02.5"), Some(62_500));
        assert_eq!(parse_timestamp("1:02:03.45"), Some(3_723_450));
        assert_eq!(parse_timestamp("100:00:00,000"), Some(360_000_000));
        assert_eq!(parse_timestamp("00:01:02.5x0"), None);
        assert_eq!(parse_timestamp("00:61:02,000"), None);
        assert_eq!(parse_timestamp("00:01:02"), None);
        assert_eq!(parse_timestamp("00:01:02,5000"), None);
        assert_eq!(format_timestamp(3_723_450), "01:02:03,450");
    }

    #[test]
    fn tags_and_voices_are_split_out() {
        let line =
            "<v.loud Esme Ray>Hey<00:00:01.000> <c.yellow>you</c>!</v> {\\an8}<i>I &amp; me</i> <3";
        let got: Vec<(Option<String>, String)> = split_tagged_line(line)
            .into_iter()
            .map(|s| (s.voice, s.text))
            .collect();
        assert_eq!(
            got,
            vec![turn(Some("Esme Ray"), "Hey you!"), turn(None, "I & me <3")]
        );
    }

    #[test]
    fn dash_turns_on_two_lines_and_one_line() {
        assert_eq!(
            turns_of(&["- Hi.", "- Hello."]),
            vec![turn(None, "Hi."), turn(None, "Hello.")]
        );
        assert_eq!(
            turns_of(&["-Hi. - Hello! -Bye."]),
            vec![turn(None, "Hi."), turn(None, "Hello!"), turn(None, "Bye.")]
        );
        assert_eq!(
            turns_of(&["Are you in?", "- Not yet."]),
            vec![turn(None, "Are you in?"), turn(None, "Not yet.")]
        );
        assert_eq!(
            turns_of(&["- Wait - what?"]),
            vec![turn(None, "Wait - what?")]
        );
        assert_eq!(
            turns_of(&["A long line that", "wraps here."]),
            vec![turn(None, "A long line that wraps here.")]
        );
        assert_eq!(
            turns_of(&["--not a turn"]),
            vec![turn(None, "--not a turn")]
        );
    }

    #[test]
    fn speaker_labels_and_voices_become_speakers() {
        assert_eq!(
            turns_of(&["- JOHN: Hi.", "- MARY ANN: Hello."]),
            vec![turn(Some("John"), "Hi."), turn(Some("Mary Ann"), "Hello.")]
        );
        assert_eq!(
            turns_of(&["Note: it's late."]),
            vec![turn(None, "Note: it's late.")]
        );
        assert_eq!(
            turns_of(&["<v Ann>Hi there", "<v Ann>and welcome.", "<v Bo>Thanks."]),
            vec![
                turn(Some("Ann"), "Hi there and welcome."),
                turn(Some("Bo"), "Thanks.")
            ]
        );
        assert_eq!(
            turns_of(&["At 10:30 sharp."]),
            vec![turn(None, "At 10:30 sharp.")]
        );
    }

    #[test]
    fn detection_by_content_then_extension() {
        assert_eq!(
            detect_subtitle_format("\u{feff}WEBVTT\n", "x.srt"),
            Some(SubtitleFormat::WebVtt)
        );
        assert_eq!(
            detect_subtitle_format("[Script Info]\n[V4+ Styles]\n[Events]\n", "x"),
            Some(SubtitleFormat::Ass)
        );
        assert_eq!(
            detect_subtitle_format("[Script Info]\nScriptType: v4.00\n[V4 Styles]\n", "x"),
            Some(SubtitleFormat::Ssa)
        );
        assert_eq!(
            detect_subtitle_format("1\n00:00:01,000 --> 00:00:02,000\nHi\n", "x.txt"),
            Some(SubtitleFormat::Srt)
        );
        assert_eq!(
            detect_subtitle_format("00:01.000 --> 00:02.000\nHi\n", "x.vtt"),
            Some(SubtitleFormat::WebVtt)
        );
        assert_eq!(
            detect_subtitle_format("", "x.ass"),
            Some(SubtitleFormat::Ass)
        );
        assert_eq!(detect_subtitle_format("hello", "x.txt"), None);
    }

    #[test]
    fn empty_and_unknown_files_name_the_file() {
        let err = parse_subtitles("", "subs/e01.srt", None).unwrap_err();
        assert_eq!(
            err,
            SubtitleError::NoCues {
                file: "subs/e01.srt".into()
            }
        );
        assert!(
            err.to_string()
                .starts_with("subs/e01.srt: no subtitle cues found")
        );
        let err = parse_subtitles("\n\n  \n", "blank.txt", None).unwrap_err();
        assert_eq!(
            err,
            SubtitleError::NoCues {
                file: "blank.txt".into()
            }
        );
        let err = parse_subtitles("just words", "notes.txt", None).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("notes.txt: not a recognised subtitle file"),
            "{err}"
        );
    }

    #[test]
    fn read_subtitles_decodes_windows_1252() {
        let bytes = b"1\r\n00:00:01,000 --> 00:00:02,000\r\nCaf\xe9 \x93ol\xe9\x94\r\n";
        let (subs, encoding) = read_subtitles(bytes.to_vec(), "e01.srt", None).unwrap();
        assert_eq!(encoding, EncodingUsed::Windows1252Fallback);
        assert_eq!(subs.cues[0].text, "Café \u{201c}olé\u{201d}");
    }

    #[test]
    fn read_subtitles_decodes_utf16_and_refuses_binary() {
        let text = "WEBVTT\n\n00:01.000 --> 00:02.000\n<v Zoë>Ça va?\n";
        let mut bytes = vec![0xFF, 0xFE];
        for unit in text.encode_utf16() {
            bytes.extend_from_slice(&unit.to_le_bytes());
        }
        let (subs, encoding) = read_subtitles(bytes.clone(), "e01.vtt", None).unwrap();
        assert_eq!(encoding, EncodingUsed::Utf16LeWithBom);
        assert_eq!(subs.cues[0].speakers, vec![Some("Zoë".to_string())]);
        assert_eq!(subs.cues[0].turns, vec!["Ça va?".to_string()]);
        let err = read_subtitles(b"\x89PNG\r\n\x1a\n\x00\x00\x00".to_vec(), "cover.srt", None)
            .unwrap_err();
        assert!(
            err.to_string().starts_with("cover.srt:3: undecodable"),
            "{err}"
        );
    }

    /// Each format's parser tells `panic_context` its line: a panic after parsing names the
    /// timing (or `Dialogue:`) line of the last cue.
    #[test]
    fn a_panic_while_parsing_names_the_line_reached() {
        use viss_engine::panic_context::catch_parse_panic;
        let files = [
            (
                "a.srt",
                "1\n00:00:01,000 --> 00:00:02,000\nHi.\n\n2\n00:00:03,000 --> 00:00:04,000\nYo.\n",
                6,
            ),
            (
                "a.vtt",
                "WEBVTT\n\n00:01.000 --> 00:02.000\nHi.\n\n00:03.000 --> 00:04.000\nYo.\n",
                6,
            ),
            (
                "a.ass",
                "[Events]\nDialogue: 0,0:00:01.00,0:00:02.00,D,,0,0,0,,Hi\n\
                 Dialogue: 0,0:00:03.00,0:00:04.00,D,,0,0,0,,Yo\n",
                3,
            ),
        ];
        for (file, text, line) in files {
            let error = catch_parse_panic(file, || {
                parse_subtitles(text, file, None).unwrap();
                panic!("boom")
            })
            .unwrap_err();
            assert_eq!(error.line, Some(line), "{file}");
        }
    }
}
