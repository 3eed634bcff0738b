//! TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with raw public keys (RFC 7250) pinned to RFC 8387
//! identities, server-only and mutual, and the state-machine refusals found by state fuzzing
//! in other stacks.

use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::record::Record;
use sigil_dtls::wire::{AlertDescription, ContentType};
use sigil_dtls::{Config, Connection, Credentials, PinnedIdentities, ServerCredentials, State};
use sigil_dtls::{Error, Writer};
use sigil_identity::Identity;
use sigil_testkit::dtls::{at, drain, server, Link, Pair};
use sigil_testkit::Counter;

/// The tests' randomness: each byte steps by 29 from the seed.
fn rng(seed: u8) -> Counter {
    Counter::new(seed, 29)
}

fn key(alg: SignatureAlgorithm, seed: u8) -> (SecretKey, Identity) {
    let sk = RustCrypto.generate(alg, &mut rng(seed)).unwrap();
    let id = Identity::of_key(&RustCrypto, &RustCrypto.public_key(&sk).unwrap(), b"").unwrap();
    (sk, id)
}

type Pinned<'a> = PinnedIdentities<'a, RustCrypto>;
type Server<'a> = Connection<RustCrypto, Pinned<'a>>;

/// Through the cookie exchange to the server's `accept` (its flight 4 still queued); the
/// server is `None` if it refused the ClientHello (the error is in `errors`).
fn start<'a: 'k, 'k>(
    client_key: Option<&SecretKey>,
    client_trust: &'a [Identity],
    server_key: &'k SecretKey,
    server_trust: &'a [Identity],
    mutual: bool,
) -> Pair<'k, Pinned<'a>, Pinned<'a>> {
    let client = Connection::connect(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: client_trust,
        },
        Config::default(),
        &mut rng(1),
        Credentials::RawPublicKey(client_key),
        at(0),
    )
    .unwrap();
    let offer = ServerCredentials {
        psk: false,
        key: Some(server_key),
        require_client_key: mutual,
        ..ServerCredentials::NONE
    };
    let trust = PinnedIdentities {
        crypto: RustCrypto,
        identities: server_trust,
    };
    let accept = server(trust, Config::default(), offer, rng(90));
    let mut pair = Pair::new(client, accept, Link::PERFECT);
    pair.run_until_accepted();
    pair
}

/// The rest of the handshake, until quiet: the bytes of flights 4 to 6 and the errors.
fn pump(pair: &mut Pair<'_, Pinned<'_>, Pinned<'_>>) -> (usize, Vec<Error>) {
    let (sent, failed) = (pair.log.len(), pair.errors.len());
    pair.run_until_quiet();
    let bytes = pair.log[sent..].iter().map(|d| d.bytes.len()).sum();
    (bytes, pair.errors[failed..].to_vec())
}

#[test]
fn server_authenticated_handshake_pins_the_server_key_to_its_identity() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 1);
    let trust = [server_id];
    let mut pair = start(None, &trust, &server_key, &[], false);
    let (bytes, errors) = pump(&mut pair);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(pair.client.is_established() && pair.server().is_established());
    assert_eq!(
        pair.client.peer_public_key(),
        Some(&RustCrypto.public_key(&server_key).unwrap())
    );
    assert_eq!(pair.server().peer_public_key(), None);
    println!("ECDHE-ECDSA-CCM8, raw public key, server-only: flights 4-6 {bytes} bytes");
    pair.send_client(b"reading").unwrap();
    pair.run_until_quiet();
    assert_eq!(pair.server_received, [b"reading"]);
}

#[test]
fn mutual_handshake_with_ed25519_client_and_p256_server() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 2);
    let (client_key, client_id) = key(SignatureAlgorithm::Ed25519, 3);
    let (ct, st) = ([server_id], [client_id]);
    let mut pair = start(Some(&client_key), &ct, &server_key, &st, true);
    let (_, errors) = pump(&mut pair);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(pair.client.is_established() && pair.server().is_established());
    // The server authorizes by the identity the client's key hashes to.
    let pk = pair.server().peer_public_key().unwrap();
    assert_eq!(Identity::of_key(&RustCrypto, pk, b"").unwrap(), client_id);
}

