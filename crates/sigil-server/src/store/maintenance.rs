//! What an operator's maintenance needs of the database: its files readable by the server's
//! user only, readings pruned past a retention window, and a consistent copy of a live
//! database (SQLite's online backup).

use super::{check, Store, StoreError};
use rusqlite::{params, Connection, OpenFlags};
use std::path::Path;

/// Creates `path` empty with mode 0600 if it does not exist, so that the database (the
/// server's private keys, every PSK in clear) is never readable by others; SQLite gives its
/// `-wal` and `-shm` files the database file's mode.
pub(super) fn create_private(path: &Path) -> Result<(), StoreError> {
    create_0600(path, true)
}

/// Creates `path` empty with mode 0600; a file already there is accepted when `existing_ok`
/// (the database, opened again) and refused otherwise (a backup never overwrites).
fn create_0600(path: &Path, existing_ok: bool) -> Result<(), StoreError> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    match o.open(path) {
        Ok(_) => Ok(()),
        Err(e) if existing_ok && e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("cannot create {}: {e}", path.display())),
        ))),
    }
}

/// Made when the store opens (not a migration: an index changes no stored data), so that
/// pruning by age finds old readings without a full scan.
pub(super) const INDEXES: &str =
    "CREATE INDEX IF NOT EXISTS readings_received ON readings (received_at);";

/// What [`Store::backup_to`] copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupSummary {
    pub pages: u64,
    pub readings: u64,
    pub identities: u64,
    /// Stored DTLS sessions deleted from the copy (never from the source): a server restored
    /// from the copy would seal with their saved write reservations, which the live server
    /// has already used (AEAD nonce reuse); their clients make a new handshake instead.
    pub dtls_sessions_left_out: u64,
}

impl Store {
    /// Deletes up to `limit` readings received before `before` (Unix seconds), never the
    /// latest reading of a device nor of a topic (what is served as current stays). Returns
    /// how many were deleted; fewer than `limit` means none is left to prune now. Bounded so
    /// a caller serving datagrams between calls never stalls for long, and it never waits
    /// for a lock another connection holds (e.g. a `sigil provision` transaction): locked
    /// out, it fails at once with [`StoreError::Busy`], to be tried on a later turn.
    pub fn prune_readings(&self, before: i64, limit: u32) -> Result<u64, StoreError> {
        self.conn.busy_timeout(std::time::Duration::ZERO)?;
        let r = self.conn.execute(
            "DELETE FROM readings WHERE id IN (
                 SELECT r.id FROM readings r
                 WHERE r.received_at < ?1
                   AND r.seq < (SELECT max(seq) FROM readings e WHERE e.ep = r.ep)
                   AND r.id <> (SELECT t.id FROM readings t WHERE t.topic = r.topic
                                ORDER BY t.seq DESC, t.id DESC LIMIT 1)
                 ORDER BY r.received_at
                 LIMIT ?2)",
            params![before, limit],
        );
        self.conn.busy_timeout(super::BUSY_TIMEOUT)?;
        Ok(r? as u64)
    }

    /// Copies the database at `src` into a new file `dest` (created 0600; refused if it
    /// exists) with SQLite's online backup, in one step: the copy is one consistent
    /// snapshot, taken while a server keeps writing. Every stored DTLS session is then
    /// deleted from the copy (see [`BackupSummary::dtls_sessions_left_out`]) and the copy is
    /// checked with `PRAGMA integrity_check`.
    pub fn backup_to(src: &Path, dest: &Path) -> Result<BackupSummary, StoreError> {
        if !src.is_file() {
            return Err(StoreError::Foreign(format!(
                "{} is not a file",
                src.display()
            )));
        }
        check::inspect(src)?;
        let source = Connection::open_with_flags(
            src,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        source.busy_timeout(super::BUSY_TIMEOUT)?;
        create_0600(dest, false)?;
        let r = copy_into(&source, dest);
        if r.is_err() {
            let _ = std::fs::remove_file(dest);
        }
        r
    }
}

