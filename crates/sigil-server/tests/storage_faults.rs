//! Storage faults: a full database, a foreign file, an unknown schema version, a damaged file.
//! Each refused file must be left exactly as it was (bytes, journal mode, no -wal/-shm).

use rusqlite::Connection;
use sigil_identity::Identity;
use sigil_server::store::{NewReading, StoreError, WAL_LIMIT_BYTES};
use sigil_server::Store;
use std::path::{Path, PathBuf};

fn sidecar(db: &Path, suffix: &str) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn wal_len(db: &Path) -> u64 {
    std::fs::metadata(sidecar(db, "-wal")).map_or(0, |m| m.len())
}

/// The file's bytes, and that it has no -wal or -shm beside it.
fn snapshot(db: &Path) -> Vec<u8> {
    assert!(!sidecar(db, "-wal").exists(), "{} has a -wal", db.display());
    assert!(!sidecar(db, "-shm").exists(), "{} has a -shm", db.display());
    std::fs::read(db).unwrap()
}

fn assert_untouched(db: &Path, before: &[u8], journal: &str) {
    assert_eq!(
        std::fs::read(db).unwrap(),
        before,
        "the file's bytes changed"
    );
    assert!(!sidecar(db, "-wal").exists(), "a -wal appeared");
    assert!(!sidecar(db, "-shm").exists(), "a -shm appeared");
    let c = Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mode: String = c
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, journal);
}

fn open_err(db: &Path) -> String {
    match Store::open(db) {
        Ok(_) => panic!("{} was accepted", db.display()),
        Err(e) => e.to_string(),
    }
}

/// A rollback-journal database with one table of another application.
fn foreign(db: &Path) {
    let c = Connection::open(db).unwrap();
    c.execute_batch(
        "CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT);
         INSERT INTO photos (name) VALUES ('a'), ('b');",
    )
    .unwrap();
}

#[test]
fn a_foreign_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("photos.db");
    foreign(&db);
    let before = snapshot(&db);
    let msg = open_err(&db);
    assert_eq!(
        msg,
        "not a Sigil database: other tables photos (schema version 0); the file was left untouched"
    );
    assert_untouched(&db, &before, "delete");

    // Another application's id is refused by it, whatever the tables.
    let other = dir.path().join("other.db");
    let c = Connection::open(&other).unwrap();
    c.execute_batch("PRAGMA application_id = 1234; CREATE TABLE readings (x);")
        .unwrap();
    drop(c);
    let before = snapshot(&other);
    assert_eq!(
        open_err(&other),
        "not a Sigil database: application_id is 0x4d2, not Sigil's 0x53676c31; the file was left untouched"
    );
    assert_untouched(&other, &before, "delete");

    // A schema version of Sigil's without the tables it has.
    let half = dir.path().join("half.db");
    let c = Connection::open(&half).unwrap();
    c.execute_batch("CREATE TABLE readings (x); PRAGMA user_version = 1;")
        .unwrap();
    drop(c);
    let before = snapshot(&half);
    assert_eq!(
        open_err(&half),
        "not a Sigil database: no table freshness, identities, registrations (schema version 1); the file was left untouched"
    );
    assert_untouched(&half, &before, "delete");
}

/// A valid Sigil database, closed cleanly (rollback mode afterwards, so that its bytes are
/// the whole state).
fn sigil_db(db: &Path) {
    let s = Store::open(db).unwrap();
    s.add_identity(
        &Identity::from_slice(&[7; 16]).unwrap(),
        sigil_server::store::IdentityKind::Device,
        "x",
        1,
    )
    .unwrap();
    drop(s);
    let c = Connection::open(db).unwrap();
    c.pragma_update(None, "journal_mode", "DELETE").unwrap();
}

#[test]
fn unknown_schema_versions_are_refused_and_left_untouched() {
    let known = Store::open_in_memory().unwrap().schema_version().unwrap();
    for v in [-1i64, 999] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        sigil_db(&db);
        Connection::open(&db)
            .unwrap()
            .pragma_update(None, "user_version", v)
            .unwrap();
        let before = snapshot(&db);
        assert_eq!(
            open_err(&db),
            format!(
                "database schema version {v} is not one this server knows (it knows 0 to {known})"
            )
        );
        assert_untouched(&db, &before, "delete");
    }
}

#[test]
fn an_older_sigil_database_without_application_id_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    sigil_db(&db);
    Connection::open(&db)
        .unwrap()
        .pragma_update(None, "application_id", 0)
        .unwrap();
    let s = Store::open(&db).unwrap();
    assert_eq!(s.list_identities().unwrap().len(), 1);
    drop(s);
    let id: i32 = Connection::open(&db)
        .unwrap()
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .unwrap();
    assert_eq!(id, sigil_server::store::APPLICATION_ID);
}

