//! The DTLS handshake as a CoAP resource, client and endpoint in memory with virtual time:
//! every suite, loss of each message, duplicates and reordering, block-wise flights, the
//! stateless cookie, the table's bounds, expiry, DELETE, and application data afterwards.

mod common;

use common::{at, Fate, Link, To};
use sigil_coap::message::option;
use sigil_coap::{BlockOption, Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::{Credentials, NoTrust, PinnedIdentities, ServerCredentials, Traffic};
use sigil_dtls_coap::{CarrierConfig, Client, Endpoint, EndpointConfig, MAX_DATAGRAM};
use sigil_identity::Identity;
use sigil_testkit::dtls::{OnePsk, SENSOR_PSK};
use sigil_testkit::Counter;
use std::time::Duration;

const PEER: &[u8] = b"[2001:db8::7]:5683";

const PSK_ONLY: ServerCredentials<'static> = ServerCredentials {
    psk: true,
    ..ServerCredentials::NONE
};

fn psk_client(seed: u8, config: CarrierConfig) -> Client<RustCrypto, NoTrust> {
    Client::connect(
        RustCrypto,
        NoTrust,
        config,
        &mut Counter::new(seed, 37),
        Credentials::Psk {
            identity: SENSOR_PSK.identity,
            key: SENSOR_PSK.key,
        },
        at(0),
    )
    .unwrap()
}

type PskEndpoint<'a, const N: usize> = Endpoint<'a, RustCrypto, &'a OnePsk, N>;

fn psk_endpoint<const N: usize>(trust: &OnePsk, config: EndpointConfig) -> PskEndpoint<'_, N> {
    Endpoint::new(RustCrypto, trust, PSK_ONLY, config, [9; 32])
}

/// Sends `data` from one side's records to the other's and back.
fn exchange(client: &mut Traffic<RustCrypto>, server: &mut Traffic<RustCrypto>) {
    let mut d = [0u8; 1500];
    client.send(b"reading 21.5 C").unwrap();
    let n = client.poll_transmit(at(1), &mut d).unwrap();
    // An ordinary DTLS 1.2 application-data record of epoch 1.
    assert_eq!(&d[..5], &[23, 0xfe, 0xfd, 0, 1]);
    assert!(sigil_dtls_coap::is_dtls_record(&d[..n]));
    server.handle_datagram(at(1), &d[..n]).unwrap();
    let m = server.poll_app_data(&mut d).unwrap();
    assert_eq!(&d[..m], b"reading 21.5 C");
    server.send(b"ack").unwrap();
    let n = server.poll_transmit(at(2), &mut d).unwrap();
    client.handle_datagram(at(2), &d[..n]).unwrap();
    let m = client.poll_app_data(&mut d).unwrap();
    assert_eq!(&d[..m], b"ack");
}

#[test]
fn psk_ccm8_handshake_then_application_data_as_records() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<4>(&trust, EndpointConfig::default());
    let mut client = psk_client(1, CarrierConfig::default());
    let mut link = Link::new(PEER);
    assert!(link.run(&mut client, &mut server, 10_000));
    // PUT (no cookie) -> 4.01, PUT (cookie) -> 2.01, POST -> 2.04.
    let codes: Vec<_> = link.log.iter().map(|s| s.message().code).collect();
    assert_eq!(
        codes,
        [
            Code::PUT,
            Code::UNAUTHORIZED,
            Code::PUT,
            Code::CREATED,
            Code::POST,
            Code::CHANGED
        ]
    );
    let created = link.log[3].message();
    let loc: Vec<_> = created.option_values(option::LOCATION_PATH).collect();
    let id = client.session_id().unwrap();
    assert_eq!(loc, [&b"dtls"[..], id.to_string().as_bytes()]);
    assert_eq!(server.counters().established, 1);
    assert_eq!(server.sessions(), 1);
    let mut c = client.into_traffic().ok().unwrap();
    let s = server.traffic_mut(id, PEER, at(1)).unwrap();
    assert_eq!(s.psk_identity(), b"sensor-1");
    exchange(&mut c, s);
}

#[cfg(feature = "ecdhe-psk")]
#[test]
fn ecdhe_psk_handshake_over_the_carrier() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<4>(&trust, EndpointConfig::default());
    let mut client = Client::connect(
        RustCrypto,
        SENSOR_PSK,
        CarrierConfig::default(),
        &mut Counter::new(3, 37),
        Credentials::EcdhePsk {
            identity: SENSOR_PSK.identity,
            key: SENSOR_PSK.key,
        },
        at(0),
    )
    .unwrap();
    let mut link = Link::new(PEER);
    assert!(link.run(&mut client, &mut server, 10_000));
    let id = client.session_id().unwrap();
    let mut c = client.into_traffic().ok().unwrap();
    exchange(&mut c, server.traffic_mut(id, PEER, at(1)).unwrap());
}

fn key(seed: u8) -> (SecretKey, Identity) {
    let sk = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Counter::new(seed, 29))
        .unwrap();
    let id = Identity::of_key(&RustCrypto, &RustCrypto.public_key(&sk).unwrap(), b"").unwrap();
    (sk, id)
}

/// Mutual ECDHE-ECDSA with raw public keys pinned to identities, at block size `szx`.
fn rpk_handshake(szx: u8) -> Link<'static> {
    rpk_handshake_with(szx, Link::new(PEER))
}

fn rpk_handshake_with(szx: u8, mut link: Link<'_>) -> Link<'_> {
    let (server_key, server_id) = key(40);
    let (client_key, client_id) = key(50);
    let server_ids = [client_id];
    let client_ids = [server_id];
    let server_trust = PinnedIdentities {
        crypto: RustCrypto,
        identities: &server_ids[..],
    };
    let offer = ServerCredentials {
        key: Some(&server_key),
        require_client_key: true,
        ..ServerCredentials::NONE
    };
    let config = EndpointConfig {
        block_szx: szx,
        ..EndpointConfig::default()
    };
    let mut server: Endpoint<'_, RustCrypto, _, 2> =
        Endpoint::new(RustCrypto, &server_trust, offer, config, [3; 32]);
    let mut client = Client::connect(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: &client_ids[..],
        },
        CarrierConfig {
            block_szx: szx,
            ..CarrierConfig::default()
        },
        &mut Counter::new(5, 29),
        Credentials::RawPublicKey(Some(&client_key)),
        at(0),
    )
    .unwrap();
    assert!(
        link.run(&mut client, &mut server, 600_000),
        "{:?}",
        client.failure()
    );
    assert_eq!(server.counters().created, 1);
    let id = client.session_id().unwrap();
    let mut c = client.into_traffic().ok().unwrap();
    let s = server.traffic_mut(id, PEER, at(1)).unwrap();
    // Each side holds the other's pinned key.
    assert_eq!(
        s.peer_public_key(),
        Some(&RustCrypto.public_key(&client_key).unwrap())
    );
    assert_eq!(
        c.peer_public_key(),
        Some(&RustCrypto.public_key(&server_key).unwrap())
    );
    exchange(&mut c, s);
    link
}

#[test]
fn ecdhe_ecdsa_with_pinned_raw_public_keys_over_the_carrier() {
    let link = rpk_handshake(6);
    // Every flight fits one 1024-byte block: no block options at all.
    assert!(link.log.iter().all(|s| {
        let m = s.message();
        m.block1().is_none() && m.block2().is_none()
    }));
}

