//! The PSK handshake between a real client and a real server in memory, with virtual time:
//! cookie exchange, key agreement, application data both ways, loss and retransmission, and
//! the refusals the state machine owes.

mod common;

use common::{at, drain, Counter, IntoInstant, Keys};
use core::time::Duration;
use sigil_crypto::RustCrypto;
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, NoTrust, ServerCredentials, State, Stateless,
};

const PSK_ONLY: ServerCredentials<'static> = ServerCredentials {
    psk: true,
    key: None,
    require_client_key: false,
    ..ServerCredentials::NONE
};
use sigil_dtls::record::Records;
use sigil_dtls::wire::{AlertDescription, ContentType};
use sigil_dtls::Error;

const PEER: &[u8] = b"[fe80::1]:5684";

type Server = Connection<RustCrypto, Keys>;

/// Runs the cookie exchange and returns the client, the server connection, and the bytes the
/// exchange took (both ClientHellos and the HelloVerifyRequest).
fn start_with(
    config: Config,
    identity: &[u8],
    key: &[u8],
) -> (Connection<RustCrypto, NoTrust>, Server, usize) {
    let cookies = CookieKey::new([9; 32]);
    let mut client = Connection::connect(
        RustCrypto,
        NoTrust,
        config,
        &mut Counter(1),
        Credentials::Psk { identity, key },
        at(0),
    )
    .unwrap();
    let ch1 = drain(&mut client);
    assert_eq!(ch1.len(), 1);
    let mut out = [0u8; 256];
    let Stateless::HelloVerify(n) = cookies.respond(&RustCrypto, PEER, &ch1[0], &mut out) else {
        panic!("expected a HelloVerifyRequest");
    };
    assert!(n <= ch1[0].len(), "no amplification");
    client.handle_datagram(at(1), &out[..n]).unwrap();
    let ch2 = drain(&mut client);
    let Stateless::Accept(cookie) = cookies.respond(&RustCrypto, PEER, &ch2[0], &mut out) else {
        panic!("expected the cookie to be accepted");
    };
    // The cookie is bound to the peer's address.
    assert!(matches!(
        cookies.respond(&RustCrypto, b"[fe80::2]:5684", &ch2[0], &mut out),
        Stateless::HelloVerify(_)
    ));
    let server = Connection::accept(
        RustCrypto,
        Keys,
        config,
        &PSK_ONLY,
        &mut Counter(200),
        cookie,
        &ch2[0],
        at(2),
    )
    .unwrap();
    (client, server, ch1[0].len() + n + ch2[0].len())
}

fn start(config: Config) -> (Connection<RustCrypto, NoTrust>, Server) {
    let (c, s, _) = start_with(config, b"sensor-1", b"0123456789abcdef");
    (c, s)
}

/// Delivers everything queued on both sides until both are quiet.
fn pump(
    client: &mut Connection<RustCrypto, NoTrust>,
    server: &mut Server,
    now: impl IntoInstant,
) -> usize {
    let now = at(now);
    let mut bytes = 0;
    loop {
        let (a, b) = (drain(client), drain(server));
        if a.is_empty() && b.is_empty() {
            return bytes;
        }
        for d in a {
            bytes += d.len();
            let _ = server.handle_datagram(at(now), &d);
        }
        for d in b {
            bytes += d.len();
            let _ = client.handle_datagram(at(now), &d);
        }
    }
}

#[test]
fn psk_handshake_completes_and_application_data_flows_both_ways() {
    let (mut client, mut server) = start(Config::default());
    let bytes = pump(&mut client, &mut server, 3);
    assert_eq!(client.state(), State::Established);
    assert_eq!(server.state(), State::Established);
    assert_eq!(server.psk_identity(), b"sensor-1");
    assert!(bytes < 400, "flights 4-6 took {bytes} bytes");

    client.send(b"21.5 Cel").unwrap();
    let d = drain(&mut client);
    assert_eq!(d.len(), 1);
    server.handle_datagram(at(4), &d[0]).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(server.poll_app_data(&mut buf), Some(8));
    assert_eq!(&buf[..8], b"21.5 Cel");
    // A replayed record is dropped, not delivered twice.
    server.handle_datagram(at(5), &d[0]).unwrap();
    assert_eq!(server.poll_app_data(&mut buf), None);
    assert_eq!(server.dropped(), 1);

    server.send(b"ack").unwrap();
    for d in drain(&mut server) {
        client.handle_datagram(at(6), &d).unwrap();
    }
    assert_eq!(client.poll_app_data(&mut buf), Some(3));
    assert_eq!(client.poll_timeout(), None);
}

