//! Show manifests (`manifest.rs`), validated against a real store and raw directory.

use std::path::Path;

use proptest::prelude::*;
use proptest::sample::select;

use super::strategies::{apply, mutation, tricky_lines, tricky_text};
use super::{Outcomes, config, runner};
use crate::dag::store::Store;
use crate::manifest::{LoadedManifest, ManifestError, line_of};

/// Paths worth trying: files that exist, ones that do not, and every way out of `raw/`.
const PATHS: &[&str] = &[
    "s01e01.txt",
    "./s01e01.txt",
    "s01e01.srt",
    "sub/Ünïcödé 😀.mkv",
    "sub/../s01e01.txt",
    "../outside.txt",
    "/etc/hostname",
    "sub/../../outside.txt",
    "escape/hostname",
    "sub",
    "",
    ".",
    "missing.txt",
    "s01e01.txt\u{0}",
    "C:\\windows",
    "s01e01.txt/",
];

const SCRIPT_FORMATS: &[&str] = &["friends", "friends_transcript", "fountain", "plain"];
const SUBTITLE_FORMATS: &[&str] = &["srt", "web_vtt", "ass", "ssa"];

/// A format name: mostly one of `valid`, sometimes a wrong one.
fn format_name(valid: &'static [&'static str]) -> BoxedStrategy<String> {
    prop_oneof![
        30 => select(valid).prop_map(str::to_string),
        1 => select(&["", "FRIENDS", "vtt", "srt ", "fountain\u{0}"][..]).prop_map(str::to_string),
    ]
    .boxed()
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A TOML string literal of `text`, escaped as TOML needs.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// A path: mostly one of the files in `raw/`, often any of [`PATHS`], sometimes random.
fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(&PATHS[..4]).prop_map(str::to_string),
        2 => select(PATHS).prop_map(str::to_string),
        1 => tricky_text(12),
    ]
}

const SCRIPT: &str = "Ann: Hi.\nBob: Yo.\n";

fn optional(key: &'static str, values: BoxedStrategy<String>) -> BoxedStrategy<String> {
    prop_oneof![
        1 => Just(String::new()),
        3 => values.prop_map(move |v| format!("{key} = {}\n", quoted(&v))),
    ]
    .boxed()
}

fn episode() -> impl Strategy<Value = String> {
    let id = prop_oneof![
        6 => select(&["s01e01", "s01e02", "a.b-c_d", "E1"][..]).prop_map(str::to_string),
        1 => select(&["..", ".", "a/b", "", "İ", "s01e01 "][..]).prop_map(str::to_string),
        1 => tricky_text(6),
    ];
    let sha = prop_oneof![
        Just(sha256_hex(SCRIPT.as_bytes())),
        Just(sha256_hex(SCRIPT.as_bytes()).to_uppercase()),
        Just("0".repeat(64)),
        Just("F".repeat(64)),
        "[0-9a-f]{0,70}".prop_map(|s| s.to_string()),
        tricky_text(8),
    ];
    (
        id,
        path(),
        optional("title", tricky_text(8).boxed()),
        optional("script_format", format_name(SCRIPT_FORMATS)),
        optional("subtitles", path().boxed()),
        optional("subtitles_format", format_name(SUBTITLE_FORMATS)),
        optional("video", path().boxed()),
        prop::collection::vec(
            (
                select(&["script", "script", "subtitles", "video", "audio", ""][..]),
                sha,
            ),
            0..2,
        ),
    )
        .prop_map(
            |(id, script, title, script_format, subtitles, subtitles_format, video, shas)| {
                let mut text = format!(
                    "[[episodes]]\nid = {}\nscript = {}\n",
                    quoted(&id),
                    quoted(&script)
                );
                text += &(title + &script_format + &subtitles + &subtitles_format + &video);
                if !shas.is_empty() {
                    text += "[episodes.sha256]\n";
                    for (role, sha) in shas {
                        text += &format!("{} = {}\n", quoted(role), quoted(&sha));
                    }
                }
                text
            },
        )
}