/// Mutual static ECDH (sigil-dtls's PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8) over the
/// carrier, with each side enabling it or not. Returns the link and, if the handshake
/// completed, the server key the client holds (else the client's failure).
#[cfg(feature = "static-ecdh")]
fn static_ecdh_handshake(
    client_static: bool,
    server_static: bool,
) -> (
    Link<'static>,
    Result<sigil_crypto::PublicKey, Option<sigil_dtls_coap::Error>>,
) {
    let (server_key, server_id) = key(60);
    let (client_key, client_id) = key(70);
    let server_ids = [client_id];
    let client_ids = [server_id];
    let server_trust = PinnedIdentities {
        crypto: RustCrypto,
        identities: &server_ids[..],
    };
    let offer = ServerCredentials {
        key: Some(&server_key),
        require_client_key: true,
        ..ServerCredentials::NONE
    };
    let config = EndpointConfig {
        dtls: sigil_dtls::Config {
            danger_static_ecdh: server_static,
            ..sigil_dtls::Config::default()
        },
        ..EndpointConfig::default()
    };
    let mut server: Endpoint<'_, RustCrypto, _, 2> =
        Endpoint::new(RustCrypto, &server_trust, offer, config, [3; 32]);
    let mut client = Client::connect(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: &client_ids[..],
        },
        CarrierConfig {
            dtls: sigil_dtls::Config {
                danger_static_ecdh: client_static,
                ..sigil_dtls::Config::default()
            },
            ..CarrierConfig::default()
        },
        &mut Counter::new(6, 29),
        Credentials::RawPublicKey(Some(&client_key)),
        at(0),
    )
    .unwrap();
    let mut link = Link::new(PEER);
    if !link.run(&mut client, &mut server, 600_000) {
        return (link, Err(client.failure()));
    }
    let id = client.session_id().unwrap();
    let s = server.traffic_mut(id, PEER, at(1)).unwrap();
    assert_eq!(
        s.peer_public_key(),
        Some(&RustCrypto.public_key(&client_key).unwrap())
    );
    let mut c = client.into_traffic().ok().unwrap();
    let server_key = *c.peer_public_key().unwrap();
    exchange(&mut c, s);
    (link, Ok(server_key))
}

/// The handshake message types in a carrier payload (plaintext records).
#[cfg(feature = "static-ecdh")]
fn handshake_types(payload: &[u8]) -> Vec<sigil_dtls::wire::HandshakeType> {
    sigil_dtls::record::Records::new(payload)
        .map(Result::unwrap)
        .filter(|r| {
            r.header.content_type == sigil_dtls::wire::ContentType::HANDSHAKE && r.header.epoch == 0
        })
        .map(|r| sigil_dtls::wire::HandshakeType(r.fragment[0]))
        .collect()
}

#[cfg(feature = "static-ecdh")]
#[test]
fn static_ecdh_over_the_carrier_sends_no_server_key_exchange() {
    use sigil_dtls::wire::{CipherSuite, HandshakeType};
    let (link, server_key) = static_ecdh_handshake(true, true);
    // The server's flight, in the 2.01 that answers the PUT with the cookie.
    let created = link
        .log
        .iter()
        .map(|s| s.message())
        .find(|m| m.code == Code::CREATED)
        .unwrap();
    assert_eq!(
        handshake_types(created.payload),
        [
            HandshakeType::SERVER_HELLO,
            HandshakeType::CERTIFICATE,
            HandshakeType::CERTIFICATE_REQUEST,
            HandshakeType::SERVER_HELLO_DONE,
        ]
    );
    let (rec, _) = sigil_dtls::record::Record::parse(created.payload).unwrap();
    let sh = sigil_dtls::handshake::ServerHello::parse(&rec.fragment[12..]).unwrap();
    assert_eq!(
        sh.cipher_suite,
        CipherSuite::PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8
    );
    // The client holds the server's pinned key.
    let (_, server_id) = key(60);
    let pk = server_key.unwrap();
    assert_eq!(Identity::of_key(&RustCrypto, &pk, b"").unwrap(), server_id);
}

#[cfg(feature = "static-ecdh")]
#[test]
fn static_ecdh_over_the_carrier_needs_both_sides_to_enable_it() {
    // The client asks for it alone: the server has no suite in common and refuses.
    let (_, refused) = static_ecdh_handshake(true, false);
    assert_eq!(
        refused,
        Err(Some(sigil_dtls_coap::Error::Refused(Code::FORBIDDEN)))
    );
    // The server takes it, the client did not ask: ECDHE-ECDSA, with its ServerKeyExchange.
    let (link, ecdhe) = static_ecdh_handshake(false, true);
    assert!(ecdhe.is_ok(), "{ecdhe:?}");
    let created = link
        .log
        .iter()
        .map(|s| s.message())
        .find(|m| m.code == Code::CREATED)
        .unwrap();
    assert!(handshake_types(created.payload)
        .contains(&sigil_dtls::wire::HandshakeType::SERVER_KEY_EXCHANGE));
}

#[test]
fn small_blocks_carry_the_ecdhe_ecdsa_flights_in_block1_and_block2() {
    // 64-byte blocks: the server's flight (certificate, key exchange, request) and the
    // client's (certificate, key exchange, verify, Finished) both need several.
    let link = rpk_handshake(2);
    let block1 = link
        .requests()
        .iter()
        .filter(|s| s.message().code == Code::POST && s.message().block1().is_some())
        .count();
    let continues = link
        .log
        .iter()
        .filter(|s| s.message().code == Code::CONTINUE)
        .count();
    let block2_gets = link
        .requests()
        .iter()
        .filter(|s| s.message().code == Code::GET && s.message().block2().is_some())
        .count();
    assert!(block1 >= 3, "{block1} Block1 requests");
    assert_eq!(continues, block1 - 1);
    assert!(block2_gets >= 3, "{block2_gets} Block2 requests");
    // No datagram carries more than one block's payload.
    assert!(link
        .log
        .iter()
        .all(|s| s.message().payload.len() <= 64 || s.message().code == Code::PUT));
}

/// RFC 7959 §2.5: a server whose 2.31 Continue for the first Block1 asks for smaller blocks
/// gets the rest of the client's flight in its size, numbered from where the first block
/// ended (the endpoint here echoes the client's size, so the test answers for it).
#[test]
fn the_client_follows_a_smaller_block1_size_the_server_asks_for() {
    let (server_key, server_id) = key(40);
    let (client_key, client_id) = key(50);
    let (server_ids, client_ids) = ([client_id], [server_id]);
    let server_trust = PinnedIdentities {
        crypto: RustCrypto,
        identities: &server_ids[..],
    };
    let offer = ServerCredentials {
        key: Some(&server_key),
        require_client_key: true,
        ..ServerCredentials::NONE
    };
    let config = EndpointConfig {
        block_szx: 2,
        ..EndpointConfig::default()
    };
    let mut server: Endpoint<'_, RustCrypto, _, 2> =
        Endpoint::new(RustCrypto, &server_trust, offer, config, [3; 32]);
    let mut client = Client::connect(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: &client_ids[..],
        },
        CarrierConfig {
            block_szx: 2,
            ..CarrierConfig::default()
        },
        &mut Counter::new(5, 29),
        Credentials::RawPublicKey(Some(&client_key)),
        at(0),
    )
    .unwrap();
    let mut rng = Counter::new(77, 13);
    let (mut d, mut o, mut smaller) = ([0u8; MAX_DATAGRAM], [0u8; MAX_DATAGRAM], [0u8; 64]);
    // Each POST's Block1 and payload length.
    let mut posts = Vec::new();
    while let Some(n) = client.poll_transmit(at(0), &mut d) {
        let req = Message::parse(&d[..n]).unwrap();
        if req.code == Code::POST {
            posts.push((req.block1().map(Result::unwrap), req.payload.len()));
        }
        let r = server
            .handle_datagram(at(0), PEER, &d[..n], &mut rng, &mut o)
            .unwrap();
        let resp = Message::parse(&o[..r]).unwrap();
        let answer = match resp.block1().map(Result::unwrap) {
            // The 2.31 for the first block asks for 16-byte blocks from now on.
            Some(b) if resp.code == Code::CONTINUE && b.szx > 0 => {
                let mut m = MessageBuilder::new(
                    &mut smaller,
                    resp.mtype,
                    Code::CONTINUE,
                    resp.message_id,
                    resp.token,
                )
                .unwrap();
                let (v, len) = BlockOption::new(b.num, true, 0).encode().unwrap();
                m.option(option::BLOCK1, &v[..len]).unwrap();
                let len = m.finish_with_payload(&[]).unwrap();
                &smaller[..len]
            }
            _ => &o[..r],
        };
        client.handle_datagram(at(0), answer, &mut rng).unwrap();
    }
    assert!(client.is_established(), "{:?}", client.failure());
    // The first block in the client's 64 bytes; the rest in 16, block 4 (offset 64) on.
    assert_eq!(posts[0], (Some(BlockOption::new(0, true, 2)), 64));
    assert!(posts.len() > 3, "{posts:?}");
    for (i, (b, len)) in posts[1..].iter().enumerate() {
        let b = b.unwrap();
        assert_eq!((b.num, b.szx), (4 + i as u32, 0), "{posts:?}");
        assert!(*len == 16 || !b.more && *len <= 16, "{posts:?}");
    }
    // The endpoint took the flight as it came, in sequence.
    let c = server.counters();
    assert_eq!((c.established, c.malformed, c.oversized), (1, 0, 0));
    let id = client.session_id().unwrap();
    let mut c = client.into_traffic().ok().unwrap();
    exchange(&mut c, server.traffic_mut(id, PEER, at(1)).unwrap());
}

