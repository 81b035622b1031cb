//! Show manifests (`manifests/shows/<show>.toml`): which raw files make up each episode, and the
//! characters' reference images. Every path is checked to stay inside `raw/`, and every problem
//! is reported with the manifest's file and line.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::fsutil::{NotAFile, regular_file};
use crate::hash::ContentHash;
use crate::text::script::ScriptFormat;
use crate::text::subtitles::SubtitleFormat;
use viss_engine::store::{Store, StoreError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShowManifest {
    pub title: Option<String>,
    /// Who licensed the media and on what terms; carried into the dataset card.
    pub license: String,
    #[serde(default)]
    pub characters: Vec<CharacterEntry>,
    /// Named places that identify the show (a bar, a street, a town): an anonymised template
    /// must hold none of them, nor any character's name or alias.
    #[serde(default)]
    pub places: Vec<String>,
    pub episodes: Vec<EpisodeEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CharacterEntry {
    pub name: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    #[serde(default)]
    pub references: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodeEntry {
    pub id: Spanned<String>,
    pub title: Option<String>,
    pub script: Spanned<String>,
    /// `None`: detected from the text.
    #[serde(default)]
    pub script_format: Option<ScriptFormat>,
    pub subtitles: Option<Spanned<String>>,
    /// `None`: detected from the content (and the file extension).
    #[serde(default)]
    pub subtitles_format: Option<SubtitleFormat>,
    pub video: Option<Spanned<String>>,
    /// Expected sha256 per file role (`script`, `subtitles`, `video`).
    #[serde(default)]
    pub sha256: BTreeMap<String, Spanned<String>>,
}

/// A raw file as ingested: where it is under `raw/` and what its bytes hash to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RawFile {
    /// Relative to `raw/`.
    pub path: String,
    pub bytes: u64,
    pub blake3: ContentHash,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// One raw file of an episode as ingested, with what its consumer needs to read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SourceFile<F> {
    pub show: String,
    pub episode: String,
    pub manifest: String,
    pub file: RawFile,
    /// As the manifest gives it; `None`: detect from the content.
    pub format: Option<F>,
}

impl EpisodeSource {
    fn source_file<F>(&self, role: &str, format: Option<F>) -> Option<SourceFile<F>> {
        self.files.get(role).map(|file| SourceFile {
            show: self.show.clone(),
            episode: self.episode.clone(),
            manifest: self.manifest.clone(),
            file: file.clone(),
            format,
        })
    }

    pub fn script(&self) -> Option<SourceFile<ScriptFormat>> {
        self.source_file("script", self.script_format)
    }

    pub fn subtitles(&self) -> Option<SourceFile<SubtitleFormat>> {
        self.source_file("subtitles", self.subtitles_format)
    }

    /// The video file; its format is whatever FFmpeg finds in it.
    pub fn video(&self) -> Option<SourceFile<()>> {
        self.source_file("video", None)
    }

    pub fn cast(&self) -> ShowCast {
        ShowCast {
            show: self.show.clone(),
            manifest: self.manifest.clone(),
            characters: self.characters.clone(),
            places: self.places.clone(),
        }
    }

    pub fn titles(&self) -> EpisodeTitles {
        EpisodeTitles {
            show_title: self.show_title.clone(),
            title: self.title.clone(),
        }
    }
}

/// The show's and the episode's titles: what the subtitle screen reads to know a title card,
/// without the episode's files, so editing a script does not parse its subtitles again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EpisodeTitles {
    pub show_title: Option<String>,
    pub title: Option<String>,
}

impl EpisodeTitles {
    pub fn iter(&self) -> impl Iterator<Item = &String> {
        self.show_title.iter().chain(&self.title)
    }
}

/// The show's characters as one episode's ingest sees them: what role matching reads, without
/// the episode's files, so editing a script does not re-match the faces of its other scenes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ShowCast {
    pub show: String,
    pub manifest: String,
    pub characters: Vec<CharacterSource>,
    /// The manifest's `places`.
    pub places: Vec<String>,
}

