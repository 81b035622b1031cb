//! Transcripts and screenplays: `text::script`, `text::markup` and `text::encoding`.

use proptest::prelude::*;
use proptest::sample::select;

use super::config;
use super::strategies::{name_word, near_valid, near_valid_bytes, tricky_lines, tricky_text};
use crate::text::encoding::decode_text;
use crate::text::markup::{decode_entities, html_to_lines, split_physical_lines};
use crate::text::script::{
    Markup, ParseOptions, PlainSceneBreaks, Script, ScriptFormat, normalise_speaker, parse_script,
    split_speaker_names,
};

const SEEDS: &[&str] = &[
    include_str!("../../tests/fixtures/text/friends_episode.txt"),
    include_str!("../../tests/fixtures/text/friends_episode.html"),
    include_str!("../../tests/fixtures/text/screenplay.fountain"),
    include_str!("../../tests/fixtures/text/plain_script.txt"),
    include_str!("../../tests/fixtures/text/scenario_scene.txt"),
    crate::demo::plan::FOUNTAIN,
    crate::demo::plan::SCRIPT,
    "[Scene: Çay evi]\nİlker and Émile: Hello there.\nİlker and Bob: Hi.\n(Éric walks in.)\n",
    "\nINT. MUTFAK - GECE\n\nİLKER & ÉMILE\n(whispering)\nMerhaba.\n\nSTRASSE ^\nJa.\n",
];

/// Lines in the shapes of every script format, `$` standing for random text.
const SHAPES: &[&str] = &[
    "[Scene: $]",
    "[Scene: $",
    "Monica: $",
    "İlker and Émile: $",
    "$ and $: $",
    "Ross (on phone): $",
    "MONICA",
    "İLKER & ÉMILE",
    "$ ^",
    "@$",
    "INT. $ - DAY",
    "ext. $ #1#",
    ".$",
    "!$",
    "~$",
    ">$<",
    ">$",
    "$ TO:",
    "($)",
    "$ ($)",
    "[[ $ ]]",
    "[[ $",
    "/* $",
    "$ */",
    "===",
    "# $",
    "= $",
    "Title: $",
    "    $",
    "Written by: $",
    "Commercial Break",
    "[Time Lapse]",
    "{Uncut} $",
    "[uncut $]",
    "[$ uncut ends]",
    "--- $ ---",
    "<p>$</p>",
    "<br>$",
    "<html><body>$",
    "<!-- $",
    "<script>$",
    "&#$;",
    "&#x$;",
    "&amp;$",
    "%. $",
    "% $",
    "%",
    "[%: $]",
    "%: $",
    "$ % $: $",
    "{%} $",
];

const FORMATS: &[Option<ScriptFormat>] = &[
    None,
    Some(ScriptFormat::FriendsTranscript),
    Some(ScriptFormat::Fountain),
    Some(ScriptFormat::Plain),
];

/// Parses `text` as every format and checks what holds for any result.
fn parse_every_way(text: &str, markup: Option<Markup>, breaks: PlainSceneBreaks) {
    for &format in FORMATS {
        let options = ParseOptions {
            format,
            markup,
            plain_scene_breaks: breaks,
        };
        if let Ok(script) = parse_script(text, "fuzz.txt", &options) {
            check_script(&script);
        }
    }
}

fn check_script(script: &Script) {
    assert!(script.dialogue_count() > 0, "Ok means some dialogue");
    for (index, scene) in script.scenes.iter().enumerate() {
        assert_eq!(scene.index, index);
        assert!(scene.start_line >= 1 && scene.start_line <= scene.end_line);
        for line in scene.lines.iter().chain(&script.front_matter) {
            assert!(line.source_line_start >= 1);
            assert!(line.source_line_start <= line.source_line_end);
        }
    }
}

fn markup() -> impl Strategy<Value = Option<Markup>> {
    select(&[None, Some(Markup::Text), Some(Markup::Html)][..])
}

fn breaks() -> impl Strategy<Value = PlainSceneBreaks> {
    select(
        &[
            PlainSceneBreaks::Auto,
            PlainSceneBreaks::BlankLines,
            PlainSceneBreaks::SeparatorsOnly,
        ][..],
    )
}

fn friends(text: &str) -> Script {
    let options = ParseOptions {
        format: Some(ScriptFormat::FriendsTranscript),
        ..ParseOptions::default()
    };
    parse_script(text, "fuzz.txt", &options).unwrap_or_else(|e| panic!("{e}: {text:?}"))
}

