//! Records anyone can forge (epoch 0: no keys needed, only the peer's address) must not end
//! an established connection, nor a handshake once the peer's records are protected: they
//! are dropped and counted, like a record that fails authentication (RFC 6347 §4.1.2.7).
//! Each test is named after what the forger sends.

use sigil_crypto::RustCrypto;
use sigil_dtls::record::Record;
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, NoTrust, ServerCredentials, State, Stateless, Trust,
};
use sigil_testkit::dtls::{OnePsk, SENSOR_PSK};
use sigil_testkit::Counter;
use sigil_time::Instant;

type Client = Connection<RustCrypto, NoTrust>;
type Server = Connection<RustCrypto, OnePsk>;

const PEER: &[u8] = b"[fe80::1]:5684";

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn drain<T: Trust>(c: &mut Connection<RustCrypto, T>) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut buf = [0u8; 2048];
    while let Some(n) = c.poll_transmit(Instant::ZERO, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// The records of a datagram, each as its own bytes.
fn split(mut d: &[u8]) -> Vec<Vec<u8>> {
    let mut v = vec![];
    while !d.is_empty() {
        let (_, rest) = Record::parse(d).unwrap();
        v.push(d[..d.len() - rest.len()].to_vec());
        d = rest;
    }
    v
}

/// Client and server after the cookie exchange, the server's flight queued.
fn start() -> (Client, Server) {
    let cookies = CookieKey::new([9; 32]);
    let mut client = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut Counter::new(1, 37),
        Credentials::Psk {
            identity: b"sensor-1",
            key: b"0123456789abcdef",
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
        Config::default(),
        &ServerCredentials {
            psk: true,
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

fn established() -> (Client, Server) {
    let (mut client, mut server) = start();
    loop {
        let (a, b) = (drain(&mut client), drain(&mut server));
        if a.is_empty() && b.is_empty() {
            break;
        }
        for d in a {
            let _ = server.handle_datagram(t(3), &d);
        }
        for d in b {
            let _ = client.handle_datagram(t(3), &d);
        }
    }
    assert_eq!(client.state(), State::Established);
    assert_eq!(server.state(), State::Established);
    (client, server)
}

/// An epoch-0 record: type, DTLS 1.2, epoch 0, `seq`, the body.
fn plaintext(content_type: u8, seq: u64, body: &[u8]) -> Vec<u8> {
    let mut r = vec![content_type, 0xfe, 0xfd, 0, 0];
    r.extend_from_slice(&seq.to_be_bytes()[2..]);
    r.extend_from_slice(&(body.len() as u16).to_be_bytes());
    r.extend_from_slice(body);
    r
}

/// An epoch-1 record with a made-up body (it cannot authenticate).
fn protected(content_type: u8, seq: u64, body: &[u8]) -> Vec<u8> {
    let mut r = plaintext(content_type, seq, body);
    r[4] = 1;
    r
}

/// The connection still carries data both ways after the forgery.
fn still_works(client: &mut Client, server: &mut Server) {
    client.send(b"21.5 Cel").unwrap();
    for d in drain(client) {
        server.handle_datagram(t(10), &d).unwrap();
    }
    let mut buf = [0u8; 64];
    assert_eq!(server.poll_app_data(&mut buf), Some(8));
    server.send(b"ack").unwrap();
    for d in drain(server) {
        client.handle_datagram(t(10), &d).unwrap();
    }
    assert_eq!(client.poll_app_data(&mut buf), Some(3));
}

/// Hands `forged` to both sides of an established connection: each must drop it (no alert,
/// no data delivered) and stay established.
fn both_drop(forged: &[u8]) {
    let (mut client, mut server) = established();
    let mut buf = [0u8; 2048];
    for (side, r) in [
        ("server", server.handle_datagram(t(5), forged)),
        ("client", client.handle_datagram(t(5), forged)),
    ] {
        assert_eq!(
            r.map(|r| r.is_authenticated()),
            Ok(false),
            "the {side} refused a forged record fatally, or took it"
        );
    }
    assert_eq!(server.state(), State::Established);
    assert_eq!(client.state(), State::Established);
    assert!(server.dropped() > 0 && client.dropped() > 0);
    assert_eq!(server.poll_app_data(&mut buf), None);
    assert_eq!(client.poll_app_data(&mut buf), None);
    assert!(
        drain(&mut server).is_empty(),
        "the server answered a forgery"
    );
    assert!(
        drain(&mut client).is_empty(),
        "the client answered a forgery"
    );
    still_works(&mut client, &mut server);
}

#[test]
fn plaintext_application_data_does_not_end_an_established_connection() {
    both_drop(&plaintext(23, 40, b"GET /.well-known/core"));
}

#[test]
fn plaintext_record_of_an_unknown_type_does_not_end_an_established_connection() {
    both_drop(&plaintext(99, 41, b"x"));
}

#[test]
fn plaintext_record_longer_than_a_datagram_does_not_end_an_established_connection() {
    both_drop(&plaintext(22, 42, &[0u8; 1600]));
}

#[test]
fn protected_record_longer_than_a_datagram_does_not_end_an_established_connection() {
    both_drop(&protected(23, 43, &[0u8; 1600]));
}

#[test]
fn malformed_plaintext_alert_does_not_end_an_established_connection() {
    both_drop(&plaintext(21, 44, &[2, 40, 0]));
}

/// The server's handshake once the client's ChangeCipherSpec is in (it waits for the
/// client's Finished in epoch 1): returns the client's Finished record, not yet delivered.
fn server_expects_finished() -> (Client, Server, Vec<u8>) {
    let (mut client, mut server) = start();
    for d in drain(&mut server) {
        client.handle_datagram(t(3), &d).unwrap();
    }
    let records: Vec<Vec<u8>> = drain(&mut client).iter().flat_map(|d| split(d)).collect();
    let (finished, before) = records.split_last().unwrap();
    for r in before {
        server.handle_datagram(t(4), r).unwrap();
    }
    assert_eq!(server.state(), State::ExpectFinished);
    (client, server, finished.clone())
}

/// `forged` reaches the server between the client's ChangeCipherSpec and its Finished: the
/// handshake still completes.
fn handshake_survives(forged: &[u8]) {
    let (mut client, mut server, finished) = server_expects_finished();
    assert_eq!(
        server
            .handle_datagram(t(5), forged)
            .map(|r| r.is_authenticated()),
        Ok(false)
    );
    assert_eq!(server.state(), State::ExpectFinished);
    server.handle_datagram(t(6), &finished).unwrap();
    assert_eq!(server.state(), State::Established);
    for d in drain(&mut server) {
        client.handle_datagram(t(6), &d).unwrap();
    }
    assert_eq!(client.state(), State::Established);
    still_works(&mut client, &mut server);
}

#[test]
fn plaintext_application_data_after_the_peers_change_cipher_spec_does_not_end_the_handshake() {
    handshake_survives(&plaintext(23, 50, b"hello"));
}

#[test]
fn plaintext_finished_after_the_peers_change_cipher_spec_does_not_end_the_handshake() {
    // Finished (20), length 12, the message_seq the server expects next, whole.
    let (_, server, _) = server_expects_finished();
    drop(server);
    for seq in 0..8u16 {
        let mut hs = vec![20, 0, 0, 12];
        hs.extend_from_slice(&seq.to_be_bytes());
        hs.extend_from_slice(&[0, 0, 0, 0, 0, 12]);
        hs.extend_from_slice(&[0xab; 12]);
        handshake_survives(&plaintext(22, 51, &hs));
    }
}

#[test]
fn plaintext_fragment_of_the_finished_does_not_spoil_its_reassembly() {
    // The first 4 bytes of a 12-byte Finished, at each message_seq the server might expect.
    for seq in 0..8u16 {
        let mut hs = vec![20, 0, 0, 12];
        hs.extend_from_slice(&seq.to_be_bytes());
        hs.extend_from_slice(&[0, 0, 0, 0, 0, 4]);
        hs.extend_from_slice(&[0xab; 4]);
        handshake_survives(&plaintext(22, 52, &hs));
    }
}

#[test]
fn plaintext_fragment_of_the_finished_before_the_change_cipher_spec_is_not_joined_to_it() {
    // A 4-byte piece of a 12-byte Finished reaches the server before the client's
    // ChangeCipherSpec (when plaintext is still what the server reads): it waits in the
    // reassembly buffer, and must not be combined with the real, protected Finished.
    for seq in 0..8u16 {
        let (mut client, mut server) = start();
        for d in drain(&mut server) {
            client.handle_datagram(t(3), &d).unwrap();
        }
        let records: Vec<Vec<u8>> = drain(&mut client).iter().flat_map(|d| split(d)).collect();
        let [cke, ccs, finished] = &records[..] else {
            panic!("expected ClientKeyExchange, ChangeCipherSpec, Finished");
        };
        server.handle_datagram(t(4), cke).unwrap();
        assert_eq!(server.state(), State::ExpectChangeCipherSpec);
        let mut hs = vec![20, 0, 0, 12];
        hs.extend_from_slice(&seq.to_be_bytes());
        hs.extend_from_slice(&[0, 0, 0, 0, 0, 4]);
        hs.extend_from_slice(&[0xab; 4]);
        let _ = server.handle_datagram(t(4), &plaintext(22, 60, &hs));
        if server.state() != State::ExpectChangeCipherSpec {
            // Refused outright (a plaintext handshake message where none is expected).
            continue;
        }
        server.handle_datagram(t(5), ccs).unwrap();
        server.handle_datagram(t(5), finished).unwrap();
        assert_eq!(server.state(), State::Established, "message_seq {seq}");
    }
}

#[test]
fn repeated_ends_of_the_previous_flight_get_a_bounded_number_of_answers() {
    // The server sent its flight 4 and waits for the client's flight 5. Each epoch-0 fragment
    // that ends the client's ClientHello (anyone can forge one: a byte at the end, fresh
    // record numbers) looks like a retransmitted flight 3 and is answered with flight 4 again
    // (RFC 6347 §4.2.4), but not without end: that would make the server a reflector.
    let (_client, mut server) = start();
    let first = drain(&mut server);
    assert!(!first.is_empty());
    let mut answers = 0;
    for i in 0..100u64 {
        // ClientHello (1), message_seq 1 (the second ClientHello), its last byte.
        let hs = [1, 0, 0, 100, 0, 1, 0, 0, 99, 0, 0, 1, 0];
        let _ = server.handle_datagram(t(10 + i), &plaintext(22, 1000 + i, &hs));
        if !drain(&mut server).is_empty() {
            answers += 1;
        }
    }
    assert!(
        answers <= Config::default().max_retransmissions,
        "{answers} answers to 100 forged datagrams"
    );
}

#[test]
fn malformed_plaintext_records_after_the_peers_change_cipher_spec_do_not_end_the_handshake() {
    handshake_survives(&plaintext(22, 70, &[0xff])); // a truncated handshake header
    handshake_survives(&plaintext(22, 71, &[20, 0, 0, 12, 0, 9, 0, 0, 0, 0, 0, 0])); // zero-length
    handshake_survives(&plaintext(20, 72, &[2])); // a ChangeCipherSpec that is not [1]
    handshake_survives(&plaintext(21, 73, &[2])); // a truncated alert
}

#[test]
fn application_data_that_overtakes_the_peers_finished_is_dropped_not_fatal() {
    // The server's final flight is ChangeCipherSpec, Finished; its first application record
    // overtakes the Finished. The client must not deliver it (the Finished is not verified
    // yet), and must not give up the handshake over a reordering either.
    let (mut client, mut server) = start();
    for d in drain(&mut server) {
        client.handle_datagram(t(3), &d).unwrap();
    }
    for d in drain(&mut client) {
        server.handle_datagram(t(4), &d).unwrap();
    }
    assert_eq!(server.state(), State::Established);
    let flight6: Vec<Vec<u8>> = drain(&mut server).iter().flat_map(|d| split(d)).collect();
    let [ccs, finished] = &flight6[..] else {
        panic!("expected ChangeCipherSpec, Finished");
    };
    server.send(b"early").unwrap();
    let early = drain(&mut server);
    client.handle_datagram(t(5), ccs).unwrap();
    assert_eq!(
        client
            .handle_datagram(t(5), &early[0])
            .map(|r| r.is_authenticated()),
        Ok(false)
    );
    assert_eq!(client.state(), State::ExpectFinished);
    let mut buf = [0u8; 64];
    assert_eq!(client.poll_app_data(&mut buf), None);
    client.handle_datagram(t(6), finished).unwrap();
    assert_eq!(client.state(), State::Established);
    assert_eq!(
        client.poll_app_data(&mut buf),
        None,
        "delivered before the Finished"
    );
}
