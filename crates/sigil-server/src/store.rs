//! The embedded SQLite database: one file, created on first start, with versioned migrations.
//!
//! Durability: WAL journal with `synchronous = FULL`, so a committed transaction survives a
//! power cut or `kill -9`. The broker commits a batch of readings together with the new
//! per-identity high-water marks in one transaction, and only then sends the responses.

use rusqlite::{params, Connection};
use sigil_crypto::{PublicKey, SignatureAlgorithm};
use sigil_identity::Identity;
use std::collections::HashMap;
use std::path::Path;

mod batch;
mod check;
mod maintenance;
mod pairings;
pub use pairings::PairingRow;
mod wal;
pub use batch::Batch;
pub use maintenance::BackupSummary;
use wal::WAL_AUTOCHECKPOINT_PAGES;
pub use wal::WAL_LIMIT_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Sqlite(rusqlite::Error),
    #[error(
        "database schema version {found} is not one this server knows (it knows 0 to {known})"
    )]
    SchemaUnknown { found: i64, known: i64 },
    /// The file is a SQLite database, but not one of Sigil's; it was left untouched.
    #[error("not a Sigil database: {0}; the file was left untouched")]
    Foreign(String),
    /// SQLITE_CORRUPT, SQLITE_NOTADB or a failed `PRAGMA quick_check`.
    #[error("the database file is damaged ({0}): restore it from a backup")]
    Damaged(String),
    /// SQLITE_FULL or another write that failed for lack of space: nothing was stored.
    #[error("the database is full or the disk has no space left ({0}); nothing was stored")]
    Full(String),
    #[error("corrupt row in {table}: {what}")]
    Corrupt { table: &'static str, what: String },
    /// SQLITE_BUSY or SQLITE_LOCKED: another connection held the lock longer than the busy
    /// timeout. Nothing was stored; trying again may succeed.
    #[error(
        "the database is busy: another process held its lock too long ({0}); nothing was stored"
    )]
    Busy(String),
}

impl From<rusqlite::Error> for StoreError {
    /// Sorts SQLite's errors: damage and lack of space get their own variants, so that what
    /// is reported says what is wrong (a damaged page otherwise surfaces as e.g. "invalid
    /// utf-8" from a column read).
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ffi::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseCorrupt) | Some(ErrorCode::NotADatabase) => {
                Self::Damaged(e.to_string())
            }
            Some(ErrorCode::DiskFull) => Self::Full(e.to_string()),
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => {
                Self::Busy(e.to_string())
            }
            // Sigil writes only valid UTF-8 into its text columns.
            _ if matches!(
                e,
                rusqlite::Error::Utf8Error(..)
                    | rusqlite::Error::FromSqlConversionFailure(_, rusqlite::types::Type::Text, _)
            ) =>
            {
                Self::Damaged(format!("a text column holds invalid UTF-8: {e}"))
            }
            _ => Self::Sqlite(e),
        }
    }
}

impl StoreError {
    /// True when the failure is for lack of space: worth retrying once space returns.
    pub fn is_full(&self) -> bool {
        matches!(self, Self::Full(_))
    }

    /// True when another connection held the lock: the same transaction may succeed if run
    /// again.
    pub fn is_busy(&self) -> bool {
        matches!(self, Self::Busy(_))
    }
}

/// `PRAGMA application_id` of a Sigil database ("Sgl1").
pub const APPLICATION_ID: i32 = 0x5367_6c31;

