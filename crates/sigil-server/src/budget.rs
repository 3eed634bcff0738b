//! Byte budgets for the tables a peer can fill (deduplication cache, Block1 reassembly, DTLS
//! handshakes and sessions): every entry is charged its bytes against one source host's
//! share and the table's total, and refunded when it leaves. A charge that would pass either
//! cap is refused, so one host can never take the whole table, and the table can never grow
//! past its total. The counts are the server's own accounting, published as gauges
//! (`mem.<table>.bytes`, `.peak`, `.cap`) for tests, the soak and operators.
//!
//! A source host is an IPv4 address or an IPv6 /64 (one host usually owns a whole /64, so
//! counting single IPv6 addresses would give it 2^64 shares).
//!
//! Operations that cost CPU rather than memory (signatures, signature verifications) have
//! rate budgets instead ([`RateBudget`]): token buckets per source host and in total, in a
//! bounded table of hosts.

use crate::stats::Stats;
use sigil_time::Instant;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The unit a per-host share is counted in: an IPv4 address or an IPv6 /64 prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Host(IpAddr);

impl Host {
    pub fn of(addr: SocketAddr) -> Self {
        Self::of_ip(addr.ip())
    }

    /// The host as an address: the IPv4 address, or the IPv6 /64 with the rest zero.
    pub fn ip(&self) -> IpAddr {
        self.0
    }

    pub fn of_ip(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Host(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Host(IpAddr::V4(v4)),
                None => {
                    let s = v6.segments();
                    Host(IpAddr::V6(Ipv6Addr::new(
                        s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                    )))
                }
            },
        }
    }
}

/// Bookkeeping overhead charged per entry besides its own bytes: the hash-table slot, key
/// and order-queue entry, rounded up (what a `HashMap` plus `VecDeque` entry costs on a 64-bit
/// host).
pub const ENTRY_OVERHEAD: usize = 96;

/// Caps of one table, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub total: usize,
    pub per_host: usize,
}

/// Why a charge was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Over {
    /// The host already holds its share.
    Host,
    /// The table is full.
    Total,
}

/// The bytes one table holds, per host and in total, against its caps.
#[derive(Debug)]
pub struct ByteBudget {
    name: &'static str,
    caps: Caps,
    used: usize,
    peak: usize,
    per_host: HashMap<Host, usize>,
}

impl ByteBudget {
    /// `name` is the gauge prefix (`mem.<name>.*`).
    pub fn new(name: &'static str, caps: Caps) -> Self {
        Self {
            name,
            caps,
            used: 0,
            peak: 0,
            per_host: HashMap::new(),
        }
    }

    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Bytes held now, in total.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Most bytes ever held at once.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Bytes `host` holds now.
    pub fn held_by(&self, host: Host) -> usize {
        self.per_host.get(&host).copied().unwrap_or(0)
    }

    /// Hosts holding anything now.
    pub fn hosts(&self) -> usize {
        self.per_host.len()
    }

    /// Whether `bytes` more for `host` would fit, without charging.
    pub fn check(&self, host: Host, bytes: usize) -> Result<(), Over> {
        if self.held_by(host).saturating_add(bytes) > self.caps.per_host {
            return Err(Over::Host);
        }
        if self.used.saturating_add(bytes) > self.caps.total {
            return Err(Over::Total);
        }
        Ok(())
    }

    /// Charges `bytes` to `host`, or refuses without charging anything.
    pub fn charge(&mut self, host: Host, bytes: usize) -> Result<(), Over> {
        self.check(host, bytes)?;
        *self.per_host.entry(host).or_insert(0) += bytes;
        self.used += bytes;
        self.peak = self.peak.max(self.used);
        Ok(())
    }

    /// Returns `bytes` charged to `host` earlier. Refunding more than was charged is a bug in
    /// the caller; it is clamped (debug builds assert) so the accounting never underflows.
    pub fn refund(&mut self, host: Host, bytes: usize) {
        let held = self.per_host.get_mut(&host);
        debug_assert!(
            held.as_ref().is_some_and(|h| **h >= bytes),
            "{}: refund of {bytes} bytes more than {host:?} holds",
            self.name
        );
        if let Some(h) = held {
            let b = bytes.min(*h);
            *h -= b;
            self.used -= b.min(self.used);
            if *h == 0 {
                self.per_host.remove(&host);
                shrink_if_sparse(&mut self.per_host);
            }
        }
    }

