//! RSA-2048 X.509 certificates (feature `rsa`), for comparison with the seed paper:
//! TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 and, with feature `rsa-kx` and
//! `Config::danger_rsa_key_transport` on both sides, TLS_RSA_WITH_AES_128_CCM_8; server-only
//! and mutual, in memory; the Bleichenbacher countermeasure seen from the wire (a bad
//! EncryptedPreMasterSecret fails exactly like a well-formed one holding another secret);
//! and interop with OpenSSL and GnuTLS both ways. The PKI is made by the `openssl` tool at
//! test time, not by this crate.

#![cfg(feature = "rsa")]

mod common;

use common::{at, clock_seeded, free_port, kill, run_client, serve_one, spawn_peer};
use sigil_crypto::{RsaPublicKey, RsaSecretKey, RustCrypto};
use sigil_dtls::wire::CipherSuite;
use sigil_dtls::{Config, Connection, Credentials, Error, ServerCredentials, X509Anchors};
use sigil_testkit::dtls::{server, Link, Pair};
use sigil_testkit::Counter;
use std::io::Write;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

// ---- The test PKI: an RSA-2048 root, a server and a client leaf, made by openssl ----

struct RsaPki {
    dir: PathBuf,
    root: Vec<u8>,
    server: Vec<u8>,
    client: Vec<u8>,
    server_key: RsaSecretKey,
    client_key: RsaSecretKey,
}

impl RsaPki {
    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl is installed by scripts/install-test-deps");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One RSA-2048 key, a certificate signed by `issuer` (itself when `None`) with the
/// extensions of `ext`, in PEM and DER; the key in PEM and PKCS#1 DER.
fn issue(dir: &Path, name: &str, subject: &str, issuer: Option<&str>, ext: &str) {
    let key = format!("{name}.key.pem");
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            &key,
        ],
    );
    let der_key = format!("{name}.key.der");
    openssl(
        dir,
        &[
            "rsa",
            "-in",
            &key,
            "-outform",
            "DER",
            "-traditional",
            "-out",
            &der_key,
        ],
    );
    std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
    let csr = format!("{name}.csr");
    openssl(
        dir,
        &["req", "-new", "-key", &key, "-subj", subject, "-out", &csr],
    );
    let pem = format!("{name}.pem");
    let ext_file = format!("{name}.ext");
    let mut args = vec![
        "x509", "-req", "-in", &csr, "-days", "30", "-sha256", "-extfile", &ext_file, "-out", &pem,
    ];
    let (ca, ca_key);
    match issuer {
        None => args.extend(["-signkey", &key]),
        Some(i) => {
            ca = format!("{i}.pem");
            ca_key = format!("{i}.key.pem");
            args.extend(["-CA", &ca, "-CAkey", &ca_key, "-CAcreateserial"]);
        }
    }
    openssl(dir, &args);
    let der = format!("{name}.der");
    openssl(dir, &["x509", "-in", &pem, "-outform", "DER", "-out", &der]);
}

fn rsa_pki() -> &'static RsaPki {
    static PKI: OnceLock<RsaPki> = OnceLock::new();
    PKI.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("sigil-rsa-pki-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        issue(
            &dir,
            "root",
            "/CN=Sigil RSA test root",
            None,
            "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign\n",
        );
        for (name, cn) in [("server", "localhost"), ("client", "sigil-rsa-client")] {
            issue(
                &dir,
                name,
                &format!("/CN={cn}"),
                Some("root"),
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
                 subjectAltName=DNS:localhost\n",
            );
        }
        let read = |n: &str| std::fs::read(dir.join(n)).unwrap();
        RsaPki {
            root: read("root.der"),
            server: read("server.der"),
            client: read("client.der"),
            server_key: RsaSecretKey::from_pkcs1_der(&read("server.key.der")),
            client_key: RsaSecretKey::from_pkcs1_der(&read("client.key.der")),
            dir,
        }
    })
}

