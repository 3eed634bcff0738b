//! `sigil-bench dtls`: what a DTLS handshake costs on the wire, per cipher suite and
//! authentication mode, beside OpenSSL 3 measured in the same run through a counting relay;
//! the record overhead; and server handshakes per core-second.

use anyhow::{Context, Result};
use serde::Serialize;
use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::protection::Aead;
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, ServerCredentials, Session, Stateless, Trust,
};
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
    /// Bytes of one connection's state as this build has it (the x509 feature on): during
    /// the handshake, and once established (what the server keeps per session).
    pub connection_state_bytes: usize,
    pub established_state_bytes: usize,
}

/// What both ends of the in-memory runs accept: the bench PSK, any raw public key, and
/// chains to the bench's self-signed certificates.
struct BenchTrust {
    anchors: Vec<Vec<u8>>,
}

impl Trust for BenchTrust {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"sensor").then(|| {
            key[..16].copy_from_slice(b"0123456789abcdef");
            16
        })
    }
    fn trusted_key(&self, _: &sigil_crypto::PublicKey) -> bool {
        true
    }
    fn certificate_chain(
        &self,
        chain: &[&[u8]],
        _: sigil_time::UnixTime,
    ) -> Result<sigil_crypto::PublicKey, sigil_dtls::Error> {
        let anchors: Vec<&[u8]> = self.anchors.iter().map(Vec::as_slice).collect();
        sigil_dtls::x509::verify_chain(&RustCrypto, chain, &anchors, sigil_client::os::unix_now())
    }
}

/// The benchmark's virtual clock (milliseconds) as the DTLS cores take it.
fn ms(t: u64) -> sigil_time::Instant {
    sigil_time::Instant::from_millis(t)
}

fn drain<T: Trust>(c: &mut Connection<RustCrypto, T>, out: &mut Vec<Vec<u8>>) {
    let mut buf = [0u8; 2048];
    while let Some(n) = c.poll_transmit(sigil_time::Instant::ZERO, &mut buf) {
        out.push(buf[..n].to_vec());
    }
}

/// The result of one in-memory handshake.
struct Run {
    bytes: usize,
    datagrams: usize,
    server_time: Duration,
    client_session: Option<Session>,
    server_session: Option<Session>,
}

/// One in-memory handshake (cookie exchange included), resuming `resume` if given.
fn handshake(
    credentials: Credentials<'_>,
    offer: &ServerCredentials<'_>,
    config: Config,
    trust: (&BenchTrust, &BenchTrust),
    resume: Option<&Session>,
) -> Result<Run> {
    let mut rng = sigil_client::os::OsRng;
    let cookies = CookieKey::new([3; 32]);
    let mut client = match resume {
        Some(s) => {
            Connection::resume(RustCrypto, trust.0, config, &mut rng, credentials, s, ms(0))?
        }
        None => Connection::connect(RustCrypto, trust.0, config, &mut rng, credentials, ms(0))?,
    };
    let (mut bytes, mut datagrams, mut server_time) = (0, 0, Duration::ZERO);
    let mut to_server = vec![];
    drain(&mut client, &mut to_server);
    let mut server: Option<Connection<RustCrypto, &BenchTrust>> = None;
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
                    Stateless::Accept(cookie) => {
                        let mut s = Connection::accept(
                            RustCrypto,
                            trust.1,
                            config,
                            offer,
                            &mut rng,
                            cookie,
                            &d,
                            ms(1),
                        )?;
                        drain(&mut s, &mut to_client);
                        server = Some(s);
                    }
                    Stateless::Drop(e) => anyhow::bail!("server dropped the hello: {e}"),
                },
                Some(s) => {
                    s.handle_datagram(ms(2), &d)?;
                    drain(s, &mut to_client);
                }
            }
            server_time += t.elapsed();
        }
        for d in to_client {
            bytes += d.len();
            datagrams += 1;
            client.handle_datagram(ms(3), &d)?;
        }
        drain(&mut client, &mut to_server);
        if to_server.is_empty() && client.is_established() {
            break;
        }
    }
    let server = server.context("no server")?;
    anyhow::ensure!(
        client.is_established() && server.is_established(),
        "handshake did not complete: {:?} / {:?}",
        client.failure(),
        server.failure()
    );
    anyhow::ensure!(
        resume.is_none() || client.resumed(),
        "the session was not resumed"
    );
    Ok(Run {
        bytes,
        datagrams,
        server_time,
        client_session: client.session(),
        server_session: server.session(),
    })
}

