//! The reading resources: a token posted over plain CoAP, requests inside and outside its
//! scope over a real DTLS session, and the peer table's caps against many hosts beside an
//! honest one, each checked by the server's own counters.

extern crate std;

use super::*;
use sigil_ace::{
    encode_signed, Claims, Confirmation, Permissions, Scope, ScopeEntry, MAX_TOKEN_LEN,
};
use sigil_coap::message::{Code, ContentFormat, Message, MessageBuilder, MessageType};
use sigil_crypto::{CryptoError, CryptoProvider, Rng, RustCrypto, SecretKey, SignatureAlgorithm};
use std::vec::Vec;

struct TestRng(u64);

impl Rng for TestRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        for chunk in buf.chunks_mut(32) {
            self.0 += 1;
            let block = RustCrypto.sha256(&[&self.0.to_be_bytes()]);
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
        Ok(())
    }
}

const NOW: UnixTime = UnixTime::from_secs(1_800_000_000);
const SENSOR: &str = "00112233445566778899aabbccddeeff";
const READING: &[u8] = b"\xd2\x84signed reading one";

fn keypair(alg: SignatureAlgorithm, seed: u64) -> (SecretKey, PublicKey) {
    let sk = RustCrypto.generate(alg, &mut TestRng(seed)).unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    (sk, pk)
}

/// A token the AC signs for the sensor, binding `holder`, granting `scope`.
fn token(ac: &SecretKey, holder: PublicKey, scope: &[ScopeEntry<'_>], cti: &[u8]) -> Vec<u8> {
    let claims = Claims {
        iss: Some("aabbccddeeff00112233445566778899"),
        sub: None,
        aud: Some(SENSOR),
        exp: Some(UnixTime::from_secs(NOW.as_secs() + 600)),
        nbf: None,
        iat: Some(NOW),
        cti: Some(cti),
        scope: Some(Scope::new(scope)),
        cnf: Some(Confirmation::PublicKey {
            kid: None,
            key: holder,
        }),
    };
    let mut out = [0u8; MAX_TOKEN_LEN];
    let n = encode_signed(&claims, None, ac, &RustCrypto, &mut out).unwrap();
    out[..n].to_vec()
}

const READ_ALL: [ScopeEntry<'static>; 1] = [ScopeEntry {
    object: SENSOR,
    permissions: Permissions::READ,
}];

/// A Confirmable request with one path segment.
fn request(code: Code, path: &str, mid: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = [0u8; 1200];
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, code, mid, &[7, 7]).unwrap();
    b.uri_path(path).unwrap();
    let n = if payload.is_empty() {
        b.finish()
    } else {
        b.finish_with_payload(payload).unwrap()
    };
    buf[..n].to_vec()
}

fn host(i: u8, j: u8) -> PeerAddr {
    PeerAddr::v4([127, 0, i, j], 40000)
}

#[test]
fn readings_keep_what_the_device_publishes_once_each_and_the_last_n() {
    let mut r: Readings<2, 32> = Readings::new();
    let mut buf = [0u8; 128];
    let mut publish = |payload: &[u8], path: &str| {
        let mut b =
            MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::PUT, 1, &[1]).unwrap();
        b.uri_path(path).unwrap();
        b.uint_option(sigil_coap::message::option::CONTENT_FORMAT, 96)
            .unwrap();
        let n = b.finish_with_payload(payload).unwrap();
        buf[..n].to_vec()
    };
    assert!(r.outgoing(&publish(b"one", "ps")));
    assert!(!r.outgoing(&publish(b"one", "ps")), "a retransmission");
    assert!(!r.outgoing(&publish(b"x", "rd")), "not a publication");
    assert!(r.outgoing(&publish(b"two", "ps")));
    assert!(r.outgoing(&publish(b"three", "ps")));
    assert!(!r.outgoing(&publish(&[0; 40], "ps")));
    assert_eq!(r.too_large, 1);
    assert_eq!(r.len(), 2);
    assert_eq!(r.get(0), Some((96, &b"two"[..])));
    assert_eq!(r.latest(), Some((96, &b"three"[..])));
}

