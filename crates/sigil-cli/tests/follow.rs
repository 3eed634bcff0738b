//! `sigil app --follow` against real processes: a `sigil server`, a `sigil sensor` publishing
//! every 300 ms over coap://, and the follower observing its topic (CoAP Observe, RFC 7641).
//! Each reading arrives as it is published, verified end to end, numbers rising; the server
//! is killed and started again over the same database, and the follower registers again by
//! itself and goes on, fetching from the history the readings it was not notified of.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::{free_port, plain_server_command, provisioned_sensor, sigil, wait_ready, Kill, SIGIL};

/// Waits until the directory lists `id` (`sigil app` reports it).
fn wait_registered(port: u16, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = sigil(&[
            "app",
            "--server",
            &format!("coap://127.0.0.1:{port}"),
            "--history",
            "1",
            "--json",
        ]);
        if String::from_utf8_lossy(&out.stdout).contains(id) {
            return;
        }
        assert!(Instant::now() < deadline, "the sensor never registered");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_follower_receives_readings_as_published_and_registers_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let state = dir.path().join("sensor");
    let id = provisioned_sensor(&db, &state);
    let port = free_port();
    // A refresh every second: notifications carry Max-Age 2, so a follower that hears nothing
    // for about 3.5 s registers again.
    let server_args = ["--observe-refresh", "1s"];
    let mut server = Kill(
        plain_server_command(&db, port, &server_args)
            .spawn()
            .unwrap(),
    );
    wait_ready(port);
    let _sensor = Kill(
        Command::new(SIGIL)
            .args([
                "sensor",
                "--server",
                &format!("coap://127.0.0.1:{port}"),
                "--state",
                state.to_str().unwrap(),
                "--interval",
                "300ms",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_registered(port, &id);
    let mut follower = Kill(
        Command::new(SIGIL)
            .args([
                "app",
                "--server",
                &format!("coap://127.0.0.1:{port}"),
                "--follow",
                "--json",
                "--count",
                "12",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (tx, rx) = mpsc::channel::<serde_json::Value>();
    let stdout = follower.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let v: serde_json::Value = serde_json::from_str(&line).expect("one JSON object a line");
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    let next = |what: &str| {
        rx.recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no {what} within 30 s"))
    };
    let first = next("event");
    assert_eq!(first["event"], "observing", "{first}");
    assert_eq!(first["ep"], id.as_str());
    let mut seqs = vec![];
    let readings = |n: usize, seqs: &mut Vec<u64>| {
        while seqs.len() < n {
            let e = next("reading");
            if e["event"] != "reading" {
                continue;
            }
            assert_eq!(e["verified"], true, "{e}");
            assert_eq!(e["protection"], "signed", "{e}");
            assert!(e["error"].is_null(), "{e}");
            seqs.push(e["seq"].as_u64().unwrap());
        }
    };
    readings(4, &mut seqs);
    // The server is killed and started again on the same port and database: its observers
    // are gone, and the follower finds out from the silence.
    drop(server);
    std::thread::sleep(Duration::from_millis(500));
    server = Kill(
        plain_server_command(&db, port, &server_args)
            .spawn()
            .unwrap(),
    );
    wait_ready(port);
    let mut again = false;
    while !again {
        let e = next("observing again");
        match e["event"].as_str() {
            Some("observing") => again = e["again"] == true,
            Some("reading") => seqs.push(e["seq"].as_u64().unwrap()),
            _ => {}
        }
    }
    readings(12, &mut seqs);
    // Every reading once, in order, with none missing: those published while the follower
    // heard nothing (the server down, then its observation not yet registered again) come
    // from the history when the next notification shows the gap.
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "each reading once, none missing: {seqs:?}"
    );
    let status = follower.0.wait().unwrap();
    assert!(
        status.success(),
        "--count 12 ends it with every reading verified"
    );
    drop(server);
}
