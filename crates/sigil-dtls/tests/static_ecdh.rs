//! PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8 (feature `static-ecdh`): static ECDH with the
//! server's P-256 raw public key, over both carriers of the handshake, server-only and
//! mutual; the refusals (one side only, an untrusted key, a key that cannot agree); and the
//! premaster secret checked against ECDH of the server's key and the client's point, which
//! is also what the suite gives up: the server's key alone opens recorded traffic.

#![cfg(feature = "static-ecdh")]

use sigil_crypto::{AgreementSecret, CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::handshake::{ClientHello, Fragment, ServerHello};
use sigil_dtls::keys::{extended_master_secret, key_block};
use sigil_dtls::protection::{open, Aead};
use sigil_dtls::record::{Record, Records};
use sigil_dtls::wire::{AlertDescription, CipherSuite, ContentType, HandshakeType};
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, Error, PinnedIdentities, ServerCredentials, State,
    Stateless, WholeFlights, Writer,
};
use sigil_identity::Identity;
use sigil_testkit::dtls::{at, server, Link, Pair};
use sigil_testkit::Counter;

/// The tests' randomness: each byte steps by 41 from the seed.
fn rng(seed: u8) -> Counter {
    Counter::new(seed, 41)
}

fn key(alg: SignatureAlgorithm, seed: u8) -> (SecretKey, Identity) {
    let sk = RustCrypto.generate(alg, &mut rng(seed)).unwrap();
    let id = Identity::of_key(&RustCrypto, &RustCrypto.public_key(&sk).unwrap(), b"").unwrap();
    (sk, id)
}

fn pinned(identities: &[Identity]) -> PinnedIdentities<'_, RustCrypto> {
    PinnedIdentities {
        crypto: RustCrypto,
        identities,
    }
}

/// A side that takes static ECDH.
fn static_ecdh() -> Config {
    Config {
        danger_static_ecdh: true,
        ..Config::default()
    }
}

fn offer(key: &SecretKey, mutual: bool) -> ServerCredentials<'_> {
    ServerCredentials {
        key: Some(key),
        require_client_key: mutual,
        issue_session_ids: true,
        ..ServerCredentials::NONE
    }
}

/// Every handshake message in `flight` (plaintext records only), as (type, whole message
/// with its header).
fn messages(flight: &[u8]) -> Vec<(HandshakeType, Vec<u8>)> {
    let mut out = Vec::new();
    for rec in Records::new(flight) {
        let rec = rec.unwrap();
        if rec.header.content_type == ContentType::HANDSHAKE && rec.header.epoch == 0 {
            let mut rest = rec.fragment;
            while !rest.is_empty() {
                let (f, next) = Fragment::parse(rest).unwrap();
                assert!(f.is_whole());
                let len = rest.len() - next.len();
                out.push((f.msg_type, rest[..len].to_vec()));
                rest = next;
            }
        }
    }
    out
}

fn types(flight: &[u8]) -> Vec<HandshakeType> {
    messages(flight).into_iter().map(|(t, _)| t).collect()
}

/// The cipher suite of the ServerHello in `flight`.
fn chosen_suite(flight: &[u8]) -> CipherSuite {
    let (_, sh) = messages(flight)
        .into_iter()
        .find(|(t, _)| *t == HandshakeType::SERVER_HELLO)
        .expect("a ServerHello");
    ServerHello::parse(&sh[12..]).unwrap().cipher_suite
}

// ---- The record carrier (`Connection`) ----

type Pinned<'a> = PinnedIdentities<'a, RustCrypto>;