#[test]
fn lost_final_flight_is_recovered_by_retransmission() {
    let (mut client, mut server) = start(Config::default());
    // Flight 4 reaches the client; the client's flight 5 is lost.
    for d in drain(&mut server) {
        client.handle_datagram(at(3), &d).unwrap();
    }
    let lost = drain(&mut client);
    assert!(!lost.is_empty());
    let t = client
        .poll_timeout()
        .expect("client waits for the server's Finished");
    assert_eq!(t, at(3 + 1_000));
    client.handle_timeout(at(t)).unwrap();
    // The retransmission uses fresh record sequence numbers.
    let again = drain(&mut client);
    assert_ne!(again, lost);
    for d in &again {
        server.handle_datagram(at(t), d).unwrap();
    }
    assert_eq!(server.state(), State::Established);
    // The server's flight 6 is lost too: the client retransmits flight 5 (timeout doubled),
    // and the server answers the repeated Finished with its last flight (RFC 6347 §4.2.4).
    drain(&mut server);
    let t2 = client.poll_timeout().unwrap();
    assert_eq!(t2, t + Duration::from_millis(2_000));
    client.handle_timeout(at(t2)).unwrap();
    for d in drain(&mut client) {
        server.handle_datagram(at(t2), &d).unwrap();
    }
    for d in drain(&mut server) {
        client.handle_datagram(at(t2), &d).unwrap();
    }
    assert_eq!(client.state(), State::Established);
}

#[test]
fn a_wrong_key_fails_both_sides_with_an_alert_not_data() {
    let (mut client, mut server, _) =
        start_with(Config::default(), b"sensor-1", b"not the right key");
    pump(&mut client, &mut server, 3);
    // The server cannot authenticate the client's Finished (different keys): the record is
    // dropped as a bad MAC, so the server never reaches Established...
    assert_ne!(server.state(), State::Established);
    assert!(server.dropped() > 0);
    assert_eq!(client.state(), State::ExpectChangeCipherSpec);
    assert!(client.send(b"x").is_err());
}

#[test]
fn unknown_identity_gets_the_unknown_psk_identity_alert() {
    let (mut client, mut server, _) = start_with(Config::default(), b"intruder", b"whatever-key");
    for d in drain(&mut server) {
        client.handle_datagram(at(3), &d).unwrap();
    }
    let mut result = Ok(());
    for d in drain(&mut client) {
        result = result.and(server.handle_datagram(at(3), &d));
    }
    assert_eq!(result, Err(Error::UnknownPskIdentity));
    assert_eq!(server.state(), State::Failed(Error::UnknownPskIdentity));
    let alert = drain(&mut server);
    let rec = Records::new(&alert[0]).next().unwrap().unwrap();
    assert_eq!(rec.header.content_type, ContentType::ALERT);
    assert_eq!(rec.fragment, [2, AlertDescription::UNKNOWN_PSK_IDENTITY.0]);
    // After a fatal alert nothing more is processed (a bug class found by state fuzzing).
    assert!(server.handle_datagram(at(4), &alert[0]).is_err());
}

#[test]
fn regression_cve_2017_7243_early_change_cipher_spec_is_never_acted_on() {
    let (mut client, mut server) = start(Config::default());
    // A ChangeCipherSpec before ServerHello: the client has no keys to switch to. It is
    // dropped and counted (over a lossy link a CCS may overtake the messages before it), and
    // the handshake goes on in epoch 0 as if it never came.
    let ccs = [20, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 9, 0, 1, 1];
    let before = client.dropped();
    assert_eq!(client.handle_datagram(at(3), &ccs), Ok(()));
    assert_eq!(client.dropped(), before + 1);
    assert_eq!(client.state(), State::ExpectHelloVerifyOrServerHello);
    assert!(drain(&mut client).is_empty(), "no alert, no answer");
    pump(&mut client, &mut server, 3);
    assert!(client.is_established() && server.is_established());
}

#[test]
fn regression_cve_2020_24585_epoch_0_application_data_is_never_delivered() {
    let (mut client, mut server) = start(Config::default());
    pump(&mut client, &mut server, 3);
    let data = [
        23, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 77, 0, 4, b'e', b'v', b'i', b'l',
    ];
    let _ = server.handle_datagram(at(4), &data);
    let mut buf = [0u8; 16];
    assert_eq!(server.poll_app_data(&mut buf), None);
}

