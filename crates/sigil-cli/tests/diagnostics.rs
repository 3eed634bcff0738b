//! Every refusal says who and why, where the person is looking, through the `sigil` binary
//! over loopback: a sensor prints its refused registration with the fix at the default log
//! level, the server's refusal lines name the identity claimed, DTLS alerts are named and
//! explained, a wrong pin names the identity the server presented, `app` and `get` give up on
//! a server that does not answer within `--timeout`, and `get` writes a payload as it came
//! (and the server names the kid of a reading it refuses).

mod common;
use common::{
    first_line, free_port, server_command, server_identity, server_key, sigil, wait_ready, SIGIL,
};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A server on coap:// `port` and coaps:// `dport` whose log (stderr) is kept.
fn logged_server(db: &Path, port: u16, dport: u16) -> Child {
    server_command(db, port, dport, &[])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Lines of `child`'s stderr as they come, until one contains every one of `wanted` (that
/// line) or 30 s pass (`None`); the child is killed either way, and all it wrote is returned.
fn stderr_until(mut child: Child, wanted: &[&str]) -> (Option<String>, String) {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut all = String::new();
    let mut found = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while found.is_none() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        all.push_str(&line);
        all.push('\n');
        if wanted.iter().all(|w| line.contains(w)) {
            found = Some(line);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
        all.push_str(&line);
        all.push('\n');
    }
    (found, all)
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_unprovisioned_sensor_is_told_the_fix_and_the_server_log_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let (port, dport) = (free_port(), free_port());
    let state = dir.path().join("s");
    let id = first_line(sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--print-identity",
    ]));
    let srv = logged_server(&db, port, dport);
    wait_ready(port);
    // Plain coap://, never provisioned, at the default log level.
    let sensor = Command::new(SIGIL)
        .args(["sensor", "--server", &format!("coap://127.0.0.1:{port}")])
        .arg("--state")
        .arg(&state)
        .args(["--interval", "100ms", "--count", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (line, all) = stderr_until(sensor, &["registration refused (4.03 not provisioned)"]);
    let line = line.unwrap_or_else(|| panic!("no refusal printed: {all}"));
    assert!(
        line.contains(&format!("run `sigil provision add {id}` on the server")),
        "{line}"
    );
    // A sensor that requires signed answers (--server-key) does not act on the unsigned
    // 4.03, and says so with the same fix.
    let server_key = format!("p256:{}", hex::encode(server_key(&db).1.as_bytes()));
    let sensor = Command::new(SIGIL)
        .args(["sensor", "--server", &format!("coap://127.0.0.1:{port}")])
        .arg("--state")
        .arg(&state)
        .args([
            "--interval",
            "100ms",
            "--count",
            "1",
            "--server-key",
            &server_key,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (line, all) = stderr_until(
        sensor,
        &["the server answered 4.03", "unsigned; not acted on"],
    );
    let line = line.unwrap_or_else(|| panic!("no unsigned refusal printed: {all}"));
    assert!(
        line.contains(&format!("sigil provision add {id}")),
        "{line}"
    );
    // The server's refusal line names the identity the registration claimed.
    let (line, all) = stderr_until(srv, &["request refused", "unauthorized_identity"]);
    let line = line.unwrap_or_else(|| panic!("no refusal logged: {all}"));
    assert!(line.contains(&format!("{id} (ep)")), "{line}");
    assert!(line.contains("127.0.0.1:"), "{line}");
}

#[test]
fn dtls_refusals_are_named_and_explained_and_a_wrong_pin_names_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let (port, dport) = (free_port(), free_port());
    let state = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let print_identity = |n: &str| {
        first_line(sigil(&[
            "sensor",
            "--state",
            &state(n),
            "--alg",
            "p256",
            "--print-identity",
        ]))
    };
    let (known, stranger, rpk) = (
        print_identity("known"),
        print_identity("stranger"),
        print_identity("rpk"),
    );
    assert!(sigil(&["provision", "--db", dbs, "add", &known])
        .status
        .success());
    let psk = first_line(sigil(&["provision", "--db", dbs, "psk", &known]));
    let srv = logged_server(&db, port, dport);
    wait_ready(port);
    let server_id = server_identity(&db);
    let uri = format!("coaps://127.0.0.1:{dport}/.well-known/core");
    let get = |identity: &str, key: &str| {
        sigil(&[
            "get",
            &uri,
            "--dtls",
            "psk",
            "--psk-identity",
            identity,
            "--psk",
            key,
            "--timeout",
            "3s",
        ])
    };
    // The right PSK: the resource. Then a wrong one and an unknown identity.
    let out = get(&known, &psk);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let wrong = if psk.starts_with('0') { "1" } else { "0" }.repeat(psk.len());
    let out = get(&known, &wrong);
    let err = stderr_of(&out);
    assert!(!out.status.success());
    // The server drops a Finished it cannot authenticate (RFC 6347 §4.1.2.7): the client
    // says what that silence after the hello means.
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no answer to Finished: is the PSK right?")
            && err.contains("server answered the hello but not the Finished")
            && err.contains("the key is wrong")
            && err.contains(&format!("sigil provision psk {known}")),
        "{known}: {err}"
    );
    // `sigil token` with the wrong PSK gives up within its --timeout (it used to have none:
    // the DTLS layer's own retransmissions ran 184 s, then "handshake timed out"), naming the
    // key, on either carrier.
    for carrier in ["records", "coap"] {
        let out = sigil(&[
            "token",
            "--server",
            &format!("coaps://127.0.0.1:{dport}"),
            "--dtls",
            "psk",
            "--dtls-carrier",
            carrier,
            "--psk-identity",
            &known,
            "--psk",
            &wrong,
            "--scope",
            "rd",
            "--out",
            dir.path().join("t.cwt").to_str().unwrap(),
            "--timeout",
            "3s",
        ]);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{carrier}: {err}");
        // In records the server drops the Finished it cannot authenticate; over the CoAP
        // carrier it answers the flight with 4.03.
        let why = if carrier == "records" {
            "within 3 s: no answer to Finished: is the PSK right?"
        } else {
            "4.03 to our Finished: the server could not authenticate our Finished: is the PSK right?"
        };
        assert!(
            err.contains(why) && err.contains(&format!("sigil provision psk {known}")),
            "{carrier}: {err}"
        );
        assert!(!dir.path().join("t.cwt").exists());
    }
    // `sigil get --token`: its session with the access-control server gives up the same way
    // within --timeout (it used to end "no answer … is `sigil server` running there?").
    let out = sigil(&[
        "get",
        &uri,
        "--token",
        "--dtls",
        "psk",
        "--psk-identity",
        &known,
        "--psk",
        &wrong,
        "--timeout",
        "3s",
    ]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no answer to Finished: is the PSK right?")
            && err.contains(&format!("sigil provision psk {known}")),
        "{err}"
    );
    let out = get(&stranger, &psk);
    let err = stderr_of(&out);
    assert!(!out.status.success());
    assert!(err.contains("(unknown_psk_identity)"), "{err}");
    assert!(
        err.contains("the server does not know this PSK identity")
            && err.contains(&format!("run `sigil provision psk {stranger}`")),
        "{err}"
    );
    // An unprovisioned raw-public-key sensor: alert 46 explained, the fix named, and no
    // longer the same line on every attempt.
    let sensor = Command::new(SIGIL)
        .args([
            "sensor",
            "--server",
            &format!("coaps://127.0.0.1:{dport}"),
            "--state",
            &state("rpk"),
            "--dtls",
            "rpk",
            "--server-identity",
            &server_id,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (line, all) = stderr_until(sensor, &["alert 46 (certificate_unknown)"]);
    let line = line.unwrap_or_else(|| panic!("no alert printed: {all}"));
    assert!(
        line.contains("the server does not know this identity")
            && line.contains(&format!("run `sigil provision add {rpk}` on the server"))
            && line.contains("retrying at"),
        "{line}"
    );
    // A wrong pin: the identity the server presented is named.
    let key_file = dir.path().join("client.key");
    let out = sigil(&[
        "get",
        &uri,
        "--dtls",
        "rpk",
        "--server-identity",
        &known,
        "--key-file",
        key_file.to_str().unwrap(),
    ]);
    let err = stderr_of(&out);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("the server presented identity {server_id}"))
            && err.contains(&format!("not the pinned --server-identity {known}")),
        "{err}"
    );
    // The server's log names the identity each refused handshake claimed.
    let (line, all) = stderr_until(srv, &["DTLS handshake refused", &stranger]);
    assert!(line.is_some(), "{all}");
    assert!(all.contains(&format!("{rpk} (key)")), "{all}");
}

#[test]
fn app_and_get_give_up_on_a_silent_server_within_their_timeout() {
    // A port nobody answers on.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let coap = format!("coap://127.0.0.1:{port}");
    let coaps = format!("coaps://127.0.0.1:{port}");
    let expect = |out: std::process::Output, uri: &str| {
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!(
                "no answer from {uri} within 1 s: is `sigil server` running there?"
            )),
            "{err}"
        );
    };
    expect(sigil(&["app", "--server", &coap, "--timeout", "1s"]), &coap);
    expect(
        sigil(&["get", &format!("{coap}/x"), "--timeout", "1s"]),
        &coap,
    );
    // Nothing answered the handshake: the address and port are what to check, for `get`
    // and `token` alike.
    for args in [
        vec!["get".to_string(), format!("{coaps}/x")],
        vec![
            "token".to_string(),
            "--server".to_string(),
            coaps.clone(),
            "--scope".to_string(),
            "rd".to_string(),
            "--out".to_string(),
            "/nonexistent/t.cwt".to_string(),
        ],
    ] {
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.extend([
            "--timeout",
            "1s",
            "--dtls",
            "psk",
            "--psk-identity",
            "x",
            "--psk",
        ]);
        let psk = "00".repeat(16);
        args.push(&psk);
        let out = sigil(&args);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!(
                "no answer from {coaps} within 1 s: nothing answered at 127.0.0.1:{port} to the DTLS handshake: is the server running, is the port right"
            )),
            "{err}"
        );
    }
    let out = sigil(&["app", "--server", &coap, "--timeout", "0s"]);
    assert!(stderr_of(&out).contains("--timeout must be above zero"));
    drop(silent);
}