/// Cookie exchange and the rest of the handshake on a perfect link, until quiet.
fn over_records<'a>(
    client_config: Config,
    client_key: Option<&SecretKey>,
    client_trust: &'a [Identity],
    server_config: Config,
    offer: ServerCredentials<'a>,
    server_trust: &'a [Identity],
) -> Pair<'a, Pinned<'a>, Pinned<'a>> {
    let client = Connection::connect(
        RustCrypto,
        pinned(client_trust),
        client_config,
        &mut rng(1),
        Credentials::RawPublicKey(client_key),
        at(0),
    )
    .unwrap();
    let accept = server(pinned(server_trust), server_config, offer, rng(90));
    let mut pair = Pair::new(client, accept, Link::PERFECT);
    pair.run_until_quiet();
    pair
}

/// Every datagram the server sent, as one byte string.
fn server_datagrams<T, U>(pair: &Pair<'_, T, U>) -> Vec<u8> {
    pair.log
        .iter()
        .filter(|d| d.to == sigil_testkit::dtls::Side::Client)
        .flat_map(|d| d.bytes.clone())
        .collect()
}

#[test]
fn server_authenticated_static_ecdh_over_records_has_no_server_key_exchange() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 1);
    let client_trust = [server_id];
    let mut pair = over_records(
        static_ecdh(),
        None,
        &client_trust,
        static_ecdh(),
        offer(&server_key, false),
        &[],
    );
    assert!(pair.errors.is_empty(), "{:?}", pair.errors);
    assert!(pair.client.is_established() && pair.server().is_established());
    let from_server = server_datagrams(&pair);
    assert_eq!(
        chosen_suite(&from_server),
        CipherSuite::PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8
    );
    assert_eq!(
        types(&from_server),
        [
            HandshakeType::HELLO_VERIFY_REQUEST,
            HandshakeType::SERVER_HELLO,
            HandshakeType::CERTIFICATE,
            HandshakeType::SERVER_HELLO_DONE,
        ]
    );
    // The client holds the server's pinned key; the server's client stays anonymous.
    assert_eq!(
        pair.client.peer_public_key(),
        Some(&RustCrypto.public_key(&server_key).unwrap())
    );
    assert_eq!(pair.server().peer_public_key(), None);
    // The same handshake with ECDHE-ECDSA: the ServerKeyExchange (point and signature) is
    // what static ECDH saves on the wire.
    let ecdhe = over_records(
        Config::default(),
        None,
        &client_trust,
        static_ecdh(),
        offer(&server_key, false),
        &[],
    );
    assert!(ecdhe.client.is_established());
    let total = |log: &[sigil_testkit::dtls::Datagram]| -> usize {
        log.iter().map(|d| d.bytes.len()).sum()
    };
    let (static_bytes, ecdhe_bytes) = (total(&pair.log), total(&ecdhe.log));
    println!(
        "server-only, raw public key, in all: static ECDH {static_bytes} bytes, \
         ECDHE-ECDSA {ecdhe_bytes} bytes"
    );
    assert!(static_bytes + 140 < ecdhe_bytes);
    pair.send_client(b"reading").unwrap();
    pair.run_until_quiet();
    assert_eq!(pair.server_received, [b"reading"]);
    pair.send_server(b"ack").unwrap();
    pair.run_until_quiet();
    assert_eq!(pair.client_received, [b"ack"]);
}

#[test]
fn mutual_static_ecdh_over_records_pins_both_keys_and_the_client_signs() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 2);
    // The client's key only signs (CertificateVerify, RFC 4492 §3.2 ECDSA_sign): Ed25519 will
    // do.
    let (client_key, client_id) = key(SignatureAlgorithm::Ed25519, 3);
    let (client_trust, server_trust) = ([server_id], [client_id]);
    let mut pair = over_records(
        static_ecdh(),
        Some(&client_key),
        &client_trust,
        static_ecdh(),
        offer(&server_key, true),
        &server_trust,
    );
    assert!(pair.errors.is_empty(), "{:?}", pair.errors);
    assert!(pair.client.is_established() && pair.server().is_established());
    let pk = pair.server().peer_public_key().copied().unwrap();
    assert_eq!(Identity::of_key(&RustCrypto, &pk, b"").unwrap(), client_id);
    let to_server: Vec<u8> = pair
        .log
        .iter()
        .filter(|d| d.to == sigil_testkit::dtls::Side::Server)
        .flat_map(|d| d.bytes.clone())
        .collect();
    let client_types = types(&to_server);
    assert!(client_types.ends_with(&[
        HandshakeType::CERTIFICATE,
        HandshakeType::CLIENT_KEY_EXCHANGE,
        HandshakeType::CERTIFICATE_VERIFY,
    ]));
    pair.send_client(b"signed in").unwrap();
    pair.run_until_quiet();
    assert_eq!(pair.server_received, [b"signed in"]);
}