/// A GET for larger Block2 blocks than the endpoint serves gets the bytes at the offset it
/// asked for, in the endpoint's size and numbered in it (RFC 7959 §2.4).
#[test]
fn a_get_for_larger_blocks_than_the_servers_gets_the_bytes_at_its_offset() {
    let trust = SENSOR_PSK;
    let config = EndpointConfig {
        block_szx: 0,
        ..EndpointConfig::default()
    };
    let mut server = psk_endpoint::<2>(&trust, config);
    let mut client = psk_client(1, CarrierConfig::default());
    let mut rng = Counter::new(3, 3);
    let (mut d, mut o) = ([0u8; MAX_DATAGRAM], [0u8; MAX_DATAGRAM]);
    // PUT, 4.01, PUT with the cookie, 2.01 with the first 16 bytes of the server's flight.
    let mut created = Vec::new();
    for _ in 0..2 {
        let n = client.poll_transmit(at(0), &mut d).unwrap();
        let r = server
            .handle_datagram(at(0), PEER, &d[..n], &mut rng, &mut o)
            .unwrap();
        created = o[..r].to_vec();
        client.handle_datagram(at(0), &o[..r], &mut rng).unwrap();
    }
    let created = Message::parse(&created).unwrap();
    assert_eq!(created.code, Code::CREATED);
    assert_eq!(
        created.block2().unwrap().unwrap(),
        BlockOption::new(0, true, 0)
    );
    let id = client.session_id().unwrap().to_string();
    let mut mid = 100;
    let mut get = |server: &mut PskEndpoint<'_, 2>, block2: BlockOption| {
        mid += 1;
        let mut buf = [0u8; 64];
        let mut m =
            MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, mid, &[7]).unwrap();
        m.option(option::URI_PATH, b"dtls").unwrap();
        m.option(option::URI_PATH, id.as_bytes()).unwrap();
        let (v, len) = block2.encode().unwrap();
        m.option(option::BLOCK2, &v[..len]).unwrap();
        let n = m.finish_with_payload(&[]).unwrap();
        let r = server
            .handle_datagram(at(1), PEER, &buf[..n], &mut Counter::new(4, 4), &mut o)
            .unwrap();
        let m = Message::parse(&o[..r]).unwrap();
        (m.code, m.block2().map(Result::unwrap), m.payload.to_vec())
    };
    // The whole flight, in the server's 16-byte blocks.
    let mut flight = created.payload.to_vec();
    loop {
        let (code, b, part) = get(
            &mut server,
            BlockOption::new(flight.len() as u32 / 16, false, 0),
        );
        assert_eq!(code, Code::CONTENT);
        flight.extend(part);
        if !b.unwrap().more {
            break;
        }
    }
    assert!(flight.len() > 80, "{} bytes", flight.len());
    // Block 1 of 64 bytes starts at 64: the server's block 4 of 16.
    assert_eq!(
        get(&mut server, BlockOption::new(1, false, 2)),
        (
            Code::CONTENT,
            Some(BlockOption::new(4, true, 0)),
            flight[64..80].to_vec()
        )
    );
    // Block 0 of 1024 bytes: the first 16.
    assert_eq!(
        get(&mut server, BlockOption::new(0, false, 6)),
        (
            Code::CONTENT,
            Some(BlockOption::new(0, true, 0)),
            flight[..16].to_vec()
        )
    );
    // Block 1 of 1024 bytes starts past the flight: 4.02, counted.
    let before = server.counters().malformed;
    assert_eq!(
        get(&mut server, BlockOption::new(1, false, 6)).0,
        Code::BAD_OPTION
    );
    assert_eq!(server.counters().malformed, before + 1);
}

/// A client that starts its Block1 flight over at block 0 (it lost its state, or gave up on
/// the first attempt) is taken from the start, not refused; a block out of sequence is still
/// 4.08 and counted, and the flight starts over after it.
#[test]
fn a_block1_flight_started_over_at_block_0_is_taken_from_the_start() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<2>(&trust, EndpointConfig::default());
    let mut client = psk_client(1, CarrierConfig::default());
    let mut rng = Counter::new(3, 3);
    let (mut d, mut o) = ([0u8; MAX_DATAGRAM], [0u8; MAX_DATAGRAM]);
    for _ in 0..2 {
        let n = client.poll_transmit(at(0), &mut d).unwrap();
        let r = server
            .handle_datagram(at(0), PEER, &d[..n], &mut rng, &mut o)
            .unwrap();
        client.handle_datagram(at(0), &o[..r], &mut rng).unwrap();
    }
    let id = client.session_id().unwrap().to_string();
    let mut mid = 100;
    let mut post = |server: &mut PskEndpoint<'_, 2>, block1: BlockOption| {
        mid += 1;
        let mut buf = [0u8; 64];
        let mut m =
            MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::POST, mid, &[7]).unwrap();
        m.option(option::URI_PATH, b"dtls").unwrap();
        m.option(option::URI_PATH, id.as_bytes()).unwrap();
        let (v, len) = block1.encode().unwrap();
        m.option(option::BLOCK1, &v[..len]).unwrap();
        let n = m.finish_with_payload(&[0x16; 16]).unwrap();
        let r = server
            .handle_datagram(at(1), PEER, &buf[..n], &mut Counter::new(4, 4), &mut o)
            .unwrap();
        Message::parse(&o[..r]).unwrap().code
    };
    let block = |num| BlockOption::new(num, true, 0);
    assert_eq!(post(&mut server, block(0)), Code::CONTINUE);
    assert_eq!(post(&mut server, block(1)), Code::CONTINUE);
    // Block 0 again, a new request: the flight starts over, and block 1 follows it.
    assert_eq!(post(&mut server, block(0)), Code::CONTINUE);
    assert_eq!(post(&mut server, block(1)), Code::CONTINUE);
    assert_eq!(server.counters().malformed, 0);
    // Block 3 after 1: out of sequence, and the flight is dropped.
    assert_eq!(post(&mut server, block(3)), Code::REQUEST_ENTITY_INCOMPLETE);
    assert_eq!(post(&mut server, block(2)), Code::REQUEST_ENTITY_INCOMPLETE);
    assert_eq!(server.counters().malformed, 2);
    assert_eq!(post(&mut server, block(0)), Code::CONTINUE);
    assert_eq!(server.sessions(), 1);
}

#[test]
fn each_lost_block_of_the_ecdhe_ecdsa_flights_is_recovered() {
    let clean = rpk_handshake(2).log.len();
    assert!(clean > 15, "{clean} messages");
    for lost in 0..clean {
        let link = Link::with(
            PEER,
            move |i, _, _| {
                if i == lost {
                    Fate::Lose
                } else {
                    Fate::Deliver
                }
            },
        );
        let link = rpk_handshake_with(2, link);
        // The lost message is sent again, and a lost response means its request went twice.
        assert_eq!(link.log.len(), clean + 1 + lost % 2, "lost #{lost}");
    }
}

/// Messages in a clean PSK handshake.
const PSK_MESSAGES: usize = 6;

#[test]
fn each_lost_message_is_recovered_by_coap_retransmission() {
    for lost in 0..PSK_MESSAGES {
        let trust = SENSOR_PSK;
        let mut server = psk_endpoint::<4>(&trust, EndpointConfig::default());
        let mut client = psk_client(1, CarrierConfig::default());
        let mut link = Link::with(
            PEER,
            |i, _, _| if i == lost { Fate::Lose } else { Fate::Deliver },
        );
        assert!(link.run(&mut client, &mut server, 60_000), "lost #{lost}");
        assert_eq!(client.retransmissions(), 1, "lost #{lost}");
        // The retransmission came after ACK_TIMEOUT (2 s) to ACK_TIMEOUT * 1.5.
        assert!(
            (2_000..=3_000).contains(&link.now.as_millis()),
            "{}",
            link.now
        );
        // A lost response: the retransmitted request got the cached one, no second step.
        let c = server.counters();
        assert_eq!(c.created, 1, "lost #{lost}");
        assert_eq!(c.established, 1);
        assert_eq!(
            c.duplicates,
            u64::from(lost == 3 || lost == 5),
            "lost #{lost}"
        );
        assert_eq!(server.sessions(), 1);
    }
}

