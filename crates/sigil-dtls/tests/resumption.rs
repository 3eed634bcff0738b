//! Session resumption (RFC 5246 §7.3, abbreviated handshake) in memory: PSK and raw public
//! keys, the fallback to a full handshake when the server lost the session or no longer
//! trusts the peer, and loss of the final flight.

mod common;

use common::{at, drain, Counter, Keys};
use sigil_crypto::{CryptoProvider, RustCrypto, SignatureAlgorithm};
use sigil_dtls::Error;
use sigil_dtls::{
    Config, Connection, CookieKey, CookieVerified, Credentials, PinnedIdentities,
    ServerCredentials, Session, Stateless, Trust,
};
use sigil_identity::Identity;

/// Cookie exchange, then the server from `accept`, then both until quiet; `drop_client` drops
/// that many of the client's datagrams after the ClientHello. Returns the server and the bytes
/// exchanged after the cookie.
fn run<T: Trust, U: Trust>(
    client: &mut Connection<RustCrypto, T>,
    accept: impl FnOnce(CookieVerified, &[u8]) -> Result<Connection<RustCrypto, U>, Error>,
    mut drop_client: usize,
) -> (Connection<RustCrypto, U>, usize) {
    let cookies = CookieKey::new([3; 32]);
    let ch1 = drain(client);
    let mut out = [0u8; 512];
    let Stateless::HelloVerify(n) = cookies.respond(&RustCrypto, b"p", &ch1[0], &mut out) else {
        panic!()
    };
    client.handle_datagram(at(1), &out[..n]).unwrap();
    let ch2 = drain(client);
    let mut bytes = ch2[0].len();
    let Stateless::Accept(cookie) = cookies.respond(&RustCrypto, b"p", &ch2[0], &mut out) else {
        panic!("the cookie was refused")
    };
    let mut server = accept(cookie, &ch2[0]).unwrap();
    let mut now = 2;
    for _ in 0..40 {
        let (x, y) = (drain(client), drain(&mut server));
        if x.is_empty() && y.is_empty() {
            if server.poll_timeout().is_none() && client.poll_timeout().is_none() {
                break;
            }
            now += 1_000;
            let _ = server.handle_timeout(at(now));
            let _ = client.handle_timeout(at(now));
            continue;
        }
        for d in x {
            if drop_client > 0 {
                drop_client -= 1;
                continue;
            }
            bytes += d.len();
            let _ = server.handle_datagram(at(now), &d);
        }
        for d in y {
            bytes += d.len();
            let _ = client.handle_datagram(at(now), &d);
        }
    }
    (server, bytes)
}

const PSK: Credentials<'static> = Credentials::Psk {
    identity: b"sensor-1",
    key: b"0123456789abcdef",
};

/// A PSK server; `seed` varies its randomness (and so the session IDs it issues).
fn psk_server<'a>(
    resume: Option<&'a Session>,
    seed: u8,
) -> impl FnOnce(CookieVerified, &[u8]) -> Result<Connection<RustCrypto, Keys>, Error> + 'a {
    move |cookie, d| {
        let offer = ServerCredentials {
            psk: true,
            issue_session_ids: true,
            resume,
            ..ServerCredentials::NONE
        };
        Connection::accept(
            RustCrypto,
            Keys,
            Config::default(),
            &offer,
            &mut Counter(seed),
            cookie,
            d,
            at(2),
        )
    }
}

fn full_psk() -> (Session, Session, usize) {
    let mut c = Connection::connect(
        RustCrypto,
        Keys,
        Config::default(),
        &mut Counter(1),
        PSK,
        at(0),
    )
    .unwrap();
    let (s, bytes) = run(&mut c, psk_server(None, 50), 0);
    assert!(c.is_established() && s.is_established() && !c.resumed());
    (
        c.session().expect("a session ID was issued"),
        s.session().unwrap(),
        bytes,
    )
}

#[test]
fn a_psk_session_resumes_with_an_abbreviated_handshake() {
    let (client_session, server_session, full_bytes) = full_psk();
    assert_eq!(client_session.id, server_session.id);
    assert_eq!(client_session.master, server_session.master);
    let mut c = Connection::resume(
        RustCrypto,
        Keys,
        Config::default(),
        &mut Counter(2),
        PSK,
        &client_session,
        at(0),
    )
    .unwrap();
    let (mut s, bytes) = run(&mut c, psk_server(Some(&server_session), 51), 0);
    assert!(c.resumed() && s.resumed());
    assert_eq!(s.psk_identity(), b"sensor-1");
    assert!(
        bytes < full_bytes,
        "abbreviated {bytes} B vs full {full_bytes} B"
    );
    // New keys (new randoms): data flows both ways.
    c.send(b"after resumption").unwrap();
    for d in drain(&mut c) {
        s.handle_datagram(at(9), &d).unwrap();
    }
    let mut buf = [0u8; 64];
    assert_eq!(s.poll_app_data(&mut buf), Some(16));
}

