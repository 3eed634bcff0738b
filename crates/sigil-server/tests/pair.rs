//! Devices and the server in memory, with virtual time: the real device state machine talks
//! CoAP to the real dispatcher and service over a lossless (or deliberately lossy) "link".

use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto};
use sigil_device::{Device, DeviceConfig, Event, MemoryStorage, PublishOutcome};
use sigil_identity::Identity;
use sigil_objects::senml::{Record, Value};
use sigil_server::store::IdentityKind;
use sigil_server::{Dispatcher, Stats, Store};
use sigil_testkit::server::sensor::{Link, Sensor};
use sigil_testkit::server::{self as common, ms, wall, NOW};
use sigil_testkit::Seeded;
use sigil_time::Instant;
use std::net::SocketAddr;
use std::path::Path;

fn dispatcher(db: &Path, max_ahead: u64) -> (Dispatcher, Stats) {
    let (d, stats, _) = common::plain_dispatcher(db, 7, |c| {
        c.service.freshness.max_ahead = max_ahead;
        c.service.verify_workers = 2;
    });
    (d, stats)
}

/// The dispatcher `d` at the test's clock `now`, as the sensor talks to it.
fn link<'a>(d: &'a mut Dispatcher, now: &'a mut u64, db: &'a Path) -> Link<'a> {
    Link { d, now, db }
}

/// A sensor at 127.0.0.1:`port` whose readings are in Cel.
fn sensor(seed: u64, port: u16, config: DeviceConfig, kit: &[PublicKey]) -> Sensor {
    let mut s = Sensor::new(seed, SocketAddr::from(([127, 0, 0, 1], port)), config, kit);
    s.unit = Some("Cel");
    s
}

fn provision(db: &Path, id: &Identity, kind: IdentityKind) {
    Store::open(db)
        .unwrap()
        .add_identity(id, kind, "", NOW)
        .unwrap();
}

#[test]
fn register_publish_read_back_and_refuse_the_unprovisioned() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut d, stats) = dispatcher(&db, 1000);
    let mut s = sensor(1, 40001, DeviceConfig::default(), &[]);
    provision(&db, s.device.identity(), IdentityKind::Device);
    let mut now = 0;
    s.step(&mut link(&mut d, &mut now, &db), 10);
    assert!(s.device.is_registered(), "{:?}", s.events);
    let seqs: Vec<u64> = (0..5)
        .map(|i| s.publish(&mut link(&mut d, &mut now, &db), 20.0 + f64::from(i)))
        .collect();
    assert_eq!(s.acked(), seqs);
    assert_eq!(stats.get("publish.accepted"), 5);
    let stored = Store::open(&db).unwrap().reading_keys().unwrap();
    assert_eq!(stored.len(), 5);

    let mut rogue = sensor(2, 40002, DeviceConfig::default(), &[]);
    rogue.step(&mut link(&mut d, &mut now, &db), 10);
    assert!(!rogue.device.is_registered());
    assert!(
        rogue
            .events
            .iter()
            .any(|e| matches!(e, Event::RegistrationFailed { code } if code.to_string() == "4.03")),
        "{:?}",
        rogue.events
    );
    assert_eq!(stats.get("register.rejected.unauthorized_identity"), 1);
}

#[test]
fn a_kit_registers_through_block1_under_its_group_identity() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut d, stats) = dispatcher(&db, 1000);
    // Five devices; each registration lists the four other keys, more than one 64-byte block.
    let keys: Vec<PublicKey> = (0..5)
        .map(|i| {
            let mut st = MemoryStorage::default();
            let dev = Device::boot(
                RustCrypto,
                DeviceConfig::default(),
                &mut st,
                &mut Seeded(100 + i),
                &[],
                &[],
            )
            .unwrap();
            *dev.public_key()
        })
        .collect();
    let group = Identity::of_group(&RustCrypto, &keys).unwrap();
    provision(&db, &group, IdentityKind::Group);
    let mut now = 0;
    for i in 0..5usize {
        let others: Vec<PublicKey> = keys
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, k)| *k)
            .collect();
        let config = DeviceConfig {
            block_szx: 2,
            ..Default::default()
        };
        let mut s = sensor(100 + i as u64, 41000 + i as u16, config, &others);
        assert_eq!(s.device.public_key(), &keys[i]);
        s.step(&mut link(&mut d, &mut now, &db), 10);
        assert!(s.device.is_registered(), "member {i}: {:?}", s.events);
        s.publish(&mut link(&mut d, &mut now, &db), 1.0);
        assert_eq!(s.acked().len(), 1);
    }
    assert!(
        stats.get("coap.block1_continue") >= 5 * 3,
        "{:?}",
        stats.snapshot()
    );
    // An outsider claiming the kit (its own key plus the members') computes another group.
    let mut outsider = sensor(999, 42000, DeviceConfig::default(), &keys[1..]);
    outsider.step(&mut link(&mut d, &mut now, &db), 10);
    assert!(!outsider.device.is_registered());
}

