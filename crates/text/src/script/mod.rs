//! Transcripts and screenplays -> scenes of typed lines.
//!
//! Three source formats are understood (see [`ScriptFormat`]); each has its
//! own submodule. Every line keeps the 1-based range of physical lines it
//! came from in the original file, HTML pages included.

mod fountain;
mod friends;
mod plain;
mod speakers;

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::markup::{SourceLine, html_to_lines, looks_like_html, plain_source_lines};
use viss_engine::panic_context::at_line;

pub use speakers::{is_group_speaker, normalise_speaker, split_speaker_names};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScriptFormat {
    /// Fan transcripts: `[Scene: ...]` headers and hard-wrapped `Name: line` dialogue.
    #[serde(alias = "friends")]
    FriendsTranscript,
    /// Fountain 1.1 screenplays.
    Fountain,
    /// `NAME: line` scripts without scene headers.
    Plain,
}

impl fmt::Display for ScriptFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScriptFormat::FriendsTranscript => "friends-style transcript",
            ScriptFormat::Fountain => "Fountain screenplay",
            ScriptFormat::Plain => "plain NAME: line script",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Markup {
    Text,
    /// Tags were stripped and entities decoded before parsing.
    Html,
}

/// How a plain script is cut into scenes when it has no explicit separators
/// (`--- scene ---`, `***`, `INT.`/`EXT.` lines).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PlainSceneBreaks {
    /// Single-spaced scripts (some dialogue lines directly follow each other)
    /// break scenes at every blank line; double-spaced scripts, where blank
    /// lines are mere formatting, break at runs of two or more blank lines.
    #[default]
    Auto,
    BlankLines,
    /// Only explicit separators start scenes; otherwise the file is one scene.
    SeparatorsOnly,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ParseOptions {
    /// `None` means auto-detect with [`detect_format`].
    pub format: Option<ScriptFormat>,
    /// `None` means sniff for HTML.
    pub markup: Option<Markup>,
    pub plain_scene_breaks: PlainSceneBreaks,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Script {
    pub format: ScriptFormat,
    pub markup: Markup,
    /// Fountain title page, or the title and credit lines (`Written by: ...`)
    /// at the top of a transcript.
    pub title_page: Vec<TitleField>,
    /// Non-dialogue lines before the first scene.
    pub front_matter: Vec<ScriptLine>,
    pub scenes: Vec<Scene>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TitleField {
    pub key: String,
    pub value: String,
    pub source_line: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Scene {
    /// 0-based position in [`Script::scenes`].
    pub index: usize,
    /// The heading as written (without brackets or `Scene:`); `None` for a
    /// scene that started without one (e.g. dialogue after a commercial break).
    pub heading: Option<String>,
    /// Where the scene takes place: `Central Perk`, `KITCHEN`.
    pub location: Option<String>,
    /// The rest of the heading: who is there, or the time of day.
    pub description: Option<String>,
    pub start_line: usize,
    pub end_line: usize,
    pub lines: Vec<ScriptLine>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScriptLine {
    pub kind: LineKind,
    pub source_line_start: usize,
    pub source_line_end: usize,
    /// Material that only exists in an extended/"uncut" version of the episode.
    pub uncut: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LineKind {
    Dialogue(Dialogue),
    Action {
        text: String,
    },
    Transition {
        text: String,
    },
    /// Fountain `>centered<` text.
    Centered {
        text: String,
    },
    /// Fountain `~` lyrics outside a dialogue block.
    Lyric {
        text: String,
    },
    /// Bracketed transcriber notes such as `[Note: ...]`.
    Note {
        text: String,
    },
    Marker {
        marker: MarkerKind,
        text: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    OpeningCredits,
    CommercialBreak,
    ClosingCredits,
    End,
    TimeLapse,
    PageBreak,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Dialogue {
    /// Normalised names (`MONICA` -> `Monica`), one per speaker.
    pub speakers: Vec<String>,
    /// The speaker cue exactly as written, e.g. `MONICA and RACHEL` or `JOHN (V.O.)`.
    pub raw_speaker: String,
    /// `All:`, `Everyone:` and the like: a crowd, not a character.
    pub group: bool,
    /// The spoken words only, single-spaced, with stage directions removed.
    pub text: String,
    /// Parentheticals and bracketed actions found in the line, in order.
    pub directions: Vec<String>,
    /// Fountain character extensions such as `V.O.`, `O.S.`, `CONT'D`.
    pub extensions: Vec<String>,
    /// Fountain dual dialogue (`^`), set on both halves.
    pub dual: bool,
    /// The words are sung (Fountain `~` lines).
    pub lyric: bool,
}

impl ScriptLine {
    pub fn dialogue(&self) -> Option<&Dialogue> {
        match &self.kind {
            LineKind::Dialogue(dialogue) => Some(dialogue),
            _ => None,
        }
    }
}

impl Script {
    pub fn dialogue_count(&self) -> usize {
        self.scenes
            .iter()
            .flat_map(|s| &s.lines)
            .filter(|l| l.dialogue().is_some())
            .count()
    }

    /// Distinct individual speakers (crowds excluded) in order of first line.
    pub fn speakers(&self) -> Vec<String> {
        let mut seen = Vec::new();
        for dialogue in self
            .scenes
            .iter()
            .flat_map(|s| &s.lines)
            .filter_map(ScriptLine::dialogue)
        {
            if dialogue.group {
                continue;
            }
            for speaker in &dialogue.speakers {
                if !seen.contains(speaker) {
                    seen.push(speaker.clone());
                }
            }
        }
        seen
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum ScriptError {
    #[error(
        "{file}: no speaker lines found when read as a {format}; expected `Name: words` lines \
         (transcripts) or an upper-case character cue above its dialogue (Fountain). Check that \
         this is a script, or pass the format explicitly"
    )]
    NoDialogue { file: String, format: ScriptFormat },
    #[error("{file}:{line}: boneyard comment `/*` is never closed; add the matching `*/`")]
    UnclosedBoneyard { file: String, line: usize },
    #[error("{file}:{line}: note `[[` is never closed; add the matching `]]`")]
    UnclosedNote { file: String, line: usize },
}

/// Guesses the format from the text (HTML is stripped first when present).
pub fn detect_format(text: &str) -> ScriptFormat {
    let lines = if looks_like_html(text) {
        html_to_lines(text)
    } else {
        plain_source_lines(text)
    };
    detect_format_of_lines(&lines)
}

fn detect_format_of_lines(lines: &[SourceLine<'_>]) -> ScriptFormat {
    let mut scene_brackets = 0;
    let mut colon_speakers = 0;
    let mut transcript_markers = 0;
    let mut fountain_headings = 0;
    let mut fountain_cues = 0;
    for (i, line) in lines.iter().enumerate() {
        at_line(line.start_line);
        let text = line.text.trim();
        if text.is_empty() {
            continue;
        }
        let lower = text.to_ascii_lowercase();
        let previous_blank = i == 0 || lines[i - 1].is_blank();
        if lower.starts_with("[scene") {
            scene_brackets += 1;
        }
        if friends::marker_kind(text).is_some() {
            transcript_markers += 1;
        }
        if speakers::split_speaker_prefix(text).is_some_and(|(_, rest)| !rest.is_empty()) {
            colon_speakers += 1;
        }
        if previous_blank && fountain::is_scene_heading(text) {
            fountain_headings += 1;
        }
        let next_is_dialogue = lines.get(i + 1).is_some_and(|next| {
            !next.is_blank() && speakers::split_speaker_prefix(next.text.trim()).is_none()
        });
        if previous_blank && next_is_dialogue && fountain::is_character_cue(text) {
            fountain_cues += 1;
        }
    }
    let starts_with_title_page = lines
        .iter()
        .find(|l| !l.is_blank())
        .is_some_and(|l| fountain::is_title_page_start(l.text.trim()));
    let fountain_title_page = starts_with_title_page && fountain_cues + fountain_headings > 0;
    if scene_brackets > 0 && colon_speakers > 0 {
        ScriptFormat::FriendsTranscript
    } else if fountain_title_page || fountain_cues > colon_speakers {
        ScriptFormat::Fountain
    } else if colon_speakers > 0 {
        if transcript_markers > 0 {
            ScriptFormat::FriendsTranscript
        } else {
            ScriptFormat::Plain
        }
    } else if fountain_headings > 0 || starts_with_title_page {
        ScriptFormat::Fountain
    } else {
        ScriptFormat::Plain
    }
}

/// Parses a script. `file` is the display name used in error messages.
pub fn parse_script(text: &str, file: &str, options: &ParseOptions) -> Result<Script, ScriptError> {
    let markup = options.markup.unwrap_or(if looks_like_html(text) {
        Markup::Html
    } else {
        Markup::Text
    });
    let lines = match markup {
        Markup::Html => html_to_lines(text),
        Markup::Text => plain_source_lines(text),
    };
    let format = options
        .format
        .unwrap_or_else(|| detect_format_of_lines(&lines));
    let mut builder = match format {
        ScriptFormat::FriendsTranscript => friends::parse(&lines),
        ScriptFormat::Fountain => fountain::parse(&lines, file)?,
        ScriptFormat::Plain => plain::parse(&lines, options.plain_scene_breaks),
    };
    unify_speaker_spellings(&mut builder.scenes);
    let script = Script {
        format,
        markup,
        title_page: builder.title_page,
        front_matter: builder.front_matter,
        scenes: builder.scenes,
    };
    if script.dialogue_count() == 0 {
        return Err(ScriptError::NoDialogue {
            file: file.to_string(),
            format,
        });
    }
    Ok(script)
}

/// Makes every spelling of one name (compared case-insensitively) the same,
/// choosing the most frequent one, so `McCoy` and `MCCOY` do not become two
/// characters.
fn unify_speaker_spellings(scenes: &mut [Scene]) {
    let mut counts: HashMap<String, Vec<(String, usize)>> = HashMap::new();
    for speaker in scenes
        .iter()
        .flat_map(|s| &s.lines)
        .filter_map(ScriptLine::dialogue)
        .flat_map(|d| &d.speakers)
    {
        let spellings = counts.entry(speaker.to_lowercase()).or_default();
        match spellings.iter_mut().find(|(s, _)| s == speaker) {
            Some((_, n)) => *n += 1,
            None => spellings.push((speaker.clone(), 1)),
        }
    }
    let preferred: HashMap<String, String> = counts
        .into_iter()
        .filter(|(_, spellings)| spellings.len() > 1)
        .map(|(key, spellings)| {
            let mut best = &spellings[0];
            for candidate in &spellings[1..] {
                if candidate.1 > best.1 {
                    best = candidate;
                }
            }
            (key, best.0.clone())
        })
        .collect();
    if preferred.is_empty() {
        return;
    }
    for line in scenes.iter_mut().flat_map(|s| &mut s.lines) {
        if let LineKind::Dialogue(dialogue) = &mut line.kind {
            for speaker in &mut dialogue.speakers {
                if let Some(best) = preferred.get(&speaker.to_lowercase()) {
                    *speaker = best.clone();
                }
            }
        }
    }
}

/// Collects lines into scenes. Lines before the first scene go to the front
/// matter unless they are dialogue, which opens an unnamed scene.
#[derive(Debug, Default)]
pub(crate) struct ScriptBuilder {
    title_page: Vec<TitleField>,
    front_matter: Vec<ScriptLine>,
    scenes: Vec<Scene>,
    scene_open: bool,
}

impl ScriptBuilder {
    fn start_scene(
        &mut self,
        heading: Option<String>,
        location: Option<String>,
        description: Option<String>,
        start_line: usize,
        end_line: usize,
    ) {
        // The scene before is complete: its spare capacity would add up over a season.
        if let Some(done) = self.scenes.last_mut() {
            done.lines.shrink_to_fit();
        }
        self.scenes.push(Scene {
            index: self.scenes.len(),
            heading,
            location,
            description,
            start_line,
            end_line,
            lines: Vec::new(),
        });
        self.scene_open = true;
    }

    /// Ends the current scene; the next line that is not a marker opens an
    /// unnamed one.
    fn close_scene(&mut self) {
        self.scene_open = false;
    }

    fn has_scenes(&self) -> bool {
        !self.scenes.is_empty()
    }

    fn push(&mut self, line: ScriptLine) {
        if !self.scene_open {
            let is_marker = matches!(line.kind, LineKind::Marker { .. });
            if self.scenes.is_empty() && line.dialogue().is_none() {
                self.front_matter.push(line);
                return;
            }
            let marker_after_scene = is_marker && !self.scenes.is_empty();
            if !marker_after_scene {
                self.start_scene(
                    None,
                    None,
                    None,
                    line.source_line_start,
                    line.source_line_end,
                );
            }
        }
        let scene = self.scenes.last_mut().expect("a scene was just ensured");
        scene.end_line = scene.end_line.max(line.source_line_end);
        scene.lines.push(line);
    }

    fn last_line_mut(&mut self) -> Option<&mut ScriptLine> {
        if self.scene_open {
            self.scenes.last_mut().and_then(|s| s.lines.last_mut())
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRIENDS: &str = include_str!("../../../../tests/fixtures/text/friends_episode.txt");
    const FRIENDS_HTML: &str = include_str!("../../../../tests/fixtures/text/friends_episode.html");
    const FOUNTAIN: &str = include_str!("../../../../tests/fixtures/text/screenplay.fountain");
    const PLAIN: &str = include_str!("../../../../tests/fixtures/text/plain_script.txt");

    #[test]
    fn detects_each_fixture_format() {
        assert_eq!(detect_format(FRIENDS), ScriptFormat::FriendsTranscript);
        assert_eq!(detect_format(FRIENDS_HTML), ScriptFormat::FriendsTranscript);
        assert_eq!(detect_format(FOUNTAIN), ScriptFormat::Fountain);
        assert_eq!(detect_format(PLAIN), ScriptFormat::Plain);
    }

    #[test]
    fn detects_small_inline_examples() {
        assert_eq!(
            detect_format("Title: X\n\nINT. HOUSE - DAY\n\nA cat sits."),
            ScriptFormat::Fountain
        );
        assert_eq!(detect_format("ANN: Hi.\nBOB: Hello."), ScriptFormat::Plain);
        assert_eq!(
            detect_format("Ann: Hi.\n\nCommercial Break\n\nBob: Hello."),
            ScriptFormat::FriendsTranscript
        );
        assert_eq!(
            detect_format("\nANN\nHi there.\n\nBOB\nHello.\n"),
            ScriptFormat::Fountain
        );
    }

    #[test]
    fn no_dialogue_is_an_error_naming_the_file() {
        let err = parse_script(
            "Just some prose.\n\nMore prose.",
            "scripts/e01.txt",
            &ParseOptions::default(),
        )
        .unwrap_err();
        assert_eq!(
            err,
            ScriptError::NoDialogue {
                file: "scripts/e01.txt".into(),
                format: ScriptFormat::Plain
            }
        );
        assert!(
            err.to_string()
                .starts_with("scripts/e01.txt: no speaker lines found")
        );
    }

    #[test]
    fn format_can_be_forced() {
        let options = ParseOptions {
            format: Some(ScriptFormat::Plain),
            ..Default::default()
        };
        let script = parse_script("[Scene: Park]\nAnn: Hi.\nBob: Yo.", "x", &options).unwrap();
        assert_eq!(script.format, ScriptFormat::Plain);
    }

    #[test]
    fn speaker_spellings_are_unified_across_the_script() {
        let script = parse_script(
            "McKAY: One.\nMcKay: Two.\nMcKay: Three.\nBo: Four.",
            "x",
            &ParseOptions::default(),
        )
        .unwrap();
        assert_eq!(
            script.speakers(),
            vec!["McKay".to_string(), "Bo".to_string()]
        );
        let raw: Vec<&str> = script.scenes[0]
            .lines
            .iter()
            .filter_map(|l| l.dialogue())
            .map(|d| d.raw_speaker.as_str())
            .collect();
        assert_eq!(raw, vec!["McKAY", "McKay", "McKay", "Bo"]);
    }

    #[test]
    fn script_round_trips_through_json() {
        let script = parse_script(FRIENDS, "friends.txt", &ParseOptions::default()).unwrap();
        let json = serde_json::to_string(&script).unwrap();
        let back: Script = serde_json::from_str(&json).unwrap();
        assert_eq!(back, script);
        assert!(json.contains("\"type\":\"dialogue\""));
    }

    #[test]
    fn parse_options_reject_unknown_fields() {
        assert!(serde_json::from_str::<ParseOptions>(r#"{"formatt": "plain"}"#).is_err());
        let options: ParseOptions = serde_json::from_str(r#"{"format": "fountain"}"#).unwrap();
        assert_eq!(options.format, Some(ScriptFormat::Fountain));
    }

    /// The parsers tell `panic_context` which line they are on, so a panic names it: here the
    /// panic comes after the parser's last line (`Bob: Yo.`, line 3 of the text, 4 of the HTML).
    #[test]
    fn a_panic_while_parsing_names_the_line_reached() {
        use viss_engine::panic_context::catch_parse_panic;
        let options = ParseOptions::default();
        let text = "[Scene: A]\nAnn: Hi.\nBob: Yo.\n";
        let error = catch_parse_panic("raw/e01.txt", || {
            parse_script(text, "raw/e01.txt", &options).unwrap();
            panic!("boom")
        })
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "panic while parsing raw/e01.txt (line 3): boom"
        );
        let html = "<html><body>\n<p>[Scene: A]</p>\n<p>Ann: Hi.</p>\n<p>Bob: Yo.</p>\n</body>";
        let error = catch_parse_panic("raw/e01.html", || {
            parse_script(html, "raw/e01.html", &options).unwrap();
            panic!("boom")
        })
        .unwrap_err();
        assert_eq!(error.line, Some(4));
    }
}
