//! Crash-safe file writes: a reader sees either the old file or the complete new one, never a
//! torn write, because bytes go to a temp file in the same directory, are fsynced, and are then
//! renamed over the destination.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `dest` atomically, creating parent directories. `temp_dir` must be on the
/// same filesystem as `dest` (rename is only atomic within one filesystem).
pub fn write_atomic(dest: &Path, bytes: &[u8], temp_dir: &Path) -> io::Result<()> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::create_dir_all(temp_dir)?;
    let temp = temp_dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
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

/// Writes next to the destination: for project files outside the artifact store.
pub fn write_atomic_beside(dest: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = dest.parent().unwrap_or_else(|| Path::new("."));
    write_atomic(dest, bytes, dir)
}