#[test]
fn lost_acknowledgements_are_retransmitted_and_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut d, stats) = dispatcher(&db, 1000);
    let mut s = sensor(3, 40003, DeviceConfig::default(), &[]);
    provision(&db, s.device.identity(), IdentityKind::Device);
    let mut now = 0;
    s.step(&mut link(&mut d, &mut now, &db), 10);
    // The reading reaches the server but the ACK is lost: emulate by delivering the first
    // copy and throwing its answer away.
    let r = [Record {
        name: Some("t"),
        value: Some(Value::Number(1.5)),
        ..Default::default()
    }];
    let seq = s.device.publish(ms(now), &mut s.storage, &r, None).unwrap();
    let mut buf = [0u8; 2048];
    let n = s.device.poll_transmit(&mut buf).unwrap();
    let first = buf[..n].to_vec();
    let _lost = d.handle_at(
        vec![(s.addr, first.clone())],
        Instant::from_millis(now),
        wall(now),
    );
    // The device retransmits after ACK_TIMEOUT; the dedup cache answers.
    s.step(&mut link(&mut d, &mut now, &db), 100_000);
    assert_eq!(s.acked(), vec![seq]);
    assert_eq!(stats.get("coap.duplicate"), 1);
    // After a server restart (no dedup memory) the same message still gets its original
    // answer, from the database.
    drop(d);
    let (mut d2, stats2) = dispatcher(&db, 1000);
    let replies = d2.handle_at(vec![(s.addr, first.clone())], Instant::ZERO, wall(0));
    assert_eq!(
        sigil_coap::Message::parse(&replies[0].1).unwrap().code,
        sigil_coap::Code::CHANGED
    );
    assert_eq!(stats2.get("publish.duplicate"), 1);
    // The same bytes from another address are a replay: Reset, nothing stored.
    let replies = d2.handle_at(
        vec![(SocketAddr::from(([127, 0, 0, 1], 9)), first)],
        Instant::ZERO,
        wall(0),
    );
    assert_eq!(
        sigil_coap::Message::parse(&replies[0].1).unwrap().mtype,
        sigil_coap::MessageType::Reset
    );
    assert_eq!(stats2.get("publish.rejected.replay"), 1);
    assert_eq!(Store::open(&db).unwrap().reading_count().unwrap(), 1);
}

#[test]
fn broker_rollback_triggers_reset_resync_and_republish() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let backup = dir.path().join("backup.db");
    let mut s = sensor(4, 40004, DeviceConfig::default(), &[]);
    provision(&db, s.device.identity(), IdentityKind::Device);
    let mut now = 0;
    {
        let (mut d, _) = dispatcher(&db, 5);
        s.step(&mut link(&mut d, &mut now, &db), 10);
        s.publish(&mut link(&mut d, &mut now, &db), 1.0);
    }
    std::fs::copy(&db, &backup).unwrap();
    {
        let (mut d, _) = dispatcher(&db, 5);
        for i in 0..20 {
            s.publish(&mut link(&mut d, &mut now, &db), f64::from(i));
        }
    }
    // The broker loses its recent state (restored from the backup): the device is now far
    // more than the threshold ahead.
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    std::fs::copy(&backup, &db).unwrap();
    let (mut d, stats) = dispatcher(&db, 5);
    let before = s.acked().len();
    let seq = s.publish(&mut link(&mut d, &mut now, &db), 42.0);
    s.step(&mut link(&mut d, &mut now, &db), 10);
    assert!(s.events.iter().any(|e| matches!(e, Event::Published { seq: q, outcome: PublishOutcome::Reset } if *q == seq)), "{:?}", s.events);
    assert!(s.events.iter().any(|e| matches!(e, Event::Resynchronising)));
    assert_eq!(stats.get("publish.rejected.out_of_window"), 1);
    assert_eq!(stats.get("freshness.resynchronised"), 1);
    // The reading was published again under a new number and acknowledged.
    let acked = s.acked();
    assert_eq!(acked.len(), before + 1);
    assert!(*acked.last().unwrap() > seq);
}

