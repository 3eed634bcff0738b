//! The budget of signature verifications done on behalf of datagrams nobody has authenticated
//! yet: a signed reading's COSE_Sign1 or JWS, a registration statement (`sq`/`ss`), an ES256
//! token posted to `/authz-info`. A P-256 verification costs some 330 µs, so a flood of forged
//! signatures with fresh numbers would otherwise buy a third of a core for every 1,000
//! datagrams a second. Every such verification is charged first, to a token bucket of its
//! source host ([`Host`]) and a total ([`RateBudget`]); the cheap refusals (a number at or
//! below the high-water mark, an unknown `kid`, a wrong audience, a revoked identity) come
//! before the charge in each path.
//!
//! Three pools keep an attacker with many addresses from starving honest devices:
//! - **proven** hosts, from which a signature verified before (an honest device's reading,
//!   statement or token). A verification that succeeds is given back to the pool, so honest
//!   traffic never empties it; only failures spend it. A proven host's failures are also
//!   charged to a small share of its own (`proven_failures`, per host and in total, far
//!   below the proven total's rate); a failure past that share moves the host back to the
//!   strangers (`verify.demoted`), so forgeries from spoofed addresses of proven devices
//!   spend those hosts' buckets and the strangers' pool, never the proven total the other
//!   proven hosts draw on.
//! - **strangers**, every other host; a success makes the host proven.
//! - **newcomers**: a stranger host not seen for `newcomer_after` may draw on a small reserve
//!   when the strangers' total is empty, so a new device's first registration gets through a
//!   flood from many hosts, each of which spends newcomer status once per `newcomer_after`.
//!
//! Over budget the request is refused (`verify.refused.host_budget`,
//! `verify.refused.total_budget`) with a small 5.03 and Max-Age ([`RETRY_AFTER_SECS`]), which
//! a device keeps and resends after; a Non-confirmable one gets nothing. The counters
//! `verify.performed` and `verify.failed` are the server's own account of what was spent.
//!
//! What many hosts can and cannot do (docs/security.md, "Signature verifications"): they can
//! spend the strangers' and the newcomers' totals, so a new device's first verification may
//! wait a few Max-Age periods; they cannot spend a proven host's bucket without spoofing that
//! host's own address (then that host is a stranger again after a few failures, and they
//! starve that host alone, for as long as they keep at it: the proven total stays out of
//! their reach), and in all they buy at most the failure share's, the strangers' and the
//! newcomers' totals of failed verifications.

use crate::budget::{Host, Over, RateBudget, Rates};
use crate::stats::Stats;
use sigil_time::Instant;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

/// Max-Age of the 5.03 a refused request gets: when the device should try again.
pub const RETRY_AFTER_SECS: u32 = 2;

/// The rates of the three pools and the bounds of the host tables.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VerifyRates {
    pub proven: Rates,
    /// The share of failures a proven host may have before it is a stranger again, per host
    /// and in all proven hosts; its total is kept well below `proven`'s rate, so failures
    /// can never empty what proven hosts' honest verifications draw on.
    pub proven_failures: Rates,
    pub strangers: Rates,
    pub newcomers: Rates,
    /// A stranger host not seen for this long is a newcomer again.
    pub newcomer_after: Duration,
    /// Most hosts remembered as proven (the least recently proven are forgotten first).
    pub max_proven: usize,
    /// Most stranger hosts remembered as seen; when it is full of recent ones, nobody is a
    /// newcomer until they age out.
    pub max_seen: usize,
}

