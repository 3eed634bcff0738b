//! What one batch's transaction reads and writes: readings, registrations, high-water marks
//! (see [`crate::service`]: one transaction per batch, committed before any answer leaves).

use super::{
    add_identity, encode_keys, query_readings, IdentityKind, NewReading, Ownership, Registration,
    StoreError, StoredReading,
};
use rusqlite::{params, Transaction};
use sigil_identity::Identity;

/// Reads and writes inside one transaction (reads see the transaction's own writes).
pub struct Batch<'t> {
    pub(super) tx: &'t Transaction<'t>,
}

impl Batch<'_> {
    /// See [`super::Store::add_identity`].
    pub fn add_identity(
        &self,
        id: &Identity,
        kind: IdentityKind,
        label: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        add_identity(self.tx, id, kind, label, now)
    }

    pub fn reading(&self, ep: &Identity, seq: u64) -> Result<Option<StoredReading>, StoreError> {
        query_readings(
            self.tx,
            "WHERE ep = ?1 AND seq = ?2",
            params![ep.to_string(), seq as i64],
        )
        .map(|mut v| v.pop())
    }

    pub fn latest_reading(&self, ep: &Identity) -> Result<Option<StoredReading>, StoreError> {
        query_readings(
            self.tx,
            "WHERE ep = ?1 ORDER BY seq DESC LIMIT 1",
            params![ep.to_string()],
        )
        .map(|mut v| v.pop())
    }

    /// Readings of `ep` with `seq > after`, oldest first, at most `limit`.
    pub fn history(
        &self,
        ep: &Identity,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredReading>, StoreError> {
        query_readings(
            self.tx,
            "WHERE ep = ?1 AND seq > ?2 ORDER BY seq ASC LIMIT ?3",
            params![ep.to_string(), after as i64, limit],
        )
    }

    /// The newest `limit` readings of `ep`, oldest first.
    pub fn recent(&self, ep: &Identity, limit: u32) -> Result<Vec<StoredReading>, StoreError> {
        let mut v = query_readings(
            self.tx,
            "WHERE ep = ?1 ORDER BY seq DESC LIMIT ?2",
            params![ep.to_string(), limit],
        )?;
        v.reverse();
        Ok(v)
    }

    /// Creates or replaces the registration of `reg.ep`, keeping its id (so its location and
    /// topics stay the same across re-registrations). Returns the id.
    pub fn upsert_registration(&self, reg: &Registration) -> Result<i64, StoreError> {
        self.tx.execute(
            "INSERT INTO registrations (ep, authorized_by, alg, public_key, other_info, group_keys, base, lifetime, links, registered_at, updated_at, expires_at, owner)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12)
             ON CONFLICT (ep) DO UPDATE SET authorized_by = ?2, alg = ?3, public_key = ?4, other_info = ?5,
                 group_keys = ?6, base = ?7, lifetime = ?8, links = ?9, registered_at = ?10, updated_at = ?10, expires_at = ?11,
                 owner = ?12",
            params![
                reg.ep.to_string(),
                reg.authorized_by.to_string(),
                reg.key.map(|k| k.algorithm().cose()),
                reg.key.as_ref().map(|k| k.as_bytes()),
                reg.other_info,
                encode_keys(&reg.group_keys),
                reg.base,
                reg.lifetime,
                reg.links,
                reg.registered_at,
                reg.expires_at,
                reg.owner.as_str(),
            ],
        )?;
        Ok(self.tx.query_row(
            "SELECT id FROM registrations WHERE ep = ?1",
            params![reg.ep.to_string()],
            |r| r.get(0),
        )?)
    }

    pub fn update_registration(
        &self,
        id: i64,
        lifetime: u32,
        base: Option<&str>,
        now: i64,
        expires_at: i64,
        owner: Ownership,
    ) -> Result<(), StoreError> {
        self.tx.execute(
            "UPDATE registrations SET lifetime = ?2, base = COALESCE(?3, base), updated_at = ?4, expires_at = ?5, owner = ?6 WHERE id = ?1",
            params![id, lifetime, base, now, expires_at, owner.as_str()],
        )?;
        Ok(())
    }

    pub fn delete_registration(&self, id: i64) -> Result<(), StoreError> {
        self.tx
            .execute("DELETE FROM registrations WHERE id = ?1", params![id])?;
        Ok(())
    }

    pub fn set_highest(&self, ep: &Identity, highest: u64, now: i64) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "INSERT INTO freshness (ep, highest, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (ep) DO UPDATE SET highest = max(highest, ?2), updated_at = ?3",
            )?
            .execute(params![ep.to_string(), highest as i64, now])?;
        Ok(())
    }

    pub fn insert_reading(&self, r: &NewReading<'_>) -> Result<(), StoreError> {
        let mut st = self.tx.prepare_cached(
            "INSERT INTO readings (registration, ep, topic, seq, timestamp, content_format, raw, decoded, verified, received_at, peer, message_id, protection)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?13, ?9, ?10, ?11, ?12)",
        )?;
        st.execute(params![
            r.registration,
            r.ep.to_string(),
            r.topic,
            r.seq as i64,
            r.timestamp.map(|t| t as i64),
            r.content_format,
            r.raw,
            r.decoded,
            r.received_at,
            r.peer,
            r.message_id,
            r.protection.as_str(),
            // A session reading was checked by nobody but the session: not verified.
            r.protection != super::Protection::Session
        ])?;
        Ok(())
    }
}
