//! Subtitle cues that carry no dialogue, and the hearing-impaired markup inside the ones that do.
//!
//! Subtitle files people download hold more than the episode's dialogue: the credit of whoever
//! made or synced them, a subtitle site's advertisement (often appended as the file's last cue
//! with a time near the start), title cards, song lyrics, and, in hearing-impaired (SDH) files,
//! sound descriptions (`[door slams]`) and speaker labels (`JOHN:`). Matched against a script,
//! such cues are absorbed into the neighbouring line and stretch its scenario's span, so they are
//! screened out before alignment: each excluded cue keeps its kind and the reason, and the markup
//! is stripped from the cues that stay. A "previously on" recap is its announcing cue and the
//! clips after it, up to the first pause of [`RECAP_END_GAP_MS`] or a cue of another kind (the
//! theme song, a title card), at most [`RECAP_MAX_MS`] long: clips of earlier episodes are
//! dialogue, but not this episode's, and left in they pull its first lines to themselves.

use serde::{Deserialize, Serialize};

use super::{Cue, format_timestamp};
use crate::markup::collapse_whitespace;
use schemars::JsonSchema;

/// Why a cue is not dialogue.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum NonDialogue {
    /// Who made, synced, corrected or translated the subtitles.
    Credit,
    /// A subtitle site's or sponsor's message, or a cue placed out of time order in the file.
    Advert,
    /// The show's title, an episode or chapter card, "The End".
    TitleCard,
    /// Song lyrics (`♪ ... ♪`).
    Lyrics,
    /// Only bracketed sound descriptions or a speaker label (hearing-impaired subtitles).
    SoundDescription,
    /// The cue announcing a recap of earlier episodes ("Previously on ...").
    Recap,
}

impl NonDialogue {
    pub fn as_str(self) -> &'static str {
        match self {
            NonDialogue::Credit => "credit",
            NonDialogue::Advert => "advert",
            NonDialogue::TitleCard => "title_card",
            NonDialogue::Lyrics => "lyrics",
            NonDialogue::SoundDescription => "sound_description",
            NonDialogue::Recap => "recap",
        }
    }
}

/// A cue kept out of alignment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExcludedCue {
    /// [`Cue::index`]: its position among all the file's cues in time order.
    pub index: usize,
    pub start_ms: u64,
    pub end_ms: u64,
    /// 1-based line of the cue in the subtitle file.
    pub source_line: usize,
    /// The cue's text as parsed (markup tags removed, nothing else).
    pub text: String,
    pub kind: NonDialogue,
    pub reason: String,
}

/// A track's cues split into the dialogue to align (hearing-impaired markup stripped, indices
/// kept) and the cues kept out, in time order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Screened {
    pub dialogue: Vec<Cue>,
    pub excluded: Vec<ExcludedCue>,
}

impl Screened {
    /// Every cue kept as dialogue, as it is: what a track is when screening is off.
    pub fn unscreened(cues: Vec<Cue>) -> Self {
        Self {
            dialogue: cues,
            excluded: Vec::new(),
        }
    }
}

/// What `screen_cues` needs to know beyond the cues.
#[derive(Debug, Clone, Default)]
pub struct ScreenOptions {
    /// Texts that are title cards of this show (its title, for one); compared ignoring case,
    /// punctuation and spacing.
    pub titles: Vec<String>,
}

/// Phrases that mark a cue as the subtitles' own credit (lower case; matched inside the text).
const CREDIT_PHRASES: &[&str] = &[
    "subtitles by",
    "subtitle by",
    "subtitled by",
    "subs by",
    "synced by",
    "sync by",
    "synced and corrected",
    "sync and corrections",
    "corrected by",
    "resynced by",
    "resync by",
    "captioning by",
    "captioned by",
    "captions by",
    "captioning made possible",
    "closed captioning",
    "transcript by",
    "transcribed by",
    "translated by",
    "translation by",
    "ripped by",
    "encoded by",
];

/// Phrases of subtitle sites' and sponsors' messages (lower case).
const ADVERT_PHRASES: &[&str] = &[
    "opensubtitles",
    "addic7ed",
    "subscene",
    "podnapisi",
    "advertise your product",
    "become vip member",
    "remove all ads",
    "support us and",
    "downloaded from",
    "download from",
];

/// Web addresses: a cue naming one is a message from whoever published the file.
const ADDRESS_MARKS: &[&str] = &["www.", "http://", "https://"];
const ADDRESS_ENDINGS: &[&str] = &[".com", ".org", ".net", ".tv", ".io", ".info"];

