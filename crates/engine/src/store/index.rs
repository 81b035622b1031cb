//! The local index: (stage, item) -> the record of its last run, the action cache (cache key
//! -> the record of the successful run that had it), the key parts `status --why` explains
//! with, and the hashes of raw files; in sled, behind [`Index`], with what repairs a damaged
//! one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sled::Transactional;

use super::record::Record;
use super::{StoreError, io_error};
use crate::fsutil::write_atomic_beside;
use crate::hash::ContentHash;
use crate::key::KeyParts;

/// A file's identity as last hashed, so unchanged raw media is not re-read on every build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileFingerprint {
    pub len: u64,
    pub modified_ns: u128,
    pub blake3: ContentHash,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// A successful run found by its cache key: the (stage, item) it was made for and its record.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    pub stage: String,
    pub item: String,
    pub record: Record,
}

/// Where [`Index::drain_legacy_memos`] hands each legacy memo (its key and bytes).
pub type MemoSink<'a> = &'a mut dyn FnMut(&ContentHash, &[u8]) -> Result<(), StoreError>;

/// The (stage, item) -> record map, and the action cache: cache key -> the successful run that
/// had it. Implementations must make each `put` atomic: after a crash a record is either absent
/// or complete, and so is its action.
pub trait Index: Send + Sync {
    fn get(&self, stage: &str, item: &str) -> Result<Option<Record>, StoreError>;
    fn put(
        &self,
        stage: &str,
        item: &str,
        record: &Record,
        parts: Option<&KeyParts>,
    ) -> Result<(), StoreError>;
    fn remove(&self, stage: &str, item: &str) -> Result<(), StoreError>;
    /// The successful run whose cache key was `key`, if one was ever `put` (and not dropped by
    /// [`Index::retain_actions`]).
    fn action(&self, key: &ContentHash) -> Result<Option<Action>, StoreError>;
    /// Keeps the actions `keep` says yes to and drops the others; returns how many it dropped.
    fn retain_actions(&self, keep: &mut dyn FnMut(&Action) -> bool) -> Result<usize, StoreError>;
    fn key_parts(&self, stage: &str, item: &str) -> Result<Option<KeyParts>, StoreError>;
    /// Every record of one stage, sorted by item id.
    fn scan_stage(&self, stage: &str) -> Result<Vec<(String, Record)>, StoreError>;
    /// Every record, sorted by (stage, item).
    fn scan_all(&self) -> Result<Vec<(String, String, Record)>, StoreError>;
    fn file_fingerprint(&self, path: &str) -> Result<Option<FileFingerprint>, StoreError>;
    fn put_file_fingerprint(
        &self,
        path: &str,
        fingerprint: &FileFingerprint,
    ) -> Result<(), StoreError>;
    /// Makes everything put so far durable.
    fn flush(&self) -> Result<(), StoreError>;
    /// Reads every entry, so that damage anywhere surfaces as [`StoreError::IndexDamaged`];
    /// returns how many entries were read.
    fn check(&self) -> Result<usize, StoreError>;
    /// Hands over, then forgets, memos an older viss kept in the index (they now live in files,
    /// see [`Store::memo_get`]); returns how many.
    fn drain_legacy_memos(&self, _put: MemoSink<'_>) -> Result<usize, StoreError> {
        Ok(0)
    }
}

fn record_key(stage: &str, item: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(stage.len() + item.len() + 1);
    key.extend_from_slice(stage.as_bytes());
    key.push(0);
    key.extend_from_slice(item.as_bytes());
    key
}

pub(super) fn split_record_key(key: &[u8]) -> (String, String) {
    let at = key.iter().position(|&b| b == 0).unwrap_or(key.len());
    let stage = String::from_utf8_lossy(&key[..at]).into_owned();
    let item = String::from_utf8_lossy(key.get(at + 1..).unwrap_or_default()).into_owned();
    (stage, item)
}