#[test]
fn peer_addresses_group_ipv6_by_their_64_prefix() {
    let a = PeerAddr::v6([0x20, 1, 0xd, 0xb8, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8], 1);
    let b = PeerAddr::v6([0x20, 1, 0xd, 0xb8, 0, 0, 0, 1, 9, 9, 9, 9, 9, 9, 9, 9], 2);
    let c = PeerAddr::v6([0x20, 1, 0xd, 0xb8, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8], 1);
    assert_eq!(a.host(), b.host());
    assert_ne!(a.host(), c.host());
    assert_ne!(host(0, 1).host(), host(0, 2).host());
}

#[test]
fn a_token_posted_over_plain_coap_is_kept_and_anything_else_refused_without_a_body() {
    let (ac, ac_pub) = keypair(SignatureAlgorithm::Ed25519, 1);
    let (_, client) = keypair(SignatureAlgorithm::EcdsaP256, 2);
    let mut res: ReadingResources<'_> = ReadingResources::new(SENSOR, ac_pub, rs_limits());
    let mut out = [0u8; MAX_ANSWER];
    let post = request(
        Code::POST,
        "authz-info",
        1,
        &token(&ac, client, &READ_ALL, b"c1"),
    );
    let n = res
        .plain(&RustCrypto, NOW, host(0, 1), &post, 9, &mut out)
        .unwrap();
    let m = Message::parse(&out[..n]).unwrap();
    assert_eq!(m.code, Code::CREATED);
    assert_eq!(m.mtype, MessageType::Acknowledgement);
    assert_eq!(res.rs.tokens(), 1);
    assert_eq!(res.rs.counters.tokens_accepted, 1);
    assert!(matches!(
        res.poll_event(),
        Some(Event::TokenAccepted { peer, replaced: false, .. }) if peer == host(0, 1)
    ));
    // The same token again: a replay, refused 4.01 with its reason.
    let n = res
        .plain(&RustCrypto, NOW, host(0, 1), &post, 9, &mut out)
        .unwrap();
    assert_eq!(Message::parse(&out[..n]).unwrap().code, Code::UNAUTHORIZED);
    assert_eq!(res.rs.counters.tokens_replayed, 1);
    assert!(matches!(
        res.poll_event(),
        Some(Event::TokenRefused {
            error: sigil_ace::rs::IntakeError::Replayed,
            ..
        })
    ));
    // The reading over plain CoAP: 4.01, no body, counted.
    let get = request(Code::GET, "reading", 2, b"");
    let n = res
        .plain(&RustCrypto, NOW, host(0, 1), &get, 9, &mut out)
        .unwrap();
    let m = Message::parse(&out[..n]).unwrap();
    assert_eq!(m.code, Code::UNAUTHORIZED);
    assert!(m.payload.is_empty());
    assert!(n <= get.len());
    assert_eq!(res.stats.plain_refused, 1);
    // A tiny forged token: the refusal stays within 3x the request.
    let tiny = request(Code::POST, "authz-info", 3, b"\x01");
    let n = res
        .plain(&RustCrypto, NOW, host(0, 2), &tiny, 9, &mut out)
        .unwrap();
    assert!(n <= 3 * tiny.len());
    assert_eq!(res.rs.counters.tokens_malformed, 1);
}

