//! coaps:// in memory: real `sigil-dtls` clients (and the real device state machine above
//! them) against the server's DTLS layer, dispatcher and service, with virtual time.
//! Authorization by the DTLS-authenticated identity, and the capped tables under floods.

use sigil_coap::{Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_device::{Device, DeviceConfig, Event, MemoryStorage, PublishOutcome};
use sigil_dtls::{Config, Connection, Credentials, Session, Trust};
use sigil_identity::Identity;
use sigil_objects::senml::{Record, Value};
use sigil_server::secure::DtlsConfig;
use sigil_server::Store;
use sigil_testkit::Seeded;
use sigil_time::UnixTime;
use std::net::SocketAddr;
use std::time::Duration;

use common::{
    addr, coap_get, ms, run, AnyServer, Client, Peer, Process, Restore, Secure as Server, NOW,
};
use sigil_testkit::server as common;

/// The server with its access-control server, which signs with the server's key; tokens
/// live 60 s here.
fn server(tune: impl FnOnce(&mut DtlsConfig)) -> Server {
    with_service(tune, |_| {})
}

/// The server with its access-control server and `service` applied to its service config.
fn with_service(
    tune: impl FnOnce(&mut DtlsConfig),
    service: impl FnOnce(&mut sigil_server::service::ServiceConfig),
) -> Server {
    Server::fresh(
        tune,
        service,
        Process {
            authority: true,
            ..Process::default()
        },
    )
}

/// The server after a crash (`Server::restart`): the new process has other secrets and
/// randomness, takes the database's credentials and restores the sessions kept there.
/// Returns how many sessions came back.
fn restart(s: Server) -> (Server, usize) {
    let s = s.restart(Process {
        secret: 8,
        rng: 4321,
        restore: Restore::WithCredentials,
        ..Process::default()
    });
    let n = s.restored;
    (s, n)
}

/// A DTLS client at port `port`'s address (its handshake's randomness from `seed`).
fn client(port: u16, creds: Credentials<'_>, seed: u64, now: u64) -> Client {
    Client::connect(addr(port), Config::default(), creds, seed, now)
}

fn device(seed: u64, alg: SignatureAlgorithm) -> (Device<RustCrypto>, MemoryStorage) {
    let mut storage = MemoryStorage::default();
    let config = DeviceConfig {
        algorithm: alg,
        ..Default::default()
    };
    let d = Device::boot(
        RustCrypto,
        config,
        &mut storage,
        &mut Seeded(seed),
        &[],
        &[],
    )
    .unwrap();
    (d, storage)
}

fn publish(c: &mut Client, now: u64) {
    let (dev, st) = c.device.as_mut().unwrap();
    let r = [Record {
        name: Some("t"),
        unit: Some("Cel"),
        value: Some(Value::Number(21.5)),
        ..Default::default()
    }];
    dev.publish(
        sigil_time::Instant::from_millis(now),
        st,
        &r,
        Some(sigil_time::UnixTime::from_secs(NOW)),
    )
    .unwrap();
}

fn acked(c: &Client) -> usize {
    c.events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Published {
                    outcome: PublishOutcome::Acknowledged,
                    ..
                }
            )
        })
        .count()
}

/// A new Ed25519 device whose identity is provisioned with PSK `key`; returns the identity
/// as text (the PSK identity its client presents).
fn provisioned_psk_device(s: &mut Server, seed: u64, key: [u8; 16]) -> String {
    let (dev, _) = device(seed, SignatureAlgorithm::Ed25519);
    s.provision(dev.identity(), Some(&key));
    dev.identity().to_string()
}

/// A PSK client on port `port` presenting identity `text`.
fn psk_client(port: u16, text: &str, key: &[u8; 16], seed: u64, now: u64) -> Client {
    client(
        port,
        Credentials::Psk {
            identity: text.as_bytes(),
            key,
        },
        seed,
        now,
    )
}

/// A PSK client on port `port` that asks to resume `session`.
fn resuming_psk_client(
    port: u16,
    text: &str,
    key: &[u8; 16],
    session: &Session,
    seed: u64,
    now: u64,
) -> Client {
    let mut c = psk_client(port, text, key, seed, now);
    c.conn = Connection::resume(
        RustCrypto,
        AnyServer,
        Config::default(),
        &mut Seeded(seed),
        Credentials::Psk {
            identity: text.as_bytes(),
            key,
        },
        session,
        ms(now),
    )
    .unwrap();
    c
}

/// The client asks for /.well-known/core inside its session and gets 2.05 Content.
fn assert_discovery_works(s: &mut Server, c: &mut Client, now: &mut u64, mid: u16, for_ms: u64) {
    c.conn.send(&coap_get(".well-known/core", mid)).unwrap();
    run(s, &mut [&mut *c], now, for_ms);
    assert_eq!(
        Message::parse(c.inbox.last().unwrap()).unwrap().code,
        Code::CONTENT
    );
}

#[test]
fn psk_device_registers_and_publishes_over_coaps() {
    let mut s = server(|_| {});
    let (dev, st) = device(1, SignatureAlgorithm::Ed25519);
    let id = *dev.identity();
    s.provision(&id, Some(&[9; 16]));
    let ident = id.to_string();
    let mut now = 0;
    let mut c = client(
        1,
        Credentials::Psk {
            identity: ident.as_bytes(),
            key: &[9; 16],
        },
        5,
        now,
    );
    c.device = Some((dev, st));
    run(&mut s, &mut [&mut c], &mut now, 3_000);
    assert!(c.conn.is_established());
    assert!(
        c.device.as_ref().unwrap().0.can_publish(),
        "registered over coaps://"
    );
    for _ in 0..3 {
        publish(&mut c, now);
        run(&mut s, &mut [&mut c], &mut now, 500);
    }
    assert_eq!(acked(&c), 3);
    assert_eq!(s.count("publish.accepted"), 3);
    assert_eq!(s.count("dtls.handshake_completed"), 1);
    assert!(s.layer.authenticated().contains(&id));
    // close_notify frees the session at once.
    c.conn.close().unwrap();
    run(&mut s, &mut [&mut c], &mut now, 100);
    assert_eq!(s.layer.sessions(), 0);
    assert_eq!(s.count("dtls.session_closed"), 1);
}

#[test]
fn rpk_device_pinned_to_its_identity_registers_and_publishes() {
    let mut s = server(|_| {});
    let (dev, st) = device(2, SignatureAlgorithm::EcdsaP256);
    let id = *dev.identity();
    s.provision(&id, None);
    let key = SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &st_key(&st)).unwrap();
    let mut now = 0;
    let mut c = client(2, Credentials::RawPublicKey(Some(&key)), 6, now);
    c.device = Some((dev, st));
    run(&mut s, &mut [&mut c], &mut now, 3_000);
    assert!(c.conn.is_established());
    publish(&mut c, now);
    run(&mut s, &mut [&mut c], &mut now, 500);
    assert_eq!(acked(&c), 1);
    assert_eq!(s.count("publish.accepted"), 1);
}

fn st_key(st: &MemoryStorage) -> Vec<u8> {
    use sigil_device::DeviceStorage;
    let mut st = st.clone();
    st.load_key().unwrap().unwrap().to_bytes().to_vec()
}

