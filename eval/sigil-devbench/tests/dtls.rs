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
    dtls_psk_client, dtls_rpk_client, dtls_server_key, BenchRng, DTLS_PSK, MAX_OUTPUT,
};
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, NoTrust, PinnedIdentities, ServerCredentials,
    Stateless, Trust,
};
use sigil_identity::Identity;

/// The test's virtual clock (milliseconds) as the DTLS cores take it.
fn ms(t: u64) -> sigil_time::Instant {
    sigil_time::Instant::from_millis(t)
}

struct Psk;
impl Trust for Psk {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"sensor").then(|| {
            key[..16].copy_from_slice(&DTLS_PSK);
            16
        })
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
        Config::default(),
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

#[test]
fn recorded_server_flights_and_known_answers_are_current() {
    let mut psk_client = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut BenchRng(1),
        Credentials::Psk {
            identity: b"sensor",
            key: &DTLS_PSK,
        },
        ms(0),
    )
    .unwrap();
    let psk = record(
        &mut psk_client,
        Psk,
        ServerCredentials {
            psk: true,
            key: None,
            require_client_key: false,
            ..ServerCredentials::NONE
        },
    );
    check_or_write("dtls-psk-server.bin", &psk);

    let server_key = dtls_server_key().unwrap();
    let id = [Identity::of_key(
        &RustCrypto,
        &RustCrypto.public_key(&server_key).unwrap(),
        b"",
    )
    .unwrap()];
    let mut rpk_client = Connection::connect(
        RustCrypto,
        PinnedIdentities {
            crypto: RustCrypto,
            identities: &id,
        },
        Config::default(),
        &mut BenchRng(1),
        Credentials::RawPublicKey(None),
        ms(0),
    )
    .unwrap();
    let rpk = record(
        &mut rpk_client,
        NoTrust,
        ServerCredentials {
            psk: false,
            key: Some(&server_key),
            require_client_key: false,
            ..ServerCredentials::NONE
        },
    );
    check_or_write("dtls-rpk-server.bin", &rpk);

    // The device operations replay those flights: they must complete on the host, and their
    // answer is the hash of the client datagrams written out for the independent check.
    let mut out = [0u8; MAX_OUTPUT];
    let n = dtls_psk_client(&RustCrypto, &mut out).unwrap();
    assert_eq!(out[n - 1], 1, "PSK handshake completes");
    let psk_answer = hex::encode(&out[..n]);
    let client = replayed_client_flights(
        Connection::connect(
            RustCrypto,
            NoTrust,
            Config::default(),
            &mut BenchRng(1),
            Credentials::Psk {
                identity: b"sensor",
                key: &DTLS_PSK,
            },
            ms(0),
        )
        .unwrap(),
        sigil_devbench::DTLS_PSK_SERVER,
    );
    assert_eq!(RustCrypto.sha256(&[&unframed(&client)]), out[..32]);
    check_or_write("dtls-psk-client.bin", &client);
    let n = dtls_rpk_client(&RustCrypto, &mut out).unwrap();
    assert_eq!(out[n - 1], 1, "RPK handshake completes");
    let rpk_answer = hex::encode(&out[..n]);
    let client = replayed_client_flights(
        Connection::connect(
            RustCrypto,
            PinnedIdentities {
                crypto: RustCrypto,
                identities: &id,
            },
            Config::default(),
            &mut BenchRng(1),
            Credentials::RawPublicKey(None),
            ms(0),
        )
        .unwrap(),
        sigil_devbench::DTLS_RPK_SERVER,
    );
    assert_eq!(RustCrypto.sha256(&[&unframed(&client)]), out[..32]);
    check_or_write("dtls-rpk-client.bin", &client);
    let json = format!(
        "{{\n  \"source\": \"eval/sigil-devbench/tests/dtls.rs: the host's own run of sigil-dtls (the targets must compute the same); the server flights they replay are vectors/dtls-*-server.bin\",\n  \"operations\": {{\n    \"dtls_psk_client\": {{\"output\": \"{psk_answer}\", \"source\": \"host run\"}},\n    \"dtls_rpk_client\": {{\"output\": \"{rpk_answer}\", \"source\": \"host run\"}}\n  }}\n}}\n"
    );
    check_or_write("device-kat-dtls.json", json.as_bytes());
}
