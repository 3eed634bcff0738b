//! The PSK handshake between a real client and a real server in memory, with virtual time:
//! cookie exchange, key agreement, application data both ways, loss and retransmission, and
//! the refusals the state machine owes.

use core::time::Duration;
use sigil_crypto::RustCrypto;
use sigil_dtls::record::Records;
use sigil_dtls::wire::{AlertDescription, ContentType};
use sigil_dtls::Error;
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, NoTrust, ServerCredentials, State, Stateless,
};
use sigil_testkit::dtls::{
    at, drain, server, Link, OnePsk, Pair, Side, CLIENT_ADDRESS as PEER, SENSOR_PSK as Keys,
};
use sigil_testkit::Counter;

const PSK_ONLY: ServerCredentials<'static> = ServerCredentials {
    psk: true,
    key: None,
    require_client_key: false,
    ..ServerCredentials::NONE
};

/// The tests' randomness: each byte steps by 37 from the seed.
fn rng(seed: u8) -> Counter {
    Counter::new(seed, 37)
}

type PskPair = Pair<'static, NoTrust, OnePsk>;

/// Runs the cookie exchange on a perfect link and returns the pair once the server accepted
/// (its flight 4 queued), and the bytes the exchange took (both ClientHellos and the
/// HelloVerifyRequest).
fn start_with(config: Config, identity: &[u8], key: &[u8]) -> (PskPair, usize) {
    let client = Connection::connect(
        RustCrypto,
        NoTrust,
        config,
        &mut rng(1),
        Credentials::Psk { identity, key },
        at(0),
    )
    .unwrap();
    let mut pair = Pair::new(
        client,
        server(Keys, config, PSK_ONLY, rng(200)),
        Link::PERFECT,
    );
    assert!(pair.run_until_accepted(), "{:?}", pair.errors);
    // One datagram each: ClientHello, HelloVerifyRequest, ClientHello with the cookie.
    let [ch1, hvr, ch2] = &pair.log[..] else {
        panic!("the cookie exchange took {} datagrams", pair.log.len());
    };
    assert_eq!(
        (ch1.to, hvr.to, ch2.to),
        (Side::Server, Side::Client, Side::Server)
    );
    assert!(hvr.bytes.len() <= ch1.bytes.len(), "no amplification");
    // The cookie is bound to the peer's address.
    let mut out = [0u8; 256];
    assert!(matches!(
        pair.cookies
            .respond(&RustCrypto, b"[fe80::2]:5684", &ch2.bytes, &mut out),
        Stateless::HelloVerify(_)
    ));
    let exchange = ch1.bytes.len() + hvr.bytes.len() + ch2.bytes.len();
    (pair, exchange)
}

fn start(config: Config) -> PskPair {
    start_with(config, b"sensor-1", b"0123456789abcdef").0
}

/// Delivers everything queued on both sides, at `now`, until both are quiet; returns the
/// bytes that crossed.
fn pump(pair: &mut PskPair, now: sigil_time::Instant) -> usize {
    let from = pair.log.len();
    pair.advance_to(now).run_until_quiet();
    pair.log[from..].iter().map(|d| d.bytes.len()).sum()
}

#[test]
fn psk_handshake_completes_and_application_data_flows_both_ways() {
    let mut pair = start(Config::default());
    let bytes = pump(&mut pair, at(3));
    assert_eq!(pair.client.state(), State::Established);
    assert_eq!(pair.server().state(), State::Established);
    assert_eq!(pair.server().psk_identity(), b"sensor-1");
    assert!(bytes < 400, "flights 4-6 took {bytes} bytes");

    pair.client.send(b"21.5 Cel").unwrap();
    let d = drain(&mut pair.client);
    assert_eq!(d.len(), 1);
    pair.server().handle_datagram(at(4), &d[0]).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(pair.server().poll_app_data(&mut buf), Some(8));
    assert_eq!(&buf[..8], b"21.5 Cel");
    // A replayed record is dropped, not delivered twice.
    pair.server().handle_datagram(at(5), &d[0]).unwrap();
    assert_eq!(pair.server().poll_app_data(&mut buf), None);
    assert_eq!(pair.server().dropped(), 1);

    pair.server().send(b"ack").unwrap();
    for d in drain(pair.server()) {
        pair.client.handle_datagram(at(6), &d).unwrap();
    }
    assert_eq!(pair.client.poll_app_data(&mut buf), Some(3));
    assert_eq!(pair.client.poll_timeout(), None);
}