fn anchors(root: &[u8]) -> X509Anchors<'static, RustCrypto> {
    common::anchors(root)
}

fn leaf_key(der: &[u8]) -> RsaPublicKey {
    match sigil_dtls::x509::certified_key_of(der).unwrap() {
        sigil_dtls::x509::CertifiedKey::Rsa(k) => k,
        k => panic!("not an RSA key: {k:?}"),
    }
}

/// A side that takes RSA key transport.
#[cfg(feature = "rsa-kx")]
fn key_transport() -> Config {
    Config {
        danger_rsa_key_transport: true,
        ..Config::default()
    }
}

// ---- In memory ----

type Anchors = X509Anchors<'static, RustCrypto>;

fn over_records(
    client_config: Config,
    server_config: Config,
    mutual: bool,
) -> Pair<'static, Anchors, Anchors> {
    let p = rsa_pki();
    let server_chain: &'static [&'static [u8]] = Box::leak(Box::new([&p.server[..]]));
    let client_chain: &'static [&'static [u8]] = Box::leak(Box::new([&p.client[..]]));
    let client = Connection::connect(
        RustCrypto,
        anchors(&p.root),
        client_config,
        &mut Counter::new(3, 31),
        Credentials::RsaCertificate(mutual.then_some((client_chain, &p.client_key))),
        at(0),
    )
    .unwrap();
    let offer = ServerCredentials {
        rsa: Some((server_chain, &p.server_key)),
        require_client_key: mutual,
        ..ServerCredentials::NONE
    };
    let accept = server(anchors(&p.root), server_config, offer, Counter::new(77, 31));
    let mut pair = Pair::new(client, accept, Link::PERFECT);
    pair.run_until_quiet();
    pair
}

fn assert_established(
    pair: &mut Pair<'static, Anchors, Anchors>,
    suite: CipherSuite,
    mutual: bool,
) {
    assert!(pair.errors.is_empty(), "{:?}", pair.errors);
    let p = rsa_pki();
    assert_eq!(pair.client.cipher_suite(), Some(suite));
    assert_eq!(pair.server().cipher_suite(), Some(suite));
    assert_eq!(
        pair.client.peer_rsa_public_key(),
        Some(&leaf_key(&p.server))
    );
    let client_key = leaf_key(&p.client);
    assert_eq!(
        pair.server().peer_rsa_public_key(),
        mutual.then_some(&client_key)
    );
}

#[test]
fn ecdhe_rsa_server_only_and_mutual() {
    for mutual in [false, true] {
        let mut pair = over_records(Config::default(), Config::default(), mutual);
        assert_established(
            &mut pair,
            CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            mutual,
        );
    }
}

#[cfg(feature = "rsa-kx")]
#[test]
fn rsa_key_transport_server_only_and_mutual() {
    for mutual in [false, true] {
        let mut pair = over_records(key_transport(), key_transport(), mutual);
        assert_established(&mut pair, CipherSuite::TLS_RSA_WITH_AES_128_CCM_8, mutual);
    }
}

#[cfg(feature = "rsa-kx")]
#[test]
fn rsa_key_transport_needs_both_sides_to_ask_for_it() {
    // The client asks, the server was not told to: no common suite.
    let pair = over_records(key_transport(), Config::default(), false);
    let server_failure = pair.server.as_ref().and_then(|s| s.failure());
    assert!(
        pair.errors.contains(&Error::NoCommonCipherSuite)
            || server_failure == Some(Error::NoCommonCipherSuite),
        "{:?}",
        pair.errors
    );
    assert!(!pair.client.is_established());
    // The server takes it, the client did not ask: ECDHE-RSA.
    let mut pair = over_records(Config::default(), key_transport(), false);
    assert_established(
        &mut pair,
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        false,
    );
}

