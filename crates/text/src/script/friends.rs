//! Fan transcripts in the style of the well-known sitcom transcript sites.
//!
//! Conventions understood:
//! - `[Scene: Place, who is there.]` starts a scene (the bracket may wrap);
//! - `Name: words` starts a dialogue paragraph; physical lines without a
//!   `Name:` prefix continue the open paragraph until a blank line;
//! - `(directions)` inside a line go to [`Dialogue::directions`]; a line that
//!   is wholly parenthetical is an action, as is a paragraph of narration;
//! - `Opening Credits`, `Commercial Break`, `Closing Credits` and `End` are
//!   markers that close the current scene, `[Time Lapse]` is a marker inside it;
//! - other bracketed lines are transcriber notes;
//! - uncut material: a note mentioning "uncut" opens an uncut region (its
//!   lines get `uncut = true`); a note mentioning "uncut" together with
//!   "end"/"ends"/"resume" closes it, as does the next scene header once the
//!   region has flagged something. A single paragraph can be flagged with a
//!   leading `{Uncut}` or `[Uncut]`.

use super::super::caseless::strip_prefix_ignore_case;
use super::super::markup::{SourceLine, collapse_whitespace};
use super::speakers::{
    extract_directions, is_credit_cue, is_group_speaker, is_note_cue, normalise_speaker,
    paren_balance, split_cue_parenthetical, split_speaker_names, split_speaker_prefix,
};
use super::{Dialogue, LineKind, MarkerKind, ScriptBuilder, ScriptLine, TitleField};
use viss_engine::panic_context::at_line;

pub(super) fn parse(lines: &[SourceLine<'_>]) -> ScriptBuilder {
    let mut parser = TranscriptParser::default();
    for line in lines {
        parser.feed(line);
    }
    parser.finish()
}

/// Recognises the stand-alone production markers, tolerating brackets,
/// parentheses and trailing punctuation around them.
pub(crate) fn marker_kind(text: &str) -> Option<MarkerKind> {
    let trimmed = text
        .trim()
        .trim_start_matches(['[', '(', '{'])
        .trim_end_matches([']', ')', '}'])
        .trim()
        .trim_end_matches(['.', ':', '!'])
        .trim();
    let normalised = collapse_whitespace(&trimmed.to_lowercase());
    match normalised.as_str() {
        "opening credits" | "opening titles" | "opening title" => Some(MarkerKind::OpeningCredits),
        "commercial break" | "commercial" => Some(MarkerKind::CommercialBreak),
        "closing credits" | "ending credits" | "end credits" | "closing titles" => {
            Some(MarkerKind::ClosingCredits)
        }
        "end" | "the end" => Some(MarkerKind::End),
        "time lapse" | "time-lapse" | "timelapse" => Some(MarkerKind::TimeLapse),
        _ => None,
    }
}

enum ItemKind {
    Dialogue { cue: String },
    Action,
    Bracket,
}

struct OpenItem {
    kind: ItemKind,
    text: String,
    start: usize,
    end: usize,
    uncut: bool,
}

impl OpenItem {
    fn new(kind: ItemKind, text: &str, line: &SourceLine<'_>, uncut: bool) -> Self {
        OpenItem {
            kind,
            text: text.to_string(),
            start: line.start_line,
            end: line.end_line,
            uncut,
        }
    }

    fn append(&mut self, text: &str, end: usize) {
        self.text.push(' ');
        self.text.push_str(text);
        self.end = end;
    }
}

enum UncutNote {
    Begins,
    Ends,
}

fn uncut_note(text: &str) -> Option<UncutNote> {
    let lower = text.to_lowercase();
    if !lower.contains("uncut") {
        return None;
    }
    let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).collect();
    let closes = words
        .iter()
        .any(|w| matches!(*w, "end" | "ends" | "ended" | "resume" | "resumes"));
    Some(if closes {
        UncutNote::Ends
    } else {
        UncutNote::Begins
    })
}

fn strip_uncut_prefix(text: &str) -> (&str, bool) {
    for prefix in ["{uncut}", "[uncut]"] {
        if text.len() >= prefix.len()
            && text.is_char_boundary(prefix.len())
            && text[..prefix.len()].eq_ignore_ascii_case(prefix)
        {
            return (text[prefix.len()..].trim_start(), true);
        }
    }
    (text, false)
}