#[test]
fn a_session_authenticated_as_one_identity_cannot_act_for_another() {
    let mut s = server(|_| {});
    // The victim device and an attacker that holds a valid PSK for its own identity.
    let (victim, vst) = device(3, SignatureAlgorithm::Ed25519);
    let (attacker, _) = device(4, SignatureAlgorithm::Ed25519);
    s.provision(victim.identity(), Some(&[1; 16]));
    s.provision(attacker.identity(), Some(&[2; 16]));
    let mut now = 0;
    // The victim registers and publishes over its own session.
    let vid = victim.identity().to_string();
    let mut v = client(
        3,
        Credentials::Psk {
            identity: vid.as_bytes(),
            key: &[1; 16],
        },
        7,
        now,
    );
    v.device = Some((victim, vst));
    run(&mut s, &mut [&mut v], &mut now, 3_000);
    publish(&mut v, now);
    run(&mut s, &mut [&mut v], &mut now, 500);
    assert_eq!(acked(&v), 1);
    // The attacker, authenticated as itself, replays the victim's registration and a fresh
    // copy of its signed reading over its own session: both refused by identity.
    let aid = attacker.identity().to_string();
    let mut a = client(
        4,
        Credentials::Psk {
            identity: aid.as_bytes(),
            key: &[2; 16],
        },
        8,
        now,
    );
    run(&mut s, &mut [&mut a], &mut now, 2_000);
    assert!(a.conn.is_established());
    let (vdev, _) = device(3, SignatureAlgorithm::Ed25519);
    let mut reg = Vec::new();
    {
        // Build the victim's registration as the victim's own state machine would.
        let mut st = MemoryStorage::default();
        let mut d = Device::boot(
            RustCrypto,
            DeviceConfig::default(),
            &mut st,
            &mut Seeded(3),
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(d.identity(), vdev.identity());
        d.handle_timeout(sigil_time::Instant::ZERO, &mut st)
            .unwrap();
        let mut buf = [0u8; 2048];
        while let Some(n) = d.poll_transmit(&mut buf) {
            reg.push(buf[..n].to_vec());
        }
    }
    assert!(!reg.is_empty());
    for m in &reg {
        a.conn.send(m).unwrap();
    }
    run(&mut s, &mut [&mut a], &mut now, 500);
    assert_eq!(
        s.count("register.rejected.dtls_identity_mismatch"),
        1,
        "{:?}",
        s.stats.snapshot()
    );
    let answer = Message::parse(a.inbox.last().unwrap()).unwrap();
    assert_eq!(answer.code, Code::FORBIDDEN);
    let publication = v.sent.last().unwrap().clone();
    assert_eq!(Message::parse(&publication).unwrap().code, Code::PUT);
    a.conn.send(&publication).unwrap();
    run(&mut s, &mut [&mut a], &mut now, 500);
    assert_eq!(s.count("publish.rejected.dtls_identity_mismatch"), 1);
    assert_eq!(
        Message::parse(a.inbox.last().unwrap()).unwrap().code,
        Code::FORBIDDEN
    );
    // Reads stay open to any authenticated peer.
    assert_discovery_works(&mut s, &mut a, &mut now, 77, 200);
}

#[test]
fn unknown_psk_and_unpinned_keys_get_no_session() {
    let mut s = server(|_| {});
    let mut now = 0;
    let mut c = client(
        5,
        Credentials::Psk {
            identity: b"06af05053d7deaac9aef246d4b188825",
            key: &[3; 16],
        },
        9,
        now,
    );
    run(&mut s, &mut [&mut c], &mut now, 2_000);
    assert!(!c.conn.is_established());
    let stranger = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Seeded(10))
        .unwrap();
    let mut r = client(6, Credentials::RawPublicKey(Some(&stranger)), 11, now);
    run(&mut s, &mut [&mut r], &mut now, 2_000);
    assert!(!r.conn.is_established());
    // Server-only authentication is refused too while client keys are required.
    let mut anon = client(7, Credentials::RawPublicKey(None), 12, now);
    run(&mut s, &mut [&mut anon], &mut now, 2_000);
    assert!(!anon.conn.is_established());
    // Each learns it from a fatal alert at once instead of retransmitting into silence.
    for x in [&c, &r, &anon] {
        assert!(x.conn.failure().is_some(), "{:?}", x.conn.state());
    }
    assert_eq!(s.layer.sessions(), 0);
    assert!(
        s.count("dtls.handshake_failed") >= 3,
        "{:?}",
        s.stats.snapshot()
    );
}

#[test]
fn a_revoked_identity_loses_its_psk_at_the_next_handshake() {
    let mut s = server(|_| {});
    let (dev, _) = device(12, SignatureAlgorithm::Ed25519);
    let id = *dev.identity();
    s.provision(&id, Some(&[4; 16]));
    let text = id.to_string();
    let mut now = 0;
    let mut c = psk_client(8, &text, &[4; 16], 13, now);
    run(&mut s, &mut [&mut c], &mut now, 2_000);
    assert!(c.conn.is_established());
    Store::open(&s.db)
        .unwrap()
        .revoke_identity(&id, NOW)
        .unwrap();
    let mut again = psk_client(9, &text, &[4; 16], 14, now);
    run(&mut s, &mut [&mut again], &mut now, 2_000);
    assert!(!again.conn.is_established());
}

/// Builds a ClientHello datagram as a real client would send it first (no cookie).
fn first_client_hello(seed: u64) -> Vec<u8> {
    let mut c = Connection::connect(
        RustCrypto,
        AnyServer,
        Config::default(),
        &mut Seeded(seed),
        Credentials::Psk {
            identity: b"x",
            key: &[1; 16],
        },
        ms(0),
    )
    .unwrap();
    let mut buf = [0u8; 1500];
    let n = c.poll_transmit(ms(0), &mut buf).unwrap();
    buf[..n].to_vec()
}

#[test]
fn a_flood_of_client_hellos_neither_creates_state_nor_stops_established_sessions() {
    let mut s = server(|c| {
        c.max_handshakes = 16;
        c.max_sessions = 64;
        c.handshake_timeout = Duration::from_secs(10);
    });
    let text = provisioned_psk_device(&mut s, 20, [5; 16]);
    let mut now = 0;
    let mut good = psk_client(20, &text, &[5; 16], 21, now);
    run(&mut s, &mut [&mut good], &mut now, 2_000);
    assert!(good.conn.is_established());

    // 1) 10,000 cookieless ClientHellos from spoofed addresses: only HelloVerifyRequests, no
    // larger than what came in, and no state.
    let hello = first_client_hello(30);
    let mut answered = 0;
    for i in 0..10_000u32 {
        let from = SocketAddr::from(([192, 0, (i >> 8) as u8, i as u8], 1000 + (i % 50000) as u16));
        for (to, bytes) in s.handle(now, vec![(from, hello.clone())]) {
            assert_eq!(to, from);
            assert!(bytes.len() <= hello.len(), "no amplification");
            answered += 1;
        }
    }
    assert_eq!(answered, 10_000);
    assert_eq!(s.layer.handshakes(), 0);

    // 2) Clients that complete the cookie exchange but never finish: the handshake table
    // stops at its cap, the rest are refused and counted.
    let mut stuck: Vec<Client> = (0..40)
        .map(|i| {
            client(
                100 + i,
                Credentials::Psk {
                    identity: b"nobody",
                    key: &[1; 16],
                },
                200 + u64::from(i),
                now,
            )
        })
        .collect();
    for c in &mut stuck {
        // ClientHello → HelloVerifyRequest → ClientHello with cookie; then silence.
        for _ in 0..2 {
            let out = c.outgoing(now);
            for (to, b) in s.handle(now, out) {
                assert_eq!(to, c.addr);
                c.incoming(now, &b);
            }
        }
    }
    assert_eq!(s.layer.handshakes(), 16);
    assert_eq!(s.count("dtls.refused_tables_full"), 24);

    // 3) Meanwhile the established session is served.
    assert_discovery_works(&mut s, &mut good, &mut now, 1, 100);

    // 4) Once the stuck handshakes are stale, a new device gets a slot.
    now += 11_000;
    let (dev2, _) = device(22, SignatureAlgorithm::Ed25519);
    s.provision(dev2.identity(), Some(&[6; 16]));
    let t2 = dev2.identity().to_string();
    let mut late = client(
        21,
        Credentials::Psk {
            identity: t2.as_bytes(),
            key: &[6; 16],
        },
        23,
        now,
    );
    run(&mut s, &mut [&mut late], &mut now, 2_000);
    assert!(late.conn.is_established());
}

#[test]
fn a_full_session_table_evicts_only_idle_sessions() {
    let mut s = server(|c| {
        c.max_sessions = 3;
        c.session_idle = Duration::from_secs(60);
    });
    let mut now = 0;
    let mut clients = vec![];
    for i in 0..4u16 {
        let (dev, _) = device(40 + u64::from(i), SignatureAlgorithm::Ed25519);
        s.provision(dev.identity(), Some(&[i as u8 + 1; 16]));
        clients.push((dev.identity().to_string(), [i as u8 + 1; 16]));
    }
    let mut live: Vec<Client> = clients[..3]
        .iter()
        .enumerate()
        .map(|(i, (id, k))| {
            client(
                50 + i as u16,
                Credentials::Psk {
                    identity: id.as_bytes(),
                    key: k,
                },
                60 + i as u64,
                0,
            )
        })
        .collect();
    for c in &mut live {
        run(&mut s, &mut [c], &mut now, 1_000);
        assert!(c.conn.is_established());
    }
    // The table is full of live sessions: a fourth device is refused.
    let (id4, k4) = &clients[3];
    let mut fourth = client(
        53,
        Credentials::Psk {
            identity: id4.as_bytes(),
            key: k4,
        },
        70,
        now,
    );
    run(&mut s, &mut [&mut fourth], &mut now, 1_000);
    assert!(!fourth.conn.is_established());
    assert_eq!(s.layer.sessions(), 3);
    // Two sessions stay busy; one goes idle past the limit and is the only one evicted.
    for _ in 0..7 {
        now += 10_000;
        for c in &mut live[..2] {
            c.conn
                .send(&coap_get(".well-known/core", now as u16))
                .unwrap();
            run(&mut s, &mut [c], &mut now, 20);
        }
    }
    let mut fifth = client(
        54,
        Credentials::Psk {
            identity: id4.as_bytes(),
            key: k4,
        },
        71,
        now,
    );
    run(&mut s, &mut [&mut fifth], &mut now, 1_000);
    assert!(fifth.conn.is_established());
    assert_eq!(s.count("dtls.session_evicted_idle"), 1);
    for c in &mut live[..2] {
        assert_discovery_works(&mut s, c, &mut now, 9, 20);
    }
}