fn first_speakers(script: &Script) -> Vec<String> {
    script
        .scenes
        .iter()
        .flat_map(|s| &s.lines)
        .find_map(|l| l.dialogue())
        .map(|d| d.speakers.clone())
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn scripts_in_every_format_never_panic_on_arbitrary_lines(
        text in tricky_lines(SHAPES, 40),
        markup in markup(),
        breaks in breaks(),
    ) {
        parse_every_way(&text, markup, breaks);
    }

    #[test]
    fn scripts_in_every_format_never_panic_on_mutated_scripts(
        text in near_valid(SEEDS, 8),
        markup in markup(),
        breaks in breaks(),
    ) {
        parse_every_way(&text, markup, breaks);
    }

    #[test]
    fn script_bytes_decode_or_fail_cleanly_and_then_parse(bytes in near_valid_bytes(SEEDS)) {
        if let Ok((text, _)) = decode_text(&bytes, "fuzz.txt") {
            let plain_utf8 = !bytes.starts_with(&[0xEF, 0xBB, 0xBF])
                && !bytes.starts_with(&[0xFF, 0xFE])
                && !bytes.starts_with(&[0xFE, 0xFF]);
            if let (true, Ok(utf8)) = (plain_utf8, std::str::from_utf8(&bytes)) {
                prop_assert_eq!(&text, utf8);
            }
            parse_every_way(&text, None, PlainSceneBreaks::Auto);
        }
    }

    /// `A and B` is exactly the speakers A and B, for any one-word unicode names, with the
    /// separator in any case; so are `A, B and C` and `A & B`.
    #[test]
    fn a_cue_naming_several_speakers_splits_into_exactly_those_names(
        a in name_word(),
        b in name_word(),
        c in name_word(),
        and in select(&[" and ", " AND ", " And ", " & ", " aNd "][..]),
    ) {
        prop_assert_eq!(split_speaker_names(&format!("{a}{and}{b}")), vec![a.clone(), b.clone()]);
        let three = vec![a.clone(), b.clone(), c.clone()];
        prop_assert_eq!(split_speaker_names(&format!("{a}, {b}{and}{c}")), three);
        prop_assert_eq!(split_speaker_names(&format!("{a}/{b}")), vec![a.clone(), b.clone()]);
    }

    /// Through the whole parser: a transcript line `A and B: ...` (in text and in HTML) and a
    /// Fountain cue `A & B` speak as A and B, normalised.
    #[test]
    fn speakers_of_a_generated_cue_are_its_names_in_every_format(
        a in name_word(),
        b in name_word(),
        end in select(&["\n", "\r\n", "\r"][..]),
    ) {
        let (na, nb) = (normalise_speaker(&a), normalise_speaker(&b));
        prop_assume!(na.to_lowercase() != nb.to_lowercase());
        let text = format!("[Scene: Hall]{end}{a} and {b}: Hello there.{end}");
        prop_assert_eq!(first_speakers(&friends(&text)), vec![na.clone(), nb.clone()]);
        let html = format!(
            "<html><body><p>[Scene: Hall]</p>{end}<p>{a} and {b}: Hello there.</p></body></html>"
        );
        prop_assert_eq!(first_speakers(&friends(&html)), vec![na.clone(), nb.clone()]);

        let (ua, ub) = (a.to_uppercase(), b.to_uppercase());
        let (na, nb) = (normalise_speaker(&ua), normalise_speaker(&ub));
        prop_assume!(na.to_lowercase() != nb.to_lowercase());
        let cue = format!("{ua} & {ub}");
        let fountain = format!("{end}INT. HALL - DAY{end}{end}{cue}{end}Hello there.{end}");
        let options = ParseOptions {
            format: Some(ScriptFormat::Fountain),
            ..ParseOptions::default()
        };
        let script = parse_script(&fountain, "fuzz.fountain", &options);
        let script = script.unwrap_or_else(|e| panic!("{e}: {fountain:?}"));
        prop_assert_eq!(first_speakers(&script), vec![na.clone(), nb.clone()]);
    }

    /// Splitting into physical lines loses nothing but the line ends.
    #[test]
    fn physical_lines_rejoin_to_the_text(text in tricky_text(200)) {
        let unified = text.replace("\r\n", "\n").replace('\r', "\n");
        let expected = unified.strip_suffix('\n').unwrap_or(&unified);
        prop_assert_eq!(split_physical_lines(&text).join("\n"), expected);
    }

    /// A numeric character reference decodes to its character (or, in 128..=159, to the
    /// Windows-1252 one), and is left as written when it is not one: zero, a surrogate, too
    /// large, or not all digits.
    #[test]
    fn numeric_references_decode_exactly(
        code in prop_oneof![0..0x11_0000u32, any::<u32>()],
        hex in any::<bool>(),
        sign in select(&["", "", "+", "-", " "][..]),
    ) {
        let text = if hex { format!("&#x{sign}{code:X};") } else { format!("&#{sign}{code};") };
        let decoded = decode_entities(&text);
        if !sign.is_empty() || code == 0 {
            prop_assert_eq!(decoded, text);
        } else if !(0x80..=0x9f).contains(&code) {
            let want = char::from_u32(code).map_or(text, String::from);
            prop_assert_eq!(decoded, want);
        }
    }

    #[test]
    fn html_and_entities_never_panic(text in tricky_lines(SHAPES, 30)) {
        let _ = decode_entities(&text);
        for line in html_to_lines(&text) {
            prop_assert!(line.start_line >= 1 && line.start_line <= line.end_line);
        }
    }
}