#[test]
fn an_ecdsa_client_is_not_offered_an_rsa_suite() {
    // A server with only an RSA chain and a client offering ECDHE-ECDSA: no common suite.
    let p = rsa_pki();
    let server_chain: &'static [&'static [u8]] = Box::leak(Box::new([&p.server[..]]));
    let client = Connection::connect(
        RustCrypto,
        anchors(&p.root),
        Config::default(),
        &mut Counter::new(3, 31),
        Credentials::Certificate(None),
        at(0),
    )
    .unwrap();
    let offer = ServerCredentials {
        rsa: Some((server_chain, &p.server_key)),
        ..ServerCredentials::NONE
    };
    let accept = server(
        anchors(&p.root),
        Config::default(),
        offer,
        Counter::new(77, 31),
    );
    let mut pair = Pair::new(client, accept, Link::PERFECT);
    pair.run_until_quiet();
    assert!(!pair.client.is_established());
    assert!(
        pair.errors.contains(&Error::NoCommonCipherSuite),
        "{:?}",
        pair.errors
    );
}

// ---- Bleichenbacher: over whole flights, with the ClientKeyExchange replaced ----

#[cfg(feature = "rsa-kx")]
mod bleichenbacher {
    use super::*;
    use sigil_crypto::CryptoProvider;
    use sigil_dtls::handshake::Fragment;
    use sigil_dtls::record::Records;
    use sigil_dtls::wire::{ContentType, HandshakeType};
    use sigil_dtls::{CookieKey, Stateless, WholeFlights};

    const PEER: &[u8] = b"[fe80::1]:5683";

    /// Where the EncryptedPreMasterSecret's bytes sit in `flight` (plaintext records).
    fn ciphertext_range(flight: &[u8]) -> std::ops::Range<usize> {
        for rec in Records::new(flight) {
            let rec = rec.unwrap();
            if rec.header.content_type != ContentType::HANDSHAKE || rec.header.epoch != 0 {
                continue;
            }
            let mut rest = rec.fragment;
            while !rest.is_empty() {
                let (f, next) = Fragment::parse(rest).unwrap();
                if f.msg_type == HandshakeType::CLIENT_KEY_EXCHANGE {
                    let start = f.body.as_ptr() as usize - flight.as_ptr() as usize + 2;
                    return start..start + f.body.len() - 2;
                }
                rest = next;
            }
        }
        panic!("no ClientKeyExchange");
    }

    /// Runs a key-transport handshake whose ClientKeyExchange ciphertext `replace` rewrites;
    /// returns the server's error for flight 5 (none: the handshake completed).
    fn with_ciphertext(replace: impl FnOnce(&mut [u8])) -> Option<Error> {
        let p = rsa_pki();
        let mut out = vec![0u8; 16384];
        let (mut client, n) = WholeFlights::connect(
            RustCrypto,
            anchors(&p.root),
            key_transport(),
            &mut Counter::new(5, 41),
            Credentials::RsaCertificate(None),
            &mut out,
        )
        .unwrap();
        let cookies = CookieKey::new([7; 32]);
        let mut hvr = [0u8; 256];
        let Stateless::HelloVerify(h) = cookies.respond(&RustCrypto, PEER, &out[..n], &mut hvr)
        else {
            panic!("no HelloVerifyRequest");
        };
        let n = client.handle_flight(&hvr[..h], &mut out).unwrap();
        let flight3 = out[..n].to_vec();
        let Stateless::Accept(proof) = cookies.respond(&RustCrypto, PEER, &flight3, &mut hvr)
        else {
            panic!("the cookie was not accepted");
        };
        let chain: [&[u8]; 1] = [&p.server];
        let offer = ServerCredentials {
            rsa: Some((&chain, &p.server_key)),
            ..ServerCredentials::NONE
        };
        let (mut server, n) = WholeFlights::accept(
            RustCrypto,
            anchors(&p.root),
            key_transport(),
            &offer,
            &mut Counter::new(9, 41),
            proof,
            &flight3,
            &mut out,
        )
        .unwrap();
        let flight4 = out[..n].to_vec();
        let n = client.handle_flight(&flight4, &mut out).unwrap();
        let mut flight5 = out[..n].to_vec();
        let range = ciphertext_range(&flight5);
        assert_eq!(range.len(), 256);
        replace(&mut flight5[range]);
        server.handle_flight(&flight5, &mut out).err()
    }

