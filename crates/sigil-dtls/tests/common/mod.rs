//! Drivers for the interop tests: a sans-IO connection on a real UDP socket, with the
//! caller's real clock, until a condition holds or ten seconds pass.
#![allow(dead_code)]

use sigil_crypto::RustCrypto;
use sigil_dtls::{Connection, CookieKey, CookieVerified, Stateless, Trust};
use sigil_testkit::Seeded;
use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::process::Child;
use std::time::{Duration, Instant};

/// Test randomness seeded from the clock, so runs differ; the seed is printed, so a failing
/// run can be replayed with `Seeded::new(seed)`. Never for production.
pub fn clock_seeded() -> Seeded {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let seed = t.as_nanos() as u64 | 1;
    eprintln!("randomness: Seeded::new({seed})");
    Seeded::new(seed)
}

pub fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills a peer process and returns what it printed.
pub fn kill(mut c: Child) -> String {
    let _ = c.kill();
    let mut out = String::new();
    if let Some(mut s) = c.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    let _ = c.wait();
    out
}

fn ms(start: Instant) -> sigil_time::Instant {
    sigil_time::Instant::from_millis(start.elapsed().as_millis() as u64)
}

/// Runs a client connection against `port` until it is established, then sends `data` as one
/// record and keeps serving for a moment; returns the connection and what the server sent.
pub fn run_client<T: Trust>(
    c: Connection<RustCrypto, T>,
    port: u16,
    data: &[u8],
) -> (Connection<RustCrypto, T>, Vec<u8>) {
    let (c, received, _) = run_client_with(c, port, data, false);
    (c, received)
}

/// [`run_client`], then (with `close`) a close_notify from the same socket. Returns the
/// session the connection had before closing.
pub fn run_client_with<T: Trust>(
    mut c: Connection<RustCrypto, T>,
    port: u16,
    data: &[u8],
    close: bool,
) -> (
    Connection<RustCrypto, T>,
    Vec<u8>,
    Option<sigil_dtls::Session>,
) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    let mut sent_at = None;
    let mut received = vec![];
    while start.elapsed() < Duration::from_secs(10) {
        while let Some(n) = c.poll_transmit(ms(start), &mut buf) {
            sock.send(&buf[..n]).unwrap();
        }
        if c.is_established() && sent_at.is_none() {
            c.send(data).unwrap();
            sent_at = Some(ms(start));
            continue;
        }
        if sent_at.is_some_and(|t| ms(start) > t + std::time::Duration::from_millis(500)) {
            break;
        }
        if let Ok(n) = sock.recv(&mut buf) {
            let d = buf[..n].to_vec();
            let _ = c.handle_datagram(at(ms(start)), &d);
            while let Some(m) = c.poll_app_data(&mut buf) {
                received.extend_from_slice(&buf[..m]);
            }
        }
        let _ = c.handle_timeout(at(ms(start)));
        if matches!(c.state(), sigil_dtls::State::Failed(_)) {
            break;
        }
    }
    let session = c.session();
    if close && c.close().is_ok() {
        while let Some(n) = c.poll_transmit(ms(start), &mut buf) {
            let _ = sock.send(&buf[..n]);
        }
    }
    (c, received, session)
}