/// An action's bytes: the length of its (stage, item) key, that key, the record's bytes.
pub(super) fn encode_action(stage: &str, item: &str, record_bytes: &[u8]) -> Vec<u8> {
    let key = record_key(stage, item);
    let mut bytes = Vec::with_capacity(4 + key.len() + record_bytes.len());
    bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&key);
    bytes.extend_from_slice(record_bytes);
    bytes
}

pub(super) fn decode_action(bytes: &[u8]) -> Result<Action, String> {
    let length = bytes
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .ok_or("an action shorter than its header")? as usize;
    let key = bytes
        .get(4..4 + length)
        .ok_or("an action shorter than its (stage, item)")?;
    let (stage, item) = split_record_key(key);
    let record = Record::decode(&bytes[4 + length..]).map_err(|e| e.to_string())?;
    Ok(Action {
        stage,
        item,
        record,
    })
}

pub struct SledIndex {
    path: PathBuf,
    /// `<index>.seal`: the generation of the last flush (see [`SledIndex::flush`]).
    seal: PathBuf,
    db: sled::Db,
    pub(super) records: sled::Tree,
    key_parts: sled::Tree,
    /// Cache key -> [`encode_action`].
    actions: sled::Tree,
    files: sled::Tree,
    meta: sled::Tree,
}

/// The tree an older viss kept memos in.
pub(super) const LEGACY_MEMO_TREE: &[u8] = b"memo";
/// In the `meta` tree: a counter bumped by every flush, big-endian u64.
const GENERATION_KEY: &[u8] = b"generation";

/// sled's errors as the store's: corruption means a damaged index, with what to do about it.
fn sled_error(path: &Path, error: sled::Error) -> StoreError {
    match error {
        sled::Error::Corruption { .. } => StoreError::IndexDamaged {
            path: path.to_path_buf(),
            detail: "sled read corrupt data in it".to_string(),
        },
        other => StoreError::Index {
            path: path.to_path_buf(),
            message: other.to_string(),
        },
    }
}

/// Opens a copy (at `copy`) of the damaged index at `damaged`, so that what sled writes while
/// recovering does not change the index kept for inspection. When sled refuses it (its snapshot
/// points past the damage), the copy's snapshots are dropped and it is opened again: sled then
/// rebuilds its state from the log alone, up to the damage.
/// Tries at opening the index while this process's previous handle lets go of it (100 ms
/// apart; sled's flusher wakes every 200 ms).
const INDEX_LOCK_RETRIES: usize = 30;

pub(super) fn open_for_salvage(damaged: &Path, copy: &Path) -> Result<SledIndex, StoreError> {
    let _ = fs::remove_dir_all(copy);
    copy_dir(damaged, copy)?;
    match SledIndex::open_unchecked(copy) {
        Err(StoreError::IndexDamaged { .. }) => {
            for entry in fs::read_dir(copy).map_err(io_error(copy))? {
                let entry = entry.map_err(io_error(copy))?;
                if entry.file_name().to_string_lossy().starts_with("snap.") {
                    fs::remove_file(entry.path()).map_err(io_error(&entry.path()))?;
                }
            }
            SledIndex::open_unchecked(copy)
        }
        opened => opened,
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), StoreError> {
    fs::create_dir_all(to).map_err(io_error(to))?;
    for entry in fs::read_dir(from).map_err(io_error(from))? {
        let entry = entry.map_err(io_error(from))?;
        let target = to.join(entry.file_name());
        if entry.file_type().map_err(io_error(from))?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target).map_err(io_error(&target))?;
        }
    }
    Ok(())
}

/// `<root>/index.damaged-<unix seconds>`, with `-2`, `-3`... if taken.
pub(super) fn damaged_index_path(root: &Path) -> PathBuf {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = root.join(format!("index.damaged-{seconds}"));
    let mut path = base.clone();
    let mut n = 1;
    while path.exists() {
        n += 1;
        path = PathBuf::from(format!("{}-{n}", base.display()));
    }
    path
}

pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string())
}

/// Removes the `snap.<lsn>.generating` files a kill left in a sled directory. sled 0.34 writes
/// a snapshot under that name and renames it only once it is complete and synced, yet on open it
/// reads the newest `snap.*` file, partial ones included, and refuses to open on a truncated one
/// (sled issue #1527; a SIGKILL in our crash test hit it about once in eight runs). Dropping the
/// unfinished file loses nothing: sled deletes the previous snapshot only after the rename, and
/// replays its log from there.
fn remove_unfinished_snapshots(path: &Path) -> Result<(), StoreError> {
    let entries = match fs::read_dir(path) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(io_error(path)(error)),
    };
    for entry in entries {
        let entry = entry.map_err(io_error(path))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            let file = entry.path();
            fs::remove_file(&file).map_err(io_error(&file))?;
            tracing::warn!(
                "removed {}: a snapshot the artifact index was still writing when a run was killed",
                file.display()
            );
        }
    }
    Ok(())
}

impl SledIndex {
    /// Opens (creating if absent) the index at `path`, refusing a damaged one with
    /// [`StoreError::IndexDamaged`].
    ///
    /// Besides the corruption sled reports itself, this detects damage sled hides: on opening,
    /// sled replays its log only up to the first entry that fails its checksum (or is cut off),
    /// treating the rest as a write a crash interrupted, and opens without a word. A flush
    /// bumps a generation counter in the index and then records it in `<index>.seal`; an
    /// index that opens with an older generation than its seal lost writes that were flushed.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let existed = path.join("db").exists();
        let index = Self::open_unchecked(path)?;
        let sealed = index.sealed_generation()?;
        if !existed {
            // A new index (the old one deleted by hand): a seal left over says nothing about it.
            if sealed.is_some() {
                fs::remove_file(&index.seal).map_err(io_error(&index.seal))?;
            }
        } else if let Some(sealed) = sealed {
            let generation = index.generation()?;
            if generation < sealed {
                return Err(StoreError::IndexDamaged {
                    path: path.to_path_buf(),
                    detail: format!(
                        "it opens with fewer writes than it had when last flushed (generation \
                         {generation}, sealed at {sealed} in {}): sled dropped the part of its \
                         log that follows the damage, and the records written there",
                        index.seal.display()
                    ),
                });
            }
        }
        Ok(index)
    }

    /// Opens without comparing the generation with the seal: for salvaging a damaged index.
    fn open_unchecked(path: &Path) -> Result<Self, StoreError> {
        remove_unfinished_snapshots(path)?;
        let open = || {
            std::panic::catch_unwind(|| {
                sled::Config::new()
                    .path(path)
                    .flush_every_ms(Some(200))
                    .open()
            })
        };
        let mut opened = open();
        // Another process is kept out by the store lock before this, so a held file lock here
        // is this process's previous handle, whose flusher thread outlives its drop by up to a
        // flush interval: wait for it rather than fail.
        for _ in 0..INDEX_LOCK_RETRIES {
            match &opened {
                Ok(Err(error)) if error.to_string().contains("could not acquire lock") => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    opened = open();
                }
                _ => break,
            }
        }
        let db = match opened {
            Ok(opened) => opened.map_err(|e| sled_error(path, e))?,
            Err(panic) => {
                return Err(StoreError::IndexDamaged {
                    path: path.to_path_buf(),
                    detail: format!("sled panicked reading it ({})", panic_message(&*panic)),
                });
            }
        };
        let err = |e| sled_error(path, e);
        let name = path
            .file_name()
            .map_or_else(|| "index".to_string(), |n| n.to_string_lossy().into_owned());
        Ok(Self {
            records: db.open_tree("records").map_err(err)?,
            key_parts: db.open_tree("key_parts").map_err(err)?,
            actions: db.open_tree("actions").map_err(err)?,
            files: db.open_tree("files").map_err(err)?,
            meta: db.open_tree("meta").map_err(err)?,
            db,
            path: path.to_path_buf(),
            seal: path.with_file_name(format!("{name}.seal")),
        })
    }

    fn generation(&self) -> Result<u64, StoreError> {
        let stored = self.meta.get(GENERATION_KEY).map_err(|e| self.err(e))?;
        Ok(stored
            .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_ref()).ok())
            .map_or(0, u64::from_be_bytes))
    }

    /// The generation in the seal file; `None` when there is none (an index made before seals,
    /// or never flushed) or it does not parse (a seal is written whole, so only a hand edit
    /// makes it unreadable: warned about and ignored).
    fn sealed_generation(&self) -> Result<Option<u64>, StoreError> {
        match fs::read_to_string(&self.seal) {
            Ok(text) => {
                let parsed = text.trim().parse().ok();
                if parsed.is_none() {
                    tracing::warn!("ignoring {}: not a generation number", self.seal.display());
                }
                Ok(parsed)
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io_error(&self.seal)(error)),
        }
    }

    fn err(&self, e: sled::Error) -> StoreError {
        sled_error(&self.path, e)
    }

    fn decode_json<T: for<'de> Deserialize<'de>>(
        what: impl FnOnce() -> String,
        bytes: &[u8],
    ) -> Result<T, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| StoreError::Decode {
            what: what(),
            message: e.to_string(),
        })
    }

    fn decode_record(what: impl FnOnce() -> String, bytes: &[u8]) -> Result<Record, StoreError> {
        Record::decode(bytes).map_err(|e| StoreError::Decode {
            what: what(),
            message: e.to_string(),
        })
    }
}