    /// Publishes the gauges `mem.<name>.bytes`, `.peak` and `.cap` (and `.hosts`).
    pub fn publish(&self, stats: &Stats) {
        stats.set(&format!("mem.{}.bytes", self.name), self.used as u64);
        stats.set(&format!("mem.{}.peak", self.name), self.peak as u64);
        stats.set(&format!("mem.{}.cap", self.name), self.caps.total as u64);
        stats.set(
            &format!("mem.{}.hosts", self.name),
            self.per_host.len() as u64,
        );
    }
}

/// The rates of one [`RateBudget`]: a bucket of `burst` operations refilled at `per_second`,
/// per source host and in total.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    pub total_per_second: f64,
    pub total_burst: f64,
    pub host_per_second: f64,
    pub host_burst: f64,
    /// Most hosts with a bucket of their own at once; past it, a new host is refused until
    /// buckets refill and are forgotten.
    pub max_hosts: usize,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    level: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Self {
        Self {
            level: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant, rate: f64, burst: f64) {
        let dt = now.saturating_since(self.at).as_secs_f64();
        self.level = (self.level + dt * rate).min(burst);
        self.at = self.at.max(now);
    }
}

/// One token bucket of `burst` operations refilled at `per_second`, for a rate that is
/// nobody's in particular (how fast a full table gives way, [`crate::coap`]); starts full.
#[derive(Clone, Copy, Debug)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    bucket: Option<Bucket>,
}

impl TokenBucket {
    pub fn new(per_second: f64, burst: f64) -> Self {
        Self {
            per_second,
            burst,
            bucket: None,
        }
    }

