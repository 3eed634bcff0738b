//! Signed answers on plain coap:// (RFC 8387 §4.1, `sigil_objects::answer`): a device that
//! trusts this server and has no DTLS session asks, with an elective option, for the answers
//! that change its state to be signed by the server's long-term key (the `dtls` key of the
//! database, the one pairing messages and tokens are signed with). The handlers name the
//! device an answer is for ([`crate::Response::answer_for`]) once they have authenticated it:
//! a registration's 2.01 and an update's 2.04 after its statement verified, and the
//! resynchronisation of a Confirmable publication whose signed reading is replayed or out of
//! window, which such a device gets as a piggybacked 4.09 Conflict instead of the bare Reset
//! ([`resync`]). The message layer ([`crate::coap`]) signs over the request it answers.
//!
//! Signing costs CPU, so it has a budget: token buckets per source host ([`Host`]) and in
//! total. An answer over budget, one that would pass the amplification limit with its
//! signature, or one from a server without a key, goes out unsigned and is counted
//! (`answer.unsigned.*`); the device then treats it as no answer. Over coaps:// nothing here
//! applies: the session authenticates every answer.

use crate::budget::{shrink_if_sparse, Host};
use crate::context::{Reply, Request, Response};
use crate::stats::Stats;
use sigil_coap::Code;
use sigil_crypto::{RustCrypto, SecretKey, Signature};
use sigil_identity::Identity;
use sigil_objects::answer::{Answer, RESYNC_CODE};
use sigil_time::Instant;
use std::collections::HashMap;

/// Signature rates: a bucket of `burst` signatures refilled at `per_second`, per source host
/// and in total.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AnswerRates {
    pub total_per_second: f64,
    pub total_burst: f64,
    pub host_per_second: f64,
    pub host_burst: f64,
    /// Most hosts with a bucket of their own at once; past it, a new host's answers go
    /// unsigned until buckets refill and are forgotten.
    pub max_hosts: usize,
}

impl Default for AnswerRates {
    /// 200 signatures a second in all (bursts of 400), 20 a host (bursts of 40): a P-256
    /// signature costs some 30-60 µs, so the budget holds signing under a few percent of one
    /// core, while a host with a dozen sensors registering at once is served.
    fn default() -> Self {
        Self {
            total_per_second: 200.0,
            total_burst: 400.0,
            host_per_second: 20.0,
            host_burst: 40.0,
            max_hosts: 4096,
        }
    }
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
        self.at = now;
    }
}

/// Why an answer went out unsigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsigned {
    /// The server has no signing key.
    NoKey,
    /// The source host's bucket is empty.
    HostBudget,
    /// The total bucket is empty.
    TotalBudget,
    /// With the signature, the answer would pass the amplification limit.
    TooLarge,
    /// The token or Location-Path does not fit a statement.
    Unrepresentable,
}

impl Unsigned {
    pub const fn counter(self) -> &'static str {
        match self {
            Self::NoKey => "answer.unsigned.no_key",
            Self::HostBudget => "answer.unsigned.host_budget",
            Self::TotalBudget => "answer.unsigned.total_budget",
            Self::TooLarge => "answer.unsigned.too_large",
            Self::Unrepresentable => "answer.unsigned.unrepresentable",
        }
    }
}

/// The server's answer key and its signing budget.
pub struct AnswerSigner {
    key: Option<SecretKey>,
    rates: AnswerRates,
    total: Option<Bucket>,
    hosts: HashMap<Host, Bucket>,
}

impl AnswerSigner {
    pub fn new(rates: AnswerRates) -> Self {
        Self {
            key: None,
            rates,
            total: None,
            hosts: HashMap::new(),
        }
    }