impl Index for SledIndex {
    fn get(&self, stage: &str, item: &str) -> Result<Option<Record>, StoreError> {
        match self
            .records
            .get(record_key(stage, item))
            .map_err(|e| self.err(e))?
        {
            Some(bytes) => Ok(Some(Self::decode_record(
                || format!("{stage} {item}"),
                &bytes,
            )?)),
            None => Ok(None),
        }
    }

    fn put(
        &self,
        stage: &str,
        item: &str,
        record: &Record,
        parts: Option<&KeyParts>,
    ) -> Result<(), StoreError> {
        let key = record_key(stage, item);
        let record_bytes = record.encode();
        let parts_bytes = parts.map(|p| serde_json::to_vec(p).expect("key parts serialize"));
        let action = match record.key {
            Some(cache_key) if !record.failed() => {
                Some((cache_key, encode_action(stage, item, &record_bytes)))
            }
            _ => None,
        };
        // The trees change in one transaction so `status --why` never explains a record with
        // the key parts of another run, and an action is never without its record.
        (&self.records, &self.key_parts, &self.actions)
            .transaction(|(records, key_parts, actions)| {
                records.insert(key.as_slice(), record_bytes.as_slice())?;
                match &parts_bytes {
                    Some(bytes) => key_parts.insert(key.as_slice(), bytes.as_slice())?,
                    None => key_parts.remove(key.as_slice())?,
                };
                if let Some((cache_key, bytes)) = &action {
                    actions.insert(cache_key.as_bytes().as_slice(), bytes.as_slice())?;
                }
                Ok::<(), sled::transaction::ConflictableTransactionError<()>>(())
            })
            .map_err(|e| match e {
                sled::transaction::TransactionError::Storage(e) => self.err(e),
                sled::transaction::TransactionError::Abort(()) => StoreError::Index {
                    path: self.path.clone(),
                    message: "a transaction aborted".to_string(),
                },
            })
    }

    /// Forgets the record and its action: what is removed is to be made again.
    fn remove(&self, stage: &str, item: &str) -> Result<(), StoreError> {
        let key = record_key(stage, item);
        if let Some(cache_key) = self.get(stage, item).ok().flatten().and_then(|r| r.key) {
            self.actions
                .remove(cache_key.as_bytes().as_slice())
                .map_err(|e| self.err(e))?;
        }
        self.records.remove(&key).map_err(|e| self.err(e))?;
        self.key_parts.remove(&key).map_err(|e| self.err(e))?;
        Ok(())
    }