#[test]
fn a_rebooted_client_replaces_its_session_after_a_new_handshake() {
    let mut s = server(|_| {});
    let text = provisioned_psk_device(&mut s, 80, [8; 16]);
    let mut now = 0;
    let mut c = psk_client(80, &text, &[8; 16], 81, now);
    run(&mut s, &mut [&mut c], &mut now, 1_000);
    assert!(c.conn.is_established());
    // Same address, new connection state (the device rebooted).
    let mut c2 = psk_client(80, &text, &[8; 16], 82, now);
    run(&mut s, &mut [&mut c2], &mut now, 1_000);
    assert!(c2.conn.is_established());
    assert_eq!(s.layer.sessions(), 1);
    assert_eq!(s.count("dtls.session_replaced"), 1);
    assert_discovery_works(&mut s, &mut c2, &mut now, 3, 100);
}

#[test]
fn a_connection_id_keeps_the_session_across_an_address_change() {
    let mut s = server(|_| {});
    let text = provisioned_psk_device(&mut s, 90, [9; 16]);
    let mut now = 0;
    let config = Config {
        connection_id: true,
        ..Config::default()
    };
    let conn = Connection::connect(
        RustCrypto,
        AnyServer,
        config,
        &mut Seeded(91),
        Credentials::Psk {
            identity: text.as_bytes(),
            key: &[9; 16],
        },
        ms(now),
    )
    .unwrap();
    let mut c = client(
        90,
        Credentials::Psk {
            identity: b"x",
            key: &[1; 16],
        },
        1,
        now,
    );
    c.conn = conn;
    run(&mut s, &mut [&mut c], &mut now, 1_000);
    assert!(c.conn.is_established());
    // The device wakes up behind a new address (NAT rebinding, new 6LoWPAN route).
    let old = c.addr;
    c.addr = addr(91);
    c.conn.send(&coap_get(".well-known/core", 5)).unwrap();
    let first = c.outgoing(now);
    let captured = first[0].1.clone();
    run_with(&mut s, &mut c, &mut now, first);
    assert_eq!(
        Message::parse(c.inbox.last().unwrap()).unwrap().code,
        Code::CONTENT
    );
    assert_eq!(s.count("dtls.address_changed"), 1);
    assert_eq!(s.layer.sessions(), 1);
    assert!(s.layer.session_auth(&c.addr).is_some() && s.layer.session_auth(&old).is_none());
    // An attacker replaying that record from a third address does not move the session.
    let replies = s.handle(now, vec![(addr(92), captured)]);
    assert!(replies.is_empty());
    assert_eq!(s.count("dtls.address_changed"), 1);
    assert!(s.layer.session_auth(&c.addr).is_some());
    // A record naming an unknown connection ID is dropped and counted.
    let mut forged = c.outgoing(now);
    assert!(forged.is_empty());
    c.conn.send(&coap_get(".well-known/core", 6)).unwrap();
    forged = c.outgoing(now);
    forged[0].1[11] ^= 0xff;
    forged[0].0 = addr(93);
    let before = s.count("dtls.no_session");
    assert!(s.handle(now, forged).is_empty());
    assert_eq!(s.count("dtls.no_session"), before + 1);
}

/// Delivers `sent` (already taken from the client) and runs until quiet.
fn run_with(s: &mut Server, c: &mut Client, now: &mut u64, sent: Vec<(SocketAddr, Vec<u8>)>) {
    for (to, bytes) in s.handle(*now, sent) {
        assert_eq!(to, c.addr, "answers go to the new address");
        c.incoming(*now, &bytes);
    }
    run(s, &mut [c], now, 100);
}

#[test]
fn a_cached_session_resumes_with_its_identity_until_the_identity_is_revoked() {
    let mut s = server(|_| {});
    let (dev, _) = device(100, SignatureAlgorithm::Ed25519);
    let id = *dev.identity();
    s.provision(&id, Some(&[7; 16]));
    let text = id.to_string();
    let mut now = 0;
    let mut c = psk_client(100, &text, &[7; 16], 101, now);
    run(&mut s, &mut [&mut c], &mut now, 1_000);
    let session = c.conn.session().expect("the server issues session IDs");
    // Later, from another port (the device rebooted without a connection ID): resumed.
    let mut r = resuming_psk_client(101, &text, &[7; 16], &session, 102, now);
    run(&mut s, &mut [&mut r], &mut now, 1_000);
    assert!(r.conn.resumed());
    assert_eq!(s.count("dtls.resumed"), 1);
    assert_eq!(
        s.layer.session_auth(&r.addr).map(|a| *a.identity()),
        Some(id)
    );
    assert_discovery_works(&mut s, &mut r, &mut now, 1, 100);
    // Revoked: the cached session is refused and the full handshake fails.
    Store::open(&s.db)
        .unwrap()
        .revoke_identity(&id, NOW)
        .unwrap();
    let mut z = resuming_psk_client(102, &text, &[7; 16], &session, 103, now);
    run(&mut s, &mut [&mut z], &mut now, 1_000);
    assert!(!z.conn.is_established());
    assert_eq!(s.count("dtls.resumed"), 1);
}

#[test]
fn a_client_that_starts_over_mid_handshake_is_not_blocked() {
    let mut s = server(|_| {});
    let text = provisioned_psk_device(&mut s, 110, [3; 16]);
    let mut now = 0;
    // The first attempt gets as far as the server's flight, then the device reboots.
    let mut first = psk_client(110, &text, &[3; 16], 111, now);
    for _ in 0..2 {
        let out = first.outgoing(now);
        for (_, b) in s.handle(now, out) {
            first.incoming(now, &b);
        }
    }
    assert_eq!(s.layer.handshakes(), 1);
    // A spoofed ClientHello (no cookie) from that address changes nothing.
    let spoof = {
        let mut c = client(
            110,
            Credentials::Psk {
                identity: b"x",
                key: &[1; 16],
            },
            5,
            now,
        );
        c.outgoing(now)
    };
    let replies = s.handle(now, spoof);
    assert_eq!(replies.len(), 1, "a HelloVerifyRequest only");
    assert_eq!(s.layer.handshakes(), 1);
    // The rebooted device (new random) completes at once, well before the stale handshake
    // would have timed out.
    let mut again = psk_client(110, &text, &[3; 16], 112, now);
    run(&mut s, &mut [&mut again], &mut now, 1_000);
    assert!(again.conn.is_established());
    assert_eq!(s.count("dtls.handshake_restarted"), 1);
}

/// Sessions kept in the database: after a crash of the server (all its memory lost), a PSK
/// device goes on publishing in its session with no new handshake and no record dropped;
/// a session whose identity was revoked meanwhile is not restored, and its row is deleted.
#[test]
fn sessions_in_the_database_survive_a_server_crash() {
    let s = server(|_| {});
    let (mut s, restored) = restart(s);
    assert_eq!(restored, 0);
    let (dev, st) = device(31, SignatureAlgorithm::Ed25519);
    let id = *dev.identity();
    s.provision(&id, Some(&[5; 16]));
    let ident = id.to_string();
    let mut now = 0;
    let mut c = psk_client(31, &ident, &[5; 16], 32, now);
    c.device = Some((dev, st));
    run(&mut s, &mut [&mut c], &mut now, 3_000);
    assert!(c.device.as_ref().unwrap().0.can_publish());
    publish(&mut c, now);
    run(&mut s, &mut [&mut c], &mut now, 500);
    assert_eq!(acked(&c), 1);
    assert_eq!(s.stored_sessions().len(), 1);
    // Saved at the handshake, then its read mark before each batch of records is acted on.
    assert_eq!(
        s.count("dtls.session_saved"),
        1 + s.count("dtls.read_mark_saved")
    );
    assert!(s.count("dtls.read_mark_saved") >= 1);

    let (mut s, restored) = restart(s);
    assert_eq!(restored, 1);
    assert_eq!(s.layer.sessions(), 1);
    for _ in 0..3 {
        publish(&mut c, now);
        run(&mut s, &mut [&mut c], &mut now, 500);
    }
    assert_eq!(acked(&c), 4, "published in the restored session");
    assert_eq!(s.count("dtls.handshake_started"), 0);
    assert_eq!(s.count("dtls.records_dropped"), 0);
    assert_eq!(s.count("dtls.no_session"), 0);
    assert_eq!(s.count("publish.accepted"), 3);

    // Revoked behind the server's back, the row left in place (`Store::revoke_identity`
    // deletes it too; an older `sigil provision` did not).
    rusqlite::Connection::open(&s.db)
        .unwrap()
        .execute(
            "UPDATE identities SET revoked_at = ?2 WHERE identity = ?1",
            rusqlite::params![id.to_string(), NOW],
        )
        .unwrap();
    assert_eq!(s.stored_sessions().len(), 1);
    let (s, restored) = restart(s);
    assert_eq!(
        restored, 0,
        "a revoked identity's session does not come back"
    );
    assert_eq!(s.count("dtls.session_not_restored"), 1);
    assert_eq!(s.stored_sessions().len(), 0);
}

