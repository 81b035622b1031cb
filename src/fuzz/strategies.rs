//! Input generators shared by the property tests: text biased towards the characters parsers
//! trip over, unicode names, and mutations of valid files.

use proptest::prelude::*;
use proptest::sample::select;

/// Characters that have broken text code before: letters whose case mapping changes their
/// length or maps them onto ASCII (`İ`, `ı`, `ß`, `ﬅ`, the Kelvin sign), combining marks,
/// right-to-left text and its marks, emoji, BOMs, NUL, every kind of line end, and the
/// punctuation the formats are made of.
pub const TRICKY_CHARS: &[char] = &[
    'İ',
    'ı',
    'i',
    'I',
    'ß',
    'ẞ',
    'ﬅ',
    'ﬀ',
    'ŉ',
    '\u{212a}',
    'Σ',
    'ς',
    'ǅ',
    'Ω',
    '\u{301}',
    '\u{308}',
    '\u{200d}',
    '\u{200e}',
    '\u{200f}',
    '\u{202e}',
    'א',
    'ש',
    'ع',
    'ب',
    '😀',
    '👩',
    '\u{1f3fd}',
    '\u{feff}',
    '\u{0}',
    '\u{7f}',
    '\u{85}',
    '\u{2028}',
    '\u{a0}',
    '\r',
    '\n',
    '\t',
    ' ',
    ':',
    ',',
    '.',
    ';',
    '-',
    '–',
    '—',
    '>',
    '<',
    '/',
    '\\',
    '&',
    '#',
    '@',
    '!',
    '?',
    '~',
    '^',
    '*',
    '_',
    '=',
    '"',
    '\'',
    '’',
    '(',
    ')',
    '[',
    ']',
    '{',
    '}',
    '|',
    '`',
    '$',
    '%',
    '+',
    '0',
    '1',
    '5',
    '9',
    'A',
    'E',
    'N',
    'S',
    'T',
    'V',
    'a',
    'e',
    'n',
    's',
    't',
    'v',
    'x',
    'É',
    'é',
    'Ö',
    'ğ',
    'Ş',
    'Ç',
    'Ж',
    'ж',
    '中',
    '\u{10ffff}',
    '\u{fffd}',
];

/// A character: any at all, or (mostly) one of [`TRICKY_CHARS`].
pub fn tricky_char() -> impl Strategy<Value = char> {
    prop_oneof![
        1 => any::<char>(),
        3 => select(TRICKY_CHARS),
    ]
}

/// A string of up to `max` characters from [`tricky_char`].
pub fn tricky_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(tricky_char(), 0..=max).prop_map(|chars| chars.into_iter().collect())
}

/// Words the parsers look for without regard to case.
const KEYWORDS: &[&str] = &[
    "INT",
    "EXT",
    "EST",
    "I/E",
    "INT./EXT",
    "SCENE",
    "AND",
    "UNCUT",
    "NOTE",
    "TITLE",
    "CREDITS",
    "WRITTEN BY",
    "COMMERCIAL BREAK",
    "THE END",
    "TIME LAPSE",
    "WEBVTT",
    "DIALOGUE",
    "FORMAT",
    "EVENTS",
    "SCRIPT INFO",
    "START",
    "TEXT",
];

/// Spellings of a letter that case mapping relates to it: `ı` and `İ` (whose case mappings are
/// `I` and `i̇`), `ſ` (upper case `S`), the Kelvin sign (lower case `k`).
fn case_variants(c: char) -> &'static [&'static str] {
    match c {
        'I' => &["I", "i", "ı", "İ"],
        'S' => &["S", "s", "ſ"],
        'K' => &["K", "k", "\u{212a}"],
        'E' => &["E", "e", "É"],
        'A' => &["A", "a", "Å"],
        'T' => &["T", "t"],
        'N' => &["N", "n"],
        'X' => &["X", "x"],
        'C' => &["C", "c"],
        'D' => &["D", "d"],
        'L' => &["L", "l"],
        'O' => &["O", "o"],
        'R' => &["R", "r"],
        'U' => &["U", "u"],
        _ => &[""],
    }
}

