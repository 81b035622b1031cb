//! A cache shared between machines: blobs under their names and actions (cache key -> the
//! record of the successful run that had it) and memos (the LLM answers, embeddings) under
//! their keys, on storage another worker reaches. The local store stays each machine's index:
//! the remote is asked on a local miss and written after a local commit, so two workers never
//! compute one key twice, and a build without the remote works exactly as before.
//!
//! Every object is written whole by one put (an object store's put is atomic: a reader sees
//! all of an object or none of it), blobs before the action naming them, and everything read is
//! checked: a blob against its name, an action and a memo by decoding and by their checksum.
//! A remote that cannot be reached or holds damage costs only a local run, never a wrong
//! result: a failed read is a miss, reported once as a warning and counted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::Serialize;

use super::index::{Action, decode_action, encode_action};
use super::{BlobStore, Record, Store, StoreError};
use crate::hash::ContentHash;

/// What a remote keeps under a key that is not the hash of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyedKind {
    /// An action: the (stage, item) and record of the successful run that had the key.
    Action,
    /// A memo, as the local store keeps it (checksum, then value).
    Memo,
}

impl KeyedKind {
    /// The folder it lives in under the remote's prefix.
    pub fn folder(self) -> &'static str {
        match self {
            KeyedKind::Action => "actions",
            KeyedKind::Memo => "memo",
        }
    }
}

/// Bytes under a key (actions, memos), where another machine reaches them. A put replaces what
/// was there whole; a get never returns part of a put.
pub trait KeyedObjects: Send + Sync {
    fn get(&self, kind: KeyedKind, key: &ContentHash) -> Result<Option<Vec<u8>>, StoreError>;
    fn put(&self, kind: KeyedKind, key: &ContentHash, bytes: &[u8]) -> Result<(), StoreError>;
    /// How many objects of `kind` it holds.
    fn count(&self, kind: KeyedKind) -> Result<usize, StoreError>;
}

/// A shared cache: its blobs, its actions and memos, and where it is (for messages, without
/// credentials).
pub struct Remote {
    blobs: Box<dyn BlobStore>,
    keyed: Box<dyn KeyedObjects>,
    location: String,
    counts: Counts,
    /// Set after [`Remote::GIVE_UP_AFTER`] failed requests: the rest of the build goes on
    /// without it rather than waiting on every item for a store that does not answer.
    off: AtomicBool,
}

#[derive(Default)]
struct Counts {
    actions_found: AtomicU64,
    actions_written: AtomicU64,
    blobs_fetched: AtomicU64,
    blobs_written: AtomicU64,
    memos_found: AtomicU64,
    memos_written: AtomicU64,
    corrupt: AtomicU64,
    errors: AtomicU64,
}

/// What a build did with the remote cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RemoteCounts {
    /// Results found there instead of computed here.
    pub actions_found: u64,
    /// Results written there after a run here.
    pub actions_written: u64,
    pub blobs_fetched: u64,
    pub blobs_written: u64,
    /// LLM answers and embeddings found there.
    pub memos_found: u64,
    pub memos_written: u64,
    /// Objects found damaged (a blob not hashing to its name, an action or memo that does not
    /// decode): deleted there and not used.
    pub corrupt: u64,
    /// Reads and writes that failed (unreachable, refused): each a miss, or a result not shared.
    pub errors: u64,
}

/// What a remote cache holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoteHoldings {
    /// Where it is (`s3://bucket/prefix`), never with credentials.
    pub location: String,
    pub blobs: usize,
    pub actions: usize,
    pub memos: usize,
}

impl Remote {
    pub fn new(
        blobs: Box<dyn BlobStore>,
        keyed: Box<dyn KeyedObjects>,
        location: impl Into<String>,
    ) -> Self {
        Self {
            blobs,
            keyed,
            location: location.into(),
            counts: Counts::default(),
            off: AtomicBool::new(false),
        }
    }