/// `Written by: ...` has a lower-case word, so it never passes as a speaker
/// cue; credits are matched on their own.
fn split_credit(text: &str) -> Option<(&str, &str)> {
    let (key, value) = text.split_once(':')?;
    (key.len() <= 40 && is_credit_cue(key)).then(|| (key.trim(), value.trim()))
}

/// True when the whole line is one parenthetical, e.g. `(He exits.)`.
fn is_whole_parenthetical(text: &str) -> bool {
    let mut depth = 0i64;
    let trimmed = text.trim();
    if !trimmed.starts_with('(') {
        return false;
    }
    for (i, c) in trimmed.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1 == trimmed.len();
                }
            }
            _ => {}
        }
    }
    false
}

fn strip_outer_parens(text: &str) -> String {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|rest| rest.strip_suffix(')'))
        .filter(|_| is_whole_parenthetical(text));
    collapse_whitespace(inner.unwrap_or(text))
}

/// `Scene: Central Perk, all are there.` -> heading, location, description.
fn scene_heading(inner: &str) -> Option<(String, Option<String>, Option<String>)> {
    let trimmed = inner.trim();
    let rest = strip_prefix_ignore_case(trimmed, "scene")?;
    if !(rest.is_empty() || rest.starts_with([':', '.', ' '])) {
        return None;
    }
    let heading = rest.trim_start_matches([':', '.', ' ']).trim().to_string();
    if heading.is_empty() {
        return Some((heading, None, None));
    }
    let cut = [", ", ". ", ": "]
        .iter()
        .filter_map(|sep| heading.find(sep))
        .min();
    let (location, description) = match cut {
        Some(at) => {
            let description = heading[at + 1..].trim();
            (
                heading[..at].trim().to_string(),
                (!description.is_empty()).then(|| description.to_string()),
            )
        }
        None => (heading.trim_end_matches('.').trim().to_string(), None),
    };
    Some((heading, Some(location), description))
}

#[derive(Default)]
pub(super) struct TranscriptParser {
    builder: ScriptBuilder,
    open: Option<OpenItem>,
    uncut_region: bool,
    uncut_region_used: bool,
}

impl TranscriptParser {
    pub(super) fn finish(mut self) -> ScriptBuilder {
        self.flush();
        self.builder
    }

    /// Starts a scene found by the caller (plain scripts have their own
    /// separators); pending text is flushed into the previous scene first.
    pub(super) fn start_scene(
        &mut self,
        heading: Option<String>,
        location: Option<String>,
        description: Option<String>,
        line: usize,
    ) {
        self.flush();
        self.builder
            .start_scene(heading, location, description, line, line);
    }

    pub(super) fn close_scene(&mut self) {
        self.flush();
        self.builder.close_scene();
    }

    pub(super) fn feed(&mut self, line: &SourceLine<'_>) {
        at_line(line.start_line);
        let text = line.text.trim();
        if text.is_empty() {
            self.flush();
            return;
        }
        if let Some(open) = &mut self.open
            && matches!(open.kind, ItemKind::Bracket)
        {
            open.append(text, line.end_line);
            if text.contains(']') {
                self.flush();
            }
            return;
        }
        let (text, paragraph_uncut) = strip_uncut_prefix(text);
        if text.starts_with('[') {
            self.flush();
            self.open = Some(OpenItem::new(
                ItemKind::Bracket,
                text,
                line,
                paragraph_uncut,
            ));
            if text.contains(']') {
                self.flush();
            }
            return;
        }
        if let Some(marker) = marker_kind(text) {
            self.flush();
            self.push_marker(
                marker,
                text,
                line.start_line,
                line.end_line,
                paragraph_uncut,
            );
            return;
        }
        if let Some((cue, rest)) = split_credit(text).or_else(|| split_speaker_prefix(text)) {
            self.flush();
            if is_credit_cue(cue) && !self.builder.has_scenes() {
                self.builder.title_page.push(TitleField {
                    key: cue.to_string(),
                    value: rest.to_string(),
                    source_line: line.start_line,
                });
            } else if is_credit_cue(cue) || is_note_cue(cue) {
                self.open = Some(OpenItem::new(
                    ItemKind::Bracket,
                    text,
                    line,
                    paragraph_uncut,
                ));
                self.flush();
            } else {
                self.open = Some(OpenItem::new(
                    ItemKind::Dialogue {
                        cue: cue.to_string(),
                    },
                    rest,
                    line,
                    paragraph_uncut,
                ));
            }
            return;
        }
        if text.starts_with('(') {
            let continues = self.open.as_ref().is_some_and(|open| {
                paren_balance(&open.text) > 0
                    || (matches!(open.kind, ItemKind::Dialogue { .. })
                        && !is_whole_parenthetical(text))
            });
            if !continues {
                self.flush();
                self.open = Some(OpenItem::new(ItemKind::Action, text, line, paragraph_uncut));
                return;
            }
        }
        match &mut self.open {
            Some(open) => {
                open.append(text, line.end_line);
                open.uncut |= paragraph_uncut;
            }
            None => self.open = Some(OpenItem::new(ItemKind::Action, text, line, paragraph_uncut)),
        }
    }