/// How long a statement waits for another connection (e.g. `sigil provision`) to finish.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Schema migrations, applied in order; `PRAGMA user_version` records how many ran.
const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "CREATE TABLE identities (
        identity   TEXT PRIMARY KEY CHECK (length(identity) = 32),
        kind       TEXT NOT NULL CHECK (kind IN ('device', 'group')),
        label      TEXT NOT NULL DEFAULT '',
        added_at   INTEGER NOT NULL,
        revoked_at INTEGER
    );
    CREATE TABLE registrations (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        ep            TEXT NOT NULL UNIQUE,
        authorized_by TEXT NOT NULL,
        alg           INTEGER NOT NULL,
        public_key    BLOB NOT NULL,
        other_info    BLOB NOT NULL DEFAULT x'',
        group_keys    TEXT NOT NULL DEFAULT '',
        base          TEXT,
        lifetime      INTEGER NOT NULL,
        links         TEXT NOT NULL,
        registered_at INTEGER NOT NULL,
        updated_at    INTEGER NOT NULL,
        expires_at    INTEGER NOT NULL
    );
    CREATE TABLE readings (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        registration   INTEGER NOT NULL,
        ep             TEXT NOT NULL,
        topic          TEXT NOT NULL,
        seq            INTEGER NOT NULL,
        timestamp      INTEGER,
        content_format INTEGER NOT NULL,
        raw            BLOB NOT NULL,
        decoded        TEXT NOT NULL,
        verified       INTEGER NOT NULL,
        received_at    INTEGER NOT NULL,
        peer           TEXT NOT NULL DEFAULT '',
        message_id     INTEGER,
        UNIQUE (ep, seq)
    );
    CREATE INDEX readings_topic ON readings (topic, seq);
    CREATE TABLE freshness (
        ep         TEXT PRIMARY KEY,
        highest    INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );",
    // 2: DTLS (coaps://): pre-shared keys of provisioned identities, and the server's own key.
    "CREATE TABLE dtls_psk (
        identity TEXT PRIMARY KEY CHECK (length(identity) = 32),
        psk      BLOB NOT NULL CHECK (length(psk) BETWEEN 16 AND 64),
        added_at INTEGER NOT NULL
    );
    CREATE TABLE server_key (
        name   TEXT PRIMARY KEY,
        alg    INTEGER NOT NULL,
        secret BLOB NOT NULL
    );",
    // 3: who may change a live registration (docs/security.md, "Registration ownership").
    // Rows from before were made by Sigil devices, which always signed their registration.
    "ALTER TABLE registrations ADD COLUMN owner TEXT NOT NULL DEFAULT 'signed'
        CHECK (owner IN ('open', 'signed', 'session'));",
    // 4: established coaps:// sessions, so a restarted server keeps them (docs/security.md,
    // "DTLS associations at rest"). `record` is a sigil_dtls SavedAssociation, MACed under a
    // key derived from the server's DTLS key; its write sequence is reserved ahead.
    "CREATE TABLE dtls_sessions (
        id       INTEGER PRIMARY KEY,
        addr     TEXT NOT NULL,
        identity TEXT NOT NULL,
        saved_at INTEGER NOT NULL,
        record   BLOB NOT NULL CHECK (length(record) <= 382)
    );",
    // 5: who may read which sensor's readings (docs/security.md, "Who may read what"): a
    // reader identity and a device or group (kit) identity.
    "CREATE TABLE read_grants (
        reader     TEXT NOT NULL CHECK (length(reader) = 32),
        object     TEXT NOT NULL CHECK (length(object) = 32),
        granted_at INTEGER NOT NULL,
        PRIMARY KEY (reader, object)
    ) WITHOUT ROWID;",
    // 6: nodes with only a pre-shared key (docs/security.md, "Nodes without public-key
    // crypto"): a registration made over the node's own PSK session has no key (the table is
    // rebuilt, as SQLite cannot drop NOT NULL; ids and the AUTOINCREMENT counter are kept),
    // and every reading records how it was protected.
    "CREATE TABLE registrations_v6 (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        ep            TEXT NOT NULL UNIQUE,
        authorized_by TEXT NOT NULL,
        alg           INTEGER,
        public_key    BLOB,
        other_info    BLOB NOT NULL DEFAULT x'',
        group_keys    TEXT NOT NULL DEFAULT '',
        base          TEXT,
        lifetime      INTEGER NOT NULL,
        links         TEXT NOT NULL,
        registered_at INTEGER NOT NULL,
        updated_at    INTEGER NOT NULL,
        expires_at    INTEGER NOT NULL,
        owner         TEXT NOT NULL DEFAULT 'signed'
            CHECK (owner IN ('open', 'signed', 'session')),
        CHECK ((alg IS NULL) = (public_key IS NULL)),
        CHECK (alg IS NOT NULL OR owner = 'session')
    );
    INSERT INTO registrations_v6 (id, ep, authorized_by, alg, public_key, other_info,
            group_keys, base, lifetime, links, registered_at, updated_at, expires_at, owner)
        SELECT id, ep, authorized_by, alg, public_key, other_info, group_keys, base, lifetime,
            links, registered_at, updated_at, expires_at, owner FROM registrations;
    INSERT INTO sqlite_sequence (name, seq)
        SELECT 'registrations_v6', seq FROM sqlite_sequence WHERE name = 'registrations'
            AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'registrations_v6');
    UPDATE sqlite_sequence SET seq = (SELECT max(seq) FROM sqlite_sequence
            WHERE name IN ('registrations', 'registrations_v6'))
        WHERE name = 'registrations_v6';
    DROP TABLE registrations;
    ALTER TABLE registrations_v6 RENAME TO registrations;
    ALTER TABLE readings ADD COLUMN protection TEXT NOT NULL DEFAULT 'signed'
        CHECK (protection IN ('signed', 'mac', 'session'));
    ALTER TABLE dtls_psk ADD COLUMN psk_only INTEGER NOT NULL DEFAULT 0
        CHECK (psk_only IN (0, 1));",
    // 7: the pairing messages this server issued (`sigil provision pair`; docs/security.md,
    // "Pairing"): the latest per device, whose group makes the device a member for read grants.
    "CREATE TABLE pairings (
        device     TEXT PRIMARY KEY CHECK (length(device) = 32),
        serial     INTEGER NOT NULL,
        grp        TEXT NOT NULL CHECK (length(grp) = 32),
        subscriber TEXT NOT NULL CHECK (length(subscriber) = 32),
        server_uri TEXT,
        paired_at  INTEGER NOT NULL
    ) WITHOUT ROWID;",
];