#[test]
fn a_client_asking_for_static_ecdh_is_refused_by_a_server_that_did_not_enable_it() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 4);
    let client_trust = [server_id];
    let pair = over_records(
        static_ecdh(),
        None,
        &client_trust,
        Config::default(),
        offer(&server_key, false),
        &[],
    );
    assert!(pair.server.is_none());
    assert_eq!(pair.errors, [Error::NoCommonCipherSuite]);
    assert_eq!(
        pair.client.failure(),
        Some(Error::PeerAlert(AlertDescription::HANDSHAKE_FAILURE.0))
    );
}

#[test]
fn a_server_that_takes_static_ecdh_answers_a_client_that_did_not_ask_with_ecdhe() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 5);
    let client_trust = [server_id];
    let pair = over_records(
        Config::default(),
        None,
        &client_trust,
        static_ecdh(),
        offer(&server_key, false),
        &[],
    );
    assert!(pair.errors.is_empty(), "{:?}", pair.errors);
    assert!(pair.client.is_established());
    let from_server = server_datagrams(&pair);
    assert_eq!(
        chosen_suite(&from_server),
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8
    );
    assert!(types(&from_server).contains(&HandshakeType::SERVER_KEY_EXCHANGE));
}

#[test]
fn a_server_whose_key_cannot_agree_on_p256_does_not_choose_static_ecdh() {
    let (server_key, server_id) = key(SignatureAlgorithm::Ed25519, 6);
    let client_trust = [server_id];
    let pair = over_records(
        static_ecdh(),
        None,
        &client_trust,
        static_ecdh(),
        offer(&server_key, false),
        &[],
    );
    assert!(pair.server.is_none());
    assert_eq!(pair.errors, [Error::NoCommonCipherSuite]);
}

#[test]
fn an_untrusted_server_key_is_refused_with_certificate_unknown() {
    let (server_key, _) = key(SignatureAlgorithm::EcdsaP256, 7);
    let (_, someone_else) = key(SignatureAlgorithm::EcdsaP256, 8);
    let client_trust = [someone_else];
    let mut pair = over_records(
        static_ecdh(),
        None,
        &client_trust,
        static_ecdh(),
        offer(&server_key, false),
        &[],
    );
    assert_eq!(pair.errors.first(), Some(&Error::UntrustedKey));
    assert_eq!(pair.client.state(), State::Failed(Error::UntrustedKey));
    assert_eq!(
        pair.server().state(),
        State::Failed(Error::PeerAlert(AlertDescription::CERTIFICATE_UNKNOWN.0))
    );
}

/// A resumption of the client's `session` against a server with `server_config` that still
/// has its side of it, `cached`.
fn resume_with<'a>(
    (session, cached): (&'a sigil_dtls::Session, &'a sigil_dtls::Session),
    server_key: &'a SecretKey,
    client_trust: &'a [Identity],
    server_config: Config,
) -> Pair<'a, Pinned<'a>, Pinned<'a>> {
    let client = Connection::resume(
        RustCrypto,
        pinned(client_trust),
        static_ecdh(),
        &mut rng(21),
        Credentials::RawPublicKey(None),
        session,
        at(0),
    )
    .unwrap();
    let offer = ServerCredentials {
        resume: Some(cached),
        ..offer(server_key, false)
    };
    let accept = server(pinned(&[]), server_config, offer, rng(22));
    let mut pair = Pair::new(client, accept, Link::PERFECT);
    pair.run_until_quiet();
    pair
}

