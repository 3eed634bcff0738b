//! Interop with GnuTLS 3.7 (`gnutls-serv` / `gnutls-cli`, Debian's gnutls-bin), an
//! implementation nobody here wrote: PSK-CCM8 and ECDHE-ECDSA-CCM8 with raw public keys
//! (RFC 7250) and with X.509 certificates, server-only and mutual, both directions, over real
//! UDP on loopback.

mod common;

use common::{anchors, at, clock_seeded, der, free_port, kill, pki, run_client, secret, serve_one};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::{Config, Connection, Credentials, PinnedIdentities, ServerCredentials, Trust};
use sigil_identity::Identity;
use sigil_testkit::Seeded;
use std::io::Write;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const PSK: &[u8] = b"0123456789abcdef";
const PSK_PRIORITY: &str =
    "NONE:+VERS-DTLS1.2:+AES-128-CCM-8:+AEAD:+PSK:+COMP-NULL:+SIGN-ALL:+GROUP-ALL";
const RPK_PRIORITY: &str = "NORMAL:-CIPHER-ALL:+AES-128-CCM-8:-KX-ALL:+ECDHE-ECDSA:-VERS-ALL:+VERS-DTLS1.2:+CTYPE-CLI-RAWPK:+CTYPE-SRV-RAWPK";

const X509_PRIORITY: &str =
    "NORMAL:-CIPHER-ALL:+AES-128-CCM-8:-KX-ALL:+ECDHE-ECDSA:-VERS-ALL:+VERS-DTLS1.2";

fn workdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sigil-gnutls-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A P-256 key made by certtool: its PEM private key, its DER SubjectPublicKeyInfo, and the
/// public key as Sigil sees it.
fn certtool_key(dir: &Path, name: &str) -> (PathBuf, PathBuf, PublicKey) {
    let key = dir.join(format!("{name}.key.pem"));
    let spki = dir.join(format!("{name}.pub.der"));
    let pem = dir.join(format!("{name}.pub.pem"));
    let ok = |c: &mut Command| {
        assert!(c
            .stderr(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success())
    };
    ok(Command::new("certtool")
        .args([
            "--generate-privkey",
            "--key-type",
            "ecdsa",
            "--curve",
            "secp256r1",
            "--outfile",
        ])
        .arg(&key));
    ok(Command::new("certtool")
        .args(["--pubkey-info", "--outder", "--load-privkey"])
        .arg(&key)
        .arg("--outfile")
        .arg(&spki));
    ok(Command::new("certtool")
        .args(["--pubkey-info", "--load-privkey"])
        .arg(&key)
        .arg("--outfile")
        .arg(&pem));
    let pk = sigil_dtls::spki::parse_spki(&std::fs::read(&spki).unwrap()).unwrap();
    (key, pem, pk)
}

/// Writes Sigil's own P-256 key as a PEM SubjectPublicKeyInfo for gnutls to pin or present.
fn sigil_key(dir: &Path, seed: u8) -> (SecretKey, PathBuf, Identity) {
    let sk = RustCrypto
        .generate(
            SignatureAlgorithm::EcdsaP256,
            &mut Seeded::new(seed as u64 * 7919 + 1),
        )
        .unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    let mut der = [0u8; 91];
    let mut w = sigil_dtls::Writer::new(&mut der);
    sigil_dtls::spki::write_spki(&pk, &mut w).unwrap();
    use base64_pem::encode;
    let path = dir.join(format!("sigil-{seed}.pub.pem"));
    std::fs::write(&path, encode("PUBLIC KEY", &der)).unwrap();
    (sk, path, Identity::of_key(&RustCrypto, &pk, b"").unwrap())
}

mod base64_pem {
    pub fn encode(label: &str, der: &[u8]) -> String {
        const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut b64 = String::new();
        for c in der.chunks(3) {
            let n = (c[0] as u32) << 16
                | (*c.get(1).unwrap_or(&0) as u32) << 8
                | *c.get(2).unwrap_or(&0) as u32;
            for i in 0..4 {
                if i <= c.len() {
                    b64.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    b64.push('=');
                }
            }
        }
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|l| std::str::from_utf8(l).unwrap())
            .collect();
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            lines.join("\n")
        )
    }
}

struct Keys;
impl Trust for Keys {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"sensor-1").then(|| {
            key[..PSK.len()].copy_from_slice(PSK);
            PSK.len()
        })
    }
}

