//! Where validated answers are kept. The pipeline's store implements [`ResponseCache`]; tests
//! use [`MemoryResponseCache`].

use std::collections::HashMap;
use std::sync::Mutex;

use viss_engine::hash::ContentHash;

/// Bytes under a request key (see [`super::request_key`]). Only answers that passed the
/// caller's validator are ever put.
pub trait ResponseCache: Send + Sync {
    fn get(&self, key: ContentHash) -> Option<Vec<u8>>;
    fn put(&self, key: ContentHash, bytes: &[u8]);
}

/// An in-memory cache (tests, one-off runs).
#[derive(Debug, Default)]
pub struct MemoryResponseCache {
    entries: Mutex<HashMap<ContentHash, Vec<u8>>>,
}

impl MemoryResponseCache {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ResponseCache for MemoryResponseCache {
    fn get(&self, key: ContentHash) -> Option<Vec<u8>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&key)
            .cloned()
    }

    fn put(&self, key: ContentHash, bytes: &[u8]) {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(key, bytes.to_vec());
    }
}