/// One of the [`KEYWORDS`] with each letter in a random case (or a case-related letter), and
/// sometimes `ST` written as the ligature `ﬅ` (whose upper case is `ST`).
pub fn confusable_keyword() -> impl Strategy<Value = String> {
    (select(KEYWORDS), any::<u64>(), any::<bool>()).prop_map(|(word, choices, ligature)| {
        let mut choices = choices;
        let mut out: String = word
            .chars()
            .map(|c| {
                let variants = case_variants(c);
                if variants == [""] {
                    return c.to_string();
                }
                let pick = variants[(choices % variants.len() as u64) as usize];
                choices /= variants.len() as u64;
                pick.to_string()
            })
            .collect();
        if ligature {
            out = out.replacen("ST", "ﬅ", 1).replacen("st", "ﬆ", 1);
        }
        out
    })
}

/// A string made of whole lines of up to `max_lines` lines, each either tricky characters or
/// a line in the shape the formats use (`$` in a shape stands for tricky text, `%` for a
/// [`confusable_keyword`]), joined by a random choice of line ends.
pub fn tricky_lines(shapes: &'static [&'static str], max_lines: usize) -> BoxedStrategy<String> {
    let shaped = (select(shapes), tricky_text(12), confusable_keyword())
        .prop_map(|(shape, text, keyword)| shape.replace('$', &text).replace('%', &keyword));
    let line = prop_oneof![
        2 => tricky_text(24),
        3 => shaped,
        1 => Just(String::new()),
    ];
    (prop::collection::vec(line, 0..=max_lines), line_end())
        .prop_map(|(lines, end)| lines.join(end))
        .boxed()
}

/// `\n`, `\r\n` or a lone `\r`.
pub fn line_end() -> impl Strategy<Value = &'static str> {
    select(&["\n", "\r\n", "\r"][..])
}

/// One word of a name: an upper-case first letter (often one whose lower case is longer, or
/// that has none) and up to seven more letters, digits, combining marks excluded (they are not
/// letters, so a cue with them is not a speaker cue).
pub fn name_word() -> impl Strategy<Value = String> {
    const FIRST: &[char] = &[
        'A', 'B', 'Z', 'İ', 'I', 'É', 'Ö', 'Ş', 'Ç', 'Ñ', 'Ø', 'Ж', 'Σ', 'Ω', 'Ǆ', 'ẞ', 'Ա',
        '\u{212a}',
    ];
    const REST: &[char] = &[
        'a', 'n', 'd', 'l', 'k', 'e', 'r', 'ı', 'i', 'ß', 'ğ', 'é', 'ö', 'ç', 'ж', 'σ', 'ς', 'א',
        'ش', '中', 'L', 'K', 'E', 'R', 'İ', '1', '7', 'ﬅ',
    ];
    (select(FIRST), prop::collection::vec(select(REST), 0..8))
        .prop_map(|(first, rest)| std::iter::once(first).chain(rest).collect())
}

/// An edit to apply to a valid file.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Insert text at a position (a fraction of the length, in thousandths).
    Insert(u16, String),
    /// Delete up to `n` characters from a position.
    Delete(u16, u8),
    /// Replace one line with another of the file (or drop it).
    CopyLine(u16, u16),
    DropLine(u16),
    /// Upper-case or lower-case one line.
    Recase(u16, bool),
    /// Write a huge or odd number over a digit run.
    Number(u16, String),
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    let number = prop_oneof![
        Just("99999999999999999999999999".to_string()),
        Just("18446744073709551616".to_string()),
        Just("-1".to_string()),
        Just("".to_string()),
        Just("4294967296".to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<u32>().prop_map(|n| n.to_string()),
    ];
    prop_oneof![
        4 => (0..1000u16, tricky_text(8)).prop_map(|(at, text)| Mutation::Insert(at, text)),
        2 => (0..1000u16, 1..20u8).prop_map(|(at, n)| Mutation::Delete(at, n)),
        1 => (0..1000u16, 0..1000u16).prop_map(|(a, b)| Mutation::CopyLine(a, b)),
        1 => (0..1000u16).prop_map(Mutation::DropLine),
        1 => (0..1000u16, any::<bool>()).prop_map(|(at, up)| Mutation::Recase(at, up)),
        2 => (0..1000u16, number).prop_map(|(at, n)| Mutation::Number(at, n)),
    ]
}