#[test]
fn requests_are_decided_by_the_key_s_token_scope() {
    let (ac, ac_pub) = keypair(SignatureAlgorithm::Ed25519, 1);
    let (_, client) = keypair(SignatureAlgorithm::EcdsaP256, 2);
    let (_, stranger) = keypair(SignatureAlgorithm::EcdsaP256, 3);
    let mut res: ReadingResources<'_> = ReadingResources::new(SENSOR, ac_pub, rs_limits());
    let mut readings: Readings = Readings::new();
    readings.push(ContentFormat::COSE_SIGN1.0, READING);
    let history_only = [ScopeEntry {
        object: "00112233445566778899aabbccddeeff/history",
        permissions: Permissions::READ,
    }];
    let post = request(
        Code::POST,
        "authz-info",
        1,
        &token(&ac, client, &history_only, b"c1"),
    );
    let mut out = [0u8; MAX_ANSWER];
    res.plain(&RustCrypto, NOW, host(0, 1), &post, 9, &mut out)
        .unwrap();
    let mut ask = |res: &mut ReadingResources<'_>, key: Option<&PublicKey>, code, path| {
        let req = request(code, path, 5, b"");
        let n = res
            .secure(
                &RustCrypto,
                NOW,
                host(0, 1),
                key,
                &readings,
                &req,
                9,
                &mut out,
            )
            .unwrap();
        let m = Message::parse(&out[..n]).unwrap();
        (m.code, m.payload.to_vec())
    };
    // Inside the scope: the history, a CBOR array holding the reading.
    let (code, body) = ask(&mut res, Some(&client), Code::GET, "history");
    assert_eq!(code, Code::CONTENT);
    assert_eq!(body[0], 0x81);
    assert!(body.ends_with(READING));
    // Outside: another resource, another method, another key, no key.
    assert_eq!(
        ask(&mut res, Some(&client), Code::GET, "reading").0,
        Code::FORBIDDEN
    );
    assert_eq!(
        ask(&mut res, Some(&client), Code::PUT, "history").0,
        Code::FORBIDDEN
    );
    assert_eq!(
        ask(&mut res, Some(&stranger), Code::GET, "history").0,
        Code::UNAUTHORIZED
    );
    assert_eq!(
        ask(&mut res, None, Code::GET, "history").0,
        Code::UNAUTHORIZED
    );
    assert_eq!(
        ask(&mut res, Some(&client), Code::GET, "config").0,
        Code::NOT_FOUND
    );
    assert_eq!(res.rs.counters.requests_allowed, 1);
    assert_eq!(res.rs.counters.requests_forbidden, 2);
    assert_eq!(res.rs.counters.requests_no_token, 2);
    assert_eq!(res.rs.counters.requests_not_found, 1);
    assert_eq!(res.stats.requests, 6);
    let _ = res.poll_event();
    assert!(matches!(
        res.poll_event(),
        Some(Event::RequestRefused { refusal: Refusal::Forbidden, path, .. }) if path.as_str() == "reading"
    ));
}

#[cfg(feature = "serve-dtls")]
mod dtls {
    use super::*;
    use crate::serve::dtls::AnyKey;
    use core::time::Duration;
    use sigil_dtls::{Config, Connection, Credentials, MAX_APP_DATA, MAX_DATAGRAM};
    use sigil_time::Instant;
    use std::boxed::Box;

    type Server = ReadingServer<'static, RustCrypto, Box<[PeerSlot<RustCrypto>]>>;
    type Client = Connection<RustCrypto, AnyKey>;

    fn server(ac_pub: PublicKey, slots: usize, per_host: usize) -> Box<Server> {
        let (sensor, _) = keypair(SignatureAlgorithm::EcdsaP256, 10);
        let peers: Box<[PeerSlot<RustCrypto>]> = (0..slots).map(|_| None).collect();
        Box::new(ReadingServer::new(
            RustCrypto,
            SENSOR,
            sensor,
            ac_pub,
            Config::default(),
            [5; 32],
            rs_limits(),
            Limits {
                peers_per_host: per_host,
                ..Limits::default()
            },
            peers,
        ))
    }

    fn client(key: &SecretKey, seed: u64) -> Box<Client> {
        Box::new(
            Connection::connect(
                RustCrypto,
                AnyKey,
                Config::default(),
                &mut TestRng(seed),
                Credentials::RawPublicKey(Some(key)),
                Instant::ZERO,
            )
            .unwrap(),
        )
    }