    pub fn set_key(&mut self, key: SecretKey) {
        self.key = Some(key);
    }

    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// Takes one signature from `host`'s and the total budget at `now`, or neither.
    pub fn take(&mut self, host: Host, now: Instant) -> Result<(), Unsigned> {
        let r = self.rates;
        let total = self
            .total
            .get_or_insert_with(|| Bucket::full(r.total_burst, now));
        total.refill(now, r.total_per_second, r.total_burst);
        if !self.hosts.contains_key(&host) && self.hosts.len() >= r.max_hosts {
            // Forget the hosts whose buckets are full again: they lose nothing.
            self.hosts.retain(|_, b| {
                b.refill(now, r.host_per_second, r.host_burst);
                b.level < r.host_burst
            });
            shrink_if_sparse(&mut self.hosts);
            if self.hosts.len() >= r.max_hosts {
                return Err(Unsigned::HostBudget);
            }
        }
        let bucket = self
            .hosts
            .entry(host)
            .or_insert_with(|| Bucket::full(r.host_burst, now));
        bucket.refill(now, r.host_per_second, r.host_burst);
        if bucket.level < 1.0 {
            return Err(Unsigned::HostBudget);
        }
        let total = self.total.as_mut().ok_or(Unsigned::TotalBudget)?;
        if total.level < 1.0 {
            return Err(Unsigned::TotalBudget);
        }
        bucket.level -= 1.0;
        total.level -= 1.0;
        Ok(())
    }

    /// Signs `answer` with Location-Path `location` (the budget taken already).
    pub fn sign(&self, answer: &Answer<'_>, location: &[String]) -> Result<Signature, Unsigned> {
        let key = self.key.as_ref().ok_or(Unsigned::NoKey)?;
        answer
            .sign(&RustCrypto, key, location.iter().map(|s| s.as_bytes()))
            .map_err(|_| Unsigned::Unrepresentable)
    }

    /// Publishes `answer.hosts`, the hosts holding a bucket now.
    pub fn publish(&self, stats: &Stats) {
        stats.set("answer.hosts", self.hosts.len() as u64);
    }
}

/// The answer to a replayed or out-of-window Confirmable publication of `device`: the bare
/// Reset of RFC 8387 §8.2, or, for a request asking for signed answers, a piggybacked 4.09
/// Conflict the message layer signs for `device`.
pub(crate) fn resync(reply: Reply, req: &Request, device: Identity) -> Reply {
    match reply {
        Reply::Reset if req.signed_answer => Reply::Response(Response {
            code: Code(RESYNC_CODE),
            answer_for: Some(device),
            ..Default::default()
        }),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn host(s: &str) -> Host {
        Host::of_ip(s.parse().unwrap())
    }

    #[test]
    fn buckets_per_host_and_in_total() {
        let mut s = AnswerSigner::new(AnswerRates {
            total_per_second: 10.0,
            total_burst: 5.0,
            host_per_second: 1.0,
            host_burst: 3.0,
            max_hosts: 2,
        });
        let t0 = Instant::from_millis(1000);
        for _ in 0..3 {
            assert_eq!(s.take(host("10.0.0.1"), t0), Ok(()));
        }
        assert_eq!(s.take(host("10.0.0.1"), t0), Err(Unsigned::HostBudget));
        assert_eq!(s.take(host("10.0.0.2"), t0), Ok(()));
        assert_eq!(s.take(host("10.0.0.2"), t0), Ok(()));
        assert_eq!(s.take(host("10.0.0.2"), t0), Err(Unsigned::TotalBudget));
        // A third host while two hold non-full buckets: refused.
        assert_eq!(s.take(host("10.0.0.3"), t0), Err(Unsigned::HostBudget));
        // A second later: one more each, and the total refilled.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(s.take(host("10.0.0.1"), t1), Ok(()));
        assert_eq!(s.take(host("10.0.0.1"), t1), Err(Unsigned::HostBudget));
        // Once the buckets are full again, their hosts are forgotten and others get one.
        let t2 = t0 + Duration::from_secs(10);
        assert_eq!(s.take(host("10.0.0.3"), t2), Ok(()));
        assert!(s.hosts.len() <= 2);
    }
}
