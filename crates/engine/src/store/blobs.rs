//! The content-addressed blobs: immutable bytes named by their blake3 hash, behind
//! [`BlobStore`] so that another backend (an object store, for a cache shared between
//! machines) can hold them; [`FileBlobs`] keeps them as files under `blobs/ab/<hash>`.

use std::fs;
use std::io;
use std::path::PathBuf;

use super::{StoreError, io_error, sharded_names, sharded_path};
use crate::hash::ContentHash;

/// Where blobs live. Every read checks the bytes against their name.
pub trait BlobStore: Send + Sync {
    fn has(&self, hash: &ContentHash) -> bool;
    /// Stores `bytes` and returns their name. Writing bytes that are already stored is free.
    /// The blob is visible at once and survives the process being killed; it is durable across
    /// a power cut after the next [`BlobStore::sync`], which a record naming it must wait for.
    fn put(&self, bytes: &[u8]) -> Result<ContentHash, StoreError>;
    /// Stores the bytes `write` produces and returns their name, without holding them in
    /// memory. An error from `write` leaves nothing stored.
    fn put_streamed(
        &self,
        write: &mut dyn FnMut(&mut dyn io::Write) -> io::Result<()>,
    ) -> Result<ContentHash, StoreError>;
    /// Makes every blob put so far durable.
    fn sync(&self) -> Result<(), StoreError>;
    /// How many times [`BlobStore::sync`] made blobs durable.
    fn syncs(&self) -> u64;
    /// Reads a blob and checks it still hashes to its name. A corrupt blob is deleted so that
    /// nothing can use it again, and reported.
    fn get(&self, hash: &ContentHash) -> Result<Vec<u8>, StoreError>;
    /// Its size in bytes, when it is stored.
    fn size(&self, hash: &ContentHash) -> Option<u64>;
    /// Every blob's name, sorted.
    fn names(&self) -> Result<Vec<ContentHash>, StoreError>;
    /// Forgets a blob; one that is not there is no error.
    fn remove(&self, hash: &ContentHash) -> Result<(), StoreError>;
    /// Where a blob is, for a person to find it.
    fn location(&self, hash: &ContentHash) -> String;
    /// The blob's file, where blobs are files on this machine.
    fn local_path(&self, _hash: &ContentHash) -> Option<PathBuf> {
        None
    }
}

/// Blobs as files, `<dir>/ab/<hash>`, each written whole (temp file, rename) and made durable
/// in batches.
pub struct FileBlobs {
    blobs: PathBuf,
    temp: PathBuf,
    /// Blobs written since [`BlobStore::sync`] last made them durable.
    unsynced: std::sync::Mutex<Vec<PathBuf>>,
    /// Held through a sync, so that a caller that finds nothing pending knows that the sync
    /// which took its blobs has finished. Counts the syncs made.
    syncing: std::sync::Mutex<u64>,
}

impl FileBlobs {
    /// Blobs under `blobs`, written through temp files in `temp` (on the same filesystem).
    pub fn new(blobs: PathBuf, temp: PathBuf) -> Self {
        Self {
            blobs,
            temp,
            unsynced: Default::default(),
            syncing: Default::default(),
        }
    }

    fn path(&self, hash: &ContentHash) -> PathBuf {
        sharded_path(&self.blobs, hash)
    }
}

impl BlobStore for FileBlobs {
    fn has(&self, hash: &ContentHash) -> bool {
        self.path(hash).is_file()
    }

    /// Stores `bytes` and returns their name. Writing bytes that are already stored is free.
    /// The blob is visible at once and survives the process being killed; it is durable across
    /// a power cut after the next [`Store::sync_blobs`], which a record naming it must wait for.
    fn put(&self, bytes: &[u8]) -> Result<ContentHash, StoreError> {
        let hash = ContentHash::of(bytes);
        let path = self.path(&hash);
        let already_stored = fs::metadata(&path)
            .map(|m| m.len() == bytes.len() as u64)
            .unwrap_or(false);
        if !already_stored {
            crate::fsutil::write_atomic_unsynced(&path, bytes, &self.temp)
                .map_err(io_error(&path))?;
            self.unsynced
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(path);
        }
        Ok(hash)
    }