/// A row the server did not write (another server's key, or altered) is not restored.
#[test]
fn a_stored_session_from_another_key_is_refused() {
    let s = server(|_| {});
    let (mut s, _) = restart(s);
    let (dev, _) = device(41, SignatureAlgorithm::Ed25519);
    let id = *dev.identity();
    s.provision(&id, Some(&[6; 16]));
    let mut now = 0;
    let mut c = psk_client(41, &id.to_string(), &[6; 16], 42, now);
    run(&mut s, &mut [&mut c], &mut now, 2_000);
    assert!(c.conn.is_established());
    assert_eq!(s.stored_sessions().len(), 1);
    // One byte of the record flipped: its MAC no longer verifies.
    let db = rusqlite::Connection::open(&s.db).unwrap();
    let mut record: Vec<u8> = db
        .query_row("SELECT record FROM dtls_sessions", [], |r| r.get(0))
        .unwrap();
    record[20] ^= 1;
    db.execute("UPDATE dtls_sessions SET record = ?1", [&record])
        .unwrap();
    drop(db);
    let (s, restored) = restart(s);
    assert_eq!(restored, 0);
    assert_eq!(s.count("dtls.session_not_restored"), 1);
    assert_eq!(s.stored_sessions().len(), 0);
}

/// A PSK device whose handshake runs as a CoAP resource on the coaps:// port.
fn coap_carrier_device(s: &mut Server, port: u16, seed: u64, now: u64) -> (Client, Identity) {
    let (dev, st) = device(seed, SignatureAlgorithm::Ed25519);
    let id = *dev.identity();
    s.provision(&id, Some(&[seed as u8; 16]));
    let ident = id.to_string();
    let key = [seed as u8; 16];
    let creds = Credentials::Psk {
        identity: ident.as_bytes(),
        key: &key,
    };
    let mut c = client(port, creds, seed, now).over_coap(creds, seed + 2, now);
    c.device = Some((dev, st));
    (c, id)
}

/// Only the cookie exchange and the `PUT` that creates the session resource, then silence:
/// the codes of the server's answers, each addressed to `c`.
fn open_half_over_coap(s: &mut Server, c: &mut Client, now: u64) -> Vec<Code> {
    let mut answers = vec![];
    for _ in 0..2 {
        let sent = c.outgoing(now);
        for (to, bytes) in s.handle(now, sent) {
            assert_eq!(to, c.addr);
            answers.push(Message::parse(&bytes).unwrap().code);
            if let Some(hs) = c.carrier.as_mut() {
                let _ = hs.handle_datagram(ms(now), &bytes, &mut c.rng);
            }
        }
    }
    answers
}

#[test]
fn a_handshake_over_coap_becomes_a_session_that_registers_publishes_and_survives_a_crash() {
    let s = server(|_| {});
    let (mut s, _) = restart(s);
    let mut now = 0;
    let (mut c, id) = coap_carrier_device(&mut s, 41, 41, now);
    run(&mut s, &mut [&mut c], &mut now, 3_000);
    assert!(c.is_established());
    assert!(c.device.as_ref().unwrap().0.can_publish(), "registered");
    for _ in 0..2 {
        publish(&mut c, now);
        run(&mut s, &mut [&mut c], &mut now, 500);
    }
    assert_eq!(acked(&c), 2);
    // The handshake went over CoAP only; the session is an ordinary one, stored.
    assert_eq!(s.count("dtls_coap.handshake_completed"), 1);
    assert_eq!(s.count("dtls_coap.hello_verify"), 1);
    assert_eq!(s.count("dtls.handshake_started"), 0);
    assert_eq!(s.count("dtls.handshake_completed"), 1);
    assert_eq!(
        s.count("dtls_coap.sessions"),
        0,
        "handed to the session table"
    );
    assert!(s.layer.authenticated().contains(&id));
    assert_eq!(s.stored_sessions().len(), 1);

    // kill -9 of the server: the session comes back from the database, no new handshake.
    let (mut s, restored) = restart(s);
    assert_eq!(restored, 1);
    publish(&mut c, now);
    run(&mut s, &mut [&mut c], &mut now, 500);
    assert_eq!(acked(&c), 3);
    assert_eq!(s.count("dtls_coap.created"), 0);
    assert_eq!(s.count("dtls.handshake_completed"), 0);
    assert_eq!(s.count("publish.accepted"), 1);

    // close_notify (authenticated) ends it.
    c.traffic.as_mut().unwrap().close().unwrap();
    run(&mut s, &mut [&mut c], &mut now, 100);
    assert_eq!(s.layer.sessions(), 0);
    assert_eq!(s.stored_sessions().len(), 0);
}

#[test]
fn handshakes_over_coap_share_the_hosts_rate_and_an_unknown_psk_gets_no_session() {
    let mut s = server(|c| {
        c.handshake_burst_per_host = 1;
        c.handshakes_per_host_per_sec = 0;
    });
    let mut now = 0;
    let (mut a, _) = coap_carrier_device(&mut s, 51, 51, now);
    run(&mut s, &mut [&mut a], &mut now, 2_000);
    assert!(a.is_established());
    // Same host (10.0.0.x is one address per port here: use the same address, other port).
    let (mut b, _) = coap_carrier_device(&mut s, 51, 52, now);
    b.addr.set_port(b.addr.port() + 1);
    run(&mut s, &mut [&mut b], &mut now, 100);
    assert!(!b.is_established());
    assert_eq!(s.count("dtls.refused_host_rate"), 1);
    assert_eq!(s.count("dtls_coap.not_admitted"), 1);
    assert_eq!(s.layer.sessions(), 1);

    // A PSK identity the server does not know: the handshake fails, nothing is kept.
    let mut c = client(
        52,
        Credentials::Psk {
            identity: b"unknown",
            key: &[1; 16],
        },
        61,
        now,
    )
    .over_coap(
        Credentials::Psk {
            identity: b"unknown",
            key: &[1; 16],
        },
        62,
        now,
    );
    run(&mut s, &mut [&mut c], &mut now, 3_000);
    assert!(!c.is_established());
    assert_eq!(s.layer.sessions(), 1);
    assert_eq!(s.count("dtls_coap.sessions"), 0);
}

#[test]
fn a_host_opening_many_handshakes_over_coap_holds_only_its_share_and_sessions_stay() {
    let mut s = server(|_| {});
    let mut now = 0;
    // A device from another host with an established session.
    let (mut honest, id) = coap_carrier_device(&mut s, 70, 70, now);
    run(&mut s, &mut [&mut honest], &mut now, 2_000);
    assert!(honest.is_established());
    // Eight clients from one host (other ports) that get their 2.01 and then go quiet.
    let mut flood: Vec<Client> = (0..8)
        .map(|i| {
            let (mut c, _) = coap_carrier_device(&mut s, 71, 80 + i, now);
            c.addr.set_port(50_000 + i as u16);
            c
        })
        .collect();
    for c in &mut flood {
        open_half_over_coap(&mut s, c, now);
    }
    s.layer.publish();
    // At most half of one of the carrier's tables; the rest refused with 5.03.
    let held = s.count("dtls_coap.sessions");
    assert_eq!(held, 4, "the host's share");
    assert_eq!(s.count("dtls_coap.peer_limit"), 4);
    // The established session is untouched and still carries requests.
    assert!(s.layer.authenticated().contains(&id));
    publish(&mut honest, now);
    run(&mut s, &mut [&mut honest], &mut now, 500);
    assert_eq!(acked(&honest), 1);
    // The abandoned handshakes expire (30 s) and their slots come back.
    now += 31_000;
    let _ = s.handle(now, vec![]);
    s.layer
        .handle_timeout(ms(now), UnixTime::from_secs(NOW + 40), &mut vec![]);
    s.layer.publish();
    assert_eq!(s.count("dtls_coap.sessions"), 0);
    assert_eq!(s.count("dtls_coap.expired"), 4);
}

#[test]
fn handshakes_over_coap_in_progress_count_against_the_hosts_sessions() {
    let mut s = server(|c| c.max_sessions_per_host = 2);
    let mut now = 0;
    let (mut a, _) = coap_carrier_device(&mut s, 90, 90, now);
    run(&mut s, &mut [&mut a], &mut now, 2_000);
    assert!(a.is_established());
    // The same host: one more handshake fits the host's two sessions and stays half open;
    // a third is refused after its cookie, before any handshake work.
    let half_open = |port: u16, seed: u64, s: &mut Server| {
        let (mut c, _) = coap_carrier_device(s, 90, seed, now);
        c.addr.set_port(port);
        open_half_over_coap(s, &mut c, now)
    };
    assert_eq!(
        half_open(61_001, 91, &mut s),
        [Code::UNAUTHORIZED, Code::CREATED]
    );
    assert_eq!(
        half_open(61_002, 92, &mut s),
        [Code::UNAUTHORIZED, Code::SERVICE_UNAVAILABLE]
    );
    assert_eq!(s.count("dtls.refused_host_sessions"), 1);
    assert_eq!(s.count("dtls_coap.not_admitted"), 1);
}

