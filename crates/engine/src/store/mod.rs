//! The artifact store, in parts:
//! - [`blobs`]: immutable bytes named by their blake3 hash, behind [`BlobStore`] (files here;
//!   an object store for a cache shared between machines);
//! - [`memo`]: results of expensive pure computations (LLM answers, embeddings) named by the
//!   hash of what determines them;
//! - [`index`]: (stage, item) -> the [`Record`] of its last run, and the action cache, cache key
//!   -> the record of the successful run that had it (so a result is found by its key, and a
//!   setting changed and changed back finds its old results), behind [`Index`];
//! - [`record`]: what a record holds and its bytes;
//! - this module: the [`Store`] that holds them together, and its repair.
//!
//! Blobs and memos are files, each written whole (temp file, fsync, rename) and checked on every
//! read; the index is a database whose loss costs only re-running stages, since the memos make
//! re-running free of LLM calls and embeddings. A damaged index is detected when opened (or on
//! the read that meets the damage) and reported with what to do: `viss verify --repair`, which
//! moves it aside and starts a new one with what the old one can still vouch for
//! ([`Store::open_repairing`]).

pub mod blobs;
pub mod index;
pub mod memo;
pub mod record;
pub mod remote;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::hash::ContentHash;
use crate::port::Port;
use crate::store_dir::{self, StoreDirError};

pub use blobs::{BlobStore, FileBlobs};
pub use index::{Action, FileFingerprint, Index, MemoSink, SledIndex};
pub use record::{ModelUsage, Record, Usage};
pub use remote::{KeyedKind, KeyedObjects, Remote, RemoteCounts, RemoteHoldings};

use index::{damaged_index_path, open_for_salvage, panic_message, split_record_key};

/// Bump when the on-disk format of blobs or index records changes: a new version starts from an
/// empty store beside the old one, which `viss gc` removes. (Moving the memos out of the index
/// into `memo/` did not bump it: a v3 index's memo table is moved into files when opened.)
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
        "index record for {what} does not decode ({message}); run `viss clean` if the store was \
         written by another viss version"
    )]
    Decode { what: String, message: String },
    #[error(
        "the artifact index {path} is damaged: {detail}. Run `viss verify --repair`: it moves the \
         damaged index aside, starts a new one with every record the old one still vouches for, \
         and keeps the memoised LLM answers and embeddings (they live in memo/ beside the index), \
         so the next `viss build` re-runs what was lost without paying for LLM calls again"
    )]
    IndexDamaged { path: PathBuf, detail: String },
    #[error(
        "memo {path} is corrupt (its checksum does not match its bytes); it was deleted, and \
         what it held will be computed again"
    )]
    CorruptMemo { path: PathBuf },
    #[error(
        "the stored {what} does not decode ({message}); if another viss version wrote it, \
         `viss clean` and rebuild"
    )]
    OutputDecode { what: String, message: String },
    #[error(
        "{what} in the remote cache {location} is damaged (a blob no longer hashing to its name, \
         or bytes that do not decode); it was deleted there and is not used: its result is \
         computed here and shared again"
    )]
    RemoteCorrupt { what: String, location: String },
    #[error("remote cache {location}: {message}")]
    Remote { location: String, message: String },
    #[error("{what} is not in the remote cache {location}")]
    RemoteMissing { what: String, location: String },
    #[error(transparent)]
    Dir(#[from] StoreDirError),
}

/// `dir/ab/<hash>`: where a file named by a hash lives, in 256 shards by its first two digits
/// (blobs and memos alike).
fn sharded_path(dir: &Path, hash: &ContentHash) -> PathBuf {
    let hex = hash.to_hex();
    dir.join(&hex[..2]).join(&hex)
}

