//! TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with X.509 certificates (RFC 7925 §4.4) validated to a
//! configured trust anchor, server-only and mutual, in memory; path-validation failures each
//! with their own error and alert. The test PKI comes from pyca/cryptography
//! (`vectors/gen_x509.py`), not from this crate.

use sigil_crypto::{RustCrypto, SecretKey};
use sigil_dtls::x509;
use sigil_dtls::Error;
use sigil_dtls::{Config, Connection, Credentials, ServerCredentials, X509Anchors};
use sigil_testkit::dtls::{at, server, Link, Pair};
use sigil_testkit::{pki, Counter};

/// 2026-01-01, inside the test PKI's validity (2025-2125).
const NOW: UnixTime = UnixTime::from_secs(1_767_225_600);
use sigil_time::UnixTime;

fn key(hex_text: &[u8]) -> SecretKey {
    pki::secret(hex_text)
}

type Anchors<'a> = X509Anchors<'a, RustCrypto>;

fn anchors<'a>(list: &'a [&'a [u8]], now: UnixTime) -> Anchors<'a> {
    X509Anchors {
        crypto: RustCrypto,
        anchors: list,
        now,
        rpk: sigil_dtls::NoTrust,
    }
}

/// Runs a handshake until quiet: the client's chain/key (None: no client certificate), the
/// server's, and whether the server requires a client certificate. Returns the pair and the
/// errors (what either side returned, then the failure of each).
fn handshake<'a>(
    client_own: Option<(&'a [&'a [u8]], &'a SecretKey)>,
    client_anchors: Anchors<'a>,
    server_chain: &'a [&'a [u8]],
    server_key: &'a SecretKey,
    server_anchors: Anchors<'a>,
    mutual: bool,
) -> (Pair<'a, Anchors<'a>, Anchors<'a>>, Vec<Error>) {
    // Each byte of the tests' randomness steps by 31 from the seed.
    let client = Connection::connect(
        RustCrypto,
        client_anchors,
        Config::default(),
        &mut Counter::new(3, 31),
        Credentials::Certificate(client_own),
        at(0),
    )
    .unwrap();
    let offer = ServerCredentials {
        key: Some(server_key),
        chain: Some(server_chain),
        require_client_key: mutual,
        ..ServerCredentials::NONE
    };
    let accept = server(
        server_anchors,
        Config::default(),
        offer,
        Counter::new(77, 31),
    );
    let mut pair = Pair::new(client, accept, Link::PERFECT);
    pair.run_until_quiet();
    let mut errors = pair.errors.clone();
    errors.extend(pair.client.failure());
    errors.extend(pair.server.as_ref().and_then(|s| s.failure()));
    (pair, errors)
}

