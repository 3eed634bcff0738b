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

/// A registration in Block1 blocks follows a server that asks for smaller blocks in its
/// 2.31 Continue (RFC 7959 §2.5): the rest of the body comes in the server's size, from the
/// offset the server has, and a 2.31 naming another block ends the attempt.
#[test]
fn a_registration_in_blocks_follows_a_smaller_block_size() {
    use sigil_coap::BlockOption;
    let continue_ = |m: &Message<'_>, b1: BlockOption| {
        let mut buf = [0u8; 64];
        let mut b = MessageBuilder::new(
            &mut buf,
            MessageType::Acknowledgement,
            Code::CONTINUE,
            m.message_id,
            m.token,
        )
        .unwrap();
        let (v, n) = b1.encode().unwrap();
        b.option(option::BLOCK1, &v[..n]).unwrap();
        let n = b.finish();
        buf[..n].to_vec()
    };
    let mut st = MemoryStorage::default();
    let config = DeviceConfig {
        block_szx: 1,
        ..DeviceConfig::default()
    };
    let mut d = Device::boot(RustCrypto, config, &mut st, &mut Fixed(1), &[], &[]).unwrap();
    d.handle_timeout(at(0), &mut st).unwrap();
    let mut body = Vec::new();
    let mut blocks = Vec::new();
    let mut t = 1;
    loop {
        let reg = sent(&mut d).pop().expect("the next block");
        let m = Message::parse(&reg).unwrap();
        let b1 = m.block1().expect("sent in blocks").unwrap();
        assert_eq!(b1.offset(), body.len(), "block {b1:?} out of sequence");
        body.extend_from_slice(m.payload);
        blocks.push((b1.num, b1.szx));
        t += 1;
        if !b1.more {
            assert_eq!(m.uint_option(option::SIZE1), Some(body.len() as u32));
            d.handle_datagram(at(t), &mut st, &ack(&m, Code::CREATED, &["rd", "3"]))
                .unwrap();
            break;
        }
        // 16-byte blocks after the first (the echo names the block sent, in the new size).
        let echo = BlockOption::new(b1.num, true, 0);
        d.handle_datagram(at(t), &mut st, &continue_(&m, echo))
            .unwrap();
    }
    assert!(d.is_registered());
    assert!(blocks.len() >= 3, "{blocks:?}");
    assert_eq!(blocks[0], (0, 1));
    // After 32 bytes, 16-byte blocks from block 2.
    assert_eq!(blocks[1], (2, 0));
    assert!(blocks[1..].iter().all(|b| b.1 == 0));
    assert_eq!(d.stats.unexpected, 0);

    // A 2.31 for a block it did not send: counted, the attempt fails, nothing more is sent.
    let mut st = MemoryStorage::default();
    let mut d = Device::boot(RustCrypto, config, &mut st, &mut Fixed(2), &[], &[]).unwrap();
    d.handle_timeout(at(0), &mut st).unwrap();
    let reg = sent(&mut d).pop().unwrap();
    let m = Message::parse(&reg).unwrap();
    d.handle_datagram(at(1), &mut st, &continue_(&m, BlockOption::new(5, true, 1)))
        .unwrap();
    assert_eq!(d.stats.unexpected, 1);
    assert!(sent(&mut d).is_empty());
    assert!(matches!(
        d.poll_event(),
        Some(Event::RegistrationFailed { .. })
    ));
}

fn ack(m: &Message<'_>, code: Code, location: &[&str]) -> Vec<u8> {
    response(
        MessageType::Acknowledgement,
        code,
        m.message_id,
        m.token,
        location,
    )
}

/// The SenML a COSE reading carries.
fn senml_of(put: &[u8]) -> Vec<u8> {
    let m = Message::parse(put).unwrap();
    sigil_objects::cose::CoseSign1::parse(m.payload)
        .unwrap()
        .payload
        .to_vec()
}

