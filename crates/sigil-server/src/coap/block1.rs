//! Block1 reassembly (RFC 7959 §2.3) for the dispatcher: the transfers in progress, charged
//! to their host's share of the `block1` byte budget, and the give-way of a full table.

use super::{uncount, Assembly, Dispatcher, Endpoint, BLOCK1_MIN_CHARGE};
use crate::budget::{shrink_if_sparse, Host, Over, ENTRY_OVERHEAD};
use crate::context::Rejection;
use sigil_coap::blockwise::Reassembly;
use sigil_coap::{BlockOption, BlockwiseError};
use sigil_time::Instant;

impl Dispatcher {
    /// One Block1 block (RFC 7959 §2.3): `Ok(None)` while more are expected, the whole body
    /// after the last one.
    pub(super) fn reassemble(
        &mut self,
        key: (Endpoint, String),
        b1: BlockOption,
        part: &[u8],
        now: Instant,
    ) -> Result<Option<Vec<u8>>, Rejection> {
        let host = Host::of(key.0.addr);
        if b1.num == 0 {
            // A first block again starts the transfer over.
            self.drop_assembly(&key);
            let overhead = (ENTRY_OVERHEAD + key.1.len()).max(BLOCK1_MIN_CHARGE);
            // The cheap checks first: the host's share, then the peer's count.
            let over = self.block1_budget.check(host, overhead);
            if over == Err(Over::Host)
                || self.assemblies_of.get(&key.0).copied().unwrap_or(0)
                    >= self.config.max_assemblies_per_peer
            {
                self.count("coap.block1.refused");
                return Err(Rejection::TooManyTransfers);
            }
            // The table is full: the least recently active transfer of a host holding at
            // least as much as this one's would gives way (at a bounded rate).
            if over == Err(Over::Total) && !self.block1_give_way(host, overhead, now) {
                self.count("coap.block1.refused");
                self.count("coap.block1.refused_total");
                return Err(Rejection::TooManyTransfers);
            }
            if self.block1_budget.charge(host, overhead).is_err() {
                self.count("coap.block1.refused");
                return Err(Rejection::TooManyTransfers);
            }
            *self.assemblies_of.entry(key.0).or_insert(0) += 1;
            self.assemblies.insert(
                key.clone(),
                Assembly {
                    body: Vec::new(),
                    state: Reassembly::new(self.config.max_body),
                    at: now,
                    charged: overhead,
                },
            );
        }
        let Some(a) = self.assemblies.get_mut(&key) else {
            return Err(Rejection::Block1NotStarted);
        };
        // The message core's sequencing (in order, whole blocks before the last, within
        // `max_body`); the bytes and their charge stay here.
        if let Err(e) = a.state.accept(b1, part.len()) {
            self.drop_assembly(&key);
            return Err(match e {
                BlockwiseError::TooLarge => Rejection::BodyTooLarge,
                _ => Rejection::Block1OutOfSequence,
            });
        }
        // Charged what it holds beyond what it was charged already (the minimum covers the
        // first KiB or so).
        let holds = ENTRY_OVERHEAD + key.1.len() + a.state.received();
        let more = holds.saturating_sub(a.charged);
        // A full table gives way to a transfer going on as to a new one.
        if self.block1_budget.check(host, more) == Err(Over::Total) {
            self.block1_give_way(host, more, now);
        }
        if self.block1_budget.charge(host, more).is_err() {
            self.drop_assembly(&key);
            self.count("coap.block1.refused");
            return Err(Rejection::TooManyTransfers);
        }
        let Some(a) = self.assemblies.get_mut(&key) else {
            return Err(Rejection::Block1NotStarted);
        };
        a.charged += more;
        a.body.extend_from_slice(part);
        a.at = now;
        if b1.more {
            return Ok(None);
        }
        let body = self.assemblies.remove(&key).map(|a| {
            self.block1_budget.refund(host, a.charged);
            uncount(&mut self.assemblies_of, &key.0);
            a.body
        });
        shrink_if_sparse(&mut self.assemblies);
        Ok(body)
    }

    /// Makes room in a full Block1 table for `bytes` more from `host` (a first block, or a
    /// later one): the least recently active transfer of another host that holds at least as
    /// much as `host` would goes (`coap.block1.gave_way`), until it fits. Transfers that go on
    /// stay recent, so a flood of first blocks that never continue (from spoofed addresses
    /// too) pushes out its own kind first, not a kit's registration in progress. Each
    /// give-way spends one of `block1_give_way_per_sec` (a bucket of as many), checked before
    /// the scan of the table: a flood turns the table over no faster than that, and costs
    /// the server at most that many scans a second (`coap.block1.give_way_rate_limited`).
    pub(super) fn block1_give_way(&mut self, host: Host, bytes: usize, now: Instant) -> bool {
        let would = self.block1_budget.held_by(host).saturating_add(bytes);
        for _ in 0..8 {
            if self.block1_budget.check(host, bytes).is_ok() {
                return true;
            }
            if !self.block1_give_way_rate.take(now) {
                self.count("coap.block1.give_way_rate_limited");
                return false;
            }
            let budget = &self.block1_budget;
            let Some(key) = self
                .assemblies
                .iter()
                .filter(|((from, _), _)| {
                    let h = Host::of(from.addr);
                    h != host && budget.held_by(h) >= would
                })
                .min_by_key(|(_, a)| a.at)
                .map(|(k, _)| k.clone())
            else {
                return false;
            };
            self.drop_assembly(&key);
            self.count("coap.block1.gave_way");
        }
        self.block1_budget.check(host, bytes).is_ok()
    }

    /// Ends a Block1 transfer and refunds its bytes.
    pub(super) fn drop_assembly(&mut self, key: &(Endpoint, String)) {
        if let Some(a) = self.assemblies.remove(key) {
            self.block1_budget.refund(Host::of(key.0.addr), a.charged);
            uncount(&mut self.assemblies_of, &key.0);
        }
    }
}