#[test]
fn a_static_ecdh_session_resumes_only_while_the_server_still_takes_the_suite() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 9);
    let client_trust = [server_id];
    let mut first = over_records(
        static_ecdh(),
        None,
        &client_trust,
        static_ecdh(),
        offer(&server_key, false),
        &[],
    );
    assert!(first.errors.is_empty(), "{:?}", first.errors);
    let session = first.client.session().expect("a session ID was issued");
    let cached = first.server().session().unwrap();
    assert_eq!(
        session.suite,
        CipherSuite::PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8
    );
    let mut again = resume_with(
        (&session, &cached),
        &server_key,
        &client_trust,
        static_ecdh(),
    );
    assert!(again.errors.is_empty(), "{:?}", again.errors);
    assert!(again.client.resumed() && again.server().resumed());
    // A server that no longer takes static ECDH does not resume it either.
    let refused = resume_with(
        (&session, &cached),
        &server_key,
        &client_trust,
        Config::default(),
    );
    assert!(refused.server.is_none());
    assert_eq!(refused.errors, [Error::NoCommonCipherSuite]);
}

// ---- The whole-flight carrier (`WholeFlights`) ----

const PEER: &[u8] = b"[fe80::1]:5683";

type Whole<'a> = WholeFlights<RustCrypto, Pinned<'a>>;

/// A handshake over whole flights, stopped where it fails.
struct WholeRun<'a> {
    client: Whole<'a>,
    server: Option<Whole<'a>>,
    /// The ClientHello with the cookie, then each answer: flights 3 to 6 as far as they got.
    flights: Vec<Vec<u8>>,
    error: Option<Error>,
}

fn over_whole_flights<'a>(
    client_key: Option<&SecretKey>,
    client_trust: &'a [Identity],
    offer: ServerCredentials<'_>,
    server_trust: &'a [Identity],
    tamper_flight4: impl FnOnce(Vec<u8>) -> Vec<u8>,
) -> WholeRun<'a> {
    let mut out = [0u8; 4096];
    let (mut client, n) = Whole::connect(
        RustCrypto,
        pinned(client_trust),
        static_ecdh(),
        &mut rng(11),
        Credentials::RawPublicKey(client_key),
        &mut out,
    )
    .unwrap();
    let cookies = CookieKey::new([7; 32]);
    let mut hvr = [0u8; 256];
    let Stateless::HelloVerify(h) = cookies.respond(&RustCrypto, PEER, &out[..n], &mut hvr) else {
        panic!("no HelloVerifyRequest");
    };
    let n = client.handle_flight(&hvr[..h], &mut out).unwrap();
    let flight3 = out[..n].to_vec();
    let Stateless::Accept(proof) = cookies.respond(&RustCrypto, PEER, &flight3, &mut hvr) else {
        panic!("the cookie was not accepted");
    };
    let (mut server, n) = Whole::accept(
        RustCrypto,
        pinned(server_trust),
        static_ecdh(),
        &offer,
        &mut rng(200),
        proof,
        &flight3,
        &mut out,
    )
    .unwrap();
    let flight4 = tamper_flight4(out[..n].to_vec());
    let mut run = WholeRun {
        client,
        server: None,
        flights: vec![flight3, flight4.clone()],
        error: None,
    };
    let n = match run.client.handle_flight(&flight4, &mut out) {
        Ok(n) => n,
        Err(e) => {
            run.error = Some(e);
            run.server = Some(server);
            return run;
        }
    };
    let flight5 = out[..n].to_vec();
    run.flights.push(flight5.clone());
    let n = match server.handle_flight(&flight5, &mut out) {
        Ok(n) => n,
        Err(e) => {
            run.error = Some(e);
            run.server = Some(server);
            return run;
        }
    };
    let flight6 = out[..n].to_vec();
    run.flights.push(flight6.clone());
    run.error = run.client.handle_flight(&flight6, &mut out).err();
    run.server = Some(server);
    run
}