    fn encrypt(message: &[u8]) -> Vec<u8> {
        let key = leaf_key(&rsa_pki().server);
        let mut ct = [0u8; 512];
        let n = RustCrypto
            .rsa_pkcs1_encrypt(&key, message, &mut Counter::new(1, 3), &mut ct)
            .unwrap();
        ct[..n].to_vec()
    }

    #[test]
    fn the_untouched_exchange_completes() {
        assert_eq!(with_ciphertext(|_| {}), None);
    }

    #[test]
    fn bad_padding_wrong_length_and_another_secret_fail_alike() {
        // A well-formed ciphertext holding another premaster secret: the reference failure.
        let mut other = [0x11u8; 48];
        other[..2].copy_from_slice(&[0xfe, 0xfd]);
        let reference = with_ciphertext(|ct| ct.copy_from_slice(&encrypt(&other)));
        assert!(reference.is_some());
        // Not PKCS#1 v1.5 at all (a flipped byte decrypts to noise).
        let flipped = with_ciphertext(|ct| ct[100] ^= 0x40);
        // Correct padding around a 47-byte message, and around 49 bytes.
        let short = with_ciphertext(|ct| ct.copy_from_slice(&encrypt(&[0x22; 47])));
        let long = with_ciphertext(|ct| ct.copy_from_slice(&encrypt(&[0x22; 49])));
        // The right length but another version: replaced by the ClientHello's too.
        let mut version = other;
        version[..2].copy_from_slice(&[0x03, 0x03]);
        let wrong_version = with_ciphertext(|ct| ct.copy_from_slice(&encrypt(&version)));
        // A ciphertext not below the modulus.
        let too_big = with_ciphertext(|ct| ct.fill(0xff));
        for (what, got) in [
            ("flipped", flipped),
            ("47 bytes", short),
            ("49 bytes", long),
            ("version", wrong_version),
            ("not below n", too_big),
        ] {
            assert_eq!(got, reference, "{what}");
            assert_eq!(
                got.and_then(|e| e.alert()),
                reference.and_then(|e| e.alert()),
                "{what}"
            );
        }
    }
}

// ---- Interop: OpenSSL ----

fn s_server(port: u16, cipher: &str, mutual: bool) -> std::process::Child {
    let p = rsa_pki();
    let server = spawn_peer(
        "openssl",
        &[
            "s_server",
            "-dtls1_2",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-cert",
            &p.path("server.pem"),
            "-key",
            &p.path("server.key.pem"),
            "-cipher",
            cipher,
            "-naccept",
            "1",
            "-quiet",
        ],
        mutual,
        &[
            "-Verify",
            "1",
            "-CAfile",
            &p.path("root.pem"),
            "-verify_return_error",
        ],
    );
    std::thread::sleep(Duration::from_millis(400));
    server
}

/// Our client against a server the other implementation runs on `port`.
fn our_client(port: u16, config: Config, mutual: bool, message: &[u8]) -> CipherSuite {
    let p = rsa_pki();
    let chain: [&[u8]; 1] = [&p.client];
    let c = Connection::connect(
        RustCrypto,
        anchors(&p.root),
        config,
        &mut clock_seeded(),
        Credentials::RsaCertificate(mutual.then_some((&chain[..], &p.client_key))),
        at(0),
    )
    .unwrap();
    let (c, _) = run_client(c, port, message);
    assert!(c.is_established(), "state {:?}", c.state());
    assert_eq!(c.peer_rsa_public_key(), Some(&leaf_key(&p.server)));
    c.cipher_suite().unwrap()
}