    /// Takes one operation at `now`, if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        let b = self
            .bucket
            .get_or_insert_with(|| Bucket::full(self.burst, now));
        b.refill(now, self.per_second, self.burst);
        if b.level >= 1.0 {
            b.level -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Token buckets per source host and in total for an operation that costs CPU (a signature,
/// a signature verification): [`RateBudget::take`] takes one from the host's bucket and the
/// total, or neither. The table of hosts is bounded by `max_hosts`: hosts whose buckets are
/// full again are forgotten (they lose nothing) when a new one needs room. The buckets may be
/// kept per something other than a host (`K`): per device identity for signed 4.09s
/// ([`crate::answers`]).
#[derive(Debug)]
pub struct RateBudget<K = Host> {
    rates: Rates,
    total: Option<Bucket>,
    hosts: HashMap<K, Bucket>,
}

impl<K: std::hash::Hash + Eq + Copy> RateBudget<K> {
    pub fn new(rates: Rates) -> Self {
        Self {
            rates,
            total: None,
            hosts: HashMap::new(),
        }
    }

    pub fn rates(&self) -> Rates {
        self.rates
    }

    /// Hosts (keys) holding a bucket now.
    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    /// Takes one operation from `host`'s bucket and the total at `now`, or neither.
    pub fn take(&mut self, host: K, now: Instant) -> Result<(), Over> {
        let r = self.rates;
        let total = self
            .total
            .get_or_insert_with(|| Bucket::full(r.total_burst, now));
        total.refill(now, r.total_per_second, r.total_burst);
        if !self.hosts.contains_key(&host) && self.hosts.len() >= r.max_hosts {
            self.hosts.retain(|_, b| {
                b.refill(now, r.host_per_second, r.host_burst);
                b.level < r.host_burst
            });
            shrink_if_sparse(&mut self.hosts);
            if self.hosts.len() >= r.max_hosts {
                return Err(Over::Host);
            }
        }
        let bucket = self
            .hosts
            .entry(host)
            .or_insert_with(|| Bucket::full(r.host_burst, now));
        bucket.refill(now, r.host_per_second, r.host_burst);
        if bucket.level < 1.0 {
            return Err(Over::Host);
        }
        let total = self.total.as_mut().ok_or(Over::Total)?;
        if total.level < 1.0 {
            return Err(Over::Total);
        }
        bucket.level -= 1.0;
        total.level -= 1.0;
        Ok(())
    }

    /// Gives back one operation taken from `host` (one that turned out to cost nothing to
    /// anyone but its honest sender), up to the bursts.
    pub fn give_back(&mut self, host: K) {
        let r = self.rates;
        if let Some(b) = self.hosts.get_mut(&host) {
            b.level = (b.level + 1.0).min(r.host_burst);
        }
        if let Some(t) = self.total.as_mut() {
            t.level = (t.level + 1.0).min(r.total_burst);
        }
    }

    /// Forgets the buckets that are full again at `now` (their keys lose nothing: a new
    /// bucket starts full), so the table holds only keys that spent something lately.
    pub fn forget_full(&mut self, now: Instant) {
        let r = self.rates;
        self.hosts.retain(|_, b| {
            b.refill(now, r.host_per_second, r.host_burst);
            b.level < r.host_burst
        });
        shrink_if_sparse(&mut self.hosts);
    }
}

/// Gives a hash map's memory back once it holds far fewer entries than it has room for (a
/// `HashMap` keeps its largest allocation otherwise, so memory pinned by a flood would stay
/// after the flood's entries expire).
pub fn shrink_if_sparse<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// [`shrink_if_sparse`] for an order queue.
pub fn shrink_queue_if_sparse<T>(q: &mut std::collections::VecDeque<T>) {
    if q.capacity() > 64 && q.len() * 4 < q.capacity() {
        q.shrink_to(q.len() * 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> Host {
        Host::of_ip(s.parse().unwrap())
    }

    #[test]
    fn per_host_and_total_caps() {
        let mut b = ByteBudget::new(
            "t",
            Caps {
                total: 1000,
                per_host: 400,
            },
        );
        assert_eq!(b.charge(host("10.0.0.1"), 400), Ok(()));
        assert_eq!(b.charge(host("10.0.0.1"), 1), Err(Over::Host));
        assert_eq!(b.charge(host("10.0.0.2"), 400), Ok(()));
        assert_eq!(b.charge(host("10.0.0.3"), 201), Err(Over::Total));
        assert_eq!(b.charge(host("10.0.0.3"), 200), Ok(()));
        assert_eq!(b.used(), 1000);
        b.refund(host("10.0.0.1"), 400);
        assert_eq!(b.used(), 600);
        assert_eq!(b.held_by(host("10.0.0.1")), 0);
        assert_eq!(b.hosts(), 2);
        assert_eq!(b.peak(), 1000);
    }

    #[test]
    fn rate_budget_per_host_and_in_total() {
        let mut b = RateBudget::new(Rates {
            total_per_second: 10.0,
            total_burst: 5.0,
            host_per_second: 1.0,
            host_burst: 3.0,
            max_hosts: 2,
        });
        let t0 = Instant::from_millis(1000);
        for _ in 0..3 {
            assert_eq!(b.take(host("10.0.0.1"), t0), Ok(()));
        }
        assert_eq!(b.take(host("10.0.0.1"), t0), Err(Over::Host));
        b.give_back(host("10.0.0.1"));
        assert_eq!(b.take(host("10.0.0.1"), t0), Ok(()));
        assert_eq!(b.take(host("10.0.0.2"), t0), Ok(()));
        assert_eq!(b.take(host("10.0.0.2"), t0), Ok(()));
        assert_eq!(b.take(host("10.0.0.2"), t0), Err(Over::Total));
        assert_eq!(b.take(host("10.0.0.3"), t0), Err(Over::Host));
        let t2 = t0 + std::time::Duration::from_secs(10);
        assert_eq!(b.take(host("10.0.0.3"), t2), Ok(()));
        assert!(b.hosts() <= 2);
    }

    #[test]
    fn ipv6_hosts_are_slash_64() {
        assert_eq!(host("2001:db8:1:2::1"), host("2001:db8:1:2:ffff::9"));
        assert_ne!(host("2001:db8:1:2::1"), host("2001:db8:1:3::1"));
        assert_eq!(host("::ffff:10.0.0.1"), host("10.0.0.1"));
    }

    #[test]
    fn refunds_return_memory() {
        let mut m: HashMap<u32, [u8; 64]> = HashMap::new();
        for i in 0..100_000 {
            m.insert(i, [0; 64]);
        }
        let big = m.capacity();
        m.retain(|k, _| *k < 10);
        shrink_if_sparse(&mut m);
        assert!(m.capacity() < big / 100, "{} of {big}", m.capacity());
    }
}
