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
//! [`crate::broker`]); from anywhere else it is the bare Reset. Its budget is kept per device
//! (the identity the 4.09 is for) and in total, not per host: spoofing the last-used
//! addresses of many devices spends only those devices' buckets, and another device that
//! really lost its state still gets its 4.09 signed. The total is a safety net, ten times what
//! ten such devices can spend. An answer over budget, one that
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
    /// The separate budget of signed 4.09 resynchronisations: `host_*` are per device (the
    /// identity the 4.09 is for), `max_hosts` the most devices holding a bucket at once.
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
    /// core, while a host with a dozen sensors registering at once is served. 4.09s: 2 a
    /// second a device, bursts of 4 (a device needs one after it lost its state, rarely), and
    /// 200 a second in all as a safety net.
    fn default() -> Self {
        Self {
            total_per_second: 200.0,
            total_burst: 400.0,
            host_per_second: 20.0,
            host_burst: 40.0,
            max_hosts: 4096,
            resync: Rates {
                total_per_second: 200.0,
                total_burst: 400.0,
                host_per_second: 2.0,
                host_burst: 4.0,
                max_hosts: 4096,
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
    /// A 4.09: the device's resynchronisation bucket is empty.
    ResyncDeviceBudget,
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
            Self::ResyncDeviceBudget => "answer.unsigned.resync_device_budget",
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
    /// Per device: a device's bucket is forgotten once full again, so the table holds only
    /// devices (registered ones: a 4.09 names a registration's device) that got a 4.09 in
    /// the last seconds, and a device removed from the list leaves it as its bucket refills.
    resyncs: RateBudget<Identity>,
    /// When full resynchronisation buckets were last forgotten.
    resyncs_pruned: Instant,
}

impl AnswerSigner {
    pub fn new(rates: AnswerRates) -> Self {
        Self {
            key: None,
            answers: RateBudget::new(rates.answers()),
            resyncs: RateBudget::new(rates.resync),
            resyncs_pruned: Instant::from_millis(0),
        }
    }

    pub fn set_key(&mut self, key: SecretKey) {
        self.key = Some(key);
    }

    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// Takes one signature from the budget at `now`, or none: for a 4.09 (`resync`) from
    /// `device`'s bucket and the resynchronisations' total, else from `host`'s and the
    /// answers' total.
    pub fn take(
        &mut self,
        host: Host,
        device: &Identity,
        now: Instant,
        resync: bool,
    ) -> Result<(), Unsigned> {
        if resync {
            if now.saturating_since(self.resyncs_pruned) >= std::time::Duration::from_secs(1) {
                self.resyncs.forget_full(now);
                self.resyncs_pruned = now;
            }
            return self.resyncs.take(*device, now).map_err(|o| match o {
                Over::Host => Unsigned::ResyncDeviceBudget,
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

    /// Publishes `answer.hosts`, the hosts holding a bucket now, and
    /// `answer.resync_devices`, the devices holding a 4.09 bucket.
    pub fn publish(&self, stats: &Stats) {
        stats.set("answer.hosts", self.answers.hosts() as u64);
        stats.set("answer.resync_devices", self.resyncs.hosts() as u64);
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

    fn device(n: u8) -> Identity {
        Identity::from_bytes([n; 16])
    }

    #[test]
    fn resyncs_never_spend_the_answers_budget() {
        let mut s = AnswerSigner::new(AnswerRates::default());
        let t0 = Instant::from_millis(1000);
        let r = AnswerRates::default().resync;
        let mut signed = 0;
        for i in 0..400u32 {
            let h = host(&format!("10.0.{}.{}", i / 256, i % 256));
            for _ in 0..2 {
                if s.take(h, &device((i % 250) as u8), t0, true).is_ok() {
                    signed += 1;
                }
            }
        }
        assert_eq!(signed, r.total_burst as u32);
        assert_eq!(
            s.take(host("10.9.9.9"), &device(251), t0, true),
            Err(Unsigned::ResyncTotalBudget)
        );
        // Registrations' answers still have their whole budget.
        assert_eq!(s.take(host("10.9.9.9"), &device(251), t0, false), Ok(()));
    }

    #[test]
    fn a_devices_4_09s_are_its_own_whatever_the_address() {
        let mut s = AnswerSigner::new(AnswerRates::default());
        let r = AnswerRates::default().resync;
        // Ten devices' last-used addresses spoofed, a hundred 4.09s a second asked for each,
        // for ten seconds: each device's bucket gives its burst and its rate, no more.
        for ms in (1000..11_000).step_by(100) {
            let t = Instant::from_millis(ms);
            for d in 0..10u8 {
                let h = host(&format!("10.0.0.{}", d + 1));
                for _ in 0..10 {
                    let _ = s.take(h, &device(d), t, true);
                }
            }
        }
        let t = Instant::from_millis(10_900);
        assert_eq!(
            s.take(host("10.0.0.1"), &device(0), t, true),
            Err(Unsigned::ResyncDeviceBudget)
        );
        // Another device that lost its state, even behind a spoofed device's host, gets its
        // 4.09s signed: the total is far from empty.
        for _ in 0..r.host_burst as u32 {
            assert_eq!(s.take(host("10.0.0.1"), &device(99), t, true), Ok(()));
        }
        // Buckets full again are forgotten: only devices that spent lately are held.
        let later = Instant::from_millis(20_000);
        let _ = s.take(host("10.0.0.1"), &device(99), later, true);
        assert_eq!(s.resyncs.hosts(), 1);
    }
}
