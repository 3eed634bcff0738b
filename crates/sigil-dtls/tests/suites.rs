//! The comparison suites in memory: TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256 (RFC 8442) and
//! TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 (RFC 5289), each negotiated and carrying data both
//! ways, with the record overhead each implies and the refusals that matter.

use sigil_crypto::{CryptoProvider, RustCrypto, SignatureAlgorithm};
use sigil_dtls::record::Record;
use sigil_dtls::wire::{AlertDescription, CipherSuite, ContentType};
use sigil_dtls::Error;
use sigil_dtls::{
    Config, Connection, CookieVerified, Credentials, PinnedIdentities, ServerCredentials, Trust,
};
use sigil_identity::Identity;
use sigil_testkit::dtls::{at, drain, Link, Pair, Side, SENSOR_PSK as Keys};
use sigil_testkit::Counter;

/// The tests' randomness: each byte steps by 37 from the seed.
fn rng(seed: u8) -> Counter {
    Counter::new(seed, 37)
}

/// Cookie exchange, accept, then datagrams both ways until quiet, on a perfect link.
fn run<'a, T: Trust, U: Trust>(
    client: Connection<RustCrypto, T>,
    accept: impl FnOnce(CookieVerified, &[u8]) -> Result<Connection<RustCrypto, U>, Error> + 'a,
) -> Pair<'a, T, U> {
    let mut pair = Pair::new(client, |cookie, d, _| accept(cookie, d), Link::PERFECT);
    pair.run_until_quiet();
    pair
}

/// The errors either side returned, then the failure of each.
fn errors_of<T: Trust, U: Trust>(pair: &Pair<'_, T, U>) -> Vec<Error> {
    let mut errors = pair.errors.clone();
    errors.extend(pair.client.failure());
    errors.extend(pair.server.as_ref().and_then(|s| s.failure()));
    errors
}

/// Every datagram of the run, both ways.
fn seen<T, U>(pair: &Pair<'_, T, U>) -> Vec<Vec<u8>> {
    pair.log.iter().map(|d| d.bytes.clone()).collect()
}

/// Application data both ways; returns the size of the record carrying `data`.
fn exchange<T: Trust, U: Trust>(pair: &mut Pair<'_, T, U>, data: &[u8]) -> usize {
    pair.send_client(data).unwrap();
    pair.run_until_quiet();
    let record = pair.log.last().unwrap();
    assert_eq!(record.to, Side::Server);
    let n = record.bytes.len();
    assert_eq!(std::mem::take(&mut pair.server_received), [data]);
    pair.send_server(b"ack").unwrap();
    pair.run_until_quiet();
    assert_eq!(std::mem::take(&mut pair.client_received), [b"ack"]);
    n
}

fn server_hello_suite(seen: &[Vec<u8>]) -> u16 {
    // The ServerHello is the first handshake record from the server: cipher_suite sits after
    // version(2) random(32) session_id(1+0) in the message body.
    for d in seen {
        let (rec, _) = Record::parse(d).unwrap();
        if rec.header.content_type == ContentType::HANDSHAKE && rec.fragment[0] == 2 {
            let body = &rec.fragment[12..];
            let sid = usize::from(body[34]);
            return u16::from_be_bytes([body[35 + sid], body[36 + sid]]);
        }
    }
    panic!("no ServerHello")
}

const PSK_OFFER: ServerCredentials<'static> = ServerCredentials {
    psk: true,
    ..ServerCredentials::NONE
};

#[test]
fn ecdhe_psk_negotiates_and_protects_with_ccm8() {
    let c = Connection::connect(
        RustCrypto,
        Keys,
        Config::default(),
        &mut rng(1),
        Credentials::EcdhePsk {
            identity: b"sensor-1",
            key: b"0123456789abcdef",
        },
        at(0),
    )
    .unwrap();
    let mut pair = run(c, |cookie, d| {
        Connection::accept(
            RustCrypto,
            Keys,
            Config::default(),
            &PSK_OFFER,
            &mut rng(9),
            cookie,
            d,
            at(2),
        )
    });
    let errors = errors_of(&pair);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(pair.client.is_established() && pair.server().is_established());
    assert_eq!(
        server_hello_suite(&seen(&pair)),
        CipherSuite::TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256.0
    );
    assert_eq!(pair.server().psk_identity(), b"sensor-1");
    assert_eq!(
        exchange(&mut pair, b"reading") - b"reading".len(),
        13 + 8 + 8
    );
}