#[test]
fn a_client_gives_up_after_max_retransmit() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<4>(&trust, EndpointConfig::default());
    let mut client = psk_client(1, CarrierConfig::default());
    let mut link = Link::with(PEER, |_, to, _| {
        if to == To::Server {
            Fate::Lose
        } else {
            Fate::Deliver
        }
    });
    assert!(!link.run(&mut client, &mut server, 1_000_000));
    assert_eq!(client.failure(), Some(sigil_dtls_coap::Error::Timeout));
    // 1 + MAX_RETRANSMIT (4) transmissions.
    assert_eq!(link.log.len(), 5);
}

/// A device may compute its flight for longer than ACK_TIMEOUT: a request's retransmission
/// timer starts when it first leaves, not when it was built.
#[test]
fn the_retransmission_timer_starts_when_the_request_leaves() {
    let mut client = psk_client(1, CarrierConfig::default());
    // Built at 0; nothing to wake for, and nothing given up, until it is sent.
    assert_eq!(client.poll_timeout(), None);
    client.handle_timeout(at(100_000)).unwrap();
    let mut buf = [0u8; MAX_DATAGRAM];
    let n = client.poll_transmit(at(100_000), &mut buf).unwrap();
    let put = buf[..n].to_vec();
    let t = client.poll_timeout().unwrap().as_millis();
    assert!((102_000..=103_000).contains(&t), "{t}");
    client.handle_timeout(at(t - 1)).unwrap();
    assert_eq!(client.poll_transmit(at(t - 1), &mut buf), None);
    client.handle_timeout(at(t)).unwrap();
    let n = client.poll_transmit(at(t), &mut buf).unwrap();
    assert_eq!(buf[..n], put[..], "the same request, the same message ID");
    assert_eq!(client.retransmissions(), 1);
}

/// The server piggybacks its responses; one that sends an Empty ACK and the response
/// separately (RFC 7252 §5.2.2) still completes the handshake: the Empty ACK stops the
/// retransmission, and the Confirmable response is acknowledged (again when it comes again).
#[test]
fn a_separate_response_after_an_empty_ack_completes_the_handshake() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<4>(&trust, EndpointConfig::default());
    let mut client = psk_client(1, CarrierConfig::default());
    let mut rng = Counter::new(5, 5);
    let mut buf = [0u8; MAX_DATAGRAM];
    let mut answer = [0u8; MAX_DATAGRAM];
    let mut now = at(0);
    let (mut acks, mut requests, mut separate_mid) = (Vec::new(), 0, 0x7000u16);
    while !client.is_established() {
        assert!(client.failure().is_none(), "{:?}", client.failure());
        assert!(requests < 10, "no progress");
        let mut sent = Vec::new();
        while let Some(n) = client.poll_transmit(now, &mut buf) {
            sent.push(buf[..n].to_vec());
        }
        for d in sent {
            let m = Message::parse(&d).unwrap();
            if m.code == Code::EMPTY {
                assert_eq!(m.mtype, MessageType::Acknowledgement);
                acks.push(m.message_id);
                continue;
            }
            requests += 1;
            let n = server
                .handle_datagram(now, PEER, &d, &mut rng, &mut answer)
                .unwrap();
            // The Empty ACK first, then the response as a Confirmable message of its own,
            // twice.
            let mid = m.message_id.to_be_bytes();
            client
                .handle_datagram(now, &[0x60, 0, mid[0], mid[1]], &mut rng)
                .unwrap();
            let mut con = answer[..n].to_vec();
            con[0] &= !0x30;
            separate_mid += 1;
            con[2..4].copy_from_slice(&separate_mid.to_be_bytes());
            now += Duration::from_secs(5);
            assert!(
                client.poll_transmit(now, &mut buf).is_none(),
                "no retransmission"
            );
            client.handle_datagram(now, &con, &mut rng).unwrap();
            client.handle_datagram(now, &con, &mut rng).unwrap();
        }
    }
    while let Some(n) = client.poll_transmit(now, &mut buf) {
        acks.push(Message::parse(&buf[..n]).unwrap().message_id);
    }
    // Three requests (the PUT, again with the cookie, then the POST), each response
    // acknowledged both times it came.
    assert_eq!(requests, 3);
    assert_eq!(acks, [0x7001, 0x7001, 0x7002, 0x7002, 0x7003, 0x7003]);
    assert_eq!((client.retransmissions(), client.ignored()), (0, 3));
    assert_eq!(server.counters().established, 1);
}

#[test]
fn duplicates_and_reordering_change_nothing() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<4>(&trust, EndpointConfig::default());
    let mut client = psk_client(1, CarrierConfig::default());
    // Every datagram twice.
    let mut link = Link::with(PEER, |_, _, _| Fate::Duplicate);
    assert!(link.run(&mut client, &mut server, 10_000));
    let c = *server.counters();
    assert_eq!((c.created, c.established), (1, 1));
    assert_eq!(c.duplicates, 2, "the second PUT and the POST came twice");
    assert!(
        client.ignored() >= 3,
        "the duplicate responses were ignored"
    );

    // Each request held back and delivered after its retransmission (late copies).
    let mut server = psk_endpoint::<4>(&trust, EndpointConfig::default());
    let mut client = psk_client(2, CarrierConfig::default());
    let mut held = 0;
    let mut link = Link::with(PEER, |_, to, _| {
        if to == To::Server && held < 3 {
            held += 1;
            Fate::Hold
        } else {
            Fate::Deliver
        }
    });
    assert!(link.run(&mut client, &mut server, 60_000));
    let c = server.counters();
    assert_eq!((c.created, c.established), (1, 1));
    assert_eq!(server.sessions(), 1, "a late PUT opened no second session");
}

fn request(code: Code, mtype: MessageType, mid: u16, path: &[&str], payload: &[u8]) -> Vec<u8> {
    let mut buf = [0u8; 512];
    let mut m = MessageBuilder::new(&mut buf, mtype, code, mid, &[1, 2]).unwrap();
    for p in path {
        m.option(option::URI_PATH, p.as_bytes()).unwrap();
    }
    let n = m.finish_with_payload(payload).unwrap();
    buf[..n].to_vec()
}

#[test]
fn the_cookie_exchange_keeps_no_state_and_never_amplifies() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<4>(&trust, EndpointConfig::default());
    let client = psk_client(1, CarrierConfig::default());
    let mut client = client;
    let mut put = [0u8; MAX_DATAGRAM];
    let n = client.poll_transmit(at(0), &mut put).unwrap();
    let mut out = [0u8; MAX_DATAGRAM];
    let r = server
        .handle_datagram(at(0), PEER, &put[..n], &mut Counter::new(8, 3), &mut out)
        .unwrap();
    assert!(r <= n, "4.01 of {r} bytes to a PUT of {n}");
    assert_eq!(Message::parse(&out[..r]).unwrap().code, Code::UNAUTHORIZED);
    assert_eq!(server.sessions(), 0);
    assert_eq!(server.counters().hello_verify, 1);

    // The ClientHello with the cookie, sent from another address: the cookie is bound to
    // the first, so it is a bad cookie there, and still no state.
    client
        .handle_datagram(at(1), &out[..r], &mut Counter::new(9, 3))
        .unwrap();
    let n = client.poll_transmit(at(0), &mut put).unwrap();
    let r = server
        .handle_datagram(
            at(2),
            b"[2001:db8::99]:5683",
            &put[..n],
            &mut Counter::new(8, 3),
            &mut out,
        )
        .unwrap();
    assert!(r <= n);
    assert_eq!(Message::parse(&out[..r]).unwrap().code, Code::UNAUTHORIZED);
    assert_eq!(server.counters().bad_cookie, 1);
    assert_eq!(server.sessions(), 0);
    // From the right address it creates the session.
    let r = server
        .handle_datagram(at(3), PEER, &put[..n], &mut Counter::new(8, 3), &mut out)
        .unwrap();
    assert_eq!(Message::parse(&out[..r]).unwrap().code, Code::CREATED);
    assert_eq!(server.sessions(), 1);
}

