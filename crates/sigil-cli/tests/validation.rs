//! Every input is validated before any state is created: `sigil sensor` refuses a bad
//! argument without creating its state directory (or changing an existing one), `sigil app`
//! refuses a bad trust list before the network, and `sigil provision` refuses bad input
//! (and a missing database, except for `add` and `import`) without creating a database.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SIGIL: &str = env!("CARGO_BIN_EXE_sigil");

/// Runs `sigil` with `args`; a run still going after 15 s is killed and fails the test (a
/// refused argument ends the process at once).
fn sigil(args: &[&str]) -> Output {
    let mut child = Command::new(SIGIL)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "sigil {args:?} still running after 15 s: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Asserts a non-zero exit whose stderr contains `needle`.
fn assert_refused(out: &Output, needle: &str, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what}: accepted; stderr: {err}");
    assert!(
        err.contains(needle),
        "{what}: stderr does not say {needle:?}: {err}"
    );
}

/// Every file under `dir` with its contents.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Bad sensor arguments, each with a word its error names.
fn bad_sensor_args(dir: &Path) -> Vec<(Vec<String>, &'static str)> {
    let missing = dir.join("no-such-file").to_str().unwrap().to_string();
    let kit = dir.join("kit.txt");
    std::fs::write(&kit, "# the kit\ned25519:not-hex\n").unwrap();
    let not_pem = dir.join("ca.pem");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let coaps = "coaps://127.0.0.1:9";
    let psk = "00112233445566778899aabbccddeeff";
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        (v(&["--server", "http://127.0.0.1:9"]), "coap://"),
        (v(&["--server", "coap://127.0.0.1:port"]), "--server"),
        (v(&["--server", coaps]), "--dtls"),
        (
            v(&[
                "--server",
                "coap://127.0.0.1:9",
                "--dtls",
                "psk",
                "--psk",
                psk,
            ]),
            "coaps://",
        ),
        (v(&["--server", coaps, "--dtls", "psk"]), "--psk"),
        (
            v(&["--server", coaps, "--dtls", "psk", "--psk", "zz"]),
            "not hex",
        ),
        (
            v(&["--server", coaps, "--dtls", "ecdhe-psk", "--psk", "0011"]),
            "16 to 64 bytes",
        ),
        (
            v(&["--server", coaps, "--dtls", "psk", "--psk-file", &missing]),
            "cannot read",
        ),
        (
            v(&["--server", coaps, "--dtls", "rpk"]),
            "--server-identity",
        ),
        (
            v(&[
                "--server",
                coaps,
                "--dtls",
                "rpk",
                "--server-identity",
                "1234",
            ]),
            "--server-identity",
        ),
        (v(&["--server", coaps, "--dtls", "cert"]), "--ca"),
        (
            v(&[
                "--server",
                coaps,
                "--dtls",
                "cert",
                "--ca",
                &x509("root.pem"),
                "--server-identity",
                "1234",
            ]),
            "--server-identity",
        ),
        (
            v(&["--server", coaps, "--dtls", "cert", "--ca", &missing]),
            "cannot read",
        ),
        (
            v(&[
                "--server",
                coaps,
                "--dtls",
                "cert",
                "--ca",
                not_pem.to_str().unwrap(),
            ]),
            "CERTIFICATE",
        ),
        (v(&["--kit", &missing]), "--kit"),
        (v(&["--kit", kit.to_str().unwrap()]), "line 2"),
        (
            v(&["--ack-random-factor", "0.5"]),
            "transmission parameters",
        ),
        (v(&["--ack-timeout", "0s"]), "transmission parameters"),
        (v(&["--max-retransmit", "50"]), "transmission parameters"),
        (v(&["--lsb-bits", "8", "--format", "jws"]), "--lsb-bits"),
        (v(&["--lsb-bits", "40"]), "--lsb-bits"),
        (v(&["--lifetime", "0"]), "--lifetime"),
        (v(&["--interval", "0s"]), "--interval"),
        (v(&["--count", "0"]), "--count"),
        (v(&["--confirm-every=-1"]), "--confirm-every"),
        (v(&["--dtls-mtu", "50"]), "--dtls-mtu"),
        (v(&["--dtls-retransmit", "0"]), "--dtls-retransmit"),
    ]
}

/// A test certificate of sigil-dtls's (a CA and a client leaf that no sensor's key matches).
fn x509(name: &str) -> String {
    format!(
        "{}/../sigil-dtls/tests/data/x509/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `sigil sensor` over coaps:// with --dtls cert and a certificate of its own.
fn cert_sensor(state: &Path) -> Output {
    sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--server",
        "coaps://127.0.0.1:9",
        "--dtls",
        "cert",
        "--ca",
        &x509("root.pem"),
        "--cert",
        &x509("client.pem"),
        "--count",
        "1",
    ])
}