/// A stored coaps:// session ([`Store::dtls_sessions`]).
#[derive(Clone, Debug)]
pub struct DtlsSessionRow {
    pub id: i64,
    /// The peer's address (`SocketAddr` text).
    pub addr: String,
    /// The identity it authenticated as (empty for an anonymous client).
    pub identity: String,
    /// Unix seconds of the last save.
    pub saved_at: i64,
    pub record: Vec<u8>,
}

/// Kinds of entries on the authorized list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IdentityKind {
    Device,
    Group,
}

impl IdentityKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Device => "device",
            Self::Group => "group",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "device" => Some(Self::Device),
            "group" => Some(Self::Group),
            _ => None,
        }
    }
}

/// One row of the authorized list.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IdentityRow {
    pub identity: String,
    pub kind: IdentityKind,
    pub label: String,
    pub added_at: i64,
    pub revoked_at: Option<i64>,
}

/// How a registration is owned: who may change it while it is live (docs/security.md,
/// "Registration ownership"). Ordered from the weakest proof to the strongest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ownership {
    /// Made or last changed by an unsigned plain-CoAP request: anyone could have made it, so
    /// anyone may change it (a plain RFC 9176 client).
    Open,
    /// Made or last changed by a request carrying the device's valid registration statement
    /// (`sq`, `ss`): changes need another statement, or a session for the identity.
    Signed,
    /// Made or last changed over a DTLS session that speaks for the identity: changes need
    /// such a session.
    Session,
}

impl Ownership {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Signed => "signed",
            Self::Session => "session",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "open" => Some(Self::Open),
            "signed" => Some(Self::Signed),
            "session" => Some(Self::Session),
            _ => None,
        }
    }
}

/// A Resource Directory registration (RFC 9176 §5) with the key it proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub id: i64,
    pub ep: Identity,
    /// The list entry that authorized it: `ep` itself, or a group identity.
    pub authorized_by: Identity,
    /// The announced and bound key; `None` for a node with only a pre-shared key, registered
    /// over its own PSK session (such a registration is always [`Ownership::Session`]).
    pub key: Option<PublicKey>,
    pub other_info: Vec<u8>,
    pub group_keys: Vec<PublicKey>,
    pub base: Option<String>,
    pub lifetime: u32,
    pub links: String,
    pub registered_at: i64,
    pub updated_at: i64,
    pub expires_at: i64,
    pub owner: Ownership,
}