/// What a raw file is to viss, and so how large it may be. Scripts, subtitles and reference
/// images are read into memory whole (a season's script is a few hundred kB); video is decoded
/// as a stream and has no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawKind {
    Script,
    Subtitles,
    Video,
    ReferenceImage,
}

impl RawKind {
    /// The largest file of this kind viss reads, in bytes.
    pub fn max_bytes(self) -> Option<u64> {
        match self {
            RawKind::Script | RawKind::Subtitles => Some(256 << 20),
            RawKind::ReferenceImage => Some(64 << 20),
            RawKind::Video => None,
        }
    }

    fn is_text(self) -> bool {
        matches!(self, RawKind::Script | RawKind::Subtitles)
    }

    pub fn name(self) -> &'static str {
        match self {
            RawKind::Script => "script",
            RawKind::Subtitles => "subtitles",
            RawKind::Video => "video",
            RawKind::ReferenceImage => "reference image",
        }
    }
}

/// "a script may be at most 256 MiB": why a file of `kind` over its limit is refused.
fn too_large(kind: RawKind, bytes: u64) -> String {
    let limit = kind.max_bytes().unwrap_or(u64::MAX);
    format!(
        "is {} bytes, and a {} may be at most {} MiB ({limit} bytes): viss reads it whole; \
         check that the manifest names the right file, or split the episode",
        bytes,
        kind.name(),
        limit >> 20
    )
}

#[derive(Debug, thiserror::Error)]
pub enum RawReadError {
    #[error("cannot read raw/{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("raw/{path} {problem}")]
    NotAFile { path: String, problem: NotAFile },
    #[error(
        "raw/{path} changed after it was ingested; run `viss build` again to pick up the new \
         version"
    )]
    Changed { path: String },
    #[error("raw/{path} {}", too_large(*kind, *bytes))]
    TooLarge {
        path: String,
        kind: RawKind,
        bytes: u64,
    },
    #[error(transparent)]
    Binary(#[from] crate::text::encoding::DecodeError),
}

