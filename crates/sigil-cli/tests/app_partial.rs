//! `sigil app` for a reader granted some sensors only, through the `sigil` binary against
//! `sigil server --authorize-reads`: it shows every sensor it may read, lists the others with
//! the reason and the fix, exits with the documented status, selects with `--sensor`, works
//! the same through an access token, says when the identities came from the directory
//! unchecked, names the reason of every failed reading, and reports a topic the server fails
//! to serve (5.xx) as not readable while still reading the others.

mod common;
use common::{first_line, free_port, secure_server_with, sigil, wait_ready, Kill};
use std::process::Output;

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn sensor<'a>(report: &'a serde_json::Value, ep: &str) -> &'a serde_json::Value {
    report["sensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["ep"] == ep)
        .unwrap_or_else(|| panic!("{ep} not in {report}"))
}

#[test]
fn a_reader_granted_two_of_three_sensors_reads_those_and_is_told_why_not_the_third() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport) = (free_port(), free_port());
    let state = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let sensors: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|n| first_line(sigil(&["sensor", "--state", &state(n), "--print-identity"])))
        .collect();
    let reader = first_line(sigil(&[
        "sensor",
        "--state",
        &state("reader"),
        "--alg",
        "p256",
        "--print-identity",
    ]));
    for id in sensors.iter().chain([&reader]) {
        assert!(sigil(&["provision", "--db", dbs, "add", id])
            .status
            .success());
    }
    let psk = first_line(sigil(&["provision", "--db", dbs, "psk", &reader]));
    for granted in &sensors[..2] {
        assert!(
            sigil(&["provision", "--db", dbs, "grant", &reader, granted])
                .status
                .success()
        );
    }
    let _srv = Kill(secure_server_with(&db, port, dport, &["--authorize-reads"]));
    wait_ready(port);
    for n in ["a", "b", "c"] {
        let out = sigil(&[
            "sensor",
            "--server",
            &format!("coap://127.0.0.1:{port}"),
            "--state",
            &state(n),
            "--interval",
            "50ms",
            "--count",
            "2",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let server = format!("coaps://127.0.0.1:{dport}");
    let app = |extra: &[&str]| {
        let mut args = vec![
            "app",
            "--server",
            server.as_str(),
            "--dtls",
            "psk",
            "--psk",
            psk.as_str(),
            "--psk-identity",
            reader.as_str(),
        ];
        args.extend_from_slice(extra);
        sigil(&args)
    };

    // Every sensor it may read, shown and verified; the third listed with the reason and the
    // fix; exit status 3 (some sensors not readable).
    for extra in [&["--json"][..], &["--json", "--token"][..]] {
        let out = app(extra);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report = json(&out);
        assert_eq!(report["identities"], "directory, unchecked", "{report}");
        assert_eq!(report["sensors"].as_array().unwrap().len(), 3, "{report}");
        for granted in &sensors[..2] {
            let s = sensor(&report, granted);
            assert_eq!(s["readable"], true, "{s}");
            assert_eq!(
                (s["verified"].as_u64(), s["failed"].as_u64()),
                (Some(2), Some(0))
            );
        }
        let refused = sensor(&report, &sensors[2]);
        assert_eq!(refused["readable"], false, "{refused}");
        let why = refused["refused"].as_str().unwrap();
        assert!(why.starts_with("not granted (4.03"), "{why}");
        assert!(
            why.contains(&format!("sigil provision grant {reader} {}", sensors[2])),
            "{why}"
        );
    }

    // The table: the header and the footer say the identities are unchecked, and the refused
    // sensor is named with its reason.
    let out = app(&[]);
    assert_eq!(out.status.code(), Some(3));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.starts_with("identities: from the directory, unchecked"),
        "{table}"
    );
    assert!(table.contains("NOT READABLE"), "{table}");
    assert!(table.contains("not readable: not granted (4.03"), "{table}");
    assert!(
        table.contains(
            "4 readings verified end to end (against identities from the directory, unchecked)"
        ),
        "{table}"
    );
    assert!(table.contains("1 of 3 sensors not readable"), "{table}");

    // --sensor selects: a granted one alone is all verified (0); the refused one alone means
    // nothing could be read (1); one the directory does not know is listed as such.
    let out = app(&["--json", "--sensor", &sensors[0]]);
    assert_eq!(out.status.code(), Some(0));
    let report = json(&out);
    assert_eq!(report["sensors"].as_array().unwrap().len(), 1);
    assert_eq!(report["sensors"][0]["ep"], sensors[0].as_str());
    let out = app(&["--json", "--sensor", &sensors[2]]);
    assert_eq!(out.status.code(), Some(1));
    let out = app(&["--json", "--sensor", &sensors[1], "--sensor", &reader]);
    assert_eq!(out.status.code(), Some(3));
    let report = json(&out);
    let missing = sensor(&report, &reader);
    assert!(
        missing["refused"]
            .as_str()
            .unwrap()
            .contains("not in the directory"),
        "{missing}"
    );
    let out = app(&["--sensor", "not-an-identity"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sensor not-an-identity"));

    // With its own list naming only the first sensor: the identities come from the list, and
    // the second sensor's readings fail with the reason in the table (exit 2).
    let trust = dir.path().join("trust.txt");
    std::fs::write(&trust, format!("{} device\n", sensors[0])).unwrap();
    let trust = trust.to_str().unwrap();
    let out = app(&["--json", "--trust", trust]);
    assert_eq!(out.status.code(), Some(2));
    let report = json(&out);
    assert_eq!(report["identities"], "trust list");
    let s = sensor(&report, &sensors[1]);
    assert_eq!(s["failed"], 2, "{s}");
    assert_eq!(s["problems"][0]["readings"], 2, "{s}");
    assert!(
        s["problems"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("not on this application's trust list"),
        "{s}"
    );
    let out = app(&["--trust", trust]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(!table.contains("unchecked"), "{table}");
    let label = s["label"].as_str().unwrap();
    assert!(
        table.contains(&format!(
            "{label} 2 readings failed: {} is not on this application's trust list",
            sensors[1]
        )),
        "{table}"
    );

    // The server failing for one topic (a 5.00: the first sensor's stored readings damaged
    // behind its back) makes that sensor not readable with the reason and the fix; the other
    // granted sensor is still read and verified, and the status is 3, not an error.
    let damage = rusqlite::Connection::open(&db).unwrap();
    damage
        .busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    let n = damage
        .execute(
            "UPDATE readings SET content_format = 'damaged' WHERE ep = ?1",
            [&sensors[0]],
        )
        .unwrap();
    assert_eq!(n, 2);
    drop(damage);
    let out = app(&["--json"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    let failing = sensor(&report, &sensors[0]);
    assert_eq!(failing["readable"], false, "{failing}");
    let why = failing["refused"].as_str().unwrap();
    assert!(why.starts_with("server error (5.00"), "{why}");
    assert!(why.contains("try again"), "{why}");
    let s = sensor(&report, &sensors[1]);
    assert_eq!(
        (s["readable"].as_bool(), s["verified"].as_u64()),
        (Some(true), Some(2)),
        "{s}"
    );
    let out = app(&[]);
    assert_eq!(out.status.code(), Some(3));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("not readable: server error (5.00"),
        "{table}"
    );
    assert!(table.contains("2 of 3 sensors not readable"), "{table}");
}
