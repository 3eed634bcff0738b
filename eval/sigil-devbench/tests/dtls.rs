//! Records the server's flights that the device-side DTLS handshake operations replay, from
//! the real `sigil-dtls` server, and the operations' known answers on the host
//! (`vectors/device-kat-dtls.json`). `SIGIL_WRITE_VECTORS=1` rewrites both after a protocol
//! change; otherwise the files must match what the code produces now.
//!
//! The known answer is a hash of the client's datagrams, so this also writes those datagrams
//! (`vectors/dtls-*-client.bin`) and checks the answer is their hash: `vectors/check_dtls_kat.py`
//! then checks both recorded handshakes against the TLS 1.2 / DTLS 1.2 key schedule with
//! pyca/cryptography (PSK and ECDHE premaster secrets, both Finished messages, the encrypted
//! records, the server's signature), so the recorded answers cannot drift without a failure
//! outside Sigil's own code.

use sigil_crypto::{CryptoProvider, RustCrypto};
use sigil_devbench::{
    dtls_client_key, dtls_ecdhe_psk_client, dtls_psk_client, dtls_rpk_client,
    dtls_rpk_mutual_client, dtls_server_key, dtls_static_ecdh_client, BenchRng, Failure, DTLS_PSK,
    MAX_OUTPUT,
};
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, PinnedIdentities, ServerCredentials, Stateless,
    Trust,
};
use sigil_identity::Identity;

/// The test's virtual clock (milliseconds) as the DTLS cores take it.
fn ms(t: u64) -> sigil_time::Instant {
    sigil_time::Instant::from_millis(t)
}

/// The recording server's trust: the device's PSK under identity "sensor", and the client
/// keys it pins (the mutual handshake's).
struct ServerTrust<'a>(&'a [Identity]);
impl Trust for ServerTrust<'_> {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"sensor").then(|| {
            key[..16].copy_from_slice(&DTLS_PSK);
            16
        })
    }
    fn trusted_key(&self, key: &sigil_crypto::PublicKey) -> bool {
        Identity::of_key(&RustCrypto, key, b"").is_ok_and(|id| self.0.contains(&id))
    }
}