#[test]
fn a_refused_sensor_argument_creates_no_state_directory() {
    let dir = tempfile::tempdir().unwrap();
    // No certificate can certify a key that does not exist yet: refused before one is made.
    let state = dir.path().join("cert-state");
    assert_refused(&cert_sensor(&state), "has none yet", "--cert on first boot");
    assert!(!state.exists(), "--cert on first boot created {state:?}");
    for (i, (bad, needle)) in bad_sensor_args(dir.path()).into_iter().enumerate() {
        let state = dir.path().join(format!("state{i}"));
        let mut args = vec![
            "sensor".to_string(),
            "--state".into(),
            state.to_str().unwrap().into(),
            "--count".into(),
            "1".into(),
            "--interval".into(),
            "10ms".into(),
        ];
        args.extend(bad.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = sigil(&args);
        assert_refused(&out, needle, &format!("{bad:?}"));
        assert!(
            !state.exists(),
            "{bad:?}: the state directory was created before the argument was refused"
        );
    }
}

#[test]
fn a_refused_sensor_argument_leaves_existing_state_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let first = sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--print-identity",
    ]);
    assert!(first.status.success());
    let before = snapshot(&state);
    assert!(before.contains_key("key"), "{before:?}");
    for (bad, needle) in bad_sensor_args(dir.path()) {
        let mut args = vec![
            "sensor".to_string(),
            "--state".into(),
            state.to_str().unwrap().into(),
            "--count".into(),
            "1".into(),
            "--interval".into(),
            "10ms".into(),
        ];
        args.extend(bad.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = sigil(&args);
        assert_refused(&out, needle, &format!("{bad:?}"));
        assert_eq!(
            snapshot(&state),
            before,
            "{bad:?}: key or sequence reservation written before the argument was refused"
        );
    }
    // A certificate for another key is refused before the device boots.
    assert_refused(
        &cert_sensor(&state),
        "not for this device's key",
        "--cert for another key",
    );
    assert_eq!(snapshot(&state), before);
    // Not even --factory-reset erases anything when another argument is refused.
    let out = sigil(&[
        "sensor",
        "--state",
        state.to_str().unwrap(),
        "--factory-reset",
        "--interval",
        "0s",
    ]);
    assert_refused(&out, "--interval", "factory reset with a bad interval");
    assert_eq!(snapshot(&state), before);
}

/// An over-long identity (33 hex digits) on line 2 of a list.
fn over_long_list(dir: &Path) -> std::path::PathBuf {
    let f = dir.join("list.txt");
    std::fs::write(
        &f,
        "4b188825cbad4fd0a9d2e5e1a1e5d7a0 device first\n4b188825cbad4fd0a9d2e5e1a1e5d7a01 device second\n",
    )
    .unwrap();
    f
}