/// How a stored reading was protected when it arrived (docs/security.md, "Nodes without
/// public-key crypto").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protection {
    /// A COSE_Sign1 or JWS by the node's key: anyone with the public key verifies it, at any
    /// time, through any middlebox.
    Signed,
    /// A COSE_Mac0 under the node's reading key: verifiable by the key's holders (the node, the
    /// server and the subscribers it was disclosed to), any of whom could have made it.
    Mac,
    /// Plain SenML over the node's own DTLS session: the server vouches for it; nobody can
    /// verify it later.
    Session,
}

impl Protection {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Signed => "signed",
            Self::Mac => "mac",
            Self::Session => "session",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "signed" => Some(Self::Signed),
            "mac" => Some(Self::Mac),
            "session" => Some(Self::Session),
            _ => None,
        }
    }
}

/// A reading as stored: the exact bytes received and what they decode to.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredReading {
    pub seq: u64,
    pub ep: String,
    pub topic: String,
    pub timestamp: Option<i64>,
    pub content_format: u16,
    pub raw: Vec<u8>,
    pub decoded: String,
    pub received_at: i64,
    /// Who sent it and in which Confirmable message: a retransmission of that same message
    /// (RFC 7252 §4.5) gets the original answer, even after a server restart.
    pub peer: String,
    pub message_id: Option<u16>,
    pub protection: Protection,
}

/// A verified reading about to be stored.
pub struct NewReading<'a> {
    pub registration: i64,
    pub ep: &'a Identity,
    pub topic: &'a str,
    pub seq: u64,
    pub timestamp: Option<u64>,
    pub content_format: u16,
    pub raw: &'a [u8],
    pub decoded: &'a str,
    pub received_at: i64,
    pub peer: &'a str,
    pub message_id: Option<u16>,
    pub protection: Protection,
}

/// Encodes group keys as `alg:base64url` words.
pub fn encode_keys(keys: &[PublicKey]) -> String {
    let mut out = String::new();
    for (i, k) in keys.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = sigil_identity::announce::write_group_word(&mut out, k);
    }
    out
}

/// Decodes `alg:base64url` words; `None` if any word is malformed.
pub fn decode_keys(text: &str) -> Option<Vec<PublicKey>> {
    Some(sigil_identity::announce::parse_group(text)?.collect())
}

pub struct Store {
    conn: Connection,
    /// Commits since the last explicit checkpoint.
    commits: std::cell::Cell<u32>,
}