#[test]
fn mutual_static_ecdh_over_whole_flights_ends_in_traffic_both_ways() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 12);
    let (client_key, client_id) = key(SignatureAlgorithm::EcdsaP256, 13);
    let (client_trust, server_trust) = ([server_id], [client_id]);
    let run = over_whole_flights(
        Some(&client_key),
        &client_trust,
        offer(&server_key, true),
        &server_trust,
        |f| f,
    );
    assert_eq!(run.error, None);
    assert_eq!(
        types(&run.flights[1]),
        [
            HandshakeType::SERVER_HELLO,
            HandshakeType::CERTIFICATE,
            HandshakeType::CERTIFICATE_REQUEST,
            HandshakeType::SERVER_HELLO_DONE,
        ]
    );
    assert_eq!(
        chosen_suite(&run.flights[1]),
        CipherSuite::PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8
    );
    let mut c = run.client.into_traffic().ok().unwrap();
    let mut s = run.server.unwrap().into_traffic().ok().unwrap();
    assert_eq!(
        c.peer_public_key(),
        Some(&RustCrypto.public_key(&server_key).unwrap())
    );
    assert_eq!(
        s.peer_public_key(),
        Some(&RustCrypto.public_key(&client_key).unwrap())
    );
    let mut d = [0u8; 1500];
    c.send(b"over coap").unwrap();
    let n = c.poll_transmit(at(10), &mut d).unwrap();
    s.handle_datagram(at(10), &d[..n]).unwrap();
    let m = s.poll_app_data(&mut d).unwrap();
    assert_eq!(&d[..m], b"over coap");
    s.send(b"and back").unwrap();
    let n = s.poll_transmit(at(20), &mut d).unwrap();
    c.handle_datagram(at(20), &d[..n]).unwrap();
    let m = c.poll_app_data(&mut d).unwrap();
    assert_eq!(&d[..m], b"and back");
}

#[test]
fn an_untrusted_server_key_is_refused_over_whole_flights() {
    let (server_key, _) = key(SignatureAlgorithm::EcdsaP256, 14);
    let (_, someone_else) = key(SignatureAlgorithm::EcdsaP256, 15);
    let client_trust = [someone_else];
    let run = over_whole_flights(None, &client_trust, offer(&server_key, false), &[], |f| f);
    assert_eq!(run.error, Some(Error::UntrustedKey));
    assert_eq!(run.client.failure(), Some(Error::UntrustedKey));
}

/// `flight` with its Certificate message replaced by one carrying `key` as a raw public key
/// (plaintext records: anyone on the path can do this).
fn with_certificate_key(flight: &[u8], key: &sigil_crypto::PublicKey) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = flight;
    while !rest.is_empty() {
        let (rec, next) = Record::parse(rest).unwrap();
        let raw = &rest[..rest.len() - next.len()];
        rest = next;
        let (f, _) = Fragment::parse(rec.fragment).unwrap();
        if rec.header.content_type != ContentType::HANDSHAKE
            || f.msg_type != HandshakeType::CERTIFICATE
        {
            out.extend_from_slice(raw);
            continue;
        }
        let mut body = [0u8; 128];
        let mut w = Writer::new(&mut body);
        w.u24(sigil_dtls::spki::spki_len(key) as u32).unwrap();
        sigil_dtls::spki::write_spki(key, &mut w).unwrap();
        let n = w.len();
        let mut msg = [0u8; 256];
        let mut w = Writer::new(&mut msg);
        Fragment {
            length: n as u32,
            body: &body[..n],
            ..f
        }
        .write(&mut w)
        .unwrap();
        let m = w.len();
        let mut header = rec.header;
        header.length = m as u16;
        let mut h = [0u8; 13];
        header.write(&mut Writer::new(&mut h)).unwrap();
        out.extend_from_slice(&h);
        out.extend_from_slice(&msg[..m]);
    }
    out
}

