//! A sensor serving its own readings as an ACE resource server, end to end with real
//! processes: `sigil server` (the AC's key), a paired `sigil sensor --serve`, and `sigil get
//! --token`. The test mints tokens with the server's key from its database, as the AC does.

use sigil_ace::{encode_signed, Claims, Confirmation, Permissions, Scope, ScopeEntry};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_identity::Identity;
use sigil_time::UnixTime;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{
    free_port, pair, provisioned_p256_sensor, secure_server_with, server_identity, server_key,
    sigil, wait_ready, Kill, SIGIL,
};

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A client key pair, written as `sigil get --key-file` reads it.
fn client_key(dir: &Path, name: &str) -> (std::path::PathBuf, PublicKey) {
    let sk = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut sigil_client::os::OsRng)
        .unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("p256:{}\n", hex::encode(sk.to_bytes()))).unwrap();
    (path, RustCrypto.public_key(&sk).unwrap())
}

struct Token<'a> {
    aud: &'a str,
    object: &'a str,
    exp: i64,
    cti: [u8; 8],
}

fn mint(ac: &SecretKey, iss: &str, client: PublicKey, t: &Token<'_>, path: &Path) -> usize {
    let scope = [ScopeEntry {
        object: t.object,
        permissions: Permissions::READ,
    }];
    let claims = Claims {
        iss: Some(iss),
        aud: Some(t.aud),
        exp: Some(UnixTime::from_secs(t.exp)),
        iat: Some(UnixTime::from_secs(now())),
        cti: Some(&t.cti),
        scope: Some(Scope::new(&scope)),
        cnf: Some(Confirmation::PublicKey {
            kid: None,
            key: client,
        }),
        ..Claims::new()
    };
    let mut out = [0u8; sigil_ace::MAX_TOKEN_LEN];
    let n = encode_signed(&claims, None, ac, &RustCrypto, &mut out).unwrap();
    std::fs::write(path, hex::encode(&out[..n])).unwrap();
    n
}