#[test]
fn ecdhe_psk_with_the_wrong_key_never_completes() {
    let c = Connection::connect(
        RustCrypto,
        Keys,
        Config::default(),
        &mut rng(2),
        Credentials::EcdhePsk {
            identity: b"sensor-1",
            key: b"not the right 16",
        },
        at(0),
    )
    .unwrap();
    let mut pair = run(c, |cookie, d| {
        Connection::accept(
            RustCrypto,
            Keys,
            Config::default(),
            &PSK_OFFER,
            &mut rng(9),
            cookie,
            d,
            at(2),
        )
    });
    let errors = errors_of(&pair);
    let s = pair.server();
    assert!(!s.is_established());
    assert!(!pair.client.is_established());
    // The client's Finished does not decrypt under the server's keys: dropped silently (RFC
    // 6347 §4.1.2.7), counted, and the client's handshake later times out.
    assert!(errors.is_empty(), "{errors:?}");
    assert!(pair.server().dropped() >= 1);
    // An unknown identity is named as such.
    let c = Connection::connect(
        RustCrypto,
        Keys,
        Config::default(),
        &mut rng(3),
        Credentials::EcdhePsk {
            identity: b"stranger",
            key: b"0123456789abcdef",
        },
        at(0),
    )
    .unwrap();
    let pair = run(c, |cookie, d| {
        Connection::accept(
            RustCrypto,
            Keys,
            Config::default(),
            &PSK_OFFER,
            &mut rng(9),
            cookie,
            d,
            at(2),
        )
    });
    let errors = errors_of(&pair);
    assert!(errors.contains(&Error::UnknownPskIdentity), "{errors:?}");
}

#[test]
fn ecdhe_ecdsa_with_gcm_negotiates_and_adds_a_16_byte_tag() {
    let sk = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut rng(5))
        .unwrap();
    let ck = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut rng(6))
        .unwrap();
    let sid = [Identity::of_key(&RustCrypto, &RustCrypto.public_key(&sk).unwrap(), b"").unwrap()];
    let cid = [Identity::of_key(&RustCrypto, &RustCrypto.public_key(&ck).unwrap(), b"").unwrap()];
    let config = Config {
        gcm: true,
        ..Config::default()
    };
    let c = Connection::connect(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: &sid,
        },
        config,
        &mut rng(7),
        Credentials::RawPublicKey(Some(&ck)),
        at(0),
    )
    .unwrap();
    let offer = ServerCredentials {
        key: Some(&sk),
        require_client_key: true,
        ..ServerCredentials::NONE
    };
    let mut pair = run(c, |cookie, d| {
        Connection::accept(
            RustCrypto,
            PinnedIdentities {
                crypto: RustCrypto,
                identities: &cid,
            },
            Config::default(),
            &offer,
            &mut rng(8),
            cookie,
            d,
            at(2),
        )
    });
    let errors = errors_of(&pair);
    assert!(pair.server.is_some());
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        server_hello_suite(&seen(&pair)),
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256.0
    );
    assert_eq!(
        exchange(&mut pair, b"reading") - b"reading".len(),
        13 + 8 + 16
    );
}

#[test]
fn a_psk_only_server_refuses_a_client_offering_only_ecdhe_psk_without_p256() {
    // The suite needs secp256r1; a ClientHello without supported_groups [23] cannot have it.
    // (Sigil's client always sends it, so check the server's decision directly.)
    let c = Connection::connect(
        RustCrypto,
        Keys,
        Config::default(),
        &mut rng(4),
        Credentials::EcdhePsk {
            identity: b"sensor-1",
            key: b"0123456789abcdef",
        },
        at(0),
    )
    .unwrap();
    let offer = ServerCredentials {
        psk: false,
        ..ServerCredentials::NONE
    };
    let pair = run(c, |cookie, d| {
        Connection::accept(
            RustCrypto,
            Keys,
            Config::default(),
            &offer,
            &mut rng(9),
            cookie,
            d,
            at(2),
        )
    });
    assert!(pair.server.is_none());
    assert_eq!(pair.errors, vec![Error::NoCommonCipherSuite]);
    // The stateless server's refusal reaches the client, which stops at once.
    assert_eq!(
        pair.client.failure(),
        Some(Error::PeerAlert(AlertDescription::HANDSHAKE_FAILURE.0))
    );
}