/// One whole PSK handshake from `peer`; returns the session id, or the client's failure.
fn handshake<const N: usize>(
    server: &mut PskEndpoint<'_, N>,
    peer: &[u8],
    seed: u8,
    start_ms: u64,
) -> Result<u32, Option<sigil_dtls_coap::Error>> {
    let mut client = Client::connect(
        RustCrypto,
        NoTrust,
        CarrierConfig::default(),
        &mut Counter::new(seed, 37),
        Credentials::Psk {
            identity: SENSOR_PSK.identity,
            key: SENSOR_PSK.key,
        },
        at(start_ms),
    )
    .unwrap();
    let mut link = Link::new(peer);
    link.now = at(start_ms);
    if link.run(&mut client, server, start_ms + 1_000) {
        Ok(client.session_id().unwrap())
    } else {
        Err(client.failure())
    }
}

#[test]
fn the_callers_admission_check_and_the_host_prefix_bound_sessions() {
    let trust = SENSOR_PSK;
    let config = EndpointConfig {
        max_per_peer: 1,
        host_prefix: 4,
        ..EndpointConfig::default()
    };
    let mut server = psk_endpoint::<4>(&trust, config);
    let refused = sigil_dtls_coap::Error::Refused(Code::SERVICE_UNAVAILABLE);
    // Peer addresses written host first: two ports of one host share its one session.
    handshake(&mut server, b"\x0a\x00\x00\x01:1000", 1, 0).unwrap();
    assert_eq!(
        handshake(&mut server, b"\x0a\x00\x00\x01:2000", 2, 0),
        Err(Some(refused))
    );
    assert_eq!(server.counters().peer_limit, 1);
    handshake(&mut server, b"\x0a\x00\x00\x02:1000", 3, 0).unwrap();

    // The caller's check is asked once the cookie is valid, never for the first ClientHello.
    let mut client = Client::connect(
        RustCrypto,
        NoTrust,
        CarrierConfig::default(),
        &mut Counter::new(4, 37),
        Credentials::Psk {
            identity: SENSOR_PSK.identity,
            key: SENSOR_PSK.key,
        },
        at(0),
    )
    .unwrap();
    let peer = b"\x0a\x00\x00\x03:1";
    let (mut buf, mut out) = ([0u8; MAX_DATAGRAM], [0u8; MAX_DATAGRAM]);
    let mut rng = Counter::new(5, 1);
    let mut asked = Vec::new();
    for _ in 0..2 {
        let n = client.poll_transmit(at(0), &mut buf).unwrap();
        let mut admit = |p: &[u8]| {
            asked.push(p.to_vec());
            false
        };
        let r = server
            .handle_datagram_with(
                at(0),
                peer,
                &buf[..n],
                &PSK_ONLY,
                &mut admit,
                &mut rng,
                &mut out,
            )
            .unwrap();
        let _ = client.handle_datagram(at(0), &out[..r], &mut rng);
    }
    assert_eq!(asked, vec![peer.to_vec()]);
    assert_eq!(client.failure(), Some(refused));
    assert_eq!(server.counters().not_admitted, 1);
    assert_eq!(server.sessions(), 2);
}

#[test]
fn the_table_is_bounded_per_peer_and_in_total() {
    let trust = SENSOR_PSK;
    let config = EndpointConfig {
        max_per_peer: 2,
        ..EndpointConfig::default()
    };
    let mut server = psk_endpoint::<3>(&trust, config);
    let a = b"[2001:db8::a]:1";
    handshake(&mut server, a, 1, 0).unwrap();
    handshake(&mut server, a, 2, 0).unwrap();
    let refused = sigil_dtls_coap::Error::Refused(Code::SERVICE_UNAVAILABLE);
    assert_eq!(handshake(&mut server, a, 3, 0), Err(Some(refused)));
    assert_eq!(server.counters().peer_limit, 1);
    handshake(&mut server, b"[2001:db8::b]:1", 4, 0).unwrap();
    assert_eq!(
        handshake(&mut server, b"[2001:db8::c]:1", 5, 0),
        Err(Some(refused))
    );
    assert_eq!(server.counters().table_full, 1);
    assert_eq!(server.sessions(), 3);
}

#[test]
fn sessions_expire_when_idle_and_can_be_deleted() {
    let trust = SENSOR_PSK;
    let config = EndpointConfig {
        handshake_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(600),
        ..EndpointConfig::default()
    };
    let mut server = psk_endpoint::<4>(&trust, config);
    // A handshake abandoned after the 2.01: expires 30 s after it was created.
    abandoned(&mut server, PEER, 1, 0);
    assert_eq!(server.sessions(), 1);
    assert_eq!(server.poll_timeout(), Some(at(30_000)));
    server.handle_timeout(at(29_999));
    assert_eq!(server.sessions(), 1);
    server.handle_timeout(at(30_000));
    assert_eq!(server.sessions(), 0);
    assert_eq!(server.counters().expired, 1);

    // An established one lives while used.
    let id = handshake(&mut server, PEER, 2, 40_000).unwrap();
    assert!(server.traffic_mut(id, PEER, at(500_000)).is_some());
    server.handle_timeout(at(1_099_999));
    assert_eq!(server.sessions(), 1);
    server.handle_timeout(at(1_100_000));
    assert_eq!(server.sessions(), 0);
    assert_eq!(server.counters().expired, 2);

    // An established session is not deleted by a plain (forgeable) DELETE: it ends with its
    // authenticated close_notify, after which the caller removes it.
    let id = handshake(&mut server, PEER, 3, 2_000_000).unwrap();
    let path = ["dtls", &id.to_string()];
    let del = request(Code::DELETE, MessageType::Confirmable, 9000, &path, &[]);
    let mut out = [0u8; MAX_DATAGRAM];
    let mut rng = Counter::new(1, 1);
    let r = server
        .handle_datagram(at(2_000_100), PEER, &del, &mut rng, &mut out)
        .unwrap();
    assert_eq!(
        Message::parse(&out[..r]).unwrap().code,
        Code::METHOD_NOT_ALLOWED
    );
    assert_eq!(server.sessions(), 1);
    assert!(server.remove(id, PEER));
    assert!(!server.remove(id, PEER));
    assert_eq!(server.sessions(), 0);

    // DELETE of a session in its handshake: only the peer's own, then gone.
    let id = abandoned(&mut server, PEER, 4, 2_000_000);
    let path = ["dtls", &id.to_string()];
    let del = request(Code::DELETE, MessageType::Confirmable, 9001, &path, &[]);
    let r = server
        .handle_datagram(at(2_000_600), b"[2001:db8::66]:1", &del, &mut rng, &mut out)
        .unwrap();
    assert_eq!(Message::parse(&out[..r]).unwrap().code, Code::NOT_FOUND);
    assert_eq!(server.sessions(), 1);
    let r = server
        .handle_datagram(at(2_000_600), PEER, &del, &mut rng, &mut out)
        .unwrap();
    assert_eq!(Message::parse(&out[..r]).unwrap().code, Code::DELETED);
    assert_eq!(server.sessions(), 0);
    assert_eq!(server.counters().deleted, 1);
    let post = request(Code::POST, MessageType::Confirmable, 9002, &path, b"x");
    let r = server
        .handle_datagram(at(2_000_700), PEER, &post, &mut rng, &mut out)
        .unwrap();
    assert_eq!(Message::parse(&out[..r]).unwrap().code, Code::NOT_FOUND);
    assert_eq!(server.counters().unknown_session, 2);
}

