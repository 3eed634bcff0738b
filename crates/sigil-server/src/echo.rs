//! Amplification limit for coap:// (RFC 9175 §2.4): an answer to a request from an address
//! the server has not seen receive is at most [`AMPLIFICATION_FACTOR`] times the request's
//! datagram. A larger answer is replaced by 4.01 Unauthorized carrying an Echo option; a
//! client that repeats the request with that value has shown it receives at its address.
//!
//! Echo values are stateless: `t || HMAC-SHA256(secret, address || port || t)[..8]`, with `t`
//! the server's monotonic clock in seconds (4 bytes, big-endian) and `secret` drawn by the
//! caller at start. A value is accepted from the address and port it was issued to, for
//! [`ECHO_LIFETIME_S`]. Addresses that showed a valid value are remembered for as long in
//! [`Verified`], a budgeted table, so clients that send Echo only once (RFC 9175 leaves it to
//! them) still get large answers, such as the later blocks of a Block2 transfer.
//!
//! Requests over DTLS are exempt: the handshake's cookie already verified the address.

use crate::budget::{shrink_if_sparse, ByteBudget, Caps, Host, ENTRY_OVERHEAD};
use crate::stats::Stats;
use sigil_crypto::{CryptoProvider, RustCrypto};
use sigil_time::Instant;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// An answer to an unverified address is at most this many times the request (RFC 9175
/// §2.4, the factor QUIC uses too, RFC 9000 §8).
pub const AMPLIFICATION_FACTOR: usize = 3;

/// How long an Echo value is accepted, and an address stays verified, in seconds.
pub const ECHO_LIFETIME_S: u64 = 300;

/// Bytes of an Echo value: 4 of time, 8 of MAC.
pub const ECHO_LEN: usize = 12;

/// The server's Echo secret.
pub struct EchoKey {
    secret: [u8; 32],
}

impl EchoKey {
    pub fn new(secret: [u8; 32]) -> Self {
        Self { secret }
    }

    fn mac(&self, to: SocketAddr, t: [u8; 4]) -> [u8; 8] {
        let ip = match to.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        let full = RustCrypto.hmac_sha256(&self.secret, &[&ip, &to.port().to_be_bytes(), &t]);
        let mut m = [0u8; 8];
        m.copy_from_slice(&full[..8]);
        m
    }

    /// A fresh Echo value for `to` at `now`.
    pub fn issue(&self, to: SocketAddr, now: Instant) -> [u8; ECHO_LEN] {
        let t = u32::try_from(now.as_millis() / 1000)
            .unwrap_or(u32::MAX)
            .to_be_bytes();
        let mut v = [0u8; ECHO_LEN];
        v[..4].copy_from_slice(&t);
        v[4..].copy_from_slice(&self.mac(to, t));
        v
    }

    /// Whether `value` was issued to `from` by this server less than [`ECHO_LIFETIME_S`] ago.
    pub fn check(&self, from: SocketAddr, value: &[u8], now: Instant) -> bool {
        let Ok(v) = <[u8; ECHO_LEN]>::try_from(value) else {
            return false;
        };
        let t = [v[0], v[1], v[2], v[3]];
        let issued = u64::from(u32::from_be_bytes(t));
        let age = (now.as_millis() / 1000).checked_sub(issued);
        if age.is_none_or(|a| a >= ECHO_LIFETIME_S) {
            return false;
        }
        let want = self.mac(from, t);
        want.iter().zip(&v[4..]).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    }
}

/// Addresses (with port) that showed a valid Echo value, until when; each entry charged
/// [`ENTRY_OVERHEAD`] bytes to its host. When a host's share or the total is used up, a new
/// address is not remembered and its client must send Echo with each large request.
pub struct Verified {
    until: HashMap<SocketAddr, Instant>,
    budget: ByteBudget,
}

impl Verified {
    pub fn new(caps: Caps) -> Self {
        Self {
            until: HashMap::new(),
            budget: ByteBudget::new("verified", caps),
        }
    }

    pub fn contains(&self, addr: SocketAddr, now: Instant) -> bool {
        self.until.get(&addr).is_some_and(|u| now < *u)
    }

    /// Remembers `addr` as verified at `now`; false if its host's share or the table is full.
    pub fn insert(&mut self, addr: SocketAddr, now: Instant) -> bool {
        let until = now.saturating_add(std::time::Duration::from_secs(ECHO_LIFETIME_S));
        if let Some(u) = self.until.get_mut(&addr) {
            *u = until;
            return true;
        }
        if self.budget.charge(Host::of(addr), ENTRY_OVERHEAD).is_err() {
            return false;
        }
        self.until.insert(addr, until);
        true
    }

    /// Forgets addresses whose verification is older than [`ECHO_LIFETIME_S`].
    pub fn expire(&mut self, now: Instant) {
        let budget = &mut self.budget;
        self.until.retain(|addr, until| {
            let keep = now < *until;
            if !keep {
                budget.refund(Host::of(*addr), ENTRY_OVERHEAD);
            }
            keep
        });
        shrink_if_sparse(&mut self.until);
    }

    pub fn publish(&self, stats: &Stats) {
        self.budget.publish(stats);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Instant {
        Instant::from_millis(s * 1000)
    }

    #[test]
    fn echo_is_bound_to_address_port_and_time() {
        let k = EchoKey::new([7; 32]);
        let a: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let v = k.issue(a, at(100));
        assert!(k.check(a, &v, at(100)));
        assert!(k.check(a, &v, at(100 + ECHO_LIFETIME_S - 1)));
        assert!(!k.check(a, &v, at(100 + ECHO_LIFETIME_S)));
        assert!(!k.check(a, &v, at(99)), "from the future");
        assert!(!k.check("192.0.2.1:5001".parse().unwrap(), &v, at(100)));
        assert!(!k.check("192.0.2.2:5000".parse().unwrap(), &v, at(100)));
        assert!(!EchoKey::new([8; 32]).check(a, &v, at(100)));
        let mut bad = v;
        bad[11] ^= 1;
        assert!(!k.check(a, &bad, at(100)));
        assert!(!k.check(a, &v[..11], at(100)));
    }

    #[test]
    fn verified_addresses_are_budgeted_and_expire() {
        let mut v = Verified::new(Caps {
            total: 10 * ENTRY_OVERHEAD,
            per_host: 2 * ENTRY_OVERHEAD,
        });
        let p = |port| SocketAddr::from(([192, 0, 2, 1], port));
        assert!(v.insert(p(1), at(0)));
        assert!(v.insert(p(2), at(0)));
        assert!(!v.insert(p(3), at(0)), "over the host's share");
        assert!(v.insert(p(1), at(10)), "a refresh costs nothing");
        assert!(v.contains(p(2), at(ECHO_LIFETIME_S - 1)));
        v.expire(at(ECHO_LIFETIME_S));
        assert!(!v.contains(p(2), at(ECHO_LIFETIME_S)));
        assert!(v.contains(p(1), at(ECHO_LIFETIME_S)));
        assert_eq!(v.budget.used(), ENTRY_OVERHEAD);
    }
}
