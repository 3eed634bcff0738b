//! A full disk under the running broker: on a 2 MiB tmpfs the disk is filled with a filler
//! file while a device publishes. No reading that was not stored is acknowledged (the server
//! answers 5.03 with Max-Age, and the device keeps the reading and tries again then); once the
//! filler is gone the same server stores and acknowledges again, and so does a restarted one.
//! Throughout, the WAL stays under `WAL_LIMIT_BYTES` (an unbounded WAL fills a small volume
//! by itself and, never checkpointed, keeps the server from storing ever again).
//! Needs permission to mount a tmpfs; without it the test says so and skips (the same
//! failure paths are covered portably by `storage_faults.rs` through `max_page_count`).

use sigil_device::{DeviceConfig, Event, PublishOutcome};
use sigil_server::store::{IdentityKind, WAL_LIMIT_BYTES};
use sigil_server::Store;
use sigil_testkit::server::sensor::Sensor;
use sigil_testkit::server::Plain;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The server over the database at `db`, its clock at `now`.
fn server(db: &Path, now: u64) -> Plain {
    let mut srv = Plain::at(db, 7, |_| {});
    srv.now = now;
    srv
}

/// Unmounts the tmpfs when the test ends, also on a failed assertion.
struct Mount(PathBuf);
impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Publishes one reading a second after the last and runs device and server at that time
/// only, so that a refused reading is not retried behind the test's back: its number and
/// outcome.
fn publish(s: &mut Sensor, srv: &mut Plain) -> (u64, PublishOutcome) {
    srv.now += 1000;
    let v = srv.now as f64;
    let seq = s.publish(srv, v);
    let outcome = s
        .outcome(seq)
        .unwrap_or_else(|| panic!("no outcome for seq {seq}: {:?}", s.events));
    (seq, outcome)
}

fn stored(db: &Path) -> Vec<u64> {
    Store::open(db)
        .unwrap()
        .reading_keys()
        .unwrap()
        .into_iter()
        .map(|(_, s)| s)
        .collect()
}

fn wal_len(db: &Path) -> u64 {
    let mut s = db.as_os_str().to_owned();
    s.push("-wal");
    std::fs::metadata(PathBuf::from(s)).map_or(0, |m| m.len())
}

#[test]
fn a_full_disk_refuses_readings_and_the_server_recovers_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(&mnt)
        .output();
    match mounted {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            println!(
                "SKIPPED: cannot mount a tmpfs here: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Err(e) => {
            println!("SKIPPED: cannot run mount: {e}");
            return;
        }
    }
    let _mount = Mount(mnt.clone());
    let db = mnt.join("s.db");
    let filler = mnt.join("filler");

    let mut srv = server(&db, 0);
    let mut s = Sensor::new(
        5,
        SocketAddr::from(([127, 0, 0, 1], 40100)),
        DeviceConfig::default(),
        &[],
    );
    srv.provision(s.device.identity(), IdentityKind::Device);
    s.step(&mut srv, 0);
    assert!(s.device.is_registered(), "{:?}", s.events);
    let mut acked = Vec::new();
    // About 20 KiB of WAL per commit: without checkpoints the WAL alone would fill the
    // volume within these readings. It stays under its limit and everything is stored.
    for _ in 0..150 {
        let (seq, outcome) = publish(&mut s, &mut srv);
        assert_eq!(outcome, PublishOutcome::Acknowledged, "seq {seq}");
        acked.push(seq);
        assert!(
            wal_len(&db) <= WAL_LIMIT_BYTES as u64,
            "WAL is {} bytes after seq {seq}",
            wal_len(&db)
        );
    }

    // Fill the disk.
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0x55u8; 4096];
    while f.write_all(&chunk).and_then(|_| f.sync_all()).is_ok() {}
    drop(f);

    // A reading while the disk is full: 5.03 with Max-Age 30 (try again then), never 2.04,
    // and not stored. The device keeps it and takes no new reading meanwhile.
    let (seq, outcome) = publish(&mut s, &mut srv);
    assert_eq!(
        outcome,
        PublishOutcome::Deferred {
            code: sigil_coap::Code::SERVICE_UNAVAILABLE,
            retry_after_secs: 30
        },
        "seq {seq}"
    );
    assert!(
        !s.device.can_publish(),
        "a deferred reading would be overwritten"
    );
    assert!(wal_len(&db) <= WAL_LIMIT_BYTES as u64);
    // Max-Age later, still full: deferred again (under a new number), still not stored.
    srv.now += 30_000;
    s.step(&mut srv, 0);
    let deferred_again = s
        .events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Published {
                    outcome: PublishOutcome::Deferred { .. },
                    ..
                }
            )
        })
        .count();
    assert_eq!(deferred_again, 2, "{:?}", s.events);
    // Acknowledged means stored; refused means not stored.
    assert_eq!(stored(&db), acked);

    // Space returns: the same server stores the kept reading once its Max-Age has passed.
    std::fs::remove_file(&filler).unwrap();
    srv.now += 30_000;
    s.step(&mut srv, 0);
    let republished = s
        .events
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Published {
                seq,
                outcome: PublishOutcome::Acknowledged,
            } => Some(*seq),
            _ => None,
        })
        .unwrap();
    assert!(
        republished > seq,
        "the kept reading goes out under a new number"
    );
    acked.push(republished);
    assert_eq!(stored(&db), acked);
    assert!(s.device.can_publish());
    let (seq, outcome) = publish(&mut s, &mut srv);
    assert_eq!(outcome, PublishOutcome::Acknowledged);
    acked.push(seq);
    assert_eq!(stored(&db), acked);
    assert!(wal_len(&db) <= WAL_LIMIT_BYTES as u64);

    // And after a restart.
    let now = srv.now;
    drop(srv);
    let mut srv = server(&db, now);
    let (seq, outcome) = publish(&mut s, &mut srv);
    assert_eq!(outcome, PublishOutcome::Acknowledged);
    acked.push(seq);
    assert_eq!(stored(&db), acked);
    assert!(wal_len(&db) <= WAL_LIMIT_BYTES as u64);
}