struct Modes {
    server_key: SecretKey,
    client_p256: SecretKey,
    client_ed25519: SecretKey,
    /// The OpenSSL-made certificates (DER) and their keys, shared with the OpenSSL runs.
    server_cert: (Vec<u8>, SecretKey),
    client_cert: (Vec<u8>, SecretKey),
    client_trust: BenchTrust,
    server_trust: BenchTrust,
    /// Sessions for the resumption modes (client's and server's views): PSK, raw public keys.
    sessions: Vec<(Session, Session)>,
}

const PSK_CREDS: Credentials<'static> = Credentials::Psk {
    identity: b"sensor",
    key: b"0123456789abcdef",
};

impl Modes {
    fn new(dir: &std::path::Path) -> Result<Self> {
        let mut rng = sigil_client::os::OsRng;
        let cert = |name: &str| -> Result<(Vec<u8>, SecretKey)> {
            let pem = std::fs::read_to_string(dir.join(format!("{name}.pem")))?;
            let der = sigil_client::pem::blocks(&pem, "CERTIFICATE")
                .map_err(|e| anyhow::anyhow!(e))?
                .into_iter()
                .next()
                .context("no certificate")?;
            let key = sigil_client::pem::p256_key(&std::fs::read_to_string(
                dir.join(format!("{name}.key")),
            )?)
            .map_err(|e| anyhow::anyhow!(e))?;
            Ok((der, key))
        };
        let server_cert = cert("server")?;
        let client_cert = cert("client")?;
        let mut m = Self {
            server_key: RustCrypto.generate(SignatureAlgorithm::EcdsaP256, &mut rng)?,
            client_p256: RustCrypto.generate(SignatureAlgorithm::EcdsaP256, &mut rng)?,
            client_ed25519: RustCrypto.generate(SignatureAlgorithm::Ed25519, &mut rng)?,
            client_trust: BenchTrust {
                anchors: vec![server_cert.0.clone()],
            },
            server_trust: BenchTrust {
                anchors: vec![client_cert.0.clone()],
            },
            server_cert,
            client_cert,
            sessions: vec![],
        };
        for mode in [MODES[1], MODES[7]] {
            let r = m.run(mode)?;
            m.sessions.push((
                r.client_session.context("no session")?,
                r.server_session.context("no session")?,
            ));
        }
        Ok(m)
    }

    fn run(&self, mode: &str) -> Result<Run> {
        let server_chain = [&self.server_cert.0[..]];
        let client_chain = [&self.client_cert.0[..]];
        let resumable = mode.contains("resum");
        // Which cached session a "resumed" mode uses.
        let session = match mode {
            m if m.starts_with("PSK") && m.contains("resumed") => self.sessions.first(),
            m if m.contains("resumed") => self.sessions.get(1),
            _ => None,
        };
        let psk = ServerCredentials {
            psk: true,
            issue_session_ids: resumable,
            connection_id: &[1, 2, 3, 4, 5, 6, 7, 8],
            resume: session.map(|(_, s)| s),
            ..ServerCredentials::NONE
        };
        let rpk = ServerCredentials {
            key: Some(&self.server_key),
            issue_session_ids: resumable,
            resume: session.map(|(_, s)| s),
            ..ServerCredentials::NONE
        };
        let mutual = ServerCredentials {
            require_client_key: true,
            ..rpk
        };
        let x509 = ServerCredentials {
            key: Some(&self.server_cert.1),
            chain: Some(&server_chain),
            require_client_key: mode.contains("mutual"),
            ..ServerCredentials::NONE
        };
        let base = Config::default();
        let trust = (&self.client_trust, &self.server_trust);
        let go = |creds, offer: &ServerCredentials<'_>, config| {
            handshake(creds, offer, config, trust, None)
        };
        match mode {
            "PSK-CCM8" | "PSK-CCM8, resumable (the server issues a session ID)" => {
                go(PSK_CREDS, &psk, base)
            }
            "PSK-CCM8, resumed (abbreviated handshake)" => {
                let (client, _) = session.context("no session")?;
                handshake(PSK_CREDS, &psk, base, trust, Some(client))
            }
            "ECDHE-ECDSA-CCM8, raw public keys, mutual (P-256), resumed" => {
                let (client, _) = session.context("no session")?;
                let creds = Credentials::RawPublicKey(Some(&self.client_p256));
                handshake(creds, &mutual, base, trust, Some(client))
            }
            "PSK-CCM8 with a connection ID" => go(
                PSK_CREDS,
                &psk,
                Config {
                    connection_id: true,
                    ..base
                },
            ),
            "ECDHE-PSK-CCM8" => go(
                Credentials::EcdhePsk {
                    identity: b"sensor",
                    key: b"0123456789abcdef",
                },
                &psk,
                base,
            ),
            "ECDHE-ECDSA-CCM8, raw public key, server-only" => {
                go(Credentials::RawPublicKey(None), &rpk, base)
            }
            "ECDHE-ECDSA-CCM8, raw public keys, mutual (P-256)"
            | "ECDHE-ECDSA-CCM8, raw public keys, mutual (P-256), resumable" => go(
                Credentials::RawPublicKey(Some(&self.client_p256)),
                &mutual,
                base,
            ),
            "ECDHE-ECDSA-CCM8, raw public keys, mutual (Ed25519 client)" => go(
                Credentials::RawPublicKey(Some(&self.client_ed25519)),
                &mutual,
                base,
            ),
            "ECDHE-ECDSA-GCM, raw public keys, mutual (P-256)" => go(
                Credentials::RawPublicKey(Some(&self.client_p256)),
                &mutual,
                Config { gcm: true, ..base },
            ),
            "ECDHE-ECDSA-CCM8, X.509, server-only" => {
                go(Credentials::Certificate(None), &x509, base)
            }
            "ECDHE-ECDSA-CCM8, X.509, mutual" => go(
                Credentials::Certificate(Some((&client_chain, &self.client_cert.1))),
                &x509,
                base,
            ),
            _ => unreachable!("mode names are the list below"),
        }
    }
}

