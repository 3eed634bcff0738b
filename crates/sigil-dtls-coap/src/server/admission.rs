//! Who may take a slot of the session table: the expiry of strangers' half-open handshakes
//! when the table is crowded, and which half-open handshake a newcomer may push out (see the
//! module documentation of [`super`]).

use super::{host_part, Endpoint, EVICTION_RESERVE};
use sigil_crypto::CryptoProvider;
use sigil_dtls::Trust;
use sigil_time::Instant;

impl<'a, C: CryptoProvider + Clone, T: Trust + Clone, const N: usize> Endpoint<'a, C, T, N> {
    /// With more than half the table in half-open handshakes, removes strangers' ones older
    /// than `crowded_handshake_timeout`.
    pub(super) fn expire_crowded(&mut self, now: Instant) {
        let half_open = self
            .sessions
            .iter()
            .flatten()
            .filter(|s| !s.established() && !s.handed_off())
            .count();
        if half_open * 2 <= N {
            return;
        }
        let shield = self.config.handshake_shield;
        let short = self
            .config
            .crowded_handshake_timeout
            .max(shield.saturating_add(shield / 3))
            .min(self.config.handshake_timeout);
        for slot in &mut self.sessions {
            let old = slot.as_ref().is_some_and(|s| {
                !s.established()
                    && !s.handed_off()
                    && !s.known
                    && now.saturating_since(s.progress) >= short
            });
            if old {
                *slot = None;
                self.counters.expired_crowded += 1;
            }
        }
    }

    /// The slot to push out for a newcomer from `host` when the table is full, and whether it
    /// goes by age (true) rather than by share (false): the oldest half-open handshake of the
    /// host holding the most, if that host holds more than `host` would with one more (so
    /// shares converge on equal ones); else, if `host` holds none or the newcomer is `known`,
    /// the oldest stranger's half-open handshake that is at least a quarter of
    /// `crowded_handshake_timeout` old.
    pub(super) fn eviction_for(
        &self,
        now: Instant,
        host: &[u8],
        known: bool,
    ) -> Option<(usize, bool)> {
        if let Some(slot) = self.eviction_by_share(host, now) {
            return Some((slot, false));
        }
        let prefix = self.config.host_prefix;
        let own = self
            .sessions
            .iter()
            .flatten()
            .filter(|s| !s.established() && !s.handed_off())
            .filter(|s| host_part(s.peer(), prefix) == host)
            .count();
        if own > 0 && !known {
            return None;
        }
        (0..N)
            .filter(|&i| self.evictable(i, now))
            .min_by_key(|&i| self.order(i))
            .map(|i| (i, true))
    }

    /// Whether slot `i` holds a stranger's half-open handshake without progress for
    /// `handshake_shield`: the only kind a newcomer may push out.
    pub(super) fn evictable(&self, i: usize, now: Instant) -> bool {
        self.sessions[i].as_ref().is_some_and(|s| {
            !s.established()
                && !s.handed_off()
                && !s.known
                && now.saturating_since(s.progress) >= self.config.handshake_shield
        })
    }

    /// The order evictable handshakes go in: those that never progressed first, then the
    /// longest without progress.
    pub(super) fn order(&self, i: usize) -> Option<(bool, Instant, Instant)> {
        self.sessions[i]
            .as_ref()
            .map(|s| (s.progressed, s.progress, s.created))
    }

    /// The slot of the oldest half-open handshake of the host holding the most, if that host
    /// holds more than `host` would with one more (so shares converge on equal ones).
    pub(super) fn eviction_by_share(&self, host: &[u8], now: Instant) -> Option<usize> {
        let prefix = self.config.host_prefix;
        let half_open = |i: usize| {
            self.sessions[i]
                .as_ref()
                .filter(|s| !s.established() && !s.handed_off())
        };
        let of_host =
            |i: usize, h: &[u8]| half_open(i).is_some_and(|s| host_part(s.peer(), prefix) == h);
        let held = |h: &[u8]| (0..N).filter(|&i| of_host(i, h)).count();
        let own = held(host);
        let (count, heaviest) = (0..N)
            .filter_map(|i| half_open(i).map(|s| (held(host_part(s.peer(), prefix)), i)))
            .max_by_key(|(count, _)| *count)?;
        if count <= own + 1 {
            return None;
        }
        let victim = host_part(self.sessions[heaviest].as_ref()?.peer(), prefix);
        (0..N)
            .filter(|&i| of_host(i, victim) && self.evictable(i, now))
            .min_by_key(|&i| self.order(i))
    }

    /// Whether the budget of evictions holds one at `now` (refilled first).
    pub(super) fn eviction_left(&mut self, now: Instant) -> bool {
        let at = *self.evictions_at.get_or_insert(now);
        let period = self.config.handshake_timeout.as_millis().max(1) as u64;
        let ms = now
            .saturating_since(at)
            .as_millis()
            .min(u128::from(u32::MAX)) as u64;
        let add = ms.saturating_mul(N as u64).saturating_mul(1000) / period;
        if add > 0 {
            self.evictions = (self.evictions + add).min(EVICTION_RESERVE * 1000);
            self.evictions_at = Some(now);
        }
        self.evictions >= 1000
    }
}
