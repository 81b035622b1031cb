//! Which directory may be the artifact store, and what in it viss may delete.
//!
//! The store is a directory viss made and marked as its own with a [`MARKER_FILE`]. viss never
//! builds into, and never deletes from, a directory that is not marked, and never uses as its
//! store a directory the project protects (the project itself or an ancestor of it, `raw/`,
//! `manifests/`, `stages/`, `prompts/`), marked or not. Inside a marked store it deletes only
//! its own entries ([`is_store_entry`]): `clean` and `gc` delete `v<N>/` layout directories
//! only, and the marker, `CACHEDIR.TAG` and the lock file are the only other names it writes.
//!
//! Adopting a store made before the marker existed: an unmarked directory is marked and used
//! when everything in it is a store entry, and, if it has `v<N>/` directories, its
//! `CACHEDIR.TAG` is the one viss writes. Anything else in it means somebody else's files: it
//! is refused.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::fsutil::write_atomic_beside;

/// The file that marks a directory as a viss artifact store.
pub const MARKER_FILE: &str = "VISS-STORE";
/// The first line of [`MARKER_FILE`].
const MARKER_SIGNATURE: &str = "viss artifact store";
const MARKER_BODY: &str = "viss artifact store\n\
# viss made this directory. `viss clean` and `viss gc` delete the v<N>/ layout directories\n\
# in it (every built result) and nothing else.\n";
/// The cache directory tag (<https://bford.info/cachedir/>), so backup tools skip the store.
pub const CACHEDIR_TAG: &str = "CACHEDIR.TAG";
const CACHEDIR_TAG_BODY: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
# viss artifact store; rebuildable with `viss build`.\n";
/// What the `CACHEDIR.TAG` of a store made by viss says, before and after the marker existed.
const CACHEDIR_TAG_VISS: &str = "viss artifact store";
/// The writer lock file (see [`super::lock`]).
pub const LOCK_FILE: &str = ".lock";

/// How many foreign entries an error names.
const NAMED_ENTRIES: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum StoreDirError {
    #[error(
        "refusing to use {dir} as the artifact store: it is {what}, and the store must be a \
         directory of its own that `viss clean` may empty; set `[paths] artifacts` in viss.toml \
         (or VISS_ARTIFACTS, which overrides it) to a directory of its own, e.g. \"artifacts\""
    )]
    Protected { dir: PathBuf, what: String },
    #[error(
        "refusing to use {dir} as the artifact store: it has no {MARKER_FILE} file, so viss did \
         not make it, and it holds files that are not viss's ({entries}); set `[paths] \
         artifacts` in viss.toml (or VISS_ARTIFACTS, which overrides it) to a new or empty \
         directory, or move those files away"
    )]
    NotAStore { dir: PathBuf, entries: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreDirError + '_ {
    move |source| StoreDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A directory the store must not be (nor, with `inside_too`, be inside of), nor contain.
#[derive(Debug, Clone)]
pub struct Protected {
    /// What it is, for messages: "the project directory", "raw/ (your licensed media)".
    pub what: String,
    pub path: PathBuf,
    pub inside_too: bool,
}

/// `v` and digits: a store layout directory (see [`super::store::LAYOUT_VERSION`]).
pub fn is_layout_dir_name(name: &str) -> bool {
    name.len() > 1 && name.starts_with('v') && name[1..].chars().all(|c| c.is_ascii_digit())
}

/// The names viss puts directly in a store directory, and may delete from it.
pub fn is_store_entry(name: &str) -> bool {
    matches!(name, LOCK_FILE | CACHEDIR_TAG | MARKER_FILE) || is_layout_dir_name(name)
}

/// `path` absolute, with symlinks resolved as far as it exists and `.`/`..` folded in the rest.
pub fn resolve(path: &Path) -> io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut out = PathBuf::new();
    let mut exists = true;
    for component in absolute.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component),
            Component::CurDir => {}
            // `out` has no symlinks left in it, so its parent is the real parent.
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                out.push(name);
                if exists {
                    match fs::canonicalize(&out) {
                        Ok(real) => out = real,
                        Err(_) => exists = false,
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Refuses a store location that is, contains, or (where protected so) lies inside a protected
/// directory. Symlinks are followed on both sides.
pub fn check_location(dir: &Path, protected: &[Protected]) -> Result<(), StoreDirError> {
    let store = resolve(dir).map_err(io_error(dir))?;
    for guard in protected {
        let path = resolve(&guard.path).map_err(io_error(&guard.path))?;
        let what = if store == path {
            guard.what.clone()
        } else if path.starts_with(&store) {
            format!(
                "a directory that contains {} ({})",
                guard.what,
                path.display()
            )
        } else if guard.inside_too && store.starts_with(&path) {
            format!("inside {} ({})", guard.what, path.display())
        } else {
            continue;
        };
        return Err(StoreDirError::Protected { dir: store, what });
    }
    Ok(())
}

/// What [`claim`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Marked already.
    Marked,
    /// Absent or empty: created and marked.
    Created,
    /// A store made before the marker existed (only store entries in it): marked now.
    Adopted,
}

/// The names in `dir`, each with whether it is a directory; `None` when `dir` does not exist.
fn entries(dir: &Path) -> Result<Option<Vec<(String, bool)>>, StoreDirError> {
    let listing = match fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error(dir)(error)),
    };
    let mut out = Vec::new();
    for entry in listing {
        let entry = entry.map_err(io_error(dir))?;
        let is_dir = entry.file_type().map_err(io_error(dir))?.is_dir();
        out.push((entry.file_name().to_string_lossy().into_owned(), is_dir));
    }
    out.sort();
    Ok(Some(out))
}

