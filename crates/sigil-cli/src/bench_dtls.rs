//! `sigil bench dtls`: what a DTLS handshake costs on the wire, per cipher suite and
//! authentication mode, beside OpenSSL 3 measured in the same run through a counting relay;
//! the record overhead; and server handshakes per core-second.

use anyhow::{Context, Result};
use serde::Serialize;
use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::connection::{
    Config, Connection, CookieKey, Credentials, PinnedIdentities, ServerCredentials, Stateless,
    Trust,
};
use sigil_identity::Identity;
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Serialize, Clone, Debug)]
pub struct HandshakeRow {
    pub implementation: String,
    pub mode: String,
    pub bytes: usize,
    pub datagrams: usize,
}

#[derive(Serialize, Debug)]
pub struct DtlsBench {
    pub handshakes: Vec<HandshakeRow>,
    /// Bytes a protected record adds to its payload, per suite.
    pub record_overhead: Vec<(String, usize)>,
    /// Median server CPU per handshake (µs) and handshakes per core-second, per mode.
    pub server: Vec<(String, f64, f64)>,
}

struct Psk;
impl Trust for Psk {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"sensor").then(|| {
            key[..16].copy_from_slice(b"0123456789abcdef");
            16
        })
    }
}

struct AnyKey;
impl Trust for AnyKey {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        Psk.psk(identity, key)
    }
    fn trusted_key(&self, _: &sigil_crypto::PublicKey) -> bool {
        true
    }
}

fn drain<T: Trust>(c: &mut Connection<RustCrypto, T>, out: &mut Vec<Vec<u8>>) {
    let mut buf = [0u8; 2048];
    while let Some(n) = c.poll_transmit(&mut buf) {
        out.push(buf[..n].to_vec());
    }
}

/// One in-memory handshake; returns (bytes, datagrams, server CPU time).
fn handshake(
    credentials: Credentials<'_>,
    offer: &ServerCredentials<'_>,
    trust_server: &[Identity],
) -> Result<(usize, usize, Duration)> {
    let mut rng = crate::util::OsRng;
    let cookies = CookieKey::new([3; 32]);
    let mut client = Connection::connect(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: trust_server,
        },
        Config::default(),
        &mut rng,
        credentials,
        0,
    )?;
    let (mut bytes, mut datagrams, mut server_time) = (0, 0, Duration::ZERO);
    let mut to_server = vec![];
    drain(&mut client, &mut to_server);
    let mut server: Option<Connection<RustCrypto, AnyKey>> = None;
    let mut out = [0u8; 512];
    for _ in 0..20 {
        let mut to_client = vec![];
        for d in to_server.drain(..) {
            bytes += d.len();
            datagrams += 1;
            let t = Instant::now();
            match server.as_mut() {
                None => match cookies.respond(&RustCrypto, b"peer", &d, &mut out) {
                    Stateless::HelloVerify(n) => to_client.push(out[..n].to_vec()),
                    Stateless::Accept => {
                        let mut s = Connection::accept(
                            RustCrypto,
                            AnyKey,
                            Config::default(),
                            offer,
                            &mut rng,
                            &d,
                            1,
                        )?;
                        drain(&mut s, &mut to_client);
                        server = Some(s);
                    }
                    Stateless::Drop(e) => anyhow::bail!("server dropped the hello: {e}"),
                },
                Some(s) => {
                    s.handle_datagram(2, &d)?;
                    drain(s, &mut to_client);
                }
            }
            server_time += t.elapsed();
        }
        for d in to_client {
            bytes += d.len();
            datagrams += 1;
            client.handle_datagram(3, &d)?;
        }
        drain(&mut client, &mut to_server);
        if to_server.is_empty() && client.is_established() {
            break;
        }
    }
    anyhow::ensure!(
        client.is_established() && server.as_ref().is_some_and(|s| s.is_established()),
        "handshake did not complete"
    );
    Ok((bytes, datagrams, server_time))
}

struct Modes {
    server_key: SecretKey,
    client_p256: SecretKey,
    client_ed25519: SecretKey,
    server_id: Vec<Identity>,
}