#[test]
fn revocation_and_factory_reset() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut d, stats) = dispatcher(&db, 1000);
    let mut s = sensor(5, 40005, DeviceConfig::default(), &[]);
    let id = *s.device.identity();
    provision(&db, &id, IdentityKind::Device);
    let mut now = 0;
    s.step(&mut link(&mut d, &mut now, &db), 10);
    s.publish(&mut link(&mut d, &mut now, &db), 1.0);
    assert!(Store::open(&db).unwrap().revoke_identity(&id, NOW).unwrap());
    s.publish(&mut link(&mut d, &mut now, &db), 2.0);
    assert!(s.events.iter().any(|e| matches!(e, Event::Published { outcome: PublishOutcome::Rejected(c), .. } if c.to_string() == "4.03")), "{:?}", s.events);
    // Refused with its own reason (docs/security.md, "Revocation").
    assert_eq!(stats.get("publish.rejected.revoked"), 1);
    // Factory reset: a new key pair, hence a new identity that nobody provisioned.
    s.storage = MemoryStorage::default();
    let fresh = Device::boot(
        RustCrypto,
        DeviceConfig::default(),
        &mut s.storage,
        &mut Seeded(55),
        &[],
        &[],
    )
    .unwrap();
    assert_ne!(fresh.identity(), &id);
    assert_ne!(
        RustCrypto
            .public_key(&s.storage.key.clone().unwrap())
            .unwrap(),
        *s.device.public_key()
    );
}

#[test]
fn low_bits_sequence_numbers_and_jws_readings_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut d, stats) = dispatcher(&db, 1000);
    let mut now = 0;
    for (i, config) in [
        DeviceConfig {
            lsb_bits: Some(4),
            ..Default::default()
        },
        DeviceConfig {
            format: sigil_objects::ReadingFormat::Jws,
            algorithm: sigil_crypto::SignatureAlgorithm::EcdsaP256,
            ..Default::default()
        },
    ]
    .into_iter()
    .enumerate()
    {
        let mut s = sensor(10 + i as u64, 43000 + i as u16, config, &[]);
        provision(&db, s.device.identity(), IdentityKind::Device);
        s.step(&mut link(&mut d, &mut now, &db), 10);
        // More readings than 2^4, so the low bits wrap.
        for v in 0..20 {
            s.publish(&mut link(&mut d, &mut now, &db), f64::from(v));
        }
        assert_eq!(s.acked().len(), 20, "{:?}", s.events);
    }
    assert_eq!(stats.get("publish.accepted"), 40);
}

#[test]
fn registrations_are_refreshed_and_expire_when_not() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut d, stats) = dispatcher(&db, 1000);
    let mut s = sensor(
        20,
        44000,
        DeviceConfig {
            lifetime: std::time::Duration::from_secs(60),
            ..Default::default()
        },
        &[],
    );
    provision(&db, s.device.identity(), IdentityKind::Device);
    let mut now = 0;
    s.step(&mut link(&mut d, &mut now, &db), 10);
    // Over three lifetimes the device refreshes its registration before it lapses.
    s.step(&mut link(&mut d, &mut now, &db), 180_000);
    assert!(
        s.events
            .iter()
            .filter(|e| matches!(e, Event::RegistrationRefreshed))
            .count()
            >= 3,
        "{:?}",
        s.events
    );
    s.publish(&mut link(&mut d, &mut now, &db), 1.0);
    assert_eq!(s.acked().len(), 1);
    // Silence for longer than the lifetime (no refresh reaches the server): the topic is gone,
    // the reading is refused with 4.04, the device registers again and publishes the same
    // reading again.
    now += 120_000;
    s.publish(&mut link(&mut d, &mut now, &db), 2.0);
    assert!(s.events.iter().any(|e| matches!(e, Event::Published { outcome: PublishOutcome::Republishing(c), .. } if c.to_string() == "4.04")), "{:?}", s.events);
    s.step(&mut link(&mut d, &mut now, &db), 10);
    assert!(s.device.is_registered());
    assert_eq!(
        s.events
            .iter()
            .filter(|e| matches!(e, Event::Registered))
            .count(),
        2
    );
    assert!(stats.get("publish.rejected.unknown_topic") >= 1);
    assert_eq!(s.acked().len(), 2, "{:?}", s.events);
    s.publish(&mut link(&mut d, &mut now, &db), 3.0);
    assert_eq!(s.acked().len(), 3);
}

