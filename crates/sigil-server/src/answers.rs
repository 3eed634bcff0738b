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
//! Signing costs CPU, so it has budgets ([`RateBudget`]: token buckets per source host
//! ([`Host`]) and in total), two of them: the answers that let a device register or update
//! (2.01, 2.04) have their own, and the 4.09 resynchronisations another, so replayed
//! publications (anyone can fetch a device's latest reading and send it again asking for a
//! signed answer) can never spend what registrations need. A 4.09 is signed only toward the
//! address the device last registered or published from (the broker decides,
//! [`crate::broker`]); from anywhere else it is the bare Reset. An answer over budget, one that
//! would pass the amplification limit with its signature, or one from a server without a key,
//! goes out unsigned and is counted (`answer.unsigned.*`); the device then treats it as no
//! answer. Over coaps:// nothing here applies: the session authenticates every answer.

use crate::budget::{Host, Over, RateBudget, Rates};
use crate::context::{Reply, Request, Response};
use crate::stats::Stats;
use sigil_coap::Code;
use sigil_crypto::{RustCrypto, SecretKey, Signature};
use sigil_identity::Identity;
use sigil_objects::answer::{Answer, RESYNC_CODE};
use sigil_time::Instant;

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
    /// The separate budget of signed 4.09 resynchronisations.
    pub resync: Rates,
}

impl AnswerRates {
    /// The budget of registrations' and updates' answers.
    pub fn answers(&self) -> Rates {
        Rates {
            total_per_second: self.total_per_second,
            total_burst: self.total_burst,
            host_per_second: self.host_per_second,
            host_burst: self.host_burst,
            max_hosts: self.max_hosts,
        }
    }
}

impl Default for AnswerRates {
    /// 200 signatures a second in all (bursts of 400), 20 a host (bursts of 40): a P-256
    /// signature costs some 30-60 µs, so the budget holds signing under a few percent of one
    /// core, while a host with a dozen sensors registering at once is served. 4.09s: 20 a
    /// second in all, 2 a host (a device needs one after its broker lost readings, rarely).
    fn default() -> Self {
        Self {
            total_per_second: 200.0,
            total_burst: 400.0,
            host_per_second: 20.0,
            host_burst: 40.0,
            max_hosts: 4096,
            resync: Rates {
                total_per_second: 20.0,
                total_burst: 40.0,
                host_per_second: 2.0,
                host_burst: 4.0,
                max_hosts: 1024,
            },
        }
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
    /// A 4.09: the source host's resynchronisation bucket is empty.
    ResyncHostBudget,
    /// A 4.09: the total resynchronisation bucket is empty.
    ResyncTotalBudget,
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
            Self::ResyncHostBudget => "answer.unsigned.resync_host_budget",
            Self::ResyncTotalBudget => "answer.unsigned.resync_total_budget",
            Self::TooLarge => "answer.unsigned.too_large",
            Self::Unrepresentable => "answer.unsigned.unrepresentable",
        }
    }
}

/// The server's answer key and its signing budget.
pub struct AnswerSigner {
    key: Option<SecretKey>,
    answers: RateBudget,
    resyncs: RateBudget,
}

impl AnswerSigner {
    pub fn new(rates: AnswerRates) -> Self {
        Self {
            key: None,
            answers: RateBudget::new(rates.answers()),
            resyncs: RateBudget::new(rates.resync),
        }
    }

    pub fn set_key(&mut self, key: SecretKey) {
        self.key = Some(key);
    }

    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// Takes one signature from `host`'s and the total budget at `now`, or neither: from the
    /// resynchronisations' budget for a 4.09 (`resync`), else from the answers'.
    pub fn take(&mut self, host: Host, now: Instant, resync: bool) -> Result<(), Unsigned> {
        if resync {
            return self.resyncs.take(host, now).map_err(|o| match o {
                Over::Host => Unsigned::ResyncHostBudget,
                Over::Total => Unsigned::ResyncTotalBudget,
            });
        }
        self.answers.take(host, now).map_err(|o| match o {
            Over::Host => Unsigned::HostBudget,
            Over::Total => Unsigned::TotalBudget,
        })
    }

    /// Signs `answer` with Location-Path `location` (the budget taken already).
    pub fn sign(&self, answer: &Answer<'_>, location: &[String]) -> Result<Signature, Unsigned> {
        let key = self.key.as_ref().ok_or(Unsigned::NoKey)?;
        answer
            .sign(&RustCrypto, key, location.iter().map(|s| s.as_bytes()))
            .map_err(|_| Unsigned::Unrepresentable)
    }

    /// Publishes `answer.hosts` and `answer.resync_hosts`, the hosts holding a bucket now.
    pub fn publish(&self, stats: &Stats) {
        stats.set("answer.hosts", self.answers.hosts() as u64);
        stats.set("answer.resync_hosts", self.resyncs.hosts() as u64);
    }
}

/// The answer to a replayed or out-of-window Confirmable publication of `device`: the bare
/// Reset of RFC 8387 §8.2, or, for a request asking for signed answers from the address the
/// device last used (`from_device_address`), a piggybacked 4.09 Conflict the message layer
/// signs for `device`.
pub(crate) fn resync(
    reply: Reply,
    req: &Request,
    device: Identity,
    from_device_address: bool,
) -> Reply {
    match reply {
        Reply::Reset if req.signed_answer && from_device_address => Reply::Response(Response {
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

    fn host(s: &str) -> Host {
        Host::of_ip(s.parse().unwrap())
    }

    #[test]
    fn resyncs_never_spend_the_answers_budget() {
        let mut s = AnswerSigner::new(AnswerRates::default());
        let t0 = Instant::from_millis(1000);
        let r = AnswerRates::default().resync;
        let mut signed = 0;
        for i in 0..400u32 {
            let h = host(&format!("10.0.{}.{}", i / 256, i % 256));
            if s.take(h, t0, true).is_ok() {
                signed += 1;
            }
        }
        assert_eq!(signed, r.total_burst as u32);
        assert_eq!(
            s.take(host("10.9.9.9"), t0, true),
            Err(Unsigned::ResyncTotalBudget)
        );
        // Registrations' answers still have their whole budget.
        assert_eq!(s.take(host("10.9.9.9"), t0, false), Ok(()));
    }
}
