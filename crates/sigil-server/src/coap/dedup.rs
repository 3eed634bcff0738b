//! The dedup cache (RFC 7252 §4.5) of the dispatcher: the answers kept for retransmitted
//! Confirmable requests, charged to their host's share of the `dedup` byte budget, and the
//! give-way of a full table.

use super::{Dispatcher, Endpoint, DEDUP_GIVE_WAY, DEDUP_GIVE_WAY_SCAN};
use crate::budget::Host;
use sigil_time::Instant;

impl Dispatcher {
    /// Charges `bytes` of a dedup entry to `host` (for a new entry, `keep` is `None`, and the
    /// entry count is held to `dedup_capacity` too). When the table, not the host's share, is
    /// what is full, an entry of the host holding the most among the
    /// [`DEDUP_GIVE_WAY_SCAN`] oldest answered entries gives way, if that host would still hold
    /// more than `host` (`coap.dedup.gave_way`): at most [`DEDUP_GIVE_WAY`] for one charge,
    /// and no faster in all than `dedup_give_way_per_sec` (a bucket of as many), so a flood,
    /// from spoofed addresses too, cannot push entries out before their time much faster
    /// than they expire. A `proven` sender (over a DTLS session, or from an address that
    /// answered Echo: it cannot be spoofed) is not held to that rate, so floods from spoofed
    /// addresses cannot spend what coaps:// devices need. `keep` (the exchange whose answer
    /// is being charged) and exchanges still in progress are passed over. False if no room
    /// was made: not remembered.
    pub(super) fn dedup_room(
        &mut self,
        host: Host,
        bytes: usize,
        keep: Option<(Endpoint, u16)>,
        proven: bool,
        now: Instant,
    ) -> bool {
        let mut evicted = 0;
        loop {
            let count_full = keep.is_none() && self.dedup.len() >= self.config.dedup_capacity;
            if !count_full {
                match self.dedup_budget.charge(host, bytes) {
                    Ok(()) => return true,
                    Err(crate::budget::Over::Host) => return false,
                    Err(crate::budget::Over::Total) => {}
                }
            } else if self.dedup_budget.check(host, bytes) == Err(crate::budget::Over::Host) {
                return false;
            }
            if evicted >= DEDUP_GIVE_WAY {
                return false;
            }
            self.drop_stale_dedup_order();
            let mine = self.dedup_budget.held_by(host).saturating_add(bytes);
            let mut victim: Option<(usize, usize)> = None;
            for (i, (k, at)) in self
                .dedup_order
                .iter()
                .take(DEDUP_GIVE_WAY_SCAN)
                .enumerate()
            {
                if Some(*k) == keep
                    || !self
                        .dedup
                        .get(k)
                        .is_some_and(|e| e.at == *at && e.response.is_some())
                {
                    continue;
                }
                let held = self.dedup_budget.held_by(Host::of(k.0.addr));
                if held > mine && victim.is_none_or(|(_, most)| held > most) {
                    victim = Some((i, held));
                }
            }
            let Some((i, _)) = victim else {
                return false;
            };
            if !proven && !self.give_way_rate.take(now) {
                self.count("coap.dedup.give_way_rate_limited");
                return false;
            }
            let Some((k, _)) = self.dedup_order.remove(i) else {
                return false;
            };
            if let Some(e) = self.dedup.remove(&k) {
                self.dedup_budget.refund(Host::of(k.0.addr), e.charged);
                self.count("coap.dedup.gave_way");
            }
            evicted += 1;
        }
    }

    /// Drops the dedup order's entries whose exchange is no longer in the cache (forgotten
    /// over a share, or given way): those at the front at once, all of them once they are
    /// more than the live ones, so a give-way's scan meets live entries.
    pub(super) fn drop_stale_dedup_order(&mut self) {
        let dedup = &self.dedup;
        let live = |(k, at): &((Endpoint, u16), Instant)| dedup.get(k).is_some_and(|e| e.at == *at);
        while self.dedup_order.front().is_some_and(|e| !live(e)) {
            self.dedup_order.pop_front();
        }
        if self.dedup_order.len() > 2 * self.dedup.len() + 64 {
            self.dedup_order.retain(|e| live(e));
        }
    }

    /// Keeps `answer` in the dedup entry of `key` for retransmissions, charged to the
    /// sender's host; over its share the exchange is forgotten instead.
    pub(super) fn remember(&mut self, key: (Endpoint, u16), answer: Option<Vec<u8>>, now: Instant) {
        let host = Host::of(key.0.addr);
        let Some(e) = self.dedup.get_mut(&key) else {
            return;
        };
        let old = e.response.as_ref().map_or(0, Vec::len);
        let new = answer.as_ref().map_or(0, Vec::len);
        self.dedup_budget.refund(host, old);
        e.charged -= old;
        let proven = key.0.is_protected() || self.verified.contains(key.0.addr, now);
        if self.dedup_room(host, new, Some(key), proven, now) {
            let Some(e) = self.dedup.get_mut(&key) else {
                self.dedup_budget.refund(host, new);
                return;
            };
            e.charged += new;
            e.response = answer;
        } else if let Some(e) = self.dedup.remove(&key) {
            self.dedup_budget.refund(host, e.charged);
            self.count("coap.dedup.not_remembered");
            // Its place in the order queue is stale now: the queue is kept within twice the
            // live entries.
            self.drop_stale_dedup_order();
        }
    }
}