/// How long a backup waits for a source another connection keeps locked, and how often it
/// tries again meanwhile.
const BACKUP_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
const BACKUP_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// The backup proper, into the empty file `dest`.
fn copy_into(source: &Connection, dest: &Path) -> Result<BackupSummary, StoreError> {
    {
        let mut copy = Connection::open(dest)?;
        let pages = {
            let backup = rusqlite::backup::Backup::new(source, &mut copy)?;
            // -1: every page in one step, under one read transaction of the source. A source
            // another process keeps locked is waited for up to BACKUP_WAIT, not forever.
            let mut waited = std::time::Duration::ZERO;
            loop {
                match backup.step(-1)? {
                    rusqlite::backup::StepResult::Done => break,
                    _ if waited >= BACKUP_WAIT => {
                        return Err(StoreError::Busy(format!(
                            "the database stayed locked for {} s",
                            BACKUP_WAIT.as_secs()
                        )))
                    }
                    _ => {
                        std::thread::sleep(BACKUP_RETRY);
                        waited += BACKUP_RETRY;
                    }
                }
            }
            backup.progress().pagecount as u64
        };
        // Before the check, in the copy only: a restored server must never seal with a
        // session's write reservation that the live server has used since (nonce reuse).
        // secure_delete: their records (session keys) are overwritten, not left in free pages.
        // A database from before the table existed has none.
        copy.pragma_update(None, "secure_delete", true)?;
        let has_sessions: bool = copy.query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'dtls_sessions'",
            [],
            |r| r.get(0),
        )?;
        let left_out = if has_sessions {
            copy.execute("DELETE FROM dtls_sessions", [])? as u64
        } else {
            0
        };
        let check: String = copy.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        if check != "ok" {
            return Err(StoreError::Damaged(format!("the copy: {check}")));
        }
        let count = |sql: &str| copy.query_row(sql, [], |r| r.get::<_, i64>(0));
        let summary = BackupSummary {
            pages,
            readings: count("SELECT count(*) FROM readings")? as u64,
            identities: count("SELECT count(*) FROM identities")? as u64,
            dtls_sessions_left_out: left_out,
        };
        // Fold the copy's WAL (if any) into it: one self-contained file.
        let _ = copy.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        drop(copy);
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{NewReading, Protection};
    use sigil_identity::Identity;

    fn reading(store: &mut Store, ep: &Identity, topic: &str, seq: u64, at: i64) {
        store
            .transaction(|b| {
                b.insert_reading(&NewReading {
                    registration: 1,
                    ep,
                    topic,
                    seq,
                    timestamp: None,
                    content_format: 60,
                    raw: b"x",
                    decoded: "[]",
                    received_at: at,
                    peer: "",
                    message_id: None,
                    protection: Protection::Signed,
                })
            })
            .unwrap();
    }

    fn keys(store: &Store) -> Vec<(String, u64)> {
        store.reading_keys().unwrap()
    }

    /// Old readings go, in bounded batches; a device's and a topic's latest stay however
    /// old; nothing received within the window goes.
    #[test]
    fn prune_keeps_the_latest_and_the_recent() {
        let mut s = Store::open_in_memory().unwrap();
        let a = Identity::from_bytes([1; 16]);
        let b = Identity::from_bytes([2; 16]);
        for seq in 1..=5 {
            reading(&mut s, &a, "ps/a/m", seq, 100 + seq as i64);
        }
        reading(&mut s, &a, "ps/a/m", 6, 1000);
        // b: only old readings; its latest stays.
        reading(&mut s, &b, "ps/b/m", 1, 50);
        reading(&mut s, &b, "ps/b/m", 2, 60);
        assert_eq!(s.prune_readings(500, 3).unwrap(), 3, "bounded by the limit");
        assert_eq!(s.prune_readings(500, 3).unwrap(), 3);
        assert_eq!(
            s.prune_readings(500, 3).unwrap(),
            0,
            "nothing left to prune"
        );
        let a = a.to_string();
        let b = b.to_string();
        assert_eq!(keys(&s), {
            let mut k = vec![(a.clone(), 6), (b.clone(), 2)];
            k.sort();
            k
        });
        // Nothing younger than the window goes, even when it is not the latest.
        reading(&mut s, &Identity::parse(&a).unwrap(), "ps/a/m", 7, 1001);
        assert_eq!(s.prune_readings(1000, 100).unwrap(), 0);
        assert_eq!(
            s.prune_readings(1001, 100).unwrap(),
            1,
            "seq 6 is now old and not the latest"
        );
        assert!(keys(&s).contains(&(a, 7)));
        assert!(keys(&s).contains(&(b, 2)));
    }

    /// The latest reading of a topic stays even when its device has a newer one elsewhere.
    #[test]
    fn prune_keeps_each_topics_latest() {
        let mut s = Store::open_in_memory().unwrap();
        let a = Identity::from_bytes([1; 16]);
        reading(&mut s, &a, "ps/a/t", 1, 10);
        reading(&mut s, &a, "ps/a/t", 2, 11);
        reading(&mut s, &a, "ps/a/h", 3, 12);
        assert_eq!(s.prune_readings(100, 100).unwrap(), 1);
        let seqs: Vec<u64> = keys(&s).into_iter().map(|(_, q)| q).collect();
        assert_eq!(seqs, vec![2, 3]);
    }

    /// Pruning gives up at once while another connection holds the write lock (a busy error,
    /// not a stall of the store's 10 s busy timeout), and prunes once the lock is free.
    #[test]
    fn pruning_is_refused_at_once_while_locked() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let mut s = Store::open(&db).unwrap();
        let a = Identity::from_bytes([1; 16]);
        reading(&mut s, &a, "ps/a/m", 1, 10);
        reading(&mut s, &a, "ps/a/m", 2, 20);
        let pruner = Store::open(&db).unwrap();
        let other = Connection::open(&db).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let t = std::time::Instant::now();
        let e = pruner.prune_readings(100, 10).unwrap_err();
        assert!(e.is_busy(), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        other.execute_batch("COMMIT").unwrap();
        assert_eq!(pruner.prune_readings(100, 10).unwrap(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn database_and_backup_are_private_and_the_copy_is_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let mut s = Store::open(&db).unwrap();
        let a = Identity::from_bytes([1; 16]);
        for seq in 1..=20 {
            reading(&mut s, &a, "ps/a/m", seq, seq as i64);
        }
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&db), 0o600);
        let wal = dir.path().join("s.db-wal");
        if wal.exists() {
            assert_eq!(mode(&wal), 0o600);
        }
        s.put_dtls_session(&crate::store::DtlsSessionRow {
            id: 1,
            addr: "127.0.0.1:5000".into(),
            identity: a.to_string(),
            saved_at: 1,
            record: b"session-secret".to_vec(),
        })
        .unwrap();
        let out = dir.path().join("copy.db");
        let summary = Store::backup_to(&db, &out).unwrap();
        assert_eq!(summary.readings, 20);
        assert_eq!(summary.dtls_sessions_left_out, 1);
        assert_eq!(mode(&out), 0o600);
        // The copy holds no stored DTLS session (nor its record in a free page); the source
        // keeps its own.
        assert_eq!(s.dtls_sessions().unwrap().len(), 1);
        let copy = Store::open(&out).unwrap();
        assert_eq!(copy.reading_count().unwrap(), 20);
        assert!(copy.dtls_sessions().unwrap().is_empty());
        drop(copy);
        let bytes = std::fs::read(&out).unwrap();
        assert!(!bytes.windows(14).any(|w| w == b"session-secret"));
        // An existing file is never overwritten.
        assert!(Store::backup_to(&db, &out).is_err());
        // Something that is not a database is refused.
        let junk = dir.path().join("junk");
        std::fs::write(&junk, b"not a database at all, not at all").unwrap();
        assert!(Store::backup_to(&junk, &dir.path().join("c2.db")).is_err());
        assert!(!dir.path().join("c2.db").exists());
    }
}
