//! Session resumption (RFC 5246 §7.3, abbreviated handshake) in memory: PSK and raw public
//! keys, the fallback to a full handshake when the server lost the session or no longer
//! trusts the peer, and loss of the final flight.

use core::time::Duration;
use sigil_crypto::{CryptoProvider, RustCrypto, SignatureAlgorithm};
use sigil_dtls::Error;
use sigil_dtls::{
    Config, Connection, CookieVerified, Credentials, PinnedIdentities, ServerCredentials, Session,
    Trust,
};
use sigil_identity::Identity;
use sigil_testkit::dtls::{at, drain, Link, OnePsk, Pair, Side, SENSOR_PSK as Keys};
use sigil_testkit::Counter;

/// The tests' randomness: each byte steps by 37 from the seed.
fn rng(seed: u8) -> Counter {
    Counter::new(seed, 37)
}

/// Cookie exchange, then the server from `accept`, then both until neither has anything
/// to send or wait for; `drop_client` of the client's datagrams after the ClientHello are
/// lost. Returns the pair and the bytes that arrived from the accepted ClientHello on.
fn run<'a, T: Trust, U: Trust>(
    client: Connection<RustCrypto, T>,
    accept: impl FnOnce(CookieVerified, &[u8]) -> Result<Connection<RustCrypto, U>, Error> + 'a,
    drop_client: usize,
) -> (Pair<'a, T, U>, usize) {
    let mut pair = Pair::new(client, |cookie, d, _| accept(cookie, d), Link::PERFECT);
    assert!(pair.run_until_accepted(), "{:?}", pair.errors);
    let from = pair.log.len() - 1;
    assert_eq!(pair.log[from].to, Side::Server, "the accepted ClientHello");
    pair.lose_next(Side::Server, drop_client);
    assert!(pair.run_until_idle(Duration::from_secs(40)));
    let bytes = pair.log[from..]
        .iter()
        .filter(|d| !d.lost)
        .map(|d| d.bytes.len())
        .sum();
    (pair, bytes)
}

const PSK: Credentials<'static> = Credentials::Psk {
    identity: b"sensor-1",
    key: b"0123456789abcdef",
};

/// A PSK server; `seed` varies its randomness (and so the session IDs it issues).
fn psk_server<'a>(
    resume: Option<&'a Session>,
    seed: u8,
) -> impl FnOnce(CookieVerified, &[u8]) -> Result<Connection<RustCrypto, OnePsk>, Error> + 'a {
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
            &mut rng(seed),
            cookie,
            d,
            at(2),
        )
    }
}

fn full_psk() -> (Session, Session, usize) {
    let c =
        Connection::connect(RustCrypto, Keys, Config::default(), &mut rng(1), PSK, at(0)).unwrap();
    let (pair, bytes) = run(c, psk_server(None, 50), 0);
    let (c, s) = pair.into_parts();
    let s = s.expect("the server accepted");
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
    let c = Connection::resume(
        RustCrypto,
        Keys,
        Config::default(),
        &mut rng(2),
        PSK,
        &client_session,
        at(0),
    )
    .unwrap();
    let (pair, bytes) = run(c, psk_server(Some(&server_session), 51), 0);
    let (mut c, s) = pair.into_parts();
    let mut s = s.expect("the server accepted");
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
    let c = Connection::resume(
        RustCrypto,
        Keys,
        Config::default(),
        &mut rng(3),
        PSK,
        &client_session,
        at(0),
    )
    .unwrap();
    let (pair, _) = run(c, psk_server(None, 52), 0);
    let (c, s) = pair.into_parts();
    let s = s.expect("the server accepted");
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
    let c = Connection::resume(
        RustCrypto,
        Keys,
        Config::default(),
        &mut rng(4),
        PSK,
        &client_session,
        at(0),
    )
    .unwrap();
    // The client's ChangeCipherSpec + Finished datagram is lost once.
    let (pair, _) = run(c, psk_server(Some(&server_session), 53), 1);
    assert_eq!(pair.stats.to_server.dropped, 1);
    assert_eq!(pair.stats.server_retransmissions, 1);
    let (c, s) = pair.into_parts();
    let s = s.expect("the server accepted");
    assert!(c.resumed() && s.resumed());
}