impl Default for VerifyRates {
    /// Verifications from proven hosts: 100 a second a host, 400 in all (successes are given
    /// back); of which failures: 1 a second a host (bursts of 4), 50 in all. Failed
    /// verifications from strangers: 300 a second (4 a host), from newcomers 20 (2 a host):
    /// with the proven failures, under an eighth of a core in all for P-256.
    fn default() -> Self {
        Self {
            proven: Rates {
                total_per_second: 400.0,
                total_burst: 800.0,
                host_per_second: 100.0,
                host_burst: 200.0,
                max_hosts: 4096,
            },
            proven_failures: Rates {
                total_per_second: 50.0,
                total_burst: 100.0,
                host_per_second: 1.0,
                host_burst: 4.0,
                max_hosts: 4096,
            },
            strangers: Rates {
                total_per_second: 300.0,
                total_burst: 600.0,
                host_per_second: 4.0,
                host_burst: 16.0,
                max_hosts: 8192,
            },
            newcomers: Rates {
                total_per_second: 20.0,
                total_burst: 40.0,
                host_per_second: 2.0,
                host_burst: 4.0,
                max_hosts: 1024,
            },
            newcomer_after: Duration::from_secs(60),
            max_proven: 4096,
            max_seen: 16384,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pool {
    Proven,
    Strangers,
    Newcomers,
}

/// One verification charged: settle it with [`VerifyBudget::settle`].
#[derive(Clone, Copy, Debug)]
#[must_use]
pub struct Ticket {
    host: Host,
    pool: Pool,
}

/// The three pools and what they remember about hosts.
pub struct VerifyBudget {
    rates: VerifyRates,
    proven: RateBudget,
    proven_failures: RateBudget,
    strangers: RateBudget,
    newcomers: RateBudget,
    /// Proven hosts and when each last verified.
    proven_hosts: HashMap<Host, Instant>,
    /// Stranger hosts and when each was last charged.
    seen: HashMap<Host, Instant>,
    now: Instant,
    stats: Stats,
}

impl VerifyBudget {
    pub fn new(rates: VerifyRates, stats: Stats) -> Self {
        Self {
            rates,
            proven: RateBudget::new(rates.proven),
            proven_failures: RateBudget::new(rates.proven_failures),
            strangers: RateBudget::new(rates.strangers),
            newcomers: RateBudget::new(rates.newcomers),
            proven_hosts: HashMap::new(),
            seen: HashMap::new(),
            now: Instant::from_millis(0),
            stats,
        }
    }

    /// The time charges are made at (the caller's monotonic clock, set before each batch).
    pub fn set_now(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    /// Charges one verification for a datagram from `host`, or refuses it.
    pub fn charge(&mut self, host: Host) -> Result<Ticket, Over> {
        let now = self.now;
        if self.proven_hosts.contains_key(&host) {
            return self.proven.take(host, now).map(|()| Ticket {
                host,
                pool: Pool::Proven,
            });
        }
        let newcomer = self.newcomer(host, now);
        match self.strangers.take(host, now) {
            Ok(()) => Ok(Ticket {
                host,
                pool: Pool::Strangers,
            }),
            Err(Over::Total) if newcomer => {
                self.newcomers.take(host, now).map_err(|_| Over::Total)?;
                self.stats.incr("verify.newcomer");
                Ok(Ticket {
                    host,
                    pool: Pool::Newcomers,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Whether `host` was not charged as a stranger for `newcomer_after`; remembers it now.
    fn newcomer(&mut self, host: Host, now: Instant) -> bool {
        let after = self.rates.newcomer_after;
        if let Some(at) = self.seen.get_mut(&host) {
            let new = now.saturating_since(*at) >= after;
            *at = now;
            return new;
        }
        if self.seen.len() >= self.rates.max_seen {
            self.seen.retain(|_, at| now.saturating_since(*at) < after);
            crate::budget::shrink_if_sparse(&mut self.seen);
            if self.seen.len() >= self.rates.max_seen {
                return false;
            }
        }
        self.seen.insert(host, now);
        true
    }

    /// Records the outcome of a charged verification: a success is given back to its pool and
    /// makes its host proven; a failure stays spent, and a proven host's failure past its
    /// share makes it a stranger again.
    pub fn settle(&mut self, ticket: Ticket, verified: bool) {
        self.stats.incr("verify.performed");
        if !verified {
            self.stats.incr("verify.failed");
            if ticket.pool == Pool::Proven
                && self.proven_failures.take(ticket.host, self.now).is_err()
                && self.proven_hosts.remove(&ticket.host).is_some()
            {
                // A stranger again, and not a newcomer: seen now.
                self.seen.insert(ticket.host, self.now);
                self.stats.incr("verify.demoted");
            }
            return;
        }
        match ticket.pool {
            Pool::Proven => self.proven.give_back(ticket.host),
            Pool::Strangers => self.strangers.give_back(ticket.host),
            Pool::Newcomers => self.newcomers.give_back(ticket.host),
        }
        if !self.proven_hosts.contains_key(&ticket.host)
            && self.proven_hosts.len() >= self.rates.max_proven
        {
            if let Some(oldest) = self
                .proven_hosts
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(h, _)| *h)
            {
                self.proven_hosts.remove(&oldest);
            }
        }
        self.proven_hosts.insert(ticket.host, self.now);
        self.seen.remove(&ticket.host);
    }

    /// Publishes the gauges `verify.proven_hosts` and `verify.seen_hosts`.
    pub fn publish(&self, stats: &Stats) {
        stats.set("verify.proven_hosts", self.proven_hosts.len() as u64);
        stats.set("verify.seen_hosts", self.seen.len() as u64);
    }
}

/// A [`VerifyBudget`] shared by the verification threads.
pub struct SharedVerifyBudget(Mutex<VerifyBudget>);

impl SharedVerifyBudget {
    pub fn new(rates: VerifyRates, stats: Stats) -> Self {
        Self(Mutex::new(VerifyBudget::new(rates, stats)))
    }

    fn with<T>(&self, f: impl FnOnce(&mut VerifyBudget) -> T) -> T {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    pub fn set_now(&self, now: Instant) {
        self.with(|b| b.set_now(now));
    }

    pub fn publish(&self, stats: &Stats) {
        self.with(|b| b.publish(stats));
    }

    /// Counts a copy of a publication earlier in the same batch that took the first's
    /// result instead of a verification (`verify.skipped_copy`, [`crate::broker`]).
    pub fn skipped_copy(&self) {
        self.with(|b| b.stats.incr("verify.skipped_copy"));
    }

    /// Runs `verify` (a signature verification for a datagram from `peer`) if the budget
    /// allows, and settles it by `ok` of its result; `Err` without running it otherwise.
    pub fn run<T>(
        &self,
        peer: SocketAddr,
        verify: impl FnOnce() -> T,
        ok: impl FnOnce(&T) -> bool,
    ) -> Result<T, Over> {
        let ticket = self.with(|b| b.charge(Host::of(peer)))?;
        let result = verify();
        let verified = ok(&result);
        self.with(|b| b.settle(ticket, verified));
        Ok(result)
    }
}

/// The claims of an ES256 token (a COSE_Sign1, possibly CWT-tagged) read without verifying
/// its signature, for the cheap refusals that come before the verification; `None` for
/// anything else (an encrypted or MACed token costs no public-key operation).
pub fn unverified_sign1_payload(token: &[u8]) -> Option<&[u8]> {
    use sigil_objects::cbor::{Decoder, Item};
    const TAG_CWT: u64 = 61;
    const TAG_SIGN1: u64 = 18;
    let mut d = Decoder::new(token);
    let mut tag = match d.item().ok()? {
        Item::Tag(t) => t,
        _ => return None,
    };
    if tag == TAG_CWT {
        tag = match d.item().ok()? {
            Item::Tag(t) => t,
            _ => return None,
        };
    }
    if tag != TAG_SIGN1 || d.array().ok()? != 4 {
        return None;
    }
    d.bytes().ok()?;
    d.skip().ok()?;
    d.bytes().ok()
}

/// The cheap refusals of a token posted to `/authz-info`, from its claims read without its
/// signature (expired, not yet valid, for another audience, a subject not on the list); then
/// whether checking it costs a public-key verification (an ES256 token).
pub fn token_precheck(
    token: &[u8],
    now: sigil_time::UnixTime,
    audience: &str,
    authorized: impl Fn(&sigil_identity::Identity) -> bool,
) -> Result<bool, crate::authz::Refusal> {
    use crate::authz::Refusal;
    let Some(payload) = unverified_sign1_payload(token) else {
        return Ok(false);
    };
    let Ok(claims) = sigil_ace::token::Claims::parse(payload) else {
        // Malformed claims: the full check refuses it without a verification.
        return Ok(false);
    };
    let form = sigil_ace::token::TokenForm::Signed(sigil_crypto::SignatureAlgorithm::EcdsaP256);
    let t = sigil_ace::token::check(form, claims, now, audience).map_err(Refusal::Token)?;
    let subject = t
        .claims
        .sub
        .and_then(|s| sigil_identity::Identity::parse(s).ok());
    if !subject.is_some_and(|s| authorized(&s)) {
        return Err(Refusal::Revoked);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> Host {
        Host::of_ip(s.parse().unwrap())
    }

    fn small() -> VerifyRates {
        let r = |t: f64, h: f64| Rates {
            total_per_second: t,
            total_burst: t,
            host_per_second: h,
            host_burst: h,
            max_hosts: 1024,
        };
        VerifyRates {
            proven: r(10.0, 5.0),
            proven_failures: r(3.0, 1.0),
            strangers: r(8.0, 2.0),
            newcomers: r(2.0, 1.0),
            newcomer_after: Duration::from_secs(60),
            max_proven: 4,
            max_seen: 1024,
        }
    }

    #[test]
    fn failures_spend_successes_do_not_and_newcomers_have_a_reserve() {
        let mut b = VerifyBudget::new(small(), Stats::default());
        b.set_now(Instant::from_millis(1000));
        // An honest host verifies as often as it likes: every success is given back.
        for _ in 0..100 {
            let t = b.charge(host("10.0.0.1")).unwrap();
            b.settle(t, true);
        }
        // Four attacking hosts spend the strangers' total with failures.
        let mut refused = 0;
        for i in 0..40 {
            match b.charge(host(&format!("10.1.0.{}", i % 4 + 1))) {
                Ok(t) => b.settle(t, false),
                Err(_) => refused += 1,
            }
        }
        assert_eq!(refused, 32);
        // A newcomer still gets one from the reserve; the attackers are no newcomers.
        let t = b.charge(host("10.2.0.1")).expect("newcomer");
        b.settle(t, true);
        assert!(b.charge(host("10.1.0.1")).is_err());
        // The proven host is untouched by all of it.
        let t = b.charge(host("10.0.0.1")).unwrap();
        b.settle(t, true);
        assert_eq!(b.stats.get("verify.failed"), 8);
        assert_eq!(b.stats.get("verify.performed"), 110);
    }

    #[test]
    fn forgeries_from_proven_addresses_never_spend_the_other_proven_hosts() {
        let rates = VerifyRates {
            max_proven: 16,
            ..small()
        };
        let mut b = VerifyBudget::new(rates, Stats::default());
        b.set_now(Instant::from_millis(1000));
        // Six proven hosts.
        for i in 1..=6 {
            let t = b.charge(host(&format!("10.0.0.{i}"))).unwrap();
            b.settle(t, true);
        }
        // Forgeries from the addresses of four of them, as fast as the budget lets them.
        let mut failed = 0;
        for _ in 0..40 {
            for i in 1..=4 {
                if let Ok(t) = b.charge(host(&format!("10.0.0.{i}"))) {
                    b.settle(t, false);
                    failed += 1;
                }
            }
        }
        // Each spoofed host had a failure or so as proven, then was a stranger again (and no
        // newcomer); the strangers' pool took the rest.
        assert_eq!(b.stats.get("verify.demoted"), 4);
        assert!(failed <= 8 + 8, "{failed}");
        // The two other proven hosts verify as before, still proven.
        for _ in 0..20 {
            for i in 5..=6 {
                let t = b
                    .charge(host(&format!("10.0.0.{i}")))
                    .expect("proven host served");
                assert_eq!(t.pool, Pool::Proven);
                b.settle(t, true);
            }
        }
        assert_eq!(b.stats.get("verify.newcomer"), 0);
    }

    #[test]
    fn the_claims_of_a_signed_token_are_read_without_its_signature() {
        // 18([h'', {}, h'01', h'02'])
        let t = [0xd2, 0x84, 0x40, 0xa0, 0x41, 0x01, 0x41, 0x02];
        assert_eq!(unverified_sign1_payload(&t), Some(&[1u8][..]));
        assert_eq!(unverified_sign1_payload(&[0x84, 0x40]), None);
    }
}
