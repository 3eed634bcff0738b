//! Interop with OpenSSL 3 (`openssl s_server` / `s_client`), an implementation nobody here
//! wrote: TLS_PSK_WITH_AES_128_CCM_8 over real UDP on loopback, both directions.

mod common;

use common::{free_port, kill, run_client, serve_one, TestRng};
use sigil_crypto::RustCrypto;
use sigil_dtls::connection::{Config, Connection, Credentials, NoTrust, ServerCredentials, Trust};
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

#[test]
fn our_psk_client_against_openssl_s_server() {
    let port = free_port();
    let server = Command::new("openssl")
        .args([
            "s_server",
            "-dtls1_2",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-nocert",
        ])
        .args([
            "-psk",
            PSK_HEX,
            "-cipher",
            "PSK-AES128-CCM8",
            "-naccept",
            "1",
            "-quiet",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl is installed by scripts/install-test-deps");
    std::thread::sleep(Duration::from_millis(400));
    let c = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut TestRng::new(),
        Credentials::Psk {
            identity: b"Client_identity",
            key: PSK,
        },
        0,
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
        |d, now| {
            Connection::accept(
                RustCrypto,
                Keys,
                Config::default(),
                &offer,
                &mut TestRng::new(),
                d,
                now,
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
