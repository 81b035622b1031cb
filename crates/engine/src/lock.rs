//! One writer per artifacts directory. The lock is an OS file lock, so a writer killed at any
//! instant releases it with its process.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "{path} is held by another viss process ({holder}); only one `viss build` may write to an \
         artifacts directory at a time: wait for it to finish or stop it"
    )]
    Held { path: PathBuf, holder: String },
    #[error("cannot create the lock file {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

#[derive(Debug)]
pub struct StoreLock {
    _file: File,
}

impl StoreLock {
    /// Takes the lock, recording who holds it so a refused writer can say so.
    pub fn acquire(artifacts_dir: &Path, purpose: &str) -> Result<Self, LockError> {
        let path = artifacts_dir.join(".lock");
        let io_err = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(artifacts_dir).map_err(io_err)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let holder = if holder.is_empty() {
                    "holder unknown".to_string()
                } else {
                    holder.to_string()
                };
                return Err(LockError::Held { path, holder });
            }
            Err(TryLockError::Error(source)) => return Err(io_err(source)),
        }
        let note = format!("pid {} running `viss {purpose}`", std::process::id());
        file.set_len(0).map_err(io_err)?;
        file.rewind().map_err(io_err)?;
        file.write_all(note.as_bytes()).map_err(io_err)?;
        Ok(Self { _file: file })
    }
}
