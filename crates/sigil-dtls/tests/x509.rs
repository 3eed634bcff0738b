//! TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with X.509 certificates (RFC 7925 §4.4) validated to a
//! configured trust anchor, server-only and mutual, in memory; path-validation failures each
//! with their own error and alert. The test PKI comes from pyca/cryptography
//! (`vectors/gen_x509.py`), not from this crate.

use sigil_crypto::{CryptoError, Rng, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::x509;
use sigil_dtls::Error;
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, ServerCredentials, Stateless, Trust, X509Anchors,
};

/// 2026-01-01, inside the test PKI's validity (2025-2125).
const NOW: UnixTime = UnixTime::from_secs(1_767_225_600);
use sigil_time::UnixTime;

fn data(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/data/x509/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn key(name: &str) -> SecretKey {
    let hex_text = String::from_utf8(data(&format!("{name}.key"))).unwrap();
    SecretKey::from_bytes(
        SignatureAlgorithm::EcdsaP256,
        &hex::decode(hex_text.trim()).unwrap(),
    )
    .unwrap()
}

struct Counter(u8);
impl Rng for Counter {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        for b in buf {
            self.0 = self.0.wrapping_add(31);
            *b = self.0;
        }
        Ok(())
    }
}

fn drain<T: Trust>(c: &mut Connection<RustCrypto, T>) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut buf = [0u8; 2048];
    while let Some(n) = c.poll_transmit(sigil_time::Instant::ZERO, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

fn pump<T: Trust, U: Trust>(
    a: &mut Connection<RustCrypto, T>,
    b: &mut Connection<RustCrypto, U>,
) -> Vec<Error> {
    let mut errors = vec![];
    for _ in 0..20 {
        let (x, y) = (drain(a), drain(b));
        if x.is_empty() && y.is_empty() {
            break;
        }
        for d in x {
            if let Err(e) = b.handle_datagram(at(3), &d) {
                errors.push(e);
            }
        }
        for d in y {
            if let Err(e) = a.handle_datagram(at(3), &d) {
                errors.push(e);
            }
        }
    }
    errors.extend(a.failure());
    errors.extend(b.failure());
    errors
}

struct Pki {
    root: Vec<u8>,
    other_root: Vec<u8>,
    inter: Vec<u8>,
    server: Vec<u8>,
    client: Vec<u8>,
}

fn pki() -> Pki {
    Pki {
        root: data("root.der"),
        other_root: data("other-root.der"),
        inter: data("intermediate.der"),
        server: data("server.der"),
        client: data("client.der"),
    }
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

/// Runs a handshake: the client's chain/key (None: no client certificate), the server's, and
/// whether the server requires a client certificate. Returns both ends and the errors.
#[allow(clippy::type_complexity)]
fn handshake<'a>(
    client_own: Option<(&'a [&'a [u8]], &'a SecretKey)>,
    client_anchors: Anchors<'a>,
    server_chain: &'a [&'a [u8]],
    server_key: &'a SecretKey,
    server_anchors: Anchors<'a>,
    mutual: bool,
) -> (
    Connection<RustCrypto, Anchors<'a>>,
    Option<Connection<RustCrypto, Anchors<'a>>>,
    Vec<Error>,
) {
    let cookies = CookieKey::new([9; 32]);
    let mut client = Connection::connect(
        RustCrypto,
        client_anchors,
        Config::default(),
        &mut Counter(3),
        Credentials::Certificate(client_own),
        at(0),
    )
    .unwrap();
    let ch1 = drain(&mut client);
    let mut out = [0u8; 512];
    let Stateless::HelloVerify(n) = cookies.respond(&RustCrypto, b"p", &ch1[0], &mut out) else {
        panic!()
    };
    client.handle_datagram(at(1), &out[..n]).unwrap();
    let ch2 = drain(&mut client);
    let Stateless::Accept(cookie) = cookies.respond(&RustCrypto, b"p", &ch2[0], &mut out) else {
        panic!("the cookie was refused")
    };
    let server = Connection::accept(
        RustCrypto,
        server_anchors,
        Config::default(),
        &ServerCredentials {
            key: Some(server_key),
            chain: Some(server_chain),
            require_client_key: mutual,
            ..ServerCredentials::NONE
        },
        &mut Counter(77),
        cookie,
        &ch2[0],
        at(2),
    );
    match server {
        Ok(mut s) => {
            let errors = pump(&mut client, &mut s);
            (client, Some(s), errors)
        }
        Err(e) => (client, None, vec![e]),
    }
}