#[test]
fn without_the_cached_session_the_server_does_a_full_handshake() {
    let (client_session, _, _) = full_psk();
    let mut c = Connection::resume(
        RustCrypto,
        Keys,
        Config::default(),
        &mut Counter(3),
        PSK,
        &client_session,
        at(0),
    )
    .unwrap();
    let (s, _) = run(&mut c, psk_server(None, 52), 0);
    assert!(
        c.is_established() && s.is_established(),
        "{:?} {:?}",
        c.failure(),
        s.failure()
    );
    assert!(!c.resumed() && !s.resumed());
    // The new session differs from the old one.
    assert_ne!(c.session().unwrap().id, client_session.id);
}

#[test]
fn a_lost_final_flight_is_recovered_by_the_servers_timer() {
    let (client_session, server_session, _) = full_psk();
    let mut c = Connection::resume(
        RustCrypto,
        Keys,
        Config::default(),
        &mut Counter(4),
        PSK,
        &client_session,
        at(0),
    )
    .unwrap();
    // The client's ChangeCipherSpec + Finished datagram is lost once.
    let (s, _) = run(&mut c, psk_server(Some(&server_session), 53), 1);
    assert!(c.resumed() && s.resumed());
}

#[test]
fn a_raw_public_key_session_resumes_only_while_the_client_key_is_trusted() {
    let sk = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Counter(5))
        .unwrap();
    let ck = RustCrypto
        .generate(SignatureAlgorithm::Ed25519, &mut Counter(6))
        .unwrap();
    let sid = [Identity::of_key(&RustCrypto, &RustCrypto.public_key(&sk).unwrap(), b"").unwrap()];
    let cpk = RustCrypto.public_key(&ck).unwrap();
    let cid = [Identity::of_key(&RustCrypto, &cpk, b"").unwrap()];
    let offer = |resume, trusted: &'static [Identity], seed: u8| {
        let sk = sk.clone();
        move |cookie: CookieVerified, d: &[u8]| {
            let o = ServerCredentials {
                key: Some(&sk),
                require_client_key: true,
                issue_session_ids: true,
                resume,
                ..ServerCredentials::NONE
            };
            Connection::accept(
                RustCrypto,
                PinnedIdentities {
                    crypto: RustCrypto,
                    identities: trusted,
                },
                Config::default(),
                &o,
                &mut Counter(seed),
                cookie,
                d,
                at(2),
            )
        }
    };
    let trusted: &'static [Identity] = Box::leak(Box::new(cid));
    let client = |rng: u8| {
        Connection::connect(
            RustCrypto,
            PinnedIdentities {
                crypto: RustCrypto,
                identities: &sid,
            },
            Config::default(),
            &mut Counter(rng),
            Credentials::RawPublicKey(Some(&ck)),
            at(0),
        )
        .unwrap()
    };
    let mut c = client(7);
    let (s, _) = run(&mut c, offer(None, trusted, 60), 0);
    assert!(s.is_established());
    let (cs, ss) = (c.session().unwrap(), s.session().unwrap());
    assert_eq!(ss.peer_public_key(), Some(&cpk));
    let mut c2 = Connection::resume(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: &sid,
        },
        Config::default(),
        &mut Counter(8),
        Credentials::RawPublicKey(Some(&ck)),
        &cs,
        at(0),
    )
    .unwrap();
    let (s2, _) = run(&mut c2, offer(Some(&ss), trusted, 61), 0);
    assert!(c2.resumed() && s2.resumed());
    assert_eq!(
        s2.peer_public_key(),
        Some(&cpk),
        "the resumed session keeps the peer's key"
    );
    // The client's identity is revoked: the cached session is not resumed, and the full
    // handshake it falls back to fails.
    let mut c3 = Connection::resume(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: &sid,
        },
        Config::default(),
        &mut Counter(9),
        Credentials::RawPublicKey(Some(&ck)),
        &cs,
        at(0),
    )
    .unwrap();
    let (s3, _) = run(&mut c3, offer(Some(&ss), &[], 62), 0);
    assert!(!s3.resumed() && !s3.is_established());
    assert_eq!(s3.failure(), Some(Error::UntrustedKey));
}

#[test]
fn close_notify_ends_both_sides() {
    let mut c = Connection::connect(
        RustCrypto,
        Keys,
        Config::default(),
        &mut Counter(20),
        PSK,
        at(0),
    )
    .unwrap();
    let (mut s, _) = run(&mut c, psk_server(None, 70), 0);
    assert!(c.is_established());
    c.close().unwrap();
    assert!(c.send(b"x").is_err(), "nothing is sent after close");
    for d in drain(&mut c) {
        s.handle_datagram(at(10), &d).unwrap();
    }
    assert_eq!(s.failure(), Some(Error::PeerAlert(0)));
    assert!(s.send(b"x").is_err());
    assert!(c.close().is_err(), "closing twice is an error");
}