impl RawFile {
    /// The file's bytes, checked against the hash `ingest` recorded, so a stage never works on
    /// bytes its cache key does not describe. Its size and, for text, its first bytes are
    /// checked before it is read: a file past its kind's limit, or a text file that opens with
    /// a NUL byte (binary), is refused without being read whole.
    pub fn read(&self, raw_dir: &Path, kind: RawKind) -> Result<Vec<u8>, RawReadError> {
        use std::io::Read;
        let file = raw_dir.join(&self.path);
        // Checked again: the file may have been replaced (by a FIFO, say) since it was ingested.
        let io = |source| RawReadError::Io {
            path: self.path.clone(),
            source,
        };
        let bytes = regular_file(&file)
            .map_err(|problem| RawReadError::NotAFile {
                path: self.path.clone(),
                problem,
            })?
            .map_or(0, |metadata| metadata.len());
        if kind.max_bytes().is_some_and(|limit| bytes > limit) {
            return Err(RawReadError::TooLarge {
                path: self.path.clone(),
                kind,
                bytes,
            });
        }
        let mut opened = std::fs::File::open(&file).map_err(io)?;
        let mut content = Vec::with_capacity(bytes as usize);
        let prefix = (&mut opened)
            .take(crate::text::encoding::SNIFF_BYTES as u64)
            .read_to_end(&mut content)
            .map_err(io)?;
        if kind.is_text() {
            crate::text::encoding::refuse_binary_start(
                &content[..prefix],
                &format!("raw/{}", self.path),
            )?;
        }
        opened.read_to_end(&mut content).map_err(io)?;
        let bytes = content;
        if ContentHash::of(&bytes) != self.blake3 {
            return Err(RawReadError::Changed {
                path: self.path.clone(),
            });
        }
        Ok(bytes)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CharacterSource {
    pub name: String,
    pub aliases: Vec<String>,
    pub references: Vec<RawFile>,
}

/// Everything the pipeline knows about one episode's sources, as ingested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EpisodeSource {
    pub show: String,
    pub episode: String,
    pub show_title: Option<String>,
    pub title: Option<String>,
    pub license: String,
    pub manifest: String,
    pub script_format: Option<ScriptFormat>,
    pub subtitles_format: Option<SubtitleFormat>,
    /// `script`, `subtitles`, `video` -> file.
    pub files: BTreeMap<String, RawFile>,
    pub characters: Vec<CharacterSource>,
    /// The manifest's `places`.
    pub places: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{manifest}: {message}")]
    Parse { manifest: String, message: String },
    /// Not TOML, or not a manifest: rendered by [`viss_engine::toml_error::render`].
    #[error("{0}")]
    Toml(String),
    #[error(
        "{manifest}:{line}: {what} path {path:?} escapes raw/; paths must be relative to raw/ and \
         stay inside it"
    )]
    Escapes {
        manifest: String,
        line: usize,
        what: String,
        path: String,
    },
    #[error(
        "{manifest}:{line}: {what} file raw/{path} does not exist; add it or fix the path{}",
        missing_hint(manifest, path)
    )]
    Missing {
        manifest: String,
        line: usize,
        what: String,
        path: String,
    },
    #[error("{manifest}:{line}: {what} raw/{path} {}", too_large(*kind, *bytes))]
    TooLarge {
        manifest: String,
        line: usize,
        what: String,
        path: String,
        kind: RawKind,
        bytes: u64,
    },
    #[error("{manifest}:{line}: {what} raw/{path} {problem}")]
    NotAFile {
        manifest: String,
        line: usize,
        what: String,
        path: String,
        problem: NotAFile,
    },
    #[error(
        "{manifest}:{line}: sha256 of raw/{path} is {actual} but the manifest says {expected}; the \
         file changed or the checksum is wrong"
    )]
    ChecksumMismatch {
        manifest: String,
        line: usize,
        path: String,
        expected: String,
        actual: String,
    },
    #[error(
        "{manifest}:{line}: sha256 is given for `{role}`, which is not a file of this episode \
         (script, subtitles, video)"
    )]
    UnknownChecksumRole {
        manifest: String,
        line: usize,
        role: String,
    },
    #[error("{manifest}:{line}: episode id {id:?} must be letters, digits, '-', '_' or '.'")]
    BadEpisodeId {
        manifest: String,
        line: usize,
        id: String,
    },
    #[error("{manifest}:{line}: episode id {id:?} appears twice")]
    DuplicateEpisode {
        manifest: String,
        line: usize,
        id: String,
    },
    #[error(
        "{manifest}: show name {name:?} (the file name) must be letters, digits, '-', '_' or '.'"
    )]
    BadShowName { manifest: String, name: String },
    #[error("{manifest}:{line}: cannot hash raw/{path}: {source}")]
    Hash {
        manifest: String,
        line: usize,
        path: String,
        source: StoreError,
    },
    /// A show-level problem (a character reference), reported by every episode of the show.
    #[error(transparent)]
    Shared(std::sync::Arc<ManifestError>),
}

/// The show `viss demo` writes; a checkout of viss names it in `manifests/shows/demo.toml`.
pub const DEMO_SHOW: &str = "demo";

/// How to get a missing raw file that viss itself can write: the demo show's media, which a
/// checkout of viss names in `manifests/shows/demo.toml` but does not hold.
fn missing_hint(manifest: &str, path: &str) -> &'static str {
    let demo_manifest = Path::new(manifest).file_name()
        == Some(std::ffi::OsStr::new(&format!("{}.toml", DEMO_SHOW)));
    if demo_manifest && path.starts_with(&format!("{}/", DEMO_SHOW)) {
        " (the demo show's media are not kept in git: `viss demo --media-only` writes them \
         into raw/demo/)"
    } else {
        ""
    }
}

