//! The stateless cookie's proof stands for one ClientHello: the one whose cookie was checked.
//! A server that passes another datagram with it (a mix-up in a caller's tables, say) gets a
//! refusal, not a connection for a ClientHello whose cookie nobody checked.

use sigil_crypto::RustCrypto;
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, NoTrust, ServerCredentials, Stateless,
};
use sigil_testkit::dtls::SENSOR_PSK;
use sigil_testkit::Counter;
use sigil_time::Instant;

/// A client's second ClientHello (with the cookie for `peer`).
fn second_hello(cookies: &CookieKey, peer: &[u8], seed: u8) -> Vec<u8> {
    let mut client = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut Counter::new(seed, 37),
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
        SENSOR_PSK,
        Config::default(),
        &offer,
        &mut Counter::new(9, 37),
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
        SENSOR_PSK,
        Config::default(),
        &offer,
        &mut Counter::new(9, 37),
        proof_a,
        &a,
        Instant::ZERO,
    )
    .is_ok());
}

#[test]
fn a_cookie_survives_one_rotation_of_the_secret_and_not_two() {
    let peer = b"[fe80::a]:5684";
    let mut cookies = CookieKey::new([3; 32]);
    let hello = second_hello(&cookies, peer, 1);
    let mut out = [0u8; 512];
    assert!(matches!(
        cookies.respond(&RustCrypto, peer, &hello, &mut out),
        Stateless::Accept(_)
    ));
    // A client between its two ClientHellos when the secret turns is not refused.
    cookies.rotate_derived(&RustCrypto);
    assert!(matches!(
        cookies.respond(&RustCrypto, peer, &hello, &mut out),
        Stateless::Accept(_)
    ));
    // A cookie seen on the wire is worth nothing after the next turn: a new
    // HelloVerifyRequest instead.
    cookies.rotate(*b"another secret of thirty-two b!!");
    assert!(matches!(
        cookies.respond(&RustCrypto, peer, &hello, &mut out),
        Stateless::HelloVerify(_)
    ));
    // The secret the derivation gave is not the one it came from.
    let mut a = CookieKey::new([3; 32]);
    a.rotate_derived(&RustCrypto);
    a.rotate_derived(&RustCrypto);
    let fresh = second_hello(&a, peer, 2);
    assert!(matches!(
        CookieKey::new([3; 32]).respond(&RustCrypto, peer, &fresh, &mut out),
        Stateless::HelloVerify(_)
    ));
}
