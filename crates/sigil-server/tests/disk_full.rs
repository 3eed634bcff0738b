//! A full disk under the running broker: on a 2 MiB tmpfs the disk is filled with a filler
//! file while a device publishes. No reading that was not stored is acknowledged (the server
//! answers 5.03 with Max-Age, and the device keeps the reading and tries again then); once the
//! filler is gone the same server stores and acknowledges again, and so does a restarted one.
//! Throughout, the WAL stays under `WAL_LIMIT_BYTES` (an unbounded WAL fills a small volume
//! by itself and, never checkpointed, keeps the server from storing ever again).
//! Needs permission to mount a tmpfs; without it the test says so and skips (the same
//! failure paths are covered portably by `storage_faults.rs` through `max_page_count`).

use sigil_crypto::RustCrypto;
use sigil_device::{Device, DeviceConfig, Event, MemoryStorage, PublishOutcome};
use sigil_objects::senml::{Record, Value};
use sigil_server::store::{IdentityKind, WAL_LIMIT_BYTES};
use sigil_server::{Dispatcher, ServerConfig, Stats, Store};
use sigil_testkit::Seeded;
use sigil_time::{Instant, UnixTime};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

const NOW: i64 = 1_700_000_000;

fn dispatcher(db: &Path) -> Dispatcher {
    let stats = Stats::default();
    let config = ServerConfig::new("127.0.0.1:5683".parse().unwrap(), db.to_path_buf());
    let store = Store::open(db).unwrap();
    let svc =
        sigil_server::service::Service::new(store, config.service.clone(), stats.clone()).unwrap();
    Dispatcher::new(config, svc, stats, [7; 32])
}

/// Unmounts the tmpfs when the test ends, also on a failed assertion.
struct Mount(PathBuf);
impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

struct Sensor {
    device: Device<RustCrypto>,
    storage: MemoryStorage,
    addr: SocketAddr,
    events: Vec<Event>,
}

impl Sensor {
    /// Runs device and server until the device has nothing more to do; one round only, so
    /// that a refused reading is not retried behind the test's back.
    fn exchange(&mut self, d: &mut Dispatcher, now: u64) {
        for _ in 0..8 {
            self.device
                .handle_timeout(Instant::from_millis(now), &mut self.storage)
                .unwrap();
            let mut out = Vec::new();
            let mut buf = [0u8; 2048];
            while let Some(n) = self.device.poll_transmit(&mut buf) {
                out.push((self.addr, buf[..n].to_vec()));
            }
            while let Some(e) = self.device.poll_event() {
                self.events.push(e);
            }
            if out.is_empty() {
                return;
            }
            for (_, reply) in d.handle_at(
                out,
                Instant::from_millis(now),
                UnixTime::from_secs(NOW + (now / 1000) as i64),
            ) {
                self.device
                    .handle_datagram(Instant::from_millis(now), &mut self.storage, &reply)
                    .unwrap();
            }
        }
    }

    /// Publishes one reading and returns its number and outcome.
    fn publish(&mut self, d: &mut Dispatcher, now: &mut u64) -> (u64, PublishOutcome) {
        *now += 1000;
        let r = [Record {
            name: Some("t"),
            value: Some(Value::Number(*now as f64)),
            ..Default::default()
        }];
        let seq = self
            .device
            .publish(
                Instant::from_millis(*now),
                &mut self.storage,
                &r,
                Some(UnixTime::from_secs(1_700_000_000)),
            )
            .unwrap();
        self.exchange(d, *now);
        let outcome = self
            .events
            .iter()
            .rev()
            .find_map(|e| match e {
                Event::Published { seq: s, outcome } if *s == seq => Some(*outcome),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no outcome for seq {seq}: {:?}", self.events));
        (seq, outcome)
    }
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

    let mut d = dispatcher(&db);
    let mut storage = MemoryStorage::default();
    let device = Device::boot(
        RustCrypto,
        DeviceConfig::default(),
        &mut storage,
        &mut Seeded(5),
        &[],
        &[],
    )
    .unwrap();
    let mut s = Sensor {
        device,
        storage,
        addr: SocketAddr::from(([127, 0, 0, 1], 40100)),
        events: vec![],
    };
    Store::open(&db)
        .unwrap()
        .add_identity(s.device.identity(), IdentityKind::Device, "", NOW)
        .unwrap();
    let mut now = 0u64;
    s.exchange(&mut d, now);
    assert!(s.device.is_registered(), "{:?}", s.events);
    let mut acked = Vec::new();
    // About 20 KiB of WAL per commit: without checkpoints the WAL alone would fill the
    // volume within these readings. It stays under its limit and everything is stored.
    for _ in 0..150 {
        let (seq, outcome) = s.publish(&mut d, &mut now);
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
    let (seq, outcome) = s.publish(&mut d, &mut now);
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
    now += 30_000;
    s.exchange(&mut d, now);
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
    now += 30_000;
    s.exchange(&mut d, now);
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
    let (seq, outcome) = s.publish(&mut d, &mut now);
    assert_eq!(outcome, PublishOutcome::Acknowledged);
    acked.push(seq);
    assert_eq!(stored(&db), acked);
    assert!(wal_len(&db) <= WAL_LIMIT_BYTES as u64);

    // And after a restart.
    drop(d);
    let mut d = dispatcher(&db);
    let (seq, outcome) = s.publish(&mut d, &mut now);
    assert_eq!(outcome, PublishOutcome::Acknowledged);
    acked.push(seq);
    assert_eq!(stored(&db), acked);
    assert!(wal_len(&db) <= WAL_LIMIT_BYTES as u64);
}