/// Marks that open a recap, at the start of a cue (lower case).
const RECAP_OPENERS: &[&str] = &[
    "previously on",
    "last time on",
    "previously,",
    "previously:",
];

/// Whole-cue title cards besides the show's own titles (lower case, words only).
const TITLE_CARD_WORDS: &[&str] = &["episode", "chapter", "part"];
const CLOSING_CARDS: &[&str] = &["the end", "to be continued", "end credits"];

/// Recap openers count only this early in the file: later, "previously" is dialogue.
const RECAP_WINDOW_MS: u64 = 5 * 60 * 1000;

/// A recap's clips follow each other closely; a pause this long ends it.
pub const RECAP_END_GAP_MS: u64 = 2_000;

/// No recap runs longer than this from its opener.
pub const RECAP_MAX_MS: u64 = 120_000;

const LYRIC_MARKS: &[char] = &['♪', '♫', '♬', '♩'];

/// Splits `cues` (one file, in time order) into dialogue and excluded cues; see the module docs.
pub fn screen_cues(cues: Vec<Cue>, options: &ScreenOptions) -> Screened {
    let out_of_place = out_of_place_cues(&cues);
    let titles: Vec<String> = options.titles.iter().map(|t| words_of(t)).collect();
    let mut verdicts: Vec<Result<Cue, (NonDialogue, String)>> = cues
        .iter()
        .enumerate()
        .map(
            |(position, cue)| match out_of_place.iter().find(|(at, _)| *at == position) {
                Some((_, reason)) => Err((NonDialogue::Advert, reason.clone())),
                None => screen_one(cue.clone(), &titles),
            },
        )
        .collect();
    mark_recap_clips(&cues, &mut verdicts);
    let mut screened = Screened::default();
    for (cue, verdict) in cues.into_iter().zip(verdicts) {
        match verdict {
            Ok(cleaned) => screened.dialogue.push(cleaned),
            Err((kind, reason)) => screened.excluded.push(ExcludedCue {
                index: cue.index,
                start_ms: cue.start_ms,
                end_ms: cue.end_ms,
                source_line: cue.source_line,
                text: cue.text,
                kind,
                reason,
            }),
        }
    }
    screened
}

/// The clips after a recap's opener: see the module docs.
fn mark_recap_clips(cues: &[Cue], verdicts: &mut [Result<Cue, (NonDialogue, String)>]) {
    let Some(opener) = verdicts
        .iter()
        .position(|v| matches!(v, Err((NonDialogue::Recap, _))))
    else {
        return;
    };
    let opened_at = cues[opener].start_ms;
    let mut previous_end = cues[opener].end_ms;
    for at in opener + 1..cues.len() {
        let cue = &cues[at];
        let pause = cue.start_ms.saturating_sub(previous_end);
        if pause >= RECAP_END_GAP_MS
            || cue.start_ms.saturating_sub(opened_at) > RECAP_MAX_MS
            || verdicts[at].is_err()
        {
            return;
        }
        verdicts[at] = Err((
            NonDialogue::Recap,
            format!(
                "a clip of the recap that the cue at {} opens (it runs until a pause of {:.0} s \
                 or a cue that is not dialogue)",
                format_timestamp(opened_at),
                RECAP_END_GAP_MS as f64 / 1000.0
            ),
        ));
        previous_end = previous_end.max(cue.end_ms);
    }
}

/// One cue's verdict: its text without hearing-impaired markup, or why it is not dialogue.
fn screen_one(mut cue: Cue, titles: &[String]) -> Result<Cue, (NonDialogue, String)> {
    let lower = cue.text.to_lowercase();
    if let Some(phrase) = ADVERT_PHRASES.iter().find(|p| lower.contains(*p)) {
        return Err((
            NonDialogue::Advert,
            format!("holds \"{phrase}\", a site's message"),
        ));
    }
    if let Some(address) = web_address(&lower) {
        return Err((
            NonDialogue::Advert,
            format!("names a web address ({address})"),
        ));
    }
    if let Some(phrase) = CREDIT_PHRASES.iter().find(|p| lower.contains(*p)) {
        return Err((
            NonDialogue::Credit,
            format!("credits the subtitles' makers (\"{phrase}\")"),
        ));
    }
    if cue.start_ms < RECAP_WINDOW_MS
        && let Some(opener) = RECAP_OPENERS.iter().find(|o| lower.starts_with(*o))
    {
        return Err((
            NonDialogue::Recap,
            format!(
                "opens a recap of earlier episodes (\"{}\" at {})",
                opener.trim_end_matches([',', ':']),
                format_timestamp(cue.start_ms)
            ),
        ));
    }
    let original = cue.text.clone();
    let lines: Vec<String> = cue.lines.iter().filter_map(|l| strip_markup(l)).collect();
    if lines.is_empty() {
        return Err(markup_only(&original));
    }
    let words = words_of(&lines.join(" "));
    if let Some(card) = title_card(&words, titles) {
        return Err((NonDialogue::TitleCard, card));
    }
    let kept_turns: Vec<(String, Option<String>)> = cue
        .turns
        .iter()
        .zip(cue.speakers.iter().cloned().chain(std::iter::repeat(None)))
        .filter_map(|(turn, speaker)| Some((strip_markup(turn)?, speaker)))
        .collect();
    cue.text = lines.join(" ");
    cue.lines = lines;
    if !kept_turns.is_empty() {
        (cue.turns, cue.speakers) = kept_turns.into_iter().unzip();
    } else {
        cue.turns = vec![cue.text.clone()];
        cue.speakers = vec![None];
    }
    Ok(cue)
}

