//! The artifact store: immutable blobs named by their blake3 hash, plus an index from
//! (stage, item) to the outputs of its last run. The index lives behind [`Index`] so its
//! database can be swapped without touching the engine.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sled::Transactional;

use crate::dag::key::KeyParts;
use crate::dag::store_dir::{self, StoreDirError};
use crate::fsutil::write_atomic;
use crate::hash::ContentHash;

/// Bump when the on-disk format of blobs or index records changes: a new version starts from an
/// empty store beside the old one, which `viss gc` removes.
pub const LAYOUT_VERSION: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("artifact index {path}: {message}")]
    Index { path: PathBuf, message: String },
    #[error(
        "blob {hash} is corrupt (its bytes no longer hash to its name): {path}; it was deleted and \
         whatever produced it will be rebuilt by the next `viss build`"
    )]
    Corrupt { hash: ContentHash, path: PathBuf },
    #[error("blob {hash} is missing from {path}; run `viss build` to rebuild it")]
    Missing { hash: ContentHash, path: PathBuf },
    #[error(
        "index record for {what} does not decode ({message}); run `viss clean` if the store was written by another viss version"
    )]
    Decode { what: String, message: String },
    #[error(transparent)]
    Dir(#[from] StoreDirError),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Usage of paid or slow resources by one run, summed per stage by `viss status`: in all, and
/// per model (`local`, `openai:gpt-4o-mini`, ...).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub llm_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
    pub by_model: BTreeMap<String, ModelUsage>,
}

/// What one model was asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelUsage {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
}

impl ModelUsage {
    fn add(&mut self, other: &ModelUsage) {
        self.calls += other.calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cost_usd += other.cost_usd;
    }
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.llm_calls += other.llm_calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cost_usd += other.cost_usd;
        for (model, usage) in &other.by_model {
            self.by_model.entry(model.clone()).or_default().add(usage);
        }
    }

    /// Adds calls answered by `model`.
    pub fn add_model(&mut self, model: &str, usage: &ModelUsage) {
        self.add(&Usage {
            llm_calls: usage.calls,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cost_usd: usage.cost_usd,
            by_model: [(model.to_string(), usage.clone())].into(),
        });
    }
}

/// What the index remembers of the last run of one (stage, item). Stored in postcard (a
/// compact binary format without field names: every field is always written).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `None` when the item failed before a key could be computed (bad manifest entry).
    pub key: Option<ContentHash>,
    pub outputs: BTreeMap<String, ContentHash>,
    /// Items of a finer level this run introduced (an episode's scenarios).
    pub children: Vec<String>,
    pub finished_unix_ms: u64,
    pub duration_ms: u64,
    pub usage: Usage,
    pub error: Option<String>,
    /// Warnings about a successful run; see `Outputs::flags`.
    pub flags: Vec<String>,
}

impl Record {
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }
}

/// A file's identity as last hashed, so unchanged raw media is not re-read on every build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileFingerprint {
    pub len: u64,
    pub modified_ns: u128,
    pub blake3: ContentHash,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// The (stage, item) -> record map. Implementations must make each `put` atomic: after a crash
/// a record is either absent or complete.
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
    /// Memoised results of expensive pure computations (embeddings of a text, LLM responses
    /// to a request), named by the hash of everything that determines them.
    fn memo_get(&self, key: &ContentHash) -> Result<Option<Vec<u8>>, StoreError>;
    fn memo_put(&self, key: &ContentHash, value: &[u8]) -> Result<(), StoreError>;
    fn flush(&self) -> Result<(), StoreError>;
}

fn record_key(stage: &str, item: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(stage.len() + item.len() + 1);
    key.extend_from_slice(stage.as_bytes());
    key.push(0);
    key.extend_from_slice(item.as_bytes());
    key
}

fn split_record_key(key: &[u8]) -> (String, String) {
    let at = key.iter().position(|&b| b == 0).unwrap_or(key.len());
    let stage = String::from_utf8_lossy(&key[..at]).into_owned();
    let item = String::from_utf8_lossy(key.get(at + 1..).unwrap_or_default()).into_owned();
    (stage, item)
}

