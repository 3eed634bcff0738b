//! Nodes with only a pre-shared key, end to end through the `sigil` binary: `sigil provision
//! psk-node` makes one, `sigil sensor --psk-only mac|session` publishes over its own coaps://
//! session, and `sigil app` shows how each reading is protected: MACed readings verified
//! under the reading key the server discloses to a granted reader, session readings taken on
//! the broker's word.

mod common;
use common::{first_line, free_port, secure_server_with, sigil, wait_ready, Kill};

#[test]
fn psk_only_nodes_publish_and_the_application_shows_their_protection() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport) = (free_port(), free_port());
    let node = |label: &str| {
        let line = first_line(sigil(&[
            "provision",
            "--db",
            dbs,
            "psk-node",
            "--label",
            label,
        ]));
        let (id, psk) = line.split_once(' ').unwrap();
        (id.to_string(), psk.to_string())
    };
    let (mac_id, mac_psk) = node("mac node");
    let (ses_id, ses_psk) = node("session node");
    let (reader, reader_psk) = node("reader");
    assert_ne!(mac_id, ses_id);
    let _srv = Kill(secure_server_with(&db, port, dport, &[]));
    wait_ready(port);
    let server = format!("coaps://127.0.0.1:{dport}");
    let run_node = |mode: &str, id: &str, psk: &str| {
        let st = dir.path().join(mode);
        let out = sigil(&[
            "sensor",
            "--server",
            &server,
            "--state",
            st.to_str().unwrap(),
            "--psk-only",
            mode,
            "--node-identity",
            id,
            "--dtls",
            "psk",
            "--psk",
            psk,
            "--interval",
            "100ms",
            "--count",
            "3",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            report["acknowledged"].as_array().unwrap().len(),
            3,
            "{report}"
        );
        assert_eq!(report["registrations"], 1);
    };
    run_node("mac", &mac_id, &mac_psk);
    run_node("session", &ses_id, &ses_psk);
    // What the broker stored, and how.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let stored = |ep: &str| -> Vec<String> {
        conn.prepare("SELECT protection FROM readings WHERE ep = ?1 ORDER BY seq")
            .unwrap()
            .query_map([ep], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(stored(&mac_id), ["mac"; 3]);
    assert_eq!(stored(&ses_id), ["session"; 3]);
    let keys: Vec<Option<Vec<u8>>> = conn
        .prepare("SELECT public_key FROM registrations ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(keys, [None, None], "PSK-only nodes register no key");
    // The application over the reader's session: without a grant the MACed readings cannot
    // be checked (no reading key), so they fail; the session readings are reported as such.
    // The application's own list: the two nodes as PSK-only nodes.
    let trust = dir.path().join("trust.txt");
    std::fs::write(
        &trust,
        format!("{mac_id} psk-node mac node\n{ses_id} psk-node session node\n"),
    )
    .unwrap();
    let trust_arg = trust.to_str().unwrap().to_string();
    let app = || {
        let out = sigil(&[
            "app",
            "--server",
            &server,
            "--json",
            "--trust",
            &trust_arg,
            "--dtls",
            "psk",
            "--psk",
            &reader_psk,
            "--psk-identity",
            &reader,
        ]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), report)
    };
    let sensor = |report: &serde_json::Value, ep: &str| {
        report["sensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["ep"] == ep)
            .cloned()
            .unwrap()
    };
    let (code, report) = app();
    assert_eq!(code, Some(2), "unverifiable MACed readings are failures");
    let m = sensor(&report, &mac_id);
    assert_eq!(
        (
            m["protection"].as_str(),
            m["verified"].as_u64(),
            m["failed"].as_u64()
        ),
        (Some("mac"), Some(0), Some(3))
    );
    assert!(
        m["readings"][0]["error"].as_str().unwrap().contains("4.03"),
        "{m}"
    );
    let s = sensor(&report, &ses_id);
    assert_eq!(s["protection"], "session");
    assert_eq!(
        (
            s["verified"].as_u64(),
            s["failed"].as_u64(),
            s["unverifiable"].as_u64()
        ),
        (Some(0), Some(0), Some(3))
    );
    assert_eq!(s["readings"][2]["seq"], 3);
    // Granted the MAC node: its reading key comes over the session and all three verify.
    assert!(
        sigil(&["provision", "--db", dbs, "grant", &reader, &mac_id])
            .status
            .success()
    );
    let (code, report) = app();
    assert_eq!(code, Some(0));
    let m = sensor(&report, &mac_id);
    assert_eq!(
        (m["verified"].as_u64(), m["failed"].as_u64()),
        (Some(3), Some(0)),
        "{m}"
    );
    assert_eq!(m["readings"][2]["protection"], "mac");
    assert!(m["readings"][0]["values"][0][1].as_f64().is_some());
    // Listed as a plain device instead, the same identity's unsigned readings are not taken:
    // only the application's own list says a node has no key, not the directory.
    std::fs::write(&trust, format!("{mac_id} device\n{ses_id}\n")).unwrap();
    let (code, report) = app();
    assert_eq!(code, Some(2));
    for ep in [&mac_id, &ses_id] {
        let s = sensor(&report, ep);
        assert_eq!(
            (s["verified"].as_u64(), s["failed"].as_u64()),
            (Some(0), Some(3)),
            "{s}"
        );
        assert!(
            s["readings"][0]["error"]
                .as_str()
                .unwrap()
                .contains("psk-node"),
            "{s}"
        );
    }
    // A node cannot start without its identity, or over plain CoAP.
    let out = sigil(&[
        "sensor",
        "--server",
        &format!("coap://127.0.0.1:{port}"),
        "--state",
        dir.path().join("x").to_str().unwrap(),
        "--psk-only",
        "mac",
        "--node-identity",
        &mac_id,
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("own PSK session"));
    assert!(
        !dir.path().join("x").exists(),
        "a refused argument creates no state"
    );
}
