//! Text plumbing shared by the script and subtitle parsers: physical line
//! splitting, whitespace collapsing, HTML entity decoding and an HTML-to-lines
//! converter that remembers which source lines every output line came from.

use serde::{Deserialize, Serialize};

use viss_engine::panic_context::at_line;

/// One logical line of text and the 1-based, inclusive range of physical
/// source lines it was built from. An empty `text` stands for a paragraph
/// break (a blank line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceLine<'a> {
    /// Borrowed from the file's text where it is a line of it as it stands (plain text);
    /// made where markup was taken out (HTML).
    pub text: std::borrow::Cow<'a, str>,
    pub start_line: usize,
    pub end_line: usize,
}

impl SourceLine<'_> {
    pub fn is_blank(&self) -> bool {
        self.text.trim().is_empty()
    }
}

/// Splits on `\n`, `\r\n` and lone `\r` (old Mac files still turn up among
/// fan transcripts). A trailing terminator does not produce an extra empty line.
pub fn split_physical_lines(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                lines.push(&text[start..i]);
                i += 1;
                start = i;
            }
            b'\r' => {
                lines.push(&text[start..i]);
                i += 1;
                if i < bytes.len() && bytes[i] == b'\n' {
                    i += 1;
                }
                start = i;
            }
            _ => i += 1,
        }
    }
    if start < bytes.len() {
        lines.push(&text[start..]);
    }
    lines
}

pub fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// One `SourceLine` per physical line, numbered from 1.
pub fn plain_source_lines(text: &str) -> Vec<SourceLine<'_>> {
    split_physical_lines(strip_bom(text))
        .into_iter()
        .enumerate()
        .map(|(i, line)| SourceLine {
            text: std::borrow::Cow::Borrowed(line),
            start_line: i + 1,
            end_line: i + 1,
        })
        .collect()
}

pub fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Collapses whitespace and removes the space that is left before
/// punctuation when an inline stage direction is cut out of a sentence.
pub fn tidy_spacing(text: &str) -> String {
    let collapsed = collapse_whitespace(text);
    let mut out = String::with_capacity(collapsed.len());
    let chars: Vec<char> = collapsed.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c == ' '
            && let Some(&next) = chars.get(i + 1)
        {
            let closes_word = matches!(next, ',' | '.' | '!' | '?' | ';' | ':');
            let is_ellipsis_start = next == '.' && chars.get(i + 2) == Some(&'.');
            if closes_word && !is_ellipsis_start {
                continue;
            }
        }
        out.push(c);
    }
    out
}

const NAMED_ENTITIES: &[(&str, char)] = &[
    ("amp", '&'),
    ("lt", '<'),
    ("gt", '>'),
    ("quot", '"'),
    ("apos", '\''),
    ("nbsp", '\u{a0}'),
    ("lrm", '\u{200e}'),
    ("rlm", '\u{200f}'),
    ("hellip", '\u{2026}'),
    ("mdash", '\u{2014}'),
    ("ndash", '\u{2013}'),
    ("lsquo", '\u{2018}'),
    ("rsquo", '\u{2019}'),
    ("ldquo", '\u{201c}'),
    ("rdquo", '\u{201d}'),
    ("bull", '\u{2022}'),
    ("middot", '\u{b7}'),
    ("copy", '\u{a9}'),
    ("reg", '\u{ae}'),
    ("trade", '\u{2122}'),
    ("deg", '\u{b0}'),
    ("frac12", '\u{bd}'),
    ("frac14", '\u{bc}'),
    ("frac34", '\u{be}'),
    ("iexcl", '\u{a1}'),
    ("iquest", '\u{bf}'),
    ("szlig", '\u{df}'),
    ("aacute", '\u{e1}'),
    ("agrave", '\u{e0}'),
    ("acirc", '\u{e2}'),
    ("auml", '\u{e4}'),
    ("ccedil", '\u{e7}'),
    ("eacute", '\u{e9}'),
    ("egrave", '\u{e8}'),
    ("ecirc", '\u{ea}'),
    ("euml", '\u{eb}'),
    ("iacute", '\u{ed}'),
    ("iuml", '\u{ef}'),
    ("ntilde", '\u{f1}'),
    ("oacute", '\u{f3}'),
    ("ocirc", '\u{f4}'),
    ("ouml", '\u{f6}'),
    ("uacute", '\u{fa}'),
    ("uuml", '\u{fc}'),
    ("Eacute", '\u{c9}'),
    ("Aacute", '\u{c1}'),
    ("Ntilde", '\u{d1}'),
];

