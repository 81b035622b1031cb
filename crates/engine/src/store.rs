//! The artifact store: immutable blobs named by their blake3 hash, memos (LLM answers,
//! embeddings) named by the hash of what determines them, plus an index from (stage, item) to the
//! outputs of its last run. The index lives behind [`Index`] so its database can be swapped
//! without touching the engine.
//!
//! Blobs and memos are files, each written whole (temp file, fsync, rename) and checked on every
//! read; the index is a database whose loss costs only re-running stages, since the memos make
//! re-running free of LLM calls and embeddings. A damaged index is detected when opened (or on
//! the read that meets the damage) and reported with what to do: `viss verify --repair`, which
//! moves it aside and starts a new one with what the old one can still vouch for
//! ([`Store::open_repairing`]).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sled::Transactional;

use crate::fsutil::write_atomic_beside;
use crate::hash::ContentHash;
use crate::key::KeyParts;
use crate::store_dir::{self, StoreDirError};

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
    /// Every answer a model gave (and was paid for), usable or not.
    pub llm_calls: u64,
    /// Of `llm_calls`, the answers that could not be used (not JSON, not a chat completion, or
    /// rejected by the stage's checks): the model was asked again, or the item failed. Their
    /// tokens and cost are in the totals.
    pub rejected_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
    pub by_model: BTreeMap<String, ModelUsage>,
}

/// What one model was asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelUsage {
    pub calls: u64,
    /// Of `calls`, the unusable answers (see [`Usage::rejected_calls`]).
    pub rejected_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
}

impl ModelUsage {
    fn add(&mut self, other: &ModelUsage) {
        self.calls += other.calls;
        self.rejected_calls += other.rejected_calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cost_usd += other.cost_usd;
    }
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.llm_calls += other.llm_calls;
        self.rejected_calls += other.rejected_calls;
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
            rejected_calls: usage.rejected_calls,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cost_usd: usage.cost_usd,
            by_model: [(model.to_string(), usage.clone())].into(),
        });
    }
}

/// What the index remembers of the last run of one (stage, item). Stored in postcard (a
/// compact binary format without field names: every field is always written), as
/// [`Record::encode`] lays it out.
///
/// The outputs are a function of the item's inputs; everything else here is about the run that
/// made them (when, how long, what it spent and counted), and is never part of an output.
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
    /// The quality gates the kept answer failed: the item is flagged (see `Outputs::problems`).
    pub problems: Vec<crate::problem::Problem>,
    /// What the run counted (texts embedded vs taken from the memo, answers read from the LLM
    /// response cache, ...), by name; see `JobCtx::count`.
    pub stats: BTreeMap<String, u64>,
}

impl Record {
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// The index's bytes: the fields layout 3 was first written with, then [`RecordAdditions`].
    /// Records written before the additions existed decode with them empty, and an older viss
    /// reads a newer record up to where its own fields end (postcard ignores the rest), so no
    /// store, and no paid LLM answer in its memo, is lost to the change.
    pub fn encode(&self) -> Vec<u8> {
        let usage = &self.usage;
        let first = RecordFirst {
            key: self.key,
            outputs: self.outputs.clone(),
            children: self.children.clone(),
            finished_unix_ms: self.finished_unix_ms,
            duration_ms: self.duration_ms,
            usage: UsageFirst {
                llm_calls: usage.llm_calls,
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cost_usd: usage.cost_usd,
                by_model: usage
                    .by_model
                    .iter()
                    .map(|(model, m)| {
                        let first = ModelUsageFirst {
                            calls: m.calls,
                            prompt_tokens: m.prompt_tokens,
                            completion_tokens: m.completion_tokens,
                            cost_usd: m.cost_usd,
                        };
                        (model.clone(), first)
                    })
                    .collect(),
            },
            error: self.error.clone(),
            flags: self.flags.clone(),
        };
        let additions = RecordAdditions {
            rejected_calls: usage.rejected_calls,
            rejected_by_model: usage
                .by_model
                .iter()
                .filter(|(_, m)| m.rejected_calls > 0)
                .map(|(model, m)| (model.clone(), m.rejected_calls))
                .collect(),
            stats: self.stats.clone(),
        };
        let mut bytes = postcard::to_stdvec(&first).expect("records serialize");
        bytes.extend(postcard::to_stdvec(&additions).expect("records serialize"));
        if !self.problems.is_empty() {
            let later = RecordLaterAdditions {
                problems: self.problems.clone(),
            };
            bytes.extend(postcard::to_stdvec(&later).expect("records serialize"));
        }
        bytes
    }

