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

    /// The value memoised under `key`. A memo whose checksum fails is deleted and reported as
    /// [`StoreError::CorruptMemo`]; callers treat it as absent.
    pub fn memo_get(&self, key: &ContentHash) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.memo_path(key);
        let mut bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        let sound =
            bytes.len() >= 32 && ContentHash::of(&bytes[32..]).as_bytes()[..] == bytes[..32];
        if !sound {
            let _ = fs::remove_file(&path);
            return Err(StoreError::CorruptMemo { path });
        }
        bytes.drain(..32);
        Ok(Some(bytes))
    }

    pub fn memo_put(&self, key: &ContentHash, value: &[u8]) -> Result<(), StoreError> {
        let path = self.memo_path(key);
        let mut bytes = Vec::with_capacity(32 + value.len());
        bytes.extend_from_slice(ContentHash::of(value).as_bytes());
        bytes.extend_from_slice(value);
        // A memo is checksummed and can be asked again: no fsync, which on a simulation's
        // thousands of short turns cost more than the answers.
        crate::fsutil::write_atomic_unsynced(&path, &bytes, &self.temp).map_err(io_error(&path))
    }

    /// Every memo file's key, for `verify`.
    pub fn memo_keys(&self) -> Result<Vec<ContentHash>, StoreError> {
        sharded_names(&self.memos)
    }
}