#[test]
fn a_replayed_client_hello_with_its_cookie_opens_nothing_two_cookie_rotations_later() {
    let mut s = server(|_| {});
    let mut c = psk_client(95, "x", &[1; 16], 95, 0);
    // The ClientHello, its HelloVerifyRequest, and the ClientHello with the cookie, kept.
    let first = c.outgoing(0);
    for (_, d) in s.handle(0, first) {
        c.incoming(0, &d);
    }
    let with_cookie = c.outgoing(0);
    assert_eq!(with_cookie.len(), 1);
    let replay = |s: &mut Server, t: u64| {
        let started = s.count("dtls.handshake_started");
        let _ = s.handle(t, with_cookie.clone());
        // Each try is a new handshake or nothing; drop what it made.
        s.count("dtls.handshake_started") - started
    };
    assert_eq!(replay(&mut s, 100), 1, "a fresh cookie is accepted");
    // The half-open handshake expires (30 s) and the secret turns once.
    let _ = s.handle(60_500, vec![]);
    assert_eq!(s.count("dtls.cookie_rotations"), 1);
    assert_eq!(replay(&mut s, 61_000), 1, "after one rotation still");
    let _ = s.handle(122_000, vec![]);
    let hvr = s.count("dtls.hello_verify");
    assert_eq!(
        replay(&mut s, 122_100),
        0,
        "two rotations later: no handshake"
    );
    assert_eq!(
        s.count("dtls.hello_verify"),
        hvr + 1,
        "a new HelloVerifyRequest instead"
    );
    assert_eq!(s.count("dtls.cookie_rotations"), 2);
}

/// A sensor (an Ed25519 device whose PSK is `[seed; 16]`) that registered and published one
/// reading over coaps://: its client, identity and topic path (`ps/N/<href>`).
fn published_sensor(s: &mut Server, seed: u64, now: &mut u64) -> (Client, Identity, String) {
    let (dev, st) = device(seed, SignatureAlgorithm::Ed25519);
    let sensor = *dev.identity();
    s.provision(&sensor, Some(&[seed as u8; 16]));
    let mut c = psk_client(
        seed as u16,
        &sensor.to_string(),
        &[seed as u8; 16],
        seed,
        *now,
    );
    c.device = Some((dev, st));
    run(s, &mut [&mut c], now, 3_000);
    publish(&mut c, *now);
    run(s, &mut [&mut c], now, 500);
    assert_eq!(acked(&c), 1);
    let regs = Store::open(&s.db).unwrap().registrations().unwrap();
    let href = regs[0]
        .links
        .split('<')
        .nth(1)
        .and_then(|l| l.split('>').next())
        .unwrap();
    (c, sensor, format!("ps/{}{}", regs[0].id, href))
}

/// A reader: an identity provisioned with the PSK `[seed; 16]`.
fn reader(s: &mut Server, seed: u64) -> Identity {
    let (d, _) = device(seed, SignatureAlgorithm::Ed25519);
    s.provision(d.identity(), Some(&[seed as u8; 16]));
    *d.identity()
}

/// A GET of the sensor's latest reading inside `c`'s session; the answer's code.
fn read_latest(s: &mut Server, c: &mut Client, topic: &str, mid: u16, now: &mut u64) -> Code {
    let before = c.inbox.len();
    let req = coap_get(topic, mid);
    match c.traffic.as_mut() {
        Some(t) => t.send(&req).unwrap(),
        None => c.conn.send(&req).unwrap(),
    }
    run(s, &mut [&mut *c], now, 300);
    assert_eq!(c.inbox.len(), before + 1, "one answer");
    Message::parse(c.inbox.last().unwrap()).unwrap().code
}

#[test]
fn with_authorized_reads_only_the_sensor_and_granted_readers_read_it() {
    let mut s = with_service(|_| {}, |c| c.authorize_reads = true);
    let mut now = 0;
    // A sensor publishes one reading over coaps://.
    let (_c, sensor, topic) = published_sensor(&mut s, 101, &mut now);
    // Two readers with sessions of their own; only one is granted the sensor.
    let (granted, other) = (reader(&mut s, 102), reader(&mut s, 103));
    Store::open(&s.db)
        .unwrap()
        .grant_read(&granted, &sensor, NOW)
        .unwrap();
    let (g, o) = (granted.to_string(), other.to_string());
    let mut a = psk_client(102, &g, &[102; 16], 102, now);
    let mut b = psk_client(103, &o, &[103; 16], 103, now);
    run(&mut s, &mut [&mut a, &mut b], &mut now, 3_000);
    let (ga, gb) = (&topic, &topic);
    assert_eq!(
        read_latest(&mut s, &mut a, ga, 500, &mut now),
        Code::CONTENT
    );
    assert_eq!(
        read_latest(&mut s, &mut b, gb, 501, &mut now),
        Code::FORBIDDEN
    );
    assert_eq!(s.count("read.rejected.not_granted"), 1);
    // Withdrawn: the next read is refused.
    Store::open(&s.db)
        .unwrap()
        .revoke_read(&granted, &sensor)
        .unwrap();
    assert_eq!(
        read_latest(&mut s, &mut a, ga, 502, &mut now),
        Code::FORBIDDEN
    );
    // Without a session: 4.01.
    let plain = s.d.handle_at(
        vec![("10.9.9.9:5683".parse().unwrap(), coap_get(&topic, 503))],
        ms(now),
        UnixTime::from_secs(NOW + (now / 1000) as i64),
    );
    assert_eq!(
        Message::parse(&plain[0].1).unwrap().code,
        Code::UNAUTHORIZED
    );
    assert_eq!(s.count("read.rejected.no_session"), 1);
}

fn coap_post(path: &str, mid: u16, content_format: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = [0u8; 1024];
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::POST, mid, &[2]).unwrap();
    b.uri_path(path).unwrap();
    b.uint_option(12, u32::from(content_format)).unwrap();
    let n = b.finish_with_payload(payload).unwrap();
    buf[..n].to_vec()
}

/// Sends `req` inside `c`'s session; the answer's code and payload.
fn exchange(s: &mut Server, c: &mut Client, req: &[u8], now: &mut u64) -> (Code, Vec<u8>) {
    let before = c.inbox.len();
    match c.traffic.as_mut() {
        Some(t) => t.send(req).unwrap(),
        None => c.conn.send(req).unwrap(),
    }
    run(s, &mut [&mut *c], now, 300);
    assert_eq!(c.inbox.len(), before + 1, "one answer");
    let m = Message::parse(c.inbox.last().unwrap()).unwrap();
    (m.code, m.payload.to_vec())
}

/// POST /token for `objects` (read) inside `c`'s session.
fn ask_token(
    s: &mut Server,
    c: &mut Client,
    objects: &[&str],
    mid: u16,
    now: &mut u64,
) -> (Code, Vec<u8>) {
    ask_token_with(s, c, objects, sigil_ace::Permissions::READ, None, mid, now)
}

/// POST /token for `objects` with `permissions`, binding the key of `req_cnf` if given, with
/// its proof of possession for the client identity named with it (`req_cnf_pop`).
fn ask_token_with(
    s: &mut Server,
    c: &mut Client,
    objects: &[&str],
    permissions: sigil_ace::Permissions,
    req_cnf: Option<(&SecretKey, &Identity)>,
    mid: u16,
    now: &mut u64,
) -> (Code, Vec<u8>) {
    let pop = req_cnf.map(|(sk, client)| {
        let pk = RustCrypto.public_key(sk).unwrap();
        let mut input = [0u8; sigil_ace::REQ_CNF_POP_INPUT_MAX];
        let n = sigil_ace::req_cnf_pop_input(&client.to_string(), &pk, &mut input).unwrap();
        (pk, RustCrypto.sign(sk, &input[..n]).unwrap())
    });
    let entries: Vec<sigil_ace::ScopeEntry<'_>> = objects
        .iter()
        .map(|o| sigil_ace::ScopeEntry {
            object: o,
            permissions,
        })
        .collect();
    let mut body = [0u8; 512];
    let n = sigil_ace::TokenRequest {
        scope: Some(sigil_ace::Scope::new(&entries)),
        req_cnf: pop
            .as_ref()
            .map(|(key, _)| sigil_ace::Confirmation::PublicKey {
                kid: None,
                key: *key,
            }),
        req_cnf_pop: pop.as_ref().map(|(_, sig)| &sig.0[..]),
        ..Default::default()
    }
    .encode(&mut body)
    .unwrap();
    exchange(s, c, &coap_post("token", mid, 19, &body[..n]), now)
}

