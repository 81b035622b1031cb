//! The store's shared cache on S3-compatible object storage (AWS S3, MinIO, Ceph, R2, GCS's S3
//! API) or on a folder other machines mount, through `object_store`: the same [`BlobStore`] and
//! [`KeyedObjects`] traits the local store's parts implement, so a build that finds a key's
//! results there takes them instead of computing them.
//!
//! Under the configured prefix: `blobs/<blake3>` (a blob, named by its hash), `actions/<name>`
//! (the (stage, item) and record of the successful run that had a cache key, named by the key
//! with the stage and item), `memo/<key>`
//! (an LLM answer or an embedding, checksummed as the local store keeps it). Each is written
//! by one put, which an object store makes visible whole or not at all, so a writer killed
//! mid-way leaves nothing partial; blobs are written before the action naming them.
//!
//! Credentials come from the environment only (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, or the instance's role), never from `viss.toml`, and no message of this
//! crate names them.

use std::future::Future;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use viss_engine::hash::ContentHash;
use viss_engine::store::{BlobStore, KeyedKind, KeyedObjects, Remote, StoreError};

/// `[remote]` in `viss.toml`: a cache shared with other machines (or other projects on this
/// one). Every result this machine computes is written there; a result another wrote is
/// taken instead of computed. Credentials are read from the environment only
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoteConfig {
    /// `s3://bucket/prefix` for S3 and S3-compatible stores, or `file:///shared/folder` for a
    /// folder every machine mounts.
    pub url: String,
    /// The S3 API's address when it is not AWS (MinIO, Ceph, R2, a test server):
    /// `http://127.0.0.1:9000`. Env: `AWS_ENDPOINT`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The bucket's region (`us-east-1` when unset and the environment names none). Env:
    /// `AWS_REGION`.
    #[serde(default)]
    pub region: Option<String>,
    /// Allow an `http://` endpoint (a server on a private network or this machine).
    #[serde(default)]
    pub allow_http: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("[remote] url `{url}` is neither `s3://bucket/prefix` nor `file:///absolute/folder`")]
    BadUrl { url: String },
    #[error("[remote] url `{url}`: {message}")]
    Open { url: String, message: String },
}

/// The objects of one remote cache, and the runtime its requests run on (the store's traits
/// are called from the scheduler's threads, which must not wait inside their own runtime).
struct Objects {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    runtime: tokio::runtime::Runtime,
    /// `s3://bucket/prefix`, for messages.
    location: String,
}

impl Objects {
    fn path(&self, folder: &str, hash: &ContentHash) -> ObjectPath {
        self.prefix.clone().join(folder).join(hash.to_hex())
    }

    /// Runs a request on the cache's own runtime and waits for it.
    fn wait<T: Send + 'static>(&self, request: impl Future<Output = T> + Send + 'static) -> T {
        let (done, result) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let _ = done.send(request.await);
        });
        result
            .recv()
            .expect("the remote cache's runtime is running")
    }

    fn error(&self, error: object_store::Error) -> StoreError {
        StoreError::Remote {
            location: self.location.clone(),
            message: error.to_string(),
        }
    }

    fn get(&self, path: ObjectPath) -> Result<Option<Bytes>, StoreError> {
        let store = self.store.clone();
        let got = self.wait(async move {
            match store.get(&path).await {
                Ok(result) => result.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(error) => Err(error),
            }
        });
        got.map_err(|e| self.error(e))
    }

    fn put(&self, path: ObjectPath, bytes: &[u8]) -> Result<(), StoreError> {
        let store = self.store.clone();
        let payload = PutPayload::from(Bytes::copy_from_slice(bytes));
        let put = self.wait(async move { store.put(&path, payload).await });
        put.map(drop).map_err(|e| self.error(e))
    }

    fn head(&self, path: ObjectPath) -> Result<Option<u64>, StoreError> {
        let store = self.store.clone();
        let head = self.wait(async move {
            match store.head(&path).await {
                Ok(meta) => Ok(Some(meta.size)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(error) => Err(error),
            }
        });
        head.map_err(|e| self.error(e))
    }

    fn delete(&self, path: ObjectPath) -> Result<(), StoreError> {
        let store = self.store.clone();
        let deleted = self.wait(async move {
            match store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(error) => Err(error),
            }
        });
        deleted.map_err(|e| self.error(e))
    }

    fn names(&self, folder: &str) -> Result<Vec<ContentHash>, StoreError> {
        let store = self.store.clone();
        let prefix = self.prefix.clone().join(folder);
        let listed = self.wait(async move {
            let mut names = Vec::new();
            let mut listing = store.list(Some(&prefix));
            while let Some(meta) = listing.next().await {
                let meta = meta?;
                if let Some(name) = meta.location.filename().and_then(|n| n.parse().ok()) {
                    names.push(name);
                }
            }
            Ok(names)
        });
        let mut names: Vec<ContentHash> = listed.map_err(|e| self.error(e))?;
        names.sort();
        Ok(names)
    }
}

/// The blobs of a remote cache, `<prefix>/blobs/<blake3>`.
pub struct RemoteBlobs(Arc<Objects>);

/// The actions and memos of a remote cache, `<prefix>/actions/<key>` and `<prefix>/memo/<key>`.
pub struct RemoteKeyed(Arc<Objects>);