#[test]
fn lost_final_flight_is_recovered_by_retransmission() {
    let mut pair = start(Config::default());
    // Flight 4 reaches the client; the client's flight 5 is lost.
    for d in drain(pair.server()) {
        pair.client.handle_datagram(at(3), &d).unwrap();
    }
    let lost = drain(&mut pair.client);
    assert!(!lost.is_empty());
    let t = pair
        .client
        .poll_timeout()
        .expect("client waits for the server's Finished");
    assert_eq!(t, at(3 + 1_000));
    pair.client.handle_timeout(t).unwrap();
    // The retransmission uses fresh record sequence numbers.
    let again = drain(&mut pair.client);
    assert_ne!(again, lost);
    for d in &again {
        pair.server().handle_datagram(t, d).unwrap();
    }
    assert_eq!(pair.server().state(), State::Established);
    // The server's flight 6 is lost too: the client retransmits flight 5 (timeout doubled),
    // and the server answers the repeated Finished with its last flight (RFC 6347 §4.2.4).
    drain(pair.server());
    let t2 = pair.client.poll_timeout().unwrap();
    assert_eq!(t2, t + Duration::from_millis(2_000));
    pair.client.handle_timeout(t2).unwrap();
    for d in drain(&mut pair.client) {
        pair.server().handle_datagram(t2, &d).unwrap();
    }
    for d in drain(pair.server()) {
        pair.client.handle_datagram(t2, &d).unwrap();
    }
    assert_eq!(pair.client.state(), State::Established);
}

#[test]
fn a_wrong_key_fails_both_sides_with_an_alert_not_data() {
    let (mut pair, _) = start_with(Config::default(), b"sensor-1", b"not the right key");
    pump(&mut pair, at(3));
    // The server cannot authenticate the client's Finished (different keys): the record is
    // dropped as a bad MAC, so the server never reaches Established...
    assert_ne!(pair.server().state(), State::Established);
    assert!(pair.server().dropped() > 0);
    assert_eq!(pair.client.state(), State::ExpectChangeCipherSpec);
    assert!(pair.client.send(b"x").is_err());
}

#[test]
fn unknown_identity_gets_the_unknown_psk_identity_alert() {
    let (mut pair, _) = start_with(Config::default(), b"intruder", b"whatever-key");
    for d in drain(pair.server()) {
        pair.client.handle_datagram(at(3), &d).unwrap();
    }
    let mut result = Ok(());
    for d in drain(&mut pair.client) {
        result = result.and(pair.server().handle_datagram(at(3), &d).map(|_| ()));
    }
    assert_eq!(result, Err(Error::UnknownPskIdentity));
    assert_eq!(
        pair.server().state(),
        State::Failed(Error::UnknownPskIdentity)
    );
    let alert = drain(pair.server());
    let rec = Records::new(&alert[0]).next().unwrap().unwrap();
    assert_eq!(rec.header.content_type, ContentType::ALERT);
    assert_eq!(rec.fragment, [2, AlertDescription::UNKNOWN_PSK_IDENTITY.0]);
    // After a fatal alert nothing more is processed (a bug class found by state fuzzing).
    assert!(pair.server().handle_datagram(at(4), &alert[0]).is_err());
}

#[test]
fn regression_cve_2017_7243_early_change_cipher_spec_is_never_acted_on() {
    let mut pair = start(Config::default());
    // A ChangeCipherSpec before ServerHello: the client has no keys to switch to. It is
    // dropped and counted (over a lossy link a CCS may overtake the messages before it), and
    // the handshake goes on in epoch 0 as if it never came.
    let ccs = [20, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 9, 0, 1, 1];
    let before = pair.client.dropped();
    assert_eq!(
        pair.client
            .handle_datagram(at(3), &ccs)
            .map(|r| r.is_authenticated()),
        Ok(false)
    );
    assert_eq!(pair.client.dropped(), before + 1);
    assert_eq!(pair.client.state(), State::ExpectHelloVerifyOrServerHello);
    assert!(drain(&mut pair.client).is_empty(), "no alert, no answer");
    pump(&mut pair, at(3));
    assert!(pair.client.is_established() && pair.server().is_established());
}

#[test]
fn regression_cve_2020_24585_epoch_0_application_data_is_never_delivered() {
    let mut pair = start(Config::default());
    pump(&mut pair, at(3));
    let data = [
        23, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 77, 0, 4, b'e', b'v', b'i', b'l',
    ];
    let _ = pair.server().handle_datagram(at(4), &data);
    let mut buf = [0u8; 16];
    assert_eq!(pair.server().poll_app_data(&mut buf), None);
}

#[test]
fn regression_cve_2021_42141_far_future_and_unknown_epochs_are_dropped() {
    let mut pair = start(Config::default());
    pump(&mut pair, at(3));
    for epoch in [2u16, 7, 0xffff] {
        let e = epoch.to_be_bytes();
        let rec = [
            23, 0xfe, 0xfd, e[0], e[1], 0, 0, 0, 0, 0, 1, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0,
        ];
        pair.server().handle_datagram(at(4), &rec).unwrap();
    }
    assert_eq!(pair.server().state(), State::Established);
    assert_eq!(pair.server().dropped(), 3);
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
        &mut rng(1),
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
        let _ = client.handle_timeout(now);
        drain(&mut client);
    }
    // The seed's 5 s timer, doubled each time, then the connection fails.
    assert_eq!(waits, [5_000, 10_000, 20_000]);
    assert_eq!(client.state(), State::Failed(Error::HandshakeTimeout));
}