const MODES: [&str; 13] = [
    "PSK-CCM8",
    "PSK-CCM8, resumable (the server issues a session ID)",
    "PSK-CCM8, resumed (abbreviated handshake)",
    "PSK-CCM8 with a connection ID",
    "ECDHE-PSK-CCM8",
    "ECDHE-ECDSA-CCM8, raw public key, server-only",
    "ECDHE-ECDSA-CCM8, raw public keys, mutual (P-256)",
    "ECDHE-ECDSA-CCM8, raw public keys, mutual (P-256), resumable",
    "ECDHE-ECDSA-CCM8, raw public keys, mutual (P-256), resumed",
    "ECDHE-ECDSA-CCM8, raw public keys, mutual (Ed25519 client)",
    "ECDHE-ECDSA-GCM, raw public keys, mutual (P-256)",
    "ECDHE-ECDSA-CCM8, X.509, server-only",
    "ECDHE-ECDSA-CCM8, X.509, mutual",
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
    let dir = tempfile::tempdir()?;
    certificates(dir.path())?;
    let modes = Modes::new(dir.path())?;
    let mut rows = vec![];
    let mut server = vec![];
    for mode in MODES {
        let r = modes.run(mode)?;
        rows.push(HandshakeRow {
            implementation: "sigil".into(),
            mode: mode.into(),
            bytes: r.bytes,
            datagrams: r.datagrams,
        });
        let n = if mode.starts_with("PSK") { 200 } else { 40 };
        let mut per = vec![];
        for _ in 0..runs.max(1) {
            let mut total = Duration::ZERO;
            for _ in 0..n {
                total += modes.run(mode)?.server_time;
            }
            per.push(total.as_secs_f64() * 1e6 / n as f64);
        }
        per.sort_by(f64::total_cmp);
        let median = per[per.len() / 2];
        server.push((mode.to_string(), median, 1e6 / median));
    }
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
        record_overhead: vec![
            ("AES-128-CCM-8".into(), Aead::Ccm8.overhead()),
            ("AES-128-GCM".into(), Aead::Gcm.overhead()),
            (
                "AES-128-CCM-8 with an 8-byte connection ID".into(),
                Aead::Ccm8.overhead() + 8 + 1,
            ),
        ],
        server,
        connection_state_bytes: std::mem::size_of::<Connection<RustCrypto, sigil_dtls::NoTrust>>(),
        established_state_bytes: std::mem::size_of::<sigil_dtls::Traffic<RustCrypto>>(),
    })
}

pub fn print(b: &DtlsBench) {
    println!(
        "{:<12} {:<60} {:>7} {:>10}",
        "", "handshake (cookie exchange included)", "bytes", "datagrams"
    );
    for r in &b.handshakes {
        println!(
            "{:<12} {:<60} {:>7} {:>10}",
            r.implementation, r.mode, r.bytes, r.datagrams
        );
    }
    for (suite, n) in &b.record_overhead {
        println!("record overhead, {suite}: {n} bytes");
    }
    println!(
        "state of one connection: {} bytes handshaking, {} bytes established (x509 feature on; the server boxes each and keeps only the established state)",
        b.connection_state_bytes, b.established_state_bytes
    );
    for (mode, us, per_core) in &b.server {
        println!("server CPU per handshake, {mode}: {us:.0} µs median ({per_core:.0} handshakes per core-second)");
    }
}