#[test]
fn regression_cve_2021_42141_far_future_and_unknown_epochs_are_dropped() {
    let (mut client, mut server) = start(Config::default());
    pump(&mut client, &mut server, 3);
    for epoch in [2u16, 7, 0xffff] {
        let e = epoch.to_be_bytes();
        let rec = [
            23, 0xfe, 0xfd, e[0], e[1], 0, 0, 0, 0, 0, 1, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0,
        ];
        server.handle_datagram(at(4), &rec).unwrap();
    }
    assert_eq!(server.state(), State::Established);
    assert_eq!(server.dropped(), 3);
}

#[test]
fn the_handshake_gives_up_after_the_configured_retransmissions() {
    let config = Config {
        max_retransmissions: 2,
        initial_timeout: Duration::from_secs(5),
        ..Config::default()
    };
    let mut client = Connection::connect(
        RustCrypto,
        NoTrust,
        config,
        &mut Counter(1),
        Credentials::Psk {
            identity: b"id",
            key: b"key",
        },
        at(0),
    )
    .unwrap();
    drain(&mut client);
    let mut now = at(0);
    let mut waits = vec![];
    while let Some(t) = client.poll_timeout() {
        waits.push((t - now).as_millis());
        now = t;
        let _ = client.handle_timeout(at(now));
        drain(&mut client);
    }
    // The seed's 5 s timer, doubled each time, then the connection fails.
    assert_eq!(waits, [5_000, 10_000, 20_000]);
    assert_eq!(client.state(), State::Failed(Error::HandshakeTimeout));
}

#[test]
fn psk_handshake_bytes_on_the_wire() {
    // Every datagram of a complete handshake, both directions, cookie exchange included.
    let (mut client, mut server, exchange) =
        start_with(Config::default(), b"sensor-1", b"0123456789abcdef");
    let rest = pump(&mut client, &mut server, 3);
    let total = exchange + rest;
    assert!(client.is_established() && server.is_established());
    println!("PSK-CCM8 handshake: cookie exchange {exchange} + flights 4-6 {rest} = {total} bytes");
    // A count, not a timing: OpenSSL 3.0's PSK-CCM8 handshake is larger (674 bytes without
    // its session ticket; docs/benchmarks.md measures both in one run).
    assert!(total < 674, "{total} bytes");
}

#[test]
fn a_cookie_is_bound_to_its_client_hello() {
    // A valid cookie copied into a ClientHello with other parameters is refused: the server
    // answers with a fresh HelloVerifyRequest and creates no state.
    let cookies = CookieKey::new([9; 32]);
    let mut client = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut Counter(1),
        Credentials::Psk {
            identity: b"sensor-1",
            key: b"0123456789abcdef",
        },
        at(0),
    )
    .unwrap();
    let ch1 = drain(&mut client);
    let mut out = [0u8; 256];
    let Stateless::HelloVerify(n) = cookies.respond(&RustCrypto, PEER, &ch1[0], &mut out) else {
        panic!()
    };
    client.handle_datagram(at(1), &out[..n]).unwrap();
    let mut ch2 = drain(&mut client).remove(0);
    assert!(matches!(
        cookies.respond(&RustCrypto, PEER, &ch2, &mut out),
        Stateless::Accept(_)
    ));
    // Change one byte of the client random (record 13 + handshake 12 + version 2 = offset 27).
    ch2[27 + 5] ^= 1;
    assert!(matches!(
        cookies.respond(&RustCrypto, PEER, &ch2, &mut out),
        Stateless::HelloVerify(_)
    ));
}

#[test]
fn forged_epoch_0_records_after_the_handshake_change_nothing() {
    let (mut client, mut server) = start(Config::default());
    pump(&mut client, &mut server, 3);
    // An old ClientKeyExchange fragment (message_seq 2) in plaintext: anyone can forge it. It
    // must not make the server resend its final flight (no reflection) ...
    let old = [
        22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 90, 0, 12, 16, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0,
    ];
    server.handle_datagram(at(4), &old).unwrap();
    assert!(drain(&mut server).is_empty());
    // ... and a plaintext fatal alert must not end the connection.
    let alert = [21, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 91, 0, 2, 2, 40];
    server.handle_datagram(at(5), &alert).unwrap();
    assert_eq!(server.state(), State::Established);
    client.send(b"still here").unwrap();
    for d in drain(&mut client) {
        server.handle_datagram(at(6), &d).unwrap();
    }
    let mut buf = [0u8; 32];
    assert_eq!(server.poll_app_data(&mut buf), Some(10));
}