#[test]
fn mutual_handshake_with_p256_on_both_sides() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 4);
    let (client_key, client_id) = key(SignatureAlgorithm::EcdsaP256, 5);
    let (ct, st) = ([server_id], [client_id]);
    let mut pair = start(Some(&client_key), &ct, &server_key, &st, true);
    let (bytes, errors) = pump(&mut pair);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(pair.client.is_established() && pair.server().is_established());
    println!("ECDHE-ECDSA-CCM8, raw public keys, mutual: flights 4-6 {bytes} bytes");
}

#[test]
fn an_untrusted_server_key_fails_with_certificate_unknown() {
    let (server_key, _) = key(SignatureAlgorithm::EcdsaP256, 6);
    let (_, other_id) = key(SignatureAlgorithm::EcdsaP256, 7);
    let trust = [other_id];
    let mut pair = start(None, &trust, &server_key, &[], false);
    let (_, errors) = pump(&mut pair);
    assert_eq!(errors.first(), Some(&Error::UntrustedKey));
    assert_eq!(pair.client.state(), State::Failed(Error::UntrustedKey));
    assert_eq!(
        pair.server().state(),
        State::Failed(Error::PeerAlert(AlertDescription::CERTIFICATE_UNKNOWN.0))
    );
}

#[test]
fn an_unprovisioned_client_key_is_refused_by_the_server() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 8);
    let (client_key, _) = key(SignatureAlgorithm::Ed25519, 9);
    let ct = [server_id];
    let mut pair = start(Some(&client_key), &ct, &server_key, &[], true);
    let (_, errors) = pump(&mut pair);
    assert!(errors.contains(&Error::UntrustedKey));
    assert!(!pair.server().is_established() && !pair.client.is_established());
}

#[test]
fn mutual_authentication_needs_a_client_that_offers_a_key() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 10);
    let ct = [server_id];
    let pair = start(None, &ct, &server_key, &[], true);
    assert!(pair.server.is_none());
    assert_eq!(pair.errors, [Error::NoCommonCipherSuite]);
}

/// The server of a mutual handshake after flight 4, and the client's real flight 5 split into
/// its records.
fn mutual_until_flight_5() -> (Vec<Vec<u8>>, Server<'static>, Identity) {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 11);
    let (client_key, client_id) = key(SignatureAlgorithm::EcdsaP256, 12);
    let ct: &'static [Identity] = Box::leak(Box::new([server_id]));
    let st: &'static [Identity] = Box::leak(Box::new([client_id]));
    let (mut client, server) = start(Some(&client_key), ct, &server_key, st, true).into_parts();
    let mut server = server.expect("the server accepted");
    for d in drain(&mut server) {
        client.handle_datagram(at(3), &d).unwrap();
    }
    let flight5: Vec<Vec<u8>> = drain(&mut client)
        .iter()
        .flat_map(|d| {
            let mut recs = vec![];
            let mut rest = &d[..];
            while !rest.is_empty() {
                let (_, next) = Record::parse(rest).unwrap();
                recs.push(rest[..rest.len() - next.len()].to_vec());
                rest = next;
            }
            recs
        })
        .collect();
    (flight5, server, client_id)
}

fn handshake_record(seq: u64, msg_type: u8, message_seq: u16, body: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 13 + 12 + body.len()];
    let mut w = Writer::new(&mut b);
    sigil_dtls::record::RecordHeader {
        content_type: ContentType::HANDSHAKE,
        version: sigil_dtls::wire::ProtocolVersion::DTLS_1_2,
        epoch: 0,
        sequence: seq,
        length: (12 + body.len()) as u16,
    }
    .write(&mut w)
    .unwrap();
    sigil_dtls::handshake::Fragment {
        msg_type: sigil_dtls::wire::HandshakeType(msg_type),
        length: body.len() as u32,
        message_seq,
        offset: 0,
        body,
    }
    .write(&mut w)
    .unwrap();
    b
}

#[test]
fn flight_5_records_are_certificate_key_exchange_verify_ccs_finished() {
    let (recs, _, _) = mutual_until_flight_5();
    let types: Vec<(u8, u16)> = recs
        .iter()
        .map(|r| {
            let (rec, _) = Record::parse(r).unwrap();
            (rec.header.content_type.0, rec.header.epoch)
        })
        .collect();
    assert_eq!(types, [(22, 0), (22, 0), (22, 0), (20, 0), (22, 1)]);
}