fn drain<C: CryptoProvider, T: Trust>(c: &mut Connection<C, T>) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut buf = [0u8; 2048];
    while let Some(n) = c.poll_transmit(sigil_time::Instant::ZERO, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// Runs the handshake with the real server and returns the server's datagrams, framed.
fn record<T: Trust, U: Trust>(
    client: &mut Connection<RustCrypto, T>,
    server_trust: U,
    server_config: Config,
    offer: ServerCredentials<'_>,
) -> Vec<u8> {
    let cookies = CookieKey::new([9; 32]);
    let mut framed = vec![];
    let mut frame = |d: &[u8]| {
        framed.extend_from_slice(&(d.len() as u16).to_be_bytes());
        framed.extend_from_slice(d);
    };
    let ch1 = drain(client);
    let mut out = [0u8; 512];
    let Stateless::HelloVerify(n) = cookies.respond(&RustCrypto, b"device", &ch1[0], &mut out)
    else {
        panic!()
    };
    frame(&out[..n]);
    client.handle_datagram(ms(10), &out[..n]).unwrap();
    let ch2 = drain(client);
    let Stateless::Accept(cookie) = cookies.respond(&RustCrypto, b"device", &ch2[0], &mut out)
    else {
        panic!("the cookie was refused")
    };
    let mut server = Connection::accept(
        RustCrypto,
        server_trust,
        server_config,
        &offer,
        &mut BenchRng(2),
        cookie,
        &ch2[0],
        ms(11),
    )
    .unwrap();
    let mut t = 11;
    loop {
        let flight = drain(&mut server);
        if flight.is_empty() {
            break;
        }
        for d in flight {
            frame(&d);
            t += 1;
            client.handle_datagram(ms(t), &d).unwrap();
        }
        for d in drain(client) {
            server.handle_datagram(ms(t), &d).unwrap();
        }
    }
    assert!(client.is_established() && server.is_established());
    framed
}

/// The device operation's replay (sigil_devbench::dtls_client), keeping the client's datagrams
/// instead of hashing them: each prefixed by its 2-byte length, as the server recordings.
fn replayed_client_flights<T: Trust>(
    mut client: Connection<RustCrypto, T>,
    server: &[u8],
) -> Vec<u8> {
    let mut framed = vec![];
    let mut plain = vec![];
    let mut keep = |c: &mut Connection<RustCrypto, T>| {
        for d in drain(c) {
            framed.extend_from_slice(&(d.len() as u16).to_be_bytes());
            framed.extend_from_slice(&d);
            plain.extend_from_slice(&d);
        }
    };
    keep(&mut client);
    for (i, d) in sigil_devbench::datagrams(server).enumerate() {
        client.handle_datagram(ms(10 + i as u64), d).unwrap();
        keep(&mut client);
    }
    assert!(client.is_established());
    // The device hashes at most 1536 bytes of them; more would make the answer a prefix's.
    assert!(plain.len() <= 1536, "{} bytes", plain.len());
    framed
}

/// The hash the device operation reports: over the datagrams without their length prefixes.
fn unframed(framed: &[u8]) -> Vec<u8> {
    sigil_devbench::datagrams(framed)
        .flatten()
        .copied()
        .collect()
}

fn check_or_write(path: &str, bytes: &[u8]) {
    let full = format!("{}/../../vectors/{path}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var("SIGIL_WRITE_VECTORS").is_ok() {
        std::fs::write(&full, bytes).unwrap();
    }
    assert_eq!(
        std::fs::read(&full).unwrap(),
        bytes,
        "{path} is stale: run with SIGIL_WRITE_VECTORS=1"
    );
}

/// One recorded handshake: the device operation that replays it, its files' stem, how the
/// client connects (built twice: once to record, once to replay), and what the server runs.
struct Case<'a> {
    op: fn(&RustCrypto, &mut [u8]) -> Result<usize, Failure>,
    name: &'static str,
    stem: &'static str,
    client: &'a dyn Fn() -> Connection<RustCrypto, PinnedIdentities<'a, RustCrypto>>,
    server_trust: &'a [Identity],
    server_config: Config,
    offer: ServerCredentials<'a>,
    replay: &'static [u8],
}

/// Records the case's server flights and client datagrams (written or checked), checks the
/// device operation completes on the host with the hash of those datagrams, and returns the
/// operation's answer.
fn run_case(case: &Case<'_>) -> String {
    let mut client = (case.client)();
    let server = record(
        &mut client,
        ServerTrust(case.server_trust),
        case.server_config,
        case.offer,
    );
    check_or_write(&format!("dtls-{}-server.bin", case.stem), &server);
    let mut out = [0u8; MAX_OUTPUT];
    let n = (case.op)(&RustCrypto, &mut out).unwrap();
    assert_eq!(out[n - 1], 1, "{} completes", case.name);
    let replayed = replayed_client_flights((case.client)(), case.replay);
    assert_eq!(RustCrypto.sha256(&[&unframed(&replayed)]), out[..32]);
    check_or_write(&format!("dtls-{}-client.bin", case.stem), &replayed);
    hex::encode(&out[..n])
}

fn static_ecdh() -> Config {
    Config {
        danger_static_ecdh: true,
        ..Config::default()
    }
}

