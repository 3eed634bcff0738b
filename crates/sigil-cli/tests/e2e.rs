//! End to end over loopback UDP with real processes: `sigil server`, `sigil sensor` and
//! `sigil app`, a `kill -9` of the server in the middle of publishing, and the demo with its
//! attacks.

use std::collections::HashSet;
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{
    first_line, free_port, pair, provisioned_p256_sensor, secure_server_with, server_identity,
    sigil, wait_ready, SIGIL,
};

fn server(db: &Path, port: u16) -> Child {
    secure_server(db, port, 0)
}

/// A server with coaps:// on `dtls_port` (0: any free port).
fn secure_server(db: &Path, port: u16, dtls_port: u16) -> Child {
    secure_server_with(db, port, dtls_port, &[])
}

#[test]
fn sensors_server_app_survive_a_server_kill_without_losing_or_duplicating() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let port = free_port();
    let uri = format!("coap://127.0.0.1:{port}");
    // First boot of three sensors; the installer collects their identities.
    let mut labels = String::new();
    for i in 0..3 {
        let state = dir.path().join(format!("s{i}"));
        let alg = if i == 1 { "p256" } else { "ed25519" };
        let out = sigil(&[
            "sensor",
            "--state",
            state.to_str().unwrap(),
            "--alg",
            alg,
            "--print-identity",
        ]);
        assert!(out.status.success());
        let id = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_string();
        labels.push_str(&format!("{id} device sensor {i}\n"));
    }
    let labels_file = dir.path().join("labels.txt");
    std::fs::write(&labels_file, &labels).unwrap();
    assert!(sigil(&[
        "provision",
        "--db",
        db.to_str().unwrap(),
        "import",
        labels_file.to_str().unwrap()
    ])
    .status
    .success());

    let mut srv = server(&db, port);
    wait_ready(port);
    let sensors: Vec<Child> = (0..3)
        .map(|i| {
            let state = dir.path().join(format!("s{i}"));
            let format = if i == 2 { "jws" } else { "cose" };
            Command::new(SIGIL)
                .args([
                    "sensor",
                    "--server",
                    &uri,
                    "--state",
                    state.to_str().unwrap(),
                    "--interval",
                    "100ms",
                    "--count",
                    "40",
                    "--format",
                    format,
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Kill the server (no clean stop) while the sensors publish, then start it again.
    std::thread::sleep(Duration::from_millis(1500));
    srv.kill().unwrap();
    srv.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let mut srv = server(&db, port);
    wait_ready(port);

    let mut acked: HashSet<(String, u64)> = HashSet::new();
    for s in sensors {
        let out = s.wait_with_output().unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        assert!(
            report["rejected"].as_array().unwrap().is_empty(),
            "{report}"
        );
        assert!(
            report["timed_out"].as_array().unwrap().is_empty(),
            "{report}"
        );
        let id = report["identity"].as_str().unwrap().to_string();
        for seq in report["acknowledged"].as_array().unwrap() {
            acked.insert((id.clone(), seq.as_u64().unwrap()));
        }
    }
    assert_eq!(acked.len(), 120, "every reading acknowledged eventually");

    // The application fetches everything and verifies it end to end with its own trust list.
    let out = sigil(&[
        "app",
        "--server",
        &uri,
        "--trust",
        labels_file.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let app: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut verified: HashSet<(String, u64)> = HashSet::new();
    let mut total = 0;
    for s in app["sensors"].as_array().unwrap() {
        assert_eq!(s["trusted"], true);
        assert_eq!(s["failed"], 0, "{s}");
        for r in s["readings"].as_array().unwrap() {
            total += 1;
            verified.insert((
                s["ep"].as_str().unwrap().to_string(),
                r["seq"].as_u64().unwrap(),
            ));
        }
    }
    // Nothing acknowledged is lost, and nothing is stored twice.
    assert!(
        acked.is_subset(&verified),
        "missing: {:?}",
        acked.difference(&verified).collect::<Vec<_>>()
    );
    assert_eq!(total, verified.len());

    // No replay window reopened: a reading stored before the kill is refused now.
    let store = sigil_server::Store::open(&db).unwrap();
    let keys = store.reading_keys().unwrap();
    assert_eq!(keys.len(), verified.len());
    let topic_out = sigil(&["app", "--server", &uri, "--json", "--history", "1"]);
    let app1: serde_json::Value = serde_json::from_slice(&topic_out.stdout).unwrap();
    let topic = app1["sensors"][0]["topic"]
        .as_str()
        .unwrap()
        .trim_start_matches('/')
        .to_string();
    // Fetch the oldest reading of that topic and publish it again from a new socket.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let get = |mid: u16, echo: Option<&[u8]>| {
        let mut buf = [0u8; 512];
        let mut b = sigil_coap::MessageBuilder::new(
            &mut buf,
            sigil_coap::MessageType::Confirmable,
            sigil_coap::Code::GET,
            mid,
            &[7],
        )
        .unwrap();
        b.uri_path(&topic).unwrap();
        b.option(sigil_coap::option::URI_QUERY, b"n=1").unwrap();
        b.option(sigil_coap::option::URI_QUERY, b"after=0").unwrap();
        if let Some(e) = echo {
            b.option(sigil_coap::option::ECHO, e).unwrap();
        }
        let n = b.finish();
        sock.send_to(&buf[..n], ("127.0.0.1", port)).unwrap();
    };
    // The reading is larger than three times the request: the server first asks this new
    // address for an Echo (RFC 9175 §2.4).
    get(7, None);
    let mut rb = [0u8; 2048];
    let (rn, _) = sock.recv_from(&mut rb).unwrap();
    let challenge = sigil_coap::Message::parse(&rb[..rn]).unwrap();
    assert_eq!(challenge.code, sigil_coap::Code::UNAUTHORIZED);
    let echo = challenge.option(sigil_coap::option::ECHO).unwrap().to_vec();
    get(9, Some(&echo));
    let (rn, _) = sock.recv_from(&mut rb).unwrap();
    let resp = sigil_coap::Message::parse(&rb[..rn]).unwrap();
    let mut d = sigil_objects::cbor::Decoder::new(resp.payload);
    assert_eq!(d.array().unwrap(), 1);
    let oldest = d.bytes().unwrap().to_vec();
    let mut buf = vec![0u8; oldest.len() + 64];
    let mut b = sigil_coap::MessageBuilder::new(
        &mut buf,
        sigil_coap::MessageType::Confirmable,
        sigil_coap::Code::PUT,
        8,
        &[8],
    )
    .unwrap();
    b.uri_path(&topic).unwrap();
    let cf = if oldest.first() == Some(&0xd2) {
        18
    } else {
        65100
    };
    b.uint_option(sigil_coap::option::CONTENT_FORMAT, cf)
        .unwrap();
    let n = b.finish_with_payload(&oldest).unwrap();
    sock.send_to(&buf[..n], ("127.0.0.1", port)).unwrap();
    let (rn, _) = sock.recv_from(&mut rb).unwrap();
    assert_eq!(
        sigil_coap::Message::parse(&rb[..rn]).unwrap().mtype,
        sigil_coap::MessageType::Reset,
        "replay after restart must be refused"
    );

    // The malformed corpus does not stop the server.
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/malformed");
    for f in std::fs::read_dir(corpus).unwrap() {
        sock.send_to(
            &std::fs::read(f.unwrap().path()).unwrap(),
            ("127.0.0.1", port),
        )
        .unwrap();
    }
    wait_ready(port);
    srv.kill().unwrap();
    srv.wait().unwrap();
}

#[test]
fn demo_refuses_every_attack_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(SIGIL)
        .args([
            "demo",
            "--sensors",
            "8",
            "--duration",
            "6s",
            "--interval",
            "300ms",
            "--json",
            "--dir",
        ])
        .arg(dir.path().join("demo"))
        .output()
        .unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(out.status.success(), "{summary}");
    assert_eq!(summary["acknowledged_but_missing"], 0);
    assert_eq!(summary["readings_failed_verification"], 0);
    assert!(summary["readings_acknowledged"].as_u64().unwrap() > 20);
    // A follower observed the topics: readings were pushed to it and verified on arrival.
    assert!(
        summary["readings_pushed_to_follower"].as_u64().unwrap() > 8,
        "{summary}"
    );
    assert_eq!(summary["follower_failed"], 0);
    let attacks = summary["attacks"].as_array().unwrap();
    assert_eq!(attacks.len(), 8);
    for a in attacks {
        assert_eq!(a["refused"], true, "{a}");
    }
    let c = &summary["server_counters"];
    for reason in [
        "publish.rejected.replay",
        "publish.rejected.bad_signature",
        "publish.rejected.kid_mismatch",
        "register.rejected.unauthorized_identity",
        "register.rejected.identity_mismatch",
        "register.rejected.not_owner",
    ] {
        assert!(
            c[reason].as_u64().unwrap_or(0) >= 1,
            "{reason} not counted: {c}"
        );
    }
    assert!(c["coap.malformed"].as_u64().unwrap() >= 1000);
    // The access-control part, over coaps://.
    let a = &summary["access"];
    assert_eq!(a["paired"], true, "{a}");
    assert!(a["sensor_acknowledged"].as_u64().unwrap() > 0, "{a}");
    assert_eq!(a["read_without_session"], "4.01", "{a}");
    assert_eq!(a["read_without_ticket"], "4.03", "{a}");
    assert!(a["verified_with_ticket"].as_u64().unwrap() > 0, "{a}");
    assert_eq!(a["ticket_replayed"], "4.01", "{a}");
    assert_eq!(a["sensor_without_ticket"], "4.01", "{a}");
    assert_eq!(a["sensor_with_ticket"], "2.05", "{a}");
    assert_eq!(a["sensor_reading_verified"], true, "{a}");
    // Nodes without public-key crypto: three MACed readings verified by the granted
    // subscriber, three over the node's session reported as such.
    assert_eq!(a["psk_mac_acknowledged"], 3, "{a}");
    assert_eq!(a["psk_mac_verified"], 3, "{a}");
    assert_eq!(a["psk_session_acknowledged"], 3, "{a}");
    assert_eq!(a["psk_session_unverifiable"], 3, "{a}");
    assert!(a["mac_reading_bytes"].as_u64().unwrap() < 100, "{a}");
}

#[test]
fn factory_reset_gives_a_new_identity_and_cli_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s");
    let a = sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--print-identity",
    ]);
    let b = sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--print-identity",
    ]);
    assert_eq!(a.stdout, b.stdout, "identity is stable across boots");
    let c = sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--print-identity",
        "--factory-reset",
    ]);
    assert_ne!(a.stdout, c.stdout, "factory reset makes a new identity");
    let id = String::from_utf8(c.stdout)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let shown = sigil(&["identity", "--state", state.to_str().unwrap()]);
    assert!(String::from_utf8(shown.stdout).unwrap().contains(&id));

    let db = dir.path().join("x.db");
    let bad = sigil(&["provision", "--db", db.to_str().unwrap(), "add", "1234"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("32 hex digits"));
    let list_file = dir.path().join("l.txt");
    std::fs::write(&list_file, format!("{id}\n4B188825\n")).unwrap();
    let bad = sigil(&[
        "provision",
        "--db",
        db.to_str().unwrap(),
        "import",
        list_file.to_str().unwrap(),
    ]);
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("line 2"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(
        sigil(&["provision", "--db", db.to_str().unwrap(), "add", &id])
            .status
            .success()
    );
    assert!(
        sigil(&["provision", "--db", db.to_str().unwrap(), "revoke", &id])
            .status
            .success()
    );
    let list = sigil(&["provision", "--db", db.to_str().unwrap(), "list", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert!(rows[0]["revoked_at"].is_number());
    assert!(!sigil(&["demo", "--duration", "forever"]).status.success());
}

/// coaps:// with real processes: a PSK sensor and a raw-public-key sensor publish through a
/// `kill -9` of the server (their DTLS sessions are restored from its database; a sensor
/// whose retransmissions run out while the server is down handshakes again), and
/// the application, authenticated by its own raw public key, verifies every acknowledged
/// reading end to end. An unprovisioned application gets no session.
#[test]
fn coaps_sensors_and_app_survive_a_server_kill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport) = (free_port(), free_port());
    let coaps = format!("coaps://127.0.0.1:{dport}");
    let ids = p256_identities(dir.path(), &["psk", "rpk"]);
    for id in &ids {
        assert!(sigil(&["provision", "--db", dbs, "add", id])
            .status
            .success());
    }
    let psk = first_line(sigil(&["provision", "--db", dbs, "psk", &ids[0]]));
    assert_eq!(psk.len(), 32);
    // The application's key: made on first use, then provisioned like a device.
    let app_key = dir.path().join("app.key");
    let out = sigil(&[
        "get",
        &format!("coaps://127.0.0.1:{dport}/.well-known/core"),
    ]);
    assert!(!out.status.success(), "coaps:// without --dtls is refused");

    let mut srv = secure_server(&db, port, dport);
    wait_ready(port);
    // The server's identity is stable across restarts (its key lives in the database).
    let server_id = server_identity(&db);
    let out = sigil(&[
        "app",
        "--server",
        &coaps,
        "--dtls",
        "rpk",
        "--server-identity",
        &server_id,
        "--key-file",
        app_key.to_str().unwrap(),
    ]);
    assert!(
        !out.status.success(),
        "an unprovisioned application gets no session"
    );
    let app_id = String::from_utf8_lossy(&out.stderr)
        .split("(provision it): ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert!(
        sigil(&["provision", "--db", dbs, "add", &app_id, "--label", "app"])
            .status
            .success()
    );

    let sensors: Vec<Child> = ["psk", "rpk"]
        .iter()
        .map(|m| {
            let st = dir.path().join(m);
            let mut args = vec![
                "sensor".to_string(),
                "--server".into(),
                coaps.clone(),
                "--state".into(),
                st.to_str().unwrap().into(),
                "--interval".into(),
                "100ms".into(),
                "--count".into(),
                "30".into(),
                "--dtls".into(),
                m.to_string(),
                "--ack-timeout".into(),
                "500ms".into(),
            ];
            if *m == "psk" {
                args.extend(["--psk".into(), psk.clone()]);
            } else {
                args.extend(["--server-identity".into(), server_id.clone()]);
            }
            Command::new(SIGIL)
                .args(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1200));
    srv.kill().unwrap();
    srv.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let mut srv = secure_server(&db, port, dport);
    wait_ready(port);

    let mut acked: HashSet<(String, u64)> = HashSet::new();
    for s in sensors {
        let out = s.wait_with_output().unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        assert!(
            report["rejected"].as_array().unwrap().is_empty(),
            "{report}"
        );
        assert!(report["dtls_handshakes"].as_u64().unwrap() >= 1, "{report}");
        let id = report["identity"].as_str().unwrap().to_string();
        for seq in report["acknowledged"].as_array().unwrap() {
            acked.insert((id.clone(), seq.as_u64().unwrap()));
        }
    }
    assert!(acked.len() >= 50, "{}", acked.len());

    let out = sigil(&[
        "app",
        "--server",
        &coaps,
        "--dtls",
        "rpk",
        "--server-identity",
        &server_id,
        "--key-file",
        app_key.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let app: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut verified: HashSet<(String, u64)> = HashSet::new();
    for s in app["sensors"].as_array().unwrap() {
        assert_eq!(s["failed"], 0, "{s}");
        for r in s["readings"].as_array().unwrap() {
            verified.insert((
                s["ep"].as_str().unwrap().to_string(),
                r["seq"].as_u64().unwrap(),
            ));
        }
    }
    assert!(
        acked.is_subset(&verified),
        "missing: {:?}",
        acked.difference(&verified).collect::<Vec<_>>()
    );
    // A wrong pinned server identity fails the handshake.
    let out = sigil(&[
        "get",
        &format!("{coaps}/.well-known/core"),
        "--dtls",
        "rpk",
        "--server-identity",
        &ids[0],
        "--key-file",
        app_key.to_str().unwrap(),
        "--dtls-timeout",
        "200ms",
    ]);
    assert!(!out.status.success());
    srv.kill().unwrap();
    srv.wait().unwrap();
}

/// `sigil app --trust <file> --json`: its exit status and report.
fn app_report(uri: &str, trust: &Path) -> (i32, serde_json::Value) {
    let out = sigil(&[
        "app",
        "--server",
        uri,
        "--trust",
        trust.to_str().unwrap(),
        "--json",
    ]);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), report)
}

/// The application trusts neither the broker's storage nor the directory (RFC 8387 §7): a
/// stored reading changed after it was accepted fails its own check, and a directory that
/// hands out another key under the sensor's identity (with readings that key really signed)
/// is refused because that key does not hash to the identity.
#[test]
fn app_refuses_a_tampered_stored_reading_and_a_lying_directory() {
    use sigil_crypto::{CryptoProvider, Rng, RustCrypto, SignatureAlgorithm};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let port = free_port();
    let uri = format!("coap://127.0.0.1:{port}");
    let state = dir.path().join("s");
    let state = state.to_str().unwrap();
    let ep = first_line(sigil(&["sensor", "--state", state, "--print-identity"]));
    let trust = dir.path().join("trust.txt");
    std::fs::write(&trust, format!("{ep} device kitchen\n")).unwrap();
    let imported = sigil(
        &["provision", "--db", db.to_str().unwrap(), "import"]
            .into_iter()
            .chain([trust.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    assert!(imported.status.success());
    let mut srv = server(&db, port);
    wait_ready(port);
    let out = sigil(&[
        "sensor",
        "--server",
        &uri,
        "--state",
        state,
        "--interval",
        "50ms",
        "--count",
        "3",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, report) = app_report(&uri, &trust);
    let sensor = &report["sensors"][0];
    assert_eq!(
        (code, &sensor["verified"], &sensor["failed"]),
        (0, &3.into(), &0.into()),
        "{report}"
    );
    assert_eq!(sensor["key_matches_identity"], true);
    assert_eq!(sensor["trusted"], true);

    // 1. One stored reading changed in the database between store and read.
    srv.kill().unwrap();
    srv.wait().unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (id, mut raw): (i64, Vec<u8>) = conn
        .query_row(
            "SELECT id, raw FROM readings WHERE ep = ?1 ORDER BY seq DESC LIMIT 1",
            [&ep],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    // The last byte of the SenML payload, just before the signature's 58 40 header.
    let at = raw.len() - 64 - 2 - 1;
    assert_eq!(&raw[at + 1..at + 3], &[0x58, 0x40]);
    raw[at] ^= 0x01;
    conn.execute(
        "UPDATE readings SET raw = ?1 WHERE id = ?2",
        rusqlite::params![raw, id],
    )
    .unwrap();
    let mut srv = server(&db, port);
    wait_ready(port);
    let (code, report) = app_report(&uri, &trust);
    let sensor = &report["sensors"][0];
    assert_eq!(
        code, 2,
        "a failed reading makes the application fail: {report}"
    );
    assert_eq!(
        (&sensor["verified"], &sensor["failed"]),
        (&2.into(), &1.into()),
        "{report}"
    );
    let failed: Vec<_> = sensor["readings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["verified"] == false)
        .collect();
    assert_eq!(failed.len(), 1);
    assert!(failed[0]["error"].is_string(), "{report}");

    // 2. The directory lies: the registration now carries another key, and every stored
    // reading is re-signed with it under the sensor's identity, so each signature verifies
    // under the key the directory hands out. Only the key -> identity binding catches it.
    srv.kill().unwrap();
    srv.wait().unwrap();
    struct Fixed;
    impl Rng for Fixed {
        fn fill(&mut self, buf: &mut [u8]) -> Result<(), sigil_crypto::CryptoError> {
            buf.fill(0x5a);
            Ok(())
        }
    }
    let rogue = RustCrypto
        .generate(SignatureAlgorithm::Ed25519, &mut Fixed)
        .unwrap();
    let rogue_pk = RustCrypto.public_key(&rogue).unwrap();
    let victim = sigil_identity::Identity::parse(&ep).unwrap();
    conn.execute(
        "UPDATE registrations SET alg = ?1, public_key = ?2 WHERE ep = ?3",
        rusqlite::params![SignatureAlgorithm::Ed25519.cose(), rogue_pk.as_bytes(), ep],
    )
    .unwrap();
    let rows: Vec<(i64, Vec<u8>)> = conn
        .prepare("SELECT id, raw FROM readings WHERE ep = ?1")
        .unwrap()
        .query_map([&ep], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (id, raw) in rows {
        let r =
            sigil_objects::SignedReading::parse(sigil_objects::ReadingFormat::Cose, &raw).unwrap();
        let sigil_objects::cose::SeqField::Full(seq) = r.seq else {
            panic!("full sequence numbers expected")
        };
        let mut buf = vec![0u8; r.senml_len_bound()];
        let senml = r.senml(&mut buf).unwrap().to_vec();
        let fresh = sigil_objects::Freshness {
            seq,
            lsb_bits: None,
            timestamp: r.timestamp,
        };
        let (mut scratch, mut out) = (vec![0u8; 1024], vec![0u8; 1024]);
        let n = sigil_objects::reading::sign_reading(
            &RustCrypto,
            &rogue,
            &victim,
            sigil_objects::ReadingFormat::Cose,
            &fresh,
            &senml,
            &mut scratch,
            &mut out,
        )
        .unwrap();
        // The forged reading does verify under the lying key: what is left is the binding.
        let forged =
            sigil_objects::SignedReading::parse(sigil_objects::ReadingFormat::Cose, &out[..n])
                .unwrap();
        let mut s = vec![0u8; forged.scratch_len()];
        forged
            .verify_end_to_end(&RustCrypto, &rogue_pk, &victim, seq, &mut s)
            .unwrap();
        conn.execute(
            "UPDATE readings SET raw = ?1 WHERE id = ?2",
            rusqlite::params![&out[..n], id],
        )
        .unwrap();
    }
    drop(conn);
    let mut srv = server(&db, port);
    wait_ready(port);
    let (code, report) = app_report(&uri, &trust);
    let sensor = &report["sensors"][0];
    assert_eq!(sensor["ep"], ep.as_str());
    assert_eq!(code, 2, "{report}");
    assert_eq!(sensor["key_matches_identity"], false, "{report}");
    assert_eq!(sensor["trusted"], false, "{report}");
    assert_eq!(
        (&sensor["verified"], &sensor["failed"]),
        (&0.into(), &3.into()),
        "{report}"
    );
    srv.kill().unwrap();
    srv.wait().unwrap();
}

/// A coaps:// sensor started before its server: its handshakes fail (nothing listens), it
/// keeps retrying with back-off instead of exiting, and once `sigil server` starts on that
/// port with the sensor's PSK provisioned, every reading is acknowledged and stored.
#[test]
fn coaps_sensor_retries_its_handshake_until_the_server_starts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let state = dir.path().join("s");
    let id = first_line(sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--print-identity",
    ]));
    assert!(sigil(&["provision", "--db", dbs, "add", &id])
        .status
        .success());
    let psk = first_line(sigil(&["provision", "--db", dbs, "psk", &id]));
    let (port, dport) = (free_port(), free_port());
    let started = Instant::now();
    let mut sensor = Command::new(SIGIL)
        .args([
            "sensor",
            "--server",
            &format!("coaps://127.0.0.1:{dport}"),
            "--state",
            state.to_str().unwrap(),
            "--dtls",
            "psk",
            "--psk",
            &psk,
            "--dtls-timeout",
            "100ms",
            "--dtls-retransmit",
            "2",
            "--interval",
            "100ms",
            "--count",
            "5",
            "--ack-timeout",
            "500ms",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Each attempt gives up after 0.7 s; in 3 s the first one has failed long since.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        sensor.try_wait().unwrap().is_none(),
        "the sensor exited instead of retrying its handshake"
    );
    let mut srv = secure_server(&db, port, dport);
    wait_ready(port);
    let deadline = started + Duration::from_secs(30);
    while sensor.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if sensor.try_wait().unwrap().is_none() {
        sensor.kill().unwrap();
    }
    let out = sensor.wait_with_output().unwrap();
    srv.kill().unwrap();
    srv.wait().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("retrying"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let acked = report["acknowledged"].as_array().unwrap();
    assert_eq!(acked.len(), 5, "{report}");
    assert!(report["dtls_handshakes"].as_u64().unwrap() >= 1, "{report}");
    let stored = sigil_server::Store::open(&db)
        .unwrap()
        .reading_keys()
        .unwrap();
    for seq in acked {
        assert!(
            stored.contains(&(id.clone(), seq.as_u64().unwrap())),
            "acknowledged reading {seq} not stored: {stored:?}"
        );
    }
}

/// Ctrl-C (SIGINT) stops a coaps:// sensor promptly while its handshake is still being
/// retransmitted to a server that is not there.
#[cfg(unix)]
#[test]
fn ctrl_c_stops_a_sensor_in_the_middle_of_its_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s");
    let mut sensor = Command::new(SIGIL)
        .args([
            "sensor",
            "--server",
            &format!("coaps://127.0.0.1:{}", free_port()),
            "--state",
            state.to_str().unwrap(),
            "--dtls",
            "psk",
            "--psk",
            "00112233445566778899aabbccddeeff",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Default DTLS timers: at 2 s the first handshake is waiting for its third flight.
    std::thread::sleep(Duration::from_secs(2));
    assert!(sensor.try_wait().unwrap().is_none());
    let sent = Instant::now();
    assert!(Command::new("kill")
        .args(["-INT", &sensor.id().to_string()])
        .status()
        .unwrap()
        .success());
    while sensor.try_wait().unwrap().is_none() && sent.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if sensor.try_wait().unwrap().is_none() {
        sensor.kill().unwrap();
        panic!("the sensor did not stop within 5 s of Ctrl-C");
    }
    let out = sensor.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["acknowledged"].as_array().unwrap().is_empty());
}

/// The server keeps established coaps:// sessions in its database: a PSK sensor publishes
/// through a `kill -9` of the server without a new handshake. The restarted server restored
/// the session (and made no handshake), dropped none of the sensor's records (no sequence
/// number was replayed or refused), and the readings after the restart were acknowledged.
/// The server is down for well under the sensor's two retransmissions (its cue to handshake
/// again, `--ack-timeout 1s`: the second comes 3 s after the first send).
#[cfg(unix)]
#[test]
fn a_coaps_session_survives_a_server_kill_without_a_handshake() {
    session_survives_a_server_kill("records");
}

/// The same for a session whose handshake was carried as a CoAP resource: once established
/// it is an ordinary session, stored and restored the same way.
#[cfg(unix)]
#[test]
fn a_session_made_over_coap_survives_a_server_kill_without_a_handshake() {
    session_survives_a_server_kill("coap");
}

#[cfg(unix)]
fn session_survives_a_server_kill(carrier: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport) = (free_port(), free_port());
    let coaps = format!("coaps://127.0.0.1:{dport}");
    let st = dir.path().join("psk");
    let id = first_line(sigil(&[
        "sensor",
        "--state",
        st.to_str().unwrap(),
        "--print-identity",
    ]));
    assert!(sigil(&["provision", "--db", dbs, "add", &id])
        .status
        .success());
    let psk = first_line(sigil(&["provision", "--db", dbs, "psk", &id]));
    let mut srv = secure_server(&db, port, dport);
    wait_ready(port);
    let sensor = Command::new(SIGIL)
        .args([
            "sensor",
            "--server",
            &coaps,
            "--state",
            st.to_str().unwrap(),
            "--interval",
            "100ms",
            "--count",
            "30",
            "--dtls",
            "psk",
            "--psk",
            &psk,
            "--dtls-carrier",
            carrier,
            "--ack-timeout",
            // The server is away about a second: a sensor would give the session up only
            // after two retransmissions (2 s + 4 s), long after the server is back.
            "2s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    srv.kill().unwrap();
    srv.wait().unwrap();
    let stored = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT count(*) FROM dtls_sessions", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap();
    assert_eq!(stored, 1, "the session was in the database at the kill");
    std::thread::sleep(Duration::from_millis(500));
    let srv = Command::new(SIGIL)
        .args([
            "server",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--dtls-listen",
            &format!("127.0.0.1:{dport}"),
            "--db",
            dbs,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(port);

    let out = sensor.wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert!(
        report["rejected"].as_array().unwrap().is_empty(),
        "{report}"
    );
    assert_eq!(
        report["dtls_handshakes"].as_u64(),
        Some(1),
        "no new handshake after the kill: {report}"
    );
    let acked: Vec<u64> = report["acknowledged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(acked.len() >= 25, "{report}");

    assert!(Command::new("kill")
        .args(["-INT", &srv.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = srv.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let json = &stderr[stderr.find("{\n").expect("the server's counters")..];
    let stats: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    let n = |k: &str| stats[k].as_u64().unwrap_or(0);
    assert_eq!(n("dtls.session_restored"), 1, "{stats}");
    assert_eq!(n("dtls.handshake_started"), 0, "{stats}");
    assert_eq!(n("dtls.handshake_completed"), 0, "{stats}");
    assert_eq!(n("dtls.records_dropped"), 0, "{stats}");
    assert_eq!(n("dtls.no_session"), 0, "{stats}");
    assert!(n("dtls.app_records") >= 1, "{stats}");
}

/// A coaps:// sensor keeps its DTLS association in its state directory: killed with SIGKILL
/// between readings and started again (from a new source port), it publishes in the same
/// session without a handshake. The server made one handshake in all, followed the session
/// by its connection ID, and dropped none of the sensor's records: no record sequence number
/// was used twice.
#[cfg(unix)]
#[test]
fn a_sensor_killed_between_readings_resumes_its_association_without_a_handshake() {
    killed_sensor_resumes_its_association("records");
}

/// The same over the CoAP carrier (`--dtls-carrier coap`): the handshake is `PUT /dtls` on
/// the coaps:// port, the readings DTLS records, the association kept the same way.
#[cfg(unix)]
#[test]
fn a_sensor_with_its_handshake_over_coap_publishes_and_resumes_after_kill_9() {
    killed_sensor_resumes_its_association("coap");
}

#[cfg(unix)]
fn killed_sensor_resumes_its_association(carrier: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport) = (free_port(), free_port());
    let coaps = format!("coaps://127.0.0.1:{dport}");
    let st = dir.path().join("psk");
    let id = first_line(sigil(&[
        "sensor",
        "--state",
        st.to_str().unwrap(),
        "--print-identity",
    ]));
    assert!(sigil(&["provision", "--db", dbs, "add", &id])
        .status
        .success());
    let psk = first_line(sigil(&["provision", "--db", dbs, "psk", &id]));
    let srv = Command::new(SIGIL)
        .args([
            "server",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--dtls-listen",
            &format!("127.0.0.1:{dport}"),
            "--db",
            dbs,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(port);
    let sensor = |count: &str| {
        Command::new(SIGIL)
            .args([
                "sensor",
                "--server",
                &coaps,
                "--state",
                st.to_str().unwrap(),
                "--interval",
                "100ms",
                "--count",
                count,
                "--dtls",
                "psk",
                "--psk",
                &psk,
                "--dtls-carrier",
                carrier,
                "--ack-timeout",
                "1s",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut first = sensor("1000");
    std::thread::sleep(Duration::from_millis(2500));
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(st.join("dtls-association").exists());

    let out = sensor("10").wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(report["dtls_restored"].as_u64(), Some(1), "{report}");
    assert_eq!(report["dtls_handshakes"].as_u64(), Some(0), "{report}");
    assert!(
        report["rejected"].as_array().unwrap().is_empty(),
        "{report}"
    );
    assert_eq!(
        report["acknowledged"].as_array().unwrap().len(),
        10,
        "{report}"
    );
    // One write at the restore; 10 readings stay within one reservation.
    assert_eq!(
        report["dtls_association_writes"].as_u64(),
        Some(1),
        "{report}"
    );
    // A clean exit keeps the association (and the server its session) for the next start.
    assert!(st.join("dtls-association").exists());

    assert!(Command::new("kill")
        .args(["-INT", &srv.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = srv.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let json = &stderr[stderr.find("{\n").expect("the server's counters")..];
    let stats: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    let n = |k: &str| stats[k].as_u64().unwrap_or(0);
    assert_eq!(n("dtls.handshake_completed"), 1, "{stats}");
    assert_eq!(n("dtls.address_changed"), 1, "{stats}");
    assert_eq!(n("dtls.records_dropped"), 0, "{stats}");
    assert_eq!(n("dtls.no_session"), 0, "{stats}");
    let over_coap = u64::from(carrier == "coap");
    assert_eq!(n("dtls_coap.handshake_completed"), over_coap, "{stats}");
    assert_eq!(n("dtls.handshake_started"), 1 - over_coap, "{stats}");
    assert!(n("publish.accepted") >= 11, "{stats}");
}

/// A sensor whose kept association the server no longer has (here: the server restarted
/// without its stored sessions) is not answered in it; after two retransmissions it makes a
/// full handshake and publishes every reading.
#[cfg(unix)]
#[test]
fn a_sensor_whose_association_the_server_lost_handshakes_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport) = (free_port(), free_port());
    let coaps = format!("coaps://127.0.0.1:{dport}");
    let st = dir.path().join("psk");
    let id = first_line(sigil(&[
        "sensor",
        "--state",
        st.to_str().unwrap(),
        "--print-identity",
    ]));
    assert!(sigil(&["provision", "--db", dbs, "add", &id])
        .status
        .success());
    let psk = first_line(sigil(&["provision", "--db", dbs, "psk", &id]));
    let mut srv = secure_server(&db, port, dport);
    wait_ready(port);
    let sensor = |count: &str| {
        Command::new(SIGIL)
            .args([
                "sensor",
                "--server",
                &coaps,
                "--state",
                st.to_str().unwrap(),
                "--interval",
                "100ms",
                "--count",
                count,
                "--dtls",
                "psk",
                "--psk",
                &psk,
                "--ack-timeout",
                "300ms",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut first = sensor("1000");
    std::thread::sleep(Duration::from_millis(2000));
    first.kill().unwrap();
    first.wait().unwrap();
    srv.kill().unwrap();
    srv.wait().unwrap();
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute("DELETE FROM dtls_sessions", [])
        .unwrap();
    let mut srv = secure_server(&db, port, dport);
    wait_ready(port);

    let out = sensor("5").wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(report["dtls_restored"].as_u64(), Some(1), "{report}");
    // At least the one handshake that replaces the lost association; on a loaded machine a
    // 300 ms acknowledgement timeout can add a resumption after it.
    assert!(
        report["dtls_handshakes"].as_u64().is_some_and(|n| n >= 1),
        "{report}"
    );
    assert!(
        report["rejected"].as_array().unwrap().is_empty(),
        "{report}"
    );
    assert_eq!(
        report["acknowledged"].as_array().unwrap().len(),
        5,
        "{report}"
    );
    srv.kill().unwrap();
    srv.wait().unwrap();
}

/// Pairing (RFC 8387 §4.1) end to end: `sigil provision pair` signs with the server's own DTLS
/// key from its database; the sensor applies the message and, over coaps:// with a raw public
/// key, pins the server it was paired with instead of needing `--server-identity`, now and
/// after a restart. A different `--server-identity` is refused.
#[test]
fn a_paired_sensor_pins_its_server_over_coaps() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let (port, dport) = (free_port(), free_port());
    let coaps = format!("coaps://127.0.0.1:{dport}");
    let state = dir.path().join("sensor");
    let states = state.to_str().unwrap();
    let (identity, key) = provisioned_p256_sensor(&db, &state);
    let mut srv = secure_server(&db, port, dport);
    wait_ready(port);

    let message = dir.path().join("pairing.cose");
    pair(&db, &identity, &key, &message);
    let server_id = server_identity(&db);
    let sensor = |extra: &[&str]| {
        let mut args = vec![
            "sensor",
            "--server",
            &coaps,
            "--state",
            states,
            "--dtls",
            "rpk",
            "--interval",
            "100ms",
            "--count",
            "2",
        ];
        args.extend_from_slice(extra);
        sigil(&args)
    };
    let out = sensor(&["--pairing", message.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("server {server_id}")), "{err}");
    // Restarted without the message: the stored pairing still names the server.
    let out = sensor(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sensor(&["--server-identity", &"77".repeat(16)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("is not the server this sensor is paired with"));
    srv.kill().unwrap();
    srv.wait().unwrap();
}

/// `sigil server --authorize-reads` with its access-control server, driven from the command
/// line: a reader that is refused without a grant gets no token for the sensor either; once
/// granted, `sigil token` writes a token and `sigil get --token` reads through the session the
/// token's PoP key opens (RFC 9202).
#[test]
fn a_reader_gets_a_token_from_the_cli_and_reads_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport) = (free_port(), free_port());
    let ids = p256_identities(dir.path(), &["sensor", "reader"]);
    let (sensor, reader) = (&ids[0], &ids[1]);
    for id in &ids {
        assert!(sigil(&["provision", "--db", dbs, "add", id])
            .status
            .success());
    }
    let psk = first_line(sigil(&["provision", "--db", dbs, "psk", reader]));
    let mut srv = secure_server_with(&db, port, dport, &["--authorize-reads"]);
    wait_ready(port);
    let st = dir.path().join("sensor");
    let out = sigil(&[
        "sensor",
        "--server",
        &format!("coap://127.0.0.1:{port}"),
        "--state",
        st.to_str().unwrap(),
        "--interval",
        "100ms",
        "--count",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let topic = {
        let regs = sigil_server::Store::open(&db)
            .unwrap()
            .registrations()
            .unwrap();
        let href = regs[0]
            .links
            .split('<')
            .nth(1)
            .and_then(|l| l.split('>').next())
            .unwrap()
            .to_string();
        format!("ps/{}{}", regs[0].id, href)
    };
    let uri = format!("coaps://127.0.0.1:{dport}/{topic}");
    let creds = [
        "--dtls",
        "psk",
        "--psk",
        psk.as_str(),
        "--psk-identity",
        reader.as_str(),
    ];
    let get = |extra: &[&str]| {
        let mut args = vec!["get", uri.as_str()];
        args.extend_from_slice(&creds);
        args.extend_from_slice(extra);
        sigil(&args)
    };
    // Its own session, no grant: 4.03; no token for the sensor either.
    let out = get(&[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("4.03"));
    let out = get(&["--token", "--scope", sensor]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid_scope"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Granted: a token, and a read through it.
    assert!(sigil(&["provision", "--db", dbs, "grant", reader, sensor])
        .status
        .success());
    let out = get(&["--token", "--scope", sensor]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("access token:") && err.contains("2.05"),
        "{err}"
    );
    let file = dir.path().join("token.cwt");
    let server_uri = format!("coaps://127.0.0.1:{dport}");
    let mut args = vec![
        "token",
        "--server",
        server_uri.as_str(),
        "--scope",
        sensor.as_str(),
        "--out",
        file.to_str().unwrap(),
    ];
    args.extend_from_slice(&creds);
    let out = sigil(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = j["token_bytes"].as_u64().unwrap();
    assert_eq!(std::fs::read(&file).unwrap().len() as u64, n);
    assert_eq!(j["pop"], "symmetric (PSK)");
    srv.kill().unwrap();
    srv.wait().unwrap();
}

/// The `/token` rates are the operator's: `sigil server --token-rate-subject 2,3600` lets one
/// subject have two tokens at once and then one an hour, over however many sessions; the third
/// `sigil token` (each a session of its own) is refused with the subject's bucket named, and
/// another subject is still served.
#[test]
fn the_operator_sets_the_token_rate_per_subject() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport) = (free_port(), free_port());
    let ids = p256_identities(dir.path(), &["sensor", "reader", "other"]);
    let sensor = &ids[0];
    let mut psks = Vec::new();
    for id in &ids {
        assert!(sigil(&["provision", "--db", dbs, "add", id])
            .status
            .success());
        psks.push(first_line(sigil(&["provision", "--db", dbs, "psk", id])));
    }
    for reader in &ids[1..] {
        assert!(sigil(&["provision", "--db", dbs, "grant", reader, sensor])
            .status
            .success());
    }
    let mut srv = secure_server_with(
        &db,
        port,
        dport,
        &["--authorize-reads", "--token-rate-subject", "2,3600"],
    );
    wait_ready(port);
    let server_uri = format!("coaps://127.0.0.1:{dport}");
    let out_file = dir.path().join("token.cwt");
    let token = |who: usize| {
        sigil(&[
            "token",
            "--out",
            out_file.to_str().unwrap(),
            "--server",
            server_uri.as_str(),
            "--scope",
            sensor.as_str(),
            "--dtls",
            "psk",
            "--psk",
            psks[who].as_str(),
            "--psk-identity",
            ids[who].as_str(),
        ])
    };
    for i in 0..2 {
        let out = token(1);
        assert!(
            out.status.success(),
            "token {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = token(1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a third token within the hour");
    assert!(
        err.contains("rate limited") && err.contains("5.03"),
        "the refusal says why: {err}"
    );
    let out = token(2);
    assert!(
        out.status.success(),
        "another subject: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A malformed rate is refused at start, with the form it takes.
    let bad = sigil(&["server", "--db", dbs, "--token-rate-subject", "12"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("BURST,SECONDS"));
    srv.kill().unwrap();
    srv.wait().unwrap();
}

/// The identities of new P-256 sensors, one state directory under `dir` per name.
fn p256_identities(dir: &std::path::Path, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|m| {
            let st = dir.join(m);
            first_line(sigil(&[
                "sensor",
                "--state",
                st.to_str().unwrap(),
                "--alg",
                "p256",
                "--print-identity",
            ]))
        })
        .collect()
}