#[test]
fn psk_handshake_bytes_on_the_wire() {
    // Every datagram of a complete handshake, both directions, cookie exchange included.
    let (mut pair, exchange) = start_with(Config::default(), b"sensor-1", b"0123456789abcdef");
    let rest = pump(&mut pair, at(3));
    let total = exchange + rest;
    assert!(pair.client.is_established() && pair.server().is_established());
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
        &mut rng(1),
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
    let mut pair = start(Config::default());
    pump(&mut pair, at(3));
    // An old ClientKeyExchange fragment (message_seq 2) in plaintext: anyone can forge it. It
    // must not make the server resend its final flight (no reflection) ...
    let old = [
        22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 90, 0, 12, 16, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0,
    ];
    pair.server().handle_datagram(at(4), &old).unwrap();
    assert!(drain(pair.server()).is_empty());
    // ... and a plaintext fatal alert must not end the connection.
    let alert = [21, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 91, 0, 2, 2, 40];
    pair.server().handle_datagram(at(5), &alert).unwrap();
    assert_eq!(pair.server().state(), State::Established);
    pair.client.send(b"still here").unwrap();
    for d in drain(&mut pair.client) {
        pair.server().handle_datagram(at(6), &d).unwrap();
    }
    let mut buf = [0u8; 32];
    assert_eq!(pair.server().poll_app_data(&mut buf), Some(10));
}

#[test]
fn a_client_answers_a_bounded_number_of_hello_verify_requests() {
    let mut client = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut rng(1),
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
        result = client.handle_datagram(at(1), &hvr).map(|_| ());
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
        &mut rng(1),
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
            &mut rng(3),
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
    let mut pair = start(Config::default());
    for d in drain(pair.server()) {
        pair.client.handle_datagram(at(3), &d).unwrap();
    }
    let flight5 = drain(&mut pair.client); // ClientKeyExchange, ChangeCipherSpec, Finished
    for d in &flight5 {
        pair.server().handle_datagram(at(4), d).unwrap();
    }
    assert!(pair.server().is_established());
    let flight6 = drain(pair.server()); // ChangeCipherSpec, Finished
    for d in &flight6 {
        pair.client.handle_datagram(at(5), d).unwrap();
    }
    assert!(pair.client.is_established());
    // The client's final flight replayed byte for byte (anyone can): its records fail the
    // replay window, so they are dropped and counted; the server neither answers nor moves.
    // (A genuine retransmission has fresh sequence numbers and gets the final flight again,
    // see the lossy-link tests.)
    let before = pair.server().dropped();
    for d in &flight5 {
        pair.server().handle_datagram(at(6), d).unwrap();
    }
    assert!(pair.server().is_established());
    assert!(pair.server().dropped() > before);
    assert!(drain(pair.server()).is_empty());
    // The server's final flight again, and a fresh ChangeCipherSpec: ignored by the pair.client.
    for d in &flight6 {
        pair.client.handle_datagram(at(7), d).unwrap();
    }
    let ccs = [20, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 99, 0, 1, 1];
    pair.client.handle_datagram(at(8), &ccs).unwrap();
    pair.server().handle_datagram(at(8), &ccs).unwrap();
    assert!(pair.client.is_established() && pair.server().is_established());
    // Nothing reached either application, and the session still carries data.
    let mut buf = [0u8; 64];
    assert_eq!(pair.client.poll_app_data(&mut buf), None);
    assert_eq!(pair.server().poll_app_data(&mut buf), None);
    pair.client.send(b"still fine").unwrap();
    for d in drain(&mut pair.client) {
        pair.server().handle_datagram(at(9), &d).unwrap();
    }
    assert_eq!(pair.server().poll_app_data(&mut buf), Some(10));
}

#[test]
fn a_flight_timer_runs_from_when_its_first_datagram_is_sent() {
    let mut pair = start(Config::default());
    for d in drain(pair.server()) {
        pair.client.handle_datagram(at(3), &d).unwrap();
    }
    // The flight was built at t = 3 but leaves at t = 900 (the device was busy).
    assert_eq!(pair.client.poll_timeout(), Some(at(3 + 1_000)));
    let mut buf = [0u8; 1500];
    assert!(pair.client.poll_transmit(at(900), &mut buf).is_some());
    assert_eq!(pair.client.poll_timeout(), Some(at(900 + 1_000)));
    // Later datagrams of the same flight do not move it again.
    while pair.client.poll_transmit(at(950), &mut buf).is_some() {}
    assert_eq!(pair.client.poll_timeout(), Some(at(1_900)));
    // A retransmission is armed the same way, with the doubled timeout.
    pair.client.handle_timeout(at(1_900)).unwrap();
    assert!(pair.client.poll_transmit(at(2_000), &mut buf).is_some());
    assert_eq!(pair.client.poll_timeout(), Some(at(2_000 + 2_000)));
}

