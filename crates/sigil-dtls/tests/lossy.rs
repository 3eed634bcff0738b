//! Handshakes over a seeded lossy link (the test kit's in-memory pair): datagrams are dropped,
//! duplicated and delayed (which reorders them), each with probability 1/N. For PSK, raw
//! public keys (mutual) and X.509 (mutual, at a 256-byte PMTU so certificates are fragmented,
//! on a link that loses anything larger), with connection IDs and with resumption: at least
//! 99.9% of the handshakes complete, and no application record is delivered twice.

use core::time::Duration;
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::{Config, Connection, Credentials, ServerCredentials, Session, Trust};
use sigil_identity::Identity;
use sigil_testkit::dtls::{at, server, Link, Loss, Pair, Stats};
use sigil_testkit::{pki, Seeded};
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
struct LongTerm {
    server_key: SecretKey,
    client_key: SecretKey,
    ids: Vec<Identity>,
    server_cert_key: SecretKey,
    client_cert_key: SecretKey,
}

fn keys() -> &'static LongTerm {
    static K: OnceLock<LongTerm> = OnceLock::new();
    K.get_or_init(|| {
        let server_key = RustCrypto
            .generate(SignatureAlgorithm::EcdsaP256, &mut Seeded::new(1))
            .unwrap();
        let client_key = RustCrypto
            .generate(SignatureAlgorithm::EcdsaP256, &mut Seeded::new(2))
            .unwrap();
        let id = |k: &SecretKey| {
            Identity::of_key(&RustCrypto, &RustCrypto.public_key(k).unwrap(), b"").unwrap()
        };
        let client_cert_key = pki::secret(pki::CLIENT_KEY);
        LongTerm {
            ids: vec![id(&server_key), id(&client_key), id(&client_cert_key)],
            server_key,
            client_key,
            server_cert_key: pki::secret(pki::SERVER_KEY),
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
        Identity::of_key(&RustCrypto, key, b"").is_ok_and(|id| keys().ids.contains(&id))
    }
    fn certificate_chain(
        &self,
        chain: &[&[u8]],
        _: sigil_time::UnixTime,
    ) -> Result<PublicKey, sigil_dtls::Error> {
        sigil_dtls::x509::verify_chain(&RustCrypto, chain, &[pki::ROOT], NOW_UNIX)
    }
}

/// A session for the resumption runs: one clean full handshake, made once.
fn cached_session() -> &'static (Session, Session) {
    static S: OnceLock<(Session, Session)> = OnceLock::new();
    S.get_or_init(|| {
        let o = run_mode(Mode::Psk, 424242, None, 0);
        (o.client_session.unwrap(), o.server_session.unwrap())
    })
}

struct Outcome {
    established: bool,
    resumed: bool,
    delivered: Vec<Vec<u8>>,
    client_session: Option<Session>,
    server_session: Option<Session>,
    stats: Stats,
}

fn run(seed: u64, one_in: Option<u32>, readings: usize) -> Outcome {
    run_mode(Mode::Psk, seed, one_in, readings)
}