impl Modes {
    fn new() -> Result<Self> {
        let mut rng = crate::util::OsRng;
        let server_key = RustCrypto.generate(SignatureAlgorithm::EcdsaP256, &mut rng)?;
        let server_id = vec![Identity::of_key(
            &RustCrypto,
            &RustCrypto.public_key(&server_key)?,
            b"",
        )?];
        Ok(Self {
            server_key,
            client_p256: RustCrypto.generate(SignatureAlgorithm::EcdsaP256, &mut rng)?,
            client_ed25519: RustCrypto.generate(SignatureAlgorithm::Ed25519, &mut rng)?,
            server_id,
        })
    }

    fn run(&self, mode: &str) -> Result<(usize, usize, Duration)> {
        let psk = ServerCredentials {
            psk: true,
            key: None,
            require_client_key: false,
            ..ServerCredentials::NONE
        };
        let rpk = ServerCredentials {
            psk: false,
            key: Some(&self.server_key),
            require_client_key: false,
            ..ServerCredentials::NONE
        };
        let mutual = ServerCredentials {
            require_client_key: true,
            ..rpk
        };
        match mode {
            "PSK-CCM8" => handshake(
                Credentials::Psk {
                    identity: b"sensor",
                    key: b"0123456789abcdef",
                },
                &psk,
                &[],
            ),
            "ECDHE-ECDSA-CCM8, raw public key, server-only" => {
                handshake(Credentials::RawPublicKey(None), &rpk, &self.server_id)
            }
            "ECDHE-ECDSA-CCM8, raw public keys, mutual (P-256)" => handshake(
                Credentials::RawPublicKey(Some(&self.client_p256)),
                &mutual,
                &self.server_id,
            ),
            "ECDHE-ECDSA-CCM8, raw public keys, mutual (Ed25519 client)" => handshake(
                Credentials::RawPublicKey(Some(&self.client_ed25519)),
                &mutual,
                &self.server_id,
            ),
            _ => unreachable!("mode names are the list below"),
        }
    }
}

const MODES: [&str; 4] = [
    "PSK-CCM8",
    "ECDHE-ECDSA-CCM8, raw public key, server-only",
    "ECDHE-ECDSA-CCM8, raw public keys, mutual (P-256)",
    "ECDHE-ECDSA-CCM8, raw public keys, mutual (Ed25519 client)",
];

/// Relays UDP between a client and a server port, counting every datagram, for `window`.
fn relay(
    server_port: u16,
    window: Duration,
) -> Result<(u16, std::thread::JoinHandle<(usize, usize)>)> {
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    let port = sock.local_addr()?.port();
    sock.set_read_timeout(Some(Duration::from_millis(20)))?;
    let handle = std::thread::spawn(move || {
        let upstream = UdpSocket::bind("127.0.0.1:0").expect("bind");
        upstream
            .set_read_timeout(Some(Duration::from_millis(5)))
            .expect("timeout");
        upstream
            .connect(("127.0.0.1", server_port))
            .expect("connect");
        let (mut bytes, mut datagrams) = (0, 0);
        let mut client = None;
        let mut buf = [0u8; 65536];
        let start = Instant::now();
        while start.elapsed() < window {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                client = Some(from);
                bytes += n;
                datagrams += 1;
                let _ = upstream.send(&buf[..n]);
            }
            while let Ok(n) = upstream.recv(&mut buf) {
                bytes += n;
                datagrams += 1;
                if let Some(c) = client {
                    let _ = sock.send_to(&buf[..n], c);
                }
            }
        }
        (bytes, datagrams)
    });
    Ok((port, handle))
}

