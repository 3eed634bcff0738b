//! Another process committing while a batch's transaction runs (`sigil provision add` beside
//! the live server): the batch has already read, the other connection commits, then the batch
//! writes. In WAL mode a deferred transaction fails right there with SQLITE_BUSY (its read
//! snapshot is stale, and SQLite does not wait), which failed a whole batch of honest readings
//! with 5.00. The store's write transactions take the lock when they begin, so the other
//! connection waits for the batch instead, and both succeed.

use sigil_identity::Identity;
use sigil_server::store::IdentityKind;
use sigil_server::Store;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn a_batch_that_has_read_survives_another_process_committing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let store = Store::open(&db).unwrap();
    let device = Identity::from_bytes([1; 16]);
    let (done_tx, done_rx) = mpsc::channel();
    let db2 = db.clone();
    let result = store.shared_transaction(|b| {
        // The batch reads first (as the broker does: the latest reading, a high-water mark).
        assert!(b.latest_reading(&device)?.is_none());
        // Meanwhile another process adds an identity.
        std::thread::spawn(move || {
            let other = Store::open(&db2).unwrap();
            let r = other.add_identity(&Identity::from_bytes([2; 16]), IdentityKind::Device, "", 1);
            done_tx.send(r.map_err(|e| e.to_string())).unwrap();
        });
        // It waits for the batch (which holds the write lock), so it has not committed yet.
        let early = done_rx.recv_timeout(Duration::from_millis(500));
        // Then the batch writes.
        b.set_highest(&device, 7, 1)?;
        Ok(early)
    });
    let early = result.expect("the batch commits");
    assert!(
        early.is_err(),
        "the other connection committed inside the batch's transaction: {early:?}"
    );
    let late = done_rx.recv_timeout(Duration::from_secs(15)).unwrap();
    assert_eq!(
        late,
        Ok(true),
        "the other process's add succeeded after the batch"
    );
    let store = Store::open(&db).unwrap();
    assert_eq!(store.freshness().unwrap().get(&device), Some(&7));
    assert!(store
        .authorized()
        .unwrap()
        .contains_key(&Identity::from_bytes([2; 16])));
}