#[test]
fn an_established_session_taken_out_leaves_only_its_last_answer() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<2>(&trust, EndpointConfig::default());
    // The 2.04 that completes the handshake is lost: the session is taken out, and the
    // client then sends its final POST again.
    let mut client = psk_client(1, CarrierConfig::default());
    let mut link = Link::with(PEER, |i, to, _| {
        if i >= 5 && to == To::Client {
            Fate::Lose
        } else {
            Fate::Deliver
        }
    });
    assert!(!link.run(&mut client, &mut server, 1_000));
    let taken = server.take_established();
    assert!(server.take_established().is_none());
    let mut link = Link::with(PEER, |_, _, _| Fate::Deliver);
    assert!(link.run(&mut client, &mut server, 60_000));
    let est = taken.expect("taken out");
    assert_eq!(est.peer(), PEER);
    assert_eq!(Some(est.id), client.session_id());
    assert_eq!(server.counters().handed_off, 1);
    assert_eq!(server.counters().duplicates, 1);
    assert_eq!(server.sessions(), 0);
    assert!(server.session_of_peer(PEER).is_none());
    // The two sides' keys match: a record from the client opens in the taken-out session.
    let mut client = client.into_traffic().ok().unwrap();
    let mut server_side = est.traffic;
    client.send(b"reading").unwrap();
    let mut buf = [0u8; MAX_DATAGRAM];
    let n = client.poll_transmit(at(0), &mut buf).unwrap();
    server_side.handle_datagram(at(0), &buf[..n]).unwrap();
    assert_eq!(server_side.poll_app_data(&mut buf), Some(7));
    // Anything else to the old resource: 4.04.
    let path = ["dtls", &est.id.to_string()];
    let get = request(Code::GET, MessageType::Confirmable, 9000, &path, &[]);
    let mut rng = Counter::new(1, 1);
    let mut out = [0u8; MAX_DATAGRAM];
    let r = server
        .handle_datagram(at(61_000), PEER, &get, &mut rng, &mut out)
        .unwrap();
    assert_eq!(Message::parse(&out[..r]).unwrap().code, Code::NOT_FOUND);
    // Its slot is the first to go for a new session once the table is full.
    assert!(handshake(&mut server, PEER, 2, 62_000).is_ok());
    assert!(handshake(&mut server, b"[2001:db8::77]:5683", 3, 63_000).is_ok());
    assert_eq!(server.sessions(), 2);
}

#[test]
fn every_refusal_is_answered_and_counted() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<2>(&trust, EndpointConfig::default());
    let mut out = [0u8; MAX_DATAGRAM];
    let mut rng = Counter::new(1, 1);
    let mut ask = |server: &mut PskEndpoint<'_, 2>, d: &[u8]| {
        server
            .handle_datagram(at(0), PEER, d, &mut rng, &mut out)
            .map(|n| Message::parse(&out[..n]).unwrap().code)
    };
    let con = MessageType::Confirmable;
    assert_eq!(
        ask(&mut server, &request(Code::GET, con, 1, &["dtls"], &[])),
        Some(Code::METHOD_NOT_ALLOWED)
    );
    assert_eq!(
        ask(&mut server, &request(Code::PUT, con, 2, &["other"], &[])),
        Some(Code::NOT_FOUND)
    );
    assert_eq!(
        ask(
            &mut server,
            &request(Code::POST, con, 3, &["dtls", "7"], &[1])
        ),
        Some(Code::NOT_FOUND)
    );
    assert_eq!(
        ask(
            &mut server,
            &request(Code::PUT, con, 4, &["dtls"], b"not a hello")
        ),
        Some(Code::BAD_REQUEST)
    );
    // A ClientHello in blocks cannot be taken by a stateless server.
    let mut buf = [0u8; 64];
    let mut m = MessageBuilder::new(&mut buf, con, Code::PUT, 5, &[]).unwrap();
    m.option(option::URI_PATH, b"dtls").unwrap();
    m.option(option::BLOCK1, &[0x0a]).unwrap();
    let n = m.finish_with_payload(&[0; 16]).unwrap();
    assert_eq!(
        ask(&mut server, &buf[..n]),
        Some(Code::REQUEST_ENTITY_TOO_LARGE)
    );
    // Non-confirmable requests and garbage get no answer.
    assert_eq!(
        ask(
            &mut server,
            &request(Code::PUT, MessageType::NonConfirmable, 6, &["dtls"], &[])
        ),
        None
    );
    assert_eq!(ask(&mut server, &[0xff, 0, 1]), None);
    let c = *server.counters();
    assert_eq!(
        (c.wrong_method, c.unknown_session, c.malformed, c.oversized),
        (1, 2, 3, 1)
    );
    assert_eq!(server.sessions(), 0);
}

#[test]
fn a_failed_handshake_removes_its_session_and_is_counted() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<2>(&trust, EndpointConfig::default());
    // The right identity with the wrong key: the server's Finished check fails on the POST.
    let mut client = Client::connect(
        RustCrypto,
        NoTrust,
        CarrierConfig::default(),
        &mut Counter::new(1, 37),
        Credentials::Psk {
            identity: SENSOR_PSK.identity,
            key: b"not the right key",
        },
        at(0),
    )
    .unwrap();
    let mut link = Link::new(PEER);
    assert!(!link.run(&mut client, &mut server, 10_000));
    assert_eq!(
        client.failure(),
        Some(sigil_dtls_coap::Error::Refused(Code::FORBIDDEN))
    );
    let c = server.counters();
    assert_eq!((c.created, c.handshake_failed, c.established), (1, 1, 0));
    assert_eq!(server.sessions(), 0);
}

/// A handshake abandoned after its 2.01 from `peer`, started at `start_ms`: its session id.
fn abandoned<const N: usize>(
    server: &mut PskEndpoint<'_, N>,
    peer: &[u8],
    seed: u8,
    start_ms: u64,
) -> u32 {
    let mut client = psk_client(seed, CarrierConfig::default());
    let mut link = Link::with(
        peer,
        |i, _, _| if i >= 4 { Fate::Lose } else { Fate::Deliver },
    );
    link.now = at(start_ms);
    assert!(!link.run(&mut client, server, start_ms + 500));
    client.session_id().expect("the 2.01 arrived")
}

#[test]
fn a_half_open_handshake_expires_after_its_timeout_however_often_it_is_asked_for() {
    let trust = SENSOR_PSK;
    let config = EndpointConfig {
        handshake_timeout: Duration::from_secs(30),
        ..EndpointConfig::default()
    };
    let mut server = psk_endpoint::<2>(&trust, config);
    let id = abandoned(&mut server, PEER, 1, 0);
    let path = ["dtls", &id.to_string()];
    let mut rng = Counter::new(1, 1);
    let mut out = [0u8; MAX_DATAGRAM];
    for (i, t) in [10_000u64, 20_000, 29_000].into_iter().enumerate() {
        let get = request(
            Code::GET,
            MessageType::Confirmable,
            7000 + i as u16,
            &path,
            &[],
        );
        let r = server
            .handle_datagram(at(t), PEER, &get, &mut rng, &mut out)
            .unwrap();
        assert_eq!(Message::parse(&out[..r]).unwrap().code, Code::CONTENT);
    }
    assert_eq!(server.poll_timeout(), Some(at(30_000)));
    server.handle_timeout(at(30_000));
    assert_eq!(server.sessions(), 0);
    assert_eq!(server.counters().expired, 1);
}

#[test]
fn a_full_table_gives_a_newcomer_the_oldest_half_open_handshake_of_the_heaviest_peer() {
    let trust = SENSOR_PSK;
    // (A shield of 2 s: the first handshake may give way at 2 s, the second not yet.)
    let config = EndpointConfig {
        max_per_peer: 2,
        handshake_shield: Duration::from_secs(2),
        ..EndpointConfig::default()
    };
    let mut server = psk_endpoint::<2>(&trust, config);
    let first = abandoned(&mut server, PEER, 1, 0);
    let second = abandoned(&mut server, PEER, 2, 1_000);
    assert_eq!(server.sessions(), 2);
    // Another peer gets in, in the place of the heaviest peer's oldest half-open handshake.
    handshake(&mut server, b"[2001:db8::99]:1", 3, 2_000).unwrap();
    assert_eq!(server.counters().evicted, 1);
    assert_eq!(server.counters().table_full, 0);
    assert!(!server.remove(first, PEER), "the oldest went");
    assert!(server.remove(second, PEER));
    // Peers holding one each: nobody is pushed out for a third.
    let mut server = psk_endpoint::<2>(&trust, config);
    abandoned(&mut server, PEER, 1, 0);
    abandoned(&mut server, b"[2001:db8::99]:1", 2, 0);
    let refused = sigil_dtls_coap::Error::Refused(Code::SERVICE_UNAVAILABLE);
    assert_eq!(
        handshake(&mut server, b"[2001:db8::77]:1", 3, 1_000),
        Err(Some(refused))
    );
    assert_eq!(server.counters().table_full, 1);
    assert_eq!(server.counters().evicted, 0);
}

