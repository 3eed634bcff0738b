//! The dispatcher's dedup store: the message core's rules of RFC 7252 §4.5
//! ([`sigil_coap::exchange::dedup::Dedup`]: what is a duplicate, for how long, what is
//! answered again) over a table of the server's own, whose entries and the answers they keep
//! are charged to their host's share of the `dedup` byte budget, and which gives way when
//! full.

use crate::budget::{
    shrink_if_sparse, shrink_queue_if_sparse, ByteBudget, Caps, Host, Over, TokenBucket,
    ENTRY_OVERHEAD,
};
use crate::channel::Endpoint;
use crate::stats::Stats;
use sigil_coap::exchange::dedup::{DedupStore, NoRoom};
use sigil_time::Instant;
use std::collections::{HashMap, VecDeque};

/// Most dedup entries that give way to make room for one new entry or answer.
const DEDUP_GIVE_WAY: usize = 16;
/// How far into the oldest dedup entries a give-way looks for one to drop: few, so that a
/// host whose exchanges find nothing to push out (it holds as much as the others) costs the
/// server no more than a few lookups per datagram.
const DEDUP_GIVE_WAY_SCAN: usize = 64;

type Key = (Endpoint, u16);

/// A remembered exchange: `response` is `None` while the first copy is still being handled.
struct DedupEntry {
    response: Option<Vec<u8>>,
    until: Instant,
    /// Bytes charged to the sender's host: the entry's overhead and the answer.
    charged: usize,
}

/// The server's dedup table. Its [`DedupStore::Room`] is whether the sender is proven (over
/// a DTLS session, or from an address that answered Echo: it cannot be spoofed).
pub(super) struct DedupCache {
    map: HashMap<Key, DedupEntry>,
    /// Entries by expiry, oldest first (stale ones are skipped: an entry is the one in `map`
    /// only while its `until` matches).
    order: VecDeque<(Key, Instant)>,
    budget: ByteBudget,
    /// How fast a full table gives way (a second's worth at once).
    give_way_rate: TokenBucket,
    capacity: usize,
    stats: Stats,
}

impl DedupCache {
    pub(super) fn new(
        caps: Caps,
        capacity: usize,
        give_way_rate: TokenBucket,
        stats: Stats,
    ) -> Self {
        Self {
            map: HashMap::new(),
            order: VecDeque::new(),
            budget: ByteBudget::new("dedup", caps),
            give_way_rate,
            capacity,
            stats,
        }
    }

    /// Gives unused memory back and publishes the gauges (`mem.dedup.*`, and
    /// `mem.dedup.slots`, the map's allocated capacity).
    pub(super) fn publish(&mut self) {
        shrink_if_sparse(&mut self.map);
        shrink_queue_if_sparse(&mut self.order);
        self.budget.publish(&self.stats);
        self.stats
            .set("mem.dedup.slots", self.map.capacity() as u64);
    }

    /// Charges `bytes` of a dedup entry to `host` (for a new entry, `keep` is `None`, and the
    /// entry count is held to the table's capacity too). When the table, not the host's share,
    /// is what is full, an entry of the host holding the most among the
    /// [`DEDUP_GIVE_WAY_SCAN`] oldest answered entries gives way, if that host would still
    /// hold more than `host` (`coap.dedup.gave_way`): at most [`DEDUP_GIVE_WAY`] for one
    /// charge, and no faster in all than `dedup_give_way_per_sec` (a bucket of as many), so a
    /// flood, from spoofed addresses too, cannot push entries out before their time much
    /// faster than they expire. A `proven` sender is not held to that rate, so floods from
    /// spoofed addresses cannot spend what coaps:// devices need. `keep` (the exchange whose
    /// answer is being charged) and exchanges still in progress are passed over.
    fn room(
        &mut self,
        host: Host,
        bytes: usize,
        keep: Option<Key>,
        proven: bool,
        now: Instant,
    ) -> Result<(), NoRoom> {
        let mut evicted = 0;
        loop {
            let count_full = keep.is_none() && self.map.len() >= self.capacity;
            if !count_full {
                match self.budget.charge(host, bytes) {
                    Ok(()) => return Ok(()),
                    Err(Over::Host) => return Err(NoRoom::Peer),
                    Err(Over::Total) => {}
                }
            } else if self.budget.check(host, bytes) == Err(Over::Host) {
                return Err(NoRoom::Peer);
            }
            if evicted >= DEDUP_GIVE_WAY {
                return Err(NoRoom::Table);
            }
            self.drop_stale_order();
            let mine = self.budget.held_by(host).saturating_add(bytes);
            let mut victim: Option<(usize, usize)> = None;
            for (i, (k, until)) in self.order.iter().take(DEDUP_GIVE_WAY_SCAN).enumerate() {
                if Some(*k) == keep
                    || !self
                        .map
                        .get(k)
                        .is_some_and(|e| e.until == *until && e.response.is_some())
                {
                    continue;
                }
                let held = self.budget.held_by(Host::of(k.0.addr));
                if held > mine && victim.is_none_or(|(_, most)| held > most) {
                    victim = Some((i, held));
                }
            }
            let Some((i, _)) = victim else {
                return Err(NoRoom::Table);
            };
            if !proven && !self.give_way_rate.take(now) {
                self.stats.incr("coap.dedup.give_way_rate_limited");
                return Err(NoRoom::Table);
            }
            let Some((k, _)) = self.order.remove(i) else {
                return Err(NoRoom::Table);
            };
            if let Some(e) = self.map.remove(&k) {
                self.budget.refund(Host::of(k.0.addr), e.charged);
                self.stats.incr("coap.dedup.gave_way");
            }
            evicted += 1;
        }
    }