/// The access-control server and the DTLS profile (RFC 9200, RFC 9202) end to end in memory:
/// a granted reader gets a token with a symmetric PoP key, posts it, and reads over a session
/// keyed by it; the token is accepted once; a reader granted nothing gets no token for the
/// sensor, and its `rd` token does not read the sensor; revoking the subject and the token's
/// expiry both take effect on sessions already open.
#[test]
fn a_token_from_the_ac_reads_what_its_scope_allows_until_revoked_or_expired() {
    let mut s = with_service(|_| {}, |c| c.authorize_reads = true);
    let mut now = 0;
    let (_c, sensor, topic) = published_sensor(&mut s, 111, &mut now);
    let (granted, other) = (reader(&mut s, 112), reader(&mut s, 113));
    Store::open(&s.db)
        .unwrap()
        .grant_read(&granted, &sensor, NOW)
        .unwrap();
    let sensor_text = sensor.to_string();

    // Without a session /token answers nothing useful: the reader opens its own.
    let mut a = psk_client(112, &granted.to_string(), &[112; 16], 112, now);
    run(&mut s, &mut [&mut a], &mut now, 3_000);
    let (code, body) = ask_token(&mut s, &mut a, &[&sensor_text, "rd"], 600, &mut now);
    assert_eq!(code, Code::CREATED);
    let resp = sigil_ace::TokenResponse::parse(&body).unwrap();
    let Some(sigil_ace::Confirmation::Symmetric { kid, key }) = resp.cnf else {
        panic!("a PSK client gets a symmetric PoP key");
    };
    let (kid, key, token) = (kid.to_vec(), key.to_vec(), resp.access_token.to_vec());
    assert_eq!(resp.ace_profile, Some(sigil_ace::PROFILE_COAP_DTLS));
    assert_eq!(s.count("token.issued"), 1);
    // Posted once: accepted; again: replayed.
    let post = |mid| coap_post("authz-info", mid, 61, &token);
    assert_eq!(
        exchange(&mut s, &mut a, &post(601), &mut now).0,
        Code::CREATED
    );
    let (code, body) = exchange(&mut s, &mut a, &post(602), &mut now);
    assert_eq!(code, Code::UNAUTHORIZED);
    assert_eq!(
        sigil_ace::AceError::parse(&body).unwrap().description,
        Some("replayed")
    );
    assert_eq!(s.count("authz.refused.replayed"), 1);

    // The token's session: PSK identity = kid, PSK = the PoP key.
    let key16: [u8; 16] = key.clone().try_into().unwrap();
    let mut t = client(
        114,
        Credentials::Psk {
            identity: &kid,
            key: &key16,
        },
        114,
        now,
    );
    run(&mut s, &mut [&mut t], &mut now, 3_000);
    assert!(t.is_established(), "the token's PSK opens a session");
    assert_eq!(
        read_latest(&mut s, &mut t, &topic, 700, &mut now),
        Code::CONTENT
    );
    // A token session asks for no tokens (4.00 unauthorized_client, RFC 9200 §5.8.3).
    let (code, body) = ask_token(&mut s, &mut t, &["rd"], 701, &mut now);
    assert_eq!(code, Code::BAD_REQUEST);
    assert_eq!(
        sigil_ace::AceError::parse(&body).unwrap().code,
        sigil_ace::AceErrorCode::UnauthorizedClient
    );

    // A reader granted nothing: no token for the sensor; its rd token reads no sensor.
    let mut b = psk_client(115, &other.to_string(), &[113; 16], 115, now);
    run(&mut s, &mut [&mut b], &mut now, 3_000);
    let (code, body) = ask_token(&mut s, &mut b, &[&sensor_text], 800, &mut now);
    assert_eq!(code, Code::BAD_REQUEST);
    assert_eq!(
        sigil_ace::AceError::parse(&body).unwrap().code,
        sigil_ace::AceErrorCode::InvalidScope
    );
    let (code, body) = ask_token(&mut s, &mut b, &[&sensor_text, "rd"], 801, &mut now);
    assert_eq!(code, Code::CREATED);
    let resp = sigil_ace::TokenResponse::parse(&body).unwrap();
    let narrowed: Vec<_> = resp
        .scope
        .expect("a narrowed scope is named")
        .iter()
        .collect();
    assert_eq!(narrowed.len(), 1);
    assert_eq!(narrowed[0].object, "rd");
    let Some(sigil_ace::Confirmation::Symmetric {
        kid: kid_b,
        key: key_b,
    }) = resp.cnf
    else {
        panic!()
    };
    let (kid_b, key_b): (Vec<u8>, [u8; 16]) = (kid_b.to_vec(), key_b.try_into().unwrap());
    let token_b = resp.access_token.to_vec();
    assert_eq!(
        exchange(
            &mut s,
            &mut b,
            &coap_post("authz-info", 802, 61, &token_b),
            &mut now
        )
        .0,
        Code::CREATED
    );
    let mut tb = client(
        116,
        Credentials::Psk {
            identity: &kid_b,
            key: &key_b,
        },
        116,
        now,
    );
    run(&mut s, &mut [&mut tb], &mut now, 3_000);
    assert_eq!(
        exchange(&mut s, &mut tb, &coap_get("rd-lookup/ep", 900), &mut now).0,
        Code::CONTENT,
        "rd is in its scope"
    );
    assert_eq!(
        read_latest(&mut s, &mut tb, &topic, 901, &mut now),
        Code::FORBIDDEN,
        "the sensor is not"
    );

    // Revoking the granted reader's identity ends its token's session and its own at once
    // (docs/security.md, "Revocation"); the other reader's token session stays.
    Store::open(&s.db)
        .unwrap()
        .revoke_identity(&granted, NOW)
        .unwrap();
    run(&mut s, &mut [&mut t, &mut a, &mut tb], &mut now, 100);
    assert!(!t.is_established() && !a.is_established());
    assert!(tb.is_established());
    assert_eq!(s.count("dtls.session_revoked"), 2);

    // After its 60 s the other token no longer looks anything up.
    run(&mut s, &mut [&mut tb], &mut now, 61_000);
    assert_eq!(
        exchange(&mut s, &mut tb, &coap_get("rd-lookup/ep", 902), &mut now).0,
        Code::UNAUTHORIZED
    );
    assert!(s.count("read.rejected.token_expired") + s.count("read.rejected.no_token") >= 1);
}

/// Asymmetric proof of possession (RFC 9202 §3.2): a granted reader asks for a token bound to a
/// fresh key that is on no list; the token is signed and names the server's key (`rs_cnf`);
/// once posted, a raw-public-key handshake with exactly that key succeeds and reads, while
/// another unlisted key gets no session. And a device publishes through a token whose scope
/// lets it publish to its own topic.
#[test]
fn a_token_binds_a_raw_public_key_and_a_device_publishes_through_its_token() {
    let mut s = with_service(|_| {}, |c| c.authorize_reads = true);
    let mut now = 0;
    let (mut c, sensor, topic) = published_sensor(&mut s, 121, &mut now);
    let reader = reader(&mut s, 122);
    Store::open(&s.db)
        .unwrap()
        .grant_read(&reader, &sensor, NOW)
        .unwrap();
    let mut r = psk_client(122, &reader.to_string(), &[122; 16], 122, now);
    run(&mut s, &mut [&mut r], &mut now, 3_000);

    let fresh = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Seeded(123))
        .unwrap();
    let sensor_text = sensor.to_string();
    let (code, body) = ask_token_with(
        &mut s,
        &mut r,
        &[&sensor_text],
        sigil_ace::Permissions::READ,
        Some((&fresh, &reader)),
        1000,
        &mut now,
    );
    assert_eq!(code, Code::CREATED);
    let resp = sigil_ace::TokenResponse::parse(&body).unwrap();
    assert!(
        resp.cnf.is_none(),
        "no symmetric key for a public-key binding"
    );
    assert!(
        matches!(resp.rs_cnf, Some(sigil_ace::Confirmation::PublicKey { .. })),
        "the server's key to pin"
    );
    assert_eq!(resp.access_token[0], 0xd2, "a COSE_Sign1");
    let token = resp.access_token.to_vec();
    // Before the token is posted the fresh key gets no session.
    let mut early = client(124, Credentials::RawPublicKey(Some(&fresh)), 124, now);
    run(&mut s, &mut [&mut early], &mut now, 3_000);
    assert!(!early.is_established());
    assert_eq!(
        exchange(
            &mut s,
            &mut r,
            &coap_post("authz-info", 1001, 61, &token),
            &mut now
        )
        .0,
        Code::CREATED
    );
    let mut holder = client(125, Credentials::RawPublicKey(Some(&fresh)), 125, now);
    run(&mut s, &mut [&mut holder], &mut now, 3_000);
    assert!(holder.is_established(), "the token's key is trusted");
    assert_eq!(
        read_latest(&mut s, &mut holder, &topic, 1002, &mut now),
        Code::CONTENT
    );
    let other = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Seeded(126))
        .unwrap();
    let mut stranger = client(126, Credentials::RawPublicKey(Some(&other)), 126, now);
    run(&mut s, &mut [&mut stranger], &mut now, 3_000);
    assert!(!stranger.is_established(), "a key no token binds");

    // The device asks for read and publish on its own topic; a reader cannot get publish.
    let (code, _) = ask_token_with(
        &mut s,
        &mut r,
        &[&sensor_text],
        sigil_ace::Permissions::PUBLISH,
        None,
        1003,
        &mut now,
    );
    assert_eq!(code, Code::BAD_REQUEST, "publishing is the device's own");
    // (The device's own session carries its CoAP; it asks from a second session.)
    let mut own = psk_client(128, &sensor_text, &[121; 16], 128, now);
    run(&mut s, &mut [&mut own], &mut now, 3_000);
    let (code, body) = ask_token_with(
        &mut s,
        &mut own,
        &[&sensor_text],
        sigil_ace::Permissions::READ_PUBLISH,
        None,
        1004,
        &mut now,
    );
    assert_eq!(code, Code::CREATED);
    let resp = sigil_ace::TokenResponse::parse(&body).unwrap();
    let Some(sigil_ace::Confirmation::Symmetric { kid, key }) = resp.cnf else {
        panic!()
    };
    let (kid, key): (Vec<u8>, [u8; 16]) = (kid.to_vec(), key.try_into().unwrap());
    let token = resp.access_token.to_vec();
    assert_eq!(
        exchange(
            &mut s,
            &mut own,
            &coap_post("authz-info", 1005, 61, &token),
            &mut now
        )
        .0,
        Code::CREATED
    );
    let mut t = client(
        127,
        Credentials::Psk {
            identity: &kid,
            key: &key,
        },
        127,
        now,
    );
    t.device = c.device.take();
    run(&mut s, &mut [&mut t], &mut now, 3_000);
    assert!(t.is_established());
    let before = s.count("publish.accepted");
    publish(&mut t, now);
    run(&mut s, &mut [&mut t], &mut now, 1_000);
    assert_eq!(
        s.count("publish.accepted"),
        before + 1,
        "published through its token"
    );
}