#[test]
fn only_a_true_retransmission_gets_the_cached_answer() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<2>(&trust, EndpointConfig::default());
    let id = abandoned(&mut server, PEER, 1, 0);
    let path = ["dtls", &id.to_string()];
    let mut rng = Counter::new(1, 1);
    let mut out = [0u8; MAX_DATAGRAM];
    let get = request(Code::GET, MessageType::Confirmable, 7000, &path, &[]);
    let first = server
        .handle_datagram(at(100), PEER, &get, &mut rng, &mut out)
        .unwrap();
    let cached = out[..first].to_vec();
    let again = server
        .handle_datagram(at(200), PEER, &get, &mut rng, &mut out)
        .unwrap();
    assert_eq!(out[..again], cached[..]);
    assert_eq!(server.counters().duplicates, 1);
    // The same message ID with another token (a forged request): not a retransmission.
    let mut other = get.clone();
    other[4] ^= 0xff;
    let r = server
        .handle_datagram(at(300), PEER, &other, &mut rng, &mut out)
        .unwrap();
    assert_ne!(out[..r], cached[..]);
    assert_eq!(server.counters().duplicates, 1);
}

/// A session keeps its latest request's answer for a retransmission (same message ID, token
/// and length) until EXCHANGE_LIFETIME (247 s) after the request: a request of another length
/// under the same message ID and token is answered on its own, and one repeated after the
/// lifetime is taken as new (before, the answer was kept until the next request).
#[test]
fn a_cached_answer_is_for_the_same_request_within_exchange_lifetime() {
    let trust = SENSOR_PSK;
    let mut server = psk_endpoint::<2>(&trust, EndpointConfig::default());
    let id = handshake(&mut server, PEER, 1, 0).unwrap();
    let path = ["dtls", &id.to_string()];
    let mut rng = Counter::new(1, 1);
    let mut out = [0u8; MAX_DATAGRAM];
    let get = request(Code::GET, MessageType::Confirmable, 7000, &path, &[]);
    let first = server
        .handle_datagram(at(10_000), PEER, &get, &mut rng, &mut out)
        .unwrap();
    let cached = out[..first].to_vec();
    let again = server
        .handle_datagram(at(11_000), PEER, &get, &mut rng, &mut out)
        .unwrap();
    assert_eq!(out[..again], cached[..]);
    assert_eq!(server.counters().duplicates, 1);

    // The same message ID and token, a longer request (it asks for the flight's second
    // 16-byte block): its own answer, not the cached one.
    let mut buf = [0u8; 64];
    let mut m =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, 7000, &[1, 2]).unwrap();
    for p in path {
        m.option(option::URI_PATH, p.as_bytes()).unwrap();
    }
    let (v, n) = BlockOption::new(1, false, 0).encode().unwrap();
    m.option(option::BLOCK2, &v[..n]).unwrap();
    let n = m.finish_with_payload(&[]).unwrap();
    let block = buf[..n].to_vec();
    assert!(block.len() > get.len() && block[2..4] == get[2..4]);
    let r = server
        .handle_datagram(at(12_000), PEER, &block, &mut rng, &mut out)
        .unwrap();
    let m = Message::parse(&out[..r]).unwrap();
    assert_eq!(m.code, Code::CONTENT);
    assert_eq!(m.block2().unwrap().unwrap().num, 1);
    assert_ne!(out[..r], cached[..]);
    assert_eq!(server.counters().duplicates, 1);

    // It is now the latest: answered again from the cache until 247 s after it came.
    let block_answer = out[..r].to_vec();
    let r = server
        .handle_datagram(at(12_000 + 246_999), PEER, &block, &mut rng, &mut out)
        .unwrap();
    assert_eq!(out[..r], block_answer[..]);
    assert_eq!(server.counters().duplicates, 2);
    // From then on it is a new request (answered the same, as a GET is), not a duplicate.
    let r = server
        .handle_datagram(at(12_000 + 247_000), PEER, &block, &mut rng, &mut out)
        .unwrap();
    assert_eq!(out[..r], block_answer[..]);
    assert_eq!(server.counters().duplicates, 2);
    assert_eq!(server.sessions(), 1);
}

/// A table full of hosts holding one half-open handshake each gives way: a newcomer whose
/// host holds none takes the place of the oldest stranger's once that one went
/// `handshake_shield` without progress (2 s here; before, 5.03); with more than half the
/// table in handshakes, strangers' without progress for the crowded timeout are removed
/// first; a known peer's handshake (the caller says so) is never pushed out for a newcomer.
#[test]
fn a_full_table_of_one_handshake_per_host_gives_way_to_newcomers() {
    let trust = SENSOR_PSK;
    let config = EndpointConfig {
        max_per_peer: 1,
        host_prefix: 4,
        handshake_timeout: Duration::from_secs(30),
        crowded_handshake_timeout: Duration::from_secs(8),
        handshake_shield: Duration::from_secs(2),
        ..EndpointConfig::default()
    };
    let mut server = psk_endpoint::<4>(&trust, config);
    let refused = sigil_dtls_coap::Error::Refused(Code::SERVICE_UNAVAILABLE);
    // Four hosts, one half-open handshake each (peer addresses host first).
    for i in 0..4u8 {
        abandoned(
            &mut server,
            &[10, 0, 0, i, b':', b'1'],
            10 + i,
            u64::from(i) * 10,
        );
    }
    assert_eq!(server.sessions(), 4);
    // Nobody has had its round trips yet: the newcomer is refused.
    assert_eq!(
        handshake(&mut server, b"\x0a\x00\x00\x09:1", 20, 100),
        Err(Some(refused))
    );
    assert_eq!(server.counters().table_full, 1);
    // Two seconds on, it takes the oldest stranger's place and completes.
    handshake(&mut server, b"\x0a\x00\x00\x09:1", 21, 2_000).unwrap();
    assert_eq!(server.counters().evicted_oldest, 1);
    assert_eq!(server.counters().evicted, 0);
    assert_eq!(server.sessions(), 4);

    // Nine seconds on, the three strangers left are older than the crowded timeout: a
    // newcomer's hello removes them first (no push-out needed).
    handshake(&mut server, b"\x0a\x00\x00\x0a:1", 22, 9_000).unwrap();
    assert_eq!(server.counters().expired_crowded, 3);
    assert_eq!(server.counters().evicted_oldest, 1);

    // A known peer's half-open handshake is not pushed out for a stranger.
    let mut server = psk_endpoint::<1>(&trust, config);
    let mut client = psk_client(30, CarrierConfig::default());
    let (mut buf, mut out) = ([0u8; MAX_DATAGRAM], [0u8; MAX_DATAGRAM]);
    let mut rng = Counter::new(6, 1);
    let known = b"\x0a\x00\x00\x20:1";
    for _ in 0..2 {
        let n = client.poll_transmit(at(0), &mut buf).unwrap();
        let r = server
            .handle_datagram_from(
                at(0),
                known,
                sigil_dtls_coap::Standing::Known,
                &buf[..n],
                &PSK_ONLY,
                &mut |_| true,
                &mut rng,
                &mut out,
            )
            .unwrap();
        let _ = client.handle_datagram(at(0), &out[..r], &mut rng);
    }
    assert_eq!(server.sessions(), 1);
    assert_eq!(
        handshake(&mut server, b"\x0a\x00\x00\x21:1", 31, 20_000),
        Err(Some(refused))
    );
    assert_eq!(server.counters().evicted_oldest, 0);
    assert_eq!(server.counters().expired_crowded, 0);
}