    /// Failed requests after which a build stops asking.
    pub const GIVE_UP_AFTER: u64 = 3;

    fn on(&self) -> bool {
        !self.off.load(Ordering::Relaxed)
    }

    /// What it holds (`viss status --remote`).
    pub fn holdings(&self) -> Result<RemoteHoldings, StoreError> {
        Ok(RemoteHoldings {
            location: self.location.clone(),
            blobs: self.blobs.names()?.len(),
            actions: self.keyed.count(KeyedKind::Action)?,
            memos: self.keyed.count(KeyedKind::Memo)?,
        })
    }

    /// Whether it holds the action of (`stage`, `item`) with cache key `key` (without
    /// fetching its blobs).
    pub fn holds_action(
        &self,
        stage: &str,
        item: &str,
        key: &ContentHash,
    ) -> Result<bool, StoreError> {
        let name = action_name(stage, item, key);
        Ok(self.keyed.get(KeyedKind::Action, &name)?.is_some())
    }

    pub fn counts(&self) -> RemoteCounts {
        let c = &self.counts;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        RemoteCounts {
            actions_found: get(&c.actions_found),
            actions_written: get(&c.actions_written),
            blobs_fetched: get(&c.blobs_fetched),
            blobs_written: get(&c.blobs_written),
            memos_found: get(&c.memos_found),
            memos_written: get(&c.memos_written),
            corrupt: get(&c.corrupt),
            errors: get(&c.errors),
        }
    }

    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A failed read or write: a warning, counted; the build goes on without the remote's help.
    fn failed(&self, what: &str, error: &StoreError) {
        let counter = match error {
            StoreError::RemoteCorrupt { .. } => &self.counts.corrupt,
            _ => &self.counts.errors,
        };
        Self::count(counter);
        tracing::warn!("remote cache {}: {what}: {error}", self.location);
        let errors = self.counts.errors.load(Ordering::Relaxed);
        if errors >= Self::GIVE_UP_AFTER && !self.off.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "remote cache {}: {errors} requests failed; this build goes on without it",
                self.location
            );
        }
    }

    fn get_keyed(&self, kind: KeyedKind, key: &ContentHash) -> Option<Vec<u8>> {
        if !self.on() {
            return None;
        }
        match self.keyed.get(kind, key) {
            Ok(found) => found,
            Err(error) => {
                self.failed(&format!("reading {} {key}", kind.folder()), &error);
                None
            }
        }
    }
}