fn char_position(text: &str, thousandths: u16) -> usize {
    let chars = text.chars().count();
    let index = chars * usize::from(thousandths) / 1000;
    text.char_indices()
        .nth(index)
        .map_or(text.len(), |(at, _)| at)
}

fn line_index(lines: usize, thousandths: u16) -> usize {
    lines * usize::from(thousandths) / 1000
}

pub fn apply(text: &str, mutation: &Mutation) -> String {
    let mut text = text.to_string();
    match mutation {
        Mutation::Insert(at, insert) => {
            let at = char_position(&text, *at);
            text.insert_str(at, insert);
        }
        Mutation::Delete(at, n) => {
            let start = char_position(&text, *at);
            let end = text[start..]
                .char_indices()
                .nth(usize::from(*n))
                .map_or(text.len(), |(k, _)| start + k);
            text.replace_range(start..end, "");
        }
        Mutation::CopyLine(from, to) => {
            let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
            let from = line_index(lines.len(), *from);
            let to = line_index(lines.len(), *to);
            lines[to] = lines[from].clone();
            text = lines.join("\n");
        }
        Mutation::DropLine(at) => {
            let mut lines: Vec<&str> = text.split('\n').collect();
            lines.remove(line_index(lines.len(), *at));
            text = lines.join("\n");
        }
        Mutation::Recase(at, upper) => {
            let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
            let at = line_index(lines.len(), *at);
            lines[at] = if *upper {
                lines[at].to_uppercase()
            } else {
                lines[at].to_lowercase()
            };
            text = lines.join("\n");
        }
        Mutation::Number(at, number) => {
            let start = char_position(&text, *at);
            let digits_at = text[start..]
                .find(|c: char| c.is_ascii_digit())
                .map(|k| start + k);
            if let Some(digits_at) = digits_at {
                let len = text[digits_at..]
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(text.len() - digits_at);
                text.replace_range(digits_at..digits_at + len, number);
            }
        }
    }
    text
}

/// One of `seeds` with up to `max` mutations, then its line ends rewritten and maybe a BOM.
pub fn near_valid(seeds: &'static [&'static str], max: usize) -> BoxedStrategy<String> {
    (
        select(seeds),
        prop::collection::vec(mutation(), 0..=max),
        line_end(),
        any::<bool>(),
    )
        .prop_map(|(seed, mutations, end, bom)| {
            let mut text = mutations
                .iter()
                .fold(seed.to_string(), |text, m| apply(&text, m));
            if end != "\n" {
                text = text.replace("\r\n", "\n").replace('\n', end);
            }
            if bom {
                text.insert(0, '\u{feff}');
            }
            text
        })
        .boxed()
}

/// UTF-8, UTF-16 LE and UTF-16 BE byte-order marks, and none.
const BYTE_ORDER_MARKS: &[&[u8]] = &[&[0xEF, 0xBB, 0xBF], &[0xFF, 0xFE], &[0xFE, 0xFF], &[]];

/// Arbitrary bytes, often a valid file's bytes with some of them overwritten or cut.
pub fn near_valid_bytes(seeds: &'static [&'static str]) -> BoxedStrategy<Vec<u8>> {
    let seeded = (
        select(seeds),
        prop::collection::vec((0..1000u16, any::<u8>()), 0..8),
        0..1000u16,
    )
        .prop_map(|(seed, edits, cut)| {
            let mut bytes = seed.as_bytes().to_vec();
            for (at, byte) in edits {
                if !bytes.is_empty() {
                    let at = bytes.len() * usize::from(at) / 1000;
                    bytes[at] = byte;
                }
            }
            let keep = bytes.len() - bytes.len() * usize::from(cut) / 4000;
            bytes.truncate(keep);
            bytes
        });
    let prefixed = (
        select(BYTE_ORDER_MARKS),
        prop::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(prefix, rest)| [prefix, &rest[..]].concat());
    prop_oneof![2 => seeded, 1 => prefixed].boxed()
}
