//! What `handle_datagram` reports about a datagram's records ([`Received`]): a caller that acts
//! on a datagram itself (a server following a connection ID to a new address, RFC 9146 §6)
//! needs to know that its records authenticated under the peer's keys and were new, not only
//! that the connection took the datagram without error (a forged or replayed record is
//! dropped silently, RFC 6347 §4.1.2.7).

use sigil_crypto::RustCrypto;
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, NoTrust, Received, ServerCredentials, State,
    Stateless, Trust,
};
use sigil_testkit::dtls::{drain, OnePsk, SENSOR_PSK};
use sigil_testkit::Counter;
use sigil_time::Instant;

type Client = Connection<RustCrypto, NoTrust>;
type Server = Connection<RustCrypto, OnePsk>;

const PEER: &[u8] = b"[fe80::1]:5684";

/// The connection ID the server gives the client: the client's records carry it.
const CID: &[u8] = b"cid-0001";

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn received(authenticated: u16, unprotected: u16, dropped: u16) -> Received {
    Received {
        authenticated,
        unprotected,
        dropped,
    }
}

/// A PSK client and server with a connection ID, after the cookie exchange.
fn start() -> (Client, Server) {
    let cookies = CookieKey::new([9; 32]);
    let config = Config {
        connection_id: true,
        ..Config::default()
    };
    let mut client = Connection::connect(
        RustCrypto,
        NoTrust,
        config,
        &mut Counter::new(1, 37),
        Credentials::Psk {
            identity: SENSOR_PSK.identity,
            key: SENSOR_PSK.key,
        },
        t(0),
    )
    .unwrap();
    let ch1 = drain(&mut client);
    let mut out = [0u8; 512];
    let Stateless::HelloVerify(n) = cookies.respond(&RustCrypto, PEER, &ch1[0], &mut out) else {
        panic!("expected a HelloVerifyRequest");
    };
    client.handle_datagram(t(1), &out[..n]).unwrap();
    let ch2 = drain(&mut client);
    let Stateless::Accept(cookie) = cookies.respond(&RustCrypto, PEER, &ch2[0], &mut out) else {
        panic!("expected the cookie to be accepted");
    };
    let server = Connection::accept(
        RustCrypto,
        SENSOR_PSK,
        config,
        &ServerCredentials {
            psk: true,
            connection_id: CID,
            ..ServerCredentials::NONE
        },
        &mut Counter::new(200, 37),
        cookie,
        &ch2[0],
        t(2),
    )
    .unwrap();
    (client, server)
}

/// Runs the handshake to its end; returns what the server reported for each datagram of the
/// client's it took.
fn handshake<T: Trust, U: Trust>(
    client: &mut Connection<RustCrypto, T>,
    server: &mut Connection<RustCrypto, U>,
) -> Vec<Received> {
    let mut reports = vec![];
    loop {
        let (a, b) = (drain(client), drain(server));
        if a.is_empty() && b.is_empty() {
            break;
        }
        for d in a {
            reports.push(server.handle_datagram(t(3), &d).unwrap());
        }
        for d in b {
            client.handle_datagram(t(3), &d).unwrap();
        }
    }
    assert_eq!(client.state(), State::Established);
    assert_eq!(server.state(), State::Established);
    assert_eq!(server.connection_id(), CID);
    reports
}

/// One application-data record of the client's, as one datagram.
fn record(client: &mut Client, data: &[u8]) -> Vec<u8> {
    client.send(data).unwrap();
    let mut d = drain(client);
    assert_eq!(d.len(), 1);
    d.remove(0)
}

/// `d` with the last byte of its authentication tag flipped: its header (the connection ID,
/// the epoch, a new sequence number) is the real one's; it cannot authenticate.
fn forged(d: &[u8]) -> Vec<u8> {
    let mut f = d.to_vec();
    *f.last_mut().unwrap() ^= 1;
    f
}

#[test]
fn a_forged_record_reports_not_authenticated_and_a_real_one_authenticated() {
    let (mut client, mut server) = start();
    handshake(&mut client, &mut server);
    let real = record(&mut client, b"21.5 Cel");
    let mut buf = [0u8; 64];

    let r = server.handle_datagram(t(4), &forged(&real)).unwrap();
    assert_eq!(r, received(0, 0, 1));
    assert!(!r.is_authenticated());
    assert_eq!(server.poll_app_data(&mut buf), None);

    let r = server.handle_datagram(t(5), &real).unwrap();
    assert_eq!(r, received(1, 0, 0));
    assert!(r.is_authenticated());
    assert_eq!(server.poll_app_data(&mut buf), Some(8));

    // The same record again: it authenticates, but the replay window drops it.
    let r = server.handle_datagram(t(6), &real).unwrap();
    assert_eq!(r, received(0, 0, 1));
    assert!(!r.is_authenticated());

    // A real record with a forged one behind it in the same datagram: the datagram as a whole
    // did not authenticate.
    let next = record(&mut client, b"21.6 Cel");
    let third = record(&mut client, b"21.7 Cel");
    let r = server
        .handle_datagram(t(7), &[&next[..], &forged(&third)[..]].concat())
        .unwrap();
    assert_eq!(r, received(1, 0, 1));
    assert!(!r.is_authenticated());

    // A plaintext record after the handshake: anyone could have sent it.
    let plain = [23, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 50, 0, 1, 0];
    let r = server.handle_datagram(t(8), &plain).unwrap();
    assert!(!r.is_authenticated(), "{r:?}");
    assert_eq!(r.authenticated, 0);
    assert_eq!(server.state(), State::Established);
}

#[test]
fn the_established_traffic_reports_the_same() {
    let (mut client, mut server) = start();
    handshake(&mut client, &mut server);
    let real = record(&mut client, b"21.5 Cel");
    let mut server = server.into_traffic().ok().unwrap();
    let r = server.handle_datagram(t(4), &forged(&real)).unwrap();
    assert_eq!(r, received(0, 0, 1));
    let r = server.handle_datagram(t(5), &real).unwrap();
    assert_eq!(r, received(1, 0, 0));
    assert!(r.is_authenticated());
    let r = server.handle_datagram(t(6), &real).unwrap();
    assert_eq!(r, received(0, 0, 1));
}

/// During the handshake only the client's Finished (epoch 1) authenticates; the rest of its
/// flights are unprotected.
#[test]
fn the_handshake_reports_its_unprotected_records_and_the_authenticated_finished() {
    let (mut client, mut server) = start();
    let reports = handshake(&mut client, &mut server);
    let total = reports.iter().fold(Received::default(), |a, r| Received {
        authenticated: a.authenticated + r.authenticated,
        unprotected: a.unprotected + r.unprotected,
        dropped: a.dropped + r.dropped,
    });
    assert_eq!(total.authenticated, 1, "{reports:?}");
    assert!(total.unprotected >= 2, "{reports:?}");
    assert_eq!(total.dropped, 0, "{reports:?}");
}
