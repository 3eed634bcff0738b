//! Handshakes over a seeded lossy link: datagrams are dropped, duplicated and delayed (which
//! reorders them), each with probability 1/N. For PSK, raw public keys (mutual) and X.509
//! (mutual, at a 256-byte MTU so certificates are fragmented), with connection IDs and with
//! resumption: at least 99.9% of the handshakes complete, and no application record is
//! delivered twice.

use sigil_crypto::{
    CryptoError, CryptoProvider, PublicKey, Rng, RustCrypto, SecretKey, SignatureAlgorithm,
};
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, ServerCredentials, Session, Stateless, Trust,
};
use sigil_identity::Identity;
use std::sync::OnceLock;

/// 2026-01-01, inside the test PKI's validity.
const NOW_UNIX: sigil_time::UnixTime = sigil_time::UnixTime::from_secs(1_767_225_600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Psk,
    RawPublicKeys,
    X509SmallMtu,
    PskConnectionId,
    PskResumption,
}

/// Long-term credentials of both ends (made once).
struct Pki {
    server_key: SecretKey,
    client_key: SecretKey,
    ids: Vec<Identity>,
    root: Vec<u8>,
    server_chain: Vec<Vec<u8>>,
    server_cert_key: SecretKey,
    client_chain: Vec<Vec<u8>>,
    client_cert_key: SecretKey,
}

fn pki() -> &'static Pki {
    static P: OnceLock<Pki> = OnceLock::new();
    P.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/x509/");
        let der = |n: &str| std::fs::read(format!("{dir}{n}.der")).unwrap();
        let key = |n: &str| {
            let h = std::fs::read_to_string(format!("{dir}{n}.key")).unwrap();
            SecretKey::from_bytes(
                SignatureAlgorithm::EcdsaP256,
                &hex::decode(h.trim()).unwrap(),
            )
            .unwrap()
        };
        let server_key = RustCrypto
            .generate(SignatureAlgorithm::EcdsaP256, &mut Counter(1))
            .unwrap();
        let client_key = RustCrypto
            .generate(SignatureAlgorithm::EcdsaP256, &mut Counter(2))
            .unwrap();
        let id = |k: &SecretKey| {
            Identity::of_key(&RustCrypto, &RustCrypto.public_key(k).unwrap(), b"").unwrap()
        };
        let client_cert_key = key("client");
        Pki {
            ids: vec![id(&server_key), id(&client_key), id(&client_cert_key)],
            server_key,
            client_key,
            root: der("root"),
            server_chain: vec![der("server"), der("intermediate")],
            server_cert_key: key("server"),
            client_chain: vec![der("client"), der("intermediate")],
            client_cert_key,
        }
    })
}

/// What both ends trust: the PSK, the pinned identities, chains to the test root.
struct AllTrust;
impl Trust for AllTrust {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"sensor").then(|| {
            key[..16].copy_from_slice(&[7; 16]);
            16
        })
    }
    fn trusted_key(&self, key: &PublicKey) -> bool {
        Identity::of_key(&RustCrypto, key, b"").is_ok_and(|id| pki().ids.contains(&id))
    }
    fn certificate_chain(&self, chain: &[&[u8]]) -> Result<PublicKey, sigil_dtls::Error> {
        sigil_dtls::x509::verify_chain(&RustCrypto, chain, &[&pki().root], NOW_UNIX)
    }
}

/// A session for the resumption runs: one clean full handshake, made once.
fn cached_session() -> &'static (Session, Session) {
    static S: OnceLock<(Session, Session)> = OnceLock::new();
    S.get_or_init(|| {
        let o = run_mode(Mode::Psk, 424242, u64::MAX, 0);
        (o.client_session.unwrap(), o.server_session.unwrap())
    })
}

struct Counter(u64);
impl Rng for Counter {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        for b in buf {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (self.0 >> 33) as u8;
        }
        Ok(())
    }
}

/// The link: a seeded xorshift decides each datagram's fate.
struct Link {
    state: u64,
    one_in: u64,
    /// (deliver at ms, towards the server?, bytes)
    in_flight: Vec<(u64, bool, Vec<u8>)>,
    sent: usize,
}