/// Two hosts' half-open handshakes fill a table of two, 16 s old: past the default 15 s shield
/// (one CoAP retransmission sequence), within a crowded timeout of 20 s.
fn two_strangers_16_s_old() -> (EndpointConfig, [&'static [u8]; 2]) {
    let config = EndpointConfig {
        max_per_peer: 1,
        host_prefix: 4,
        handshake_timeout: Duration::from_secs(120),
        crowded_handshake_timeout: Duration::from_secs(20),
        ..EndpointConfig::default()
    };
    assert_eq!(config.handshake_shield, Duration::from_secs(15));
    (config, [b"\x0a\x00\x00\x01:1", b"\x0a\x00\x00\x02:1"])
}

#[test]
fn a_client_hello_the_handshake_refuses_pushes_no_one_out() {
    let trust = SENSOR_PSK;
    let (config, strangers) = two_strangers_16_s_old();
    let mut server = psk_endpoint::<2>(&trust, config);
    for (i, peer) in strangers.iter().enumerate() {
        abandoned(&mut server, peer, 10 + i as u8, 0);
    }
    // A raw-public-key client at a PSK-only endpoint: its ClientHello has a valid cookie,
    // then the handshake refuses it (4.03). Before, a stranger's slot was cleared first.
    let (client_key, _) = key(60);
    let mut client = Client::connect(
        RustCrypto,
        NoTrust,
        CarrierConfig::default(),
        &mut Counter::new(61, 37),
        Credentials::RawPublicKey(Some(&client_key)),
        at(16_000),
    )
    .unwrap();
    let newcomer: &[u8] = b"\x0a\x00\x00\x09:1";
    let mut link = Link::new(newcomer);
    link.now = at(16_000);
    assert!(!link.run(&mut client, &mut server, 17_000));
    assert_eq!(
        client.failure(),
        Some(sigil_dtls_coap::Error::Refused(Code::FORBIDDEN))
    );
    let c = server.counters();
    assert_eq!(c.refused_hello, 1);
    assert_eq!((c.evicted, c.evicted_oldest, c.expired_crowded), (0, 0, 0));
    assert_eq!(server.half_open(&[]), 2);
    // A ClientHello the handshake takes, from the same host, gets in in a stranger's place.
    handshake(&mut server, newcomer, 62, 17_000).unwrap();
    assert_eq!(server.counters().evicted_oldest, 1);
}

#[test]
fn a_strangers_handshake_is_safe_for_a_retransmission_sequence_and_evictions_are_budgeted() {
    let trust = SENSOR_PSK;
    let (config, _) = two_strangers_16_s_old();
    let mut server = psk_endpoint::<4>(&trust, config);
    for i in 0..4u8 {
        abandoned(&mut server, &[10, 0, 1, i, b':', b'1'], 20 + i, 0);
    }
    let refused = sigil_dtls_coap::Error::Refused(Code::SERVICE_UNAVAILABLE);
    // 14 s without progress: within a client's CoAP retransmissions (2 + 4 + 8 s), so no
    // stranger's handshake gives way (before: any 2 s old did).
    assert_eq!(
        handshake(&mut server, b"\x0a\x00\x02\x01:1", 30, 14_000),
        Err(Some(refused))
    );
    assert_eq!(server.counters().table_full, 1);
    assert_eq!(server.counters().evicted_oldest, 0);
    // At 15 s, newcomers push out the oldest, as far as the budget's reserve (2) goes...
    handshake(&mut server, b"\x0a\x00\x02\x02:1", 31, 15_000).unwrap();
    handshake(&mut server, b"\x0a\x00\x02\x03:1", 32, 15_100).unwrap();
    assert_eq!(server.counters().evicted_oldest, 2);
    // ...then the budget (4 per 120 s here) refuses the next one for now.
    assert_eq!(
        handshake(&mut server, b"\x0a\x00\x02\x04:1", 33, 15_200),
        Err(Some(refused))
    );
    assert_eq!(server.counters().eviction_budget, 1);
    assert_eq!(server.counters().evicted_oldest, 2);
    // 30 s later (120 s / 4) one more eviction is allowed.
    handshake(&mut server, b"\x0a\x00\x02\x05:1", 34, 45_300).unwrap();
    assert_eq!(server.counters().evicted_oldest, 3);
}

#[test]
fn a_suspect_takes_only_a_free_slot() {
    let trust = SENSOR_PSK;
    let (config, strangers) = two_strangers_16_s_old();
    let mut server = psk_endpoint::<2>(&trust, config);
    for (i, peer) in strangers.iter().enumerate() {
        abandoned(&mut server, peer, 70 + i as u8, 0);
    }
    // A newcomer the caller calls a suspect (its host's last handshake was dropped
    // unfinished) gets 5.03 where a stranger would push out one of the two.
    let mut client = psk_client(72, CarrierConfig::default());
    let (mut buf, mut out) = ([0u8; MAX_DATAGRAM], [0u8; MAX_DATAGRAM]);
    let mut rng = Counter::new(8, 1);
    let peer: &[u8] = b"\x0a\x00\x00\x30:1";
    let mut last = None;
    for _ in 0..2 {
        let n = client.poll_transmit(at(16_000), &mut buf).unwrap();
        let r = server
            .handle_datagram_from(
                at(16_000),
                peer,
                sigil_dtls_coap::Standing::Suspect,
                &buf[..n],
                &PSK_ONLY,
                &mut |_| true,
                &mut rng,
                &mut out,
            )
            .unwrap();
        last = Some(Message::parse(&out[..r]).unwrap().code);
        let _ = client.handle_datagram(at(16_000), &out[..r], &mut rng);
    }
    assert_eq!(last, Some(Code::SERVICE_UNAVAILABLE));
    assert_eq!(server.counters().table_full, 1);
    assert_eq!(server.counters().evicted_oldest, 0);
    assert_eq!(server.half_open(&[]), 2);
    handshake(&mut server, b"\x0a\x00\x00\x31:1", 73, 16_100).unwrap();
    assert_eq!(server.counters().evicted_oldest, 1);
}

/// A server (or anyone answering for it with the right message ID and token) that answers the
/// client's Block2 GET with block 0 of its 2.01 again does not restart the download: the client
/// refuses the block (before, it took it and asked for block 1 again, for ever).
#[test]
fn a_block_0_again_during_a_download_ends_the_handshake() {
    let trust: OnePsk = SENSOR_PSK;
    let config = EndpointConfig {
        block_szx: 0,
        ..EndpointConfig::default()
    };
    let creds = ServerCredentials {
        psk: true,
        ..ServerCredentials::NONE
    };
    let mut server: Endpoint<'_, RustCrypto, &OnePsk, 2> =
        Endpoint::new(RustCrypto, &trust, creds, config, [9; 32]);
    let mut client: Client<RustCrypto, NoTrust> = Client::connect(
        RustCrypto,
        NoTrust,
        CarrierConfig::default(),
        &mut Counter::new(1, 37),
        Credentials::Psk {
            identity: SENSOR_PSK.identity,
            key: SENSOR_PSK.key,
        },
        at(0),
    )
    .unwrap();
    let mut rng = Counter::new(3, 3);
    let (mut d, mut o) = ([0u8; MAX_DATAGRAM], [0u8; MAX_DATAGRAM]);
    // PUT, 4.01; PUT with the cookie, 2.01 with block 0 of the server's flight.
    let mut created = Vec::new();
    for _ in 0..2 {
        let n = client.poll_transmit(at(0), &mut d).unwrap();
        let r = server
            .handle_datagram(at(0), PEER, &d[..n], &mut rng, &mut o)
            .unwrap();
        created = o[..r].to_vec();
        client.handle_datagram(at(0), &o[..r], &mut rng).unwrap();
    }
    assert_eq!(Message::parse(&created).unwrap().code, Code::CREATED);
    let mut rounds = 0;
    for _ in 0..1000 {
        let Some(n) = client.poll_transmit(at(1), &mut d) else {
            break;
        };
        let get = Message::parse(&d[..n]).unwrap();
        assert_eq!(get.code, Code::GET);
        let b = get.block2().unwrap().unwrap();
        assert_eq!(b.num, 1, "the client asks for block 1 again");
        // Answer with the 2.01's block 0 again, under this GET's message ID and token.
        let mut answer = created.clone();
        let tkl = usize::from(answer[0] & 0x0f);
        assert_eq!(tkl, get.token.len());
        answer[2..4].copy_from_slice(&get.message_id.to_be_bytes());
        answer[4..4 + tkl].copy_from_slice(get.token);
        if client.handle_datagram(at(1), &answer, &mut rng).is_err() {
            break;
        }
        if client.failure().is_some() {
            break;
        }
        rounds += 1;
    }
    assert_eq!(
        rounds, 0,
        "the client took block 0 again and asked for block 1 again"
    );
}