    fn action(&self, key: &ContentHash) -> Result<Option<Action>, StoreError> {
        let Some(bytes) = self
            .actions
            .get(key.as_bytes().as_slice())
            .map_err(|e| self.err(e))?
        else {
            return Ok(None);
        };
        decode_action(&bytes)
            .map(Some)
            .map_err(|message| StoreError::Decode {
                what: format!("the action of key {}", key.to_hex()),
                message,
            })
    }

    fn retain_actions(&self, keep: &mut dyn FnMut(&Action) -> bool) -> Result<usize, StoreError> {
        let mut dropped = 0;
        for entry in self.actions.iter() {
            let (key, value) = entry.map_err(|e| self.err(e))?;
            // One that no longer decodes is as good as gone: drop it too.
            if decode_action(&value).is_ok_and(|action| keep(&action)) {
                continue;
            }
            self.actions.remove(&key).map_err(|e| self.err(e))?;
            dropped += 1;
        }
        Ok(dropped)
    }

    fn key_parts(&self, stage: &str, item: &str) -> Result<Option<KeyParts>, StoreError> {
        match self
            .key_parts
            .get(record_key(stage, item))
            .map_err(|e| self.err(e))?
        {
            Some(bytes) => Ok(Some(Self::decode_json(
                || format!("key parts of {stage} {item}"),
                &bytes,
            )?)),
            None => Ok(None),
        }
    }

    fn scan_stage(&self, stage: &str) -> Result<Vec<(String, Record)>, StoreError> {
        let prefix = record_key(stage, "");
        let mut out = Vec::new();
        for entry in self.records.scan_prefix(&prefix) {
            let (key, value) = entry.map_err(|e| self.err(e))?;
            let (_, item) = split_record_key(&key);
            let record = Self::decode_record(|| format!("{stage} {item}"), &value)?;
            out.push((item, record));
        }
        Ok(out)
    }

    fn scan_all(&self) -> Result<Vec<(String, String, Record)>, StoreError> {
        let mut out = Vec::new();
        for entry in self.records.iter() {
            let (key, value) = entry.map_err(|e| self.err(e))?;
            let (stage, item) = split_record_key(&key);
            let record = Self::decode_record(|| format!("{stage} {item}"), &value)?;
            out.push((stage, item, record));
        }
        Ok(out)
    }

    fn file_fingerprint(&self, path: &str) -> Result<Option<FileFingerprint>, StoreError> {
        match self.files.get(path.as_bytes()).map_err(|e| self.err(e))? {
            Some(bytes) => Ok(Some(Self::decode_json(
                || format!("file fingerprint of {path}"),
                &bytes,
            )?)),
            None => Ok(None),
        }
    }

    fn put_file_fingerprint(
        &self,
        path: &str,
        fingerprint: &FileFingerprint,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(fingerprint).expect("fingerprints serialize");
        self.files
            .insert(path.as_bytes(), bytes)
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Flushes, then bumps the generation, flushes that, and seals it (see [`SledIndex::open`]).
    /// The first flush puts every earlier write before the new generation in sled's log, so an
    /// index that loses any of them loses the generation too.
    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map_err(|e| self.err(e))?;
        let next = self.generation()? + 1;
        self.meta
            .insert(GENERATION_KEY, &next.to_be_bytes())
            .map_err(|e| self.err(e))?;
        self.db.flush().map_err(|e| self.err(e))?;
        write_atomic_beside(&self.seal, format!("{next}\n").as_bytes())
            .map_err(io_error(&self.seal))?;
        Ok(())
    }

