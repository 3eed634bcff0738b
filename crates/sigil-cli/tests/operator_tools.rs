//! The operator's own tools beside a live server never cost an honest reading: `sigil
//! provision` writing and reading the same database while a real `sigil sensor` publishes
//! (every acknowledged reading stored, none refused), and a full disk under the real server:
//! the real sensor keeps the deferred reading and publishes it again after the answer's
//! Max-Age, not at its next registration refresh.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `sigil sensor` publishing `count` readings every `interval`; its JSON report on stdout.
fn sensor(uri: &str, state: &Path, interval: &str, count: u32) -> Child {
    Command::new(SIGIL)
        .args(["sensor", "--server", uri, "--state"])
        .arg(state)
        .args(["--interval", interval, "--count", &count.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for the sensor to finish (at most `limit`) and returns its report.
fn report(mut child: Child, limit: Duration) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the sensor did not finish within {limit:?}; its log:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The sequence numbers stored for `identity`.
fn stored(db: &Path, identity: &str) -> BTreeSet<u64> {
    sigil_server::Store::open(db)
        .unwrap()
        .reading_keys()
        .unwrap()
        .into_iter()
        .filter(|(ep, _)| ep == identity)
        .map(|(_, s)| s)
        .collect()
}

fn acknowledged(report: &serde_json::Value) -> BTreeSet<u64> {
    report["acknowledged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect()
}

/// 100 readings every 200 ms beside 40 `provision add` 0.3 s apart (with a revocation among
/// them) and 80 read-only `provision list`/`grants` from other processes: every reading is
/// acknowledged and stored, none refused or timed out.
#[test]
fn provisioning_beside_a_live_server_costs_no_reading() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sigil.db");
    let state = dir.path().join("sensor");
    let id = provisioned_sensor(&db, &state);
    let port = free_port();
    let _srv = Kill(plain_server_command(&db, port, &[]).spawn().unwrap());
    wait_ready(port);
    let child = sensor(&format!("coap://127.0.0.1:{port}"), &state, "200ms", 100);

    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            let mut failures = Vec::new();
            for i in 0..40u32 {
                let other = format!("{:032x}", 0x5e00_0000u64 + u64::from(i));
                let mut args = vec!["provision", "--db", db.to_str().unwrap()];
                let revoked = format!("{:032x}", 0x5e00_0005u64);
                let verb = if i == 20 {
                    // An operator revokes a device (one added a moment ago) mid-run.
                    vec!["revoke", revoked.as_str()]
                } else {
                    vec!["add", other.as_str()]
                };
                let out = Command::new(SIGIL)
                    .args(args.drain(..).chain(verb.iter().copied()))
                    .output()
                    .unwrap();
                if !out.status.success() {
                    failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
                }
                std::thread::sleep(Duration::from_millis(300));
            }
            failures
        })
    };
    let reader = {
        let db = db.clone();
        std::thread::spawn(move || {
            let mut failures = Vec::new();
            for i in 0..80u32 {
                let verb = if i % 2 == 0 { "list" } else { "grants" };
                let out = Command::new(SIGIL)
                    .args(["provision", "--db", db.to_str().unwrap(), verb])
                    .output()
                    .unwrap();
                if !out.status.success() {
                    failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
                }
                std::thread::sleep(Duration::from_millis(150));
            }
            failures
        })
    };
    let report = report(child, Duration::from_secs(120));
    let (w, r) = (writer.join().unwrap(), reader.join().unwrap());
    assert!(w.is_empty(), "provision add failed: {w:?}");
    assert!(r.is_empty(), "provision list/grants failed: {r:?}");

    assert_eq!(report["rejected"], serde_json::json!([]), "{report}");
    assert_eq!(report["timed_out"], serde_json::json!([]), "{report}");
    // Not even deferred: no batch failed (a device that is not Sigil's may drop a reading
    // answered 5.00, as the sensor once did).
    assert_eq!(report["deferred"], 0, "{report}");
    let acked = acknowledged(&report);
    assert_eq!(acked.len(), 100, "{report}");
    let stored = stored(&db, &id);
    assert!(
        acked.is_subset(&stored),
        "acknowledged but not stored: {:?}",
        acked.difference(&stored).collect::<Vec<_>>()
    );
    assert_eq!(stored.len(), 100, "{report}");
}

/// Unmounts the tmpfs when the test ends, also on a failed assertion.
struct Mount(PathBuf);
impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A 2 MiB tmpfs at `mnt`, or `None` (and why) where mounting is not permitted. Under CI
/// (`CI` set) it must work: the test is not skipped there.
fn small_volume(mnt: &Path) -> Option<Mount> {
    std::fs::create_dir_all(mnt).unwrap();
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(mnt)
        .output();
    match out {
        Ok(o) if o.status.success() => Some(Mount(mnt.to_path_buf())),
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                Err(e) => e.to_string(),
            };
            assert!(
                std::env::var_os("CI").is_none(),
                "cannot mount a tmpfs under CI: {why}"
            );
            println!("SKIPPED: cannot mount a tmpfs here: {why}");
            None
        }
    }
}

/// A real server (5.03 Max-Age 2 while the disk is full) with its database on a 2 MiB tmpfs,
/// a provisioned sensor's state beside it, and the file that fills the volume.
struct FullDiskServer {
    _server: Kill,
    db: PathBuf,
    filler: PathBuf,
    state: PathBuf,
    id: String,
    port: u16,
    // Unmounted last, after the server is gone.
    _mount: Mount,
}

