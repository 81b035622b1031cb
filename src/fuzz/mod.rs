//! The fuzz harness: property tests over every parser of outside input, run by `cargo test`
//! (`cargo test --lib fuzz`).
//!
//! Each property runs 256 cases by default; `PROPTEST_CASES=N` changes that for every
//! property at once (proptest reads it), e.g. `PROPTEST_CASES=20000 cargo test --lib fuzz` for a
//! longer hunt. A failing case is shrunk and printed, not written to a regressions file: each
//! bug found gets an explicit regression test next to the code it fixes.
//!
//! What every property checks first is that the parser does not panic on the input, and returns
//! `Ok` or its typed error; where it is cheap, a property also checks what the result means
//! (an SRT file written from random cues parses back to those cues, `A and B:` speaks as
//! exactly A and B for any unicode names). Inputs come in two kinds: arbitrary text biased
//! towards the characters that break text code ([`strategies::TRICKY_CHARS`]), and near-valid files
//! (the test fixtures and generated files, randomly mutated, with CRLF or CR line ends and
//! BOMs).
//!
//! - [`scripts`]: Friends-style transcripts (text and HTML), Fountain, plain `NAME: line`, the
//!   speaker-cue helpers and the encoding sniffing.
//! - [`subtitles`]: SRT, WebVTT, ASS/SSA, from text and from bytes.
//! - [`manifests`]: show manifests, validated against a real store and raw directory.
//! - [`settings`]: every built-in stage's TOML, and `viss.toml`.
//! - [`answers`]: model answers, through JSON extraction and every annotation step's validator,
//!   and the step schemas bound to any participant names.
//! - [`chain`]: what consumes parsed files: scenario units, alignment, annotation contexts.

mod answers;
mod chain;
mod manifests;
mod scripts;
mod settings;
mod strategies;
mod subtitles;

use std::cell::RefCell;
use std::collections::BTreeMap;

use proptest::test_runner::{Config, TestRunner};

/// The harness's proptest configuration: proptest's defaults (256 cases, or `PROPTEST_CASES`)
/// without the regressions file.
pub fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// A runner for properties that need set-up shared by their cases (a store, a temp dir).
pub fn runner() -> TestRunner {
    TestRunner::new(config())
}

/// Counts what a property's cases came to, to check that its generator reaches every outcome
/// (a generator whose files all fail to parse tests nothing past the parser's first check).
#[derive(Default)]
pub struct Outcomes(RefCell<BTreeMap<&'static str, usize>>);

impl Outcomes {
    pub fn add(&self, outcome: &'static str) {
        *self.0.borrow_mut().entry(outcome).or_default() += 1;
    }

    /// Prints the counts (`--nocapture` shows them) and, when the run had enough cases for it
    /// to be all but certain, checks that each of `expected` happened.
    pub fn check(&self, property: &str, expected: &[&str]) {
        let counts = self.0.borrow();
        eprintln!("{property}: {counts:?}");
        if config().cases >= 200 {
            for outcome in expected {
                assert!(
                    counts.contains_key(outcome),
                    "{property} never gave {outcome}: {counts:?}"
                );
            }
        }
    }
}
