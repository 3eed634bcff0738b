//! The pair itself: a scenario on a perfect link, the same seed giving the same run, the link's
//! MTU, latency and hand-placed loss, and the stateless server's refusal.

use core::time::Duration;
use sigil_crypto::RustCrypto;
use sigil_dtls::wire::AlertDescription;
use sigil_dtls::{Config, Connection, Credentials, Error, NoTrust, ServerCredentials};
use sigil_testkit::dtls::{at, server, Link, Loss, OnePsk, Pair, Side, SENSOR_PSK};
use sigil_testkit::Seeded;

const PSK_ONLY: ServerCredentials<'static> = ServerCredentials {
    psk: true,
    ..ServerCredentials::NONE
};

fn psk_pair(
    link: Link,
    config: Config,
    offer: ServerCredentials<'static>,
) -> Pair<'static, NoTrust, OnePsk> {
    let client = Connection::connect(
        RustCrypto,
        NoTrust,
        config,
        &mut Seeded::new(1),
        Credentials::Psk {
            identity: SENSOR_PSK.identity,
            key: SENSOR_PSK.key,
        },
        at(0),
    )
    .unwrap();
    Pair::new(
        client,
        server(SENSOR_PSK, config, offer, Seeded::new(2)),
        link,
    )
}

#[test]
fn a_psk_handshake_then_data_both_ways() {
    let mut pair = psk_pair(Link::PERFECT, Config::default(), PSK_ONLY);
    assert!(pair.run_until_established(Duration::from_secs(1)));
    // Cookie exchange (3 datagrams), then flights 4, 5 and 6.
    assert_eq!(pair.stats.hello_verify_requests, 1);
    assert_eq!(pair.log[0].to, Side::Server);
    assert_eq!(pair.log[1].to, Side::Client);
    assert_eq!(pair.now(), at(0), "no latency: no time passes");
    pair.send_client(b"21.5 Cel").unwrap();
    pair.send_server(b"ack").unwrap();
    pair.run_until_quiet();
    assert_eq!(pair.server_received, [b"21.5 Cel"]);
    assert_eq!(pair.client_received, [b"ack"]);
    assert!(pair.errors.is_empty(), "{:?}", pair.errors);
    let s = pair.stats;
    assert_eq!(
        s.to_server.bytes + s.to_client.bytes,
        pair.log.iter().map(|d| d.bytes.len() as u64).sum::<u64>()
    );
    assert_eq!(s.client_retransmissions + s.server_retransmissions, 0);
    let (_client, server) = pair.into_traffic();
    assert_eq!(server.peer().psk_identity(), b"sensor-1");
}

#[test]
fn the_same_seed_gives_the_same_run_and_another_seed_another() {
    let run = |seed| {
        let mut pair = psk_pair(Link::lossy(3, seed), Config::default(), PSK_ONLY);
        let ok = pair.run_until_established(Duration::from_secs(600));
        (ok, pair.now(), pair.log, pair.stats)
    };
    let (a, b) = (run(5), run(5));
    assert_eq!(a, b);
    let others: Vec<_> = (6..10).map(run).collect();
    assert!(others.iter().any(|o| o.2 != a.2));
    // At one in three, something was lost or held back, and time passed.
    assert!(a.3.to_server.dropped + a.3.to_client.dropped + a.3.to_server.delayed > 0);
    assert!(a.1 > at(0));
}

#[test]
fn latency_is_one_way_per_datagram() {
    let link = Link {
        latency: Duration::from_millis(100),
        ..Link::PERFECT
    };
    let mut pair = psk_pair(link, Config::default(), PSK_ONLY);
    assert!(pair.run_until_established(Duration::from_secs(10)));
    // ClientHello, HelloVerifyRequest, ClientHello, flight 4, flight 5, flight 6: six crossings.
    assert_eq!(pair.now(), at(600));
    assert_eq!(pair.log.last().unwrap().at, at(500));
}

#[test]
fn datagrams_above_the_mtu_are_lost_and_counted() {
    // The ClientHello goes whole whatever the PMTU: at a 64-byte MTU it never arrives, and the
    // client gives up after its retransmissions.
    let link = Link {
        mtu: Some(64),
        ..Link::PERFECT
    };
    let config = Config {
        pmtu: 64,
        ..Config::default()
    };
    let mut pair = psk_pair(link, config, PSK_ONLY);
    assert!(!pair.run_until_established(Duration::from_secs(600)));
    assert_eq!(pair.client.failure(), Some(Error::HandshakeTimeout));
    assert_eq!(pair.stats.to_server.too_big, pair.stats.to_server.datagrams);
    assert_eq!(pair.stats.client_retransmissions, 8);
    assert!(pair.server.is_none());
}

#[test]
fn a_hand_placed_loss_is_recovered_by_a_retransmission() {
    let mut pair = psk_pair(Link::PERFECT, Config::default(), PSK_ONLY);
    assert!(pair.run_until_accepted());
    // Flight 4 is lost once; the server's timer sends it again a second later.
    pair.lose_next(Side::Client, 1);
    assert!(pair.run_until_established(Duration::from_secs(10)));
    assert_eq!(pair.stats.to_client.dropped, 1);
    assert_eq!(pair.stats.server_retransmissions, 1);
    assert_eq!(pair.now(), at(1_000));
}

#[test]
fn a_refused_client_hello_gets_the_alert_and_no_connection() {
    let mut pair = psk_pair(Link::PERFECT, Config::default(), ServerCredentials::NONE);
    assert!(!pair.run_until_accepted());
    assert!(pair.server.is_none());
    assert_eq!(pair.errors, [Error::NoCommonCipherSuite]);
    pair.run_until_quiet();
    assert_eq!(
        pair.client.failure(),
        Some(Error::PeerAlert(AlertDescription::HANDSHAKE_FAILURE.0))
    );
    assert!(!pair.run_until_established(Duration::from_secs(600)));
}

#[test]
fn one_in_n_sets_every_probability() {
    let l = Loss::one_in(4);
    assert_eq!((l.drop, l.duplicate, l.delay), (0.25, 0.25, 0.25));
    assert_eq!(Loss::NONE.drop, 0.0);
}