#[test]
fn damaged_and_non_database_files_are_reported_as_damaged() {
    let dir = tempfile::tempdir().unwrap();
    // A Sigil database with a page of the readings table overwritten.
    let db = dir.path().join("s.db");
    sigil_db(&db);
    {
        let s = Store::open(&db).unwrap();
        let ep = Identity::from_slice(&[7; 16]).unwrap();
        s.shared_transaction(|b| {
            for seq in 0..200u64 {
                b.insert_reading(&reading(&ep, seq, &[0x5a; 300]))?;
            }
            Ok(())
        })
        .unwrap();
    }
    Connection::open(&db)
        .unwrap()
        .pragma_update(None, "journal_mode", "DELETE")
        .unwrap();
    let mut bytes = std::fs::read(&db).unwrap();
    let page = 4096;
    assert!(bytes.len() > 8 * page);
    for b in &mut bytes[6 * page..6 * page + 200] {
        *b = 0xff;
    }
    std::fs::write(&db, &bytes).unwrap();
    let before = snapshot(&db);
    let msg = open_err(&db);
    assert!(
        msg.starts_with("the database file is damaged (")
            && msg.ends_with("): restore it from a backup"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");
    assert_untouched(&db, &before, "delete");

    // Not a database at all.
    let junk = dir.path().join("junk.db");
    let bytes: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&junk, &bytes).unwrap();
    let msg = open_err(&junk);
    assert!(
        msg.starts_with("the database file is damaged (")
            && msg.ends_with("): restore it from a backup"),
        "{msg}"
    );
    assert_eq!(std::fs::read(&junk).unwrap(), bytes);
    assert!(!sidecar(&junk, "-wal").exists() && !sidecar(&junk, "-shm").exists());
}

fn reading<'a>(ep: &'a Identity, seq: u64, raw: &'a [u8]) -> NewReading<'a> {
    NewReading {
        registration: 1,
        ep,
        topic: "t",
        seq,
        timestamp: None,
        content_format: 110,
        raw,
        decoded: "{}",
        received_at: 1,
        peer: "p",
        message_id: None,
        protection: sigil_server::store::Protection::Session,
    }
}

/// `PRAGMA max_page_count` caps the database: writes beyond it fail with SQLITE_FULL, exactly
/// as on a full disk. Nothing of a failed transaction is stored, the WAL stays under its
/// limit, and once the cap is raised (space returns) the same store writes again.
#[test]
fn a_full_database_stores_nothing_keeps_the_wal_bounded_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let ep = Identity::from_slice(&[9; 16]).unwrap();
    let raw = vec![0xa5u8; 3000];
    let mut store = Store::open(&db).unwrap();
    let cap = 700; // pages of 4 KiB: about 2.8 MB, more than the WAL limit
    assert_eq!(store.set_max_page_count(cap).unwrap(), cap);
    let mut stored = Vec::new();
    let mut failed = Vec::new();
    let mut seq = 0u64;
    while failed.len() < 5 {
        assert!(seq < 5000, "the cap never took effect");
        let r = store.transaction(|b| b.insert_reading(&reading(&ep, seq, &raw)));
        match r {
            Ok(()) => {
                assert!(failed.is_empty(), "seq {seq} stored after a failure");
                stored.push(seq);
            }
            Err(e) => {
                assert!(e.is_full(), "{e}");
                assert!(matches!(e, StoreError::Full(_)));
                failed.push(seq);
            }
        }
        assert!(
            wal_len(&db) <= WAL_LIMIT_BYTES as u64,
            "WAL is {} bytes after seq {seq}",
            wal_len(&db)
        );
        seq += 1;
    }
    assert!(stored.len() > 300, "{}", stored.len());
    let keys: Vec<u64> = store
        .reading_keys()
        .unwrap()
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(keys, stored, "exactly the committed readings are stored");

    // Space returns: the next transaction on the same store succeeds.
    store.set_max_page_count(100_000).unwrap();
    store
        .transaction(|b| b.insert_reading(&reading(&ep, seq, &raw)))
        .unwrap();
    stored.push(seq);
    assert!(wal_len(&db) <= WAL_LIMIT_BYTES as u64);
    drop(store);

    // And after a restart.
    let store = Store::open(&db).unwrap();
    store
        .shared_transaction(|b| b.insert_reading(&reading(&ep, seq + 1, &raw)))
        .unwrap();
    stored.push(seq + 1);
    let keys: Vec<u64> = store
        .reading_keys()
        .unwrap()
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(keys, stored);
    assert!(wal_len(&db) <= WAL_LIMIT_BYTES as u64);
}

#[test]
fn invalid_text_in_a_column_is_reported_as_damage_not_as_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    sigil_db(&db);
    Connection::open(&db)
        .unwrap()
        .execute("UPDATE identities SET label = CAST(X'FF00FE' AS TEXT)", [])
        .unwrap();
    let s = Store::open(&db).unwrap();
    let msg = s.list_identities().unwrap_err().to_string();
    assert!(
        msg.starts_with("the database file is damaged (a text column holds invalid UTF-8")
            && msg.ends_with("): restore it from a backup"),
        "{msg}"
    );
}