/// The entries of `dir` viss did not make (a layout name that is a file counts as foreign).
fn foreign_entries(dir: &Path) -> Result<Option<Vec<String>>, StoreDirError> {
    Ok(entries(dir)?.map(|entries| {
        entries
            .into_iter()
            .filter(|(name, is_dir)| !is_store_entry(name) || is_layout_dir_name(name) != *is_dir)
            .map(|(name, _)| name)
            .collect()
    }))
}

/// Whether `dir` carries the marker.
pub fn is_marked(dir: &Path) -> bool {
    fs::read_to_string(dir.join(MARKER_FILE))
        .is_ok_and(|text| text.lines().next() == Some(MARKER_SIGNATURE))
}

fn has_layouts(dir: &Path) -> Result<bool, StoreDirError> {
    Ok(entries(dir)?
        .unwrap_or_default()
        .iter()
        .any(|(name, is_dir)| *is_dir && is_layout_dir_name(name)))
}

/// Whether an unmarked `dir` is a store viss made before the marker existed (see the module
/// documentation); `Err(NotAStore)` names what is in the way.
fn check_adoptable(dir: &Path) -> Result<(), StoreDirError> {
    let foreign = foreign_entries(dir)?.unwrap_or_default();
    let tag = fs::read_to_string(dir.join(CACHEDIR_TAG)).unwrap_or_default();
    let mut named: Vec<String> = foreign.iter().take(NAMED_ENTRIES).cloned().collect();
    if foreign.len() > NAMED_ENTRIES {
        named.push(format!("and {} more", foreign.len() - NAMED_ENTRIES));
    }
    if foreign.is_empty() && (tag.contains(CACHEDIR_TAG_VISS) || !has_layouts(dir)?) {
        return Ok(());
    }
    if foreign.is_empty() {
        named.push(format!("v<N>/ directories without viss's {CACHEDIR_TAG}"));
    }
    Err(StoreDirError::NotAStore {
        dir: dir.to_path_buf(),
        entries: named.join(", "),
    })
}

/// Makes sure `dir` is a marked store: creates and marks it when absent or empty, adopts a
/// store made before the marker existed, and refuses any other directory. Does not check the
/// location ([`check_location`]).
pub fn claim(dir: &Path) -> Result<Claim, StoreDirError> {
    if is_marked(dir) {
        return Ok(Claim::Marked);
    }
    let claim = match entries(dir)? {
        None => Claim::Created,
        Some(entries) if entries.is_empty() => Claim::Created,
        Some(_) => {
            check_adoptable(dir)?;
            Claim::Adopted
        }
    };
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    let tag = dir.join(CACHEDIR_TAG);
    if !tag.exists() {
        write_atomic_beside(&tag, CACHEDIR_TAG_BODY.as_bytes()).map_err(io_error(&tag))?;
    }
    let marker = dir.join(MARKER_FILE);
    write_atomic_beside(&marker, MARKER_BODY.as_bytes()).map_err(io_error(&marker))?;
    if claim == Claim::Adopted {
        tracing::info!(
            "{} holds only what viss puts in a store: marked it as one ({MARKER_FILE})",
            dir.display()
        );
    }
    Ok(claim)
}

/// What [`clean`] did.
#[derive(Debug, Default)]
pub struct CleanReport {
    /// There was no store directory.
    pub absent: bool,
    pub removed: Vec<PathBuf>,
    /// Entries viss did not make, left in place.
    pub kept: Vec<String>,
}

/// Whether `dir` may be cleaned: it is marked, or a store made before the marker. Call before
/// taking the lock (which creates the lock file), then [`clean`] under it.
pub fn check_cleanable(dir: &Path) -> Result<bool, StoreDirError> {
    if !dir.exists() {
        return Ok(false);
    }
    if !is_marked(dir) {
        check_adoptable(dir)?;
    }
    Ok(true)
}

