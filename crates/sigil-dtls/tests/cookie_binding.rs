//! The stateless cookie's proof stands for one ClientHello: the one whose cookie was checked.
//! A server that passes another datagram with it (a mix-up in a caller's tables, say) gets a
//! refusal, not a connection for a ClientHello whose cookie nobody checked.

use sigil_crypto::{CryptoError, Rng, RustCrypto};
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, NoTrust, ServerCredentials, Stateless, Trust,
};
use sigil_time::Instant;

struct Counter(u8);
impl Rng for Counter {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        for b in buf {
            self.0 = self.0.wrapping_add(37);
            *b = self.0;
        }
        Ok(())
    }
}

struct Keys;
impl Trust for Keys {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"sensor-1").then(|| {
            key[..16].copy_from_slice(b"0123456789abcdef");
            16
        })
    }
}

/// A client's second ClientHello (with the cookie for `peer`).
fn second_hello(cookies: &CookieKey, peer: &[u8], seed: u8) -> Vec<u8> {
    let mut client = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut Counter(seed),
        Credentials::Psk {
            identity: b"sensor-1",
            key: b"0123456789abcdef",
        },
        Instant::ZERO,
    )
    .unwrap();
    let mut buf = [0u8; 2048];
    let n = client.poll_transmit(Instant::ZERO, &mut buf).unwrap();
    let mut out = [0u8; 512];
    let Stateless::HelloVerify(m) = cookies.respond(&RustCrypto, peer, &buf[..n], &mut out) else {
        panic!("expected a HelloVerifyRequest");
    };
    client.handle_datagram(Instant::ZERO, &out[..m]).unwrap();
    let n = client.poll_transmit(Instant::ZERO, &mut buf).unwrap();
    buf[..n].to_vec()
}

#[test]
fn a_cookie_proof_does_not_accept_another_client_hello() {
    let cookies = CookieKey::new([3; 32]);
    let a = second_hello(&cookies, b"[fe80::a]:5684", 1);
    let b = second_hello(&cookies, b"[fe80::b]:5684", 77);
    let mut out = [0u8; 512];
    let Stateless::Accept(proof_a) = cookies.respond(&RustCrypto, b"[fe80::a]:5684", &a, &mut out)
    else {
        panic!("a's cookie checks out");
    };
    let offer = ServerCredentials {
        psk: true,
        ..ServerCredentials::NONE
    };
    let r = Connection::accept(
        RustCrypto,
        Keys,
        Config::default(),
        &offer,
        &mut Counter(9),
        proof_a,
        &b,
        Instant::ZERO,
    );
    assert!(
        r.is_err(),
        "accepted a ClientHello with another's cookie proof"
    );
    // With its own datagram the proof works.
    let Stateless::Accept(proof_a) = cookies.respond(&RustCrypto, b"[fe80::a]:5684", &a, &mut out)
    else {
        panic!("a's cookie checks out");
    };
    assert!(Connection::accept(
        RustCrypto,
        Keys,
        Config::default(),
        &offer,
        &mut Counter(9),
        proof_a,
        &a,
        Instant::ZERO,
    )
    .is_ok());
}