fn our_client_against_s_server(cipher: &str, config: Config, mutual: bool) -> CipherSuite {
    let port = free_port();
    let server = s_server(port, cipher, mutual);
    let suite = our_client(port, config, mutual, b"hello over rsa\n");
    let out = kill(server);
    assert!(out.contains("hello over rsa"), "s_server printed: {out:?}");
    suite
}

#[test]
fn our_ecdhe_rsa_client_against_openssl_server_only_and_mutual() {
    for mutual in [false, true] {
        let suite =
            our_client_against_s_server("ECDHE-RSA-AES128-GCM-SHA256", Config::default(), mutual);
        assert_eq!(suite, CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256);
    }
}

#[cfg(feature = "rsa-kx")]
#[test]
fn our_rsa_key_transport_client_against_openssl_server_only_and_mutual() {
    for mutual in [false, true] {
        let suite = our_client_against_s_server("AES128-CCM8", key_transport(), mutual);
        assert_eq!(suite, CipherSuite::TLS_RSA_WITH_AES_128_CCM_8);
    }
}

/// Our server, with `config`, for one handshake driven by `client` (the other
/// implementation's process, which writes `message` once established).
fn our_server(
    config: Config,
    mutual: bool,
    sock: &UdpSocket,
    mut client: std::process::Child,
    message: &[u8],
) -> CipherSuite {
    let p = rsa_pki();
    let mut stdin = client.stdin.take().unwrap();
    let chain: [&[u8]; 1] = [&p.server];
    let offer = ServerCredentials {
        rsa: Some((&chain, &p.server_key)),
        require_client_key: mutual,
        ..ServerCredentials::NONE
    };
    let (conn, received) = serve_one(
        sock,
        |cookie, d, now| {
            Connection::accept(
                RustCrypto,
                anchors(&p.root),
                config,
                &offer,
                &mut clock_seeded(),
                cookie,
                d,
                at(now),
            )
            .unwrap()
        },
        message.len(),
        || stdin.write_all(message).unwrap(),
    );
    kill(client);
    let c = conn.expect("a ClientHello with a valid cookie arrived");
    assert!(c.is_established(), "state {:?}", c.state());
    assert_eq!(received, message);
    if mutual {
        assert_eq!(c.peer_rsa_public_key(), Some(&leaf_key(&p.client)));
    }
    c.cipher_suite().unwrap()
}

fn s_client_against_our_server(cipher: &str, config: Config, mutual: bool) -> CipherSuite {
    let p = rsa_pki();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port();
    let client = spawn_peer(
        "openssl",
        &[
            "s_client",
            "-dtls1_2",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-CAfile",
            &p.path("root.pem"),
            "-verify_return_error",
            "-cipher",
            cipher,
            "-quiet",
        ],
        mutual,
        &[
            "-cert",
            &p.path("client.pem"),
            "-key",
            &p.path("client.key.pem"),
        ],
    );
    our_server(config, mutual, &sock, client, b"hello from openssl\n")
}

#[test]
fn openssl_ecdhe_rsa_client_against_our_server_only_and_mutual() {
    for mutual in [false, true] {
        let suite =
            s_client_against_our_server("ECDHE-RSA-AES128-GCM-SHA256", Config::default(), mutual);
        assert_eq!(suite, CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256);
    }
}

#[cfg(feature = "rsa-kx")]
#[test]
fn openssl_rsa_key_transport_client_against_our_server_only_and_mutual() {
    for mutual in [false, true] {
        let suite = s_client_against_our_server("AES128-CCM8", key_transport(), mutual);
        assert_eq!(suite, CipherSuite::TLS_RSA_WITH_AES_128_CCM_8);
    }
}

// ---- Interop: GnuTLS ----

/// GnuTLS priority strings for one suite over DTLS 1.2.
fn gnutls_priority(kx_transport: bool) -> &'static str {
    if kx_transport {
        "NORMAL:-CIPHER-ALL:+AES-128-CCM-8:-KX-ALL:+RSA:-VERS-ALL:+VERS-DTLS1.2"
    } else {
        "NORMAL:-CIPHER-ALL:+AES-128-GCM:-KX-ALL:+ECDHE-RSA:-VERS-ALL:+VERS-DTLS1.2"
    }
}

