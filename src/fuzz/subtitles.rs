//! Subtitles: SRT, WebVTT and ASS/SSA (`text::subtitles`).

use proptest::prelude::*;
use proptest::sample::select;

use super::config;
use super::strategies::{near_valid, near_valid_bytes, tricky_lines};
use crate::text::subtitles::{
    SubtitleFormat, Subtitles, format_timestamp, parse_subtitles, parse_timestamp, read_subtitles,
};

const SEEDS: &[&str] = &[
    include_str!("../../tests/fixtures/text/sample.srt"),
    include_str!("../../tests/fixtures/text/sample.vtt"),
    include_str!("../../tests/fixtures/text/sample.ass"),
    "1\n00:00:01,000 --> 00:00:02,000\n<v İlker>Merhaba.</v>\n- İLKER: Hi. - ÉMILE: Hello.\n",
    "[Script Info]\nScriptType: v4.00\n\n[V4 Styles]\n\n[Events]\nFormat: Marked, Start, End, \
     Style, Name, Text\nDialogue: Marked=0,0:00:01.00,0:00:02.50,Default,İlker,{\\p1}m 0 0{\\p0}Hi\
     \\NThere\n",
];

/// Lines in the shapes of every subtitle format, `$` standing for random text.
const SHAPES: &[&str] = &[
    "WEBVTT",
    "WEBVTT $",
    "1",
    "$",
    "00:00:01,000 --> 00:00:02,000",
    "00:00:0$,000 --> 00:00:02,000",
    "00:01.000 --> 00:02.000 align:start",
    "$ --> $",
    "99999999999:00:00,000 --> 1:00:00,000",
    "00:00:02,000 --> 00:00:01,000",
    "NOTE $",
    "STYLE",
    "REGION",
    "<v $>$</v>",
    "<i>$</i>",
    "<00:00:01.500>$",
    "{\\an8}$",
    "- $",
    "$: $",
    "[Script Info]",
    "[V4+ Styles]",
    "[Events]",
    "Format: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text",
    "Format: $",
    "Format: Start, End, Text",
    "Dialogue: 0,0:00:01.00,0:00:02.00,Default,$,0,0,0,,$",
    "Dialogue: $",
    "Dialogue: 0,$,$,Default,,0,0,0,,{\\p1}$",
    "Comment: $",
    "$\\N$",
    "%",
    "% $",
    "[%]",
    "%: $",
    "%: 0,0:00:01.00,0:00:02.00,Default,,0,0,0,,$",
];

const FILE_NAMES: &[&str] = &["x.srt", "x.vtt", "x.ass", "x.ssa", "x", "x.SRT.txt"];

const FORMATS: &[Option<SubtitleFormat>] = &[
    None,
    Some(SubtitleFormat::Srt),
    Some(SubtitleFormat::WebVtt),
    Some(SubtitleFormat::Ass),
    Some(SubtitleFormat::Ssa),
];

fn check_subtitles(subtitles: &Subtitles) {
    assert!(!subtitles.cues.is_empty(), "Ok means some cues");
    for (index, cue) in subtitles.cues.iter().enumerate() {
        assert_eq!(cue.index, index);
        assert!(cue.start_ms <= cue.end_ms);
        assert!(!cue.text.is_empty() && !cue.lines.is_empty());
        assert_eq!(cue.turns.len(), cue.speakers.len());
        assert!(cue.source_line >= 1);
    }
    assert!(
        subtitles
            .cues
            .windows(2)
            .all(|pair| pair[0].start_ms <= pair[1].start_ms)
    );
}

fn parse_every_way(text: &str, file: &str) {
    for &format in FORMATS {
        if let Ok(subtitles) = parse_subtitles(text, file, format) {
            check_subtitles(&subtitles);
        }
    }
}

/// A cue as a generator makes it: times and displayed lines of plain words.
#[derive(Debug, Clone)]
struct GeneratedCue {
    start_ms: u64,
    end_ms: u64,
    lines: Vec<String>,
}

/// Words without markup, dashes, labels or digits-only lines, so each cue is one turn whose
/// text is exactly its lines joined.
fn cue_line() -> impl Strategy<Value = String> {
    const CHARS: &[char] = &[
        'a', 'b', 'Z', 'İ', 'ı', 'ß', 'é', 'É', 'ğ', 'Ж', 'Σ', 'ς', '中', 'א', 'ش', '😀',
        '\u{301}', '\u{200f}', '.', '!', '?', ',', '\'', '"',
    ];
    let word = prop::collection::vec(select(CHARS), 1..8)
        .prop_map(|chars| chars.into_iter().collect::<String>());
    prop::collection::vec(word, 1..5).prop_map(|words| words.join(" "))
}

/// Cues with times below 1000 hours (the formats' hour field holds at most 3 digits), in steps
/// of `step` ms.
fn cues(step: u64) -> impl Strategy<Value = Vec<GeneratedCue>> {
    let max = 999 * 3_600_000 / step;
    let cue = (0..max, 0..1000u64, prop::collection::vec(cue_line(), 1..4)).prop_map(
        move |(start, length, lines)| GeneratedCue {
            start_ms: start * step,
            end_ms: ((start + length) * step).min(max * step),
            lines,
        },
    );
    prop::collection::vec(cue, 1..12)
}

/// What parsing must give back: the cues sorted by start time (stably), each one turn.
fn expected(cues: &[GeneratedCue]) -> Vec<(u64, u64, Vec<String>, String)> {
    let mut sorted = cues.to_vec();
    sorted.sort_by_key(|cue| cue.start_ms);
    sorted
        .into_iter()
        .map(|cue| {
            let text = cue.lines.join(" ");
            (cue.start_ms, cue.end_ms, cue.lines, text)
        })
        .collect()
}