fn is_id_segment(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// 1-based line of a byte offset (counted in bytes, so an offset inside a character is fine).
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// A parsed manifest with the context needed to report problems by line.
pub struct LoadedManifest {
    pub show: String,
    pub label: String,
    text: String,
    pub manifest: ShowManifest,
}

impl LoadedManifest {
    pub fn read(path: &Path, label: String) -> Result<Self, ManifestError> {
        let show = path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if !is_id_segment(&show) {
            return Err(ManifestError::BadShowName {
                manifest: label,
                name: show,
            });
        }
        if let Err(problem) = regular_file(path) {
            return Err(ManifestError::Parse {
                manifest: label,
                message: problem.to_string(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|e| ManifestError::Parse {
            manifest: label.clone(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(show, label, text)
    }

    /// A manifest from its text; `show` is the name its file would have (`read` checks it).
    pub fn parse(show: String, label: String, text: String) -> Result<Self, ManifestError> {
        let manifest: ShowManifest = toml::from_str(&text)
            .map_err(|e| ManifestError::Toml(viss_engine::toml_error::render(&label, &text, &e)))?;
        Ok(Self {
            show,
            label,
            text,
            manifest,
        })
    }

    fn line(&self, span: std::ops::Range<usize>) -> usize {
        line_of(&self.text, span.start)
    }

    /// Resolves a manifest path under `raw_dir`, refusing anything that leaves it (absolute
    /// paths, `..`, or symlinks pointing outside).
    fn resolve(
        &self,
        raw_dir: &Path,
        what: &str,
        path: &Spanned<String>,
    ) -> Result<PathBuf, ManifestError> {
        let line = self.line(path.span());
        let relative = Path::new(path.get_ref());
        let escapes = || ManifestError::Escapes {
            manifest: self.label.clone(),
            line,
            what: what.to_string(),
            path: path.get_ref().clone(),
        };
        if relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(escapes());
        }
        let joined = raw_dir.join(relative);
        let not_a_file = |problem| ManifestError::NotAFile {
            manifest: self.label.clone(),
            line,
            what: what.to_string(),
            path: path.get_ref().clone(),
            problem,
        };
        // Where it leads is checked first, what it is after: a link out of raw/ is refused as
        // such whatever it points at.
        let kind = match regular_file(&joined) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => {
                return Err(ManifestError::Missing {
                    manifest: self.label.clone(),
                    line,
                    what: what.to_string(),
                    path: path.get_ref().clone(),
                });
            }
            Err(NotAFile::Special { kind }) => Err(NotAFile::Special { kind }),
            Err(problem) => return Err(not_a_file(problem)),
        };
        let real = joined.canonicalize().map_err(|_| escapes())?;
        let real_raw = raw_dir.canonicalize().map_err(|_| escapes())?;
        if !real.starts_with(&real_raw) {
            return Err(escapes());
        }
        kind.map_err(not_a_file)?;
        Ok(real)
    }

    fn raw_file(
        &self,
        store: &Store,
        raw_dir: &Path,
        (what, kind): (&str, RawKind),
        path: &Spanned<String>,
        expected_sha256: Option<&Spanned<String>>,
    ) -> Result<RawFile, ManifestError> {
        let real = self.resolve(raw_dir, what, path)?;
        let line = self.line(path.span());
        // Before hashing: a 4 GiB file named as a script is refused at once.
        let bytes = std::fs::metadata(&real).map_or(0, |metadata| metadata.len());
        if kind.max_bytes().is_some_and(|limit| bytes > limit) {
            return Err(ManifestError::TooLarge {
                manifest: self.label.clone(),
                line,
                what: what.to_string(),
                path: path.get_ref().clone(),
                kind,
                bytes,
            });
        }
        let fingerprint = store
            .fingerprint_file(&real, expected_sha256.is_some())
            .map_err(|source| ManifestError::Hash {
                manifest: self.label.clone(),
                line,
                path: path.get_ref().clone(),
                source,
            })?;
        if let Some(expected) = expected_sha256 {
            let actual = fingerprint.sha256.clone().unwrap_or_default();
            if !actual.eq_ignore_ascii_case(expected.get_ref().trim()) {
                return Err(ManifestError::ChecksumMismatch {
                    manifest: self.label.clone(),
                    line: self.line(expected.span()),
                    path: path.get_ref().clone(),
                    expected: expected.get_ref().clone(),
                    actual,
                });
            }
        }
        Ok(RawFile {
            path: path.get_ref().trim_start_matches("./").to_string(),
            bytes: fingerprint.len,
            blake3: fingerprint.blake3,
            sha256: fingerprint.sha256.filter(|_| expected_sha256.is_some()),
        })
    }

    /// Validates and hashes every episode: one result per episode, so a broken entry fails
    /// only itself.
    pub fn episodes(
        &self,
        store: &Store,
        raw_dir: &Path,
    ) -> Vec<(String, Result<EpisodeSource, ManifestError>)> {
        let characters = self.characters(store, raw_dir).map_err(std::sync::Arc::new);
        let mut seen = BTreeMap::new();
        let mut out = Vec::new();
        for entry in &self.manifest.episodes {
            let id = entry.id.get_ref().clone();
            let item = format!("{}/{}", self.show, id);
            let line = self.line(entry.id.span());
            let result = if !is_id_segment(&id) {
                Err(ManifestError::BadEpisodeId {
                    manifest: self.label.clone(),
                    line,
                    id,
                })
            } else if seen.insert(id.clone(), ()).is_some() {
                Err(ManifestError::DuplicateEpisode {
                    manifest: self.label.clone(),
                    line,
                    id,
                })
            } else {
                match &characters {
                    Ok(characters) => self.episode(store, raw_dir, entry, characters.clone()),
                    Err(shared) => Err(ManifestError::Shared(shared.clone())),
                }
            };
            out.push((item, result));
        }
        out
    }

    fn characters(
        &self,
        store: &Store,
        raw_dir: &Path,
    ) -> Result<Vec<CharacterSource>, ManifestError> {
        self.manifest
            .characters
            .iter()
            .map(|c| {
                let references = c
                    .references
                    .iter()
                    .map(|r| {
                        self.raw_file(
                            store,
                            raw_dir,
                            (
                                &format!("reference image of {}", c.name),
                                RawKind::ReferenceImage,
                            ),
                            r,
                            None,
                        )
                    })
                    .collect::<Result<_, _>>()?;
                Ok(CharacterSource {
                    name: c.name.clone(),
                    aliases: c.aliases.clone(),
                    references,
                })
            })
            .collect()
    }

    fn episode(
        &self,
        store: &Store,
        raw_dir: &Path,
        entry: &EpisodeEntry,
        characters: Vec<CharacterSource>,
    ) -> Result<EpisodeSource, ManifestError> {
        for (role, value) in &entry.sha256 {
            if !["script", "subtitles", "video"].contains(&role.as_str()) {
                return Err(ManifestError::UnknownChecksumRole {
                    manifest: self.label.clone(),
                    line: self.line(value.span()),
                    role: role.clone(),
                });
            }
        }
        let mut files = BTreeMap::new();
        let roles = [
            (RawKind::Script, Some(&entry.script)),
            (RawKind::Subtitles, entry.subtitles.as_ref()),
            (RawKind::Video, entry.video.as_ref()),
        ];
        for (kind, path) in roles {
            if let Some(path) = path {
                let role = kind.name();
                files.insert(
                    role.to_string(),
                    self.raw_file(store, raw_dir, (role, kind), path, entry.sha256.get(role))?,
                );
            }
        }
        Ok(EpisodeSource {
            show: self.show.clone(),
            episode: entry.id.get_ref().clone(),
            show_title: self.manifest.title.clone(),
            title: entry.title.clone(),
            license: self.manifest.license.clone(),
            manifest: self.label.clone(),
            script_format: entry.script_format,
            subtitles_format: entry.subtitles_format,
            files,
            characters,
            places: self.manifest.places.clone(),
        })
    }
}

/// The manifest files of a project, sorted by name.
pub fn manifest_paths(shows_dir: &Path) -> Vec<PathBuf> {
    scan_manifests(shows_dir).manifests
}

/// What `manifests/shows/` holds: the manifests (`<show>.toml`), the files that look meant to
/// be one but are named so that they would not be read (an error: `s.TOML`, `.toml`), and the
/// other entries, which are skipped (a warning: `s.toml.bak`, `notes.md`, a directory).
/// Examples (`<name>.example`, such as `myshow.toml.example`) and hidden files are skipped
/// silently: an example documents a manifest, it is never a show.
#[derive(Debug, Default, PartialEq)]
pub struct ManifestScan {
    pub manifests: Vec<PathBuf>,
    /// Each with what to do about it.
    pub misnamed: Vec<(PathBuf, String)>,
    /// Each with why it is skipped.
    pub skipped: Vec<(PathBuf, String)>,
    /// `manifests/shows/` is not there (or cannot be listed: the reason).
    pub missing_dir: Option<String>,
}

/// Sorts the entries of `shows_dir` into manifests, misnamed manifests and skipped entries,
/// each list sorted by path.
pub fn scan_manifests(shows_dir: &Path) -> ManifestScan {
    let mut scan = ManifestScan::default();
    let entries = match std::fs::read_dir(shows_dir) {
        Ok(entries) => entries,
        Err(error) => {
            scan.missing_dir = Some(error.to_string());
            return scan;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let (stem, extension) = match name.rsplit_once('.') {
            Some((stem, extension)) => (stem, Some(extension)),
            None => (name.as_str(), None),
        };
        match extension {
            Some("toml") if stem.is_empty() => scan.misnamed.push((
                path,
                "a manifest is named after its show: rename it to <show>.toml".to_string(),
            )),
            Some("toml") => scan.manifests.push(path),
            Some(extension) if extension.eq_ignore_ascii_case("toml") => {
                let show = if stem.is_empty() { "<show>" } else { stem };
                scan.misnamed.push((
                    path,
                    format!("only lowercase .toml is read: rename it to {show}.toml"),
                ));
            }
            _ if name.starts_with('.') && !name.to_ascii_lowercase().contains(".toml") => {}
            // An example to copy (`myshow.toml.example`), documentation: never a show.
            Some("example") if !path.is_dir() => {}
            _ => {
                let what = if path.is_dir() {
                    "a directory"
                } else {
                    "not named <show>.toml"
                };
                scan.skipped.push((path, format!("skipped: {what}")));
            }
        }
    }
    scan.manifests.sort();
    scan.misnamed.sort();
    scan.skipped.sort();
    scan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misnamed_manifests_are_told_apart_from_skipped_files() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        for name in [
            "show.toml",
            "s.TOML",
            ".toml",
            "s.toml.bak",
            "notes.md",
            ".gitkeep",
            // An example to copy: skipped silently, as documentation.
            "myshow.toml.example",
        ] {
            std::fs::write(dir.join(name), "").unwrap();
        }
        std::fs::create_dir(dir.join("old")).unwrap();
        std::fs::create_dir(dir.join("dir.example")).unwrap();
        let scan = scan_manifests(dir);
        assert_eq!(scan.manifests, vec![dir.join("show.toml")]);
        let misnamed: Vec<_> = scan
            .misnamed
            .iter()
            .map(|(p, why)| (p.clone(), why.as_str()))
            .collect();
        assert_eq!(
            misnamed,
            vec![
                (
                    dir.join(".toml"),
                    "a manifest is named after its show: rename it to <show>.toml"
                ),
                (
                    dir.join("s.TOML"),
                    "only lowercase .toml is read: rename it to s.toml"
                ),
            ]
        );
        let skipped: Vec<_> = scan.skipped.iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(
            skipped,
            vec![
                dir.join("dir.example"),
                dir.join("notes.md"),
                dir.join("old"),
                dir.join("s.toml.bak")
            ]
        );
        assert_eq!(scan.missing_dir, None);
        assert!(scan_manifests(&dir.join("absent")).missing_dir.is_some());
    }
}