    fn push(&mut self, kind: LineKind, start: usize, end: usize, flagged: bool) {
        if self.uncut_region {
            self.uncut_region_used = true;
        }
        let uncut = flagged || self.uncut_region;
        self.builder.push(ScriptLine {
            kind,
            source_line_start: start,
            source_line_end: end,
            uncut,
        });
    }

    fn push_marker(
        &mut self,
        marker: MarkerKind,
        text: &str,
        start: usize,
        end: usize,
        uncut: bool,
    ) {
        self.push(
            LineKind::Marker {
                marker,
                text: collapse_whitespace(text),
            },
            start,
            end,
            uncut,
        );
        if marker != MarkerKind::TimeLapse {
            self.builder.close_scene();
        }
    }

    fn flush(&mut self) {
        let Some(item) = self.open.take() else { return };
        match item.kind {
            ItemKind::Dialogue { cue } => {
                let (name, mut directions) = split_cue_parenthetical(&cue);
                let names = split_speaker_names(&name);
                let group = names.len() == 1 && is_group_speaker(&names[0]);
                let (text, line_directions) = extract_directions(&item.text);
                directions.extend(line_directions);
                let dialogue = Dialogue {
                    speakers: names.iter().map(|n| normalise_speaker(n)).collect(),
                    raw_speaker: cue,
                    group,
                    text,
                    directions,
                    extensions: Vec::new(),
                    dual: false,
                    lyric: false,
                };
                self.push(
                    LineKind::Dialogue(dialogue),
                    item.start,
                    item.end,
                    item.uncut,
                );
            }
            ItemKind::Action => {
                let text = collapse_whitespace(&item.text);
                let is_title = !self.builder.has_scenes()
                    && self.builder.front_matter.is_empty()
                    && !self.builder.title_page.iter().any(|f| f.key == "Title");
                if is_title {
                    self.builder.title_page.push(TitleField {
                        key: "Title".into(),
                        value: text,
                        source_line: item.start,
                    });
                } else {
                    self.push(
                        LineKind::Action {
                            text: strip_outer_parens(&text),
                        },
                        item.start,
                        item.end,
                        item.uncut,
                    );
                }
            }
            ItemKind::Bracket => {
                let text = collapse_whitespace(&item.text);
                let inner = text
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .trim()
                    .to_string();
                if let Some((heading, location, description)) = scene_heading(&inner) {
                    if self.uncut_region_used {
                        self.uncut_region = false;
                        self.uncut_region_used = false;
                    }
                    let heading = (!heading.is_empty()).then_some(heading);
                    self.builder
                        .start_scene(heading, location, description, item.start, item.end);
                } else if let Some(marker) = marker_kind(&inner) {
                    self.push_marker(marker, &inner, item.start, item.end, item.uncut);
                } else {
                    match uncut_note(&inner) {
                        Some(UncutNote::Begins) => {
                            self.uncut_region = true;
                            self.uncut_region_used = false;
                            self.push(LineKind::Note { text: inner }, item.start, item.end, true);
                        }
                        Some(UncutNote::Ends) => {
                            self.push(LineKind::Note { text: inner }, item.start, item.end, true);
                            self.uncut_region = false;
                            self.uncut_region_used = false;
                        }
                        None => self.push(
                            LineKind::Note { text: inner },
                            item.start,
                            item.end,
                            item.uncut,
                        ),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Markup, ParseOptions, Script, ScriptFormat, parse_script};
    use super::*;

    const FRIENDS: &str = include_str!("../../../../tests/fixtures/text/friends_episode.txt");
    const FRIENDS_HTML: &str = include_str!("../../../../tests/fixtures/text/friends_episode.html");

    fn parse(text: &str) -> Script {
        let options = ParseOptions {
            format: Some(ScriptFormat::FriendsTranscript),
            ..Default::default()
        };
        parse_script(text, "test.txt", &options).unwrap()
    }

    /// (speakers, text, start, end) for every dialogue line of a scene.
    fn dialogue_of(script: &Script, scene: usize) -> Vec<(Vec<String>, String, usize, usize)> {
        script.scenes[scene]
            .lines
            .iter()
            .filter_map(|l| {
                l.dialogue().map(|d| {
                    (
                        d.speakers.clone(),
                        d.text.clone(),
                        l.source_line_start,
                        l.source_line_end,
                    )
                })
            })
            .collect()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fixture_title_page_and_scene_headings() {
        let script = parse(FRIENDS);
        assert_eq!(script.markup, Markup::Text);
        let fields: Vec<(&str, &str, usize)> = script
            .title_page
            .iter()
            .map(|f| (f.key.as_str(), f.value.as_str(), f.source_line))
            .collect();
        assert_eq!(
            fields,
            vec![
                ("Title", "The One With the Borrowed Canoe", 1),
                ("Written by", "Dana Whitfield", 3),
                ("Transcribed by", "K. Osei", 4),
            ]
        );
        let headings: Vec<(Option<&str>, Option<&str>, usize, usize)> = script
            .scenes
            .iter()
            .map(|s| {
                (
                    s.location.as_deref(),
                    s.description.as_deref(),
                    s.start_line,
                    s.end_line,
                )
            })
            .collect();
        assert_eq!(
            headings,
            vec![
                (
                    Some("The Daily Grind"),
                    Some("Wanda, Theo, and Priya are sitting on the couch."),
                    6,
                    28
                ),
                (
                    Some("Wanda's apartment"),
                    Some("Lena is painting the door."),
                    30,
                    41
                ),
                (None, None, 43, 44),
                (Some("The Daily Grind"), Some("Later."), 46, 53),
            ]
        );
        assert_eq!(
            script.scenes[0].heading.as_deref(),
            Some("The Daily Grind, Wanda, Theo, and Priya are sitting on the couch.")
        );
    }

    #[test]
    fn fixture_first_scene_dialogue_with_wrapping_and_groups() {
        let script = parse(FRIENDS);
        assert_eq!(
            dialogue_of(&script, 0),
            vec![
                (
                    names(&["Wanda"]),
                    "So I told him, if the canoe comes back with one more scratch, he is paying \
                     for the whole thing."
                        .into(),
                    9,
                    10
                ),
                (
                    names(&["Theo"]),
                    "That seems fair. Harsh, but fair.".into(),
                    11,
                    11
                ),
                (names(&["Priya"]), "Wait, whose canoe is it?".into(), 12, 12),
                (
                    names(&["Marcus"]),
                    "Mine! It's mine. And she has a name.".into(),
                    17,
                    17
                ),
                (names(&["Wanda", "Priya"]), "Oh no.".into(), 18, 18),
                (names(&["Marcus"]), "Her name is Gloria.".into(), 19, 19),
                (names(&["All"]), "Hi, Gloria.".into(), 20, 20),
                (
                    names(&["Theo"]),
                    "Okay, I have to go. Good luck with Gloria.".into(),
                    24,
                    25
                ),
            ]
        );
        let lines = &script.scenes[0].lines;
        let theo = lines[1].dialogue().unwrap();
        assert_eq!(theo.directions, vec!["sipping his coffee"]);
        let marcus = lines[4].dialogue().unwrap();
        assert_eq!(marcus.raw_speaker, "MARCUS");
        assert!(
            lines
                .iter()
                .filter_map(|l| l.dialogue())
                .filter(|d| d.group)
                .all(|d| d.speakers == ["All"])
        );
        assert_eq!(
            lines[3].kind,
            LineKind::Action {
                text: "Marcus enters carrying a paddle and looking very pleased with himself."
                    .into()
            }
        );
        assert_eq!(
            (lines[3].source_line_start, lines[3].source_line_end),
            (14, 15)
        );
    }

    #[test]
    fn fixture_markers_and_actions() {
        let script = parse(FRIENDS);
        let non_dialogue: Vec<(&LineKind, usize)> = script.scenes[0]
            .lines
            .iter()
            .filter(|l| l.dialogue().is_none())
            .map(|l| (&l.kind, l.source_line_start))
            .collect();
        assert_eq!(
            non_dialogue,
            vec![
                (
                    &LineKind::Action {
                        text:
                            "Marcus enters carrying a paddle and looking very pleased with himself."
                                .into()
                    },
                    14
                ),
                (
                    &LineKind::Marker {
                        marker: MarkerKind::TimeLapse,
                        text: "Time Lapse".into()
                    },
                    22
                ),
                (
                    &LineKind::Action {
                        text: "He exits.".into()
                    },
                    26
                ),
                (
                    &LineKind::Marker {
                        marker: MarkerKind::OpeningCredits,
                        text: "Opening Credits".into()
                    },
                    28
                ),
            ]
        );
        let last = script.scenes[3].lines.last().unwrap();
        assert_eq!(
            last.kind,
            LineKind::Marker {
                marker: MarkerKind::End,
                text: "End".into()
            }
        );
        assert_eq!(last.source_line_start, 53);
    }

    #[test]
    fn fixture_uncut_region_and_paragraph_flags() {
        let script = parse(FRIENDS);
        let flags: Vec<(usize, bool)> = script.scenes[1]
            .lines
            .iter()
            .map(|l| (l.source_line_start, l.uncut))
            .collect();
        assert_eq!(
            flags,
            vec![
                (32, false),
                (33, false),
                (34, false),
                (35, true),
                (36, true),
                (37, true),
                (38, true),
                (39, false),
                (41, false)
            ]
        );
        let flags: Vec<(usize, bool)> = script.scenes[2]
            .lines
            .iter()
            .map(|l| (l.source_line_start, l.uncut))
            .collect();
        assert_eq!(flags, vec![(43, false), (44, true)]);
        assert_eq!(
            script.scenes[2].lines[1].dialogue().unwrap().text,
            "Check the canoe."
        );
        let laughing = script.scenes[1].lines[7].dialogue().unwrap();
        assert_eq!(laughing.speakers, names(&["Wanda", "Lena"]));
        assert_eq!(laughing.directions, vec!["laughing"]);
    }

    #[test]
    fn fixture_honorific_pair_and_cue_parenthetical() {
        let script = parse(FRIENDS);
        let okafors = script.scenes[3].lines[1].dialogue().unwrap();
        assert_eq!(okafors.speakers, names(&["Mr. Okafor", "Mrs. Okafor"]));
        assert_eq!(okafors.directions, vec!["on the phone"]);
        assert_eq!(
            script.speakers(),
            names(&[
                "Wanda",
                "Theo",
                "Priya",
                "Marcus",
                "Lena",
                "Mr. Okafor",
                "Mrs. Okafor"
            ])
        );
    }

    #[test]
    fn html_fixture_matches_text_conventions() {
        let script = parse_script(FRIENDS_HTML, "canoe.html", &ParseOptions::default()).unwrap();
        assert_eq!(script.markup, Markup::Html);
        assert_eq!(script.format, ScriptFormat::FriendsTranscript);
        assert_eq!(
            script.title_page[0].value,
            "The One With the Borrowed Canoe"
        );
        assert_eq!(script.title_page[1].key, "Written by");
        assert_eq!(script.scenes.len(), 2);
        assert_eq!(
            script.scenes[0].location.as_deref(),
            Some("The Daily Grind")
        );
        assert_eq!(
            script.scenes[0].description.as_deref(),
            Some("Wanda & Theo are on the couch.")
        );
        assert_eq!(
            dialogue_of(&script, 0),
            vec![
                (
                    names(&["Wanda"]),
                    "I can\u{2019}t believe you lent it to him.".into(),
                    12,
                    13
                ),
                (names(&["Theo"]), "He said \"please.\"".into(), 14, 14),
                (
                    names(&["Priya"]),
                    "Did somebody say \u{201c}canoe\u{201d}? I have opinions.".into(),
                    16,
                    17
                ),
                (
                    names(&["Wanda"]),
                    "Everyone has opinions about the canoe.".into(),
                    18,
                    18
                ),
                (names(&["All"]), "Gloria!".into(), 20, 20),
            ]
        );
        assert_eq!(
            script.scenes[1].location.as_deref(),
            Some("Lena\u{2019}s studio")
        );
        assert_eq!(
            dialogue_of(&script, 1),
            vec![
                (names(&["Lena"]), "Finally, some peace.".into(), 23, 23),
                (
                    names(&["Marcus"]),
                    "Lena? It\u{2019}s me and Gloria.".into(),
                    24,
                    24
                ),
                (names(&["Lena"]), "Go away, both of you.".into(), 27, 27),
            ]
        );
        assert_eq!(
            script.scenes[0].lines[2].kind,
            LineKind::Action {
                text: "Priya enters.".into()
            }
        );
    }

    #[test]
    fn wrapped_scene_header_and_parenthetical_continuation() {
        let script = parse(
            "[Scene: A very long\nplace name, people.]\nAnn: Hello (waving\nboth hands) \
             there.\nBob: Hi.",
        );
        assert_eq!(
            script.scenes[0].location.as_deref(),
            Some("A very long place name")
        );
        assert_eq!(
            (script.scenes[0].start_line, script.scenes[0].end_line),
            (1, 5)
        );
        let ann = script.scenes[0].lines[0].dialogue().unwrap();
        assert_eq!(ann.text, "Hello there.");
        assert_eq!(ann.directions, vec!["waving both hands"]);
        assert_eq!(script.scenes[0].lines[0].source_line_end, 4);
    }

    #[test]
    fn dialogue_before_any_scene_opens_an_unnamed_scene() {
        let script = parse("Ann: Hi.\nBob: Hey.\n\n[Scene: Park]\nAnn: Bye.");
        assert_eq!(script.scenes.len(), 2);
        assert_eq!(script.scenes[0].heading, None);
        assert_eq!(script.scenes[1].location.as_deref(), Some("Park"));
        assert!(script.front_matter.is_empty());
    }

    #[test]
    fn markers_are_recognised_in_their_variants() {
        assert_eq!(
            marker_kind("COMMERCIAL BREAK"),
            Some(MarkerKind::CommercialBreak)
        );
        assert_eq!(marker_kind("[Time lapse.]"), Some(MarkerKind::TimeLapse));
        assert_eq!(
            marker_kind("(Opening Credits)"),
            Some(MarkerKind::OpeningCredits)
        );
        assert_eq!(marker_kind("The End"), Some(MarkerKind::End));
        assert_eq!(marker_kind("End of the line"), None);
    }

    #[test]
    fn note_lines_are_not_speakers() {
        let script = parse("[Scene: Park]\nNote: this was hard to transcribe.\nAnn: Hi.");
        assert_eq!(
            script.scenes[0].lines[0].kind,
            LineKind::Note {
                text: "Note: this was hard to transcribe.".into()
            }
        );
        assert_eq!(script.speakers(), vec!["Ann".to_string()]);
    }

    /// Issue 16: `İlker and Émile:` panicked (offsets from a lower-cased copy) and
    /// `İlker and Bob:` gave the speakers İlker and Ob; in text and in HTML.
    #[test]
    fn speakers_whose_lower_case_is_longer() {
        let text = "[Scene: Hall]\nİlker and Émile: Hello there.\nİlker and Bob: Hi.\n";
        let html = "<html><body><p>[Scene: Hall]</p><p>İlker and Émile: Hello there.</p>\n\
                    <p>İlker and Bob: Hi.</p></body></html>";
        for script in [parse(text), parse(html)] {
            let speakers: Vec<Vec<String>> = dialogue_of(&script, 0)
                .into_iter()
                .map(|(speakers, ..)| speakers)
                .collect();
            assert_eq!(speakers, vec![vec!["İlker", "Émile"], vec!["İlker", "Bob"]]);
        }
    }

    /// An action line that merely ends in a parenthetical is not wholly parenthetical: it lost
    /// its first and last characters (`Ann walks in (slowly)` became `nn walks in (slowly`),
    /// and panicked when the first was not ASCII.
    #[test]
    fn action_ending_in_a_parenthetical_keeps_its_text() {
        let script = parse("[Scene: Hall]\nÉric walks in (slowly)\n\nAnn: Hi.\n(He leaves.)\n");
        let actions: Vec<&LineKind> = script.scenes[0]
            .lines
            .iter()
            .map(|l| &l.kind)
            .filter(|k| matches!(k, LineKind::Action { .. }))
            .collect();
        assert_eq!(
            actions,
            vec![
                &LineKind::Action {
                    text: "Éric walks in (slowly)".into()
                },
                &LineKind::Action {
                    text: "He leaves.".into()
                }
            ]
        );
        assert_eq!(strip_outer_parens("(a) b (c)"), "(a) b (c)");
        assert_eq!(strip_outer_parens(" (a (b) c) "), "a (b) c");
    }

    /// `[SCENE: ...]` in any case; the heading is cut from the text itself.
    #[test]
    fn scene_heading_prefix_in_any_case() {
        assert_eq!(
            scene_heading("SCENE: Çay evi, İlker is there."),
            Some((
                "Çay evi, İlker is there.".to_string(),
                Some("Çay evi".to_string()),
                Some("İlker is there.".to_string())
            ))
        );
        assert_eq!(scene_heading("Scenery"), None);
    }
}