#[test]
fn recorded_server_flights_and_known_answers_are_current() {
    let connect = |trust: &'static [Identity], config: Config, creds: Credentials<'static>| {
        move || {
            Connection::connect(
                RustCrypto,
                PinnedIdentities {
                    crypto: RustCrypto,
                    identities: trust,
                },
                config,
                &mut BenchRng(1),
                creds,
                ms(0),
            )
            .unwrap()
        }
    };
    let server_key: &'static _ = Box::leak(Box::new(dtls_server_key().unwrap()));
    let client_key: &'static _ = Box::leak(Box::new(dtls_client_key().unwrap()));
    let id_of = |k| {
        let id = Identity::of_key(&RustCrypto, &RustCrypto.public_key(k).unwrap(), b"").unwrap();
        &*Box::leak(Box::new([id]))
    };
    let (server_id, client_id): (&'static [Identity], &'static [Identity]) =
        (id_of(server_key), id_of(client_key));
    let psk_creds = Credentials::Psk {
        identity: b"sensor",
        key: &DTLS_PSK,
    };
    let ecdhe_psk_creds = Credentials::EcdhePsk {
        identity: b"sensor",
        key: &DTLS_PSK,
    };
    let rpk = |mutual: bool| ServerCredentials {
        psk: false,
        key: Some(server_key),
        require_client_key: mutual,
        ..ServerCredentials::NONE
    };
    let psk_offer = ServerCredentials {
        psk: true,
        key: None,
        require_client_key: false,
        ..ServerCredentials::NONE
    };
    let (c_psk, c_ecdhe_psk, c_rpk, c_mutual, c_static) = (
        connect(&[], Config::default(), psk_creds),
        connect(&[], Config::default(), ecdhe_psk_creds),
        connect(
            server_id,
            Config::default(),
            Credentials::RawPublicKey(None),
        ),
        connect(
            server_id,
            Config::default(),
            Credentials::RawPublicKey(Some(client_key)),
        ),
        connect(server_id, static_ecdh(), Credentials::RawPublicKey(None)),
    );
    let cases = [
        Case {
            op: dtls_psk_client,
            name: "dtls_psk_client",
            stem: "psk",
            client: &c_psk,
            server_trust: &[],
            server_config: Config::default(),
            offer: psk_offer,
            replay: sigil_devbench::DTLS_PSK_SERVER,
        },
        Case {
            op: dtls_rpk_client,
            name: "dtls_rpk_client",
            stem: "rpk",
            client: &c_rpk,
            server_trust: &[],
            server_config: Config::default(),
            offer: rpk(false),
            replay: sigil_devbench::DTLS_RPK_SERVER,
        },
        Case {
            op: dtls_ecdhe_psk_client,
            name: "dtls_ecdhe_psk_client",
            stem: "ecdhe-psk",
            client: &c_ecdhe_psk,
            server_trust: &[],
            server_config: Config::default(),
            offer: psk_offer,
            replay: sigil_devbench::DTLS_ECDHE_PSK_SERVER,
        },
        Case {
            op: dtls_rpk_mutual_client,
            name: "dtls_rpk_mutual_client",
            stem: "rpk-mutual",
            client: &c_mutual,
            server_trust: client_id,
            server_config: Config::default(),
            offer: rpk(true),
            replay: sigil_devbench::DTLS_RPK_MUTUAL_SERVER,
        },
        Case {
            op: dtls_static_ecdh_client,
            name: "dtls_static_ecdh_client",
            stem: "static-ecdh",
            client: &c_static,
            server_trust: &[],
            server_config: static_ecdh(),
            offer: rpk(false),
            replay: sigil_devbench::DTLS_STATIC_ECDH_SERVER,
        },
    ];
    let answers: Vec<String> = cases
        .iter()
        .map(|c| {
            format!(
                "    \"{}\": {{\"output\": \"{}\", \"source\": \"host run\"}}",
                c.name,
                run_case(c)
            )
        })
        .collect();
    let json = format!(
        "{{\n  \"source\": \"eval/sigil-devbench/tests/dtls.rs: the host's own run of sigil-dtls (the targets must compute the same); the server flights they replay are vectors/dtls-*-server.bin\",\n  \"operations\": {{\n{}\n  }}\n}}\n",
        answers.join(",\n")
    );
    check_or_write("device-kat-dtls.json", json.as_bytes());
}