/// Serves one peer on `sock`: stateless cookie exchange, then the connection `accept` makes,
/// until `want` bytes of application data arrived (or ten seconds passed). `on_established`
/// runs once, when the handshake completes (e.g. to make the peer send).
pub fn serve_one<T: Trust>(
    sock: &UdpSocket,
    mut accept: impl FnMut(CookieVerified, &[u8], sigil_time::Instant) -> Connection<RustCrypto, T>,
    want: usize,
    mut on_established: impl FnMut(),
) -> (Option<Connection<RustCrypto, T>>, Vec<u8>) {
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let cookies = CookieKey::new([42; 32]);
    let start = Instant::now();
    let mut conn: Option<Connection<RustCrypto, T>> = None;
    let mut peer: Option<SocketAddr> = None;
    let (mut buf, mut out) = ([0u8; 4096], [0u8; 4096]);
    let mut received = vec![];
    let mut told = false;
    while start.elapsed() < Duration::from_secs(10) && received.len() < want {
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            let d = buf[..n].to_vec();
            match conn.as_mut() {
                None => {
                    match cookies.respond(&RustCrypto, from.to_string().as_bytes(), &d, &mut out) {
                        Stateless::HelloVerify(m) => {
                            sock.send_to(&out[..m], from).unwrap();
                        }
                        Stateless::Accept(cookie) => {
                            conn = Some(accept(cookie, &d, ms(start)));
                            peer = Some(from);
                        }
                        Stateless::Drop(e) => panic!("dropped the peer's hello: {e}"),
                    }
                }
                Some(c) => {
                    let _ = c.handle_datagram(at(ms(start)), &d);
                }
            }
        }
        if let (Some(c), Some(p)) = (conn.as_mut(), peer) {
            let _ = c.handle_timeout(at(ms(start)));
            while let Some(m) = c.poll_transmit(ms(start), &mut out) {
                sock.send_to(&out[..m], p).unwrap();
            }
            if c.is_established() && !told {
                on_established();
                told = true;
            }
            while let Some(m) = c.poll_app_data(&mut out) {
                received.extend_from_slice(&out[..m]);
            }
        }
    }
    (conn, received)
}

/// A file of the test PKI (vectors/gen_x509.py), for the other implementation to read.
pub fn pki(name: &str) -> String {
    sigil_testkit::pki::dir()
        .join(name)
        .to_string_lossy()
        .into_owned()
}

pub fn der(name: &str) -> Vec<u8> {
    std::fs::read(pki(name)).unwrap()
}

/// A test PKI private key (raw P-256 scalar in hex).
pub fn secret(name: &str) -> sigil_crypto::SecretKey {
    sigil_testkit::pki::secret(&std::fs::read(pki(&format!("{name}.key"))).unwrap())
}

/// Trusts chains to `root` at the current time (the tests' own clock, passed in).
pub fn anchors(root: &[u8]) -> sigil_dtls::X509Anchors<'static, RustCrypto> {
    let cert: &'static [u8] = Box::leak(root.to_vec().into_boxed_slice());
    let list: &'static [&'static [u8]] = Box::leak(Box::new([cert]));
    sigil_dtls::X509Anchors {
        crypto: RustCrypto,
        anchors: list,
        now: sigil_time::UnixTime::from_secs(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64,
        ),
        rpk: sigil_dtls::NoTrust,
    }
}

/// A point on the tests' virtual clock.
pub fn at<T: IntoInstant>(t: T) -> sigil_time::Instant {
    t.into_instant()
}

/// Milliseconds (an integer) or an instant already.
pub trait IntoInstant {
    fn into_instant(self) -> sigil_time::Instant;
}
impl IntoInstant for u64 {
    fn into_instant(self) -> sigil_time::Instant {
        sigil_time::Instant::from_millis(self)
    }
}
impl IntoInstant for i32 {
    fn into_instant(self) -> sigil_time::Instant {
        sigil_time::Instant::from_millis(u64::try_from(self).unwrap())
    }
}
impl IntoInstant for sigil_time::Instant {
    fn into_instant(self) -> sigil_time::Instant {
        self
    }
}

/// Starts a peer implementation (`openssl`, `gnutls-serv`, `gnutls-cli`) with `args`, and
/// `when_mutual` after them if `mutual`; stdin and stdout piped, stderr discarded.
pub fn spawn_peer(program: &str, args: &[&str], mutual: bool, when_mutual: &[&str]) -> Child {
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    if mutual {
        cmd.args(when_mutual);
    }
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} is installed by scripts/install-test-deps: {e}"))
}