/// Issue 12: a reading the broker refuses with 4.04 (registration gone) or 4.15 (topic
/// registered with another format) is not dropped: the device registers again in full (not
/// an update) and publishes the same reading again, Confirmable, under a new number.
#[test]
fn a_refused_reading_leads_to_a_full_registration_and_is_published_again() {
    for code in [Code::NOT_FOUND, Code::UNSUPPORTED_CONTENT_FORMAT] {
        let (mut d, mut st) = registered();
        let r = [Record {
            name: Some("t"),
            value: Some(Value::Number(22.5)),
            ..Default::default()
        }];
        let seq = d.publish(at(10), &mut st, &r, None).unwrap();
        let put = sent(&mut d).pop().unwrap();
        let reading = senml_of(&put);
        d.handle_datagram(
            at(11),
            &mut st,
            &ack(&Message::parse(&put).unwrap(), code, &[]),
        )
        .unwrap();
        assert_eq!(
            d.poll_event(),
            Some(Event::Published {
                seq,
                outcome: PublishOutcome::Republishing(code)
            })
        );
        assert!(!d.is_registered());
        d.handle_timeout(at(12), &mut st).unwrap();
        let reg = sent(&mut d).pop().expect("registers at once");
        let m = Message::parse(&reg).unwrap();
        assert_eq!(m.code, Code::POST);
        assert_eq!(m.uri_path().map(|s| s.unwrap()).collect::<Vec<_>>(), ["rd"]);
        assert!(m.query_param("ep").is_some());
        let sq: u64 = m.query_param("sq").unwrap().parse().unwrap();
        assert!(sq > seq && m.query_param("ss").is_some());
        assert!(core::str::from_utf8(m.payload).unwrap().contains("key="));
        d.handle_datagram(at(13), &mut st, &ack(&m, Code::CREATED, &["rd", "8"]))
            .unwrap();
        assert_eq!(d.poll_event(), Some(Event::Registered));
        let again = sent(&mut d).pop().expect("the reading goes out again");
        let m = Message::parse(&again).unwrap();
        assert_eq!(m.mtype, MessageType::Confirmable);
        assert_eq!(
            m.uri_path().map(|s| s.unwrap()).collect::<Vec<_>>(),
            ["ps", "8", "m"]
        );
        assert_eq!(senml_of(&again), reading, "the same reading");
        d.handle_datagram(at(14), &mut st, &ack(&m, Code::CHANGED, &[]))
            .unwrap();
        match d.poll_event() {
            Some(Event::Published {
                seq: s,
                outcome: PublishOutcome::Acknowledged,
            }) => assert!(s > sq, "a new number above the registration's"),
            other => panic!("{other:?}"),
        }
    }
}

/// If the reading is refused again right after a fresh registration, the device backs off
/// as a failed registration does instead of looping, and still keeps the reading.
#[test]
fn a_reading_refused_again_after_a_fresh_registration_backs_off() {
    let (mut d, mut st) = registered();
    let r = [Record {
        name: Some("t"),
        value: Some(Value::Number(3.0)),
        ..Default::default()
    }];
    d.publish(at(10), &mut st, &r, None).unwrap();
    let put = sent(&mut d).pop().unwrap();
    let reading = senml_of(&put);
    let refuse = Code::UNSUPPORTED_CONTENT_FORMAT;
    d.handle_datagram(
        at(11),
        &mut st,
        &ack(&Message::parse(&put).unwrap(), refuse, &[]),
    )
    .unwrap();
    d.handle_timeout(at(12), &mut st).unwrap();
    let reg = sent(&mut d).pop().unwrap();
    d.handle_datagram(
        at(13),
        &mut st,
        &ack(&Message::parse(&reg).unwrap(), Code::CREATED, &["rd", "7"]),
    )
    .unwrap();
    let again = sent(&mut d).pop().unwrap();
    d.handle_datagram(
        at(14),
        &mut st,
        &ack(&Message::parse(&again).unwrap(), refuse, &[]),
    )
    .unwrap();
    while d.poll_event().is_some() {}
    d.handle_timeout(at(15), &mut st).unwrap();
    assert!(sent(&mut d).is_empty(), "no immediate second registration");
    let wake = d.poll_timeout().unwrap();
    assert!(wake >= at(14 + 10_000), "{wake:?}");
    d.handle_timeout(wake, &mut st).unwrap();
    let reg = sent(&mut d).pop().expect("registers after the back-off");
    let m = Message::parse(&reg).unwrap();
    assert_eq!(m.uri_path().map(|s| s.unwrap()).collect::<Vec<_>>(), ["rd"]);
    d.handle_datagram(wake, &mut st, &ack(&m, Code::CREATED, &["rd", "7"]))
        .unwrap();
    let third = sent(&mut d).pop().expect("the reading is still kept");
    assert_eq!(senml_of(&third), reading);
}

/// The registration's refresh carries a statement of its own, with a fresh number.
#[test]
fn the_refresh_is_signed_with_a_fresh_number() {
    let (mut d, mut st) = registered();
    let before = d.next_sequence();
    d.handle_timeout(at(300_000), &mut st).unwrap();
    let upd = sent(&mut d).pop().unwrap();
    let m = Message::parse(&upd).unwrap();
    assert_eq!(
        m.uri_path().map(|s| s.unwrap()).collect::<Vec<_>>(),
        ["rd", "7"]
    );
    assert_eq!(m.query_param("sq"), Some(before.to_string().as_str()));
    assert!(m.query_param("ss").is_some());
    assert_eq!(d.next_sequence(), before + 1);
}