fn character() -> impl Strategy<Value = String> {
    (
        tricky_text(8),
        prop::collection::vec(tricky_text(6), 0..3),
        prop::collection::vec(path(), 0..2),
    )
        .prop_map(|(name, aliases, references)| {
            let list = |items: Vec<String>| {
                items
                    .iter()
                    .map(|s| quoted(s))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!(
                "[[characters]]\nname = {}\naliases = [{}]\nreferences = [{}]\n",
                quoted(&name),
                list(aliases),
                list(references)
            )
        })
}

/// A manifest in the right shape with random values, sometimes mutated.
fn manifest() -> impl Strategy<Value = String> {
    let shaped = (
        optional("title", tricky_text(10).boxed()),
        tricky_text(10),
        prop::collection::vec(character(), 0..2),
        prop::collection::vec(episode(), 1..4),
        prop_oneof![
            4 => Just(Vec::new()),
            1 => prop::collection::vec(mutation(), 1..3),
        ],
    )
        .prop_map(|(title, license, characters, episodes, mutations)| {
            let text = format!(
                "{title}license = {}\n{}{}",
                quoted(&license),
                characters.concat(),
                episodes.concat()
            );
            mutations.iter().fold(text, |text, m| apply(&text, m))
        });
    const SHAPES: &[&str] = &[
        "license = \"$\"",
        "[[episodes]]",
        "id = \"$\"",
        "script = \"$\"",
        "[episodes.sha256]",
        "script = 1",
        "[[characters]]",
        "references = [\"$\"]",
        "$ = $",
    ];
    prop_oneof![9 => shaped, 1 => tricky_lines(SHAPES, 12)]
}

fn raw_dir(root: &Path) -> std::path::PathBuf {
    let raw = root.join("raw");
    std::fs::create_dir_all(raw.join("sub")).unwrap();
    std::fs::write(raw.join("s01e01.txt"), SCRIPT).unwrap();
    std::fs::write(
        raw.join("s01e01.srt"),
        "1\n00:00:01,000 --> 00:00:02,000\nHi.\n",
    )
    .unwrap();
    std::fs::write(raw.join("sub/Ünïcödé 😀.mkv"), [0u8; 16]).unwrap();
    std::fs::write(root.join("outside.txt"), "outside").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("/etc", raw.join("escape")).unwrap();
    raw
}

/// Any manifest text is either refused with an error or read; reading validates every
/// episode on its own, and each accepted file is a real file inside `raw/`.
#[test]
fn manifests_are_refused_or_read_and_accepted_files_stay_in_raw() {
    let temp = tempfile::tempdir().unwrap();
    let raw = raw_dir(temp.path());
    let real_raw = raw.canonicalize().unwrap();
    let store = Store::open(&temp.path().join("artifacts")).unwrap();
    let outcomes = Outcomes::default();
    runner()
        .run(&manifest(), |text| {
            let loaded = LoadedManifest::parse("show".into(), "fuzz.toml".into(), text);
            let loaded = match loaded {
                Ok(loaded) => loaded,
                Err(error) => {
                    outcomes.add("refused");
                    prop_assert!(error.to_string().starts_with("fuzz.toml"));
                    return Ok(());
                }
            };
            for (_, episode) in loaded.episodes(&store, &raw) {
                let source = match episode {
                    Ok(source) => {
                        outcomes.add("episode read");
                        source
                    }
                    Err(error) => {
                        outcomes.add(match error {
                            ManifestError::Escapes { .. } => "episode escapes raw/",
                            ManifestError::Missing { .. } => "episode file missing",
                            ManifestError::ChecksumMismatch { .. } => "episode checksum wrong",
                            ManifestError::BadEpisodeId { .. } => "episode id bad",
                            ManifestError::Shared(_) => "episode's show refused",
                            ManifestError::UnknownChecksumRole { .. } => {
                                "episode checksum role bad"
                            }
                            ManifestError::DuplicateEpisode { .. } => "episode id repeated",
                            _ => "episode refused otherwise",
                        });
                        prop_assert!(error.to_string().starts_with("fuzz.toml"));
                        continue;
                    }
                };
                let references = source.characters.iter().flat_map(|c| &c.references);
                for file in source.files.values().chain(references) {
                    let real = raw.join(&file.path).canonicalize().unwrap();
                    prop_assert!(real.starts_with(&real_raw), "{:?}", file.path);
                    prop_assert!(real.is_file(), "{:?}", file.path);
                }
            }
            Ok(())
        })
        .unwrap();
    outcomes.check(
        "manifests",
        &[
            "refused",
            "episode read",
            "episode escapes raw/",
            "episode file missing",
            "episode checksum wrong",
        ],
    );
}

proptest! {
    #![proptest_config(config())]

    /// Line numbers of any byte offset, even one inside a character or past the end (it
    /// sliced the text at the offset, which panics inside a character).
    #[test]
    fn line_of_takes_any_offset(text in tricky_text(40), offset in 0..200usize) {
        let newlines = text.bytes().take(offset).filter(|&b| b == b'\n').count();
        prop_assert_eq!(line_of(&text, offset), newlines + 1);
    }
}