#[test]
fn get_writes_a_binary_reading_as_it_came_so_verify_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let port = free_port();
    let state = dir.path().join("s");
    let lines: Vec<String> = String::from_utf8(
        sigil(&[
            "sensor",
            "--state",
            state.to_str().unwrap(),
            "--print-identity",
        ])
        .stdout,
    )
    .unwrap()
    .lines()
    .map(str::to_string)
    .collect();
    let (id, key) = (&lines[0], &lines[3]);
    assert!(
        sigil(&["provision", "--db", db.to_str().unwrap(), "add", id])
            .status
            .success()
    );
    let srv = Command::new(SIGIL)
        .args(["server", "--listen", &format!("127.0.0.1:{port}"), "--db"])
        .arg(&db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(port);
    let uri = format!("coap://127.0.0.1:{port}");
    let out = sigil(&[
        "sensor",
        "--server",
        &uri,
        "--state",
        state.to_str().unwrap(),
        "--interval",
        "50ms",
        "--count",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let app: serde_json::Value =
        serde_json::from_slice(&sigil(&["app", "--server", &uri, "--json"]).stdout).unwrap();
    let topic = app["sensors"][0]["topic"].as_str().unwrap().to_string();
    // `sigil get … > f` (stdout is not a terminal): the bytes of the reading, no newline
    // after them (a COSE_Sign1 with a byte more does not parse, so `verify` would refuse it).
    let out = sigil(&["get", &format!("{uri}{topic}")]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let file = dir.path().join("reading.cose");
    std::fs::write(&file, &out.stdout).unwrap();
    let out = sigil(&[
        "verify",
        file.to_str().unwrap(),
        "--key",
        key,
        "--identity",
        id,
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr_of(&out)
    );
    // The same reading published again by someone else: refused as a replay, and the
    // server's line names the identity the reading claims (its kid) beside the address.
    let reading = std::fs::read(&file).unwrap();
    let mut buf = vec![0u8; reading.len() + 64];
    let mut b = sigil_coap::MessageBuilder::new(
        &mut buf,
        sigil_coap::MessageType::Confirmable,
        sigil_coap::Code::PUT,
        0x4242,
        &[9],
    )
    .unwrap();
    b.uri_path(topic.trim_start_matches('/')).unwrap();
    b.uint_option(sigil_coap::option::CONTENT_FORMAT, 18)
        .unwrap();
    let n = b.finish_with_payload(&reading).unwrap();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.send_to(&buf[..n], ("127.0.0.1", port)).unwrap();
    let (line, all) = stderr_until(srv, &["request refused", "replay"]);
    let line = line.unwrap_or_else(|| panic!("no refusal logged: {all}"));
    assert!(line.contains(&format!("{id} (kid)")), "{line}");
}

#[test]
fn identity_refuses_a_key_that_is_not_a_point_of_its_curve() {
    // The P-256 base point, and the same x with y changed in its last bit: not on the curve.
    let g = "046b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c2964fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5";
    let off = format!("{}4", &g[..g.len() - 1]);
    let out = sigil(&["identity", "--key", &format!("p256:{g}")]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    for key in [
        format!("p256:{off}"),
        // Ed25519: y = 2 has no point; y = p + 1 only by reduction modulo p.
        format!("ed25519:02{}", "00".repeat(31)),
        format!("ed25519:ee{}7f", "ff".repeat(30)),
    ] {
        let out = sigil(&["identity", "--key", &key]);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{key}: {err}");
        assert!(
            err.contains(&format!("--key {key}"))
                && err.contains("not on its curve or not canonically encoded"),
            "{key}: {err}"
        );
        assert!(out.stdout.is_empty(), "{key}");
    }
}
