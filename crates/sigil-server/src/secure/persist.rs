//! Established sessions kept across restarts: a row per session (MACed under a key only this
//! server holds), its write sequence reserved ahead, its read mark stored once per batch
//! before what the batch delivered is acted on, and the rows restored when the server starts.

use super::trust::auth_of;
use super::trust::forget_claimed;
use super::{Peer, SecureLayer, CID_LEN, SESSION_BYTES};
use crate::budget::Host;
use crate::store::{DtlsSessionRow, Store};
use sigil_crypto::RustCrypto;
use sigil_dtls::{SavedAssociation, Traffic};
use sigil_time::{Instant, UnixTime};
use std::net::SocketAddr;

/// Records a session may seal per database write: the write sequence is reserved this far
/// ahead, so a restarted server skips at most this many numbers per session.
pub const SESSION_RESERVE_AHEAD: u64 = 256;

impl SecureLayer {
    /// Keeps established sessions in `store` from now on, and restores the ones it holds:
    /// each row's MAC must verify under this server's key, its peer must still be trusted
    /// (a revoked identity or replaced PSK does not come back), it must be younger than
    /// `session_lifetime` and fit the session table's budgets; every other row is deleted.
    /// A restored session gets a new write reservation before it seals anything. Returns how
    /// many were restored.
    pub fn restore_sessions(&mut self, store: Store, now: Instant, unix: UnixTime) -> usize {
        self.wall = unix;
        let rows = match store.dtls_sessions() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read stored DTLS sessions");
                Vec::new()
            }
        };
        self.next_row = rows.iter().map(|r| r.id).max().unwrap_or(0);
        self.saved = Some(store);
        let lifetime = i64::try_from(self.config.session_lifetime.as_secs()).unwrap_or(i64::MAX);
        let mut restored = 0;
        let mut rows = rows;
        rows.sort_by_key(|r| std::cmp::Reverse(r.saved_at));
        for row in rows {
            match self.restore_row(now, &row, lifetime) {
                Ok(()) => {
                    restored += 1;
                    self.count("dtls.session_restored");
                }
                Err(why) => {
                    self.forget_stored(row.id);
                    self.count("dtls.session_not_restored");
                    tracing::info!(addr = %row.addr, reason = why, "stored DTLS session not restored");
                }
            }
        }
        self.publish();
        restored
    }

    pub(super) fn restore_row(
        &mut self,
        now: Instant,
        row: &DtlsSessionRow,
        lifetime: i64,
    ) -> Result<(), &'static str> {
        if self.wall.as_secs().saturating_sub(row.saved_at) >= lifetime {
            return Err("expired");
        }
        let peer: SocketAddr = row.addr.parse().map_err(|_| "bad address")?;
        let saved = SavedAssociation::decode(&RustCrypto, &self.storage_key, &row.record)
            .map_err(|_| "record refused (MAC, version or field)")?;
        // A row without a read mark (stored by an older server) would restore the replay
        // window of its last save: records accepted since could be taken again. It is
        // dropped; its device handshakes anew.
        if saved.read_mark().is_none() {
            self.count("dtls.session_not_restored_no_read_mark");
            return Err("saved without a read mark (an older server's row)");
        }
        let trusted =
            saved.still_trusted(&RustCrypto, &self.trust, !self.config.require_client_auth);
        // The key check names the stored peer: not a handshake's claim.
        forget_claimed();
        if !trusted {
            return Err("peer no longer trusted");
        }
        if self.sessions.contains_key(&peer) {
            return Err("address taken");
        }
        let cid: Option<[u8; CID_LEN]> = saved.connection_id().try_into().ok();
        if cid.is_some_and(|c| self.by_cid.contains_key(&c)) {
            return Err("connection ID taken");
        }
        let host = Host::of(peer);
        let traffic = Traffic::restore(RustCrypto, saved);
        let auth = auth_of(&traffic, &self.trust);
        if self.trust.is_psk_node(auth.as_ref()) {
            return Err("a PSK-only node's session is not kept");
        }
        // The identity's cap holds across a restart too (the most recently saved first).
        if let Some(a) = &auth {
            let held = self
                .sessions
                .values()
                .filter(|p| {
                    p.auth
                        .as_ref()
                        .is_some_and(|b| b.identity() == a.identity())
                })
                .count();
            if held >= self.config.max_sessions_per_identity.max(1) {
                return Err("its identity holds its cap of sessions");
            }
        }
        if self.session_bytes.charge(host, SESSION_BYTES).is_err() {
            return Err("no room in the session table");
        }
        let mut p = Peer {
            conn: Box::new(traffic),
            host,
            cid,
            created: now,
            last_seen: now,
            progress: now,
            progressed: true,
            resuming: None,
            hello_random: [0; 32],
            auth,
            row: row.id,
            claimed: None,
            known: true,
            carrier_id: None,
        };
        if !self.save_session(now, peer, &mut p) {
            self.session_bytes.refund(host, SESSION_BYTES);
            return Err("cannot store a new reservation");
        }
        if let Some(c) = cid {
            self.by_cid.insert(c, peer);
        }
        self.sessions.insert(peer, p);
        Ok(())
    }

    /// Stores session `p` (at `peer`) with its write sequence reserved
    /// [`SESSION_RESERVE_AHEAD`] records ahead, and only then lets it seal up to that
    /// reservation. Without a database it is unbounded, as before. False when the write
    /// failed: the session must end (it cannot seal more without risking a reused nonce
    /// after a restart).
    pub(super) fn save_session(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        p: &mut Peer<Traffic<RustCrypto>>,
    ) -> bool {
        if self.saved.is_none() {
            return true;
        }
        // A PSK-only node's session readings carry no number of their own: only the session's
        // replay window keeps them fresh, and a window restored from a row saved some records
        // ago would take those records again. Its session is never stored (so never restored,
        // so never sealing under a reused nonce either): after a restart it handshakes anew.
        if self.trust.is_psk_node(p.auth.as_ref()) {
            return true;
        }
        let Some((saved, row)) = self.session_row(peer, p) else {
            return false;
        };
        let Some(store) = &self.saved else {
            return true;
        };
        match store.put_dtls_session(&row) {
            Ok(()) => {
                p.conn.persisted(&saved);
                self.count("dtls.session_saved");
                true
            }
            Err(e) => {
                self.count("dtls.session_save_failed");
                crate::limited!(self.log, Self::secs(now), "dtls.session_save_failed", warn, %peer, error = %e, "cannot store DTLS session: it ends");
                false
            }
        }
    }

    /// Persists the read mark of every session that accepted records above it since the last
    /// call (one row write per such session per batch): call after the batch's datagrams and
    /// before acting on what they delivered. Returns the peers whose mark could not be
    /// stored, and the addresses of sessions ended earlier in the batch by a failed save
    /// while their mark was due: those sessions are ended, and what they delivered there must
    /// be dropped (after a restart it could be taken again).
    pub fn persist_read_marks(&mut self, now: Instant) -> Vec<SocketAddr> {
        let due: Vec<SocketAddr> = std::mem::take(&mut self.marks_due)
            .into_iter()
            .filter(|a| {
                self.sessions
                    .get(a)
                    .is_some_and(|p| p.conn.core().read_mark_passed())
            })
            .collect();
        let mut failed = std::mem::take(&mut self.unmarked);
        let mut rows = Vec::new();
        for peer in due {
            match self
                .sessions
                .get(&peer)
                .and_then(|p| self.session_row(peer, p))
            {
                Some((saved, row)) => rows.push((peer, saved, row)),
                None => failed.push(peer),
            }
        }
        // One transaction (one sync) for the batch's rows.
        let written = match &self.saved {
            Some(store) if !rows.is_empty() => store.shared_transaction(|_| {
                for (_, _, row) in &rows {
                    store.put_dtls_session(row)?;
                }
                Ok(())
            }),
            _ => Ok(()),
        };
        match written {
            Ok(()) => {
                for (peer, saved, _) in rows {
                    if let Some(p) = self.sessions.get_mut(&peer) {
                        p.conn.persisted(&saved);
                    }
                    self.count("dtls.session_saved");
                    self.count("dtls.read_mark_saved");
                }
            }
            Err(e) => {
                self.count("dtls.session_save_failed");
                crate::limited!(self.log, Self::secs(now), "dtls.session_save_failed", warn, sessions = rows.len(), error = %e, "cannot store DTLS read marks: those sessions end");
                failed.extend(rows.into_iter().map(|(peer, _, _)| peer));
            }
        }
        for peer in &failed {
            if let Some(p) = self.sessions.remove(peer) {
                self.release_session(p);
            }
        }
        failed
    }

    /// Session `p`'s row (at `peer`) with its write sequence reserved
    /// [`SESSION_RESERVE_AHEAD`] records ahead and its read mark at the highest record taken,
    /// and the association to confirm once the row is stored. None if it cannot be encoded.
    pub(super) fn session_row(
        &self,
        peer: SocketAddr,
        p: &Peer<Traffic<RustCrypto>>,
    ) -> Option<(SavedAssociation, DtlsSessionRow)> {
        let saved = p.conn.save_marking_reads(SESSION_RESERVE_AHEAD, 0).ok()?;
        let mut buf = [0u8; sigil_dtls::saved::MAX_ENCODED_LEN];
        let n = saved
            .encode(&RustCrypto, &self.storage_key, &mut buf)
            .ok()?;
        let row = DtlsSessionRow {
            id: p.row,
            addr: peer.to_string(),
            identity: p
                .auth
                .as_ref()
                .map(|a| a.identity().to_string())
                .unwrap_or_default(),
            saved_at: self.wall.as_secs(),
            record: buf[..n].to_vec(),
        };
        Some((saved, row))
    }

    /// Deletes a session's row (the session ended, expired or was replaced).
    pub(super) fn forget_stored(&mut self, row: i64) {
        if row == 0 {
            return;
        }
        if let Some(store) = &self.saved {
            if let Err(e) = store.delete_dtls_session(row) {
                self.stats.incr("dtls.session_delete_failed");
                tracing::warn!(error = %e, "cannot delete a stored DTLS session");
            }
        }
    }
}