#[test]
fn provision_import_and_app_trust_refuse_an_over_long_identity_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let list = over_long_list(dir.path());
    let db = dir.path().join("sigil.db");
    let out = sigil(&[
        "provision",
        "--db",
        db.to_str().unwrap(),
        "import",
        list.to_str().unwrap(),
    ]);
    assert_refused(&out, "line 2", "provision import");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("more than 32 hex digits"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!db.exists(), "a refused import creates no database");
    // Nothing listens on the port: the list is refused before any datagram.
    let out = sigil(&[
        "app",
        "--server",
        "coap://127.0.0.1:9",
        "--trust",
        list.to_str().unwrap(),
    ]);
    assert_refused(&out, "line 2", "app --trust");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("more than 32 hex digits"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn provision_validates_before_it_opens_and_only_add_or_import_create_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("typo.db");
    let dbs = db.to_str().unwrap();
    let id = "4b188825cbad4fd0a9d2e5e1a1e5d7a0";
    for (args, needle) in [
        (vec!["add", "1234"], "32 hex digits"),
        (vec!["psk", "1234"], "32 hex digits"),
        (vec!["psk", id, "--key", "zz"], "not hex"),
        (vec!["psk", id, "--key", "0011"], "16 to 64 bytes"),
        (vec!["revoke", "xyz"], "hex"),
        (vec!["list"], "no database"),
        (vec!["revoke", id], "no database"),
        (vec!["psk", id], "no database"),
    ] {
        let mut full = vec!["provision", "--db", dbs];
        full.extend(&args);
        let out = sigil(&full);
        assert_refused(&out, needle, &format!("{args:?}"));
        assert!(!db.exists(), "{args:?} created {dbs}");
    }
    // `add` creates the database; then the others work on it.
    let out = sigil(&["provision", "--db", dbs, "add", id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(db.exists());
    let out = sigil(&["provision", "--db", dbs, "list"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("active"));
}

/// `sigil provision pair` makes a pairing message from a device's label and key; `sigil
/// sensor --pairing` applies it once (at start, before any network), says so when given it
/// again, and refuses one made for another device or by another server once paired. Bad
/// input to `pair` is refused by name, and `pair` creates no database: it records the
/// pairing in an existing one.
#[test]
fn provision_pair_then_the_sensor_applies_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state_s = state.to_str().unwrap();
    let identity_of = |state: &str| {
        let out = sigil(&[
            "sensor",
            "--state",
            state,
            "--alg",
            "p256",
            "--print-identity",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        (lines[1].clone(), lines[3].clone())
    };
    let (label, key) = identity_of(state_s);
    let db = dir.path().join("sigil.db");
    assert!(
        sigil(&["provision", "--db", db.to_str().unwrap(), "add", &label])
            .status
            .success()
    );
    let server_key = dir.path().join("server.key");
    std::fs::write(&server_key, format!("ed25519:{}\n", "42".repeat(32))).unwrap();
    let other_server = dir.path().join("other.key");
    std::fs::write(&other_server, format!("ed25519:{}\n", "43".repeat(32))).unwrap();
    let group = "0a".repeat(16);
    let subscriber = "0b".repeat(16);
    let message = dir.path().join("pairing.cose");
    let pair = |label: &str, key: &str, server: &Path, serial: &str, out: &Path| {
        sigil(&[
            "provision",
            "--db",
            db.to_str().unwrap(),
            "pair",
            label,
            "--device-key",
            key,
            "--server-key",
            server.to_str().unwrap(),
            "--server-uri",
            "coaps://[::1]",
            "--group",
            &group,
            "--subscriber",
            &subscriber,
            "--serial",
            serial,
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let out = pair(&label, &key, &server_key, "1", &message);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let len = std::fs::metadata(&message).unwrap().len();
    assert!((300..=400).contains(&len), "{len} bytes");

    let apply = |file: &Path| {
        sigil(&[
            "sensor",
            "--state",
            state_s,
            "--pairing",
            file.to_str().unwrap(),
            "--print-identity",
        ])
    };
    let out = apply(&message);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("paired (pairing 1): server"), "{err}");
    assert!(err.contains("at coaps://[::1]"), "{err}");
    assert!(state.join("pairing").exists());
    let out = apply(&message);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("pairing 1 was applied already"), "{err}");

    // A second pairing, by the same server or another one, is refused by name.
    let second = dir.path().join("second.cose");
    assert!(pair(&label, &key, &server_key, "2", &second)
        .status
        .success());
    assert_refused(
        &apply(&second),
        "already paired with server",
        "second pairing",
    );
    let foreign = dir.path().join("foreign.cose");
    assert!(pair(&label, &key, &other_server, "3", &foreign)
        .status
        .success());
    assert_refused(
        &apply(&foreign),
        "other than the one this device trusts",
        "other server",
    );

    // A message for another device.
    let other_state = dir.path().join("other-state");
    let (other_label, other_key) = identity_of(other_state.to_str().unwrap());
    let for_other = dir.path().join("for-other.cose");
    assert!(pair(&other_label, &other_key, &server_key, "4", &for_other)
        .status
        .success());
    assert_refused(
        &apply(&for_other),
        "is for another device",
        "another device",
    );

    // Tampered, given in hex as `pair` prints it without --out, to a device not yet paired.
    let tampered = dir.path().join("tampered.hex");
    let fresh = dir.path().join("fresh");
    let (fresh_label, fresh_key) = identity_of(fresh.to_str().unwrap());
    let for_fresh = dir.path().join("for-fresh.cose");
    assert!(pair(&fresh_label, &fresh_key, &server_key, "5", &for_fresh)
        .status
        .success());
    let mut bytes = std::fs::read(&for_fresh).unwrap();
    // Inside the ciphertext (the recipient with the ephemeral key comes last).
    bytes[60] ^= 1;
    std::fs::write(&tampered, hex::encode(&bytes)).unwrap();
    let out = sigil(&[
        "sensor",
        "--state",
        fresh.to_str().unwrap(),
        "--pairing",
        tampered.to_str().unwrap(),
        "--print-identity",
    ]);
    assert_refused(&out, "does not decrypt", "tampered");

    // Bad input to `pair`.
    let bad = dir.path().join("bad.cose");
    assert_refused(
        &pair(&other_label, &key, &server_key, "6", &bad),
        "does not hash to",
        "label and key disagree",
    );
    let ed = format!("ed25519:{}", "11".repeat(32));
    assert_refused(
        &pair(&label, &ed, &server_key, "6", &bad),
        "does not hash to",
        "another device's ed25519 key",
    );
    assert_refused(
        &pair(&label, &key, &dir.path().join("missing.key"), "6", &bad),
        "--server-key",
        "missing server key",
    );
    let out = sigil(&[
        "provision",
        "--db",
        dir.path().join("absent.db").to_str().unwrap(),
        "pair",
        &label,
        "--device-key",
        &key,
        "--group",
        &group,
        "--subscriber",
        &subscriber,
    ]);
    assert_refused(&out, "no database at", "no database");
    let out = sigil(&[
        "provision",
        "--db",
        dir.path().join("absent.db").to_str().unwrap(),
        "pair",
        &label,
        "--device-key",
        &key,
        "--server-key",
        server_key.to_str().unwrap(),
        "--group",
        &group,
        "--subscriber",
        &subscriber,
    ]);
    assert_refused(&out, "to record the pairing in", "no database to record in");
    assert!(!dir.path().join("absent.db").exists());
    assert!(!bad.exists());
}