fn our_client_against_gnutls_serv(kx_transport: bool, config: Config, mutual: bool) -> CipherSuite {
    let p = rsa_pki();
    let port = free_port();
    let server = spawn_peer(
        "gnutls-serv",
        &[
            "--udp",
            "--port",
            &port.to_string(),
            "--x509certfile",
            &p.path("server.pem"),
            "--x509keyfile",
            &p.path("server.key.pem"),
            "--priority",
            gnutls_priority(kx_transport),
            "--echo",
        ],
        mutual,
        &[
            "--require-client-cert",
            "--verify-client-cert",
            "--x509cafile",
            &p.path("root.pem"),
        ],
    );
    std::thread::sleep(Duration::from_millis(600));
    let suite = our_client(port, config, mutual, b"hello gnutls\n");
    kill(server);
    suite
}

#[test]
fn our_ecdhe_rsa_client_against_gnutls_server_only_and_mutual() {
    for mutual in [false, true] {
        let suite = our_client_against_gnutls_serv(false, Config::default(), mutual);
        assert_eq!(suite, CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256);
    }
}

#[cfg(feature = "rsa-kx")]
#[test]
fn our_rsa_key_transport_client_against_gnutls_server_only_and_mutual() {
    for mutual in [false, true] {
        let suite = our_client_against_gnutls_serv(true, key_transport(), mutual);
        assert_eq!(suite, CipherSuite::TLS_RSA_WITH_AES_128_CCM_8);
    }
}

fn gnutls_cli_against_our_server(kx_transport: bool, config: Config, mutual: bool) -> CipherSuite {
    let p = rsa_pki();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port();
    let client = spawn_peer(
        "gnutls-cli",
        &[
            "--udp",
            "--port",
            &port.to_string(),
            "--x509cafile",
            &p.path("root.pem"),
            "--priority",
            gnutls_priority(kx_transport),
            "--verify-hostname",
            "localhost",
            "127.0.0.1",
        ],
        mutual,
        &[
            "--x509certfile",
            &p.path("client.pem"),
            "--x509keyfile",
            &p.path("client.key.pem"),
        ],
    );
    our_server(config, mutual, &sock, client, b"hello from gnutls\n")
}

#[test]
fn gnutls_ecdhe_rsa_client_against_our_server_only_and_mutual() {
    for mutual in [false, true] {
        let suite = gnutls_cli_against_our_server(false, Config::default(), mutual);
        assert_eq!(suite, CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256);
    }
}

#[cfg(feature = "rsa-kx")]
#[test]
fn gnutls_rsa_key_transport_client_against_our_server_only_and_mutual() {
    for mutual in [false, true] {
        let suite = gnutls_cli_against_our_server(true, key_transport(), mutual);
        assert_eq!(suite, CipherSuite::TLS_RSA_WITH_AES_128_CCM_8);
    }
}

// ---- What the RSA suites cost beside ECDHE-ECDSA (docs/benchmarks.md) ----

/// One handshake in memory (cookie exchange included, perfect link): bytes both ways,
/// datagrams, and the wall time of client and server together on one thread.
#[cfg(feature = "rsa-kx")]
fn measure<T, U, A>(
    client: impl Fn() -> Connection<RustCrypto, T>,
    accept: impl Fn() -> A,
    runs: usize,
) -> (u64, u64, Duration)
where
    T: sigil_dtls::Trust + 'static,
    U: sigil_dtls::Trust + 'static,
    A: FnOnce(
            sigil_dtls::CookieVerified,
            &[u8],
            sigil_time::Instant,
        ) -> Result<Connection<RustCrypto, U>, Error>
        + 'static,
{
    let mut times = Vec::new();
    let mut bytes = (0, 0);
    for _ in 0..runs {
        let start = std::time::Instant::now();
        let mut pair = Pair::new(client(), accept(), Link::PERFECT);
        pair.run_until_quiet();
        times.push(start.elapsed());
        assert!(pair.errors.is_empty(), "{:?}", pair.errors);
        assert!(pair.client.is_established() && pair.server().is_established());
        let s = pair.stats;
        bytes = (
            s.to_server.bytes + s.to_client.bytes,
            s.to_server.datagrams + s.to_client.datagrams,
        );
    }
    times.sort();
    (bytes.0, bytes.1, times[times.len() / 2])
}

