//! The device against a scripted peer, for exchanges the Sigil server never produces itself:
//! separate responses (RFC 7252 §5.2.2), their duplicates, requests to the device, garbage.

use sigil_coap::message::{empty, option};
use sigil_coap::{Code, Message, MessageBuilder, MessageType};
use sigil_crypto::RustCrypto;
use sigil_device::{Device, DeviceConfig, Event, MemoryStorage, PublishOutcome};
use sigil_objects::senml::{Record, Value};
use sigil_testkit::Fixed;
use sigil_time::Instant;

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn response(mtype: MessageType, code: Code, mid: u16, token: &[u8], location: &[&str]) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let mut b = MessageBuilder::new(&mut buf, mtype, code, mid, token).unwrap();
    for seg in location {
        b.option(option::LOCATION_PATH, seg.as_bytes()).unwrap();
    }
    let n = b.finish();
    buf[..n].to_vec()
}

fn sent(d: &mut Device<RustCrypto>) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut buf = [0u8; 1024];
    while let Some(n) = d.poll_transmit(&mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

fn registered() -> (Device<RustCrypto>, MemoryStorage) {
    let mut st = MemoryStorage::default();
    let mut d = Device::boot(
        RustCrypto,
        DeviceConfig::default(),
        &mut st,
        &mut Fixed(1),
        &[],
        &[],
    )
    .unwrap();
    d.handle_timeout(at(0), &mut st).unwrap();
    let reg = sent(&mut d).pop().unwrap();
    let m = Message::parse(&reg).unwrap();
    assert_eq!(m.code, Code::POST);
    assert!(m.query_param("ss").is_some() && m.query_param("sq").is_some());
    d.handle_datagram(
        at(1),
        &mut st,
        &response(
            MessageType::Acknowledgement,
            Code::CREATED,
            m.message_id,
            m.token,
            &["rd", "7"],
        ),
    )
    .unwrap();
    assert_eq!(d.poll_event(), Some(Event::Registered));
    assert_eq!(d.location(), Some("rd/7"));
    (d, st)
}

#[test]
fn separate_response_is_acknowledged_and_its_duplicate_acknowledged_again() {
    let (mut d, mut st) = registered();
    let r = [Record {
        name: Some("t"),
        value: Some(Value::Number(1.0)),
        ..Default::default()
    }];
    let seq = d.publish(at(10), &mut st, &r, None).unwrap();
    let put = sent(&mut d).pop().unwrap();
    let m = Message::parse(&put).unwrap();
    assert_eq!(
        m.uri_path().map(|s| s.unwrap()).collect::<Vec<_>>(),
        ["ps", "7", "m"]
    );
    // Empty ACK: the answer comes later; the device stops retransmitting.
    d.handle_datagram(
        at(11),
        &mut st,
        &empty(MessageType::Acknowledgement, m.message_id),
    )
    .unwrap();
    d.handle_timeout(at(60_000), &mut st).unwrap();
    assert!(
        sent(&mut d).is_empty(),
        "no retransmission after an Empty ACK"
    );
    let sep = response(
        MessageType::Confirmable,
        Code::CHANGED,
        0x4242,
        m.token,
        &[],
    );
    d.handle_datagram(at(70_000), &mut st, &sep).unwrap();
    assert_eq!(
        d.poll_event(),
        Some(Event::Published {
            seq,
            outcome: PublishOutcome::Acknowledged
        })
    );
    let acks = sent(&mut d);
    assert_eq!(
        acks,
        vec![empty(MessageType::Acknowledgement, 0x4242).to_vec()]
    );
    d.handle_datagram(at(70_001), &mut st, &sep).unwrap();
    assert_eq!(
        sent(&mut d),
        vec![empty(MessageType::Acknowledgement, 0x4242).to_vec()]
    );
    assert_eq!(d.poll_event(), None);
}

#[test]
fn requests_to_the_device_and_unknown_responses_are_reset_and_garbage_is_counted() {
    let (mut d, mut st) = registered();
    let mut buf = [0u8; 32];
    let b = MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, 99, &[1]).unwrap();
    let n = b.finish();
    d.handle_datagram(at(5), &mut st, &buf[..n]).unwrap();
    assert_eq!(sent(&mut d), vec![empty(MessageType::Reset, 99).to_vec()]);
    d.handle_datagram(
        at(6),
        &mut st,
        &response(
            MessageType::Confirmable,
            Code::CONTENT,
            100,
            &[9, 9, 9, 9],
            &[],
        ),
    )
    .unwrap();
    assert_eq!(sent(&mut d), vec![empty(MessageType::Reset, 100).to_vec()]);
    for junk in [&[][..], &[0xff; 3], &[0x40, 0x01, 0x00], &[0x4f, 0, 0, 0]] {
        d.handle_datagram(at(7), &mut st, junk).unwrap();
    }
    assert_eq!(d.stats.malformed, 4);
    assert!(d.is_registered());
}

#[test]
fn timeout_after_max_retransmit_reports_the_reading_lost() {
    let (mut d, mut st) = registered();
    let r = [Record {
        name: Some("t"),
        value: Some(Value::Number(1.0)),
        ..Default::default()
    }];
    let seq = d.publish(at(0), &mut st, &r, None).unwrap();
    let mut sends = sent(&mut d).len();
    let mut now = at(0);
    while let Some(t) = d.poll_timeout() {
        if t > at(1_000_000) {
            break;
        }
        now = t;
        d.handle_timeout(now, &mut st).unwrap();
        sends += sent(&mut d).len();
        if d.can_publish() {
            break;
        }
    }
    assert_eq!(
        sends, 5,
        "one transmission and MAX_RETRANSMIT = 4 retransmissions"
    );
    assert!((at(45_000)..=at(93_000)).contains(&now), "gave up at {now}");
    assert_eq!(
        d.poll_event(),
        Some(Event::Published {
            seq,
            outcome: PublishOutcome::TimedOut
        })
    );
}

#[test]
fn a_continue_for_an_unblocked_registration_is_refused_not_fatal() {
    let mut st = MemoryStorage::default();
    let mut d = Device::boot(
        RustCrypto,
        DeviceConfig::default(),
        &mut st,
        &mut Fixed(1),
        &[],
        &[],
    )
    .unwrap();
    d.handle_timeout(at(0), &mut st).unwrap();
    let reg = sent(&mut d).pop().unwrap();
    let m = Message::parse(&reg).unwrap();
    assert!(m.block1().is_none(), "a small registration is sent whole");
    // A hostile or broken server answers 2.31 Continue: no error, no crash, counted.
    d.handle_datagram(
        at(1),
        &mut st,
        &response(
            MessageType::Acknowledgement,
            Code::CONTINUE,
            m.message_id,
            m.token,
            &[],
        ),
    )
    .unwrap();
    assert_eq!(d.stats.unexpected, 1);
    assert!(!d.is_registered());
    assert!(matches!(
        d.poll_event(),
        Some(Event::RegistrationFailed { .. })
    ));
    // It registers again after its back-off.
    let retry = d.poll_timeout().unwrap();
    d.handle_timeout(retry, &mut st).unwrap();
    assert_eq!(sent(&mut d).len(), 1);
}
