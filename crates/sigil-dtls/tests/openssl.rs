//! Interop with OpenSSL 3 (`openssl s_server` / `s_client`), an implementation nobody here
//! wrote: TLS_PSK_WITH_AES_128_CCM_8 over real UDP on loopback, both directions.

mod common;

use common::{at, clock_seeded, free_port, kill, run_client, serve_one};
use sigil_crypto::RustCrypto;
use sigil_dtls::{Config, Connection, Credentials, NoTrust, ServerCredentials, Trust};
use std::io::Write;
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::Duration;

const PSK_HEX: &str = "30313233343536373839616263646566";
const PSK: &[u8] = b"0123456789abcdef";

struct Keys;
impl Trust for Keys {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"Client_identity").then(|| {
            key[..PSK.len()].copy_from_slice(PSK);
            PSK.len()
        })
    }
}

/// `openssl s_server` with PSK-AES128-CCM8 on `port`, serving `naccept` connections.
fn openssl_psk_server(port: u16, naccept: u32) -> std::process::Child {
    let server = Command::new("openssl")
        .args([
            "s_server",
            "-dtls1_2",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-nocert",
        ])
        .args(["-psk", PSK_HEX, "-cipher", "PSK-AES128-CCM8", "-quiet"])
        .args(["-naccept", &naccept.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl is installed by scripts/install-test-deps");
    std::thread::sleep(Duration::from_millis(400));
    server
}

#[test]
fn our_psk_client_against_openssl_s_server() {
    let port = free_port();
    let server = openssl_psk_server(port, 1);
    let c = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut clock_seeded(),
        Credentials::Psk {
            identity: b"Client_identity",
            key: PSK,
        },
        at(0),
    )
    .unwrap();
    let (c, _) = run_client(c, port, b"hello from sigil\n");
    assert!(c.is_established(), "state {:?}", c.state());
    let out = kill(server);
    assert!(
        out.contains("hello from sigil"),
        "s_server printed: {out:?}"
    );
}

#[test]
fn openssl_s_client_against_our_psk_server() {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port();
    let mut client = Command::new("openssl")
        .args([
            "s_client",
            "-dtls1_2",
            "-connect",
            &format!("127.0.0.1:{port}"),
        ])
        .args([
            "-psk",
            PSK_HEX,
            "-psk_identity",
            "Client_identity",
            "-cipher",
            "PSK-AES128-CCM8",
            "-quiet",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl is installed by scripts/install-test-deps");
    let mut stdin = client.stdin.take().unwrap();
    let offer = ServerCredentials {
        psk: true,
        key: None,
        require_client_key: false,
        ..ServerCredentials::NONE
    };
    let (conn, received) = serve_one(
        &sock,
        |cookie, d, now| {
            Connection::accept(
                RustCrypto,
                Keys,
                Config::default(),
                &offer,
                &mut clock_seeded(),
                cookie,
                d,
                at(now),
            )
            .unwrap()
        },
        19,
        || stdin.write_all(b"hello from openssl\n").unwrap(),
    );
    kill(client);
    let c = conn.expect("a ClientHello with a valid cookie arrived");
    assert!(c.is_established(), "state {:?}", c.state());
    assert_eq!(c.psk_identity(), b"Client_identity");
    assert_eq!(received, b"hello from openssl\n");
}

// ---- TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with X.509 (test PKI from vectors/gen_x509.py) ----

use common::{anchors, der, pki, secret};

/// Our client against `openssl s_server` with a certificate chain; `mutual` makes s_server
/// demand and verify our client chain; `mtu` shrinks both sides' datagrams so every flight
/// with a certificate is fragmented.
fn our_x509_client_against_s_server(mutual: bool, mtu: Option<usize>) {
    our_x509_client_against_s_server_with(mutual, mtu, false)
}

fn our_x509_client_against_s_server_with(mutual: bool, mtu: Option<usize>, gcm: bool) {
    let port = free_port();
    let mut args: Vec<String> = [
        "s_server",
        "-dtls1_2",
        "-accept",
        &format!("127.0.0.1:{port}"),
        "-cert",
        &pki("server.pem"),
        "-key",
        &pki("server.key.pem"),
        "-cert_chain",
        &pki("intermediate.pem"),
        "-cipher",
        if gcm {
            "ECDHE-ECDSA-AES128-GCM-SHA256"
        } else {
            "ECDHE-ECDSA-AES128-CCM8"
        },
        "-naccept",
        "1",
        "-quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if mutual {
        args.extend(
            [
                "-Verify",
                "2",
                "-CAfile",
                &pki("root.pem"),
                "-verify_return_error",
            ]
            .map(String::from),
        );
    }
    if let Some(m) = mtu {
        args.extend(["-mtu".to_string(), m.to_string()]);
    }
    let server = Command::new("openssl")
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl is installed by scripts/install-test-deps");
    std::thread::sleep(Duration::from_millis(400));
    let root = der("root.der");
    let (client_der, inter_der, ck) =
        (der("client.der"), der("intermediate.der"), secret("client"));
    let chain: [&[u8]; 2] = [&client_der, &inter_der];
    let mut config = Config {
        gcm,
        ..Config::default()
    };
    if let Some(m) = mtu {
        config.pmtu = m;
    }
    let c = Connection::connect(
        RustCrypto,
        anchors(&root),
        config,
        &mut clock_seeded(),
        Credentials::Certificate(mutual.then_some((&chain[..], &ck))),
        at(0),
    )
    .unwrap();
    let (c, _) = run_client(c, port, b"hello over x509\n");
    assert!(c.is_established(), "state {:?}", c.state());
    let leaf = sigil_dtls::x509::parse(&der("server.der")).unwrap().key;
    assert_eq!(c.peer_public_key(), Some(&leaf));
    let out = kill(server);
    assert!(out.contains("hello over x509"), "s_server printed: {out:?}");
}

#[test]
fn our_x509_client_against_openssl_server_only() {
    our_x509_client_against_s_server(false, None);
}

#[test]
fn our_x509_client_against_openssl_mutual() {
    our_x509_client_against_s_server(true, None);
}

#[test]
fn our_x509_gcm_client_against_openssl_mutual() {
    our_x509_client_against_s_server_with(true, None, true);
}

#[test]
fn our_x509_client_against_openssl_mutual_small_mtu() {
    our_x509_client_against_s_server(true, Some(256));
}

/// `openssl s_client` with certificates against our server (chain to the test root), with
/// and without client certificates, optionally at a small MTU.
fn s_client_against_our_x509_server(mutual: bool, mtu: Option<usize>) {
    s_client_against_our_x509_server_with(mutual, mtu, "ECDHE-ECDSA-AES128-CCM8")
}

fn s_client_against_our_x509_server_with(mutual: bool, mtu: Option<usize>, cipher: &str) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port();
    let mut args: Vec<String> = [
        "s_client",
        "-dtls1_2",
        "-connect",
        &format!("127.0.0.1:{port}"),
        "-CAfile",
        &pki("root.pem"),
        "-verify_return_error",
        "-cipher",
        cipher,
        "-quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if mutual {
        args.extend(
            [
                "-cert",
                &pki("client.pem"),
                "-key",
                &pki("client.key.pem"),
                "-cert_chain",
                &pki("intermediate.pem"),
            ]
            .map(String::from),
        );
    }
    if let Some(m) = mtu {
        args.extend(["-mtu".to_string(), m.to_string()]);
    }
    let mut client = Command::new("openssl")
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl is installed by scripts/install-test-deps");
    let mut stdin = client.stdin.take().unwrap();
    let root = der("root.der");
    let (server_der, inter_der, sk) =
        (der("server.der"), der("intermediate.der"), secret("server"));
    let chain: [&[u8]; 2] = [&server_der, &inter_der];
    let offer = ServerCredentials {
        key: Some(&sk),
        chain: Some(&chain),
        require_client_key: mutual,
        ..ServerCredentials::NONE
    };
    let mut config = Config::default();
    if let Some(m) = mtu {
        config.pmtu = m;
    }
    let (conn, received) = serve_one(
        &sock,
        |cookie, d, now| {
            Connection::accept(
                RustCrypto,
                anchors(&root),
                config,
                &offer,
                &mut clock_seeded(),
                cookie,
                d,
                at(now),
            )
            .unwrap()
        },
        17,
        || stdin.write_all(b"hello from client\n").unwrap(),
    );
    kill(client);
    let c = conn.expect("a ClientHello with a valid cookie arrived");
    assert!(c.is_established(), "state {:?}", c.state());
    assert_eq!(received, b"hello from client\n");
    if mutual {
        let leaf = sigil_dtls::x509::parse(&der("client.der")).unwrap().key;
        assert_eq!(c.peer_public_key(), Some(&leaf));
    }
}

#[test]
fn openssl_s_client_against_our_x509_server_only() {
    s_client_against_our_x509_server(false, None);
}

#[test]
fn openssl_s_client_against_our_x509_server_mutual() {
    s_client_against_our_x509_server(true, None);
}

#[test]
fn openssl_s_client_against_our_x509_server_mutual_small_mtu() {
    s_client_against_our_x509_server(true, Some(256));
}

#[test]
fn openssl_s_client_gcm_against_our_x509_server() {
    s_client_against_our_x509_server_with(true, None, "ECDHE-ECDSA-AES128-GCM-SHA256");
}

// ---- session resumption (abbreviated handshake) ----

#[test]
fn our_client_resumes_a_session_with_openssl_s_server() {
    let port = free_port();
    let server = openssl_psk_server(port, 2);
    let creds = Credentials::Psk {
        identity: b"Client_identity",
        key: PSK,
    };
    let c = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut clock_seeded(),
        creds,
        at(0),
    )
    .unwrap();
    // close_notify at the end, so s_server takes the next connection.
    let (c, _, session) = common::run_client_with(c, port, b"first\n", true);
    assert!(!c.resumed());
    let session = session.expect("OpenSSL issues a session ID");
    std::thread::sleep(Duration::from_millis(200));
    let c = Connection::resume(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut clock_seeded(),
        creds,
        &session,
        at(0),
    )
    .unwrap();
    let (c, _) = run_client(c, port, b"resumed\n");
    let out = kill(server);
    assert!(c.resumed(), "state {:?}", c.state());
    assert!(
        out.contains("first") && out.contains("resumed"),
        "s_server printed: {out:?}"
    );
}

#[test]
fn openssl_s_client_resumes_a_session_with_our_server() {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port();
    let sess_file = std::env::temp_dir().join(format!("sigil-ossl-sess-{}", std::process::id()));
    let mut cache: Option<sigil_dtls::Session> = None;
    for round in 0..2 {
        let mut args: Vec<String> = [
            "s_client",
            "-dtls1_2",
            "-connect",
            &format!("127.0.0.1:{port}"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(
            [
                "-psk",
                PSK_HEX,
                "-psk_identity",
                "Client_identity",
                "-cipher",
                "PSK-AES128-CCM8",
                "-quiet",
            ]
            .map(String::from),
        );
        args.extend([
            if round == 0 { "-sess_out" } else { "-sess_in" }.to_string(),
            sess_file.display().to_string(),
        ]);
        let mut client = Command::new("openssl")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl is installed by scripts/install-test-deps");
        let mut stdin = client.stdin.take().unwrap();
        let cached = cache.clone();
        let (conn, received) = serve_one(
            &sock,
            |cookie, d, now| {
                let resume = cached.as_ref().filter(|s| {
                    sigil_dtls::record::RecordFacts::parse(d, 0)
                        .ok()
                        .and_then(|f| f.client_hello?.requested_session.copied())
                        == Some(s.id)
                });
                let offer = ServerCredentials {
                    psk: true,
                    issue_session_ids: true,
                    resume,
                    ..ServerCredentials::NONE
                };
                Connection::accept(
                    RustCrypto,
                    Keys,
                    Config::default(),
                    &offer,
                    &mut clock_seeded(),
                    cookie,
                    d,
                    at(now),
                )
                .unwrap()
            },
            6,
            || stdin.write_all(b"hello\n").unwrap(),
        );
        // Let s_client write its session file before it goes.
        std::thread::sleep(Duration::from_millis(200));
        kill(client);
        let c = conn.expect("a ClientHello with a valid cookie arrived");
        assert!(c.is_established(), "round {round}: state {:?}", c.state());
        assert_eq!(received, b"hello\n");
        assert_eq!(c.resumed(), round == 1, "round {round}");
        assert_eq!(c.psk_identity(), b"Client_identity");
        if round == 0 {
            cache = c.session();
        }
    }
    let _ = std::fs::remove_file(sess_file);
}