    fn check(&self) -> Result<usize, StoreError> {
        let mut read = 0;
        let legacy = self
            .db
            .tree_names()
            .iter()
            .any(|name| name.as_ref() == LEGACY_MEMO_TREE);
        let legacy = match legacy {
            true => Some(
                self.db
                    .open_tree(LEGACY_MEMO_TREE)
                    .map_err(|e| self.err(e))?,
            ),
            false => None,
        };
        for tree in [
            &self.records,
            &self.key_parts,
            &self.actions,
            &self.files,
            &self.meta,
        ]
        .into_iter()
        .chain(legacy.as_ref())
        {
            for entry in tree.iter() {
                entry.map_err(|e| self.err(e))?;
                read += 1;
            }
        }
        Ok(read)
    }

    fn drain_legacy_memos(&self, put: MemoSink<'_>) -> Result<usize, StoreError> {
        self.copy_legacy_memos(put, true)
    }
}

impl SledIndex {
    /// Hands every memo of the legacy memo tree to `put`, then, with `forget`, drops the tree.
    pub(super) fn copy_legacy_memos(
        &self,
        put: MemoSink<'_>,
        forget: bool,
    ) -> Result<usize, StoreError> {
        let has_memos = self
            .db
            .tree_names()
            .iter()
            .any(|name| name.as_ref() == LEGACY_MEMO_TREE);
        if !has_memos {
            return Ok(0);
        }
        let memo = self
            .db
            .open_tree(LEGACY_MEMO_TREE)
            .map_err(|e| self.err(e))?;
        let mut moved = 0;
        for entry in memo.iter() {
            let (key, value) = entry.map_err(|e| self.err(e))?;
            let Ok(key) = <[u8; 32]>::try_from(key.as_ref()) else {
                continue;
            };
            put(&ContentHash::from_bytes(key), &value)?;
            moved += 1;
        }
        if forget {
            // Only once every memo is in its file: a crash before this moves them again.
            self.db
                .drop_tree(LEGACY_MEMO_TREE)
                .map_err(|e| self.err(e))?;
            self.db.flush().map_err(|e| self.err(e))?;
        }
        Ok(moved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &[u8], output: &[u8], error: Option<&str>) -> Record {
        Record {
            key: Some(ContentHash::of(key)),
            outputs: [("out".to_string(), ContentHash::of(output))].into(),
            children: Vec::new(),
            finished_unix_ms: 1,
            duration_ms: 2,
            usage: Default::default(),
            error: error.map(str::to_string),
            flags: Vec::new(),
            problems: Vec::new(),
            stats: Default::default(),
        }
    }

    /// Every successful record is found again by its key, after the item's record moved on to
    /// another key; a failed one is not; removing a record forgets its action; retain drops
    /// what it is told to.
    #[test]
    fn the_action_cache_finds_successful_runs_by_their_key() {
        let temp = tempfile::tempdir().unwrap();
        let index = SledIndex::open(&temp.path().join("index")).unwrap();
        let first = record(b"k1", b"one", None);
        index.put("s", "a/b", &first, None).unwrap();
        index
            .put("s", "a/b", &record(b"k2", b"two", None), None)
            .unwrap();
        let found = index.action(&ContentHash::of(b"k1")).unwrap().unwrap();
        assert_eq!((found.stage.as_str(), found.item.as_str()), ("s", "a/b"));
        assert_eq!(found.record, first);

        index
            .put("s", "a/c", &record(b"k3", b"", Some("boom")), None)
            .unwrap();
        assert_eq!(index.action(&ContentHash::of(b"k3")).unwrap(), None);

        index.remove("s", "a/b").unwrap();
        assert_eq!(index.action(&ContentHash::of(b"k2")).unwrap(), None);
        assert!(index.action(&ContentHash::of(b"k1")).unwrap().is_some());
        let dropped = index
            .retain_actions(&mut |action| action.record.key != Some(ContentHash::of(b"k1")))
            .unwrap();
        assert_eq!(dropped, 1);
        assert_eq!(index.action(&ContentHash::of(b"k1")).unwrap(), None);
    }
}