#[test]
fn a_client_answers_a_bounded_number_of_hello_verify_requests() {
    let mut client = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut Counter(1),
        Credentials::Psk {
            identity: b"sensor-1",
            key: b"0123456789abcdef",
        },
        at(0),
    )
    .unwrap();
    drain(&mut client);
    let mut result = Ok(());
    for seq in 0..10u16 {
        let s = seq.to_be_bytes();
        // HelloVerifyRequest, message_seq = seq, cookie "c".
        let hvr = [
            22, 0xfe, 0xff, 0, 0, 0, 0, 0, 0, 0, seq as u8, 0, 16, 3, 0, 0, 4, s[0], s[1], 0, 0, 0,
            0, 0, 4, 0xfe, 0xff, 1, b'c',
        ];
        result = client.handle_datagram(at(1), &hvr);
        if result.is_err() {
            break;
        }
    }
    assert_eq!(
        result,
        Err(Error::IllegalParameter("repeated HelloVerifyRequest"))
    );
}

#[test]
fn a_client_hello_with_the_last_message_seq_is_refused_not_a_panic() {
    let mut c2 = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut Counter(1),
        Credentials::Psk {
            identity: b"sensor-1",
            key: b"0123456789abcdef",
        },
        at(0),
    )
    .unwrap();
    // Through the cookie exchange (message_seq is not covered by the cookie), so the server
    // gets to parse it.
    let cookies = CookieKey::new([9; 32]);
    let mut out = [0u8; 256];
    let ch1 = drain(&mut c2).remove(0);
    let Stateless::HelloVerify(n) = cookies.respond(&RustCrypto, PEER, &ch1, &mut out) else {
        panic!()
    };
    c2.handle_datagram(at(1), &out[..n]).unwrap();
    let mut ch = drain(&mut c2).remove(0);
    // message_seq lives at record header 13 + type 1 + length 3.
    ch[17] = 0xff;
    ch[18] = 0xff;
    let Stateless::Accept(cookie) = cookies.respond(&RustCrypto, PEER, &ch, &mut out) else {
        panic!("the cookie does not cover message_seq")
    };
    assert_eq!(
        Connection::accept(
            RustCrypto,
            Keys,
            Config::default(),
            &PSK_ONLY,
            &mut Counter(3),
            cookie,
            &ch,
            at(1)
        )
        .err(),
        Some(Error::Decode("message_seq"))
    );
}

#[test]
fn regression_repeated_finished_and_change_cipher_spec_are_not_acted_on() {
    let (mut client, mut server) = start(Config::default());
    for d in drain(&mut server) {
        client.handle_datagram(at(3), &d).unwrap();
    }
    let flight5 = drain(&mut client); // ClientKeyExchange, ChangeCipherSpec, Finished
    for d in &flight5 {
        server.handle_datagram(at(4), d).unwrap();
    }
    assert!(server.is_established());
    let flight6 = drain(&mut server); // ChangeCipherSpec, Finished
    for d in &flight6 {
        client.handle_datagram(at(5), d).unwrap();
    }
    assert!(client.is_established());
    // The client's final flight replayed byte for byte (anyone can): its records fail the
    // replay window, so they are dropped and counted; the server neither answers nor moves.
    // (A genuine retransmission has fresh sequence numbers and gets the final flight again,
    // see the lossy-link tests.)
    let before = server.dropped();
    for d in &flight5 {
        server.handle_datagram(at(6), d).unwrap();
    }
    assert!(server.is_established());
    assert!(server.dropped() > before);
    assert!(drain(&mut server).is_empty());
    // The server's final flight again, and a fresh ChangeCipherSpec: ignored by the client.
    for d in &flight6 {
        client.handle_datagram(at(7), d).unwrap();
    }
    let ccs = [20, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 99, 0, 1, 1];
    client.handle_datagram(at(8), &ccs).unwrap();
    server.handle_datagram(at(8), &ccs).unwrap();
    assert!(client.is_established() && server.is_established());
    // Nothing reached either application, and the session still carries data.
    let mut buf = [0u8; 64];
    assert_eq!(client.poll_app_data(&mut buf), None);
    assert_eq!(server.poll_app_data(&mut buf), None);
    client.send(b"still fine").unwrap();
    for d in drain(&mut client) {
        server.handle_datagram(at(9), &d).unwrap();
    }
    assert_eq!(server.poll_app_data(&mut buf), Some(10));
}

#[test]
fn a_flight_timer_runs_from_when_its_first_datagram_is_sent() {
    let (mut client, mut server) = start(Config::default());
    for d in drain(&mut server) {
        client.handle_datagram(at(3), &d).unwrap();
    }
    // The flight was built at t = 3 but leaves at t = 900 (the device was busy).
    assert_eq!(client.poll_timeout(), Some(at(3 + 1_000)));
    let mut buf = [0u8; 1500];
    assert!(client.poll_transmit(at(900), &mut buf).is_some());
    assert_eq!(client.poll_timeout(), Some(at(900 + 1_000)));
    // Later datagrams of the same flight do not move it again.
    while client.poll_transmit(at(950), &mut buf).is_some() {}
    assert_eq!(client.poll_timeout(), Some(at(1_900)));
    // A retransmission is armed the same way, with the doubled timeout.
    client.handle_timeout(at(1_900)).unwrap();
    assert!(client.poll_transmit(at(2_000), &mut buf).is_some());
    assert_eq!(client.poll_timeout(), Some(at(2_000 + 2_000)));
}