    /// Carries datagrams both ways until neither side has anything to send.
    fn pump(s: &mut Server, c: &mut Client, at: PeerAddr, readings: &Readings, now: Instant) {
        let mut buf = [0u8; MAX_DATAGRAM];
        let mut rng = TestRng(99);
        for _ in 0..20 {
            let mut moved = false;
            while let Some(n) = c.poll_transmit(now, &mut buf) {
                s.handle_datagram(now, NOW, &mut rng, at, &buf[..n], readings);
                moved = true;
            }
            while let Some((to, n)) = s.poll_transmit(now, &mut buf) {
                if to == at {
                    let _ = c.handle_datagram(now, &buf[..n]);
                }
                moved = true;
            }
            if !moved {
                return;
            }
        }
    }

    fn get(s: &mut Server, c: &mut Client, at: PeerAddr, readings: &Readings, code: Code) -> Code {
        c.send(&request(code, "reading", 42, b"")).unwrap();
        pump(s, c, at, readings, Instant::ZERO);
        let mut app = [0u8; MAX_APP_DATA];
        let n = c.poll_app_data(&mut app).expect("an answer");
        Message::parse(&app[..n]).unwrap().code
    }

    #[test]
    fn a_session_reads_inside_its_scope_and_is_refused_4_03_outside() {
        let (ac, ac_pub) = keypair(SignatureAlgorithm::Ed25519, 1);
        let (client_sk, client_pk) = keypair(SignatureAlgorithm::EcdsaP256, 2);
        let mut s = server(ac_pub, 4, 2);
        let mut readings: Readings = Readings::new();
        readings.push(ContentFormat::COSE_SIGN1.0, READING);
        let at = host(0, 1);
        let mut rng = TestRng(7);
        // The token over plain CoAP, on the same port.
        let post = request(
            Code::POST,
            "authz-info",
            1,
            &token(&ac, client_pk, &READ_ALL, b"c1"),
        );
        s.handle_datagram(Instant::ZERO, NOW, &mut rng, at, &post, &readings);
        let mut buf = [0u8; MAX_DATAGRAM];
        let (to, n) = s.poll_transmit(Instant::ZERO, &mut buf).unwrap();
        assert_eq!(to, at);
        assert_eq!(Message::parse(&buf[..n]).unwrap().code, Code::CREATED);
        // The handshake with the key the token binds.
        let mut c = client(&client_sk, 3);
        pump(&mut s, &mut c, at, &readings, Instant::ZERO);
        assert!(c.is_established());
        assert_eq!(s.resources.stats.handshakes, 1);
        assert_eq!(s.sessions(), 1);
        // GET inside the scope: the reading as published.
        c.send(&request(Code::GET, "reading", 42, b"")).unwrap();
        pump(&mut s, &mut c, at, &readings, Instant::ZERO);
        let mut app = [0u8; MAX_APP_DATA];
        let n = c.poll_app_data(&mut app).unwrap();
        let m = Message::parse(&app[..n]).unwrap();
        assert_eq!(m.code, Code::CONTENT);
        assert_eq!(m.payload, READING);
        assert_eq!(m.content_format(), Some(ContentFormat::COSE_SIGN1));
        // PUT: READ does not grant it.
        assert_eq!(
            get(&mut s, &mut c, at, &readings, Code::PUT),
            Code::FORBIDDEN
        );
        assert_eq!(s.resources.rs.counters.requests_allowed, 1);
        assert_eq!(s.resources.rs.counters.requests_forbidden, 1);
        assert_eq!(s.resources.stats.requests, 2);
    }

    #[test]
    fn a_session_without_a_token_is_refused_4_01() {
        let (_, ac_pub) = keypair(SignatureAlgorithm::Ed25519, 1);
        let (client_sk, _) = keypair(SignatureAlgorithm::EcdsaP256, 2);
        let mut s = server(ac_pub, 4, 2);
        let readings: Readings = Readings::new();
        let mut c = client(&client_sk, 3);
        pump(&mut s, &mut c, host(0, 1), &readings, Instant::ZERO);
        assert!(c.is_established());
        assert_eq!(
            get(&mut s, &mut c, host(0, 1), &readings, Code::GET),
            Code::UNAUTHORIZED
        );
        assert_eq!(s.resources.rs.counters.requests_no_token, 1);
    }