#[test]
fn regression_certificate_without_certificate_verify_is_refused() {
    let (recs, mut server, _) = mutual_until_flight_5();
    // Certificate, ClientKeyExchange, then straight to ChangeCipherSpec and Finished.
    let skipped: Vec<u8> = [&recs[0][..], &recs[1][..], &recs[3][..], &recs[4][..]].concat();
    // The CCS is not acted on (dropped), so the Finished after it is of an epoch the server
    // has no keys for: dropped too. The server still waits for CertificateVerify.
    let before = server.dropped();
    assert_eq!(
        server
            .handle_datagram(at(4), &skipped)
            .map(|r| r.is_authenticated()),
        Ok(false)
    );
    assert_eq!(server.dropped(), before + 2);
    assert_eq!(server.state(), State::ExpectCertificateVerify);
    assert!(!server.is_established());
    // The client's key is trusted but its possession not proven: not exposed.
    assert!(server.peer_public_key().is_none());
}

#[test]
fn regression_client_key_exchange_before_certificate_is_refused() {
    let (recs, mut server, _) = mutual_until_flight_5();
    // The client's ClientKeyExchange record with the Certificate's message_seq.
    let (rec, _) = Record::parse(&recs[1]).unwrap();
    let body = &rec.fragment[12..];
    let forged = handshake_record(10, 16, 2, body);
    assert_eq!(
        server.handle_datagram(at(4), &forged),
        Err(Error::UnexpectedHandshake(16))
    );
}

#[test]
fn regression_client_authentication_with_an_empty_certificate_is_refused() {
    let (_, mut server, _) = mutual_until_flight_5();
    let empty = handshake_record(10, 11, 2, &[0, 0, 0]);
    assert_eq!(
        server.handle_datagram(at(4), &empty),
        Err(Error::MissingClientKey)
    );
    let alert = drain(&mut server);
    assert_eq!(
        alert.last().unwrap()[13..],
        [2, AlertDescription::HANDSHAKE_FAILURE.0]
    );
}

#[test]
fn regression_repeated_certificate_is_refused() {
    let (recs, mut server, _) = mutual_until_flight_5();
    server.handle_datagram(at(4), &recs[0]).unwrap();
    let (rec, _) = Record::parse(&recs[0]).unwrap();
    let again = handshake_record(11, 11, 3, &rec.fragment[12..]);
    assert_eq!(
        server.handle_datagram(at(4), &again),
        Err(Error::UnexpectedHandshake(11))
    );
}

#[test]
fn regression_finished_without_change_cipher_spec_is_refused() {
    let (recs, mut server, _) = mutual_until_flight_5();
    let first_three: Vec<u8> = [&recs[0][..], &recs[1][..], &recs[2][..]].concat();
    server.handle_datagram(at(4), &first_three).unwrap();
    assert_eq!(server.state(), State::ExpectChangeCipherSpec);
    // The encrypted Finished without the CCS: epoch 1 is not readable yet, dropped.
    server.handle_datagram(at(4), &recs[4]).unwrap();
    assert_eq!(server.state(), State::ExpectChangeCipherSpec);
    assert_eq!(server.dropped(), 1);
    // A plaintext Finished in epoch 0 is a fatal unexpected message.
    let plain_finished = handshake_record(20, 20, 5, &[0; 12]);
    assert_eq!(
        server.handle_datagram(at(4), &plain_finished),
        Err(Error::UnexpectedHandshake(20))
    );
}

#[test]
fn a_tampered_server_key_exchange_signature_fails() {
    let (server_key, server_id) = key(SignatureAlgorithm::EcdsaP256, 13);
    let trust = [server_id];
    let (mut client, server) = start(None, &trust, &server_key, &[], false).into_parts();
    let mut server = server.expect("the server accepted");
    let mut flight4 = drain(&mut server);
    // Flip one byte of the ephemeral point inside ServerKeyExchange (third record).
    let d = &mut flight4[0];
    let mut pos = 0;
    for _ in 0..2 {
        let (r, _) = Record::parse(&d[pos..]).unwrap();
        pos += 13 + r.fragment.len();
    }
    d[pos + 13 + 12 + 10] ^= 1;
    let mut result = Ok(());
    for d in &flight4 {
        result = result.and(client.handle_datagram(at(3), d).map(|_| ()));
    }
    assert_eq!(result, Err(Error::BadSignature));
}