#[test]
fn trust_on_first_use_is_off_by_default_and_adds_identities_when_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut d, stats, _) = common::plain_dispatcher(&db, 7, |c| {
        assert!(!c.service.danger_trust_on_first_use);
        c.service.danger_trust_on_first_use = true;
    });
    let mut s = sensor(30, 45000, DeviceConfig::default(), &[]);
    let mut now = 0;
    s.step(&mut link(&mut d, &mut now, &db), 10);
    assert!(s.device.is_registered());
    s.publish(&mut link(&mut d, &mut now, &db), 1.0);
    assert_eq!(s.acked().len(), 1);
    assert_eq!(stats.get("register.trust_on_first_use"), 1);
    let rows = Store::open(&db).unwrap().list_identities().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].label, "trust on first use");
}

#[test]
fn large_history_is_served_block_by_block() {
    use sigil_coap::{option, BlockOption, Code, Message, MessageBuilder, MessageType};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut d, _) = dispatcher(&db, 1000);
    let mut s = sensor(40, 46000, DeviceConfig::default(), &[]);
    provision(&db, s.device.identity(), IdentityKind::Device);
    let mut now = 0;
    s.step(&mut link(&mut d, &mut now, &db), 10);
    for v in 0..30 {
        s.publish(&mut link(&mut d, &mut now, &db), f64::from(v));
    }
    let topic = format!(
        "ps/{}/m",
        s.device.location().unwrap().rsplit('/').next().unwrap()
    );
    let client = SocketAddr::from(([127, 0, 0, 1], 47000));
    // An RFC 9175 client: it repeats a request answered with 4.01 and Echo, and keeps
    // sending the latest Echo value.
    let get = |mid: u16, block: Option<BlockOption>, echo: &[u8]| {
        let mut buf = [0u8; 128];
        let mut b = MessageBuilder::new(
            &mut buf,
            MessageType::Confirmable,
            Code::GET,
            mid,
            &[mid as u8],
        )
        .unwrap();
        b.uri_path(&topic).unwrap();
        b.option(option::URI_QUERY, b"n=30").unwrap();
        if let Some(bl) = block {
            let (v, n) = bl.encode().unwrap();
            b.option(option::BLOCK2, &v[..n]).unwrap();
        }
        if !echo.is_empty() {
            b.option(option::ECHO, echo).unwrap();
        }
        let n = b.finish();
        buf[..n].to_vec()
    };
    let mut body = Vec::new();
    let mut block = None;
    let mut blocks: u16 = 0;
    let mut echo = Vec::new();
    let mut mid: u16 = 100;
    loop {
        mid += 1;
        let replies = d.handle_at(
            vec![(client, get(mid, block, &echo))],
            Instant::from_millis(now),
            wall(now),
        );
        let m = Message::parse(&replies[0].1).unwrap();
        if m.code == Code::UNAUTHORIZED && echo.is_empty() {
            echo = m.option(option::ECHO).expect("4.01 carries Echo").to_vec();
            continue;
        }
        assert_eq!(m.code, Code::CONTENT);
        let b2 = m
            .block2()
            .expect("a 30-reading history needs Block2")
            .unwrap();
        assert_eq!(b2.num, u32::from(blocks));
        if b2.num == 0 {
            assert!(m.uint_option(option::SIZE2).unwrap() > 1024);
        }
        body.extend_from_slice(m.payload);
        blocks += 1;
        if !b2.more {
            break;
        }
        block = Some(BlockOption::new(b2.num + 1, false, b2.szx));
    }
    assert!(blocks >= 3);
    let mut dec = sigil_objects::cbor::Decoder::new(&body);
    assert_eq!(dec.array().unwrap(), 30);
    // A block past the end is refused.
    let replies = d.handle_at(
        vec![(
            client,
            get(999, Some(BlockOption::new(99, false, 6)), &echo),
        )],
        Instant::from_millis(now),
        wall(now),
    );
    assert_eq!(
        Message::parse(&replies[0].1).unwrap().code,
        Code::BAD_OPTION
    );
    // A server serving 256-byte blocks, asked for the second 1,024-byte block, answers
    // the block at that offset in its own size (RFC 7959 §2.4): block 4 of 256 bytes.
    drop(d);
    let (mut small, _, _) = common::plain_dispatcher(&db, 7, |c| c.block2_szx = 4);
    let replies = small.handle_at(
        vec![(
            client,
            get(1000, Some(BlockOption::new(1, false, 6)), &echo),
        )],
        Instant::from_millis(now),
        wall(now),
    );
    let m = Message::parse(&replies[0].1).unwrap();
    assert_eq!(m.code, Code::CONTENT);
    assert_eq!(m.block2().unwrap().unwrap(), BlockOption::new(4, true, 4));
    assert_eq!(m.payload, &body[1024..1280]);
}