impl BlobStore for RemoteBlobs {
    fn has(&self, hash: &ContentHash) -> bool {
        match self.0.head(self.0.path("blobs", hash)) {
            Ok(found) => found.is_some(),
            Err(error) => {
                tracing::warn!("{error}");
                false
            }
        }
    }

    fn put(&self, bytes: &[u8]) -> Result<ContentHash, StoreError> {
        let hash = ContentHash::of(bytes);
        self.0.put(self.0.path("blobs", &hash), bytes)?;
        Ok(hash)
    }

    fn put_streamed(
        &self,
        write: &mut dyn FnMut(&mut dyn io::Write) -> io::Result<()>,
    ) -> Result<ContentHash, StoreError> {
        let mut bytes = Vec::new();
        write(&mut bytes).map_err(|e| StoreError::Remote {
            location: self.0.location.clone(),
            message: format!("producing a blob: {e}"),
        })?;
        self.put(&bytes)
    }

    /// A put is durable once it returns.
    fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn syncs(&self) -> u64 {
        0
    }

    /// Reads a blob and checks it hashes to its name; a damaged one is deleted there, so that
    /// its result is computed again and shared afresh, and reported.
    fn get(&self, hash: &ContentHash) -> Result<Vec<u8>, StoreError> {
        let path = self.0.path("blobs", hash);
        let Some(bytes) = self.0.get(path.clone())? else {
            return Err(StoreError::RemoteMissing {
                what: format!("blob {hash}"),
                location: self.0.location.clone(),
            });
        };
        if ContentHash::of(&bytes) != *hash {
            self.0.delete(path)?;
            return Err(StoreError::RemoteCorrupt {
                what: format!("blob {hash}"),
                location: self.0.location.clone(),
            });
        }
        Ok(bytes.to_vec())
    }

    fn size(&self, hash: &ContentHash) -> Option<u64> {
        self.0.head(self.0.path("blobs", hash)).ok().flatten()
    }

    fn names(&self) -> Result<Vec<ContentHash>, StoreError> {
        self.0.names("blobs")
    }

    fn remove(&self, hash: &ContentHash) -> Result<(), StoreError> {
        self.0.delete(self.0.path("blobs", hash))
    }

    fn location(&self, hash: &ContentHash) -> String {
        format!("{}/blobs/{}", self.0.location, hash.to_hex())
    }
}

impl KeyedObjects for RemoteKeyed {
    fn get(&self, kind: KeyedKind, key: &ContentHash) -> Result<Option<Vec<u8>>, StoreError> {
        let found = self.0.get(self.0.path(kind.folder(), key))?;
        Ok(found.map(|bytes| bytes.to_vec()))
    }

    fn put(&self, kind: KeyedKind, key: &ContentHash, bytes: &[u8]) -> Result<(), StoreError> {
        self.0.put(self.0.path(kind.folder(), key), bytes)
    }

    fn count(&self, kind: KeyedKind) -> Result<usize, StoreError> {
        Ok(self.0.names(kind.folder())?.len())
    }
}

/// Opens the remote cache `config` names. Nothing is read or written yet: an unreachable
/// store shows on the first request, as a warning, and the build goes on locally.
pub fn open(config: &RemoteConfig) -> Result<Remote, RemoteError> {
    let objects = objects(config)?;
    let location = objects.location.clone();
    Ok(Remote::new(
        Box::new(RemoteBlobs(objects.clone())),
        Box::new(RemoteKeyed(objects)),
        location,
    ))
}

type Opened = (Arc<dyn ObjectStore>, ObjectPath, String);

fn objects(config: &RemoteConfig) -> Result<Arc<Objects>, RemoteError> {
    let (store, prefix, location) = object_store_for(config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("viss-remote")
        .enable_all()
        .build()
        .map_err(|e| RemoteError::Open {
            url: config.url.clone(),
            message: format!("cannot start its runtime: {e}"),
        })?;
    Ok(Arc::new(Objects {
        store,
        prefix,
        runtime,
        location,
    }))
}

fn object_store_for(config: &RemoteConfig) -> Result<Opened, RemoteError> {
    let url = config.url.trim_end_matches('/');
    let open_error = |e: object_store::Error| RemoteError::Open {
        url: config.url.clone(),
        message: e.to_string(),
    };
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(RemoteError::BadUrl {
                url: config.url.clone(),
            });
        }
        let mut builder = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_allow_http(config.allow_http)
            // A cache is worth a few quick retries, not minutes of waiting: a miss only means
            // computing the result here.
            .with_retry(object_store::RetryConfig {
                max_retries: 3,
                retry_timeout: std::time::Duration::from_secs(20),
                ..Default::default()
            });
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &config.region {
            builder = builder.with_region(region);
        }
        let store = builder.build().map_err(open_error)?;
        Ok((Arc::new(store), ObjectPath::from(prefix), url.to_string()))
    } else if let Some(folder) = url.strip_prefix("file://") {
        if !folder.starts_with('/') {
            return Err(RemoteError::BadUrl {
                url: config.url.clone(),
            });
        }
        std::fs::create_dir_all(folder).map_err(|e| RemoteError::Open {
            url: config.url.clone(),
            message: e.to_string(),
        })?;
        let store =
            object_store::local::LocalFileSystem::new_with_prefix(folder).map_err(open_error)?;
        Ok((Arc::new(store), ObjectPath::default(), url.to_string()))
    } else {
        Err(RemoteError::BadUrl {
            url: config.url.clone(),
        })
    }
}

#[cfg(test)]
mod tests;