/// Decodes named and numeric character references. Numeric references in
/// 128..=159 are read as Windows-1252 code points, because transcripts
/// exported from old Windows tools write `&#146;` meaning a right quote.
/// Unknown or malformed references are left as written.
pub fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let semicolon = after
            .char_indices()
            .take(12)
            .find(|&(_, c)| c == ';')
            .map(|(i, _)| i);
        let decoded = semicolon.and_then(|end| decode_entity_body(&after[..end]).map(|c| (c, end)));
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &after[end + 1..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn decode_entity_body(body: &str) -> Option<char> {
    if let Some(number) = body.strip_prefix('#') {
        // Digits only: Rust's integer parsing also takes a leading `+` (`&#+65;`).
        let code = if let Some(hex) = number
            .strip_prefix('x')
            .or_else(|| number.strip_prefix('X'))
        {
            hex.bytes().all(|b| b.is_ascii_hexdigit()).then_some(())?;
            u32::from_str_radix(hex, 16).ok()?
        } else {
            number.bytes().all(|b| b.is_ascii_digit()).then_some(())?;
            number.parse::<u32>().ok()?
        };
        if (0x80..=0x9f).contains(&code) {
            let byte = [code as u8];
            let (decoded, _) = encoding_rs::WINDOWS_1252.decode_without_bom_handling(&byte);
            return decoded.chars().next();
        }
        if code == 0 {
            return None;
        }
        return char::from_u32(code);
    }
    NAMED_ENTITIES
        .iter()
        .find(|(name, _)| *name == body)
        .or_else(|| {
            NAMED_ENTITIES.iter().find(|(name, _)| {
                name.eq_ignore_ascii_case(body) && name.chars().all(|c| c.is_ascii_lowercase())
            })
        })
        .map(|&(_, c)| c)
}

/// A cheap sniff: true when the text carries document-level HTML tags or
/// several paragraph/line-break tags near its start.
pub fn looks_like_html(text: &str) -> bool {
    let head: String = text
        .chars()
        .take(8192)
        .collect::<String>()
        .to_ascii_lowercase();
    if head.contains("<html") || head.contains("<!doctype html") || head.contains("<body") {
        return true;
    }
    let paragraph_tags =
        head.matches("<p>").count() + head.matches("<p ").count() + head.matches("<br").count();
    paragraph_tags >= 2
}

const BLOCK_TAGS: &[&str] = &[
    "p",
    "div",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "li",
    "ul",
    "ol",
    "tr",
    "table",
    "blockquote",
    "hr",
    "pre",
    "center",
    "dl",
    "dt",
    "dd",
    "body",
    "html",
    "section",
    "article",
];
const SKIPPED_ELEMENTS: &[&str] = &["head", "script", "style", "title"];

/// Turns an HTML page into logical lines. Block tags end a paragraph (emitted
/// as a blank `SourceLine`), `<br>` ends a line, and newlines inside a
/// paragraph are ordinary spaces (except inside `<pre>`), so a hard-wrapped
/// paragraph becomes one line whose range covers all of its source lines.
pub fn html_to_lines(html: &str) -> Vec<SourceLine<'static>> {
    let html = strip_bom(html);
    let mut converter = HtmlLines::default();
    let chars: Vec<char> = html.chars().collect();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        at_line(line);
        let c = chars[i];
        if c == '<' {
            if starts_with_at(&chars, i, "<!--") {
                let end = find_at(&chars, i + 4, "-->")
                    .map(|p| p + 3)
                    .unwrap_or(chars.len());
                line += count_newlines(&chars[i..end]);
                i = end;
                continue;
            }
            if let Some((tag, end)) = read_tag(&chars, i) {
                line += count_newlines(&chars[i..end]);
                i = end;
                if !tag.closing
                    && SKIPPED_ELEMENTS.contains(&tag.name.as_str())
                    && !tag.self_closing
                {
                    let closing = format!("</{}", tag.name);
                    let skip_end = find_at_ignore_case(&chars, i, &closing).unwrap_or(chars.len());
                    line += count_newlines(&chars[i..skip_end]);
                    i = skip_end;
                    continue;
                }
                if tag.name == "br" {
                    converter.line_break(line);
                } else if BLOCK_TAGS.contains(&tag.name.as_str()) {
                    converter.paragraph_break(line);
                    if tag.name == "pre" {
                        converter.in_pre = !tag.closing;
                    }
                }
                continue;
            }
        }
        if c == '\n' || c == '\r' {
            if c == '\r' && chars.get(i + 1) == Some(&'\n') {
                i += 1;
            }
            if converter.in_pre {
                converter.line_break(line);
            } else {
                converter.push_char(' ', line);
            }
            line += 1;
            i += 1;
            continue;
        }
        converter.push_char(c, line);
        i += 1;
    }
    converter.flush();
    while converter.lines.last().is_some_and(|l| l.text.is_empty()) {
        converter.lines.pop();
    }
    converter.lines
}

