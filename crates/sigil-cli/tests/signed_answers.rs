//! Signed answers end to end (RFC 8387 §4.1 on plain coap://): a sensor paired with
//! `sigil server` requires its answers signed by the server's key and registers, publishes and
//! refreshes through `sigil server`; `--unsigned-answers` turns it off; a `--server-key` that
//! is not the server's means no answer is acted on.

mod common;

use common::{
    free_port, pair, provisioned_p256_sensor, secure_server_with, server_key, sigil, wait_ready,
    Kill,
};

fn report(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn a_paired_sensor_acts_only_on_signed_answers_over_coap() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let port = free_port();
    let coap = format!("coap://127.0.0.1:{port}");
    let state = dir.path().join("sensor");
    let states = state.to_str().unwrap();
    let (identity, key) = provisioned_p256_sensor(&db, &state);
    let _srv = Kill(secure_server_with(&db, port, 0, &[]));
    wait_ready(port);
    let message = dir.path().join("pairing.cose");
    pair(&db, &identity, &key, &message);
    let server_key = format!("p256:{}", hex::encode(server_key(&db).1.as_bytes()));
    let sensor = |extra: &[&str]| {
        let mut args = vec![
            "sensor",
            "--server",
            &coap,
            "--state",
            states,
            "--interval",
            "100ms",
            "--count",
            "3",
        ];
        args.extend_from_slice(extra);
        sigil(&args)
    };
    // Paired: signed answers required; registration and every reading go through.
    let out = sensor(&["--pairing", message.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("answers must be signed"), "{err}");
    let r = report(&out);
    assert_eq!(r["signed_answers"], true, "{r}");
    assert_eq!(r["answers_refused"], 0, "{r}");
    assert_eq!(r["registrations"], 1, "{r}");
    assert_eq!(r["acknowledged"].as_array().unwrap().len(), 3, "{r}");
    // The same key given explicitly is the paired one: accepted.
    let out = sensor(&["--server-key", &server_key]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report(&out)["signed_answers"], true);
    // Turned off: the old behaviour.
    let out = sensor(&["--unsigned-answers"]);
    assert!(out.status.success());
    let r = report(&out);
    assert_eq!(r["signed_answers"], false, "{r}");
    assert_eq!(r["acknowledged"].as_array().unwrap().len(), 3, "{r}");
    // A key that is not the paired server's is refused before anything is sent.
    let other = format!("p256:04{}", "11".repeat(64));
    let out = sensor(&["--server-key", &other]);
    assert!(!out.status.success());
}

/// An unpaired sensor told another server key: the real server's answers do not verify, so
/// it never counts itself registered (it retries), and says so in its report when stopped.
#[test]
fn a_sensor_trusting_another_key_does_not_act_on_the_servers_answers() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let dbs = db.to_str().unwrap();
    let port = free_port();
    let coap = format!("coap://127.0.0.1:{port}");
    let state = dir.path().join("sensor");
    let states = state.to_str().unwrap();
    let out = sigil(&["sensor", "--state", states, "--print-identity"]);
    assert!(out.status.success());
    let identity = String::from_utf8(out.stdout).unwrap();
    let identity = identity.lines().next().unwrap().to_string();
    assert!(sigil(&["provision", "--db", dbs, "add", &identity])
        .status
        .success());
    let _srv = Kill(secure_server_with(&db, port, 0, &[]));
    wait_ready(port);
    // Some other P-256 key (the generator point): not the server's.
    let other = "p256:046b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c2964fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5";
    let child = std::process::Command::new(common::SIGIL)
        .args([
            "sensor",
            "--server",
            &coap,
            "--state",
            states,
            "--interval",
            "100ms",
            "--count",
            "1",
            "--server-key",
            other,
            "--ack-timeout",
            "200ms",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    // SIGINT: the sensor stops and prints its report.
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    let r = report(&out);
    assert_eq!(r["signed_answers"], true, "{r}");
    assert_eq!(r["registrations"], 0, "{r}");
    assert!(r["answers_refused"].as_u64().unwrap() >= 2, "{r}");
    assert!(r["acknowledged"].as_array().unwrap().is_empty(), "{r}");
}