/// The name of an action in the shared cache: its cache key with its (stage, item). A key alone
/// is not enough: items whose inputs are the same (two scenes of an episode without video, at
/// a stage that reads only the video) share a key, and one item's action must not hide the
/// other's.
fn action_name(stage: &str, item: &str, key: &ContentHash) -> ContentHash {
    let mut bytes = Vec::with_capacity(32 + stage.len() + item.len() + 1);
    bytes.extend_from_slice(key.as_bytes());
    bytes.extend_from_slice(stage.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(item.as_bytes());
    ContentHash::of(&bytes)
}

impl Store {
    /// This store, asking `remote` on a local miss and writing to it after a local commit.
    pub fn with_remote(mut self, remote: Remote) -> Self {
        self.remote = Some(remote);
        self
    }

    pub fn remote(&self) -> Option<&Remote> {
        self.remote.as_ref()
    }

    /// The successful run of (`stage`, `item`) whose cache key was `key`: from the local
    /// action cache, or else from the remote one, whose output blobs are then fetched, checked
    /// against their names and stored here before it is returned (an action whose blobs cannot
    /// all be had is a miss).
    pub fn action(
        &self,
        stage: &str,
        item: &str,
        key: &ContentHash,
    ) -> Result<Option<Action>, StoreError> {
        if let Some(action) = self.index.action(key)?
            && action.stage == stage
            && action.item == item
        {
            return Ok(Some(action));
        }
        let Some(remote) = &self.remote else {
            return Ok(None);
        };
        let Some(bytes) = remote.get_keyed(KeyedKind::Action, &action_name(stage, item, key))
        else {
            return Ok(None);
        };
        let action = match decode_action(&bytes) {
            Ok(action)
                if action.record.key == Some(*key)
                    && (action.stage.as_str(), action.item.as_str()) == (stage, item)
                    && !action.record.failed() =>
            {
                action
            }
            Ok(_) | Err(_) => {
                let error = StoreError::RemoteCorrupt {
                    what: format!("action {key}"),
                    location: remote.location.clone(),
                };
                remote.failed("reading an action", &error);
                return Ok(None);
            }
        };
        let mut fetched = 0;
        for hash in action.record.outputs.values() {
            if self.blobs.has(hash) {
                continue;
            }
            match remote.blobs.get(hash) {
                Ok(bytes) => {
                    self.blobs.put(&bytes)?;
                    fetched += 1;
                }
                // Deleted there as damaged while another result still names it: a miss, not a
                // failing server.
                Err(StoreError::RemoteMissing { .. }) => return Ok(None),
                Err(error) => {
                    remote.failed(&format!("fetching blob {hash}"), &error);
                    return Ok(None);
                }
            }
        }
        // The record that names them is written next: the blobs must be durable first.
        self.blobs.sync()?;
        remote
            .counts
            .blobs_fetched
            .fetch_add(fetched, Ordering::Relaxed);
        Remote::count(&remote.counts.actions_found);
        Ok(Some(action))
    }

    /// Shares a run just committed here: its output blobs the remote lacks, then its action.
    /// A failure is a warning: the result stays here and the build goes on.
    pub fn publish(&self, stage: &str, item: &str, record: &Record) {
        let Some(remote) = self.remote.as_ref().filter(|r| r.on()) else {
            return;
        };
        let Some(key) = record.key.filter(|_| !record.failed()) else {
            return;
        };
        let shared = record.outputs.values().try_for_each(|hash| {
            if remote.blobs.has(hash) {
                return Ok(());
            }
            let bytes = self.blobs.get(hash)?;
            remote.blobs.put(&bytes)?;
            Remote::count(&remote.counts.blobs_written);
            Ok(())
        });
        let shared = shared.and_then(|()| {
            let bytes = encode_action(stage, item, &record.encode());
            let name = action_name(stage, item, &key);
            remote.keyed.put(KeyedKind::Action, &name, &bytes)
        });
        match shared {
            Ok(()) => Remote::count(&remote.counts.actions_written),
            Err(error) => remote.failed(&format!("sharing {stage} {item}"), &error),
        }
    }

    /// A memo the local store lacks, from the remote: checked like a local one, then kept here.
    pub(super) fn remote_memo(&self, key: &ContentHash) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(remote) = &self.remote else {
            return Ok(None);
        };
        let Some(mut bytes) = remote.get_keyed(KeyedKind::Memo, key) else {
            return Ok(None);
        };
        if !super::memo::sound(&bytes) {
            let error = StoreError::RemoteCorrupt {
                what: format!("memo {key}"),
                location: remote.location.clone(),
            };
            remote.failed("reading a memo", &error);
            return Ok(None);
        }
        Remote::count(&remote.counts.memos_found);
        bytes.drain(..32);
        self.memo_put_local(key, &bytes)?;
        Ok(Some(bytes))
    }

    /// Shares a memo just written here.
    pub(super) fn share_memo(&self, key: &ContentHash, file: &[u8]) {
        let Some(remote) = self.remote.as_ref().filter(|r| r.on()) else {
            return;
        };
        match remote.keyed.put(KeyedKind::Memo, key, file) {
            Ok(()) => Remote::count(&remote.counts.memos_written),
            Err(error) => remote.failed(&format!("sharing memo {key}"), &error),
        }
    }
}
