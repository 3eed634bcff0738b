//! Checks of an existing database file, made through a read-only connection before anything
//! writes to it: a file that is damaged, of another application, or of a schema version this
//! server does not know is refused and left exactly as it was.

use super::{StoreError, APPLICATION_ID, MIGRATIONS};
use rusqlite::Connection;
use std::path::Path;

/// The tables each schema version has (a Sigil database from before `application_id` was set
/// is recognised by them).
fn tables_of_version(version: i64) -> &'static [&'static str] {
    const V1: &[&str] = &["freshness", "identities", "readings", "registrations"];
    const V2: &[&str] = &[
        "dtls_psk",
        "freshness",
        "identities",
        "readings",
        "registrations",
        "server_key",
    ];
    const V4: &[&str] = &[
        "dtls_psk",
        "dtls_sessions",
        "freshness",
        "identities",
        "readings",
        "registrations",
        "server_key",
    ];
    const V5: &[&str] = &[
        "dtls_psk",
        "dtls_sessions",
        "freshness",
        "identities",
        "read_grants",
        "readings",
        "registrations",
        "server_key",
    ];
    const V7: &[&str] = &[
        "dtls_psk",
        "dtls_sessions",
        "freshness",
        "identities",
        "pairings",
        "read_grants",
        "readings",
        "registrations",
        "server_key",
    ];
    match version {
        1 => V1,
        // 3 adds a column, no table.
        2 | 3 => V2,
        4 => V4,
        // 6 rebuilds a table and adds a column.
        5 | 6 => V5,
        7 => V7,
        _ => &[],
    }
}

/// Inspects an existing file through a read-only connection, before anything writes to it.
/// Returns whether the Sigil `application_id` is still to be set (a fresh or older database).
pub(super) fn inspect(path: &Path) -> Result<bool, StoreError> {
    use rusqlite::OpenFlags;
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let app: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let mut st = conn.prepare(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
         ORDER BY name",
    )?;
    let tables = st
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    drop(st);
    let check: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
    if check != "ok" {
        return Err(StoreError::Damaged(format!(
            "quick_check: {}",
            check.replace('\n', " ")
        )));
    }
    if app != 0 && app != APPLICATION_ID {
        return Err(StoreError::Foreign(format!(
            "application_id is {app:#x}, not Sigil's {APPLICATION_ID:#x}"
        )));
    }
    let known = MIGRATIONS.len() as i64;
    if !(0..=known).contains(&version) {
        return Err(StoreError::SchemaUnknown {
            found: version,
            known,
        });
    }
    if app == APPLICATION_ID {
        return Ok(false);
    }
    let expected = tables_of_version(version);
    let other: Vec<&str> = tables
        .iter()
        .map(String::as_str)
        .filter(|t| !expected.contains(t))
        .collect();
    let missing: Vec<&str> = expected
        .iter()
        .copied()
        .filter(|t| !tables.iter().any(|x| x == t))
        .collect();
    if !missing.is_empty() {
        return Err(StoreError::Foreign(format!(
            "no table {} (schema version {version})",
            missing.join(", ")
        )));
    }
    if !other.is_empty() {
        return Err(StoreError::Foreign(format!(
            "other tables {} (schema version {version})",
            other.join(", ")
        )));
    }
    Ok(true)
}