#[test]
fn server_only_and_mutual_certificates_to_a_root_anchor() {
    let p = pki();
    let (sk, ck) = (key("server"), key("client"));
    let server_chain: [&[u8]; 2] = [&p.server, &p.inter];
    let client_chain: [&[u8]; 2] = [&p.client, &p.inter];
    let roots: [&[u8]; 1] = [&p.root];
    for mutual in [false, true] {
        let own = mutual.then_some((&client_chain[..], &ck));
        let (mut c, s, errors) = handshake(
            own,
            anchors(&roots, NOW),
            &server_chain,
            &sk,
            anchors(&roots, NOW),
            mutual,
        );
        let mut s = s.unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert!(c.is_established() && s.is_established());
        // The authenticated keys are the leaves'.
        let server_leaf = x509::parse(&p.server).unwrap().key;
        assert_eq!(c.peer_public_key(), Some(&server_leaf));
        if mutual {
            assert_eq!(
                s.peer_public_key(),
                Some(&x509::parse(&p.client).unwrap().key)
            );
        } else {
            assert_eq!(s.peer_public_key(), None);
        }
        c.send(b"reading").unwrap();
        for d in drain(&mut c) {
            s.handle_datagram(at(4), &d).unwrap();
        }
        let mut buf = [0u8; 64];
        let n = s.poll_app_data(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"reading");
    }
}

#[test]
fn an_intermediate_can_be_the_anchor() {
    let p = pki();
    let sk = key("server");
    let server_chain: [&[u8]; 1] = [&p.server];
    let inter: [&[u8]; 1] = [&p.inter];
    let (c, s, errors) = handshake(
        None,
        anchors(&inter, NOW),
        &server_chain,
        &sk,
        anchors(&inter, NOW),
        false,
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert!(c.is_established() && s.unwrap().is_established());
}

#[test]
fn path_failures_each_have_their_error() {
    let p = pki();
    let sk = key("server");
    let roots: [&[u8]; 1] = [&p.root];
    let other: [&[u8]; 1] = [&p.other_root];
    let full: [&[u8]; 2] = [&p.server, &p.inter];
    let leaf_only: [&[u8]; 1] = [&p.server];
    let expired_der = data("expired.der");
    let expired: [&[u8]; 2] = [&expired_der, &p.inter];
    let stranger_der = data("stranger.der");
    let stranger: [&[u8]; 1] = [&stranger_der];
    let (ek, stk) = (key("expired"), key("stranger"));
    let cases: Vec<(&str, &[&[u8]], &SecretKey, &[&[u8]], UnixTime, Error)> = vec![
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
        let (c, _, errors) = handshake(
            None,
            anchors(anchor_list, now),
            chain,
            key,
            anchors(&roots, NOW),
            false,
        );
        assert!(!c.is_established(), "{what}");
        assert!(errors.contains(&want), "{what}: {errors:?}");
        assert!(want.alert().is_some(), "{what}: the server is told");
    }
}

#[test]
fn chain_validation_refuses_non_ca_issuers_and_tampering() {
    let p = pki();
    let roots: [&[u8]; 1] = [&p.root];
    let rogue = data("leaf-as-issuer.der");
    // A leaf used as an issuer.
    let e =
        x509::verify_chain(&RustCrypto, &[&rogue, &p.client, &p.inter], &roots, NOW).unwrap_err();
    assert_eq!(e, Error::BadCertificate("issuer is not a CA"));
    // One flipped bit in the signed part breaks the signature.
    let mut tampered = p.server.clone();
    let i = tampered.len() / 2;
    tampered[i] ^= 0x01;
    let r = x509::verify_chain(&RustCrypto, &[&tampered, &p.inter], &roots, NOW);
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
    for n in 0..p.server.len() {
        assert!(x509::parse(&p.server[..n]).is_err());
    }
    assert!(x509::verify_chain(&RustCrypto, &[], &roots, NOW).is_err());
    // Fields come out as OpenSSL/pyca wrote them.
    let leaf = x509::parse(&p.server).unwrap();
    assert!(!leaf.is_ca && x509::parse(&p.inter).unwrap().is_ca);
    assert_eq!(leaf.not_before, 1_735_689_600); // 2025-01-01
    assert_eq!(leaf.not_after, 4_891_363_200); // 2125-01-01
    assert_eq!(leaf.key_usage.map(|u| u & 1), Some(1));
}

#[test]
fn a_mutual_server_refuses_a_client_without_a_certificate() {
    let p = pki();
    let sk = key("server");
    let chain: [&[u8]; 2] = [&p.server, &p.inter];
    let roots: [&[u8]; 1] = [&p.root];
    let (c, s, errors) = handshake(
        None,
        anchors(&roots, NOW),
        &chain,
        &sk,
        anchors(&roots, NOW),
        true,
    );
    assert!(!c.is_established() && !s.unwrap().is_established());
    assert!(errors.contains(&Error::MissingClientKey), "{errors:?}");
}

/// A point on the test's virtual clock, in milliseconds.
fn at(ms: u64) -> sigil_time::Instant {
    sigil_time::Instant::from_millis(ms)
}
