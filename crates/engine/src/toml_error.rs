//! A TOML file's syntax or type error as a person reads it: the place as `file:line:column`,
//! the message, and the offending line with a caret under the spot, as compilers print theirs.
//! The lines after the first are a gutter block (`  3 | ...`), which
//! [`crate::redact::for_terminal_message`] keeps as lines while it escapes every other new line.

use crate::redact::for_terminal;

/// `error` (from parsing `text`, the contents of `file`) in the form the module describes.
pub fn render(file: &str, text: &str, error: &toml::de::Error) -> String {
    let message: Vec<&str> = error
        .message()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    let message = message.join("; ");
    let Some(span) = error.span() else {
        return format!("{file}: {message}");
    };
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |at| at + 1);
    let line_number = text[..line_start].matches('\n').count() + 1;
    let content = text[line_start..].split('\n').next().unwrap_or_default();
    let content = content.strip_suffix('\r').unwrap_or(content);
    let column = text[line_start..start].chars().count() + 1;
    // The caret sits under the character as the terminal shows the line, escapes included.
    let shown_before = for_terminal(&text[line_start..start]).chars().count();
    let end = span.end.min(line_start + content.len()).max(start);
    let shown_width = for_terminal(&text[start..end]).chars().count().max(1);
    let gutter = " ".repeat(line_number.to_string().len());
    format!(
        "{file}:{line_number}:{column}: {message}\n {gutter} |\n {line_number} | {}\n {gutter} | \
         {}{}",
        for_terminal(content),
        " ".repeat(shown_before),
        "^".repeat(shown_width)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::for_terminal_message;

    fn error_of(text: &str) -> toml::de::Error {
        toml::from_str::<toml::Table>(text).unwrap_err()
    }

    #[test]
    fn a_syntax_error_names_the_place_and_shows_the_line_with_a_caret() {
        let text = "[params]\nalpha = 0.8\nwindow = \"3\n";
        let shown = render("stages/align.toml", text, &error_of(text));
        let lines: Vec<&str> = shown.lines().collect();
        assert!(
            lines[0].starts_with("stages/align.toml:3:12: invalid basic string"),
            "{shown}"
        );
        assert_eq!(lines[1], "   |");
        assert_eq!(lines[2], " 3 | window = \"3");
        assert_eq!(lines[3], "   |            ^", "under the end of the line");
        assert_eq!(for_terminal_message(&shown), shown, "kept as lines");
    }

    #[test]
    fn control_characters_of_the_file_are_escaped_and_the_caret_still_points() {
        let text = "a = \"\u{1b}[2J\" = 1\n";
        let shown = render("x.toml", text, &error_of(text));
        assert!(!shown.contains('\u{1b}'), "{shown}");
        let lines: Vec<&str> = shown.lines().collect();
        let caret = lines[3].find('^').unwrap();
        assert_eq!(&lines[2][caret..caret + 1], "=", "{shown}");
    }

    #[test]
    fn an_error_without_a_place_is_one_line() {
        let error = <toml::de::Error as serde::de::Error>::custom("params: alpha = 2 is out");
        assert_eq!(
            render("f.toml", "", &error),
            "f.toml: params: alpha = 2 is out"
        );
    }
}
