//! Memos, in files beside the index.

use std::fs;
use std::io;
use std::path::PathBuf;

use super::{Store, StoreError, io_error, sharded_names, sharded_path};
use crate::hash::ContentHash;

/// Memos: results of expensive pure computations (LLM answers to a request, embeddings of a
/// text), named by the hash of everything that determines them, in `memo/ab/<key>`. Each file
/// is the blake3 hash of the value, then the value, written like a blob (temp file, fsync,
/// rename). They are not in the index, so losing the index loses none of them.
impl Store {
    pub fn memo_path(&self, key: &ContentHash) -> PathBuf {
        sharded_path(&self.memos, key)
    }

    /// The value memoised under `key`, here or else in the remote cache. A memo whose checksum
    /// fails is deleted and reported as [`StoreError::CorruptMemo`]; callers treat it as absent.
    pub fn memo_get(&self, key: &ContentHash) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.memo_path(key);
        let mut bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return self.remote_memo(key),
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        if !sound(&bytes) {
            let _ = fs::remove_file(&path);
            return Err(StoreError::CorruptMemo { path });
        }
        bytes.drain(..32);
        Ok(Some(bytes))
    }

    /// Memoises `value` under `key`, here and in the remote cache.
    pub fn memo_put(&self, key: &ContentHash, value: &[u8]) -> Result<(), StoreError> {
        let file = self.memo_put_local(key, value)?;
        self.share_memo(key, &file);
        Ok(())
    }

    /// Writes the memo file and returns its bytes.
    pub(super) fn memo_put_local(
        &self,
        key: &ContentHash,
        value: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        let path = self.memo_path(key);
        let mut bytes = Vec::with_capacity(32 + value.len());
        bytes.extend_from_slice(ContentHash::of(value).as_bytes());
        bytes.extend_from_slice(value);
        // A memo is checksummed and can be asked again: no fsync, which on a simulation's
        // thousands of short turns cost more than the answers.
        crate::fsutil::write_atomic_unsynced(&path, &bytes, &self.temp).map_err(io_error(&path))?;
        Ok(bytes)
    }

    /// Every memo file's key, for `verify`.
    pub fn memo_keys(&self) -> Result<Vec<ContentHash>, StoreError> {
        sharded_names(&self.memos)
    }
}

/// Whether a memo file's checksum matches its value.
pub(super) fn sound(file: &[u8]) -> bool {
    file.len() >= 32 && ContentHash::of(&file[32..]).as_bytes()[..] == file[..32]
}