/// A CoAP request `code` to `path` with `queries`, a content format and a payload.
fn coap_request(
    code: Code,
    path: &str,
    queries: &[&str],
    content_format: Option<u16>,
    payload: &[u8],
    mid: u16,
) -> Vec<u8> {
    let mut buf = [0u8; 1024];
    let token = mid.to_be_bytes();
    let mut b = MessageBuilder::new(&mut buf, MessageType::Confirmable, code, mid, &token).unwrap();
    b.uri_path(path).unwrap();
    if let Some(cf) = content_format {
        b.uint_option(12, u32::from(cf)).unwrap();
    }
    for q in queries {
        b.option(15, q.as_bytes()).unwrap();
    }
    let n = b.finish_with_payload(payload).unwrap();
    buf[..n].to_vec()
}

/// A SenML-CBOR pack of one temperature.
fn senml_pack(v: f64) -> Vec<u8> {
    let mut out = [0u8; 128];
    let rec = [Record {
        base_name: Some("urn:dev:psk:"),
        name: Some("temp"),
        unit: Some("Cel"),
        value: Some(Value::Number(v)),
        ..Default::default()
    }];
    let n = sigil_objects::senml::encode_cbor(&rec, &mut out).unwrap();
    out[..n].to_vec()
}

/// A node with only a pre-shared key: an identity assigned at provisioning (not derived from
/// any key) and its PSK, with a coaps:// session of its own. Registers its topic `m` with
/// content format `cf`; returns the session and the topic path.
fn psk_only_node(
    s: &mut Server,
    id: Identity,
    psk: &[u8; 16],
    cf: u16,
    now: &mut u64,
) -> (Client, String) {
    s.provision(&id, Some(psk));
    assert!(Store::open(&s.db).unwrap().mark_psk_only(&id).unwrap());
    let mut c = psk_client(40, &id.to_string(), psk, 40, *now);
    run(s, &mut [&mut c], now, 2_000);
    assert!(c.is_established());
    let ep = format!("ep={id}");
    let links = format!("</m>;rt=\"sigil.env\";ct={cf}");
    let (code, _) = exchange(
        s,
        &mut c,
        &coap_request(
            Code::POST,
            "rd",
            &[&ep, "lt=600"],
            Some(40),
            links.as_bytes(),
            1,
        ),
        now,
    );
    assert_eq!(
        code,
        Code::CREATED,
        "a keyless registration over the node's own session"
    );
    let regs = Store::open(&s.db).unwrap().registrations().unwrap();
    let reg = regs.iter().find(|r| r.ep == id).unwrap();
    assert_eq!(reg.key, None);
    assert_eq!(reg.owner, sigil_server::store::Ownership::Session);
    (c, format!("ps/{}/m", reg.id))
}

