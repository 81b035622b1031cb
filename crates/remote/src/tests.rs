//! The shared cache between two stores on one folder (`file://`); the S3 path is exercised
//! against a real S3 server by the app's integration tests.

use std::collections::BTreeMap;
use std::path::Path;

use viss_engine::hash::ContentHash;
use viss_engine::store::{Record, RemoteCounts, Store};

use super::*;

fn config(folder: &Path) -> RemoteConfig {
    RemoteConfig {
        url: format!("file://{}", folder.display()),
        endpoint: None,
        region: None,
        allow_http: false,
    }
}

fn store_with_remote(dir: &Path, folder: &Path) -> Store {
    Store::open(dir)
        .unwrap()
        .with_remote(open(&config(folder)).unwrap())
}

/// A successful run of (`stage`, `item`) under cache key `key`, with one output holding
/// `bytes`, committed to `store` and shared.
fn commit(store: &Store, key: ContentHash, bytes: &[u8]) -> Record {
    commit_item(store, "item", key, bytes)
}

fn commit_item(store: &Store, item: &str, key: ContentHash, bytes: &[u8]) -> Record {
    let blob = store.put_blob(bytes).unwrap();
    store.sync_blobs().unwrap();
    let record = Record {
        key: Some(key),
        outputs: BTreeMap::from([("out".to_string(), blob)]),
        children: Vec::new(),
        finished_unix_ms: 1,
        duration_ms: 2,
        usage: Default::default(),
        error: None,
        flags: Vec::new(),
        problems: Vec::new(),
        stats: BTreeMap::new(),
    };
    store.index().put("stage", item, &record, None).unwrap();
    store.publish("stage", item, &record);
    record
}

fn counts(store: &Store) -> RemoteCounts {
    store.remote().unwrap().counts()
}

#[test]
fn a_run_shared_by_one_store_is_taken_by_another_with_its_blobs() {
    let temp = tempfile::tempdir().unwrap();
    let shared = temp.path().join("shared");
    let first = store_with_remote(&temp.path().join("a"), &shared);
    let key = ContentHash::of(b"key");
    let record = commit(&first, key, b"the output");
    assert_eq!(counts(&first).actions_written, 1);
    assert_eq!(counts(&first).blobs_written, 1);

    let second = store_with_remote(&temp.path().join("b"), &shared);
    let action = second
        .action("stage", "item", &key)
        .unwrap()
        .expect("found in the shared cache");
    assert_eq!(
        (action.stage.as_str(), action.item.as_str()),
        ("stage", "item")
    );
    assert_eq!(action.record, record);
    assert_eq!(
        second.get_blob(&record.outputs["out"]).unwrap(),
        b"the output"
    );
    let taken = counts(&second);
    assert_eq!((taken.actions_found, taken.blobs_fetched), (1, 1));
    assert_eq!(
        second
            .action("stage", "item", &ContentHash::of(b"other"))
            .unwrap(),
        None
    );
    let held = second.remote().unwrap().holdings().unwrap();
    assert_eq!((held.blobs, held.actions, held.memos), (1, 1, 0));
}

#[test]
fn items_whose_inputs_are_the_same_are_each_found_under_their_shared_key() {
    let temp = tempfile::tempdir().unwrap();
    let shared = temp.path().join("shared");
    let first = store_with_remote(&temp.path().join("a"), &shared);
    let key = ContentHash::of(b"the same inputs");
    let one = commit_item(&first, "show/e1/sc1", key, b"nothing to sample");
    let other = commit_item(&first, "show/e1/sc2", key, b"nothing to sample");
    let second = store_with_remote(&temp.path().join("b"), &shared);
    for (item, record) in [("show/e1/sc1", one), ("show/e1/sc2", other)] {
        let action = second.action("stage", item, &key).unwrap().expect(item);
        assert_eq!((action.item.as_str(), action.record), (item, record));
    }
}

