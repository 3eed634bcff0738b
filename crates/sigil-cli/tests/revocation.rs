//! Revocation end to end (docs/security.md, "Revocation"): a real `sigil server`, a real
//! `sigil sensor` over coaps:// with a PSK, and the operator's `sigil provision` from another
//! process while the server runs.

mod common;

use common::{first_line, free_port, server_command, sigil, wait_ready, Kill, SIGIL};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `sigil get` of a coap:// path: (success, stdout, stderr).
fn get(port: u16, path: &str) -> (bool, Vec<u8>, String) {
    let out = sigil(&[
        "get",
        &format!("coap://127.0.0.1:{port}/{path}"),
        "--timeout",
        "5s",
    ]);
    (
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Polls the resource lookup until `done` holds for its text (at most 20 s).
fn lookup_until(port: u16, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, body, err) = get(port, "rd-lookup/res");
        let text = String::from_utf8_lossy(&body).into_owned();
        if ok && done(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "lookup: {text} {err}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn provision(db: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["provision", "--db", db.to_str().unwrap()];
    all.extend_from_slice(args);
    sigil(&all)
}

#[test]
fn revocation_reaches_lookups_readings_and_sessions_and_add_does_not_undo_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let state = dir.path().join("sensor");
    let id = first_line(sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--print-identity",
    ]));
    let other = "00112233445566778899aabbccddeeff";
    // The installer's label file: the sensor and another device.
    let labels = dir.path().join("labels.txt");
    std::fs::write(
        &labels,
        format!("{id} device kitchen\n{other} device hall\n"),
    )
    .unwrap();
    let out = provision(&db, &["import", labels.to_str().unwrap()]);
    assert_eq!(
        first_line(out),
        "imported 2 identities (0 already authorized)"
    );
    let psk = first_line(provision(&db, &["psk", &id]));

    let (port, dport) = (free_port(), free_port());
    let log = dir.path().join("server.log");
    let _server = Kill(
        server_command(&db, port, dport, &[])
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_ready(port);
    let _sensor = Kill(
        Command::new(SIGIL)
            .args([
                "sensor",
                "--server",
                &format!("coaps://127.0.0.1:{dport}"),
                "--state",
                state.to_str().unwrap(),
                "--interval",
                "200ms",
                "--dtls",
                "psk",
                "--psk",
                &psk,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    // Registered and publishing: listed with its key, its latest reading served.
    let text = lookup_until(port, |t| t.contains(&id));
    let topic = text
        .split(&format!("127.0.0.1:{port}/"))
        .nth(1)
        .and_then(|t| t.split('>').next())
        .unwrap()
        .to_string();
    assert!(topic.starts_with("ps/"), "{text}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !get(port, &topic).0 {
        assert!(Instant::now() < deadline, "no reading served");
        std::thread::sleep(Duration::from_millis(200));
    }
    let sessions = || {
        sigil_server::Store::open(&db)
            .unwrap()
            .dtls_sessions()
            .unwrap()
            .into_iter()
            .filter(|r| r.identity == id)
            .count()
    };
    assert_eq!(sessions(), 1, "the sensor's session is stored");

    // Revoked from another process while the server runs.
    assert_eq!(
        first_line(provision(&db, &["revoke", &id])),
        format!("revoked {id}")
    );
    let text = lookup_until(port, |t| !t.contains(&id));
    assert!(!text.contains("key="), "no key is shown any more: {text}");
    // `sigil get` prints the code on stderr and the diagnostic payload on stdout.
    let (ok, body, err) = get(port, &topic);
    assert!(!ok);
    assert_eq!((err.trim(), &body[..]), ("4.03", &b"revoked"[..]));
    assert_eq!(sessions(), 0, "its stored session is gone");
    // The server ended the live session and says whose.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(&log).unwrap();
        if log.contains("its identity was revoked") && log.contains(&id) {
            break;
        }
        assert!(Instant::now() < deadline, "server log: {log}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Re-importing the box's labels or adding it again does not bring it back.
    let out = provision(&db, &["import", labels.to_str().unwrap()]);
    assert_eq!(
        first_line(out),
        format!(
            "imported 0 identities (1 already authorized; 1 revoked, skipped: use --reinstate to re-activate: {id})"
        )
    );
    let out = provision(&db, &["add", &id]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{id} was revoked at 2")) && err.contains("--reinstate"),
        "{err}"
    );
    let out = provision(&db, &["psk", &id]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is revoked"),
        "{out:?}"
    );
    let out = provision(&db, &["grant", other, &id]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is revoked"),
        "{out:?}"
    );
    let list = String::from_utf8(provision(&db, &["list"]).stdout).unwrap();
    assert!(
        list.lines()
            .any(|l| l.contains("kitchen") && l.contains("revoked 2")),
        "{list}"
    );
    assert!(!get(port, &topic).0, "still not served");
    // A kit member that is not on the list by name is recorded as revoked.
    let member = "ffeeddccbbaa99887766554433221100";
    assert_eq!(
        first_line(provision(&db, &["revoke", member])),
        format!("revoked {member} (it was not on the list: recorded as revoked, so it is refused even through a kit that lists it)")
    );
    let out = provision(&db, &["revoke", member]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("was already revoked at 2"),
        "{out:?}"
    );

    // Reinstated on purpose: served again.
    assert_eq!(
        first_line(provision(&db, &["add", &id, "--reinstate"])),
        format!("reinstated {id} (device): it is active again")
    );
    assert!(get(port, &topic).0, "served again once reinstated");
    let list = String::from_utf8(provision(&db, &["list"]).stdout).unwrap();
    assert!(
        list.lines()
            .any(|l| l.contains("kitchen") && l.contains("active")),
        "{list}"
    );
}