    /// A ClientHello from `at` that passes the cookie exchange: the server's first flight is
    /// queued (a half-open peer) or the hello refused.
    fn half_open(s: &mut Server, key: &SecretKey, at: PeerAddr, readings: &Readings, now: Instant) {
        let mut c = client(key, u64::from(at.ip[14]) << 8 | u64::from(at.ip[15]));
        let mut buf = [0u8; MAX_DATAGRAM];
        let mut rng = TestRng(5);
        // ClientHello, HelloVerifyRequest, ClientHello with the cookie; nothing after.
        let n = c.poll_transmit(now, &mut buf).unwrap();
        s.handle_datagram(now, NOW, &mut rng, at, &buf[..n], readings);
        let (_, n) = s.poll_transmit(now, &mut buf).unwrap();
        let _ = c.handle_datagram(now, &buf[..n]);
        let n = c.poll_transmit(now, &mut buf).unwrap();
        s.handle_datagram(now, NOW, &mut rng, at, &buf[..n], readings);
        while s.poll_transmit(now, &mut buf).is_some() {}
    }

    #[test]
    fn a_full_table_refuses_new_hosts_while_the_honest_session_is_served() {
        let (ac, ac_pub) = keypair(SignatureAlgorithm::Ed25519, 1);
        let (honest_sk, honest_pk) = keypair(SignatureAlgorithm::EcdsaP256, 2);
        let (attacker, _) = keypair(SignatureAlgorithm::EcdsaP256, 4);
        let mut s = server(ac_pub, 8, 2);
        let mut readings: Readings = Readings::new();
        readings.push(ContentFormat::COSE_SIGN1.0, READING);
        let honest = PeerAddr::v4([10, 0, 0, 1], 5683);
        let mut rng = TestRng(7);
        let post = request(
            Code::POST,
            "authz-info",
            1,
            &token(&ac, honest_pk, &READ_ALL, b"c1"),
        );
        s.handle_datagram(Instant::ZERO, NOW, &mut rng, honest, &post, &readings);
        while s
            .poll_transmit(Instant::ZERO, &mut [0u8; MAX_DATAGRAM])
            .is_some()
        {}
        let mut c = client(&honest_sk, 3);
        pump(&mut s, &mut c, honest, &readings, Instant::ZERO);
        assert!(c.is_established());
        // One host takes its share (2) and no more.
        for port in 0..4 {
            half_open(
                &mut s,
                &attacker,
                PeerAddr::v4([127, 0, 0, 1], port),
                &readings,
                Instant::ZERO,
            );
        }
        assert_eq!(s.peers_of(&host(0, 1)), 2);
        assert_eq!(s.resources.stats.peers_refused_per_host, 2);
        // 256 hosts fill what is left (7 slots in all beside the honest one), then are refused.
        for i in 0..=255u8 {
            half_open(&mut s, &attacker, host(1, i), &readings, Instant::ZERO);
        }
        assert_eq!(s.peers(), 8);
        assert_eq!(s.resources.stats.peers_refused, 2 + 256 - 5);
        assert_eq!(s.resources.stats.peers_refused_per_host, 2);
        assert!(matches!(
            s.poll_event_last(),
            Some(Event::PeerRefused {
                per_host: false,
                ..
            })
        ));
        // The honest session is still served.
        assert_eq!(
            get(&mut s, &mut c, honest, &readings, Code::GET),
            Code::CONTENT
        );
        // Half-open peers expire after the handshake timeout; a newcomer then gets in.
        let later = Instant::ZERO + HANDSHAKE_TIMEOUT + Duration::from_secs(1);
        s.handle_timeout(later, NOW);
        assert_eq!(s.peers(), 1, "only the honest session stays");
        assert_eq!(s.resources.stats.peers_expired, 7);
        half_open(&mut s, &attacker, host(2, 1), &readings, later);
        assert_eq!(s.peers(), 2);
        assert_eq!(
            get(&mut s, &mut c, honest, &readings, Code::GET),
            Code::CONTENT
        );
    }