pub struct SledIndex {
    path: PathBuf,
    db: sled::Db,
    records: sled::Tree,
    key_parts: sled::Tree,
    files: sled::Tree,
    memo: sled::Tree,
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
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let err = |e: sled::Error| StoreError::Index {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        remove_unfinished_snapshots(path)?;
        let db = sled::Config::new()
            .path(path)
            .flush_every_ms(Some(200))
            .open()
            .map_err(err)?;
        Ok(Self {
            records: db.open_tree("records").map_err(err)?,
            key_parts: db.open_tree("key_parts").map_err(err)?,
            files: db.open_tree("files").map_err(err)?,
            memo: db.open_tree("memo").map_err(err)?,
            db,
            path: path.to_path_buf(),
        })
    }

    fn err(&self, e: sled::Error) -> StoreError {
        StoreError::Index {
            path: self.path.clone(),
            message: e.to_string(),
        }
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
        postcard::from_bytes(bytes).map_err(|e| StoreError::Decode {
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
        let record_bytes = postcard::to_stdvec(record).expect("records serialize");
        let parts_bytes = parts.map(|p| serde_json::to_vec(p).expect("key parts serialize"));
        // Both trees change in one transaction so `status --why` never explains a record with
        // the key parts of another run.
        (&self.records, &self.key_parts)
            .transaction(|(records, key_parts)| {
                records.insert(key.as_slice(), record_bytes.as_slice())?;
                match &parts_bytes {
                    Some(bytes) => key_parts.insert(key.as_slice(), bytes.as_slice())?,
                    None => key_parts.remove(key.as_slice())?,
                };
                Ok::<(), sled::transaction::ConflictableTransactionError<()>>(())
            })
            .map_err(|e| StoreError::Index {
                path: self.path.clone(),
                message: format!("{e:?}"),
            })
    }

    fn remove(&self, stage: &str, item: &str) -> Result<(), StoreError> {
        let key = record_key(stage, item);
        self.records.remove(&key).map_err(|e| self.err(e))?;
        self.key_parts.remove(&key).map_err(|e| self.err(e))?;
        Ok(())
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

    fn memo_get(&self, key: &ContentHash) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .memo
            .get(key.as_bytes())
            .map_err(|e| self.err(e))?
            .map(|v| v.to_vec()))
    }

    fn memo_put(&self, key: &ContentHash, value: &[u8]) -> Result<(), StoreError> {
        self.memo
            .insert(key.as_bytes(), value)
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map_err(|e| self.err(e))?;
        Ok(())
    }
}

/// Blobs on disk plus the index, under `<artifacts>/v<LAYOUT_VERSION>/`.
pub struct Store {
    root: PathBuf,
    blobs: PathBuf,
    temp: PathBuf,
    index: Box<dyn Index>,
}

impl Store {
    /// Opens (creating if needed) the store under `artifacts_dir`, which must be a marked store
    /// or a directory viss may make one (see [`store_dir::claim`]). Callers hold the writer
    /// lock.
    pub fn open(artifacts_dir: &Path) -> Result<Self, StoreError> {
        store_dir::claim(artifacts_dir)?;
        let root = artifacts_dir.join(format!("v{LAYOUT_VERSION}"));
        let blobs = root.join("blobs");
        let temp = root.join("tmp");
        fs::create_dir_all(&blobs).map_err(io_error(&blobs))?;
        // Temp files left by a killed writer are garbage: nothing refers to them.
        let _ = fs::remove_dir_all(&temp);
        fs::create_dir_all(&temp).map_err(io_error(&temp))?;
        let index = SledIndex::open(&root.join("index"))?;
        Ok(Self {
            root,
            blobs,
            temp,
            index: Box::new(index),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn index(&self) -> &dyn Index {
        self.index.as_ref()
    }

    pub fn blob_path(&self, hash: &ContentHash) -> PathBuf {
        let hex = hash.to_hex();
        self.blobs.join(&hex[..2]).join(&hex)
    }

    pub fn has_blob(&self, hash: &ContentHash) -> bool {
        self.blob_path(hash).is_file()
    }

    /// Stores `bytes` and returns their name. Writing bytes that are already stored is free.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<ContentHash, StoreError> {
        let hash = ContentHash::of(bytes);
        let path = self.blob_path(&hash);
        let already_stored = fs::metadata(&path)
            .map(|m| m.len() == bytes.len() as u64)
            .unwrap_or(false);
        if !already_stored {
            write_atomic(&path, bytes, &self.temp).map_err(io_error(&path))?;
        }
        Ok(hash)
    }

    /// Reads a blob and checks it still hashes to its name. A corrupt blob is deleted so that
    /// nothing can use it again, and reported.
    pub fn get_blob(&self, hash: &ContentHash) -> Result<Vec<u8>, StoreError> {
        let path = self.blob_path(hash);
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
    pub fn blob_names(&self) -> Result<Vec<ContentHash>, StoreError> {
        let mut names = Vec::new();
        for shard in fs::read_dir(&self.blobs).map_err(io_error(&self.blobs))? {
            let shard = shard.map_err(io_error(&self.blobs))?.path();
            if !shard.is_dir() {
                continue;
            }
            for entry in fs::read_dir(&shard).map_err(io_error(&shard))? {
                let entry = entry.map_err(io_error(&shard))?;
                if let Some(hash) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                    names.push(hash);
                }
            }
        }
        names.sort();
        Ok(names)
    }

    pub fn remove_blob(&self, hash: &ContentHash) -> Result<(), StoreError> {
        let path = self.blob_path(hash);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }
}

impl Store {
    /// The blake3 (and, when asked, sha256) of a file, re-read only when its size or mtime
    /// changed since it was last hashed.
    pub fn fingerprint_file(
        &self,
        path: &Path,
        with_sha256: bool,
    ) -> Result<FileFingerprint, StoreError> {
        use sha2::Digest;
        use std::io::Read;
        let meta = fs::metadata(path).map_err(io_error(path))?;
        let modified_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let cache_key = path.to_string_lossy();
        if let Some(cached) = self.index.file_fingerprint(&cache_key)?
            && cached.len == meta.len()
            && cached.modified_ns == modified_ns
            && (cached.sha256.is_some() || !with_sha256)
        {
            return Ok(cached);
        }
        let mut file = fs::File::open(path).map_err(io_error(path))?;
        let mut blake = blake3::Hasher::new();
        let mut sha = with_sha256.then(sha2::Sha256::new);
        let mut buffer = vec![0u8; 1 << 20];
        loop {
            let read = file.read(&mut buffer).map_err(io_error(path))?;
            if read == 0 {
                break;
            }
            blake.update(&buffer[..read]);
            if let Some(sha) = sha.as_mut() {
                sha.update(&buffer[..read]);
            }
        }
        let fingerprint = FileFingerprint {
            len: meta.len(),
            modified_ns,
            blake3: ContentHash::from_hasher(&blake),
            sha256: sha.map(|s| s.finalize().iter().map(|b| format!("{b:02x}")).collect()),
        };
        self.index.put_file_fingerprint(&cache_key, &fingerprint)?;
        Ok(fingerprint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kill while sled wrote a snapshot leaves a partial `snap.*.generating` file; the index
    /// still opens, with everything it held before.
    #[test]
    fn index_opens_after_a_kill_mid_snapshot() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("index");
        let key = ContentHash::of(b"key");
        {
            let index = SledIndex::open(&path).unwrap();
            index.memo_put(&key, b"value").unwrap();
            index.flush().unwrap();
        }
        let partial = path.join("snap.FFFFFFFFFFFFFFFF.generating");
        fs::write(&partial, b"cut").unwrap();
        // Without the clean-up sled itself refuses such a directory.
        assert!(sled::Config::new().path(&path).open().is_err());
        fs::write(&partial, b"cut").unwrap();
        let index = SledIndex::open(&path).unwrap();
        assert_eq!(
            index.memo_get(&key).unwrap().as_deref(),
            Some(&b"value"[..])
        );
        assert!(!partial.exists());
    }
}
