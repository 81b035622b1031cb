//! Crash-safe file writes: a reader sees either the old file or the complete new one, never a
//! torn write, because bytes go to a temp file in the same directory, are fsynced, and are then
//! renamed over the destination.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new temp file name in `temp_dir` for a write to `dest`, with both directories made.
fn temp_beside(dest: &Path, temp_dir: &Path) -> io::Result<std::path::PathBuf> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)?;
    }
    temp_file_in(temp_dir)
}

/// A new temp file name in `temp_dir` (made if missing), unique within this machine.
pub fn temp_file_in(temp_dir: &Path) -> io::Result<std::path::PathBuf> {
    fs::create_dir_all(temp_dir)?;
    Ok(temp_dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    )))
}

/// Writes `bytes` to `dest` atomically, creating parent directories. `temp_dir` must be on the
/// same filesystem as `dest` (rename is only atomic within one filesystem).
pub fn write_atomic(dest: &Path, bytes: &[u8], temp_dir: &Path) -> io::Result<()> {
    let temp = temp_beside(dest, temp_dir)?;
    let result = (|| {
        let mut file = File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, dest)?;
        if let Some(parent) = dest.parent() {
            // Persist the rename itself; without this a crash can forget the new name.
            File::open(parent)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// Like [`write_atomic`] without the two fsyncs, for data that carries its own checksum and can
/// be made again (the store's memos: one torn or lost by a power cut reads as missing and is
/// asked again). A reader still never sees a half-written file while the system is up, and a
/// killed process leaves nothing half-written either: the page cache keeps what was written.
pub fn write_atomic_unsynced(dest: &Path, bytes: &[u8], temp_dir: &Path) -> io::Result<()> {
    let temp = temp_beside(dest, temp_dir)?;
    let result = fs::write(&temp, bytes).and_then(|()| fs::rename(&temp, dest));
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// Makes `files`, written under `root` by [`write_atomic_unsynced`], durable with their names:
/// on Linux one `syncfs` of the filesystem holding `root`, elsewhere an fsync of each file and
/// of each directory holding one.
pub fn make_durable(root: &Path, files: &[std::path::PathBuf]) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let _ = files;
        let directory = File::open(root)?;
        // SAFETY: the descriptor is open for the duration of the call, which only reads it.
        if unsafe { libc::syncfs(directory.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = root;
        let mut directories = std::collections::BTreeSet::new();
        for file in files {
            File::open(file)?.sync_all()?;
            if let Some(parent) = file.parent() {
                directories.insert(parent.to_path_buf());
            }
        }
        for directory in directories {
            File::open(directory)?.sync_all()?;
        }
        Ok(())
    }
}

/// Writes next to the destination: for project files outside the artifact store.
pub fn write_atomic_beside(dest: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = dest.parent().unwrap_or_else(|| Path::new("."));
    write_atomic(dest, bytes, dir)
}

/// Why a path that should name a regular file (after following symlinks) cannot be read as
/// one. Reading a FIFO blocks until something writes to it, and a directory or a device is
/// never a script, a manifest or a settings file, so all are refused before they are opened.
#[derive(Debug, thiserror::Error)]
pub enum NotAFile {
    #[error(
        "is a symlink loop (following its links never reaches a file); point the link at a file"
    )]
    SymlinkLoop,
    #[error("is {kind}, not a regular file; replace it with a file")]
    Special { kind: &'static str },
    #[error("cannot be read: {0}")]
    Io(io::Error),
}

/// `ELOOP`: too many levels of symbolic links.
#[cfg(any(target_os = "linux", target_os = "android"))]
const ELOOP: i32 = 40;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const ELOOP: i32 = 62;

/// Whether `error` says a path's symlinks loop.
pub fn is_symlink_loop(error: &io::Error) -> bool {
    cfg!(unix) && error.raw_os_error() == Some(ELOOP)
}

/// The metadata of the regular file at `path` (symlinks followed); `Ok(None)` when nothing is
/// there (a dangling symlink included), an error when something is there that is not a
/// regular file or cannot be examined.
pub fn regular_file(path: &Path) -> Result<Option<fs::Metadata>, NotAFile> {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) if is_symlink_loop(&error) => return Err(NotAFile::SymlinkLoop),
        Err(error) => return Err(NotAFile::Io(error)),
    };
    if meta.is_file() {
        return Ok(Some(meta));
    }
    Err(NotAFile::Special {
        kind: file_kind(&meta.file_type()),
    })
}

/// What a non-regular file is, in words.
fn file_kind(file_type: &fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_block_device() || file_type.is_char_device() {
            return "a device";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn fifos_directories_and_symlink_loops_are_not_regular_files() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        std::fs::write(dir.join("file"), "x").unwrap();
        std::os::unix::fs::symlink("file", dir.join("link")).unwrap();
        std::os::unix::fs::symlink("loop_b", dir.join("loop_a")).unwrap();
        std::os::unix::fs::symlink("loop_a", dir.join("loop_b")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());

        assert!(regular_file(&dir.join("file")).unwrap().is_some());
        assert!(regular_file(&dir.join("link")).unwrap().is_some());
        assert!(regular_file(&dir.join("absent")).unwrap().is_none());
        assert!(regular_file(&dir.join("dangling")).unwrap().is_none());
        let loop_error = regular_file(&dir.join("loop_a")).unwrap_err();
        assert!(matches!(loop_error, NotAFile::SymlinkLoop), "{loop_error}");
        assert!(loop_error.to_string().contains("symlink loop"));
        let fifo_error = regular_file(&fifo).unwrap_err().to_string();
        assert!(fifo_error.contains("a FIFO"), "{fifo_error}");
        let dir_error = regular_file(dir).unwrap_err().to_string();
        assert!(dir_error.contains("a directory"), "{dir_error}");
    }
}