#[derive(Default)]
struct HtmlLines {
    lines: Vec<SourceLine<'static>>,
    buffer: String,
    start: Option<usize>,
    end: usize,
    in_pre: bool,
}

impl HtmlLines {
    fn push_char(&mut self, c: char, line: usize) {
        if !c.is_whitespace() {
            if self.start.is_none() {
                self.start = Some(line);
            }
            self.end = line;
        }
        self.buffer.push(c);
    }

    /// Returns whether a non-empty line was emitted.
    fn flush(&mut self) -> bool {
        let text = collapse_whitespace(&decode_entities(&self.buffer));
        self.buffer.clear();
        let start = self.start.take();
        match start {
            Some(start) if !text.is_empty() => {
                self.lines.push(SourceLine {
                    text: text.into(),
                    start_line: start,
                    end_line: self.end,
                });
                true
            }
            _ => false,
        }
    }

    fn push_blank(&mut self, line: usize) {
        if self.lines.last().is_some_and(|l| !l.text.is_empty()) {
            self.lines.push(SourceLine {
                text: std::borrow::Cow::Borrowed(""),
                start_line: line,
                end_line: line,
            });
        }
    }

    fn line_break(&mut self, line: usize) {
        if !self.flush() {
            self.push_blank(line);
        }
    }

    fn paragraph_break(&mut self, line: usize) {
        self.flush();
        self.push_blank(line);
    }
}

struct HtmlTag {
    name: String,
    closing: bool,
    self_closing: bool,
}

fn read_tag(chars: &[char], open: usize) -> Option<(HtmlTag, usize)> {
    let mut i = open + 1;
    let closing = chars.get(i) == Some(&'/');
    if closing {
        i += 1;
    }
    let first = *chars.get(i)?;
    if !(first.is_ascii_alphabetic() || first == '!') {
        return None;
    }
    let mut name = String::new();
    while let Some(&c) = chars.get(i) {
        if c.is_ascii_alphanumeric() || c == '!' {
            name.push(c.to_ascii_lowercase());
            i += 1;
        } else {
            break;
        }
    }
    let mut quote: Option<char> = None;
    while let Some(&c) = chars.get(i) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"') | (None, '\'') => quote = Some(c),
            (None, '>') => {
                let self_closing = i > 0 && chars[i - 1] == '/';
                return Some((
                    HtmlTag {
                        name,
                        closing,
                        self_closing,
                    },
                    i + 1,
                ));
            }
            (None, '<') => return None,
            _ => {}
        }
        i += 1;
    }
    None
}

fn starts_with_at(chars: &[char], at: usize, needle: &str) -> bool {
    needle
        .chars()
        .enumerate()
        .all(|(k, n)| chars.get(at + k) == Some(&n))
}

fn find_at(chars: &[char], from: usize, needle: &str) -> Option<usize> {
    (from..chars.len()).find(|&i| starts_with_at(chars, i, needle))
}