/// Why a cue with nothing left once its markup is gone is not dialogue.
fn markup_only(text: &str) -> (NonDialogue, String) {
    if text.contains(LYRIC_MARKS) || is_hash_lyric(text) {
        (NonDialogue::Lyrics, "only song lyrics (♪)".to_string())
    } else if text.contains(['[', '(']) {
        (
            NonDialogue::SoundDescription,
            "only a sound description in brackets".to_string(),
        )
    } else {
        (
            NonDialogue::SoundDescription,
            "only a speaker label".to_string(),
        )
    }
}

/// One displayed line (or turn) without sound descriptions, lyric passages and speaker labels;
/// `None` when nothing with a letter or digit is left.
pub fn strip_markup(line: &str) -> Option<String> {
    let mut text = remove_enclosed(line, '[', ']');
    text = remove_enclosed(&text, '(', ')');
    text = remove_lyrics(&text);
    if is_hash_lyric(&text) {
        return None;
    }
    let text = remove_speaker_labels(&collapse_whitespace(&text));
    let text = collapse_whitespace(&text);
    let body = text.trim_start_matches(['-', '\u{2013}', '\u{2014}', ' ']);
    body.chars()
        .any(char::is_alphanumeric)
        .then(|| text.to_string())
}

/// `text` without every `open ... close` passage (an unclosed one runs to the end of the line).
fn remove_enclosed(text: &str, open: char, close: char) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth = 0usize;
    for c in text.chars() {
        if c == open {
            depth += 1;
        } else if c == close && depth > 0 {
            depth -= 1;
            out.push(' ');
        } else if depth == 0 {
            out.push(c);
        }
    }
    out
}

/// `text` without `♪ ... ♪` passages; a line opened by a mark and never closed is all lyrics.
fn remove_lyrics(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    for c in text.chars() {
        if LYRIC_MARKS.contains(&c) {
            inside = !inside;
            out.push(' ');
        } else if !inside {
            out.push(c);
        }
    }
    out
}

/// Some files mark lyrics with `#` instead of a note: `# Happy birthday #`.
fn is_hash_lyric(text: &str) -> bool {
    let trimmed = text.trim();
    trimmed.starts_with("# ") || trimmed.ends_with(" #") || trimmed == "#"
}