/// A reading the broker answers with 5.03 (Max-Age 30) is kept, and the device asks to be
/// woken when Max-Age has passed, not at its registration refresh (which with the default
/// lifetime is minutes away); it goes out again then, Confirmable, the same reading.
#[test]
fn a_deferred_reading_wakes_the_device_at_max_age() {
    let (mut d, mut st) = registered();
    let refresh = d.poll_timeout().unwrap();
    let r = [Record {
        name: Some("t"),
        value: Some(Value::Number(5.0)),
        ..Default::default()
    }];
    let seq = d.publish(at(100), &mut st, &r, None).unwrap();
    let put = sent(&mut d).pop().unwrap();
    let reading = senml_of(&put);
    let m = Message::parse(&put).unwrap();
    let mut buf = [0u8; 64];
    let mut b = MessageBuilder::new(
        &mut buf,
        MessageType::Acknowledgement,
        Code::SERVICE_UNAVAILABLE,
        m.message_id,
        m.token,
    )
    .unwrap();
    b.uint_option(option::MAX_AGE, 30).unwrap();
    let n = b.finish();
    d.handle_datagram(at(101), &mut st, &buf[..n]).unwrap();
    assert_eq!(
        d.poll_event(),
        Some(Event::Published {
            seq,
            outcome: PublishOutcome::Deferred {
                code: Code::SERVICE_UNAVAILABLE,
                retry_after_secs: 30
            }
        })
    );
    assert!(refresh > at(101 + 30_000), "{refresh:?}");
    assert_eq!(d.poll_timeout(), Some(at(101 + 30_000)));
    d.handle_timeout(at(101 + 29_999), &mut st).unwrap();
    assert!(sent(&mut d).is_empty(), "not before Max-Age");
    d.handle_timeout(at(101 + 30_000), &mut st).unwrap();
    let again = sent(&mut d).pop().expect("sent again at Max-Age");
    let m = Message::parse(&again).unwrap();
    assert_eq!(m.mtype, MessageType::Confirmable);
    assert_eq!(senml_of(&again), reading);
}

/// A reading answered 5.00 (the broker's batch failed: nothing was stored) is kept and sent
/// again after a back-off of 1 s, then 2 s, 4 s ...; an acknowledgement resets the back-off.
#[test]
fn a_reading_answered_with_a_server_error_is_kept_and_sent_again_with_back_off() {
    let (mut d, mut st) = registered();
    let r = [Record {
        name: Some("t"),
        value: Some(Value::Number(6.0)),
        ..Default::default()
    }];
    let seq = d.publish(at(100), &mut st, &r, None).unwrap();
    let mut put = sent(&mut d).pop().unwrap();
    let reading = senml_of(&put);
    let mut now = 100;
    for (i, secs) in [1u32, 2, 4, 8].into_iter().enumerate() {
        now += 1;
        let m = Message::parse(&put).unwrap();
        d.handle_datagram(at(now), &mut st, &ack(&m, Code::INTERNAL_SERVER_ERROR, &[]))
            .unwrap();
        match d.poll_event() {
            Some(Event::Published {
                seq: s,
                outcome:
                    PublishOutcome::Deferred {
                        code: Code::INTERNAL_SERVER_ERROR,
                        retry_after_secs,
                    },
            }) => {
                assert_eq!(retry_after_secs, secs, "failure {i}");
                assert!(i > 0 || s == seq);
            }
            other => panic!("{other:?}"),
        }
        assert!(d.is_registered() && !d.can_publish() && d.has_pending_republication());
        let wake = at(now + u64::from(secs) * 1000);
        assert_eq!(d.poll_timeout(), Some(wake));
        d.handle_timeout(wake, &mut st).unwrap();
        put = sent(&mut d).pop().expect("sent again after the back-off");
        assert_eq!(senml_of(&put), reading, "the same reading");
        now = wake.as_millis();
    }
    let m = Message::parse(&put).unwrap();
    d.handle_datagram(at(now + 1), &mut st, &ack(&m, Code::CHANGED, &[]))
        .unwrap();
    assert!(matches!(
        d.poll_event(),
        Some(Event::Published {
            outcome: PublishOutcome::Acknowledged,
            ..
        })
    ));
    // The next failure starts the back-off from 1 s again.
    d.publish(at(now + 2), &mut st, &r, None).unwrap();
    let put = sent(&mut d).pop().unwrap();
    d.handle_datagram(
        at(now + 3),
        &mut st,
        &ack(
            &Message::parse(&put).unwrap(),
            Code::INTERNAL_SERVER_ERROR,
            &[],
        ),
    )
    .unwrap();
    assert_eq!(d.poll_timeout(), Some(at(now + 3 + 1000)));
}