fn stored_protection(s: &Server, id: &Identity) -> Vec<(u64, String)> {
    rusqlite::Connection::open(&s.db)
        .unwrap()
        .prepare("SELECT seq, protection FROM readings WHERE ep = ?1 ORDER BY seq")
        .unwrap()
        .query_map([id.to_string()], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get(1)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Nodes without public-key crypto (docs/security.md): a PSK-only node registers without a
/// key over its own session, and publishes COSE_Mac0 readings under its reading key; the
/// broker checks the tag, the kid and the sequence number, stores the protection, and refuses
/// a wrong tag, a replay, and a keyless registration anywhere but the node's own session.
#[test]
fn a_psk_only_node_registers_over_its_session_and_publishes_maced_readings() {
    use sigil_objects::mac::{mac_reading, ReadingKey};
    let mut s = server(|_| {});
    let mut now = 0;
    let id = Identity::from_bytes([0x5a; 16]);
    let psk = [0x33; 16];
    let (mut c, topic) = psk_only_node(&mut s, id, &psk, 17, &mut now);
    let key = ReadingKey::derive(&RustCrypto, &psk, &id);
    let mac = |seq: u64| {
        let mut out = [0u8; 256];
        let fresh = sigil_objects::Freshness {
            seq,
            timestamp: Some(NOW as u64),
            lsb_bits: None,
        };
        let n = mac_reading(&RustCrypto, &key, &id, &fresh, &senml_pack(21.5), &mut out).unwrap();
        out[..n].to_vec()
    };
    let put =
        |payload: &[u8], mid: u16| coap_request(Code::PUT, &topic, &[], Some(17), payload, mid);
    assert_eq!(
        exchange(&mut s, &mut c, &put(&mac(1), 2), &mut now).0,
        Code::CHANGED
    );
    assert_eq!(
        exchange(&mut s, &mut c, &put(&mac(2), 3), &mut now).0,
        Code::CHANGED
    );
    assert_eq!(
        stored_protection(&s, &id),
        vec![(1, "mac".into()), (2, "mac".into())]
    );
    assert_eq!(s.count("publish.accepted.mac"), 2);
    // A tag made under another key.
    let mut forged = mac(3);
    let last = forged.len() - 1;
    forged[last] ^= 1;
    assert_eq!(
        exchange(&mut s, &mut c, &put(&forged, 4), &mut now).0,
        Code::UNAUTHORIZED
    );
    assert_eq!(s.count("publish.rejected.bad_tag"), 1);
    // An old reading again, in a new message: a replay (Reset, RFC 8387 §8.2).
    let before = c.inbox.len();
    let replay = put(&mac(1), 5);
    match c.traffic.as_mut() {
        Some(t) => t.send(&replay).unwrap(),
        None => c.conn.send(&replay).unwrap(),
    }
    run(&mut s, &mut [&mut c], &mut now, 300);
    assert_eq!(c.inbox.len(), before + 1);
    assert_eq!(
        Message::parse(c.inbox.last().unwrap()).unwrap().mtype,
        MessageType::Reset
    );
    assert_eq!(s.count("publish.rejected.replay"), 1);
    // A valid MACed reading without the node's session is refused: a holder of the reading
    // key (every granted reader) must not publish as the node, nor push its number ahead.
    let plain = s.d.handle_at(
        vec![(addr(41), put(&mac(3), 6))],
        ms(now),
        UnixTime::from_secs(NOW + (now / 1000) as i64),
    );
    assert_eq!(
        Message::parse(&plain[0].1).unwrap().code,
        Code::UNAUTHORIZED
    );
    assert_eq!(s.count("publish.rejected.no_session"), 1);
    assert_eq!(
        exchange(&mut s, &mut c, &put(&mac(3), 7), &mut now).0,
        Code::CHANGED
    );
    assert_eq!(stored_protection(&s, &id).len(), 3);
    // A keyless registration over plain CoAP, or over another identity's session, is refused.
    let ep = format!("ep={id}");
    let plain = s.d.handle_at(
        vec![(
            addr(41),
            coap_request(Code::POST, "rd", &[&ep], Some(40), b"</m>;ct=17", 7),
        )],
        ms(now),
        UnixTime::from_secs(NOW + (now / 1000) as i64),
    );
    assert_eq!(Message::parse(&plain[0].1).unwrap().code, Code::BAD_REQUEST);
    let other = Identity::from_bytes([0x6b; 16]);
    s.provision(&other, Some(&[0x44; 16]));
    let mut o = psk_client(42, &other.to_string(), &[0x44; 16], 42, now);
    run(&mut s, &mut [&mut o], &mut now, 2_000);
    let (code, _) = exchange(
        &mut s,
        &mut o,
        &coap_request(Code::POST, "rd", &[&ep], Some(40), b"</m>;ct=17", 8),
        &mut now,
    );
    assert_eq!(
        code,
        Code::BAD_REQUEST,
        "another identity's session announces no key for it"
    );
    // Even the node's own valid reading is not taken over a session that speaks for someone
    // else.
    let (code, _) = exchange(&mut s, &mut o, &put(&mac(4), 10), &mut now);
    assert_eq!(
        code,
        Code::UNAUTHORIZED,
        "its session does not speak for the node"
    );
    assert_eq!(s.count("publish.rejected.no_session"), 2);
    assert_eq!(stored_protection(&s, &id).len(), 3);
    // An identity with a PSK that was not provisioned as a PSK-only node (a signing device's
    // or a reader's) cannot register without a key, even over its own session: it must
    // announce the key its identity is bound to.
    let other_ep = format!("ep={other}");
    let (code, _) = exchange(
        &mut s,
        &mut o,
        &coap_request(Code::POST, "rd", &[&other_ep], Some(40), b"</m>;ct=17", 11),
        &mut now,
    );
    assert_eq!(code, Code::BAD_REQUEST);
    assert!(s.count("register.rejected.missing_key") >= 1);
}

/// A PSK-only node that sends plain SenML over its own DTLS session: the broker numbers and
/// stores it as `session`; a retransmission is answered without a second copy; the same pack
/// without the node's session (plain CoAP, or another identity's session) is refused.
#[test]
fn unprotected_readings_are_taken_only_over_the_nodes_own_session() {
    let mut s = server(|_| {});
    let mut now = 0;
    let id = Identity::from_bytes([0x7c; 16]);
    let (mut c, topic) = psk_only_node(&mut s, id, &[0x21; 16], 112, &mut now);
    let put =
        |v: f64, mid: u16| coap_request(Code::PUT, &topic, &[], Some(112), &senml_pack(v), mid);
    assert_eq!(
        exchange(&mut s, &mut c, &put(20.0, 2), &mut now).0,
        Code::CHANGED
    );
    assert_eq!(
        exchange(&mut s, &mut c, &put(20.5, 3), &mut now).0,
        Code::CHANGED
    );
    // The same message again (a CoAP retransmission whose answer was lost).
    assert_eq!(
        exchange(&mut s, &mut c, &put(20.5, 3), &mut now).0,
        Code::CHANGED
    );
    assert_eq!(
        stored_protection(&s, &id),
        vec![(1, "session".into()), (2, "session".into())]
    );
    assert_eq!(s.count("publish.accepted.session"), 2);
    let plain = s.d.handle_at(
        vec![(addr(41), put(30.0, 9))],
        ms(now),
        UnixTime::from_secs(NOW + (now / 1000) as i64),
    );
    assert_eq!(
        Message::parse(&plain[0].1).unwrap().code,
        Code::UNAUTHORIZED
    );
    assert_eq!(s.count("publish.rejected.no_session"), 1);
    assert_eq!(stored_protection(&s, &id).len(), 2);
    // The node's session is never stored (its readings have no number of their own, so a
    // window restored from an older row would take recorded records again): a restarted
    // server has nothing to restore, and the node handshakes anew.
    assert_eq!(s.stored_sessions().len(), 0);
    drop(c);
    let (mut s, restored) = restart(s);
    assert_eq!(restored, 0);
    let mut c2 = psk_client(43, &id.to_string(), &[0x21; 16], 43, now);
    run(&mut s, &mut [&mut c2], &mut now, 2_000);
    assert!(c2.is_established(), "a new handshake");
    assert_eq!(stored_protection(&s, &id).len(), 2);
}

/// The reading key of a PSK-only node goes, as a COSE_Key, only to a coaps:// session that
/// may read the node: a granted reader gets exactly the key the node MACs with; a reader
/// without a grant, and a request without a session, get nothing.
#[test]
fn the_reading_key_is_disclosed_only_to_granted_readers_over_coaps() {
    use sigil_objects::mac::ReadingKey;
    let mut s = server(|_| {});
    let mut now = 0;
    let id = Identity::from_bytes([0x1d; 16]);
    let psk = [0x55; 16];
    let (_node, _) = psk_only_node(&mut s, id, &psk, 17, &mut now);
    let granted = reader(&mut s, 201);
    let stranger = reader(&mut s, 202);
    Store::open(&s.db)
        .unwrap()
        .grant_read(&granted, &id, NOW)
        .unwrap();
    let path = format!("keys/{id}");
    let mut g = psk_client(50, &granted.to_string(), &[201; 16], 50, now);
    let mut x = psk_client(51, &stranger.to_string(), &[202; 16], 51, now);
    run(&mut s, &mut [&mut g, &mut x], &mut now, 2_000);
    let (code, body) = exchange(&mut s, &mut g, &coap_get(&path, 1), &mut now);
    assert_eq!(code, Code::CONTENT);
    let want = ReadingKey::derive(&RustCrypto, &psk, &id);
    // {1: 4 (kty Symmetric), 2: kid, 3: 4 (HMAC 256/64), -1: k}
    let mut d = sigil_objects::cbor::Decoder::new(&body);
    assert_eq!(d.map().unwrap(), 4);
    assert_eq!((d.i64().unwrap(), d.i64().unwrap()), (1, 4));
    assert_eq!(
        (d.i64().unwrap(), d.bytes().unwrap()),
        (2, &id.as_bytes()[..])
    );
    assert_eq!((d.i64().unwrap(), d.i64().unwrap()), (3, 4));
    assert_eq!(
        (d.i64().unwrap(), d.bytes().unwrap()),
        (-1, &want.as_bytes()[..])
    );
    assert!(d.is_at_end());
    let (code, body) = exchange(&mut s, &mut x, &coap_get(&path, 2), &mut now);
    assert_eq!(code, Code::FORBIDDEN);
    assert!(body.len() < 32);
    // Without a session, nothing is said, not even whether the node exists.
    for p in [
        path.clone(),
        format!("keys/{}", Identity::from_bytes([0x99; 16])),
    ] {
        let plain = s.d.handle_at(
            vec![(addr(41), coap_get(&p, 3))],
            ms(now),
            UnixTime::from_secs(NOW + (now / 1000) as i64),
        );
        assert_eq!(
            Message::parse(&plain[0].1).unwrap().code,
            Code::UNAUTHORIZED
        );
    }
    // An identity that is no PSK-only node (here a reader with a PSK) has no reading key.
    let (code, _) = exchange(
        &mut s,
        &mut g,
        &coap_get(&format!("keys/{stranger}"), 4),
        &mut now,
    );
    assert_eq!(code, Code::NOT_FOUND);
    // Revoked, the granted reader gets nothing more: its session ends.
    Store::open(&s.db)
        .unwrap()
        .revoke_identity(&granted, NOW)
        .unwrap();
    g.conn.send(&coap_get(&path, 5)).unwrap();
    let before = g.inbox.len();
    run(&mut s, &mut [&mut g], &mut now, 300);
    assert_eq!(g.inbox.len(), before, "no answer");
    assert!(!g.is_established());
    assert_eq!(s.count("keys.disclosed"), 1);
}

/// Trusts no server key.
struct NoServer;
impl Trust for NoServer {
    fn trusted_key(&self, _: &PublicKey) -> bool {
        false
    }
}

/// A log sink the tests read back.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_refused_handshake_is_logged_with_its_own_peers_claim_on_either_carrier() {
    let mut s = server(|_| {});
    let sink = Captured::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let mut now = 0;
    let (good, stranger, anon_addr) = tracing::subscriber::with_default(subscriber, || {
        // A provisioned device completes its handshake over CoAP: what it claimed must not
        // stay behind for the next peer's failure.
        let (mut c, id) = coap_carrier_device(&mut s, 51, 51, now);
        run(&mut s, &mut [&mut c], &mut now, 3_000);
        assert!(c.is_established());
        // Then a client that does not trust the server's key ends its handshake with an
        // alert on the record layer, before it claims anything.
        let key = RustCrypto
            .generate(SignatureAlgorithm::EcdsaP256, &mut Seeded(52))
            .unwrap();
        let mut wary = Connection::connect(
            RustCrypto,
            NoServer,
            Config::default(),
            &mut Seeded(53),
            Credentials::RawPublicKey(Some(&key)),
            ms(now),
        )
        .unwrap();
        let mut buf = [0u8; 1500];
        for _ in 0..200 {
            let _ = wary.handle_timeout(ms(now));
            let mut sent = vec![];
            while let Some(n) = wary.poll_transmit(ms(now), &mut buf) {
                sent.push((addr(52), buf[..n].to_vec()));
            }
            for (_, d) in s.handle(now, sent) {
                let _ = wary.handle_datagram(ms(now), &d);
            }
            now += 10;
        }
        assert!(!wary.is_established());
        let anon = client(52, Credentials::RawPublicKey(None), 53, now);
        // And an unknown PSK identity is refused over CoAP: its line names that identity.
        let stranger = "06af05053d7deaac9aef246d4b188825";
        let creds = Credentials::Psk {
            identity: stranger.as_bytes(),
            key: &[3; 16],
        };
        let mut x = client(54, creds, 55, now).over_coap(creds, 56, now);
        run(&mut s, &mut [&mut x], &mut now, 2_000);
        assert!(!x.is_established());
        (id.to_string(), stranger, anon.addr)
    });
    let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("claimed=")).collect();
    assert!(
        !lines.iter().any(|l| l.contains(&good)),
        "a completed handshake's claim named on another peer's line:\n{log}"
    );
    let anon_line = lines
        .iter()
        .find(|l| l.contains(&anon_addr.to_string()))
        .unwrap_or_else(|| panic!("no line for the keyless client:\n{log}"));
    assert!(anon_line.contains("claimed=-"), "{anon_line}");
    let refused = lines
        .iter()
        .find(|l| l.contains("over CoAP refused") && l.contains(&addr(54).to_string()))
        .unwrap_or_else(|| panic!("no line for the refused handshake over CoAP:\n{log}"));
    assert!(
        refused.contains(&format!("claimed={stranger} (PSK identity)")),
        "{refused}"
    );
    assert!(refused.contains("WARN"), "at the default level: {refused}");
}