/// Prints the table of docs/benchmarks.md ("RSA beside ECDHE-ECDSA"). Run with
/// `cargo test --release -p sigil-dtls --features rsa,rsa-kx --test rsa -- --ignored
/// --nocapture handshake_costs`.
#[cfg(feature = "rsa-kx")]
#[test]
#[ignore = "a measurement: run it in release with --ignored --nocapture"]
fn handshake_costs() {
    use sigil_testkit::pki as ecc;
    let runs = 101;
    let p = rsa_pki();
    let rsa_server: &'static [&'static [u8]] = Box::leak(Box::new([&p.server[..]]));
    let rsa_client: &'static [&'static [u8]] = Box::leak(Box::new([&p.client[..]]));
    // ECC: the P-256 leaves alone, the intermediate as anchor, so both chains are one
    // certificate long as the RSA ones are.
    let ecc_server: &'static [&'static [u8]] = Box::leak(Box::new([ecc::SERVER]));
    let ecc_client: &'static [&'static [u8]] = Box::leak(Box::new([ecc::CLIENT]));
    let ecc_sk: &'static _ = Box::leak(Box::new(ecc::secret(ecc::SERVER_KEY)));
    let ecc_ck: &'static _ = Box::leak(Box::new(ecc::secret(ecc::CLIENT_KEY)));
    println!(
        "suite | authentication | bytes | datagrams | median ms (client + server, {runs} runs)"
    );
    for mutual in [false, true] {
        let who = if mutual { "mutual" } else { "server-only" };
        let (b, d, t) = measure(
            || {
                Connection::connect(
                    RustCrypto,
                    anchors(ecc::INTERMEDIATE),
                    Config::default(),
                    &mut Counter::new(3, 31),
                    Credentials::Certificate(mutual.then_some((ecc_client, ecc_ck))),
                    at(0),
                )
                .unwrap()
            },
            || {
                let offer = ServerCredentials {
                    key: Some(ecc_sk),
                    chain: Some(ecc_server),
                    require_client_key: mutual,
                    ..ServerCredentials::NONE
                };
                server(
                    anchors(ecc::INTERMEDIATE),
                    Config::default(),
                    offer,
                    Counter::new(77, 31),
                )
            },
            runs,
        );
        println!(
            "TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 (P-256) | {who} | {b} | {d} | {:.2}",
            t.as_secs_f64() * 1e3
        );
        for (name, config) in [
            ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", Config::default()),
            ("TLS_RSA_WITH_AES_128_CCM_8", key_transport()),
        ] {
            let (b, d, t) = measure(
                || {
                    Connection::connect(
                        RustCrypto,
                        anchors(&p.root),
                        config,
                        &mut Counter::new(3, 31),
                        Credentials::RsaCertificate(mutual.then_some((rsa_client, &p.client_key))),
                        at(0),
                    )
                    .unwrap()
                },
                || {
                    let offer = ServerCredentials {
                        rsa: Some((rsa_server, &p.server_key)),
                        require_client_key: mutual,
                        ..ServerCredentials::NONE
                    };
                    server(anchors(&p.root), config, offer, Counter::new(77, 31))
                },
                runs,
            );
            println!(
                "{name} (RSA-2048) | {who} | {b} | {d} | {:.2}",
                t.as_secs_f64() * 1e3
            );
        }
    }
}