/// The names of the files [`sharded_path`] placed under `dir`, sorted.
fn sharded_names(dir: &Path) -> Result<Vec<ContentHash>, StoreError> {
    let mut names = Vec::new();
    for shard in fs::read_dir(dir).map_err(io_error(dir))? {
        let shard = shard.map_err(io_error(dir))?.path();
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

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What [`Store::open_repairing`] did about a damaged index.
#[derive(Debug, Clone, Serialize)]
pub struct IndexRepair {
    /// What was wrong with it.
    pub damage: String,
    /// Where the damaged index was moved (kept for inspection; `viss clean` deletes it).
    pub moved_to: PathBuf,
    /// Records copied into the new index: readable, successful, and every output present.
    pub records_salvaged: usize,
    /// Records left behind: unreadable, failed, or an output missing. The next build re-runs
    /// those, and what was lost with the part of the index that could not be read.
    pub records_dropped: usize,
    /// Memos the damaged index held (an older viss kept them there), moved into files.
    pub memos_salvaged: usize,
}

impl IndexRepair {
    /// What `viss verify --repair` says it did, a line each.
    pub fn render(&self) -> String {
        format!(
            "the index was damaged: {}\n  moved it to {}\n  started a new one: {} record(s) \
             salvaged, {} left behind; {} memo(s) moved out of it\n  `viss build` re-runs the \
             rest; memoised LLM answers and embeddings are reused, so it makes no LLM call it \
             made before\n",
            self.damage,
            self.moved_to.display(),
            self.records_salvaged,
            self.records_dropped,
            self.memos_salvaged
        )
    }
}

/// The content-addressed blobs, the memos and the index, under
/// `<artifacts>/v<LAYOUT_VERSION>/`.
pub struct Store {
    root: PathBuf,
    blobs: Box<dyn BlobStore>,
    memos: PathBuf,
    temp: PathBuf,
    index: Box<dyn Index>,
    remote: Option<Remote>,
}

impl Store {
    /// Opens (creating if needed) the store under `artifacts_dir`, which must be a marked store
    /// or a directory viss may make one (see [`store_dir::claim`]). Callers hold the writer
    /// lock. A damaged index is refused with [`StoreError::IndexDamaged`].
    pub fn open(artifacts_dir: &Path) -> Result<Self, StoreError> {
        Ok(Self::open_with(artifacts_dir, false)?.0)
    }

    /// As [`Store::open`], but reads the whole index, and if it is damaged moves it aside to
    /// `index.damaged-<unix time>` and starts a new one holding the records of the old one
    /// that still read and whose outputs are all stored. Memos are files, not in the index, so
    /// none is lost.
    pub fn open_repairing(artifacts_dir: &Path) -> Result<(Self, Option<IndexRepair>), StoreError> {
        Self::open_with(artifacts_dir, true)
    }

    fn open_with(
        artifacts_dir: &Path,
        repair: bool,
    ) -> Result<(Self, Option<IndexRepair>), StoreError> {
        store_dir::claim(artifacts_dir)?;
        let root = artifacts_dir.join(format!("v{LAYOUT_VERSION}"));
        let blobs = root.join("blobs");
        let memos = root.join("memo");
        let temp = root.join("tmp");
        fs::create_dir_all(&blobs).map_err(io_error(&blobs))?;
        fs::create_dir_all(&memos).map_err(io_error(&memos))?;
        // Temp files left by a killed writer are garbage: nothing refers to them.
        let _ = fs::remove_dir_all(&temp);
        fs::create_dir_all(&temp).map_err(io_error(&temp))?;
        let index_path = root.join("index");
        let opened = SledIndex::open(&index_path).and_then(|index| {
            if repair {
                index.check()?;
            }
            Ok(index)
        });
        let (index, damage) = match opened {
            Ok(index) => (index, None),
            Err(StoreError::IndexDamaged { detail, .. }) if repair => {
                let moved_to = damaged_index_path(&root);
                fs::rename(&index_path, &moved_to).map_err(io_error(&index_path))?;
                tracing::warn!(
                    "the artifact index was damaged ({detail}): moved it to {}",
                    moved_to.display()
                );
                (SledIndex::open(&index_path)?, Some((detail, moved_to)))
            }
            Err(error) => return Err(error),
        };
        let store = Self {
            root,
            blobs: Box::new(FileBlobs::new(blobs, temp.clone())),
            memos,
            temp,
            index: Box::new(index),
            remote: None,
        };
        let moved = store
            .index
            .drain_legacy_memos(&mut |key, value| store.memo_put(key, value))?;
        if moved > 0 {
            tracing::info!(
                "moved {moved} memo(s) from the index into {}",
                store.memos.display()
            );
        }
        let repair = match damage {
            Some((damage, moved_to)) => Some(store.salvage(damage, moved_to)?),
            None => None,
        };
        Ok((store, repair))
    }

    /// Copies into the (new) index what the damaged one at `moved_to` still vouches for: each
    /// successful record that reads and whose outputs are all stored (a stale record is
    /// harmless: its key no longer matches and its item re-runs), with its key parts; and any
    /// memos it held. Stops at the first entry sled cannot read, or if sled panics.
    fn salvage(&self, damage: String, moved_to: PathBuf) -> Result<IndexRepair, StoreError> {
        let mut repair = IndexRepair {
            damage,
            moved_to,
            records_salvaged: 0,
            records_dropped: 0,
            memos_salvaged: 0,
        };
        let copy = self.temp.join("salvage");
        let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let old = open_for_salvage(&repair.moved_to, &copy)?;
            for entry in old.records.iter() {
                let Ok((key, value)) = entry else {
                    break;
                };
                let (stage, item) = split_record_key(&key);
                let record = postcard::from_bytes::<Record>(&value).ok();
                let vouched = record.filter(|record| {
                    record.key.is_some()
                        && !record.failed()
                        && record.outputs.values().all(|hash| self.has_blob(hash))
                });
                let Some(record) = vouched else {
                    repair.records_dropped += 1;
                    continue;
                };
                let parts = old.key_parts(&stage, &item).ok().flatten();
                self.index.put(&stage, &item, &record, parts.as_ref())?;
                repair.records_salvaged += 1;
            }
            repair.memos_salvaged =
                old.copy_legacy_memos(&mut |key, value| self.memo_put(key, value), false)?;
            Ok::<(), StoreError>(())
        }));
        let _ = fs::remove_dir_all(&copy);
        match walked {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!("salvaging the damaged index stopped: {error}"),
            Err(panic) => tracing::warn!(
                "salvaging the damaged index stopped: sled panicked ({})",
                panic_message(&*panic)
            ),
        }
        self.index.flush()?;
        Ok(repair)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn index(&self) -> &dyn Index {
        self.index.as_ref()
    }

    /// The store's blobs (see [`BlobStore`]).
    pub fn blobs(&self) -> &dyn BlobStore {
        self.blobs.as_ref()
    }

    pub fn has_blob(&self, hash: &ContentHash) -> bool {
        self.blobs.has(hash)
    }

    /// See [`BlobStore::put`].
    pub fn put_blob(&self, bytes: &[u8]) -> Result<ContentHash, StoreError> {
        self.blobs.put(bytes)
    }

    /// See [`BlobStore::put_streamed`].
    pub fn put_blob_streamed(
        &self,
        write: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
    ) -> Result<ContentHash, StoreError> {
        let mut write = Some(write);
        self.blobs.put_streamed(&mut |out| match write.take() {
            Some(write) => write(out),
            None => Ok(()),
        })
    }

    /// See [`BlobStore::sync`].
    pub fn sync_blobs(&self) -> Result<(), StoreError> {
        self.blobs.sync()
    }

    /// How many times [`Store::sync_blobs`] flushed blobs to disk.
    pub fn blob_syncs(&self) -> u64 {
        self.blobs.syncs()
    }

    /// What `port` holds for `item`, decoded: `None` when its last run wrote none (or failed).
    pub fn read<T: DeserializeOwned>(
        &self,
        port: &Port<T>,
        item: &str,
    ) -> Result<Option<T>, StoreError> {
        let id = port.id();
        match self.index.get(id.stage, item)? {
            Some(record) => Ok(self
                .outputs(port, &[(item.to_string(), record)])?
                .pop()
                .map(|(_, value)| value)),
            None => Ok(None),
        }
    }

    /// What `port` holds for every item of its stage, decoded, in item order; items whose last
    /// run wrote none (or failed) are left out.
    pub fn read_all<T: DeserializeOwned>(
        &self,
        port: &Port<T>,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let records = self.index.scan_stage(port.id().stage)?;
        self.outputs(port, &records)
    }

    /// What `port` holds for each of `records` (items of its stage, from
    /// [`Index::scan_stage`]) that has it, decoded, in their order.
    pub fn outputs<T: DeserializeOwned>(
        &self,
        port: &Port<T>,
        records: &[(String, Record)],
    ) -> Result<Vec<(String, T)>, StoreError> {
        let id = port.id();
        let name = id.output_name("");
        let mut out = Vec::new();
        for (item, record) in records {
            let Some(hash) = record.outputs.get(&name) else {
                continue;
            };
            let value = serde_json::from_slice(&self.get_blob(hash)?).map_err(|source| {
                StoreError::OutputDecode {
                    what: format!("{name} of {} {item}", id.stage),
                    message: source.to_string(),
                }
            })?;
            out.push((item.clone(), value));
        }
        Ok(out)
    }

    /// See [`BlobStore::get`].
    pub fn get_blob(&self, hash: &ContentHash) -> Result<Vec<u8>, StoreError> {
        self.blobs.get(hash)
    }

    /// Every blob's name, for `gc` and `verify`.
    pub fn blob_names(&self) -> Result<Vec<ContentHash>, StoreError> {
        self.blobs.names()
    }

    pub fn remove_blob(&self, hash: &ContentHash) -> Result<(), StoreError> {
        self.blobs.remove(hash)
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
    use std::collections::BTreeMap;

    use super::index::LEGACY_MEMO_TREE;
    use super::*;

    fn fingerprint(n: u64) -> FileFingerprint {
        FileFingerprint {
            len: n,
            modified_ns: 0,
            blake3: ContentHash::of(&n.to_le_bytes()),
            sha256: None,
        }
    }

    /// A kill while sled wrote a snapshot leaves a partial `snap.*.generating` file; the index
    /// still opens, with everything it held before.
    #[test]
    fn index_opens_after_a_kill_mid_snapshot() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("index");
        {
            let index = SledIndex::open(&path).unwrap();
            index.put_file_fingerprint("a", &fingerprint(1)).unwrap();
            index.flush().unwrap();
        }
        let partial = path.join("snap.FFFFFFFFFFFFFFFF.generating");
        fs::write(&partial, b"cut").unwrap();
        // Without the clean-up sled itself refuses such a directory.
        assert!(sled::Config::new().path(&path).open().is_err());
        fs::write(&partial, b"cut").unwrap();
        let index = SledIndex::open(&path).unwrap();
        assert_eq!(index.file_fingerprint("a").unwrap(), Some(fingerprint(1)));
        assert!(!partial.exists());
    }

    #[test]
    fn many_blobs_are_made_durable_by_one_sync_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let hashes: Vec<ContentHash> = (0..500)
            .map(|i| store.put_blob(format!("scenario {i}").as_bytes()).unwrap())
            .collect();
        // Writing what is stored already writes nothing.
        store.put_blob(b"scenario 7").unwrap();
        assert_eq!(store.blob_syncs(), 0, "nothing flushed yet");
        store.sync_blobs().unwrap();
        store.sync_blobs().unwrap();
        assert_eq!(
            store.blob_syncs(),
            1,
            "one flush for 500 blobs, none for none"
        );
        for (i, hash) in hashes.iter().enumerate() {
            assert_eq!(
                store.get_blob(hash).unwrap(),
                format!("scenario {i}").as_bytes()
            );
        }
    }

    #[test]
    fn memos_are_checksummed_files_and_a_corrupt_one_is_dropped() {
        let temp = tempfile::tempdir().unwrap();
        let store = Store::open(&temp.path().join("artifacts")).unwrap();
        let key = ContentHash::of(b"request");
        assert_eq!(store.memo_get(&key).unwrap(), None);
        store.memo_put(&key, b"answer").unwrap();
        assert_eq!(
            store.memo_get(&key).unwrap().as_deref(),
            Some(&b"answer"[..])
        );
        assert_eq!(store.memo_keys().unwrap(), [key]);
        let path = store.memo_path(&key);
        let mut bytes = fs::read(&path).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        fs::write(&path, bytes).unwrap();
        let error = store.memo_get(&key).unwrap_err();
        assert!(matches!(error, StoreError::CorruptMemo { .. }), "{error}");
        assert_eq!(
            store.memo_get(&key).unwrap(),
            None,
            "deleted, so computed again"
        );
    }

    /// A v3 index of the viss before memos moved into files: they move when it is opened.
    #[test]
    fn memos_an_older_viss_kept_in_the_index_move_into_files() {
        let temp = tempfile::tempdir().unwrap();
        let artifacts = temp.path().join("artifacts");
        let index = artifacts.join(format!("v{LAYOUT_VERSION}/index"));
        let keys: Vec<ContentHash> = (0..3u8).map(|i| ContentHash::of(&[i])).collect();
        {
            let db = sled::Config::new().path(&index).open().unwrap();
            let memo = db.open_tree(LEGACY_MEMO_TREE).unwrap();
            for (i, key) in keys.iter().enumerate() {
                memo.insert(key.as_bytes(), vec![i as u8; 10]).unwrap();
            }
            db.flush().unwrap();
        }
        let tag = "Signature: 8a477f597d28d172789f06886806bc55\n# viss artifact store; rebuildable";
        fs::write(artifacts.join("CACHEDIR.TAG"), tag).unwrap();
        let store = Store::open(&artifacts).unwrap();
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(store.memo_get(key).unwrap(), Some(vec![i as u8; 10]));
        }
        drop(store);
        let db = sled::Config::new().path(&index).open().unwrap();
        assert!(
            !db.tree_names()
                .iter()
                .any(|n| n.as_ref() == LEGACY_MEMO_TREE)
        );
    }

    const RECORDS: usize = 200;

    /// A store with `RECORDS` records (each with a blob), memos, and a flush, closed.
    fn built_store(artifacts: &Path) -> Vec<ContentHash> {
        let store = Store::open(artifacts).unwrap();
        let mut memo_keys = Vec::new();
        for i in 0..RECORDS {
            let blob = store.put_blob(format!("output {i}").as_bytes()).unwrap();
            let record = Record {
                key: Some(ContentHash::of(format!("key {i}").as_bytes())),
                outputs: [("out".to_string(), blob)].into(),
                children: Vec::new(),
                finished_unix_ms: i as u64,
                duration_ms: 1,
                usage: Usage::default(),
                error: None,
                flags: Vec::new(),
                problems: Vec::new(),
                stats: Default::default(),
            };
            store
                .index()
                .put("stage", &format!("item{i:04}"), &record, None)
                .unwrap();
            let key = ContentHash::of(format!("request {i}").as_bytes());
            store
                .memo_put(&key, format!("paid answer {i}").as_bytes())
                .unwrap();
            memo_keys.push(key);
        }
        store.index().flush().unwrap();
        memo_keys
    }

    fn index_db(artifacts: &Path) -> PathBuf {
        artifacts.join(format!("v{LAYOUT_VERSION}/index/db"))
    }

    /// The length of the db file up to its last non-zero byte (sled's segments are zero-filled).
    fn used_len(data: &[u8]) -> usize {
        data.iter().rposition(|&b| b != 0).map_or(0, |at| at + 1)
    }

    fn cut(artifacts: &Path, keep: f64) {
        let db = index_db(artifacts);
        let len = used_len(&fs::read(&db).unwrap());
        let file = fs::OpenOptions::new().write(true).open(&db).unwrap();
        file.set_len((len as f64 * keep) as u64).unwrap();
    }

    fn flip(artifacts: &Path, at: f64, bytes: usize) {
        let db = index_db(artifacts);
        let mut data = fs::read(&db).unwrap();
        let start = (used_len(&data) as f64 * at) as usize;
        for byte in &mut data[start..start + bytes] {
            *byte ^= 0x5a;
        }
        fs::write(&db, data).unwrap();
    }

    /// Each way of damaging the index is refused with what to do, and `open_repairing` gives a
    /// working store that kept every memo and salvaged what the old index still vouched for.
    fn refused_then_repaired(damage: impl Fn(&Path), reopen_first: bool) -> IndexRepair {
        let temp = tempfile::tempdir().unwrap();
        let artifacts = temp.path().join("artifacts");
        let memo_keys = built_store(&artifacts);
        if reopen_first {
            // Opening recovers the log and writes sled's first snapshot.
            drop(Store::open(&artifacts).unwrap());
        }
        damage(&artifacts);
        let error = Store::open(&artifacts)
            .and_then(|store| store.index().check().map(|_| store))
            .err()
            .expect("the damage is found");
        let message = error.to_string();
        assert!(
            matches!(error, StoreError::IndexDamaged { .. }),
            "{message}"
        );
        assert!(message.contains("Run `viss verify --repair`"), "{message}");

        let (store, repair) = Store::open_repairing(&artifacts).unwrap();
        let repair = repair.expect("repaired");
        assert!(repair.moved_to.join("db").exists());
        // What precedes the damage is salvaged; what follows is lost, and re-run by a build.
        assert!(
            0 < repair.records_salvaged && repair.records_salvaged < RECORDS,
            "{repair:?}"
        );
        for (i, key) in memo_keys.iter().enumerate() {
            let answer = store.memo_get(key).unwrap();
            assert_eq!(answer, Some(format!("paid answer {i}").into_bytes()));
        }
        store.index().check().unwrap();
        for (item, record) in store.index().scan_stage("stage").unwrap() {
            assert!(record.outputs.values().all(|h| store.has_blob(h)), "{item}");
        }
        store
            .index()
            .put(
                "stage",
                "new",
                &store
                    .index()
                    .get("stage", "item0000")
                    .unwrap()
                    .unwrap_or_else(|| Record {
                        key: None,
                        outputs: BTreeMap::new(),
                        children: Vec::new(),
                        finished_unix_ms: 0,
                        duration_ms: 0,
                        usage: Usage::default(),
                        error: Some("x".into()),
                        flags: Vec::new(),
                        problems: Vec::new(),
                        stats: Default::default(),
                    }),
                None,
            )
            .unwrap();
        store.index().flush().unwrap();
        drop(store);
        let store = Store::open(&artifacts).unwrap();
        assert!(store.index().get("stage", "new").unwrap().is_some());
        repair
    }

    #[test]
    fn an_index_cut_after_a_snapshot_is_refused_then_repaired() {
        refused_then_repaired(|a| cut(a, 0.5), true);
    }

    /// sled replays its log up to the cut and opens without a word; the seal notices.
    #[test]
    fn an_index_cut_before_any_snapshot_is_refused_then_repaired() {
        let repair = refused_then_repaired(|a| cut(a, 0.5), false);
        assert!(repair.damage.contains("fewer writes"), "{repair:?}");
    }

    #[test]
    fn an_index_with_flipped_bytes_is_refused_then_repaired() {
        refused_then_repaired(|a| flip(a, 0.3, 64), true);
        refused_then_repaired(|a| flip(a, 0.3, 64), false);
    }

    #[test]
    fn an_index_deleted_by_hand_starts_afresh_without_complaint() {
        let temp = tempfile::tempdir().unwrap();
        let artifacts = temp.path().join("artifacts");
        let memo_keys = built_store(&artifacts);
        fs::remove_dir_all(index_db(&artifacts).parent().unwrap()).unwrap();
        let store = Store::open(&artifacts).unwrap();
        assert_eq!(store.index().scan_all().unwrap().len(), 0);
        assert!(store.memo_get(&memo_keys[0]).unwrap().is_some());
    }
}