fn find_at_ignore_case(chars: &[char], from: usize, needle: &str) -> Option<usize> {
    let needle: Vec<char> = needle.chars().collect();
    (from..chars.len()).find(|&i| {
        needle.iter().enumerate().all(|(k, n)| {
            chars
                .get(i + k)
                .is_some_and(|c| c.to_ascii_lowercase() == *n)
        })
    })
}

fn count_newlines(chars: &[char]) -> usize {
    (0..chars.len())
        .filter(|&i| chars[i] == '\n' || (chars[i] == '\r' && chars.get(i + 1) != Some(&'\n')))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lf_crlf_and_lone_cr() {
        assert_eq!(
            split_physical_lines("a\r\nb\rc\nd"),
            vec!["a", "b", "c", "d"]
        );
        assert_eq!(split_physical_lines("a\n\nb\n"), vec!["a", "", "b"]);
        assert!(split_physical_lines("").is_empty());
    }

    #[test]
    fn plain_lines_drop_bom_and_number_from_one() {
        let lines = plain_source_lines("\u{feff}one\ntwo");
        assert_eq!(lines[0].text, "one");
        assert_eq!(lines[1].start_line, 2);
    }

    #[test]
    fn decodes_named_numeric_and_windows_1252_entities() {
        assert_eq!(decode_entities("Fish &amp; chips"), "Fish & chips");
        assert_eq!(decode_entities("don&#146;t"), "don\u{2019}t");
        assert_eq!(decode_entities("&#147;hi&#148;"), "\u{201c}hi\u{201d}");
        assert_eq!(decode_entities("caf&eacute; &#233; &#xE9;"), "café é é");
        assert_eq!(decode_entities("a&nbsp;b"), "a\u{a0}b");
        assert_eq!(
            decode_entities("AT&T &bogus; & done"),
            "AT&T &bogus; & done"
        );
    }

    /// Issue 16 audit: integer parsing takes a sign, so `&#+65;` decoded to `A`.
    #[test]
    fn signed_numeric_references_are_left_as_written() {
        for text in [
            "&#+65;", "&#x+41;", "&#-65;", "&#x-41;", "&#;", "&#x;", "&# 65;",
        ] {
            assert_eq!(decode_entities(text), text);
        }
        assert_eq!(decode_entities("&#65;&#x41;&#X41;"), "AAA");
    }

    #[test]
    fn tidy_spacing_removes_space_before_punctuation_but_keeps_ellipsis() {
        assert_eq!(tidy_spacing("Hi  there , you !"), "Hi there, you!");
        assert_eq!(tidy_spacing("Well ... okay"), "Well ... okay");
    }

    #[test]
    fn html_paragraphs_keep_source_ranges() {
        let html = "<html><head><title>Ignored\nTitle</title></head>\n<body>\n<p><b>Ann:</b> \
                    Hello\nthere &amp; welcome.</p>\n<p>Second<br>line</p>\n<!-- a\ncomment \
                    -->\n<p>Last</p></body></html>";
        let lines = html_to_lines(html);
        let texts: Vec<(&str, usize, usize)> = lines
            .iter()
            .map(|l| (&*l.text, l.start_line, l.end_line))
            .collect();
        assert_eq!(
            texts,
            vec![
                ("Ann: Hello there & welcome.", 4, 5),
                ("", 5, 5),
                ("Second", 6, 6),
                ("line", 6, 6),
                ("", 6, 6),
                ("Last", 9, 9),
            ]
        );
    }

    #[test]
    fn html_pre_keeps_newlines_and_literal_lt_survives() {
        let lines = html_to_lines("<pre>A: one\nB: two < three</pre>");
        let texts: Vec<&str> = lines
            .iter()
            .map(|l| &*l.text)
            .filter(|t| !t.is_empty())
            .collect();
        assert_eq!(texts, vec!["A: one", "B: two < three"]);
    }

    #[test]
    fn html_sniffing() {
        assert!(looks_like_html("<!DOCTYPE html><html>"));
        assert!(looks_like_html("<p>a</p><p>b</p>"));
        assert!(!looks_like_html("Ross: I <3 you"));
    }
}