#[test]
fn a_client_hello_goes_whole_below_the_pmtu_so_a_stateless_server_can_answer_it() {
    let config = Config {
        pmtu: 64,
        ..Config::default()
    };
    let (mut client, mut server) = start(config);
    // `start` checked that each ClientHello was one datagram the cookie server accepted.
    // Everything else honours the 64-byte PMTU.
    for d in drain(&mut server) {
        assert!(d.len() <= 64, "{}", d.len());
        client.handle_datagram(at(3), &d).unwrap();
    }
    for d in drain(&mut client) {
        assert!(d.len() <= 64, "{}", d.len());
        server.handle_datagram(at(3), &d).unwrap();
    }
    pump(&mut client, &mut server, 4);
    assert_eq!(client.state(), State::Established);
}

#[test]
fn a_retransmitted_multi_datagram_flight_triggers_one_answer_not_one_per_fragment() {
    let config = Config {
        pmtu: 64,
        ..Config::default()
    };
    let (mut client, mut server) = start(config);
    let flight4 = drain(&mut server);
    assert!(
        flight4.len() >= 2,
        "flight 4 spans {} datagrams",
        flight4.len()
    );
    for d in &flight4 {
        client.handle_datagram(at(3), d).unwrap();
    }
    let flight5 = drain(&mut client);
    assert!(!flight5.is_empty());
    // Flight 5 is lost; the server's timer fires and it sends flight 4 again. Each of its
    // datagrams reaches the client, which answers the whole retransmission once.
    let t = server.poll_timeout().unwrap();
    server.handle_timeout(at(t)).unwrap();
    let again = drain(&mut server);
    assert_eq!(again.len(), flight4.len());
    let mut answers = 0;
    for d in &again {
        client.handle_datagram(at(t), d).unwrap();
        answers += drain(&mut client).len();
    }
    assert_eq!(answers, flight5.len());
}

#[test]
fn a_partly_received_flight_keeps_the_timer_running_and_a_retransmission_recovers_it() {
    let config = Config {
        pmtu: 64,
        ..Config::default()
    };
    let (mut client, mut server) = start(config);
    let flight4 = drain(&mut server);
    assert!(flight4.len() >= 2);
    // Only the ServerHello gets through; the rest of flight 4 is lost.
    client.handle_datagram(at(3), &flight4[0]).unwrap();
    assert!(drain(&mut client).is_empty());
    let t = client
        .poll_timeout()
        .expect("the client still waits for the rest of flight 4");
    client.handle_timeout(at(t)).unwrap();
    let hello_again = drain(&mut client);
    assert_eq!(hello_again.len(), 1, "the ClientHello, retransmitted");
    // The server answers the retransmitted ClientHello with its whole flight.
    server.handle_datagram(at(t), &hello_again[0]).unwrap();
    let again = drain(&mut server);
    assert_eq!(again.len(), flight4.len());
    for d in &again {
        client.handle_datagram(at(t), d).unwrap();
    }
    pump(&mut client, &mut server, t);
    assert_eq!(client.state(), State::Established);
    assert_eq!(server.state(), State::Established);
}

#[test]
fn messages_that_arrive_ahead_of_their_turn_are_kept_until_the_gap_is_filled() {
    let config = Config {
        pmtu: 64,
        ..Config::default()
    };
    let (mut client, mut server) = start(config);
    let flight4 = drain(&mut server);
    assert!(flight4.len() >= 2);
    // The flight arrives in reverse order: everything after the ServerHello first.
    for d in flight4[1..].iter().rev() {
        client.handle_datagram(at(3), d).unwrap();
    }
    assert!(drain(&mut client).is_empty(), "nothing to answer yet");
    // The ServerHello fills the gap: the kept messages are processed and flight 5 goes out
    // without any retransmission.
    client.handle_datagram(at(4), &flight4[0]).unwrap();
    let flight5 = drain(&mut client);
    assert!(!flight5.is_empty());
    for d in &flight5 {
        server.handle_datagram(at(5), d).unwrap();
    }
    pump(&mut client, &mut server, 6);
    assert_eq!(client.state(), State::Established);
    assert_eq!(server.state(), State::Established);
}