    /// Stores the bytes `write` produces and returns their name, without holding them in
    /// memory: they go to a temp file as they are written, hashed on the way, and the file is
    /// renamed to its name at the end. An error from `write` leaves nothing stored.
    fn put_streamed(
        &self,
        write: &mut dyn FnMut(&mut dyn io::Write) -> io::Result<()>,
    ) -> Result<ContentHash, StoreError> {
        use std::io::Write as _;
        struct Hashing<W> {
            out: W,
            hasher: blake3::Hasher,
        }
        impl<W: io::Write> io::Write for Hashing<W> {
            fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
                let written = self.out.write(bytes)?;
                self.hasher.update(&bytes[..written]);
                Ok(written)
            }
            fn flush(&mut self) -> io::Result<()> {
                self.out.flush()
            }
        }
        let temp = crate::fsutil::temp_file_in(&self.temp).map_err(io_error(&self.temp))?;
        let result = (|| {
            let file = fs::File::create(&temp)?;
            let mut out = io::BufWriter::with_capacity(
                1 << 16,
                Hashing {
                    out: file,
                    hasher: blake3::Hasher::new(),
                },
            );
            write(&mut out)?;
            out.flush()?;
            let hashing = out.into_inner().map_err(io::IntoInnerError::into_error)?;
            Ok(ContentHash::from_bytes(
                *hashing.hasher.finalize().as_bytes(),
            ))
        })();
        let hash = match result {
            Ok(hash) => hash,
            Err(error) => {
                let _ = fs::remove_file(&temp);
                return Err(StoreError::Io {
                    path: temp,
                    source: error,
                });
            }
        };
        let path = self.path(&hash);
        let stored = fs::metadata(&path)
            .is_ok_and(|m| fs::metadata(&temp).is_ok_and(|written| written.len() == m.len()));
        if stored {
            let _ = fs::remove_file(&temp);
            return Ok(hash);
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io_error(parent))?;
        }
        fs::rename(&temp, &path).map_err(io_error(&path))?;
        self.unsynced
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(path);
        Ok(hash)
    }

    /// Makes every blob written so far durable, with one flush of the filesystem for all of
    /// them (`syncfs` on Linux) rather than two fsyncs each: an episode whose script has
    /// 100,000 scenarios writes 200,000 blobs in one job. Called before a record naming them is
    /// committed.
    fn sync(&self) -> Result<(), StoreError> {
        let mut syncs = self
            .syncing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let written = std::mem::take(
            &mut *self
                .unsynced
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        if written.is_empty() {
            return Ok(());
        }
        *syncs += 1;
        crate::fsutil::make_durable(&self.blobs, &written).map_err(io_error(&self.blobs))
    }

    /// How many times [`Store::sync_blobs`] flushed blobs to disk.
    fn syncs(&self) -> u64 {
        *self
            .syncing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reads a blob and checks it still hashes to its name. A corrupt blob is deleted so that
    /// nothing can use it again, and reported.
    fn get(&self, hash: &ContentHash) -> Result<Vec<u8>, StoreError> {
        let path = self.path(hash);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::Missing { hash: *hash, path });
            }
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        if ContentHash::of(&bytes) != *hash {
            let _ = fs::remove_file(&path);
            return Err(StoreError::Corrupt { hash: *hash, path });
        }
        Ok(bytes)
    }

    /// Every blob file's name, for `gc` and `verify`.
    fn names(&self) -> Result<Vec<ContentHash>, StoreError> {
        sharded_names(&self.blobs)
    }

    fn remove(&self, hash: &ContentHash) -> Result<(), StoreError> {
        let path = self.path(hash);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }

    fn size(&self, hash: &ContentHash) -> Option<u64> {
        fs::metadata(self.path(hash)).ok().map(|m| m.len())
    }

    fn location(&self, hash: &ContentHash) -> String {
        self.path(hash).display().to_string()
    }

    fn local_path(&self, hash: &ContentHash) -> Option<PathBuf> {
        Some(self.path(hash))
    }
}