#[test]
fn a_sensor_serves_its_readings_only_to_holders_of_a_valid_token() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport, sport) = (free_port(), free_port(), free_port());
    let state = dir.path().join("sensor");
    let states = state.to_str().unwrap();
    let (sensor_id, sensor_key) = provisioned_p256_sensor(&db, &state);
    // A reader that will ask the running server's AC for its token.
    let (reader_key, reader_pub) = client_key(dir.path(), "reader.key");
    let reader_id = Identity::of_key(&RustCrypto, &reader_pub, b"")
        .unwrap()
        .to_string();
    assert!(sigil(&["provision", "--db", dbs, "add", &reader_id])
        .status
        .success());
    let _server = Kill(secure_server_with(&db, port, dport, &[]));
    wait_ready(port);
    let message = dir.path().join("pairing.cose");
    pair(&db, &sensor_id, &sensor_key, &message);
    // The AC's key: the server's persistent DTLS key, the one that signed the pairing.
    let (ac, _) = server_key(&db);
    let ac_id = server_identity(&db);

    let log = dir.path().join("sensor.log");
    let _sensor = Kill(
        Command::new(SIGIL)
            .args([
                "sensor",
                "--server",
                &format!("coaps://127.0.0.1:{dport}"),
                "--state",
                states,
                "--dtls",
                "rpk",
                "--interval",
                "200ms",
                "--pairing",
                message.to_str().unwrap(),
                "--serve",
                &format!("127.0.0.1:{sport}"),
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let uri = format!("coaps://127.0.0.1:{sport}/reading");
    let get = |token: Option<&Path>, key: &Path| {
        let mut args = vec![
            "get".to_string(),
            uri.clone(),
            "--key-file".into(),
            key.to_str().unwrap().into(),
        ];
        match token {
            Some(t) => args.extend([
                "--token-file".into(),
                t.to_str().unwrap().into(),
                "--rs-identity".into(),
                sensor_id.clone(),
            ]),
            None => args.extend([
                "--dtls".into(),
                "rpk".into(),
                "--server-identity".into(),
                sensor_id.clone(),
            ]),
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        sigil(&refs)
    };
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    // A fresh client key, a token for it signed by `signer`, and `sigil get` with both.
    let attempt = |name: &str, signer: &SecretKey, t: &Token<'_>| {
        let (key, public) = client_key(dir.path(), &format!("{name}.key"));
        let token = dir.path().join(format!("{name}.token"));
        mint(signer, &ac_id, public, t, &token);
        let out = get(Some(&token), &key);
        (key, out)
    };

    // Plain coap:// to anything but /authz-info: 4.01 with no body, and a malformed token
    // posted there: a refusal no larger than 3x the request (the source is unverified).
    {
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        probe
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let get_reading = [
            0x40, 0x01, 0x12, 0x34, 0xb7, b'r', b'e', b'a', b'd', b'i', b'n', b'g',
        ];
        let post_junk = [
            0x40, 0x02, 0x12, 0x35, 0xba, b'a', b'u', b't', b'h', b'z', b'-', b'i', b'n', b'f',
            b'o', 0xff, 0x01,
        ];
        let mut answers = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while answers.len() < 2 && Instant::now() < deadline {
            answers.clear();
            for req in [&get_reading[..], &post_junk[..]] {
                probe.send_to(req, ("127.0.0.1", sport)).unwrap();
                let mut b = [0u8; 512];
                if let Ok((n, _)) = probe.recv_from(&mut b) {
                    answers.push((req.len(), b[..n].to_vec()));
                }
            }
        }
        assert_eq!(answers.len(), 2, "the sensor answers plain coap://");
        let (_, refused) = &answers[0];
        assert_eq!(refused[1], 0x81, "4.01");
        assert_eq!(refused.len(), 4, "no body");
        for (req, answer) in &answers {
            assert!(
                answer.len() <= 3 * req,
                "{} B answer to {req} B",
                answer.len()
            );
        }
    }

    // The valid token: once the sensor published a reading, it is served and verified.
    let (ok_key, ok_pub) = client_key(dir.path(), "ok.key");
    let ok_token = dir.path().join("ok.token");
    let size = mint(
        &ac,
        &ac_id,
        ok_pub,
        &Token {
            aud: &sensor_id,
            object: &sensor_id,
            exp: now() + 600,
            cti: *b"cti-ok-1",
        },
        &ok_token,
    );
    eprintln!("token for a sensor audience, P-256 AC and client keys: {size} bytes");
    let deadline = Instant::now() + Duration::from_secs(60);
    let served = loop {
        let out = get(Some(&ok_token), &ok_key);
        if out.status.success() {
            break out;
        }
        assert!(
            Instant::now() < deadline,
            "never served: {}\nsensor: {}",
            stderr(&out),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let report: serde_json::Value = serde_json::from_slice(&served.stdout).unwrap();
    assert_eq!(report["code"], "2.05");
    assert_eq!(report["sensor"], sensor_id.as_str());
    assert_eq!(report["verified"].as_array().unwrap().len(), 1);
    eprintln!(
        "served reading: {} bytes",
        report["readings"][0].as_str().unwrap().len() / 2
    );
    // Posted again: refused as a replay, yet the kept token still grants the reading.
    let again = get(Some(&ok_token), &ok_key);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("authz-info: 4.01"),
        "{}",
        stderr(&again)
    );
    assert!(stderr(&again).contains("replay"), "{}", stderr(&again));
    // The history: every reading in it verifies.
    let hist = sigil(&[
        "get",
        &format!("coaps://127.0.0.1:{sport}/history"),
        "--key-file",
        ok_key.to_str().unwrap(),
        "--token-file",
        ok_token.to_str().unwrap(),
        "--rs-identity",
        &sensor_id,
    ]);
    assert!(hist.status.success(), "{}", stderr(&hist));
    let report: serde_json::Value = serde_json::from_slice(&hist.stdout).unwrap();
    assert!(!report["verified"].as_array().unwrap().is_empty());

    // A token the running server's AC issues (`sigil token --audience <sensor>`) to a reader
    // granted the sensor, bound to the reader's raw public key: served and verified.
    assert!(
        sigil(&["provision", "--db", dbs, "grant", &reader_id, &sensor_id])
            .status
            .success()
    );
    let issued = dir.path().join("issued.cwt");
    let out = sigil(&[
        "token",
        "--server",
        &format!("coaps://127.0.0.1:{dport}"),
        "--audience",
        &sensor_id,
        "--scope",
        &sensor_id,
        "--dtls",
        "rpk",
        "--server-identity",
        &ac_id,
        "--key-file",
        reader_key.to_str().unwrap(),
        "--out",
        issued.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    eprintln!(
        "token issued by the AC for the sensor: {} bytes",
        std::fs::read(&issued).unwrap().len()
    );
    let out = get(Some(&issued), &reader_key);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("authz-info: 2.01"),
        "{}",
        stderr(&out)
    );

    // No token: the handshake completes, the resource answers 4.01.
    let (none_key, _) = client_key(dir.path(), "none.key");
    let out = get(None, &none_key);
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with("4.01"), "{}", stderr(&out));

    // A token for another sensor: refused at /authz-info (4.03, RFC 9200 §5.10.1.1), so 4.01 at
    // the resource.
    let other = "77".repeat(16);
    let (_, out) = attempt(
        "aud",
        &ac,
        &Token {
            aud: &other,
            object: &other,
            exp: now() + 600,
            cti: *b"cti-aud1",
        },
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("authz-info: 4.03 (invalid_grant: token is for another audience)"),
        "{err}"
    );
    assert!(err.contains("\n4.01\n"), "{err}");

    // The right audience, a scope naming another sensor: accepted, then 4.03.
    let (_, out) = attempt(
        "scope",
        &ac,
        &Token {
            aud: &sensor_id,
            object: &other,
            exp: now() + 600,
            cti: *b"cti-scp1",
        },
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("authz-info: 2.01"), "{err}");
    assert!(err.contains("\n4.03\n"), "{err}");

    // Expired: refused at /authz-info with its time.
    let (_, out) = attempt(
        "exp",
        &ac,
        &Token {
            aud: &sensor_id,
            object: &sensor_id,
            exp: now() - 1,
            cti: *b"cti-exp1",
        },
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("authz-info: 4.01 (invalid_grant: token expired at"),
        "{err}"
    );
    assert!(err.contains("\n4.01\n"), "{err}");

    // A token signed by a key that is not the AC's.
    let forger = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut sigil_client::os::OsRng)
        .unwrap();
    let (_, out) = attempt(
        "forged",
        &forger,
        &Token {
            aud: &sensor_id,
            object: &sensor_id,
            exp: now() + 600,
            cti: *b"cti-frg1",
        },
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("signature does not verify"),
        "{}",
        stderr(&out)
    );

    // A token valid for a few seconds: served, then refused from its exp on.
    let (short_key, out) = attempt(
        "short",
        &ac,
        &Token {
            aud: &sensor_id,
            object: &sensor_id,
            exp: now() + 3,
            cti: *b"cti-sht1",
        },
    );
    assert!(out.status.success(), "{}", stderr(&out));
    std::thread::sleep(Duration::from_secs(4));
    let out = get(None, &short_key);
    assert!(!out.status.success());
    assert!(stderr(&out).starts_with("4.01"), "{}", stderr(&out));
}

#[test]
fn an_unpaired_sensor_trusts_the_key_its_server_identity_names_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport, sport) = (free_port(), free_port(), free_port());
    let state = dir.path().join("sensor");
    let states = state.to_str().unwrap();
    let out = sigil(&["sensor", "--state", states, "--print-identity"]);
    assert!(out.status.success());
    let sensor_id = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    assert!(sigil(&["provision", "--db", dbs, "add", &sensor_id])
        .status
        .success());
    let _server = Kill(secure_server_with(&db, port, dport, &[]));
    wait_ready(port);
    let (ac, ac_pub) = server_key(&db);
    let ac_id = server_identity(&db);
    let log = dir.path().join("sensor.log");
    let _sensor = Kill(
        Command::new(SIGIL)
            .args([
                "sensor",
                "--server",
                &format!("coaps://127.0.0.1:{dport}"),
                "--state",
                states,
                "--dtls",
                "rpk",
                "--server-identity",
                &ac_id,
                "--interval",
                "200ms",
                "--serve",
                &format!("127.0.0.1:{sport}"),
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let (key, public) = client_key(dir.path(), "client.key");
    let token = dir.path().join("token");
    mint(
        &ac,
        &ac_id,
        public,
        &Token {
            aud: &sensor_id,
            object: &format!("{sensor_id}/reading"),
            exp: now() + 600,
            cti: *b"cti-lrn1",
        },
        &token,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = sigil(&[
            "get",
            &format!("coaps://127.0.0.1:{sport}/reading"),
            "--key-file",
            key.to_str().unwrap(),
            "--token-file",
            token.to_str().unwrap(),
            "--rs-identity",
            &sensor_id,
        ]);
        if out.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never served: {}\nsensor: {}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // The key learned in the handshake is kept, and it is the server's.
    let kept = std::fs::read_to_string(state.join("server-key")).unwrap();
    assert_eq!(
        kept.trim(),
        format!("p256:{}", hex::encode(ac_pub.as_bytes()))
    );
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains("server's DTLS handshake"), "{log_text}");
    // The token names /reading only: /history is refused.
    let out = sigil(&[
        "get",
        &format!("coaps://127.0.0.1:{sport}/history"),
        "--key-file",
        key.to_str().unwrap(),
        "--token-file",
        token.to_str().unwrap(),
        "--rs-identity",
        &sensor_id,
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("\n4.03\n"));
}