    /// Reads what [`Record::encode`] wrote, or a record written before [`RecordAdditions`].
    pub fn decode(bytes: &[u8]) -> Result<Self, postcard::Error> {
        let (first, rest) = postcard::take_from_bytes::<RecordFirst>(bytes)?;
        let (additions, rest) = if rest.is_empty() {
            (RecordAdditions::default(), rest)
        } else {
            postcard::take_from_bytes::<RecordAdditions>(rest)?
        };
        let later: RecordLaterAdditions = if rest.is_empty() {
            RecordLaterAdditions::default()
        } else {
            postcard::from_bytes(rest)?
        };
        let by_model = first
            .usage
            .by_model
            .into_iter()
            .map(|(model, m)| {
                let rejected_calls = additions
                    .rejected_by_model
                    .get(&model)
                    .copied()
                    .unwrap_or(0);
                let usage = ModelUsage {
                    calls: m.calls,
                    rejected_calls,
                    prompt_tokens: m.prompt_tokens,
                    completion_tokens: m.completion_tokens,
                    cost_usd: m.cost_usd,
                };
                (model, usage)
            })
            .collect();
        Ok(Record {
            key: first.key,
            outputs: first.outputs,
            children: first.children,
            finished_unix_ms: first.finished_unix_ms,
            duration_ms: first.duration_ms,
            usage: Usage {
                llm_calls: first.usage.llm_calls,
                rejected_calls: additions.rejected_calls,
                prompt_tokens: first.usage.prompt_tokens,
                completion_tokens: first.usage.completion_tokens,
                cost_usd: first.usage.cost_usd,
                by_model,
            },
            error: first.error,
            flags: first.flags,
            stats: additions.stats,
            problems: later.problems,
        })
    }
}