/// Removes upper-case `NAME:` labels at the start of the text and of each `- ` turn.
fn remove_speaker_labels(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let (dash, after_dash) = split_turn_dash(rest);
        out.push_str(dash);
        rest = strip_label(after_dash).unwrap_or(after_dash);
        match next_turn(rest) {
            Some(at) => {
                out.push_str(&rest[..at]);
                rest = &rest[at..];
            }
            None => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

fn split_turn_dash(text: &str) -> (&str, &str) {
    let body = text.trim_start_matches(['-', '\u{2013}', '\u{2014}', ' ']);
    text.split_at(text.len() - body.len())
}

/// Where the next `- ` turn starts after a sentence end, if anywhere.
fn next_turn(text: &str) -> Option<usize> {
    text.match_indices(" - ")
        .map(|(at, _)| at + 1)
        .find(|&at| at > 0)
}

/// `JOHN: Hi.` -> `Hi.`; `DR. SMITH:`, `MAN 2:` and `MRS O'NEIL:` are labels, `Note: x` is not.
/// What a label is, the parser decides ([`super::is_speaker_label`]); here also a label alone
/// counts (the cue is then nothing but a label), and one of more than four words does not.
fn strip_label(text: &str) -> Option<&str> {
    let (label, rest) = text.split_once(':')?;
    (super::is_speaker_label(label.trim()) && label.split_whitespace().count() <= 4)
        .then(|| rest.trim_start())
}

/// The first web address in `lower`, if any.
fn web_address(lower: &str) -> Option<&str> {
    lower.split_whitespace().find(|word| {
        let word = word.trim_end_matches(['.', ',', '!', ')', '"']);
        ADDRESS_MARKS.iter().any(|m| word.contains(m))
            || ADDRESS_ENDINGS
                .iter()
                .any(|e| word.ends_with(e) && word.len() > e.len() && !word.starts_with(['.', '(']))
    })
}

/// Lower-case words joined by single spaces: what title cards are compared on.
fn words_of(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why `words` (of a whole cue) is a title card, if it is one.
fn title_card(words: &str, titles: &[String]) -> Option<String> {
    if words.is_empty() {
        return None;
    }
    if titles.iter().any(|t| !t.is_empty() && t == words) {
        return Some("the show's or the episode's title".to_string());
    }
    if CLOSING_CARDS.contains(&words) {
        return Some(format!("a closing card (\"{words}\")"));
    }
    let mut parts = words.split(' ');
    let (first, second, more) = (parts.next(), parts.next(), parts.next());
    if let (Some(first), Some(number), None) = (first, second, more)
        && TITLE_CARD_WORDS.contains(&first)
        && (number.chars().all(|c| c.is_ascii_digit()) || is_number_word(number))
    {
        return Some(format!("an episode or chapter card (\"{words}\")"));
    }
    None
}

fn is_number_word(word: &str) -> bool {
    const WORDS: &[&str] = &[
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "i", "ii",
        "iii", "iv", "v", "vi", "vii", "viii", "ix", "x",
    ];
    WORDS.contains(&word)
}

/// Cues whose place in the file is far from their place in time (subtitle sites append their
/// advert as the last cue of the file, timed near the start), each with the reason. Only a few
/// such cues are believed: when many disagree, the file's own order is simply not by time.
fn out_of_place_cues(cues: &[Cue]) -> Vec<(usize, String)> {
    const MOST_BELIEVED: usize = 3;
    let mut file_order: Vec<usize> = (0..cues.len()).collect();
    file_order.sort_by_key(|&at| cues[at].source_line);
    let tolerance = (cues.len() / 20).max(3);
    let found: Vec<(usize, String)> = file_order
        .iter()
        .enumerate()
        .filter(|&(file_rank, &time_rank)| file_rank.abs_diff(time_rank) > tolerance)
        .map(|(file_rank, &time_rank)| {
            (
                time_rank,
                format!(
                    "is cue {} of {} in the file but timed at {}, where cue {} belongs: a cue \
                     placed out of order (sites append their advert so)",
                    file_rank + 1,
                    cues.len(),
                    format_timestamp(cues[time_rank].start_ms),
                    time_rank + 1
                ),
            )
        })
        .collect();
    if found.len() > MOST_BELIEVED {
        Vec::new()
    } else {
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cue(index: usize, start_s: u64, text: &str) -> Cue {
        cue_at_line(index, start_s, text, 1 + 4 * index)
    }

    fn cue_at_line(index: usize, start_s: u64, text: &str, source_line: usize) -> Cue {
        Cue {
            index,
            source_id: None,
            start_ms: start_s * 1000,
            end_ms: start_s * 1000 + 2000,
            text: text.replace('\n', " "),
            lines: text.split('\n').map(str::to_string).collect(),
            turns: vec![text.replace('\n', " ")],
            speakers: vec![None],
            source_line,
        }
    }

    fn screen(texts: &[&str]) -> Screened {
        let cues = texts
            .iter()
            .enumerate()
            .map(|(i, t)| cue(i, 600 + 3 * i as u64, t))
            .collect();
        screen_cues(
            cues,
            &ScreenOptions {
                titles: vec!["Tears of Steel".to_string()],
            },
        )
    }

    fn kind_of(text: &str) -> Option<NonDialogue> {
        screen(&[text]).excluded.first().map(|e| e.kind)
    }

    #[test]
    fn each_kind_of_non_dialogue_cue_is_excluded_with_its_reason() {
        let cases = [
            ("Subtitles by explosiveskull", NonDialogue::Credit),
            ("Synced and corrected by VitoSilans", NonDialogue::Credit),
            (
                "Support us and become VIP member\nto remove all ads from www.opensubtitles.org",
                NonDialogue::Advert,
            ),
            ("Watch more at www.example.com", NonDialogue::Advert),
            ("TEARS OF STEEL", NonDialogue::TitleCard),
            ("Episode 3", NonDialogue::TitleCard),
            ("The End", NonDialogue::TitleCard),
            ("♪ Under the bridge we go ♪", NonDialogue::Lyrics),
            ("# Under the bridge we go #", NonDialogue::Lyrics),
            ("[door slams]", NonDialogue::SoundDescription),
            (
                "(GUNSHOTS)\n[SIRENS WAILING]",
                NonDialogue::SoundDescription,
            ),
        ];
        for (text, kind) in cases {
            let screened = screen(&[text]);
            assert_eq!(screened.dialogue.len(), 0, "{text:?} kept");
            let excluded = &screened.excluded[0];
            assert_eq!(excluded.kind, kind, "{text:?}: {}", excluded.reason);
            assert!(!excluded.reason.is_empty());
            assert_eq!(
                excluded.text,
                text.replace('\n', " "),
                "the original text is kept"
            );
        }
    }

    #[test]
    fn dialogue_stays_with_its_markup_stripped() {
        let screened = screen(&[
            "JOHN: We leave at dawn.",
            "- [sighs] Fine.\n- MAN 2: Not fine.",
            "♪ la la ♪ Turn that off!",
            "I checked www at work. Note: it is late.",
            "STOP",
            "Part of me agrees.",
        ]);
        let texts: Vec<&str> = screened.dialogue.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "We leave at dawn.",
                "- Fine. - Not fine.",
                "Turn that off!",
                "I checked www at work. Note: it is late.",
                "STOP",
                "Part of me agrees.",
            ]
        );
        assert!(screened.excluded.is_empty(), "{:?}", screened.excluded);
        assert_eq!(screened.dialogue[1].index, 1, "indices are kept");
    }

    #[test]
    fn a_recap_opener_counts_only_near_the_start() {
        let early = screen_cues(
            vec![cue(0, 2, "Previously on Tears of Steel...")],
            &ScreenOptions::default(),
        );
        assert_eq!(early.excluded[0].kind, NonDialogue::Recap);
        let late = screen_cues(
            vec![cue(0, 1200, "Previously on this ship, we had rules.")],
            &ScreenOptions::default(),
        );
        assert_eq!(late.dialogue.len(), 1);
    }

    #[test]
    fn a_recap_runs_from_its_opener_to_the_first_pause() {
        let cues = vec![
            cue(0, 1, "Previously on Hollybush Lane..."),
            cue(1, 3, "You said the bees would be gone."),
            cue(2, 5, "I never signed anything."),
            // The episode starts after a pause.
            cue(3, 12, "Right. It is seven o'clock."),
            cue(4, 14, "Sorry, sorry."),
        ];
        let screened = screen_cues(cues, &ScreenOptions::default());
        let recap: Vec<usize> = screened
            .excluded
            .iter()
            .filter(|e| e.kind == NonDialogue::Recap)
            .map(|e| e.index)
            .collect();
        assert_eq!(recap, [0, 1, 2]);
        assert!(
            screened.excluded[1].reason.contains("00:00:01,000"),
            "{:?}",
            screened.excluded
        );
        let kept: Vec<usize> = screened.dialogue.iter().map(|c| c.index).collect();
        assert_eq!(kept, [3, 4]);
    }

    #[test]
    fn an_advert_appended_last_but_timed_first_is_out_of_place() {
        let mut cues: Vec<Cue> = (0..30)
            .map(|i| cue_at_line(i + 1, 10 + 3 * i as u64, "A line of the show.", 10 + 4 * i))
            .collect();
        // Sorted by time it comes first; in the file it is the last cue.
        cues.insert(0, cue_at_line(0, 0, "Enjoy the show!", 10 + 4 * 31));
        let screened = screen_cues(cues, &ScreenOptions::default());
        assert_eq!(screened.excluded.len(), 1);
        assert_eq!(screened.excluded[0].kind, NonDialogue::Advert);
        assert!(
            screened.excluded[0]
                .reason
                .contains("cue 31 of 31 in the file"),
            "{}",
            screened.excluded[0].reason
        );
        assert_eq!(screened.dialogue.len(), 30);
    }

    #[test]
    fn a_file_in_its_own_order_is_not_a_list_of_adverts() {
        // Two halves swapped in the file: many cues out of place, so none is believed.
        let cues: Vec<Cue> = (0..40)
            .map(|i| cue_at_line(i, 10 + 3 * i as u64, "A line.", 1 + 4 * ((i + 20) % 40)))
            .collect();
        assert!(
            screen_cues(cues, &ScreenOptions::default())
                .excluded
                .is_empty()
        );
    }

    #[test]
    fn kinds_are_not_guessed_from_ordinary_lines() {
        for text in [
            "Who sent you?",
            "I part ways here.",
            "Episode? What episode?",
        ] {
            assert_eq!(kind_of(text), None, "{text}");
        }
    }
}
