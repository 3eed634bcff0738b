//! The resumption cache (RFC 5246 §7.3): sessions a client may resume with an abbreviated
//! handshake, each charged to the host that made it.

use super::SecureLayer;
use crate::budget::{shrink_if_sparse, shrink_queue_if_sparse, Host, Over, ENTRY_OVERHEAD};
use sigil_dtls::Session;
use sigil_time::Instant;
use std::collections::HashMap;

/// A resumable session in the cache, with when it was made and the host it is charged to.
pub(super) struct Cached {
    session: Session,
    made: Instant,
    host: Host,
}

/// What one cached resumable session is charged: the [`Session`] (ID, master secret, peer),
/// its key and its place in the age queue, and the bookkeeping.
pub const RESUMPTION_BYTES: usize = 32 + size_of::<Cached>() + 32 + ENTRY_OVERHEAD;

impl SecureLayer {
    /// The cached session a ClientHello asks to resume, if it is there and young enough.
    pub(super) fn resumable(&self, requested: Option<&[u8; 32]>, now: Instant) -> Option<Session> {
        let lifetime = self.config.session_lifetime;
        requested
            .and_then(|id| self.cache.get(id))
            .filter(|c| now.saturating_since(c.made) < lifetime)
            .map(|c| c.session.clone())
    }

    /// Drops resumable sessions older than `session_lifetime`.
    pub(super) fn expire_resumable(&mut self, now: Instant) {
        let lifetime = self.config.session_lifetime;
        while let Some(id) = self.cache_order.front().copied() {
            match self.cache.get(&id) {
                Some(c) if now.saturating_since(c.made) < lifetime => break,
                _ => {
                    self.cache_order.pop_front();
                    self.forget_resumable(&id);
                }
            }
        }
        shrink_queue_if_sparse(&mut self.cache_order);
    }

    pub(super) fn forget_resumable(&mut self, id: &[u8; 32]) {
        self.carrier_resuming.remove(id);
        if let Some(c) = self.cache.remove(id) {
            self.cache_bytes.refund(c.host, RESUMPTION_BYTES);
            shrink_if_sparse(&mut self.cache);
        }
    }

    /// Whether the cached session `id` may be resumed and was made from `host`.
    pub(super) fn resumable_from(&self, id: &[u8; 32], host: Host, now: Instant) -> bool {
        self.cache.get(id).is_some_and(|c| {
            c.host == host && now.saturating_since(c.made) < self.config.session_lifetime
        })
    }

    /// Keeps a session for resumption, charged to `host`. Beyond the host's share its own
    /// oldest entry goes; beyond the total, the oldest entry of the host holding the most.
    pub(super) fn remember(&mut self, session: Session, host: Host, now: Instant) {
        let id = session.id;
        if self.cache.contains_key(&id) {
            // Session IDs are random 32 bytes; a repeat replaces the entry in place.
            self.forget_resumable(&id);
            self.cache_order.retain(|x| *x != id);
        }
        loop {
            match self.cache_bytes.check(host, RESUMPTION_BYTES) {
                Ok(()) => break,
                Err(Over::Host) => {
                    if !self.drop_oldest_resumable(Some(host)) {
                        return;
                    }
                }
                Err(Over::Total) => {
                    if !self.drop_oldest_resumable(None) {
                        return;
                    }
                }
            }
        }
        if self.cache_bytes.charge(host, RESUMPTION_BYTES).is_ok() {
            self.cache.insert(
                id,
                Cached {
                    session,
                    made: now,
                    host,
                },
            );
            self.cache_order.push_back(id);
        }
    }

    /// Drops the oldest resumable session of `host`, or (None) of the host holding the most.
    pub(super) fn drop_oldest_resumable(&mut self, host: Option<Host>) -> bool {
        let host = match host {
            Some(h) => h,
            None => {
                let mut by_host: HashMap<Host, usize> = HashMap::new();
                for c in self.cache.values() {
                    *by_host.entry(c.host).or_insert(0) += 1;
                }
                match by_host.into_iter().max_by_key(|(_, n)| *n) {
                    Some((h, _)) => h,
                    None => return false,
                }
            }
        };
        let cache = &self.cache;
        let Some(i) = self
            .cache_order
            .iter()
            .position(|id| cache.get(id).is_some_and(|c| c.host == host))
        else {
            return false;
        };
        if let Some(id) = self.cache_order.remove(i) {
            self.forget_resumable(&id);
            self.count("dtls.resumable_evicted");
        }
        true
    }
}