/// Regression: a Block2 number past the end of a body made response encoding recurse until
/// the stack overflowed, so one datagram could crash the server.
#[test]
fn regression_block2_past_the_end_does_not_recurse() {
    use sigil_coap::{option, BlockOption, Code, Message, MessageBuilder, MessageType};
    let dir = tempfile::tempdir().unwrap();
    let (mut d, _) = dispatcher(&dir.path().join("s.db"), 1000);
    for (num, szx) in [(1u32, 0u8), (5, 6), (1_048_575, 0)] {
        let mut buf = [0u8; 64];
        let mut b = MessageBuilder::new(
            &mut buf,
            MessageType::Confirmable,
            Code::GET,
            num as u16,
            &[1],
        )
        .unwrap();
        b.uri_path(".well-known/core").unwrap();
        // A filter nothing matches: the body is empty, so every block number is past its end.
        b.option(option::URI_QUERY, b"rt=none").unwrap();
        let (v, n) = BlockOption::new(num, false, szx).encode().unwrap();
        b.option(option::BLOCK2, &v[..n]).unwrap();
        let n = b.finish();
        let replies = d.handle_at(
            vec![(SocketAddr::from(([127, 0, 0, 1], 9)), buf[..n].to_vec())],
            Instant::ZERO,
            wall(0),
        );
        let m = Message::parse(&replies[0].1).unwrap();
        assert_eq!(m.code, Code::BAD_OPTION, "block {num}");
        assert!(m.block2().is_none());
    }
}

/// One raw CoAP request to the dispatcher, each with a new message ID (so none is answered
/// from the deduplication cache); returns the answer's code and payload.
fn raw(
    d: &mut Dispatcher,
    mtype: sigil_coap::MessageType,
    code: sigil_coap::Code,
    path: &str,
    query: &[String],
    payload: &[u8],
) -> Option<(sigil_coap::Code, Vec<u8>)> {
    use sigil_coap::{option, Message, MessageBuilder};
    static NEXT_MID: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(20_000);
    let client = SocketAddr::from(([127, 0, 0, 1], 49999));
    let mut echo: Option<Vec<u8>> = None;
    loop {
        let mid = NEXT_MID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut buf = [0u8; 1024];
        let mut b = MessageBuilder::new(&mut buf, mtype, code, mid, &mid.to_be_bytes()).unwrap();
        b.uri_path(path).unwrap();
        for q in query {
            b.option(option::URI_QUERY, q.as_bytes()).unwrap();
        }
        if let Some(e) = &echo {
            b.option(option::ECHO, e).unwrap();
        }
        let n = if payload.is_empty() {
            b.finish()
        } else {
            b.finish_with_payload(payload).unwrap()
        };
        let replies = d.handle_at(vec![(client, buf[..n].to_vec())], Instant::ZERO, wall(0));
        let answer = replies.first().map(|(_, r)| {
            let m = Message::parse(r).unwrap();
            (
                m.code,
                m.payload.to_vec(),
                m.option(option::ECHO).map(<[u8]>::to_vec),
            )
        });
        // RFC 9175 §2.4: a large answer to an unverified address waits for the Echo.
        match answer {
            Some((sigil_coap::Code::UNAUTHORIZED, _, Some(e))) if echo.is_none() => echo = Some(e),
            a => return a.map(|(c, p, _)| (c, p)),
        }
    }
}