impl Store {
    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    ///
    /// An existing file is first inspected read-only: a file that is not a SQLite database,
    /// a damaged one, one of another application, or one whose schema version this server
    /// does not know is refused without a single byte of it (or its journal mode) changed.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let exists = std::fs::metadata(path)
            .map(|m| m.len() > 0)
            .unwrap_or(false);
        let stamp = if exists { check::inspect(path)? } else { true };
        if !exists {
            maintenance::create_private(path)?;
        }
        let conn = Connection::open(path)?;
        if stamp {
            conn.pragma_update(None, "application_id", APPLICATION_ID)?;
        }
        Self::init(conn)
    }

    /// An in-memory database, for tests.
    pub fn open_in_memory() -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<Self, StoreError> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "journal_size_limit", WAL_LIMIT_BYTES)?;
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)?;
        let mut store = Self {
            conn,
            commits: std::cell::Cell::new(0),
        };
        store.migrate()?;
        store.conn.execute_batch(maintenance::INDEXES)?;
        // A WAL left large by an earlier run (e.g. one that ended while the disk was full)
        // is folded back and truncated now.
        store.checkpoint();
        Ok(store)
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?;
        let known = MIGRATIONS.len() as i64;
        if !(0..=known).contains(&version) {
            return Err(StoreError::SchemaUnknown {
                found: version,
                known,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            // Another process may have run this migration while this one waited for the lock.
            let now: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
            if now > i as i64 {
                continue;
            }
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
            tx.commit()?;
        }
        Ok(())
    }

    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    /// Changes whenever another connection commits (used to notice `sigil provision` runs).
    pub fn data_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .pragma_query_value(None, "data_version", |r| r.get(0))?)
    }

    // ---- the authorized list ----

    /// Adds an identity. Returns false if it is already on the list, active or revoked: a
    /// revoked identity comes back only through [`Store::reinstate_identity`], never by being
    /// added again (docs/security.md, "Revocation").
    pub fn add_identity(
        &self,
        id: &Identity,
        kind: IdentityKind,
        label: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        add_identity(&self.conn, id, kind, label, now)
    }

    /// When `id` was revoked, if it is on the list as revoked.
    pub fn revoked_at(&self, id: &Identity) -> Result<Option<i64>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT revoked_at FROM identities WHERE identity = ?1")?;
        let mut rows = st.query_map(params![id.to_string()], |r| r.get::<_, Option<i64>>(0))?;
        Ok(rows.next().transpose()?.flatten())
    }

    /// Re-activates a revoked identity (`sigil provision add --reinstate`), with `kind` and,
    /// if not empty, `label`. Returns false if it was not revoked.
    pub fn reinstate_identity(
        &self,
        id: &Identity,
        kind: IdentityKind,
        label: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let n = self.conn.execute(
            "UPDATE identities SET revoked_at = NULL, kind = ?2,
                 label = CASE WHEN ?3 = '' THEN label ELSE ?3 END, added_at = ?4
             WHERE identity = ?1 AND revoked_at IS NOT NULL",
            params![id.to_string(), kind.as_str(), label, now],
        )?;
        Ok(n > 0)
    }

    /// Revokes an identity: from now on nothing from it is accepted, and the coaps://
    /// sessions stored for it are deleted (a running server also ends the live ones when it
    /// notices). Returns false if unknown or already revoked.
    pub fn revoke_identity(&self, id: &Identity, now: i64) -> Result<bool, StoreError> {
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )?;
        let n = tx.execute(
            "UPDATE identities SET revoked_at = ?2 WHERE identity = ?1 AND revoked_at IS NULL",
            params![id.to_string(), now],
        )?;
        if n > 0 {
            tx.execute(
                "DELETE FROM dtls_sessions WHERE identity = ?1",
                params![id.to_string()],
            )?;
        }
        tx.commit()?;
        Ok(n > 0)
    }

    /// Records an identity that is not on the list as revoked (a kit member listed only
    /// through its kit's group identity, say), so it is refused by name. Returns false if it
    /// is on the list already (use [`Store::revoke_identity`]).
    pub fn revoke_unlisted(&self, id: &Identity, now: i64) -> Result<bool, StoreError> {
        let n = self.conn.execute(
            "INSERT INTO identities (identity, kind, label, added_at, revoked_at)
             VALUES (?1, 'device', '', ?2, ?2) ON CONFLICT (identity) DO NOTHING",
            params![id.to_string(), now],
        )?;
        Ok(n > 0)
    }

    /// The revoked identities, with when each was revoked.
    pub fn revoked(&self) -> Result<HashMap<Identity, i64>, StoreError> {
        Ok(self
            .list_identities()?
            .into_iter()
            .filter_map(|r| Some((Identity::parse(&r.identity).ok()?, r.revoked_at?)))
            .collect())
    }

    pub fn list_identities(&self) -> Result<Vec<IdentityRow>, StoreError> {
        let mut st = self.conn.prepare("SELECT identity, kind, label, added_at, revoked_at FROM identities ORDER BY added_at, identity")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
            ))
        })?;
        rows.map(|r| {
            let (identity, kind, label, added_at, revoked_at) = r?;
            let kind = IdentityKind::parse(&kind).ok_or(StoreError::Corrupt {
                table: "identities",
                what: kind.clone(),
            })?;
            Ok(IdentityRow {
                identity,
                kind,
                label,
                added_at,
                revoked_at,
            })
        })
        .collect()
    }

    /// The active (not revoked) identities and their kinds.
    pub fn authorized(&self) -> Result<HashMap<Identity, IdentityKind>, StoreError> {
        Ok(self
            .list_identities()?
            .into_iter()
            .filter(|r| r.revoked_at.is_none())
            .filter_map(|r| Some((Identity::parse(&r.identity).ok()?, r.kind)))
            .collect())
    }

    // ---- Read grants ----

    /// Lets `reader` read the readings of `object` (a device, or every device of a group).
    pub fn grant_read(
        &self,
        reader: &Identity,
        object: &Identity,
        now: i64,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO read_grants (reader, object, granted_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (reader, object) DO NOTHING",
            params![reader.to_string(), object.to_string(), now],
        )?;
        Ok(())
    }

    /// Withdraws a grant; false if there was none.
    pub fn revoke_read(&self, reader: &Identity, object: &Identity) -> Result<bool, StoreError> {
        let n = self.conn.execute(
            "DELETE FROM read_grants WHERE reader = ?1 AND object = ?2",
            params![reader.to_string(), object.to_string()],
        )?;
        Ok(n > 0)
    }

    /// Every grant: reader, object.
    pub fn read_grants(&self) -> Result<Vec<(Identity, Identity)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT reader, object FROM read_grants ORDER BY reader, object")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (reader, object) = row?;
            if let (Ok(r), Ok(o)) = (Identity::parse(&reader), Identity::parse(&object)) {
                out.push((r, o));
            }
        }
        Ok(out)
    }

    // ---- DTLS credentials ----

    /// Sets (or replaces) the DTLS pre-shared key of a provisioned identity. The PSK identity
    /// a client presents is the identity's text form (RFC 4279 §5.1).
    pub fn set_psk(&self, id: &Identity, psk: &[u8], now: i64) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO dtls_psk (identity, psk, added_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (identity) DO UPDATE SET psk = excluded.psk, added_at = excluded.added_at",
            params![id.to_string(), psk, now],
        )?;
        Ok(())
    }

    /// Marks `id`'s PSK as that of a node with only a pre-shared key (`sigil provision
    /// psk-node`): only such an identity may register without a key, publish MACed or
    /// session-protected readings, and have its reading key disclosed. Replacing the PSK later
    /// (`set_psk`) keeps the mark.
    pub fn mark_psk_only(&self, id: &Identity) -> Result<bool, StoreError> {
        let n = self.conn.execute(
            "UPDATE dtls_psk SET psk_only = 1 WHERE identity = ?1",
            params![id.to_string()],
        )?;
        Ok(n > 0)
    }

    /// The active identities marked as PSK-only nodes, with their PSKs.
    pub fn psk_nodes(&self) -> Result<HashMap<Identity, Vec<u8>>, StoreError> {
        self.psks_where("p.psk_only = 1")
    }

    /// Pre-shared keys of active identities only: revoking an identity revokes its PSK.
    pub fn psks(&self) -> Result<HashMap<Identity, Vec<u8>>, StoreError> {
        self.psks_where("1")
    }

    /// The PSKs of active identities whose `dtls_psk` row meets `condition`.
    fn psks_where(&self, condition: &str) -> Result<HashMap<Identity, Vec<u8>>, StoreError> {
        let mut st = self.conn.prepare(&format!(
            "SELECT p.identity, p.psk FROM dtls_psk p JOIN identities i ON i.identity = p.identity
             WHERE i.revoked_at IS NULL AND ({condition})"
        ))?;
        let rows = st.query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
        })?;
        let mut out = HashMap::new();
        for r in rows {
            let (id, psk) = r?;
            let id = Identity::parse(&id).map_err(|_| StoreError::Corrupt {
                table: "dtls_psk",
                what: id.clone(),
            })?;
            out.insert(id, psk);
        }
        Ok(out)
    }

    /// The server's long-term DTLS key (`alg` as COSE number, secret bytes), if one was made.
    pub fn server_key(&self, name: &str) -> Result<Option<(i64, Vec<u8>)>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT alg, secret FROM server_key WHERE name = ?1")?;
        let mut rows = st.query_map(params![name], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.next().transpose()?)
    }

    /// Stores the server's key unless one exists; returns the one that is stored.
    pub fn put_server_key(
        &self,
        name: &str,
        alg: i64,
        secret: &[u8],
    ) -> Result<(i64, Vec<u8>), StoreError> {
        self.conn.execute(
            "INSERT OR IGNORE INTO server_key (name, alg, secret) VALUES (?1, ?2, ?3)",
            params![name, alg, secret],
        )?;
        self.server_key(name)?.ok_or(StoreError::Corrupt {
            table: "server_key",
            what: name.to_string(),
        })
    }

    // ---- DTLS sessions ----

    /// Stores (or replaces) session `id`.
    pub fn put_dtls_session(&self, row: &DtlsSessionRow) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO dtls_sessions (id, addr, identity, saved_at, record)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (id) DO UPDATE SET addr = ?2, identity = ?3, saved_at = ?4,
             record = ?5",
            params![row.id, row.addr, row.identity, row.saved_at, row.record],
        )?;
        Ok(())
    }

    /// Forgets session `id` (ended, expired or replaced).
    pub fn delete_dtls_session(&self, id: i64) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM dtls_sessions WHERE id = ?1", params![id])?;
        Ok(())
    }

    /// Every stored session, newest save first (the one a restart prefers when two name the
    /// same address).
    pub fn dtls_sessions(&self) -> Result<Vec<DtlsSessionRow>, StoreError> {
        let mut st = self.conn.prepare(
            "SELECT id, addr, identity, saved_at, record FROM dtls_sessions
             ORDER BY saved_at DESC, id DESC",
        )?;
        let rows = st.query_map([], |r| {
            Ok(DtlsSessionRow {
                id: r.get(0)?,
                addr: r.get(1)?,
                identity: r.get(2)?,
                saved_at: r.get(3)?,
                record: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    // ---- registrations ----

    fn row_to_registration(
        r: &rusqlite::Row<'_>,
    ) -> rusqlite::Result<Result<Registration, StoreError>> {
        let id: i64 = r.get(0)?;
        let ep: String = r.get(1)?;
        let auth: String = r.get(2)?;
        let alg: Option<i64> = r.get(3)?;
        let key: Option<Vec<u8>> = r.get(4)?;
        let other_info: Vec<u8> = r.get(5)?;
        let group: String = r.get(6)?;
        let owner: String = r.get(13)?;
        let corrupt = |what: &str| StoreError::Corrupt {
            table: "registrations",
            what: what.to_string(),
        };
        Ok((|| {
            let key = match (alg, key) {
                (Some(alg), Some(key)) => {
                    let alg = SignatureAlgorithm::from_cose(alg).ok_or_else(|| corrupt("alg"))?;
                    Some(PublicKey::from_bytes(alg, &key).map_err(|_| corrupt("public_key"))?)
                }
                (None, None) => None,
                _ => return Err(corrupt("public_key")),
            };
            Ok(Registration {
                id,
                ep: Identity::parse(&ep).map_err(|_| corrupt("ep"))?,
                authorized_by: Identity::parse(&auth).map_err(|_| corrupt("authorized_by"))?,
                key,
                other_info,
                group_keys: decode_keys(&group).ok_or_else(|| corrupt("group_keys"))?,
                base: r.get(7)?,
                lifetime: r.get(8)?,
                links: r.get(9)?,
                registered_at: r.get(10)?,
                updated_at: r.get(11)?,
                expires_at: r.get(12)?,
                owner: Ownership::parse(&owner).ok_or_else(|| corrupt("owner"))?,
            })
        })())
    }

    const REG_COLUMNS: &'static str = "id, ep, authorized_by, alg, public_key, other_info, group_keys, base, lifetime, links, registered_at, updated_at, expires_at, owner";

    pub fn registrations(&self) -> Result<Vec<Registration>, StoreError> {
        let mut st = self.conn.prepare(&format!(
            "SELECT {} FROM registrations ORDER BY id",
            Self::REG_COLUMNS
        ))?;
        let rows = st.query_map([], Self::row_to_registration)?;
        rows.map(|r| r?).collect()
    }

    // ---- freshness ----

    pub fn freshness(&self) -> Result<HashMap<Identity, u64>, StoreError> {
        let mut st = self.conn.prepare("SELECT ep, highest FROM freshness")?;
        let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        let mut out = HashMap::new();
        for r in rows {
            let (ep, h) = r?;
            let ep = Identity::parse(&ep).map_err(|_| StoreError::Corrupt {
                table: "freshness",
                what: ep.clone(),
            })?;
            out.insert(ep, h as u64);
        }
        Ok(out)
    }

    // ---- readings ----

    /// Every stored (ep, seq) pair.
    pub fn reading_keys(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let mut st = self
            .conn
            .prepare("SELECT ep, seq FROM readings ORDER BY ep, seq")?;
        let rows = st.query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn reading_count(&self) -> Result<u64, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT count(*) FROM readings", [], |r| r.get::<_, i64>(0))?
            as u64)
    }

    /// Runs `f` in one write transaction; commits if it returns `Ok`.
    pub fn transaction<T>(
        &mut self,
        f: impl FnOnce(&Batch<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.shared_transaction(f)
    }

    /// `BEGIN IMMEDIATE`, tried a second time if the first waited the whole busy timeout in
    /// vain (nothing has run yet then, so trying again is safe).
    fn begin_immediate(&self) -> Result<rusqlite::Transaction<'_>, StoreError> {
        let begin = || {
            rusqlite::Transaction::new_unchecked(
                &self.conn,
                rusqlite::TransactionBehavior::Immediate,
            )
            .map_err(StoreError::from)
        };
        match begin() {
            Err(e) if e.is_busy() => {
                tracing::warn!(error = %e, "database busy for {BUSY_TIMEOUT:?}; trying once more");
                begin()
            }
            r => r,
        }
    }

    /// Like [`Store::transaction`] through a shared reference. The caller must not start a
    /// second transaction on the same store while this one runs (SQLite would refuse it).
    ///
    /// The transaction takes the write lock when it begins (`BEGIN IMMEDIATE`), waiting up to
    /// the busy timeout for another process (`sigil provision`, `sigil backup`) to finish. A
    /// deferred transaction would take it only at its first write, and in WAL mode an
    /// upgrade from a read snapshot that another connection has since committed past fails
    /// at once with SQLITE_BUSY, without waiting: a batch of honest readings would fail for
    /// an operator's `provision add`.
    pub fn shared_transaction<T>(
        &self,
        f: impl FnOnce(&Batch<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let r = (|| {
            let tx = self.begin_immediate()?;
            let out = f(&Batch { tx: &tx })?;
            tx.commit()?;
            Ok(out)
        })();
        self.after_transaction(&r);
        r
    }
}

fn query_readings(
    conn: &Connection,
    clause: &str,
    p: impl rusqlite::Params,
) -> Result<Vec<StoredReading>, StoreError> {
    let mut st = conn.prepare_cached(&format!(
        "SELECT seq, ep, topic, timestamp, content_format, raw, decoded, received_at, peer, message_id, protection FROM readings {clause}"
    ))?;
    let rows = st.query_map(p, |r| {
        let protection: String = r.get(10)?;
        let protection = Protection::parse(&protection).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                10,
                rusqlite::types::Type::Text,
                format!("unknown protection {protection:?}").into(),
            )
        })?;
        Ok(StoredReading {
            seq: r.get::<_, i64>(0)? as u64,
            ep: r.get(1)?,
            topic: r.get(2)?,
            timestamp: r.get(3)?,
            content_format: r.get::<_, i64>(4)? as u16,
            raw: r.get(5)?,
            decoded: r.get(6)?,
            received_at: r.get(7)?,
            peer: r.get(8)?,
            message_id: r.get::<_, Option<i64>>(9)?.map(|m| m as u16),
            protection,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn add_identity(
    conn: &Connection,
    id: &Identity,
    kind: IdentityKind,
    label: &str,
    now: i64,
) -> Result<bool, StoreError> {
    // A revoked row stays revoked: only `Store::reinstate_identity` re-activates it.
    let n = conn.execute(
        "INSERT INTO identities (identity, kind, label, added_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (identity) DO NOTHING",
        params![id.to_string(), kind.as_str(), label, now],
    )?;
    Ok(n > 0)
}

#[cfg(test)]
mod tests;