impl FullDiskServer {
    /// `None` where a tmpfs cannot be mounted (not under CI, see [`small_volume`]).
    fn start(dir: &Path) -> Option<Self> {
        let _mount = small_volume(&dir.join("small"))?;
        let db = dir.join("small").join("sigil.db");
        let state = dir.join("sensor");
        let id = provisioned_sensor(&db, &state);
        let port = free_port();
        let _server = Kill(
            plain_server_command(&db, port, &["--retry-after-full", "2"])
                .spawn()
                .unwrap(),
        );
        wait_ready(port);
        Some(Self {
            _server,
            filler: dir.join("small").join("filler"),
            db,
            state,
            id,
            port,
            _mount,
        })
    }
}

/// The real server on a full disk and the real sensor: the reading that gets 5.03 (Max-Age 2
/// here) is kept and sent again two seconds later, again while the disk stays full, and is
/// stored once space returns: long before the sensor's registration refresh (its lifetime is
/// 300 s), which is when it used to go out again.
#[test]
fn a_sensor_publishes_a_deferred_reading_again_after_max_age() {
    let dir = tempfile::tempdir().unwrap();
    let Some(FullDiskServer {
        _mount,
        _server,
        db,
        filler,
        state,
        id,
        port,
    }) = FullDiskServer::start(dir.path())
    else {
        return;
    };
    let child = sensor(&format!("coap://127.0.0.1:{port}"), &state, "300ms", 12);

    // Let a few readings through, then fill the disk for about five seconds.
    let deadline = Instant::now() + Duration::from_secs(30);
    while stored(&db, &id).len() < 3 {
        assert!(Instant::now() < deadline, "no reading stored");
        std::thread::sleep(Duration::from_millis(50));
    }
    fill(&filler);
    std::thread::sleep(Duration::from_secs(5));
    std::fs::remove_file(&filler).unwrap();

    let report = report(child, Duration::from_secs(60));
    assert_eq!(report["rejected"], serde_json::json!([]), "{report}");
    assert_eq!(report["timed_out"], serde_json::json!([]), "{report}");
    assert!(
        report["deferred"].as_u64().unwrap() >= 2,
        "the full disk deferred a reading, and again at its Max-Age: {report}"
    );
    let acked = acknowledged(&report);
    assert_eq!(acked.len(), 12, "{report}");
    let stored = stored(&db, &id);
    assert!(acked.is_subset(&stored), "{report}");
}

/// Fills the volume of `filler` until a write fails.
fn fill(filler: &Path) {
    let mut f = std::fs::File::create(filler).unwrap();
    let chunk = vec![0x55u8; 4096];
    while f.write_all(&chunk).and_then(|_| f.sync_all()).is_ok() {}
}

fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// A sensor stopped (SIGTERM, as a service manager does) while the broker holds back a
/// reading with 5.03: when the reading is due again within the stop's grace (5 s), it is sent
/// first and stored; when the disk stays full, the sensor still stops, and says that the
/// reading was not stored (`not_stored_at_stop`), rather than dropping it silently.
#[test]
fn a_sensor_stopped_during_a_deferral_sends_the_reading_first_or_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let Some(FullDiskServer {
        _mount,
        _server,
        db,
        filler,
        state,
        id,
        port,
    }) = FullDiskServer::start(dir.path())
    else {
        return;
    };
    let uri = format!("coap://127.0.0.1:{port}");
    for disk_stays_full in [false, true] {
        let before = stored(&db, &id).len();
        let child = Command::new(SIGIL)
            .args(["sensor", "--server", &uri, "--state"])
            .arg(&state)
            .args(["--interval", "300ms"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while stored(&db, &id).len() < before + 2 {
            assert!(Instant::now() < deadline, "no reading stored");
            std::thread::sleep(Duration::from_millis(50));
        }
        fill(&filler);
        // A reading or two get 5.03 (Max-Age 2) meanwhile.
        std::thread::sleep(Duration::from_millis(1200));
        sigterm(&child);
        std::thread::sleep(Duration::from_millis(300));
        if !disk_stays_full {
            std::fs::remove_file(&filler).unwrap();
        }
        let (stderr, report) = {
            let deadline = Instant::now() + Duration::from_secs(40);
            let mut child = child;
            while child.try_wait().unwrap().is_none() {
                assert!(Instant::now() < deadline, "the stopped sensor did not end");
                std::thread::sleep(Duration::from_millis(100));
            }
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            (String::from_utf8_lossy(&out.stderr).into_owned(), report)
        };
        assert!(report["deferred"].as_u64().unwrap() >= 1, "{report}");
        let acked = acknowledged(&report);
        assert!(acked.is_subset(&stored(&db, &id)), "{report}");
        if disk_stays_full {
            assert_eq!(report["not_stored_at_stop"], 1, "{report}");
            assert!(
                stderr.contains("that reading is not sent again"),
                "{stderr}"
            );
            std::fs::remove_file(&filler).unwrap();
        } else {
            assert_eq!(report["not_stored_at_stop"], 0, "{report}\n{stderr}");
            // The reading held back at the stop went out again and was stored.
            assert_eq!(report["rejected"], serde_json::json!([]), "{report}");
            assert_eq!(report["timed_out"], serde_json::json!([]), "{report}");
        }
    }
}