#[test]
fn server_only_and_mutual_certificates_to_a_root_anchor() {
    let (sk, ck) = (key(pki::SERVER_KEY), key(pki::CLIENT_KEY));
    let server_chain: [&[u8]; 2] = [pki::SERVER, pki::INTERMEDIATE];
    let client_chain: [&[u8]; 2] = [pki::CLIENT, pki::INTERMEDIATE];
    let roots: [&[u8]; 1] = [pki::ROOT];
    for mutual in [false, true] {
        let own = mutual.then_some((&client_chain[..], &ck));
        let (mut pair, errors) = handshake(
            own,
            anchors(&roots, NOW),
            &server_chain,
            &sk,
            anchors(&roots, NOW),
            mutual,
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert!(pair.client.is_established() && pair.server().is_established());
        // The authenticated keys are the leaves'.
        let server_leaf = x509::parse(pki::SERVER).unwrap().key;
        assert_eq!(pair.client.peer_public_key(), Some(&server_leaf));
        if mutual {
            assert_eq!(
                pair.server().peer_public_key(),
                Some(&x509::parse(pki::CLIENT).unwrap().key)
            );
        } else {
            assert_eq!(pair.server().peer_public_key(), None);
        }
        pair.send_client(b"reading").unwrap();
        pair.run_until_quiet();
        assert_eq!(pair.server_received, [b"reading"]);
    }
}

#[test]
fn an_intermediate_can_be_the_anchor() {
    let sk = key(pki::SERVER_KEY);
    let server_chain: [&[u8]; 1] = [pki::SERVER];
    let inter: [&[u8]; 1] = [pki::INTERMEDIATE];
    let (mut pair, errors) = handshake(
        None,
        anchors(&inter, NOW),
        &server_chain,
        &sk,
        anchors(&inter, NOW),
        false,
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert!(pair.client.is_established() && pair.server().is_established());
}

#[test]
fn path_failures_each_have_their_error() {
    let sk = key(pki::SERVER_KEY);
    let roots: [&[u8]; 1] = [pki::ROOT];
    let other: [&[u8]; 1] = [pki::OTHER_ROOT];
    let full: [&[u8]; 2] = [pki::SERVER, pki::INTERMEDIATE];
    let leaf_only: [&[u8]; 1] = [pki::SERVER];
    let expired_der = pki::EXPIRED.to_vec();
    let expired: [&[u8]; 2] = [&expired_der, pki::INTERMEDIATE];
    let stranger_der = pki::STRANGER.to_vec();
    let stranger: [&[u8]; 1] = [&stranger_der];
    let (ek, stk) = (key(pki::EXPIRED_KEY), key(pki::STRANGER_KEY));
    type Case<'a> = (
        &'a str,
        &'a [&'a [u8]],
        &'a SecretKey,
        &'a [&'a [u8]],
        UnixTime,
        Error,
    );
    let cases: Vec<Case> = vec![
        (
            "anchor of another PKI",
            &full,
            &sk,
            &other,
            NOW,
            Error::UnknownCa,
        ),
        (
            "intermediate missing",
            &leaf_only,
            &sk,
            &roots,
            NOW,
            Error::UnknownCa,
        ),
        (
            "expired leaf",
            &expired,
            &ek,
            &roots,
            NOW,
            Error::CertificateExpired,
        ),
        (
            "before notBefore",
            &full,
            &sk,
            &roots,
            UnixTime::from_secs(1_700_000_000),
            Error::CertificateExpired,
        ),
        (
            "after notAfter",
            &full,
            &sk,
            &roots,
            UnixTime::from_secs(4_900_000_000),
            Error::CertificateExpired,
        ),
        (
            "leaf of an unknown CA",
            &stranger,
            &stk,
            &roots,
            NOW,
            Error::UnknownCa,
        ),
    ];
    for (what, chain, key, anchor_list, now, want) in cases {
        let (pair, errors) = handshake(
            None,
            anchors(anchor_list, now),
            chain,
            key,
            anchors(&roots, NOW),
            false,
        );
        assert!(!pair.client.is_established(), "{what}");
        assert!(errors.contains(&want), "{what}: {errors:?}");
        assert!(want.alert().is_some(), "{what}: the server is told");
    }
}

#[test]
fn chain_validation_refuses_non_ca_issuers_and_tampering() {
    let roots: [&[u8]; 1] = [pki::ROOT];
    let rogue = pki::LEAF_AS_ISSUER;
    // A leaf used as an issuer.
    let e = x509::verify_chain(
        &RustCrypto,
        &[rogue, pki::CLIENT, pki::INTERMEDIATE],
        &roots,
        NOW,
    )
    .unwrap_err();
    assert_eq!(e, Error::BadCertificate("issuer is not a CA"));
    // One flipped bit in the signed part breaks the signature.
    let mut tampered = pki::SERVER.to_vec();
    let i = tampered.len() / 2;
    tampered[i] ^= 0x01;
    let r = x509::verify_chain(&RustCrypto, &[&tampered, pki::INTERMEDIATE], &roots, NOW);
    assert!(
        matches!(
            r,
            Err(Error::BadSignature)
                | Err(Error::BadCertificate(_))
                | Err(Error::UnsupportedCertificate)
        ),
        "{r:?}"
    );
    // Truncations never panic and always fail.
    for n in 0..pki::SERVER.len() {
        assert!(x509::parse(&pki::SERVER[..n]).is_err());
    }
    assert!(x509::verify_chain(&RustCrypto, &[], &roots, NOW).is_err());
    // Fields come out as OpenSSL/pyca wrote them.
    let leaf = x509::parse(pki::SERVER).unwrap();
    assert!(!leaf.is_ca && x509::parse(pki::INTERMEDIATE).unwrap().is_ca);
    assert_eq!(leaf.not_before, 1_735_689_600); // 2025-01-01
    assert_eq!(leaf.not_after, 4_891_363_200); // 2125-01-01
    assert_eq!(leaf.key_usage.map(|u| u & 1), Some(1));
}

#[test]
fn a_mutual_server_refuses_a_client_without_a_certificate() {
    let sk = key(pki::SERVER_KEY);
    let chain: [&[u8]; 2] = [pki::SERVER, pki::INTERMEDIATE];
    let roots: [&[u8]; 1] = [pki::ROOT];
    let (mut pair, errors) = handshake(
        None,
        anchors(&roots, NOW),
        &chain,
        &sk,
        anchors(&roots, NOW),
        true,
    );
    assert!(!pair.client.is_established() && !pair.server().is_established());
    assert!(errors.contains(&Error::MissingClientKey), "{errors:?}");
}