impl Link {
    fn roll(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    fn send(&mut self, now: u64, to_server: bool, d: Vec<u8>) {
        self.sent += 1;
        if self.roll() % self.one_in == 0 {
            return; // dropped
        }
        let delay = if self.roll() % self.one_in == 0 {
            50 + self.roll() % 400
        } else {
            10
        };
        if self.roll() % self.one_in == 0 {
            self.in_flight.push((now + delay + 5, to_server, d.clone())); // duplicated
        }
        self.in_flight.push((now + delay, to_server, d));
    }
}

struct Outcome {
    established: bool,
    resumed: bool,
    delivered: Vec<Vec<u8>>,
    client_session: Option<Session>,
    server_session: Option<Session>,
}

fn run(seed: u64, one_in: u64, readings: usize) -> Outcome {
    run_mode(Mode::Psk, seed, one_in, readings)
}

fn run_mode(mode: Mode, seed: u64, one_in: u64, readings: usize) -> Outcome {
    let p = pki();
    let config = Config {
        pmtu: if mode == Mode::X509SmallMtu {
            256
        } else {
            1152
        },
        connection_id: mode == Mode::PskConnectionId,
        ..Config::default()
    };
    let client_chain: Vec<&[u8]> = p.client_chain.iter().map(Vec::as_slice).collect();
    let server_chain: Vec<&[u8]> = p.server_chain.iter().map(Vec::as_slice).collect();
    let psk = Credentials::Psk {
        identity: b"sensor",
        key: &[7; 16],
    };
    let credentials = match mode {
        Mode::Psk | Mode::PskConnectionId | Mode::PskResumption => psk,
        Mode::RawPublicKeys => Credentials::RawPublicKey(Some(&p.client_key)),
        Mode::X509SmallMtu => Credentials::Certificate(Some((&client_chain, &p.client_cert_key))),
    };
    let resume = (mode == Mode::PskResumption).then(|| cached_session());
    let offer = ServerCredentials {
        psk: true,
        key: Some(if mode == Mode::X509SmallMtu {
            &p.server_cert_key
        } else {
            &p.server_key
        }),
        chain: Some(&server_chain),
        require_client_key: matches!(mode, Mode::RawPublicKeys | Mode::X509SmallMtu),
        connection_id: &[0xc1, 0xd0, 1, 2, 3, 4, 5, 6],
        issue_session_ids: true,
        resume: resume.map(|(_, s)| s),
    };
    let cookies = CookieKey::new([seed as u8; 32]);
    let mut link = Link {
        state: seed.wrapping_mul(0x9e3779b97f4a7c15) | 1,
        one_in,
        in_flight: vec![],
        sent: 0,
    };
    let mut client = match resume {
        Some((cs, _)) => Connection::resume(
            RustCrypto,
            AllTrust,
            config,
            &mut Counter(seed),
            credentials,
            cs,
            at(0),
        ),
        None => Connection::connect(
            RustCrypto,
            AllTrust,
            config,
            &mut Counter(seed),
            credentials,
            at(0),
        ),
    }
    .unwrap();
    let mut server: Option<Connection<RustCrypto, AllTrust>> = None;
    let mut now = 0u64;
    let mut buf = [0u8; 2048];
    let mut to_send: Vec<Vec<u8>> = (0..readings)
        .map(|i| format!("reading {i}").into_bytes())
        .collect();
    let mut delivered = vec![];
    while now < 600_000 {
        while let Some(n) = client.poll_transmit(at(now), &mut buf) {
            link.send(now, true, buf[..n].to_vec());
        }
        if let Some(s) = server.as_mut() {
            while let Some(n) = s.poll_transmit(at(now), &mut buf) {
                link.send(now, false, buf[..n].to_vec());
            }
            while let Some(n) = s.poll_app_data(&mut buf) {
                delivered.push(buf[..n].to_vec());
            }
        }
        if client.is_established() {
            if let Some(r) = to_send.pop() {
                client.send(&r).unwrap();
                continue;
            }
            if server.as_ref().is_some_and(|s| s.is_established()) && link.in_flight.is_empty() {
                break;
            }
        }
        if client.failure().is_some() {
            break;
        }
        // Advance virtual time to the next event.
        let next = [
            link.in_flight.iter().map(|(t, _, _)| *t).min(),
            client.poll_timeout().map(|t| t.as_millis()),
            server
                .as_ref()
                .and_then(|s| s.poll_timeout())
                .map(|t| t.as_millis()),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { break };
        now = now.max(next);
        client.handle_timeout(at(now)).ok();
        if let Some(s) = server.as_mut() {
            s.handle_timeout(at(now)).ok();
        }
        let (due, later): (Vec<_>, Vec<_>) =
            link.in_flight.drain(..).partition(|(t, _, _)| *t <= now);
        link.in_flight = later;
        for (_, to_server, d) in due {
            if !to_server {
                let _ = client.handle_datagram(at(now), &d);
                continue;
            }
            match server.as_mut() {
                Some(s) => {
                    let _ = s.handle_datagram(at(now), &d);
                }
                None => {
                    let mut out = [0u8; 256];
                    match cookies.respond(&RustCrypto, b"peer", &d, &mut out) {
                        Stateless::HelloVerify(n) => link.send(now, false, out[..n].to_vec()),
                        Stateless::Accept(cookie) => {
                            server = Connection::accept(
                                RustCrypto,
                                AllTrust,
                                config,
                                &offer,
                                &mut Counter(seed ^ 0xff),
                                cookie,
                                &d,
                                at(now),
                            )
                            .ok();
                        }
                        Stateless::Drop(_) => {}
                    }
                }
            }
        }
    }
    let established =
        client.is_established() && server.as_ref().is_some_and(|s| s.is_established());
    if !established && std::env::var("LOSSY_DEBUG").is_ok() {
        eprintln!(
            "{mode:?} seed {seed}: client {:?} server {:?} t={now}",
            client.state(),
            server.as_ref().map(|s| s.state())
        );
    }
    let _ = link.sent;
    Outcome {
        established,
        resumed: client.resumed() && server.as_ref().is_some_and(|s| s.resumed()),
        delivered,
        client_session: client.session(),
        server_session: server.as_ref().and_then(|s| s.session()),
    }
}

#[test]
fn a_thousand_handshakes_over_a_lossy_link() {
    let mut complete = 0;
    for seed in 1..=1000u64 {
        let o = run(seed, 10, 5);
        if o.established {
            complete += 1;
        }
        let mut seen = std::collections::HashSet::new();
        for d in &o.delivered {
            assert!(
                seen.insert(d.clone()),
                "seed {seed}: {:?} delivered twice",
                String::from_utf8_lossy(d)
            );
        }
    }
    eprintln!("{complete}/1000 handshakes completed over a 1-in-10 lossy link");
    assert!(complete >= 999, "{complete}/1000 handshakes completed");
}

#[test]
fn a_clean_link_completes_every_time_and_delivers_everything() {
    for seed in 1..=20u64 {
        let o = run(seed, u64::MAX, 5);
        assert!(o.established, "seed {seed}");
        assert_eq!(o.delivered.len(), 5, "seed {seed}");
    }
}

/// `n` seeded handshakes of `mode` over a 1-in-10 link: at least 99.9% complete, nothing is
/// delivered twice; returns how many completed.
fn lossy_runs(mode: Mode, n: u64) -> u64 {
    let mut complete = 0;
    for seed in 1..=n {
        let o = run_mode(mode, seed, 10, 3);
        if o.established {
            complete += 1;
            if mode == Mode::PskResumption {
                assert!(
                    o.resumed,
                    "{mode:?} seed {seed}: fell back to a full handshake"
                );
            }
        }
        let mut seen = std::collections::HashSet::new();
        for d in &o.delivered {
            assert!(
                seen.insert(d.clone()),
                "{mode:?} seed {seed}: delivered twice"
            );
        }
    }
    eprintln!("{mode:?}: {complete}/{n} handshakes completed over a 1-in-10 lossy link");
    assert!(complete * 1000 >= n * 999, "{mode:?}: {complete}/{n}");
    complete
}

#[test]
fn raw_public_key_handshakes_over_a_lossy_link() {
    lossy_runs(Mode::RawPublicKeys, 1000);
}

#[test]
fn certificate_handshakes_fragmented_over_a_lossy_link() {
    lossy_runs(Mode::X509SmallMtu, 1000);
}

#[test]
fn connection_id_handshakes_over_a_lossy_link() {
    lossy_runs(Mode::PskConnectionId, 1000);
}

#[test]
fn resumptions_over_a_lossy_link() {
    lossy_runs(Mode::PskResumption, 1000);
}

#[test]
fn every_mode_completes_on_a_clean_link() {
    for mode in [
        Mode::Psk,
        Mode::RawPublicKeys,
        Mode::X509SmallMtu,
        Mode::PskConnectionId,
        Mode::PskResumption,
    ] {
        let o = run_mode(mode, 7, u64::MAX, 3);
        assert!(o.established, "{mode:?}");
        assert_eq!(o.delivered.len(), 3, "{mode:?}");
        assert_eq!(o.resumed, mode == Mode::PskResumption, "{mode:?}");
    }
}

/// A point on the test's virtual clock, in milliseconds.
fn at(ms: u64) -> sigil_time::Instant {
    sigil_time::Instant::from_millis(ms)
}
