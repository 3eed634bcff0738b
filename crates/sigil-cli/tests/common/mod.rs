//! What the end-to-end suites share: the `sigil` binary, free ports, a server process and
//! waiting for it.
#![allow(dead_code)]

use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const SIGIL: &str = env!("CARGO_BIN_EXE_sigil");

pub fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn sigil(args: &[&str]) -> Output {
    Command::new(SIGIL).args(args).output().unwrap()
}

/// `sigil server` on coap:// `port` and coaps:// `dtls_port` (0: any free port) with `extra`
/// arguments and database `db`, its output discarded: set stdout or stderr again to keep it.
pub fn server_command(db: &Path, port: u16, dtls_port: u16, extra: &[&str]) -> Command {
    let mut c = Command::new(SIGIL);
    c.args([
        "server",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--dtls-listen",
        &format!("127.0.0.1:{dtls_port}"),
    ])
    .args(extra)
    .arg("--db")
    .arg(db)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    c
}

/// `sigil server` on coap:// `port` only (`--no-dtls`), as [`server_command`].
pub fn plain_server_command(db: &Path, port: u16, extra: &[&str]) -> Command {
    let mut c = Command::new(SIGIL);
    c.args([
        "server",
        "--no-dtls",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ])
    .args(extra)
    .arg("--db")
    .arg(db)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    c
}

/// A server with coaps:// on `dtls_port` (0: any free port) and `extra` arguments.
pub fn secure_server_with(db: &Path, port: u16, dtls_port: u16, extra: &[&str]) -> Child {
    server_command(db, port, dtls_port, extra).spawn().unwrap()
}

/// A sensor's first boot (Ed25519) in `state`, put on the list in `db`: its identity.
pub fn provisioned_sensor(db: &Path, state: &Path) -> String {
    let id = first_line(sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--print-identity",
    ]));
    let out = sigil(&["provision", "--db", db.to_str().unwrap(), "add", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    id
}

/// Waits until the server answers a CoAP ping (an Empty CON, answered with Reset).
pub fn wait_ready(port: u16) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        s.send_to(&[0x40, 0x00, 0x12, 0x34], ("127.0.0.1", port))
            .unwrap();
        let mut b = [0u8; 16];
        if let Ok((4, _)) = s.recv_from(&mut b) {
            return;
        }
    }
    panic!("server on port {port} did not come up");
}

/// The first line of a successful command's output.
pub fn first_line(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .to_string()
}

/// A child process killed when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The server's long-term key in `db` (made at its first start, kept in `server_key` as
/// "dtls"): it signs pairing messages, tokens and signed answers.
pub fn server_key(db: &Path) -> (sigil_crypto::SecretKey, sigil_crypto::PublicKey) {
    use sigil_crypto::CryptoProvider;
    let store = sigil_server::Store::open(db).unwrap();
    let (alg, secret) = store.server_key("dtls").unwrap().unwrap();
    let alg = sigil_crypto::SignatureAlgorithm::from_cose(alg).unwrap();
    let sk = sigil_crypto::SecretKey::from_bytes(alg, &secret).unwrap();
    let pk = sigil_crypto::RustCrypto.public_key(&sk).unwrap();
    (sk, pk)
}

/// The identity `h(P)` of the server's key in `db`, as text.
pub fn server_identity(db: &Path) -> String {
    let (_, pk) = server_key(db);
    sigil_identity::Identity::of_key(&sigil_crypto::RustCrypto, &pk, b"")
        .unwrap()
        .to_string()
}

/// A P-256 sensor's first boot in `state` (`--print-identity`), put on the list in `db`: its
/// identity and its public key (`p256:hex`).
pub fn provisioned_p256_sensor(db: &Path, state: &Path) -> (String, String) {
    let out = sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--alg",
        "p256",
        "--print-identity",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (identity, key) = (lines[0].to_string(), lines[3].to_string());
    assert!(
        sigil(&["provision", "--db", db.to_str().unwrap(), "add", &identity])
            .status
            .success()
    );
    (identity, key)
}

/// `sigil provision pair` for the sensor `identity` with `key` (group 0a…, subscriber 0b…),
/// written to `out`.
pub fn pair(db: &Path, identity: &str, key: &str, out: &Path) {
    let result = sigil(&[
        "provision",
        "--db",
        db.to_str().unwrap(),
        "pair",
        identity,
        "--device-key",
        key,
        "--group",
        &"0a".repeat(16),
        "--subscriber",
        &"0b".repeat(16),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
}