/// One handshake of `mode` over a link that drops, duplicates and delays each datagram with
/// probability `1/one_in` (`None`: a clean link), seeded by `seed`; then `readings`
/// application records from the client.
fn run_mode(mode: Mode, seed: u64, one_in: Option<u32>, readings: usize) -> Outcome {
    let k = keys();
    let mtu = (mode == Mode::X509SmallMtu).then_some(256);
    let config = Config {
        pmtu: mtu.unwrap_or(1152),
        connection_id: mode == Mode::PskConnectionId,
        ..Config::default()
    };
    let client_chain = pki::client_chain();
    let server_chain = pki::server_chain();
    let psk = Credentials::Psk {
        identity: b"sensor",
        key: &[7; 16],
    };
    let credentials = match mode {
        Mode::Psk | Mode::PskConnectionId | Mode::PskResumption => psk,
        Mode::RawPublicKeys => Credentials::RawPublicKey(Some(&k.client_key)),
        Mode::X509SmallMtu => Credentials::Certificate(Some((&client_chain, &k.client_cert_key))),
    };
    let resume = (mode == Mode::PskResumption).then(|| cached_session());
    let offer = ServerCredentials {
        psk: true,
        key: Some(if mode == Mode::X509SmallMtu {
            &k.server_cert_key
        } else {
            &k.server_key
        }),
        chain: Some(&server_chain),
        #[cfg(feature = "rsa")]
        rsa: None,
        require_client_key: matches!(mode, Mode::RawPublicKeys | Mode::X509SmallMtu),
        connection_id: &[0xc1, 0xd0, 1, 2, 3, 4, 5, 6],
        issue_session_ids: true,
        resume: resume.map(|(_, s)| s),
        now: NOW_UNIX,
    };
    let mut rng = Seeded::new(seed);
    let client = match resume {
        Some((cs, _)) => Connection::resume(
            RustCrypto,
            AllTrust,
            config,
            &mut rng,
            credentials,
            cs,
            at(0),
        ),
        None => Connection::connect(RustCrypto, AllTrust, config, &mut rng, credentials, at(0)),
    }
    .unwrap();
    let link = Link {
        latency: Duration::from_millis(10),
        loss: one_in.map_or(Loss::NONE, Loss::one_in),
        mtu,
        seed,
    };
    let accept = server(AllTrust, config, offer, Seeded::new(seed ^ 0xff));
    let mut pair = Pair::new(client, accept, link);
    let limit = Duration::from_secs(600);
    let established = pair.run_until_established(limit);
    if established {
        for i in (0..readings).rev() {
            pair.send_client(format!("reading {i}").as_bytes()).unwrap();
        }
        pair.run_until_quiet();
    }
    // Every datagram fits the link's MTU: the PMTU cut the flights, and the ClientHello,
    // which goes whole, fits too.
    assert_eq!(
        pair.stats.to_server.too_big + pair.stats.to_client.too_big,
        0
    );
    if !established && std::env::var("LOSSY_DEBUG").is_ok() {
        eprintln!(
            "{mode:?} seed {seed}: client {:?} server {:?} t={} {:?}",
            pair.client.state(),
            pair.server.as_ref().map(|s| s.state()),
            pair.now(),
            pair.stats,
        );
    }
    Outcome {
        established,
        resumed: pair.client.resumed() && pair.server.as_ref().is_some_and(|s| s.resumed()),
        delivered: std::mem::take(&mut pair.server_received),
        client_session: pair.client.session(),
        server_session: pair.server.as_ref().and_then(|s| s.session()),
        stats: pair.stats,
    }
}

#[test]
fn a_thousand_handshakes_over_a_lossy_link() {
    let mut complete = 0;
    let mut link = Stats::default();
    for seed in 1..=1000u64 {
        let o = run(seed, Some(10), 5);
        if o.established {
            complete += 1;
        }
        for (all, one) in [
            (&mut link.to_server, o.stats.to_server),
            (&mut link.to_client, o.stats.to_client),
        ] {
            all.datagrams += one.datagrams;
            all.dropped += one.dropped;
            all.duplicated += one.duplicated;
            all.delayed += one.delayed;
        }
        link.client_retransmissions += o.stats.client_retransmissions;
        link.server_retransmissions += o.stats.server_retransmissions;
        let mut seen = std::collections::HashSet::new();
        for d in &o.delivered {
            assert!(
                seen.insert(d.clone()),
                "seed {seed}: {:?} delivered twice",
                String::from_utf8_lossy(d)
            );
        }
    }
    eprintln!("{complete}/1000 handshakes completed over a 1-in-10 lossy link: {link:?}");
    // The link did what it says, both ways: about one datagram in ten lost, duplicated,
    // delayed; and the lost flights were recovered by retransmission.
    for f in [link.to_server, link.to_client] {
        for n in [f.dropped, f.duplicated, f.delayed] {
            assert!(n * 20 > f.datagrams && n * 5 < f.datagrams, "{f:?}");
        }
    }
    assert!(link.client_retransmissions > 0 && link.server_retransmissions > 0);
    assert!(complete >= 999, "{complete}/1000 handshakes completed");
}

#[test]
fn a_clean_link_completes_every_time_and_delivers_everything() {
    for seed in 1..=20u64 {
        let o = run(seed, None, 5);
        assert!(o.established, "seed {seed}");
        assert_eq!(o.delivered.len(), 5, "seed {seed}");
    }
}

/// `n` seeded handshakes of `mode` over a 1-in-10 link: at least 99.9% complete, nothing is
/// delivered twice; returns how many completed.
fn lossy_runs(mode: Mode, n: u64) -> u64 {
    let mut complete = 0;
    for seed in 1..=n {
        let o = run_mode(mode, seed, Some(10), 3);
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
        let o = run_mode(mode, 7, None, 3);
        assert!(o.established, "{mode:?}");
        assert_eq!(o.delivered.len(), 3, "{mode:?}");
        assert_eq!(o.resumed, mode == Mode::PskResumption, "{mode:?}");
    }
}