    /// Drops the order's entries whose exchange is no longer in the map (forgotten over a
    /// share, or given way): those at the front at once, all of them once they are more than
    /// the live ones, so a give-way's scan meets live entries.
    fn drop_stale_order(&mut self) {
        let map = &self.map;
        let live = |(k, until): &(Key, Instant)| map.get(k).is_some_and(|e| e.until == *until);
        while self.order.front().is_some_and(|e| !live(e)) {
            self.order.pop_front();
        }
        if self.order.len() > 2 * self.map.len() + 64 {
            self.order.retain(|e| live(e));
        }
    }
}

impl DedupStore<Endpoint> for DedupCache {
    type Room = bool;

    fn lookup(&self, peer: &Endpoint, mid: u16) -> Option<Option<&[u8]>> {
        self.map.get(&(*peer, mid)).map(|e| e.response.as_deref())
    }

    /// Over the host's share, the exchange is not remembered: a retransmission is handled
    /// again (readings are deduplicated by their sequence number anyway, docs/security.md).
    /// With the table full, the oldest entry of a host holding more than this one would gives
    /// way ([`DedupCache::room`]), so many hosts filling the total cannot keep a newcomer's
    /// exchanges from being remembered.
    fn insert(
        &mut self,
        peer: Endpoint,
        mid: u16,
        until: Instant,
        now: Instant,
        proven: bool,
    ) -> Result<(), NoRoom> {
        self.room(Host::of(peer.addr), ENTRY_OVERHEAD, None, proven, now)?;
        let key = (peer, mid);
        self.map.insert(
            key,
            DedupEntry {
                response: None,
                until,
                charged: ENTRY_OVERHEAD,
            },
        );
        self.order.push_back((key, until));
        Ok(())
    }

    /// Keeps `answer` for retransmissions, charged to the sender's host; over its share the
    /// exchange is forgotten instead (`coap.dedup.not_remembered`).
    fn keep_answer(
        &mut self,
        peer: &Endpoint,
        mid: u16,
        answer: &[u8],
        now: Instant,
        proven: bool,
    ) -> bool {
        let key = (*peer, mid);
        let host = Host::of(peer.addr);
        let Some(e) = self.map.get_mut(&key) else {
            return false;
        };
        let old = e.response.as_ref().map_or(0, Vec::len);
        self.budget.refund(host, old);
        e.charged -= old;
        if self
            .room(host, answer.len(), Some(key), proven, now)
            .is_ok()
        {
            let Some(e) = self.map.get_mut(&key) else {
                self.budget.refund(host, answer.len());
                return false;
            };
            e.charged += answer.len();
            e.response = Some(answer.to_vec());
            true
        } else {
            if let Some(e) = self.map.remove(&key) {
                self.budget.refund(host, e.charged);
                self.stats.incr("coap.dedup.not_remembered");
                // Its place in the order queue is stale now: the queue is kept within twice
                // the live entries.
                self.drop_stale_order();
            }
            false
        }
    }

    /// Forgets exchanges older than EXCHANGE_LIFETIME (RFC 7252 §4.8.2) and refunds them.
    fn expire(&mut self, now: Instant) {
        while let Some((key, until)) = self.order.front().copied() {
            if now < until {
                break;
            }
            self.order.pop_front();
            if self.map.get(&key).is_some_and(|e| e.until == until) {
                if let Some(e) = self.map.remove(&key) {
                    self.budget.refund(Host::of(key.0.addr), e.charged);
                }
            }
        }
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.order.front().map(|(_, until)| *until)
    }
}
