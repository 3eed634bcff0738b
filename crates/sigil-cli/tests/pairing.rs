//! Pairing (RFC 8387 §4.1) doing everything it carries, with real processes over loopback: an
//! Ed25519 sensor (the default algorithm) paired from its label goes to the pairing's server
//! URI over coaps:// with the paired server pinned, without `--server`, now and at later
//! starts; `--server` beside it overrides with a warning; the pairing's default subscriber
//! reads the sensor at once and a reader granted the pairing's group reads it too, while
//! another reader is refused.

use std::path::Path;

mod common;
use common::{first_line, free_port, secure_server_with, server_identity, sigil, wait_ready};

fn report(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A fresh state's first boot with `alg`: its identity and public key (`alg:hex`).
fn first_boot(state: &Path, alg: &str) -> (String, String) {
    let out = sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--alg",
        alg,
        "--print-identity",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    (lines[0].to_string(), lines[3].to_string())
}

/// The readings the server stored from `ep`.
fn stored(db: &Path, ep: &str) -> usize {
    let store = sigil_server::Store::open(db).unwrap();
    let keys = store.reading_keys().unwrap();
    keys.iter().filter(|(e, _)| e == ep).count()
}

#[test]
fn an_ed25519_sensor_paired_from_its_label_goes_to_its_server_and_its_readers_read_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport) = (free_port(), free_port());
    let coaps = format!("coaps://127.0.0.1:{dport}");
    let state = dir.path().join("sensor");
    let states = state.to_str().unwrap();
    let (sensor, key) = first_boot(&state, "ed25519");
    assert!(key.starts_with("ed25519:"), "{key}");
    // The subscriber, a reader of the group, and a reader with no grant, each with a PSK.
    let readers: Vec<(String, String)> = ["subscriber", "group-reader", "stranger"]
        .iter()
        .map(|name| {
            let (id, _) = first_boot(&dir.path().join(name), "p256");
            assert!(sigil(&["provision", "--db", dbs, "add", &id])
                .status
                .success());
            let psk = first_line(sigil(&["provision", "--db", dbs, "psk", &id]));
            (id, psk)
        })
        .collect();
    assert!(sigil(&["provision", "--db", dbs, "add", &sensor])
        .status
        .success());
    let mut srv = secure_server_with(&db, port, dport, &["--authorize-reads"]);
    wait_ready(port);

    let group = "5a".repeat(16);
    assert!(sigil(&["provision", "--db", dbs, "add", &group, "--group"])
        .status
        .success());
    assert!(
        sigil(&["provision", "--db", dbs, "grant", &readers[1].0, &group])
            .status
            .success()
    );
    let message = dir.path().join("pairing.cose");
    let out = sigil(&[
        "provision",
        "--db",
        dbs,
        "pair",
        &sensor,
        "--device-key",
        &key,
        "--server-uri",
        &coaps,
        "--group",
        &group,
        "--subscriber",
        &readers[0].0,
        "--out",
        message.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "subscriber {} may now read {sensor}",
            readers[0].0
        )),
        "{err}"
    );
    let pairings =
        String::from_utf8(sigil(&["provision", "--db", dbs, "pairings"]).stdout).unwrap();
    assert!(
        pairings.lines().any(|l| l.starts_with(&sensor)
            && l.contains(&format!("group {group}"))
            && l.contains(&format!("subscriber {}", readers[0].0))
            && l.ends_with(&coaps)),
        "{pairings}"
    );
    let grants = String::from_utf8(sigil(&["provision", "--db", dbs, "grants"]).stdout).unwrap();
    assert!(
        grants
            .lines()
            .any(|l| l.contains(&readers[0].0) && l.contains(&sensor)),
        "{grants}"
    );

    // No --server, no --dtls: the pairing's coaps:// URI, a raw-public-key session pinned to
    // the paired server.
    let sensor_run = |extra: &[&str]| {
        let mut args = vec![
            "sensor",
            "--state",
            states,
            "--alg",
            "ed25519",
            "--interval",
            "100ms",
            "--count",
            "2",
        ];
        args.extend_from_slice(extra);
        sigil(&args)
    };
    let out = sensor_run(&["--pairing", message.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let r = report(&out);
    assert!(
        err.contains(&format!("server {coaps} (from the pairing)")),
        "{err}"
    );
    assert!(
        err.contains(&format!("server {} at {coaps}", server_identity(&db))),
        "{err}"
    );
    assert_eq!(r["acknowledged"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(stored(&db, &sensor), 2);
    // A later start of the same state directory: from the stored pairing.
    let out = sensor_run(&[]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let r = report(&out);
    assert!(
        err.contains(&format!("server {coaps} (from the pairing)")),
        "{err}"
    );
    assert_eq!(r["acknowledged"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(stored(&db, &sensor), 4);
    // --server with the pairing's own address: no warning.
    let out = sensor_run(&["--server", &coaps]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
    report(&out);
    assert_eq!(stored(&db, &sensor), 6);

    // A second sensor whose pairing names an address where no server is (the server moved):
    // --server names the real one and is used, with a warning; the pin still holds.
    let moved_state = dir.path().join("moved");
    let (moved, moved_key) = first_boot(&moved_state, "ed25519");
    assert!(sigil(&["provision", "--db", dbs, "add", &moved])
        .status
        .success());
    let old_uri = format!("coaps://127.0.0.1:{}", free_port());
    let moved_message = dir.path().join("moved.cose");
    let out = sigil(&[
        "provision",
        "--db",
        dbs,
        "pair",
        &moved,
        "--device-key",
        &moved_key,
        "--server-uri",
        &old_uri,
        "--group",
        &group,
        "--subscriber",
        &readers[0].0,
        "--out",
        moved_message.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let out = sigil(&[
        "sensor",
        "--state",
        moved_state.to_str().unwrap(),
        "--pairing",
        moved_message.to_str().unwrap(),
        "--server",
        &coaps,
        "--interval",
        "100ms",
        "--count",
        "1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let r = report(&out);
    assert!(
        err.contains(&format!(
            "warning: --server {coaps} overrides the server URI of this sensor's pairing ({old_uri})"
        )),
        "{err}"
    );
    assert_eq!(r["acknowledged"].as_array().unwrap().len(), 1, "{r}");

    // Readers: the subscriber by its pairing grant, the group reader through the group, a
    // stranger refused.
    let topic = {
        let regs = sigil_server::Store::open(&db)
            .unwrap()
            .registrations()
            .unwrap();
        let reg = regs.iter().find(|r| r.ep.to_string() == sensor).unwrap();
        let href = reg
            .links
            .split('<')
            .nth(1)
            .and_then(|l| l.split('>').next())
            .unwrap()
            .to_string();
        format!("ps/{}{}", reg.id, href)
    };
    let uri = format!("{coaps}/{topic}");
    let get = |(id, psk): &(String, String)| {
        sigil(&[
            "get",
            &uri,
            "--dtls",
            "psk",
            "--psk",
            psk,
            "--psk-identity",
            id,
        ])
    };
    for reader in &readers[..2] {
        let out = get(reader);
        assert!(
            out.status.success(),
            "{}: {}",
            reader.0,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(&out.stdout[..2], b"\xd2\x84", "a COSE_Sign1 reading");
    }
    let out = get(&readers[2]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("4.03"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A revoked device is not paired: the grant would not take effect.
    assert!(sigil(&["provision", "--db", dbs, "revoke", &moved])
        .status
        .success());
    let out = sigil(&[
        "provision",
        "--db",
        dbs,
        "pair",
        &moved,
        "--device-key",
        &moved_key,
        "--group",
        &group,
        "--subscriber",
        &readers[2].0,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("the device {moved} was revoked at")),
        "{err}"
    );
    let grants = String::from_utf8(sigil(&["provision", "--db", dbs, "grants"]).stdout).unwrap();
    assert!(!grants.contains(&readers[2].0), "{grants}");
    srv.kill().unwrap();
    srv.wait().unwrap();
}