#[test]
fn a_raw_public_key_session_resumes_only_while_the_client_key_is_trusted() {
    let sk = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut rng(5))
        .unwrap();
    let ck = RustCrypto
        .generate(SignatureAlgorithm::Ed25519, &mut rng(6))
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
                &mut rng(seed),
                cookie,
                d,
                at(2),
            )
        }
    };
    let trusted: &'static [Identity] = Box::leak(Box::new(cid));
    let client = |seed: u8| {
        Connection::connect(
            RustCrypto,
            PinnedIdentities {
                crypto: RustCrypto,
                identities: &sid,
            },
            Config::default(),
            &mut rng(seed),
            Credentials::RawPublicKey(Some(&ck)),
            at(0),
        )
        .unwrap()
    };
    let c = client(7);
    let (pair, _) = run(c, offer(None, trusted, 60), 0);
    let (c, s) = pair.into_parts();
    let s = s.expect("the server accepted");
    assert!(s.is_established());
    let (cs, ss) = (c.session().unwrap(), s.session().unwrap());
    assert_eq!(ss.peer_public_key(), Some(&cpk));
    let c2 = Connection::resume(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: &sid,
        },
        Config::default(),
        &mut rng(8),
        Credentials::RawPublicKey(Some(&ck)),
        &cs,
        at(0),
    )
    .unwrap();
    let (pair, _) = run(c2, offer(Some(&ss), trusted, 61), 0);
    let (c2, s2) = pair.into_parts();
    let s2 = s2.expect("the server accepted");
    assert!(c2.resumed() && s2.resumed());
    assert_eq!(
        s2.peer_public_key(),
        Some(&cpk),
        "the resumed session keeps the peer's key"
    );
    // The client's identity is revoked: the cached session is not resumed, and the full
    // handshake it falls back to fails.
    let c3 = Connection::resume(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: &sid,
        },
        Config::default(),
        &mut rng(9),
        Credentials::RawPublicKey(Some(&ck)),
        &cs,
        at(0),
    )
    .unwrap();
    let (pair, _) = run(c3, offer(Some(&ss), &[], 62), 0);
    let (_, s3) = pair.into_parts();
    let s3 = s3.expect("the server accepted");
    assert!(!s3.resumed() && !s3.is_established());
    assert_eq!(s3.failure(), Some(Error::UntrustedKey));
    // The client no longer trusts the server's identity: it does not offer the cached
    // session (the abbreviated handshake would not show it the server's key again), and the
    // full handshake it runs instead fails on the server's key.
    let c4 = Connection::resume(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: &[],
        },
        Config::default(),
        &mut rng(10),
        Credentials::RawPublicKey(Some(&ck)),
        &cs,
        at(0),
    )
    .unwrap();
    let (pair, _) = run(c4, offer(Some(&ss), trusted, 63), 0);
    let (c4, s4) = pair.into_parts();
    assert!(!c4.resumed() && !c4.is_established());
    assert_eq!(c4.failure(), Some(Error::UntrustedKey));
    assert!(!s4.expect("the server accepted").resumed());
}

#[test]
fn a_psk_session_is_offered_only_with_the_key_it_was_made_with() {
    let (client_session, server_session, _) = full_psk();
    // The client's key for the identity was replaced: the old session is not offered, so
    // the server (which still has it cached) runs a full handshake, which these two keys
    // cannot complete.
    let c = Connection::resume(
        RustCrypto,
        Keys,
        Config::default(),
        &mut rng(11),
        Credentials::Psk {
            identity: b"sensor-1",
            key: b"fedcba9876543210",
        },
        &client_session,
        at(0),
    )
    .unwrap();
    let mut pair = Pair::new(
        c,
        |cookie, d, _| psk_server(Some(&server_session), 54)(cookie, d),
        Link::PERFECT,
    );
    assert!(pair.run_until_accepted(), "{:?}", pair.errors);
    pair.run_until_idle(Duration::from_secs(40));
    let (c, s) = pair.into_parts();
    let s = s.expect("the server accepted");
    assert!(!c.resumed() && !s.resumed());
    assert!(!c.is_established() && !s.is_established());
    // Another identity with the same key: not offered either.
    let c = Connection::resume(
        RustCrypto,
        Keys,
        Config::default(),
        &mut rng(12),
        Credentials::Psk {
            identity: b"sensor-2",
            key: b"0123456789abcdef",
        },
        &client_session,
        at(0),
    )
    .unwrap();
    let mut pair = Pair::new(
        c,
        |cookie, d, _| psk_server(Some(&server_session), 55)(cookie, d),
        Link::PERFECT,
    );
    assert!(pair.run_until_accepted(), "{:?}", pair.errors);
    pair.run_until_idle(Duration::from_secs(40));
    let (c, s) = pair.into_parts();
    assert!(!c.resumed() && !s.expect("the server accepted").resumed());
}

#[test]
fn close_notify_ends_both_sides() {
    let c = Connection::connect(
        RustCrypto,
        Keys,
        Config::default(),
        &mut rng(20),
        PSK,
        at(0),
    )
    .unwrap();
    let (pair, _) = run(c, psk_server(None, 70), 0);
    let (mut c, s) = pair.into_parts();
    let mut s = s.expect("the server accepted");
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