#[test]
fn a_trusted_key_that_cannot_agree_on_p256_is_refused_by_name() {
    // Someone on the path swaps the server's key for an Ed25519 key the client trusts: it
    // cannot be a static ECDH key, and the client says so rather than failing later.
    let (server_key, _) = key(SignatureAlgorithm::EcdsaP256, 16);
    let (ed_key, ed_id) = key(SignatureAlgorithm::Ed25519, 17);
    let ed_public = RustCrypto.public_key(&ed_key).unwrap();
    let client_trust = [ed_id];
    let run = over_whole_flights(None, &client_trust, offer(&server_key, false), &[], |f| {
        with_certificate_key(&f, &ed_public)
    });
    assert_eq!(run.error, Some(Error::StaticKeyNotP256));
    assert_eq!(
        Error::StaticKeyNotP256.alert(),
        Some(AlertDescription::UNSUPPORTED_CERTIFICATE)
    );
}

#[test]
fn the_premaster_is_ecdh_of_the_server_key_and_client_point_and_opens_recorded_traffic() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 18);
    let client_trust = [server_id];
    let run = over_whole_flights(None, &client_trust, offer(&server_key, false), &[], |f| f);
    assert_eq!(run.error, None);
    // What a passive observer recorded: the flights, then one application-data record.
    let flights = run.flights.clone();
    let mut c = run.client.into_traffic().ok().unwrap();
    let master = c.session().expect("a session ID was issued").master;
    c.send(b"the secret reading").unwrap();
    let mut d = [0u8; 1500];
    let n = c.poll_transmit(at(30), &mut d).unwrap();
    let recorded = d[..n].to_vec();

    // The transcript through ClientKeyExchange: from the ClientHello that carried the cookie
    // (RFC 6347 §4.2.1), every handshake message of flights 3 to 5 but the client's Finished.
    let mut transcript = Vec::new();
    let mut client_point = None;
    let (mut client_random, mut server_random) = ([0u8; 32], [0u8; 32]);
    for flight in &flights[..3] {
        for (t, msg) in messages(flight) {
            transcript.extend_from_slice(&msg);
            let body = &msg[12..];
            match t {
                HandshakeType::CLIENT_HELLO => {
                    client_random = *ClientHello::parse(body).unwrap().random;
                }
                HandshakeType::SERVER_HELLO => {
                    server_random = *ServerHello::parse(body).unwrap().random;
                }
                HandshakeType::CLIENT_KEY_EXCHANGE => {
                    // ECPoint: opaque point <1..2^8-1> (RFC 8422 §5.7).
                    assert_eq!(usize::from(body[0]), body.len() - 1);
                    client_point = Some(body[1..].to_vec());
                }
                _ => {}
            }
        }
    }
    let client_point = client_point.expect("a ClientKeyExchange");
    assert_eq!(client_point.len(), 65);

    // premaster = ECDH(server's static key, client's point); master = the extended master
    // secret over the session hash (RFC 7627 §4).
    let server_static = AgreementSecret::from_p256_signing_key(&server_key).unwrap();
    let premaster = RustCrypto.agree(&server_static, &client_point).unwrap();
    let session_hash = RustCrypto.sha256(&[&transcript]);
    assert_eq!(
        extended_master_secret(&RustCrypto, &premaster, &session_hash),
        master
    );

    // And so the server's key, learned later, opens what was recorded.
    let keys = key_block(
        &RustCrypto,
        Aead::Ccm8,
        &master,
        &client_random,
        &server_random,
    );
    let (rec, _) = Record::parse(&recorded).unwrap();
    assert_eq!(rec.header.content_type, ContentType::APPLICATION_DATA);
    let mut fragment = rec.fragment.to_vec();
    let plain = open(&RustCrypto, &keys.client, &rec.header, &mut fragment).unwrap();
    assert_eq!(plain, b"the secret reading");
}
