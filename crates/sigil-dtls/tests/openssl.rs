//! Interop with OpenSSL 3 (`openssl s_server` / `s_client`), an implementation nobody here
//! wrote: TLS_PSK_WITH_AES_128_CCM_8 over real UDP on loopback, both directions.

use sigil_crypto::{CryptoError, Rng, RustCrypto};
use sigil_dtls::psk::{Config, Connection, CookieKey, PskStore, Stateless};
use std::io::{Read, Write};
use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PSK_HEX: &str = "30313233343536373839616263646566";
const PSK: &[u8] = b"0123456789abcdef";

struct OsRng;
impl Rng for OsRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        // Tests only: a time-seeded xorshift is enough to make randoms differ between runs.
        let mut x = Instant::now().elapsed().as_nanos() as u64
            ^ 0x9e37_79b9_7f4a_7c15
            ^ (buf.as_ptr() as u64);
        for b in buf {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        Ok(())
    }
}

struct Keys;
impl PskStore for Keys {
    fn lookup(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"Client_identity").then(|| {
            key[..PSK.len()].copy_from_slice(PSK);
            PSK.len()
        })
    }
}

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn kill(mut c: Child) -> String {
    let _ = c.kill();
    let mut out = String::new();
    if let Some(mut s) = c.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    let _ = c.wait();
    out
}

fn ms(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

#[test]
fn our_client_against_openssl_s_server() {
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
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let start = Instant::now();
    let mut c = Connection::connect(
        RustCrypto,
        Config::default(),
        &mut OsRng,
        b"Client_identity",
        PSK,
        0,
    )
    .unwrap();
    let mut buf = [0u8; 2048];
    let mut sent_data = false;
    while ms(start) < 10_000 {
        while let Some(n) = c.poll_transmit(&mut buf) {
            sock.send(&buf[..n]).unwrap();
        }
        if c.is_established() && !sent_data {
            c.send(b"hello from sigil\n").unwrap();
            sent_data = true;
            continue;
        }
        if sent_data {
            break;
        }
        if let Ok(n) = sock.recv(&mut buf) {
            let d = buf[..n].to_vec();
            c.handle_datagram(ms(start), &d).unwrap();
        }
        c.handle_timeout(ms(start)).unwrap();
    }
    assert!(c.is_established(), "state {:?}", c.state());
    std::thread::sleep(Duration::from_millis(300));
    let out = kill(server);
    assert!(
        out.contains("hello from sigil"),
        "s_server printed: {out:?}"
    );
}

#[test]
fn openssl_s_client_against_our_server() {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
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
    let cookies = CookieKey::new([42; 32]);
    let start = Instant::now();
    let mut conn: Option<Connection<RustCrypto, Keys>> = None;
    let mut buf = [0u8; 2048];
    let mut out = [0u8; 2048];
    let mut received = Vec::new();
    let mut wrote = false;
    while ms(start) < 10_000 && received.is_empty() {
        if let Ok((n, peer)) = sock.recv_from(&mut buf) {
            let d = buf[..n].to_vec();
            match conn.as_mut() {
                None => {
                    match cookies.respond(&RustCrypto, peer.to_string().as_bytes(), &d, &mut out) {
                        Stateless::HelloVerify(m) => {
                            sock.send_to(&out[..m], peer).unwrap();
                        }
                        Stateless::Accept => {
                            conn = Some(
                                Connection::accept(
                                    RustCrypto,
                                    Config::default(),
                                    &mut OsRng,
                                    Keys,
                                    &d,
                                    ms(start),
                                )
                                .unwrap(),
                            );
                        }
                        Stateless::Drop(e) => panic!("dropped the client's hello: {e}"),
                    }
                }
                Some(c) => {
                    let _ = c.handle_datagram(ms(start), &d);
                }
            }
            if let Some(c) = conn.as_mut() {
                while let Some(m) = c.poll_transmit(&mut out) {
                    sock.send_to(&out[..m], peer).unwrap();
                }
                if c.is_established() && !wrote {
                    client
                        .stdin
                        .as_mut()
                        .unwrap()
                        .write_all(b"hello from openssl\n")
                        .unwrap();
                    wrote = true;
                }
                if let Some(m) = c.poll_app_data(&mut out) {
                    received.extend_from_slice(&out[..m]);
                }
            }
        }
    }
    kill(client);
    let c = conn.expect("a ClientHello with a valid cookie arrived");
    assert!(c.is_established(), "state {:?}", c.state());
    assert_eq!(c.psk_identity(), b"Client_identity");
    assert_eq!(received, b"hello from openssl\n");
}