/// A [`Record`] as layout 3 first wrote it. Never change it: add to [`RecordAdditions`].
#[derive(Serialize, Deserialize)]
struct RecordFirst {
    key: Option<ContentHash>,
    outputs: BTreeMap<String, ContentHash>,
    children: Vec<String>,
    finished_unix_ms: u64,
    duration_ms: u64,
    usage: UsageFirst,
    error: Option<String>,
    flags: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct UsageFirst {
    llm_calls: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    cost_usd: f64,
    by_model: BTreeMap<String, ModelUsageFirst>,
}

#[derive(Serialize, Deserialize)]
struct ModelUsageFirst {
    calls: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
    cost_usd: f64,
}

/// What a record holds beyond [`RecordFirst`], written after it. Only ever append fields here.
#[derive(Default, Serialize, Deserialize)]
struct RecordAdditions {
    rejected_calls: u64,
    rejected_by_model: BTreeMap<String, u64>,
    stats: BTreeMap<String, u64>,
}

/// What a record holds beyond [`RecordAdditions`], written after it only when there is any
/// (so a record without problems has the bytes it always had). Only ever append fields here.
#[derive(Default, Serialize, Deserialize)]
struct RecordLaterAdditions {
    problems: Vec<crate::problem::Problem>,
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

/// Where [`Index::drain_legacy_memos`] hands each legacy memo (its key and bytes).
pub type MemoSink<'a> = &'a mut dyn FnMut(&ContentHash, &[u8]) -> Result<(), StoreError>;

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

fn split_record_key(key: &[u8]) -> (String, String) {
    let at = key.iter().position(|&b| b == 0).unwrap_or(key.len());
    let stage = String::from_utf8_lossy(&key[..at]).into_owned();
    let item = String::from_utf8_lossy(key.get(at + 1..).unwrap_or_default()).into_owned();
    (stage, item)
}

pub struct SledIndex {
    path: PathBuf,
    /// `<index>.seal`: the generation of the last flush (see [`SledIndex::flush`]).
    seal: PathBuf,
    db: sled::Db,
    records: sled::Tree,
    key_parts: sled::Tree,
    files: sled::Tree,
    meta: sled::Tree,
}

/// The tree an older viss kept memos in.
const LEGACY_MEMO_TREE: &[u8] = b"memo";
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

fn open_for_salvage(damaged: &Path, copy: &Path) -> Result<SledIndex, StoreError> {
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
fn damaged_index_path(root: &Path) -> PathBuf {
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

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
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
            .map_err(|e| match e {
                sled::transaction::TransactionError::Storage(e) => self.err(e),
                sled::transaction::TransactionError::Abort(()) => StoreError::Index {
                    path: self.path.clone(),
                    message: "a transaction aborted".to_string(),
                },
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
        for tree in [&self.records, &self.key_parts, &self.files, &self.meta]
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
    fn copy_legacy_memos(&self, put: MemoSink<'_>, forget: bool) -> Result<usize, StoreError> {
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

/// Blobs and memos on disk plus the index, under `<artifacts>/v<LAYOUT_VERSION>/`.
pub struct Store {
    root: PathBuf,
    blobs: PathBuf,
    memos: PathBuf,
    temp: PathBuf,
    index: Box<dyn Index>,
    /// Blobs written since [`Store::sync_blobs`] last made them durable.
    unsynced: std::sync::Mutex<Vec<PathBuf>>,
    /// Held through a sync, so that a caller that finds nothing pending knows that the sync
    /// which took its blobs has finished. Counts the syncs made.
    syncing: std::sync::Mutex<u64>,
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
            blobs,
            memos,
            temp,
            index: Box::new(index),
            unsynced: Default::default(),
            syncing: Default::default(),
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

    pub fn blob_path(&self, hash: &ContentHash) -> PathBuf {
        let hex = hash.to_hex();
        self.blobs.join(&hex[..2]).join(&hex)
    }

    pub fn has_blob(&self, hash: &ContentHash) -> bool {
        self.blob_path(hash).is_file()
    }

    /// Stores `bytes` and returns their name. Writing bytes that are already stored is free.
    /// The blob is visible at once and survives the process being killed; it is durable across
    /// a power cut after the next [`Store::sync_blobs`], which a record naming it must wait for.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<ContentHash, StoreError> {
        let hash = ContentHash::of(bytes);
        let path = self.blob_path(&hash);
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
    pub fn put_blob_streamed(
        &self,
        write: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
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
        let path = self.blob_path(&hash);
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
    pub fn sync_blobs(&self) -> Result<(), StoreError> {
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
    pub fn blob_syncs(&self) -> u64 {
        *self
            .syncing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Output `name` of each of `records` (items of `stage`, from [`Index::scan_stage`]) that
    /// has it, decoded from JSON, in their order; a failed item has no outputs.
    pub fn json_outputs<T: serde::de::DeserializeOwned>(
        &self,
        stage: &str,
        records: &[(String, Record)],
        name: &str,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let mut out = Vec::new();
        for (item, record) in records {
            let Some(hash) = record.outputs.get(name) else {
                continue;
            };
            let value = serde_json::from_slice(&self.get_blob(hash)?).map_err(|source| {
                StoreError::OutputDecode {
                    what: format!("{name} of {stage} {item}"),
                    message: source.to_string(),
                }
            })?;
            out.push((item.clone(), value));
        }
        Ok(out)
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

/// Memos: results of expensive pure computations (LLM answers to a request, embeddings of a
/// text), named by the hash of everything that determines them, in `memo/ab/<key>`. Each file
/// is the blake3 hash of the value, then the value, written like a blob (temp file, fsync,
/// rename). They are not in the index, so losing the index loses none of them.
impl Store {
    pub fn memo_path(&self, key: &ContentHash) -> PathBuf {
        let hex = key.to_hex();
        self.memos.join(&hex[..2]).join(&hex)
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
        let mut keys = Vec::new();
        for shard in fs::read_dir(&self.memos).map_err(io_error(&self.memos))? {
            let shard = shard.map_err(io_error(&self.memos))?.path();
            if !shard.is_dir() {
                continue;
            }
            for entry in fs::read_dir(&shard).map_err(io_error(&shard))? {
                let entry = entry.map_err(io_error(&shard))?;
                if let Some(key) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                    keys.push(key);
                }
            }
        }
        keys.sort();
        Ok(keys)
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

    fn sample_record() -> Record {
        let mut usage = Usage::default();
        usage.add_model(
            "mock:m",
            &ModelUsage {
                calls: 6,
                rejected_calls: 5,
                prompt_tokens: 600,
                completion_tokens: 120,
                cost_usd: 0.00084,
            },
        );
        Record {
            key: Some(ContentHash::of(b"key")),
            outputs: [("out".to_string(), ContentHash::of(b"out"))].into(),
            children: vec!["a/b/c".into()],
            finished_unix_ms: 1_700_000_000_000,
            duration_ms: 42,
            usage,
            error: Some("it failed".into()),
            flags: vec!["look at this".into()],
            problems: Vec::new(),
            stats: [("texts_embedded".to_string(), 7)].into(),
        }
    }

    #[test]
    fn records_round_trip_with_rejected_calls_and_run_statistics() {
        let record = sample_record();
        assert_eq!(Record::decode(&record.encode()).unwrap(), record);
    }

    #[test]
    fn a_flagged_record_round_trips_and_an_unflagged_one_keeps_its_bytes() {
        let clean = sample_record();
        let mut flagged = clean.clone();
        flagged.problems = vec![
            crate::problem::Problem {
                role: Some("Noor".into()),
                field: Some("belief".into()),
                kind: "belief states X's own feeling".into(),
                message: "Noor: belief states Noor's own feeling; write what Noor holds true"
                    .into(),
            },
            crate::problem::Problem {
                role: None,
                field: None,
                kind: "the scene's own".into(),
                message: "no role or field".into(),
            },
        ];
        let bytes = flagged.encode();
        assert_eq!(Record::decode(&bytes).unwrap(), flagged);
        // The problems come after everything an older viss reads.
        assert!(bytes.starts_with(&clean.encode()));
        let (_, rest) = postcard::take_from_bytes::<RecordFirst>(&bytes).unwrap();
        assert!(postcard::from_bytes::<RecordAdditions>(rest).is_ok());
    }

    /// Records written before rejected calls and run statistics were kept still decode (so a
    /// store keeps its memo of paid answers across the change), and an older viss reads the
    /// fields it knows from a newer record.
    #[test]
    fn records_of_the_first_layout_3_encoding_still_decode_and_vice_versa() {
        let record = sample_record();
        let usage = &record.usage;
        let first = RecordFirst {
            key: record.key,
            outputs: record.outputs.clone(),
            children: record.children.clone(),
            finished_unix_ms: record.finished_unix_ms,
            duration_ms: record.duration_ms,
            usage: UsageFirst {
                llm_calls: usage.llm_calls,
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cost_usd: usage.cost_usd,
                by_model: [(
                    "mock:m".to_string(),
                    ModelUsageFirst {
                        calls: 6,
                        prompt_tokens: 600,
                        completion_tokens: 120,
                        cost_usd: 0.00084,
                    },
                )]
                .into(),
            },
            error: record.error.clone(),
            flags: record.flags.clone(),
        };
        let old_bytes = postcard::to_stdvec(&first).unwrap();
        let decoded = Record::decode(&old_bytes).unwrap();
        let mut expected = record.clone();
        expected.usage.rejected_calls = 0;
        expected
            .usage
            .by_model
            .get_mut("mock:m")
            .unwrap()
            .rejected_calls = 0;
        expected.stats.clear();
        assert_eq!(decoded, expected);
        // What an older viss does with a newer record: decode its own fields, ignore the rest.
        let seen_by_old: RecordFirst = postcard::from_bytes(&record.encode()).unwrap();
        assert_eq!(postcard::to_stdvec(&seen_by_old).unwrap(), old_bytes);
    }

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