/// The topic's stored readings, verified end to end as the application does.
fn verified_history(d: &mut Dispatcher, topic: &str, key: &PublicKey, id: &Identity) -> Vec<u64> {
    use sigil_objects::cose::SeqField;
    use sigil_objects::SignedReading;
    let (code, body) = raw(
        d,
        sigil_coap::MessageType::Confirmable,
        sigil_coap::Code::GET,
        topic,
        &["n=100".into()],
        &[],
    )
    .unwrap();
    assert_eq!(code, sigil_coap::Code::CONTENT);
    let mut dec = sigil_objects::cbor::Decoder::new(&body);
    let n = dec.array().unwrap();
    (0..n)
        .map(|_| {
            let bytes = dec.bytes().unwrap();
            let r = SignedReading::parse(sigil_objects::ReadingFormat::Cose, bytes).unwrap();
            let SeqField::Full(seq) = r.seq else {
                panic!("full numbers expected")
            };
            let mut scratch = vec![0u8; r.scratch_len()];
            r.verify_end_to_end(&RustCrypto, key, id, seq, &mut scratch)
                .unwrap();
            seq
        })
        .collect()
}

fn topic_of(s: &Sensor) -> String {
    format!(
        "ps/{}/m",
        s.device.location().unwrap().rsplit('/').next().unwrap()
    )
}

#[test]
fn non_confirmable_readings_are_stored_and_verify_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut d, stats) = dispatcher(&db, 1000);
    let config = DeviceConfig {
        confirm_every: 0,
        ..Default::default()
    };
    let mut s = sensor(50, 48000, config, &[]);
    provision(&db, s.device.identity(), IdentityKind::Device);
    let mut now = 0;
    s.step(&mut link(&mut d, &mut now, &db), 10);
    assert!(s.device.is_registered());
    let seqs: Vec<u64> = (0..5)
        .map(|v| s.publish(&mut link(&mut d, &mut now, &db), f64::from(v)))
        .collect();
    // Every reading left as Non-confirmable: none is acknowledged, each one is Sent.
    assert!(s.acked().is_empty(), "{:?}", s.events);
    let sent: Vec<u64> = s
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Published {
                seq,
                outcome: PublishOutcome::Sent,
            } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(sent, seqs);
    let last = s.sent.last().unwrap().clone();
    let m = sigil_coap::Message::parse(&last).unwrap();
    assert_eq!(m.mtype, sigil_coap::MessageType::NonConfirmable);
    assert_eq!(stats.get("publish.accepted"), 5);
    let topic = topic_of(&s);
    let key = *s.device.public_key();
    let id = *s.device.identity();
    assert_eq!(verified_history(&mut d, &topic, &key, &id), seqs);

    // A Non-confirmable reading with one signature byte changed is not stored.
    let mut bad = last.clone();
    bad[2..4].copy_from_slice(&0xbeefu16.to_be_bytes());
    let end = bad.len() - 1;
    bad[end] ^= 1;
    d.handle_at(vec![(s.addr, bad)], Instant::ZERO, wall(0));
    assert_eq!(stats.get("publish.accepted"), 5);
    assert_eq!(verified_history(&mut d, &topic, &key, &id), seqs);
    // Nor is the same reading delivered again in a new Non-confirmable message (a replay).
    let mut again = last;
    again[2..4].copy_from_slice(&0xbef0u16.to_be_bytes());
    d.handle_at(vec![(s.addr, again)], Instant::ZERO, wall(0));
    assert_eq!(stats.get("publish.accepted"), 5);
    assert_eq!(verified_history(&mut d, &topic, &key, &id), seqs);
}