fn gnutls_serv(port: u16, args: &[&str]) -> std::process::Child {
    let c = Command::new("gnutls-serv")
        .args(["--udp", "--echo", "--port", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("gnutls-bin is installed by scripts/install-test-deps");
    std::thread::sleep(Duration::from_millis(600));
    c
}

fn gnutls_cli(port: u16, args: &[&str]) -> std::process::Child {
    Command::new("gnutls-cli")
        .args(["--udp", "--port", &port.to_string(), "127.0.0.1"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("gnutls-bin is installed by scripts/install-test-deps")
}

#[test]
fn our_psk_client_against_gnutls_serv() {
    let dir = workdir("psk-serv");
    let pskfile = dir.join("psk.txt");
    std::fs::write(&pskfile, format!("sensor-1:{}\n", hex::encode(PSK))).unwrap();
    let port = free_port();
    let server = gnutls_serv(
        port,
        &[
            "--priority",
            PSK_PRIORITY,
            "--pskpasswd",
            pskfile.to_str().unwrap(),
        ],
    );
    let c = Connection::connect(
        RustCrypto,
        sigil_dtls::NoTrust,
        Config::default(),
        &mut clock_seeded(),
        Credentials::Psk {
            identity: b"sensor-1",
            key: PSK,
        },
        at(0),
    )
    .unwrap();
    let (c, echoed) = run_client(c, port, b"psk reading\n");
    kill(server);
    assert!(c.is_established(), "state {:?}", c.state());
    assert_eq!(echoed, b"psk reading\n");
}

#[test]
fn gnutls_cli_psk_against_our_server() {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port();
    let mut cli = gnutls_cli(
        port,
        &[
            "--priority",
            PSK_PRIORITY,
            "--pskusername",
            "sensor-1",
            "--pskkey",
            &hex::encode(PSK),
        ],
    );
    let mut stdin = cli.stdin.take().unwrap();
    let offer = ServerCredentials {
        psk: true,
        key: None,
        require_client_key: false,
        ..ServerCredentials::NONE
    };
    let (conn, got) = serve_one(
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
        9,
        || stdin.write_all(b"from cli\n").unwrap(),
    );
    kill(cli);
    assert!(conn.as_ref().is_some_and(|c| c.is_established()));
    assert_eq!(got, b"from cli\n");
}

#[test]
fn our_rpk_client_against_gnutls_serv_server_only_and_mutual() {
    let dir = workdir("rpk-serv");
    let (skey, spub, server_pk) = certtool_key(&dir, "server");
    let server_id = [Identity::of_key(&RustCrypto, &server_pk, b"").unwrap()];
    for mutual in [false, true] {
        let port = free_port();
        let mut args = vec![
            "--priority",
            RPK_PRIORITY,
            "--rawpkkeyfile",
            skey.to_str().unwrap(),
            "--rawpkfile",
            spub.to_str().unwrap(),
        ];
        if mutual {
            args.push("--require-client-cert");
        }
        let server = gnutls_serv(port, &args);
        let (client_key, _, _) = sigil_key(&dir, 1);
        let c = Connection::connect(
            RustCrypto,
            PinnedIdentities {
                crypto: RustCrypto,
                identities: &server_id,
            },
            Config::default(),
            &mut clock_seeded(),
            Credentials::RawPublicKey(mutual.then_some(&client_key)),
            at(0),
        )
        .unwrap();
        let (c, echoed) = run_client(c, port, b"rpk reading\n");
        kill(server);
        assert!(c.is_established(), "mutual={mutual}: state {:?}", c.state());
        assert_eq!(c.peer_public_key(), Some(&server_pk));
        assert_eq!(echoed, b"rpk reading\n", "mutual={mutual}");
    }
}

#[test]
fn gnutls_cli_rpk_against_our_server_server_only_and_mutual() {
    let dir = workdir("rpk-cli");
    let (ckey, cpub, client_pk) = certtool_key(&dir, "client");
    let client_id = [Identity::of_key(&RustCrypto, &client_pk, b"").unwrap()];
    let (server_key, _, _) = sigil_key(&dir, 2);
    for mutual in [false, true] {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = sock.local_addr().unwrap().port();
        let mut args = vec![
            "--priority",
            RPK_PRIORITY,
            "--no-ca-verification",
            "--insecure",
        ];
        if mutual {
            args.extend([
                "--rawpkkeyfile",
                ckey.to_str().unwrap(),
                "--rawpkfile",
                cpub.to_str().unwrap(),
            ]);
        }
        let mut cli = gnutls_cli(port, &args);
        let mut stdin = cli.stdin.take().unwrap();
        let offer = ServerCredentials {
            psk: false,
            key: Some(&server_key),
            require_client_key: mutual,
            ..ServerCredentials::NONE
        };
        let (conn, got) = serve_one(
            &sock,
            |cookie, d, now| {
                Connection::accept(
                    RustCrypto,
                    PinnedIdentities {
                        crypto: RustCrypto,
                        identities: &client_id,
                    },
                    Config::default(),
                    &offer,
                    &mut clock_seeded(),
                    cookie,
                    d,
                    at(now),
                )
                .unwrap()
            },
            10,
            || stdin.write_all(b"from cli!\n").unwrap(),
        );
        kill(cli);
        let c = conn.expect("a ClientHello with a valid cookie arrived");
        assert!(c.is_established(), "mutual={mutual}: state {:?}", c.state());
        assert_eq!(got, b"from cli!\n", "mutual={mutual}");
        assert_eq!(c.peer_public_key(), mutual.then_some(&client_pk));
    }
}

#[test]
fn our_x509_client_against_gnutls_serv_server_only_and_mutual() {
    let root = der("root.der");
    let (client_der, inter_der, ck) =
        (der("client.der"), der("intermediate.der"), secret("client"));
    let chain: [&[u8]; 2] = [&client_der, &inter_der];
    // Server-only, mutual, and mutual at a 256-byte MTU on both sides (certificates fragmented).
    for (mutual, mtu) in [(false, None), (true, None), (true, Some(256usize))] {
        let port = free_port();
        let mtu_arg = mtu.map(|m| format!("--mtu={m}"));
        let (certs, key, ca) = (
            pki("server-chain.pem"),
            pki("server.key.pem"),
            pki("root.pem"),
        );
        let mut args = vec![
            "--priority",
            X509_PRIORITY,
            "--x509certfile",
            &certs,
            "--x509keyfile",
            &key,
            "--x509cafile",
            &ca,
        ];
        if mutual {
            args.extend(["--require-client-cert", "--verify-client-cert"]);
        }
        if let Some(m) = &mtu_arg {
            args.push(m);
        }
        let server = gnutls_serv(port, &args);
        let c = Connection::connect(
            RustCrypto,
            anchors(&root),
            Config {
                pmtu: mtu.unwrap_or(1152),
                ..Config::default()
            },
            &mut clock_seeded(),
            Credentials::Certificate(mutual.then_some((&chain[..], &ck))),
            at(0),
        )
        .unwrap();
        let (c, echoed) = run_client(c, port, b"x509 reading\n");
        kill(server);
        assert!(c.is_established(), "mutual={mutual}: state {:?}", c.state());
        assert_eq!(echoed, b"x509 reading\n", "mutual={mutual}");
    }
}

#[test]
fn gnutls_cli_x509_against_our_server_server_only_and_mutual() {
    let root = der("root.der");
    let (server_der, inter_der, sk) =
        (der("server.der"), der("intermediate.der"), secret("server"));
    let chain: [&[u8]; 2] = [&server_der, &inter_der];
    for (mutual, mtu) in [(false, None), (true, None), (true, Some(256usize))] {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = sock.local_addr().unwrap().port();
        let (ca, certs, key) = (
            pki("root.pem"),
            pki("client-chain.pem"),
            pki("client.key.pem"),
        );
        let mtu_arg = mtu.map(|m| format!("--mtu={m}"));
        let mut args = vec![
            "--priority",
            X509_PRIORITY,
            "--x509cafile",
            &ca,
            "--verify-hostname",
            "sigil-server",
        ];
        if mutual {
            args.extend(["--x509certfile", &certs, "--x509keyfile", &key]);
        }
        if let Some(m) = &mtu_arg {
            args.push(m);
        }
        let mut cli = gnutls_cli(port, &args);
        let mut stdin = cli.stdin.take().unwrap();
        let offer = ServerCredentials {
            key: Some(&sk),
            chain: Some(&chain),
            require_client_key: mutual,
            ..ServerCredentials::NONE
        };
        let (conn, got) = serve_one(
            &sock,
            |cookie, d, now| {
                let config = Config {
                    pmtu: mtu.unwrap_or(1152),
                    ..Config::default()
                };
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
            10,
            || stdin.write_all(b"from cli!\n").unwrap(),
        );
        kill(cli);
        let c = conn.expect("a ClientHello with a valid cookie arrived");
        assert!(c.is_established(), "mutual={mutual}: state {:?}", c.state());
        assert_eq!(got, b"from cli!\n", "mutual={mutual}");
        assert_eq!(c.peer_public_key().is_some(), mutual);
    }
}
