//! `viss gc` and `viss verify`: keeping the store small and honest.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Serialize;

use crate::hash::ContentHash;
use crate::store::{LAYOUT_VERSION, Store, StoreError};
use crate::store_dir::is_layout_dir_name;

#[derive(Debug, Default, Serialize)]
pub struct GcReport {
    pub blobs_kept: usize,
    pub blobs_removed: usize,
    pub bytes_removed: u64,
    /// Runs forgotten by the action cache because their outputs were among the blobs removed.
    pub actions_removed: usize,
    /// Store directories of other layout versions, removed whole.
    pub old_layouts_removed: Vec<PathBuf>,
}

impl GcReport {
    /// What `viss gc` says it did (`dry_run`: would do).
    pub fn render(&self, dry_run: bool) -> String {
        let verb = if dry_run { "would remove" } else { "removed" };
        format!(
            "{verb} {} blob(s), {} bytes; kept {}; {} earlier run(s) forgotten by the action \
             cache; {} old store layout(s)",
            self.blobs_removed,
            self.bytes_removed,
            self.blobs_kept,
            self.actions_removed,
            self.old_layouts_removed.len()
        )
    }
}

/// Removes blobs no record refers to (and forgets the earlier runs in the action cache that
/// made them), and stores of other layout versions.
pub fn gc(store: &Store, dry_run: bool) -> Result<GcReport, StoreError> {
    let referenced: BTreeSet<ContentHash> = store
        .index()
        .scan_all()?
        .into_iter()
        .flat_map(|(_, _, record)| record.outputs.into_values())
        .collect();
    let mut report = GcReport::default();
    for hash in store.blob_names()? {
        if referenced.contains(&hash) {
            report.blobs_kept += 1;
            continue;
        }
        report.blobs_removed += 1;
        report.bytes_removed += store.blobs().size(&hash).unwrap_or(0);
        if !dry_run {
            store.remove_blob(&hash)?;
        }
    }
    // An earlier run whose outputs are not all kept can no longer be reused: forgotten (in a
    // dry run, counted only).
    store.index().retain_actions(&mut |action| {
        let whole = action
            .record
            .outputs
            .values()
            .all(|hash| referenced.contains(hash));
        report.actions_removed += usize::from(!whole);
        whole || dry_run
    })?;
    let artifacts = store.root().parent().map(PathBuf::from).unwrap_or_default();
    let current = format!("v{LAYOUT_VERSION}");
    if let Ok(entries) = std::fs::read_dir(&artifacts) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_layout_dir_name(&name) && name != current && entry.path().is_dir() {
                if !dry_run {
                    std::fs::remove_dir_all(entry.path()).map_err(|source| StoreError::Io {
                        path: entry.path(),
                        source,
                    })?;
                }
                report.old_layouts_removed.push(entry.path());
            }
        }
    }
    Ok(report)
}

#[derive(Debug, Default, Serialize)]
pub struct VerifyReport {
    pub blobs_checked: usize,
    pub corrupt: Vec<ContentHash>,
    pub memos_checked: usize,
    /// Memos whose checksum failed, deleted: their LLM answer or embedding is computed again.
    pub corrupt_memos: Vec<ContentHash>,
    /// Index entries read (every one, so damage anywhere in the index is found).
    pub index_entries: usize,
    /// (stage, item) records forgotten because an output was corrupt or missing; the next build
    /// re-runs them.
    pub invalidated: Vec<(String, String)>,
}

impl VerifyReport {
    /// What `viss verify` says it found, a line each.
    pub fn render(&self) -> String {
        let mut out = format!(
            "checked {} index entries, {} blob(s): {} corrupt, {} memo(s): {} corrupt\n",
            self.index_entries,
            self.blobs_checked,
            self.corrupt.len(),
            self.memos_checked,
            self.corrupt_memos.len()
        );
        for hash in &self.corrupt {
            out.push_str(&format!("  corrupt, deleted: {hash}\n"));
        }
        for key in &self.corrupt_memos {
            out.push_str(&format!(
                "  corrupt memo, deleted (computed again when needed): {key}\n"
            ));
        }
        for (stage, item) in &self.invalidated {
            out.push_str(&format!("  will rebuild: {stage} {item}\n"));
        }
        out
    }
}

/// Reads the whole index, and re-hashes every blob and memo. Corrupt blobs and memos are
/// deleted, and every record whose outputs are no longer all present is forgotten so that the
/// next build makes them again. A damaged index is an error ([`StoreError::IndexDamaged`]) that
/// says to repair it.
pub fn verify(store: &Store) -> Result<VerifyReport, StoreError> {
    let mut report = VerifyReport {
        index_entries: store.index().check()?,
        ..VerifyReport::default()
    };
    for hash in store.blob_names()? {
        report.blobs_checked += 1;
        match store.get_blob(&hash) {
            Ok(_) => {}
            Err(StoreError::Corrupt { .. }) => report.corrupt.push(hash),
            Err(e) => return Err(e),
        }
    }
    for key in store.memo_keys()? {
        report.memos_checked += 1;
        match store.memo_get(&key) {
            Ok(_) => {}
            Err(StoreError::CorruptMemo { .. }) => report.corrupt_memos.push(key),
            Err(e) => return Err(e),
        }
    }
    for (stage, item, record) in store.index().scan_all()? {
        if !record.failed() && !record.outputs.values().all(|h| store.has_blob(h)) {
            store.index().remove(&stage, &item)?;
            report.invalidated.push((stage, item));
        }
    }
    store.index().flush()?;
    Ok(report)
}