/// RFC 9176 §5.3.2 removal. Regression: `ss` without `sq` skipped the signature check and
/// removed any registration, and a signed statement already seen (the registration's own)
/// could be replayed to remove it.
#[test]
fn removal_needs_a_fresh_signature_by_the_registered_key_and_drops_the_topic() {
    use sigil_coap::{Code, MessageType};
    use sigil_objects::resync::{sign_statement, Operation, OperationKind};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut d, stats) = dispatcher(&db, 1000);
    let mut s = sensor(60, 48100, DeviceConfig::default(), &[]);
    let id = *s.device.identity();
    provision(&db, &id, IdentityKind::Device);
    let mut now = 0;
    s.step(&mut link(&mut d, &mut now, &db), 10);
    let seq = s.publish(&mut link(&mut d, &mut now, &db), 21.0);
    let location = s.device.location().unwrap().to_string();
    let topic = topic_of(&s);
    let key = s.storage.key.clone().unwrap();
    let sig = |seq: u64, k: &sigil_crypto::SecretKey| {
        let removal = Operation {
            kind: OperationKind::Remove,
            lifetime: None,
            base: None,
            payload: &[],
        };
        let digest = removal.digest(&RustCrypto).unwrap();
        let sig = sign_statement(&RustCrypto, k, &id, seq, &digest).unwrap();
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig.0)
    };
    let delete = |d: &mut Dispatcher, query: &[String]| {
        raw(
            d,
            MessageType::Confirmable,
            Code::DELETE,
            &location,
            query,
            &[],
        )
        .unwrap()
        .0
    };
    let lookup = |d: &mut Dispatcher| {
        let (code, body) = raw(
            d,
            MessageType::Confirmable,
            Code::GET,
            "rd-lookup/res",
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(code, Code::CONTENT);
        String::from_utf8(body).unwrap()
    };
    assert!(lookup(&mut d).contains(&id.to_string()));

    // Unsigned, half-signed, or signed by another key: refused, and nothing is removed.
    assert_eq!(delete(&mut d, &[]), Code::UNAUTHORIZED);
    assert_eq!(
        delete(&mut d, &[format!("ss={}", sig(seq + 1, &key))]),
        Code::UNAUTHORIZED
    );
    let rogue = RustCrypto
        .generate(sigil_crypto::SignatureAlgorithm::Ed25519, &mut Seeded(99))
        .unwrap();
    assert_eq!(
        delete(
            &mut d,
            &[
                format!("sq={}", seq + 1),
                format!("ss={}", sig(seq + 1, &rogue))
            ]
        ),
        Code::UNAUTHORIZED
    );
    // The device's own statement for a number already seen (e.g. its registration's, which
    // crossed the network) cannot be replayed as a removal.
    assert_eq!(
        delete(
            &mut d,
            &[format!("sq={seq}"), format!("ss={}", sig(seq, &key))]
        ),
        Code::UNAUTHORIZED
    );
    assert_eq!(stats.get("register.removed"), 0);
    assert!(lookup(&mut d).contains(&id.to_string()));
    assert_eq!(
        raw(
            &mut d,
            MessageType::Confirmable,
            Code::GET,
            &topic,
            &[],
            &[]
        )
        .unwrap()
        .0,
        Code::CONTENT
    );

    // Signed by the registered key with a new number: removed (RFC 9176 §5.3.2), and its
    // topic goes with it.
    assert_eq!(
        delete(
            &mut d,
            &[
                format!("sq={}", seq + 5),
                format!("ss={}", sig(seq + 5, &key))
            ]
        ),
        Code::DELETED
    );
    assert_eq!(stats.get("register.removed"), 1);
    assert!(!lookup(&mut d).contains(&id.to_string()));
    assert_eq!(
        raw(
            &mut d,
            MessageType::Confirmable,
            Code::GET,
            &topic,
            &[],
            &[]
        )
        .unwrap()
        .0,
        Code::NOT_FOUND
    );
    // A reading for the removed topic (the device's last one, in a new message) is refused.
    let mut again = s.sent.last().unwrap().clone();
    again[2..4].copy_from_slice(&9003u16.to_be_bytes());
    let replies = d.handle_at(vec![(s.addr, again)], Instant::ZERO, wall(0));
    let m = sigil_coap::Message::parse(&replies[0].1).unwrap();
    assert_eq!(m.code, Code::NOT_FOUND);
    // Removing it again: it is gone.
    assert_eq!(
        delete(
            &mut d,
            &[
                format!("sq={}", seq + 6),
                format!("ss={}", sig(seq + 6, &key))
            ]
        ),
        Code::NOT_FOUND
    );
}