#[test]
fn a_damaged_shared_blob_is_deleted_there_and_not_used() {
    let temp = tempfile::tempdir().unwrap();
    let shared = temp.path().join("shared");
    let first = store_with_remote(&temp.path().join("a"), &shared);
    let key = ContentHash::of(b"key");
    let record = commit(&first, key, b"the output");
    let blob = record.outputs["out"];
    let object = shared.join("blobs").join(blob.to_hex());
    std::fs::write(&object, b"the output, damaged").unwrap();

    let second = store_with_remote(&temp.path().join("b"), &shared);
    assert_eq!(
        second.action("stage", "item", &key).unwrap(),
        None,
        "a damaged result is a miss"
    );
    assert!(!second.has_blob(&blob));
    assert!(
        !object.exists(),
        "the damaged blob is deleted from the shared cache"
    );
    assert_eq!(counts(&second).corrupt, 1);

    // Another result naming the deleted blob is a miss, not a failing server.
    let again = store_with_remote(&temp.path().join("d"), &shared);
    assert_eq!(again.action("stage", "item", &key).unwrap(), None);
    assert_eq!((counts(&again).errors, counts(&again).corrupt), (0, 0));

    // The next run that makes it shares it again, and then it is taken.
    commit(&second, key, b"the output");
    let third = store_with_remote(&temp.path().join("c"), &shared);
    assert!(third.action("stage", "item", &key).unwrap().is_some());
}

#[test]
fn a_memo_is_shared_and_a_damaged_one_is_not_used() {
    let temp = tempfile::tempdir().unwrap();
    let shared = temp.path().join("shared");
    let first = store_with_remote(&temp.path().join("a"), &shared);
    let (paid, damaged) = (ContentHash::of(b"request 1"), ContentHash::of(b"request 2"));
    first.memo_put(&paid, b"a paid answer").unwrap();
    first.memo_put(&damaged, b"another answer").unwrap();
    let object = shared.join("memo").join(damaged.to_hex());
    let mut bytes = std::fs::read(&object).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&object, bytes).unwrap();

    let second = store_with_remote(&temp.path().join("b"), &shared);
    assert_eq!(
        second.memo_get(&paid).unwrap().as_deref(),
        Some(&b"a paid answer"[..])
    );
    assert_eq!(second.memo_get(&damaged).unwrap(), None);
    let taken = counts(&second);
    assert_eq!((taken.memos_found, taken.corrupt), (1, 1));
    // Kept here: found again with the shared cache gone.
    drop(second);
    std::fs::remove_dir_all(&shared).unwrap();
    let again = Store::open(&temp.path().join("b")).unwrap();
    assert!(again.memo_get(&paid).unwrap().is_some());
}

#[test]
fn an_unreachable_server_is_a_miss_and_a_warning_not_a_failed_build() {
    let temp = tempfile::tempdir().unwrap();
    // Nothing listens on port 9 of this machine.
    let unreachable = RemoteConfig {
        url: "s3://no-such-bucket/p".into(),
        endpoint: Some("http://127.0.0.1:9".into()),
        region: Some("us-east-1".into()),
        allow_http: true,
    };
    let store = Store::open(&temp.path().join("a"))
        .unwrap()
        .with_remote(open(&unreachable).unwrap());
    let key = ContentHash::of(b"key");
    assert_eq!(store.action("stage", "item", &key).unwrap(), None);
    commit(&store, key, b"kept here");
    assert!(
        store.action("stage", "item", &key).unwrap().is_some(),
        "the local result stands"
    );
    assert!(counts(&store).errors >= 1);
}

#[test]
fn a_url_that_is_not_s3_or_a_folder_is_refused_naming_it() {
    for url in [
        "http://example.org/cache",
        "s3://",
        "file://relative/folder",
    ] {
        let config = RemoteConfig {
            url: url.into(),
            endpoint: None,
            region: None,
            allow_http: false,
        };
        let error = open(&config).err().expect("refused").to_string();
        assert!(error.contains(url), "{error}");
    }
}