    #[test]
    fn addresses_of_one_ipv6_64_share_one_host_s_cap() {
        let (_, ac_pub) = keypair(SignatureAlgorithm::Ed25519, 1);
        let (attacker, _) = keypair(SignatureAlgorithm::EcdsaP256, 4);
        let mut s = server(ac_pub, 8, 2);
        let readings: Readings = Readings::new();
        let in_64 = |net: u8, i: u8| {
            PeerAddr::v6(
                [0x20, 1, 0xd, 0xb8, 0, 0, 0, net, i, 0, 0, 0, 0, 0, 0, i],
                5684,
            )
        };
        // 256 addresses of one /64: one host, two peers.
        for i in 0..=255u8 {
            half_open(&mut s, &attacker, in_64(1, i), &readings, Instant::ZERO);
        }
        assert_eq!(s.peers(), 2);
        assert_eq!(s.resources.stats.peers_refused_per_host, 254);
        // The next /64 is another host: it gets in.
        half_open(&mut s, &attacker, in_64(2, 1), &readings, Instant::ZERO);
        assert_eq!(s.peers(), 3);
        assert_eq!(s.peers_of(&in_64(2, 9)), 1);
    }

    impl Server {
        /// The last event, the others discarded.
        fn poll_event_last(&mut self) -> Option<Event> {
            let mut last = None;
            while let Some(e) = self.poll_event() {
                last = Some(e);
            }
            last
        }
    }

    #[test]
    fn a_token_posted_again_in_the_same_message_gets_its_2_01_again_not_a_replay_refusal() {
        // A client whose ACK was lost sends its POST /authz-info again (same message ID):
        // RFC 7252 §4.5 makes that the same message, answered as before. The same token in a
        // new message, or from another address, is a replay.
        let (ac, ac_pub) = keypair(SignatureAlgorithm::EcdsaP256, 1);
        let (_, client) = keypair(SignatureAlgorithm::EcdsaP256, 2);
        let mut s = server(ac_pub, 4, 2);
        let readings: Readings = Readings::new();
        let post = request(
            Code::POST,
            "authz-info",
            7,
            &token(&ac, client, &READ_ALL, b"c9"),
        );
        let mut rng = TestRng(3);
        let mut answers = std::vec::Vec::new();
        let mut buf = [0u8; MAX_DATAGRAM];
        for (at, now) in [(host(0, 1), 0), (host(0, 1), 2_000)] {
            let now = Instant::from_millis(now);
            s.handle_datagram(now, NOW, &mut rng, at, &post, &readings);
            let (to, n) = s.poll_transmit(now, &mut buf).expect("answered");
            assert_eq!(to, at);
            answers.push(buf[..n].to_vec());
        }
        assert_eq!(answers[0], answers[1], "the same answer again");
        assert_eq!(Message::parse(&answers[0]).unwrap().code, Code::CREATED);
        assert_eq!(s.resources.stats.duplicates, 1);
        assert_eq!(s.resources.rs.counters.tokens_accepted, 1);
        assert_eq!(s.resources.rs.counters.tokens_replayed, 0);
        // From another address: a replay.
        let now = Instant::from_millis(3_000);
        s.handle_datagram(now, NOW, &mut rng, host(0, 2), &post, &readings);
        let (_, n) = s.poll_transmit(now, &mut buf).unwrap();
        assert_eq!(Message::parse(&buf[..n]).unwrap().code, Code::UNAUTHORIZED);
        assert_eq!(s.resources.rs.counters.tokens_replayed, 1);
        // The same message after EXCHANGE_LIFETIME (247 s): a replay too.
        let now = Instant::from_millis(300_000);
        s.handle_datagram(now, NOW, &mut rng, host(0, 1), &post, &readings);
        let (_, n) = s.poll_transmit(now, &mut buf).unwrap();
        assert_eq!(Message::parse(&buf[..n]).unwrap().code, Code::UNAUTHORIZED);
        assert_eq!(s.resources.rs.counters.tokens_replayed, 2);
    }
}