#[test]
fn connection_id_records_carry_the_servers_id_and_plain_ones_are_dropped() {
    let config = Config {
        connection_id: true,
        ..Config::default()
    };
    let c = Connection::connect(
        RustCrypto,
        Keys,
        config,
        &mut rng(11),
        Credentials::Psk {
            identity: b"sensor-1",
            key: b"0123456789abcdef",
        },
        at(0),
    )
    .unwrap();
    let cid = [0xc1, 0xd0, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05];
    let offer = ServerCredentials {
        psk: true,
        connection_id: &cid,
        ..ServerCredentials::NONE
    };
    let mut pair = run(c, |cookie, d| {
        Connection::accept(
            RustCrypto,
            Keys,
            Config::default(),
            &offer,
            &mut rng(12),
            cookie,
            d,
            at(2),
        )
    });
    let errors = errors_of(&pair);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(pair.client.is_established() && pair.server().is_established());
    assert_eq!(pair.server().connection_id(), &cid);
    // The client's Finished went out as a tls12_cid record naming the server's ID.
    let seen = seen(&pair);
    let cid_records: Vec<_> = seen
        .iter()
        .flat_map(|d| sigil_dtls::record::Records::with_cid(d, cid.len()))
        .filter_map(Result::ok)
        .filter(|r| r.header.content_type == ContentType::TLS12_CID)
        .map(|r| r.cid.to_vec())
        .collect();
    assert_eq!(
        cid_records,
        vec![cid.to_vec()],
        "exactly the client's Finished"
    );
    // Application data: 8 + 1 more bytes than without the ID.
    let n = exchange(&mut pair, b"reading");
    assert_eq!(n - b"reading".len(), 13 + 8 + 8 + cid.len() + 1);
    // The same record with the ID flipped, or re-framed without the ID, is dropped.
    pair.client.send(b"again").unwrap();
    let rec = drain(&mut pair.client).remove(0);
    let s = pair.server();
    let mut other = rec.clone();
    other[11] ^= 0xff;
    let before = s.dropped();
    s.handle_datagram(at(5), &other).unwrap();
    let mut plain = rec[..11].to_vec();
    plain[0] = ContentType::APPLICATION_DATA.0;
    plain.extend_from_slice(&rec[19..]);
    s.handle_datagram(at(5), &plain).unwrap();
    assert_eq!(s.dropped(), before + 2);
    let mut buf = [0u8; 64];
    assert_eq!(s.poll_app_data(&mut buf), None);
    s.handle_datagram(at(5), &rec).unwrap();
    assert_eq!(s.poll_app_data(&mut buf), Some(5));
    assert!(s.is_established());
}

#[test]
fn without_an_offer_from_the_server_no_connection_id_is_used() {
    let config = Config {
        connection_id: true,
        ..Config::default()
    };
    let c = Connection::connect(
        RustCrypto,
        Keys,
        config,
        &mut rng(13),
        Credentials::Psk {
            identity: b"sensor-1",
            key: b"0123456789abcdef",
        },
        at(0),
    )
    .unwrap();
    let mut pair = run(c, |cookie, d| {
        Connection::accept(
            RustCrypto,
            Keys,
            Config::default(),
            &PSK_OFFER,
            &mut rng(14),
            cookie,
            d,
            at(2),
        )
    });
    let errors = errors_of(&pair);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(pair.server().connection_id().is_empty());
    assert!(seen(&pair)
        .iter()
        .flat_map(|d| sigil_dtls::record::Records::new(d))
        .all(|r| r.unwrap().header.content_type != ContentType::TLS12_CID));
}
