//! Turning a panic in a parser into an error that names the file and line it was parsing.
//!
//! The parsers are meant never to panic (the property tests in `fuzz` check that on arbitrary
//! input), but a panic that still slips through must not surface as an anonymous "task
//! panicked": [`catch_parse_panic`] runs a parser, and the parser's line loops call
//! [`at_line`] as they go, so the error says `panic while parsing raw/x.srt (line 12): ...`.
//! The line is a thread-local, which is right because a parser runs on one thread; it is the
//! last line the parser started on, so for work done after the last line it is that line.

use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    static LINE: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Records the 1-based source line the parser on this thread is working on. Cheap (one
/// thread-local store); a no-op in effect outside [`catch_parse_panic`].
pub fn at_line(line: usize) {
    LINE.with(|current| current.set(Some(line)));
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("panic while parsing {file}{}: {message}", line_suffix(.line))]
pub struct ParsePanic {
    /// The file as the caller names it, e.g. `raw/friends/s01e01.txt`.
    pub file: String,
    /// The line the parser was on, when it had reached one.
    pub line: Option<usize>,
    /// The panic's message.
    pub message: String,
}

fn line_suffix(line: &Option<usize>) -> String {
    line.map(|line| format!(" (line {line})"))
        .unwrap_or_default()
}

/// Runs `parse`, turning a panic into a [`ParsePanic`] naming `file` and the line last passed
/// to [`at_line`]. Calls nest: the outer call's line is restored afterwards.
pub fn catch_parse_panic<T>(file: &str, parse: impl FnOnce() -> T) -> Result<T, ParsePanic> {
    let outer = LINE.with(|current| current.replace(None));
    let result = catch_unwind(AssertUnwindSafe(parse));
    let line = LINE.with(|current| current.replace(outer));
    result.map_err(|payload| ParsePanic {
        file: file.to_string(),
        line,
        message: panic_message(payload.as_ref()),
    })
}

/// The text of a panic payload (`panic!("...")` gives a `&str` or a `String`).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text.to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_names_the_file_and_the_line_reached() {
        let error = catch_parse_panic("raw/a.srt", || {
            at_line(3);
            at_line(7);
            panic!("boom at {}", 7);
        })
        .unwrap_err();
        assert_eq!(
            error,
            ParsePanic {
                file: "raw/a.srt".into(),
                line: Some(7),
                message: "boom at 7".into()
            }
        );
        assert_eq!(
            error.to_string(),
            "panic while parsing raw/a.srt (line 7): boom at 7"
        );
    }

    #[test]
    fn no_line_is_claimed_before_the_parser_reached_one() {
        at_line(99);
        let error = catch_parse_panic("raw/b.txt", || -> () { panic!("early") }).unwrap_err();
        assert_eq!(error.line, None);
        assert_eq!(error.to_string(), "panic while parsing raw/b.txt: early");
        assert_eq!(catch_parse_panic("raw/c.txt", || 5), Ok(5));
    }

    #[test]
    fn nested_calls_restore_the_outer_line() {
        let outer = catch_parse_panic("outer", || {
            at_line(4);
            let inner = catch_parse_panic("inner", || {
                at_line(10);
                panic!("inner")
            });
            assert_eq!(inner.unwrap_err().line, Some(10));
            panic!("outer")
        });
        assert_eq!(outer.unwrap_err().line, Some(4));
    }
}
