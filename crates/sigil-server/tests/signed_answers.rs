//! Signed answers on plain coap:// (`sigil_server::answers`): the real device state machine,
//! requiring signed answers under the server's key, against the real dispatcher in memory.
//! The server signs the registration's 2.01, the update's 2.04 and the resynchronisation
//! (4.09 instead of Reset) within its signature budget and the amplification limit; over the
//! budget, answers go out unsigned and the device does not act on them.

use sigil_coap::{Code, Message, MessageType};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_device::{Device, DeviceConfig, Event, MemoryStorage, PublishOutcome};
use sigil_objects::answer::{self, RESYNC_CODE};
use sigil_server::answers::AnswerRates;
use sigil_server::store::IdentityKind;
use sigil_server::{Dispatcher, Stats, Store};
use sigil_testkit::server::sensor::{Link, Sensor};
use sigil_testkit::server::{ms, wall, NOW};
use sigil_testkit::Seeded;
use std::net::SocketAddr;
use std::path::Path;

fn server_key() -> (SecretKey, PublicKey) {
    let k = SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &[0x5e; 32]).unwrap();
    let p = RustCrypto.public_key(&k).unwrap();
    (k, p)
}

fn dispatcher(db: &Path, rates: AnswerRates, key: Option<SecretKey>) -> (Dispatcher, Stats) {
    let (mut d, stats, _) = sigil_testkit::server::plain_dispatcher(db, 7, |c| {
        c.service.freshness.max_ahead = 5;
        c.answer_rates = rates;
    });
    if let Some(k) = key {
        d.set_answer_key(k);
    }
    (d, stats)
}

/// The device (seed 31, at 127.0.0.1:40031) requiring answers signed by `trusted`, its
/// readings in Cel without a time, provisioned in `db`; every (request, answer) pair kept.
fn sensor(db: &Path, trusted: PublicKey, config: DeviceConfig) -> Sensor {
    let config = DeviceConfig {
        require_signed_answers: true,
        ..config
    };
    let mut s = Sensor::new(31, SocketAddr::from(([127, 0, 0, 1], 40031)), config, &[]);
    s.device.trust_server_key(trusted);
    s.unit = Some("Cel");
    s.time = None;
    s.exchanges = Some(vec![]);
    Store::open(db)
        .unwrap()
        .add_identity(s.device.identity(), IdentityKind::Device, "", NOW)
        .unwrap();
    s
}

/// The dispatcher `d` at the test's clock `now`, as the sensor talks to it.
fn link<'a>(d: &'a mut Dispatcher, now: &'a mut u64, db: &'a Path) -> Link<'a> {
    Link { d, now, db }
}

/// The last answer with `code` the sensor got and the request it answered.
fn last(s: &Sensor, code: Code) -> (Vec<u8>, Vec<u8>) {
    s.exchanges
        .iter()
        .flatten()
        .rev()
        .find(|(_, a)| Message::parse(a).unwrap().code == code)
        .cloned()
        .unwrap_or_else(|| panic!("no {code} answer"))
}

fn signed(answer: &[u8]) -> bool {
    Message::parse(answer)
        .unwrap()
        .option(answer::SIGNATURE_OPTION)
        .is_some_and(|s| s.len() == 64)
}

/// Within three times its request, as every answer to an unverified coap:// address.
fn small(request: &[u8], answer: &[u8]) -> bool {
    answer.len() <= 3 * request.len()
}