fn parsed(subtitles: &Subtitles) -> Vec<(u64, u64, Vec<String>, String)> {
    for cue in &subtitles.cues {
        assert_eq!(cue.turns, vec![cue.text.clone()]);
    }
    subtitles
        .cues
        .iter()
        .map(|c| (c.start_ms, c.end_ms, c.lines.clone(), c.text.clone()))
        .collect()
}

fn vtt_timestamp(ms: u64) -> String {
    format_timestamp(ms).replace(',', ".")
}

fn ass_timestamp(ms: u64) -> String {
    let (h, m, s, cs) = (
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000 / 10,
    );
    format!("{h}:{m:02}:{s:02}.{cs:02}")
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn subtitles_in_every_format_never_panic_on_arbitrary_lines(
        text in tricky_lines(SHAPES, 40),
        file in select(FILE_NAMES),
    ) {
        parse_every_way(&text, file);
    }

    #[test]
    fn subtitles_in_every_format_never_panic_on_mutated_files(
        text in near_valid(SEEDS, 8),
        file in select(FILE_NAMES),
    ) {
        parse_every_way(&text, file);
    }

    #[test]
    fn subtitle_bytes_decode_and_parse_or_fail_cleanly(
        bytes in near_valid_bytes(SEEDS),
        file in select(FILE_NAMES),
        format in select(FORMATS),
    ) {
        if let Ok((subtitles, _)) = read_subtitles(bytes.clone(), file, format) {
            check_subtitles(&subtitles);
        }
    }

    /// A timestamp parses exactly when its fields fit (hours up to 3 digits, minutes and
    /// seconds below 60), to the value the arithmetic says, however large the numbers.
    #[test]
    fn timestamps_with_any_numbers_parse_exactly_or_not_at_all(
        hours in prop_oneof![0..1200u64, any::<u64>()],
        minutes in prop_oneof![0..70u64, any::<u64>()],
        seconds in prop_oneof![0..70u64, any::<u64>()],
        millis in prop_oneof![0..1000u64, any::<u64>()],
        separator in select(&[",", "."][..]),
        with_hours in any::<bool>(),
    ) {
        let token = if with_hours {
            format!("{hours}:{minutes:02}:{seconds:02}{separator}{millis:03}")
        } else {
            format!("{minutes:02}:{seconds:02}{separator}{millis:03}")
        };
        // The first field may have 3 digits and any value; later ones are below 60.
        let fits = millis < 1000
            && seconds < 60
            && if with_hours { hours < 1000 && minutes < 60 } else { minutes < 1000 };
        let hours = if with_hours { hours } else { 0 };
        let want = fits.then(|| ((hours * 60 + minutes) * 60 + seconds) * 1000 + millis);
        prop_assert_eq!(parse_timestamp(&token), want, "{}", token);
    }

    /// An SRT file written from random cues parses back to the same cues.
    #[test]
    fn srt_written_from_cues_parses_back_to_them(cues in cues(1), crlf in any::<bool>()) {
        let mut text = String::new();
        for (k, cue) in cues.iter().enumerate() {
            let (start, end) = (format_timestamp(cue.start_ms), format_timestamp(cue.end_ms));
            text += &format!("{}\n{start} --> {end}\n{}\n\n", k + 1, cue.lines.join("\n"));
        }
        if crlf {
            text = text.replace('\n', "\r\n");
        }
        let subtitles = parse_subtitles(&text, "x.srt", None).unwrap();
        prop_assert_eq!(subtitles.format, SubtitleFormat::Srt);
        prop_assert_eq!(parsed(&subtitles), expected(&cues));
    }

    /// The same for WebVTT, with cue identifiers on some cues.
    #[test]
    fn webvtt_written_from_cues_parses_back_to_them(cues in cues(1), ids in any::<u16>()) {
        let mut text = "WEBVTT - fuzz\n\nNOTE a note\n\n".to_string();
        for (k, cue) in cues.iter().enumerate() {
            if ids >> (k % 16) & 1 == 1 {
                text += &format!("cue-{k}\n");
            }
            let (start, end) = (vtt_timestamp(cue.start_ms), vtt_timestamp(cue.end_ms));
            text += &format!("{start} --> {end} align:start\n{}\n\n", cue.lines.join("\n"));
        }
        let subtitles = parse_subtitles(&text, "x.vtt", None).unwrap();
        prop_assert_eq!(subtitles.format, SubtitleFormat::WebVtt);
        prop_assert_eq!(parsed(&subtitles), expected(&cues));
    }

    /// The same for ASS, whose times are in centiseconds and whose lines are joined by `\N`.
    #[test]
    fn ass_written_from_cues_parses_back_to_them(cues in cues(10)) {
        let mut text = "[Script Info]\nScriptType: v4.00+\n\n[Events]\nFormat: Layer, Start, End, \
                        Style, Name, MarginL, MarginR, MarginV, Effect, Text\n"
            .to_string();
        for cue in &cues {
            let (start, end) = (ass_timestamp(cue.start_ms), ass_timestamp(cue.end_ms));
            let lines = cue.lines.join("\\N");
            text += &format!("Dialogue: 0,{start},{end},Default,,0,0,0,,{lines}\n");
        }
        let subtitles = parse_subtitles(&text, "x.ass", None).unwrap();
        prop_assert_eq!(subtitles.format, SubtitleFormat::Ass);
        prop_assert_eq!(parsed(&subtitles), expected(&cues));
    }
}