/// Deletes every built result from the store `dir`: its `v<N>/` layout directories. The marker,
/// `CACHEDIR.TAG` and the lock file stay, so the directory remains an (empty) store; anything
/// else in it is left and reported. The caller checked the location and [`check_cleanable`],
/// and holds the lock.
pub fn clean(dir: &Path) -> Result<CleanReport, StoreDirError> {
    let mut report = CleanReport::default();
    let Some(entries) = entries(dir)? else {
        report.absent = true;
        return Ok(report);
    };
    for (name, is_dir) in entries {
        if is_dir && is_layout_dir_name(&name) {
            let layout = dir.join(name);
            fs::remove_dir_all(&layout).map_err(io_error(&layout))?;
            report.removed.push(layout);
        } else if !is_store_entry(&name) || is_layout_dir_name(&name) {
            report.kept.push(name);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protected(root: &Path) -> Vec<Protected> {
        let guard = |what: &str, path: PathBuf, inside_too| Protected {
            what: what.to_string(),
            path,
            inside_too,
        };
        vec![
            guard("the project directory", root.to_path_buf(), false),
            guard("raw/", root.join("raw"), true),
            guard("manifests/", root.join("manifests"), true),
        ]
    }

    fn project() -> (tempfile::TempDir, PathBuf) {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("p");
        fs::create_dir_all(root.join("raw/show")).unwrap();
        fs::create_dir_all(root.join("manifests")).unwrap();
        fs::write(root.join("raw/show/e1.mkv"), b"licensed").unwrap();
        (temp, root)
    }

    #[test]
    fn the_project_its_ancestors_and_its_protected_dirs_are_refused_as_stores() {
        let (_temp, root) = project();
        let guards = protected(&root);
        for bad in [
            "",
            ".",
            "..",
            "../..",
            "raw",
            "raw/",
            "./raw",
            "raw/show",
            "raw/new/store",
            "manifests",
            "x/../raw",
        ] {
            let error = check_location(&root.join(bad), &guards).unwrap_err();
            assert!(
                matches!(error, StoreDirError::Protected { .. }),
                "{bad:?}: {error}"
            );
        }
        std::os::unix::fs::symlink(root.join("raw"), root.join("link")).unwrap();
        let error = check_location(&root.join("link"), &guards)
            .unwrap_err()
            .to_string();
        assert!(error.contains("raw/"), "{error}");
        for good in [
            "artifacts",
            "./artifacts",
            "raw/../artifacts",
            "../elsewhere",
        ] {
            check_location(&root.join(good), &guards).unwrap();
        }
    }

    #[test]
    fn only_empty_marked_or_old_viss_stores_are_claimed() {
        let (temp, root) = project();
        // New, and empty: created and marked.
        assert_eq!(claim(&root.join("artifacts")).unwrap(), Claim::Created);
        assert!(is_marked(&root.join("artifacts")));
        assert_eq!(claim(&root.join("artifacts")).unwrap(), Claim::Marked);
        let empty = temp.path().join("empty");
        fs::create_dir(&empty).unwrap();
        assert_eq!(claim(&empty).unwrap(), Claim::Created);

        // A store of the viss before the marker: adopted.
        let old = temp.path().join("old");
        fs::create_dir_all(old.join("v3/blobs")).unwrap();
        fs::create_dir_all(old.join("v2")).unwrap();
        fs::write(old.join(CACHEDIR_TAG), CACHEDIR_TAG_BODY).unwrap();
        fs::write(old.join(LOCK_FILE), "pid 1").unwrap();
        assert_eq!(claim(&old).unwrap(), Claim::Adopted);
        assert!(is_marked(&old));

        // Somebody else's files, or v<N> directories that no viss tag vouches for: refused.
        let error = claim(&root).unwrap_err().to_string();
        assert!(error.contains("manifests, raw"), "{error}");
        assert!(!root.join(MARKER_FILE).exists() && !root.join(CACHEDIR_TAG).exists());
        let versions = temp.path().join("versions");
        fs::create_dir_all(versions.join("v1")).unwrap();
        let error = claim(&versions).unwrap_err().to_string();
        assert!(error.contains("without viss's CACHEDIR.TAG"), "{error}");
        let stray = temp.path().join("stray");
        fs::create_dir_all(&stray).unwrap();
        fs::write(stray.join("v3"), b"a file, not a layout").unwrap();
        assert!(claim(&stray).is_err());
    }

    #[test]
    fn clean_removes_only_the_store_entries() {
        let (temp, _root) = project();
        let store = temp.path().join("store");
        claim(&store).unwrap();
        fs::create_dir_all(store.join("v3/blobs/ab")).unwrap();
        fs::create_dir_all(store.join("v2")).unwrap();
        fs::write(store.join(LOCK_FILE), "").unwrap();
        fs::write(store.join("notes.txt"), "mine").unwrap();
        fs::create_dir_all(store.join("photos")).unwrap();
        fs::write(store.join("v4"), "a file named like a layout").unwrap();
        let report = clean(&store).unwrap();
        assert_eq!(report.kept, ["notes.txt", "photos", "v4"]);
        assert_eq!(report.removed, [store.join("v2"), store.join("v3")]);
        let mut left: Vec<String> = fs::read_dir(&store)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                LOCK_FILE,
                CACHEDIR_TAG,
                MARKER_FILE,
                "notes.txt",
                "photos",
                "v4"
            ]
        );
        assert_eq!(claim(&store).unwrap(), Claim::Marked, "still a store");
        assert!(clean(&temp.path().join("absent")).unwrap().absent);
        // Not a store: refused before anything is deleted.
        fs::remove_file(store.join(MARKER_FILE)).unwrap();
        assert!(check_cleanable(&store).is_err());
    }
}