#[test]
fn registration_update_and_resync_are_signed_and_acted_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let backup = dir.path().join("backup.db");
    let (key, public) = server_key();
    let mut s = sensor(&db, public, DeviceConfig::default());
    let mut now = 0;
    {
        let (mut d, stats) = dispatcher(&db, AnswerRates::default(), Some(key.clone()));
        s.step(&mut link(&mut d, &mut now, &db), 10);
        assert!(s.device.is_registered(), "{:?}", s.events);
        let (req, created) = last(&s, Code::CREATED);
        assert!(signed(&created));
        assert!(small(&req, &created), "{} for {}", created.len(), req.len());
        eprintln!(
            "signed 2.01: {} bytes for a {}-byte registration",
            created.len(),
            req.len()
        );
        assert_eq!(stats.get("answer.signed"), 1);
        s.publish(&mut link(&mut d, &mut now, &db), 1.0);
        let (_, ack) = last(&s, Code::CHANGED);
        assert!(!signed(&ack), "a publication's 2.04 is not signed");
        // The refresh (at 4/5 of the 300 s lifetime) is answered with a signed 2.04.
        s.step(&mut link(&mut d, &mut now, &db), 241_000);
        assert!(
            s.events.contains(&Event::RegistrationRefreshed),
            "{:?}",
            s.events
        );
        let (req, changed) = last(&s, Code::CHANGED);
        assert!(signed(&changed) && small(&req, &changed));
        eprintln!(
            "signed 2.04: {} bytes for a {}-byte update",
            changed.len(),
            req.len()
        );
        assert_eq!(stats.get("answer.signed"), 2);
    }
    std::fs::copy(&db, &backup).unwrap();
    {
        let (mut d, _) = dispatcher(&db, AnswerRates::default(), Some(key.clone()));
        for i in 0..10 {
            s.publish(&mut link(&mut d, &mut now, &db), f64::from(i));
        }
    }
    // The broker restored from a backup: the device is far ahead of its mark, and gets a
    // signed 4.09 in place of Reset.
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    std::fs::copy(&backup, &db).unwrap();
    let (mut d, stats) = dispatcher(&db, AnswerRates::default(), Some(key));
    let before = s.events.len();
    let seq = s.publish(&mut link(&mut d, &mut now, &db), 42.0);
    s.step(&mut link(&mut d, &mut now, &db), 10);
    let (req, resync) = last(&s, Code(RESYNC_CODE));
    let m = Message::parse(&resync).unwrap();
    assert_eq!(m.mtype, MessageType::Acknowledgement);
    assert!(signed(&resync) && small(&req, &resync));
    eprintln!(
        "signed resync 4.09: {} bytes for a {}-byte publication",
        resync.len(),
        req.len()
    );
    let events = &s.events[before..];
    assert!(
        events.contains(&Event::Published {
            seq,
            outcome: PublishOutcome::Reset
        }),
        "{events:?}"
    );
    assert!(events.contains(&Event::Resynchronising));
    assert_eq!(stats.get("publish.rejected.out_of_window"), 1);
    // Registered again (signed 2.01) and the reading published again under a new number.
    assert!(s.device.is_registered());
    assert!(events.iter().any(|e| matches!(e,
        Event::Published { seq: q, outcome: PublishOutcome::Acknowledged } if *q > seq)));
    assert_eq!(stats.get("answer.signed"), 2);
    assert_eq!(s.device.stats.unsigned_answers, 0);
    assert_eq!(s.device.stats.bad_answer_signatures, 0);
}