fn openssl_handshake(dir: &std::path::Path, mode: &str) -> Result<(usize, usize)> {
    let port = UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port();
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let (mut server_args, mut client_args): (Vec<String>, Vec<String>) = match mode {
        "PSK-CCM8" => (
            vec![
                "-nocert".into(),
                "-psk".into(),
                hex::encode(b"0123456789abcdef"),
                "-cipher".into(),
                "PSK-AES128-CCM8".into(),
            ],
            vec![
                "-psk".into(),
                hex::encode(b"0123456789abcdef"),
                "-psk_identity".into(),
                "sensor".into(),
                "-cipher".into(),
                "PSK-AES128-CCM8".into(),
            ],
        ),
        _ => (
            vec![
                "-cert".into(),
                p("server.pem"),
                "-key".into(),
                p("server.key"),
                "-cipher".into(),
                "ECDHE-ECDSA-AES128-CCM8".into(),
            ],
            vec![
                "-CAfile".into(),
                p("server.pem"),
                "-cipher".into(),
                "ECDHE-ECDSA-AES128-CCM8".into(),
            ],
        ),
    };
    if mode.contains("mutual") {
        server_args.extend([
            "-Verify".into(),
            "1".into(),
            "-CAfile".into(),
            p("client.pem"),
        ]);
        client_args.extend([
            "-cert".into(),
            p("client.pem"),
            "-key".into(),
            p("client.key"),
        ]);
    }
    let mut server = Command::new("openssl")
        .args([
            "s_server",
            "-dtls1_2",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-quiet",
        ])
        .args(&server_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("openssl s_server")?;
    std::thread::sleep(Duration::from_millis(300));
    let (relay_port, counter) = relay(port, Duration::from_millis(1500))?;
    let mut client = Command::new("openssl")
        .args([
            "s_client",
            "-dtls1_2",
            "-connect",
            &format!("127.0.0.1:{relay_port}"),
            "-quiet",
        ])
        .args(&client_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("openssl s_client")?;
    let counted = counter
        .join()
        .map_err(|_| anyhow::anyhow!("relay thread"))?;
    let _ = client.kill();
    let _ = server.kill();
    let _ = client.wait();
    let _ = server.wait();
    Ok(counted)
}

/// X.509 P-256 certificates for the OpenSSL comparison (self-signed; each is its own anchor).
fn certificates(dir: &std::path::Path) -> Result<()> {
    for name in ["server", "client"] {
        let status = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
            ])
            .args(["-subj", &format!("/CN=sigil-{name}")])
            .arg("-keyout")
            .arg(dir.join(format!("{name}.key")))
            .arg("-out")
            .arg(dir.join(format!("{name}.pem")))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "openssl req failed");
    }
    Ok(())
}

pub fn run(runs: usize) -> Result<DtlsBench> {
    let modes = Modes::new()?;
    let mut rows = vec![];
    let mut server = vec![];
    for mode in MODES {
        let (bytes, datagrams, _) = modes.run(mode)?;
        rows.push(HandshakeRow {
            implementation: "sigil".into(),
            mode: mode.into(),
            bytes,
            datagrams,
        });
        let n = if mode.starts_with("PSK") { 200 } else { 40 };
        let mut per = vec![];
        for _ in 0..runs.max(1) {
            let mut total = Duration::ZERO;
            for _ in 0..n {
                total += modes.run(mode)?.2;
            }
            per.push(total.as_secs_f64() * 1e6 / n as f64);
        }
        per.sort_by(f64::total_cmp);
        let median = per[per.len() / 2];
        server.push((mode.to_string(), median, 1e6 / median));
    }
    let dir = tempfile::tempdir()?;
    certificates(dir.path())?;
    for mode in [
        "PSK-CCM8",
        "ECDHE-ECDSA-CCM8, X.509, server-only",
        "ECDHE-ECDSA-CCM8, X.509, mutual",
    ] {
        let (bytes, datagrams) = openssl_handshake(dir.path(), mode)?;
        rows.push(HandshakeRow {
            implementation: "OpenSSL 3".into(),
            mode: mode.into(),
            bytes,
            datagrams,
        });
    }
    Ok(DtlsBench {
        handshakes: rows,
        record_overhead: vec![("AES-128-CCM-8".into(), sigil_dtls::protection::OVERHEAD)],
        server,
    })
}

pub fn print(b: &DtlsBench) {
    println!(
        "{:<12} {:<58} {:>7} {:>10}",
        "", "handshake (cookie exchange included)", "bytes", "datagrams"
    );
    for r in &b.handshakes {
        println!(
            "{:<12} {:<58} {:>7} {:>10}",
            r.implementation, r.mode, r.bytes, r.datagrams
        );
    }
    for (suite, n) in &b.record_overhead {
        println!("record overhead, {suite}: {n} bytes (13 header + 8 explicit nonce + 8 tag)");
    }
    for (mode, us, per_core) in &b.server {
        println!("server CPU per handshake, {mode}: {us:.0} µs median ({per_core:.0} handshakes per core-second)");
    }
}