#[test]
fn a_client_hello_goes_whole_below_the_pmtu_so_a_stateless_server_can_answer_it() {
    let config = Config {
        pmtu: 64,
        ..Config::default()
    };
    let mut pair = start(config);
    // `start` checked that each ClientHello was one datagram the cookie server accepted.
    // Everything else honours the 64-byte PMTU.
    for d in drain(pair.server()) {
        assert!(d.len() <= 64, "{}", d.len());
        pair.client.handle_datagram(at(3), &d).unwrap();
    }
    for d in drain(&mut pair.client) {
        assert!(d.len() <= 64, "{}", d.len());
        pair.server().handle_datagram(at(3), &d).unwrap();
    }
    pump(&mut pair, at(4));
    assert_eq!(pair.client.state(), State::Established);
}

#[test]
fn a_retransmitted_multi_datagram_flight_triggers_one_answer_not_one_per_fragment() {
    let config = Config {
        pmtu: 64,
        ..Config::default()
    };
    let mut pair = start(config);
    let flight4 = drain(pair.server());
    assert!(
        flight4.len() >= 2,
        "flight 4 spans {} datagrams",
        flight4.len()
    );
    for d in &flight4 {
        pair.client.handle_datagram(at(3), d).unwrap();
    }
    let flight5 = drain(&mut pair.client);
    assert!(!flight5.is_empty());
    // Flight 5 is lost; the server's timer fires and it sends flight 4 again. Each of its
    // datagrams reaches the client, which answers the whole retransmission once.
    let t = pair.server().poll_timeout().unwrap();
    pair.server().handle_timeout(t).unwrap();
    let again = drain(pair.server());
    assert_eq!(again.len(), flight4.len());
    let mut answers = 0;
    for d in &again {
        pair.client.handle_datagram(t, d).unwrap();
        answers += drain(&mut pair.client).len();
    }
    assert_eq!(answers, flight5.len());
}

#[test]
fn a_partly_received_flight_keeps_the_timer_running_and_a_retransmission_recovers_it() {
    let config = Config {
        pmtu: 64,
        ..Config::default()
    };
    let mut pair = start(config);
    let flight4 = drain(pair.server());
    assert!(flight4.len() >= 2);
    // Only the ServerHello gets through; the rest of flight 4 is lost.
    pair.client.handle_datagram(at(3), &flight4[0]).unwrap();
    assert!(drain(&mut pair.client).is_empty());
    let t = pair
        .client
        .poll_timeout()
        .expect("the client still waits for the rest of flight 4");
    pair.client.handle_timeout(t).unwrap();
    let hello_again = drain(&mut pair.client);
    assert_eq!(hello_again.len(), 1, "the ClientHello, retransmitted");
    // The server answers the retransmitted ClientHello with its whole flight.
    pair.server().handle_datagram(t, &hello_again[0]).unwrap();
    let again = drain(pair.server());
    assert_eq!(again.len(), flight4.len());
    for d in &again {
        pair.client.handle_datagram(t, d).unwrap();
    }
    pump(&mut pair, t);
    assert_eq!(pair.client.state(), State::Established);
    assert_eq!(pair.server().state(), State::Established);
}

#[test]
fn messages_that_arrive_ahead_of_their_turn_are_kept_until_the_gap_is_filled() {
    let config = Config {
        pmtu: 64,
        ..Config::default()
    };
    let mut pair = start(config);
    let flight4 = drain(pair.server());
    assert!(flight4.len() >= 2);
    // The flight arrives in reverse order: everything after the ServerHello first.
    for d in flight4[1..].iter().rev() {
        pair.client.handle_datagram(at(3), d).unwrap();
    }
    assert!(drain(&mut pair.client).is_empty(), "nothing to answer yet");
    // The ServerHello fills the gap: the kept messages are processed and flight 5 goes out
    // without any retransmission.
    pair.client.handle_datagram(at(4), &flight4[0]).unwrap();
    let flight5 = drain(&mut pair.client);
    assert!(!flight5.is_empty());
    for d in &flight5 {
        pair.server().handle_datagram(at(5), d).unwrap();
    }
    pump(&mut pair, at(6));
    assert_eq!(pair.client.state(), State::Established);
    assert_eq!(pair.server().state(), State::Established);
}