#[test]
fn over_budget_or_without_a_key_answers_go_unsigned_and_are_not_acted_on() {
    for (rates, key, counter) in [
        (
            AnswerRates {
                host_burst: 0.0,
                ..Default::default()
            },
            Some(server_key().0),
            "answer.unsigned.host_budget",
        ),
        (
            AnswerRates {
                total_burst: 0.0,
                ..Default::default()
            },
            Some(server_key().0),
            "answer.unsigned.total_budget",
        ),
        (AnswerRates::default(), None, "answer.unsigned.no_key"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let mut s = sensor(&db, server_key().1, DeviceConfig::default());
        let (mut d, stats) = dispatcher(&db, rates, key);
        let mut now = 0;
        s.step(&mut link(&mut d, &mut now, &db), 10);
        assert!(!s.device.is_registered(), "{counter}");
        // Every retransmission got the unsigned answer again (from the dedup cache); then the
        // exchange failed as one without an answer, and the next attempt fared no better.
        s.step(&mut link(&mut d, &mut now, &db), 100_000);
        assert!(!s.device.is_registered(), "{counter}");
        assert!(stats.get(counter) >= 1, "{counter}");
        assert!(s.device.stats.unsigned_answers >= 2, "{counter}");
        assert_eq!(stats.get("answer.signed"), 0);
    }
}

#[test]
fn a_device_that_does_not_ask_gets_unsigned_answers() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let mut storage = MemoryStorage::default();
    let mut device = Device::boot(
        RustCrypto,
        DeviceConfig::default(),
        &mut storage,
        &mut Seeded(32),
        &[],
        &[],
    )
    .unwrap();
    Store::open(&db)
        .unwrap()
        .add_identity(device.identity(), IdentityKind::Device, "", NOW)
        .unwrap();
    let (mut d, stats) = dispatcher(&db, AnswerRates::default(), Some(server_key().0));
    device.handle_timeout(ms(0), &mut storage).unwrap();
    let mut buf = [0u8; 2048];
    let n = device.poll_transmit(&mut buf).unwrap();
    let replies = d.handle_at(
        vec![(SocketAddr::from(([127, 0, 0, 1], 40032)), buf[..n].to_vec())],
        ms(0),
        wall(0),
    );
    let m = Message::parse(&replies[0].1).unwrap();
    assert_eq!(m.code, Code::CREATED);
    assert!(!signed(&replies[0].1));
    assert_eq!(stats.get("answer.signed"), 0);
}

/// Over coaps:// the session authenticates every answer: the option changes nothing.
#[test]
fn over_coaps_nothing_is_signed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (key, public) = server_key();
    let mut s = sensor(&db, public, DeviceConfig::default());
    let (mut d, stats) = dispatcher(&db, AnswerRates::default(), Some(key));
    s.device.handle_timeout(ms(0), &mut s.storage).unwrap();
    let mut buf = [0u8; 2048];
    let n = s.device.poll_transmit(&mut buf).unwrap();
    assert!(Message::parse(&buf[..n])
        .unwrap()
        .option(answer::REQUIRE_OPTION)
        .is_some());
    let inbound = sigil_server::Inbound {
        from: sigil_server::Endpoint::dtls(s.addr),
        to: None,
        auth: Some(sigil_server::PeerAuth::Psk(*s.device.identity())),
        bytes: buf[..n].to_vec(),
    };
    let replies = d.handle_inbound_at(vec![inbound], ms(0), wall(0));
    let m = Message::parse(&replies[0].1).unwrap();
    assert_eq!(m.code, Code::CREATED);
    assert!(!signed(&replies[0].1));
    assert_eq!(stats.get("answer.signed"), 0);
    assert_eq!(stats.get("answer.unsigned.no_key"), 0);
}

/// A registration in several Block1 blocks: the signed 2.01 answers the last one and binds the
/// whole body, as the device checks it.
#[test]
fn a_blockwise_registration_gets_a_signed_created_for_the_whole_body() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (key, public) = server_key();
    let config = DeviceConfig {
        block_szx: 2,
        ..Default::default()
    };
    let mut s = sensor(&db, public, config);
    let (mut d, stats) = dispatcher(&db, AnswerRates::default(), Some(key));
    let mut now = 0;
    s.step(&mut link(&mut d, &mut now, &db), 10);
    assert!(s.device.is_registered(), "{:?}", s.events);
    assert!(
        stats.get("coap.block1_continue") >= 1,
        "{:?}",
        stats.snapshot()
    );
    let (req, created) = last(&s, Code::CREATED);
    assert!(Message::parse(&req).unwrap().block1().is_some());
    assert!(signed(&created));
    assert_eq!(stats.get("answer.signed"), 1);
    assert_eq!(s.device.stats.bad_answer_signatures, 0);
}
