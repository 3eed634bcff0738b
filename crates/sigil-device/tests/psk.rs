//! The PSK node against a scripted broker: the registration it sends, its readings in both
//! modes, and what it does with retransmission, refusals, Reset and 5.03.

use sigil_coap::message::{empty, option};
use sigil_coap::{Code, ContentFormat, Message, MessageBuilder, MessageType};
use sigil_crypto::RustCrypto;
use sigil_device::{
    DeviceError, MemoryStorage, PskConfig, PskEvent, PskMode, PskNode, PublishOutcome,
};
use sigil_identity::Identity;
use sigil_objects::mac::{MacedReading, ReadingKey};
use sigil_objects::senml::{self, Record, Value};
use sigil_testkit::Fixed;
use sigil_time::{Instant, UnixTime};

const PSK: &[u8] = b"sixteen byte psk and some more";
const ID: Identity = Identity::from_bytes([
    0x5a, 0x11, 0x02, 0x93, 0xc4, 0x45, 0x06, 0x77, 0x88, 0x19, 0xaa, 0x0b, 0xcc, 0xdd, 0xee, 0x0f,
]);

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn records(v: f64) -> [Record<'static>; 1] {
    [Record {
        name: Some("t"),
        value: Some(Value::Number(v)),
        ..Default::default()
    }]
}

fn cbor(v: f64) -> Vec<u8> {
    let mut buf = [0u8; 128];
    let n = senml::encode_cbor(&records(v), &mut buf).unwrap();
    buf[..n].to_vec()
}

fn answer(mtype: MessageType, code: Code, mid: u16, token: &[u8], location: &[&str]) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let mut b = MessageBuilder::new(&mut buf, mtype, code, mid, token).unwrap();
    for seg in location {
        b.option(option::LOCATION_PATH, seg.as_bytes()).unwrap();
    }
    let n = b.finish();
    buf[..n].to_vec()
}

/// A piggybacked answer to `req`.
fn ack(req: &[u8], code: Code, location: &[&str]) -> Vec<u8> {
    let m = Message::parse(req).unwrap();
    answer(
        MessageType::Acknowledgement,
        code,
        m.message_id,
        m.token,
        location,
    )
}

fn sent(d: &mut PskNode<RustCrypto>) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut buf = [0u8; 1024];
    while let Some(n) = d.poll_transmit(&mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

fn one(d: &mut PskNode<RustCrypto>) -> Vec<u8> {
    let mut s = sent(d);
    assert_eq!(s.len(), 1, "exactly one datagram");
    s.pop().unwrap()
}

fn events(d: &mut PskNode<RustCrypto>) -> Vec<PskEvent> {
    std::iter::from_fn(|| d.poll_event()).collect()
}

fn path(m: &Message<'_>) -> Vec<String> {
    m.uri_path().map(|s| s.unwrap().to_owned()).collect()
}

fn query(m: &Message<'_>) -> Vec<String> {
    m.uri_query().map(|s| s.unwrap().to_owned()).collect()
}

fn boot(mode: PskMode, st: &mut MemoryStorage) -> PskNode<RustCrypto> {
    let config = PskConfig {
        mode,
        ..PskConfig::default()
    };
    PskNode::boot(RustCrypto, config, ID, PSK, st, &mut Fixed(3)).unwrap()
}

/// Boots, answers the registration with `rd/7` and returns the node.
fn registered(mode: PskMode, st: &mut MemoryStorage) -> PskNode<RustCrypto> {
    let mut d = boot(mode, st);
    d.handle_timeout(at(0), st).unwrap();
    let reg = one(&mut d);
    d.handle_datagram(at(1), st, &ack(&reg, Code::CREATED, &["rd", "7"]))
        .unwrap();
    assert_eq!(events(&mut d), [PskEvent::Registered]);
    assert_eq!(d.location(), Some("rd/7"));
    d
}

fn check_registration(reg: &[u8], ct: u16) {
    let m = Message::parse(reg).unwrap();
    assert_eq!(m.mtype, MessageType::Confirmable);
    assert_eq!(m.code, Code::POST);
    assert_eq!(path(&m), ["rd"]);
    assert_eq!(
        query(&m),
        [format!("ep={ID}"), "lt=300".to_owned()],
        "endpoint name and lifetime, no statement"
    );
    assert_eq!(m.content_format(), Some(ContentFormat::LINK_FORMAT));
    let payload = core::str::from_utf8(m.payload).unwrap();
    assert_eq!(payload, format!("</m>;rt=\"sigil.env\";ct={ct}"));
}

#[test]
fn registration_names_the_identity_and_the_format_and_carries_no_key() {
    for (mode, ct) in [(PskMode::Mac, 17), (PskMode::Session, 112)] {
        let mut st = MemoryStorage::default();
        let mut d = boot(mode, &mut st);
        assert!(!d.is_registered() && !d.can_publish());
        assert_eq!(&d.psk_identity(), ID.to_string().as_bytes());
        assert_eq!(d.identity(), &ID);
        d.handle_timeout(at(0), &mut st).unwrap();
        let reg = one(&mut d);
        check_registration(&reg, ct);
        assert_eq!(
            d.publish(at(0), &mut st, &records(1.0), None),
            Err(DeviceError::NotRegistered)
        );
        d.handle_datagram(at(1), &mut st, &ack(&reg, Code::CREATED, &["rd", "42"]))
            .unwrap();
        assert!(d.is_registered() && d.can_publish());
        assert_eq!(events(&mut d), [PskEvent::Registered]);
    }
}

#[test]
fn psk_length_is_checked() {
    let mut st = MemoryStorage::default();
    for len in [0, 15, 65] {
        let psk = vec![7u8; len];
        assert!(matches!(
            PskNode::boot(
                RustCrypto,
                PskConfig::default(),
                ID,
                &psk,
                &mut st,
                &mut Fixed(1)
            ),
            Err(DeviceError::Config)
        ));
    }
    for len in [16, 64] {
        let psk = vec![7u8; len];
        assert!(PskNode::boot(
            RustCrypto,
            PskConfig::default(),
            ID,
            &psk,
            &mut st,
            &mut Fixed(1)
        )
        .is_ok());
    }
}

#[test]
fn mac_reading_verifies_under_the_derived_key_with_the_persisted_number() {
    let mut st = MemoryStorage::default();
    let mut d = registered(PskMode::Mac, &mut st);
    // The first block is reserved before anything is numbered.
    assert_eq!(st.reservation, Some(65));
    assert_eq!(d.next_sequence(), Some(1));
    let seq = d
        .publish(
            at(10),
            &mut st,
            &records(21.5),
            Some(UnixTime::from_secs(1_700_000_000)),
        )
        .unwrap();
    assert_eq!(seq, Some(1));
    let put = one(&mut d);
    let m = Message::parse(&put).unwrap();
    assert_eq!(m.mtype, MessageType::Confirmable);
    assert_eq!(m.code, Code::PUT);
    assert_eq!(path(&m), ["ps", "7", "m"]);
    assert_eq!(m.content_format(), Some(ContentFormat(17)));
    let r = MacedReading::parse(m.payload).unwrap();
    assert_eq!(r.kid, ID);
    assert_eq!(r.full_seq(), Some(1));
    assert_eq!(r.timestamp, Some(1_700_000_000));
    assert_eq!(r.senml(), cbor(21.5));
    let key = ReadingKey::derive(&RustCrypto, PSK, &ID);
    r.verify(&RustCrypto, &key, 1).unwrap();
    assert!(r.verify(&RustCrypto, &key, 2).is_err());
    let other = ReadingKey::derive(&RustCrypto, b"another sixteen byte key", &ID);
    assert!(r.verify(&RustCrypto, &other, 1).is_err());
    d.handle_datagram(at(20), &mut st, &ack(&put, Code::CHANGED, &[]))
        .unwrap();
    assert_eq!(
        events(&mut d),
        [PskEvent::Published {
            seq: Some(1),
            outcome: PublishOutcome::Acknowledged
        }]
    );
    // An already encoded pack goes out as it is, under the next number.
    assert_eq!(
        d.publish_senml(at(30), &mut st, &cbor(3.0), None),
        Ok(Some(2))
    );
    let put = one(&mut d);
    let m = Message::parse(&put).unwrap();
    let r = MacedReading::parse(m.payload).unwrap();
    assert_eq!((r.full_seq(), r.timestamp), (Some(2), None));
    assert_eq!(r.senml(), cbor(3.0));
    r.verify(&RustCrypto, &key, 2).unwrap();
}

#[test]
fn reboot_continues_above_the_reserved_block() {
    let mut st = MemoryStorage::default();
    let mut d = registered(PskMode::Mac, &mut st);
    for i in 1..=3u64 {
        assert_eq!(
            d.publish(at(10 * i), &mut st, &records(1.0), None),
            Ok(Some(i))
        );
        let put = one(&mut d);
        d.handle_datagram(at(10 * i + 1), &mut st, &ack(&put, Code::CHANGED, &[]))
            .unwrap();
    }
    assert_eq!(
        st.reservation_writes, 1,
        "one write for the first 64 numbers"
    );
    // Power lost: whatever was used below the reservation is never used again.
    drop(d);
    let mut d = registered(PskMode::Mac, &mut st);
    assert_eq!(d.next_sequence(), Some(65));
    assert_eq!(st.reservation, Some(129));
    assert_eq!(
        d.publish(at(10), &mut st, &records(1.0), None),
        Ok(Some(65))
    );
    let put = one(&mut d);
    let r = MacedReading::parse(Message::parse(&put).unwrap().payload)
        .unwrap()
        .full_seq();
    assert_eq!(r, Some(65));
}

#[test]
fn numbers_are_reserved_block_by_block() {
    let mut st = MemoryStorage::default();
    let mut d = registered(PskMode::Mac, &mut st);
    for i in 1..=70u64 {
        let seq = d.publish(at(i), &mut st, &records(1.0), None).unwrap();
        assert_eq!(seq, Some(i));
        let put = one(&mut d);
        d.handle_datagram(at(i), &mut st, &ack(&put, Code::CHANGED, &[]))
            .unwrap();
    }
    assert_eq!(st.reservation, Some(129));
    assert_eq!(st.reservation_writes, 2);
}

#[test]
fn session_reading_is_plain_senml_cbor_without_a_number() {
    let mut st = MemoryStorage::default();
    let mut d = registered(PskMode::Session, &mut st);
    assert_eq!(st.reservation, None, "nothing numbered, nothing stored");
    assert_eq!(d.next_sequence(), None);
    assert_eq!(
        d.publish(
            at(10),
            &mut st,
            &records(4.5),
            Some(UnixTime::from_secs(1_700_000_000))
        ),
        Ok(None)
    );
    let put = one(&mut d);
    let m = Message::parse(&put).unwrap();
    assert_eq!(m.code, Code::PUT);
    assert_eq!(path(&m), ["ps", "7", "m"]);
    assert_eq!(m.content_format(), Some(ContentFormat::SENML_CBOR));
    assert_eq!(m.payload, cbor(4.5));
    d.handle_datagram(at(11), &mut st, &ack(&put, Code::CHANGED, &[]))
        .unwrap();
    assert_eq!(
        events(&mut d),
        [PskEvent::Published {
            seq: None,
            outcome: PublishOutcome::Acknowledged
        }]
    );
    assert_eq!(st.reservation_writes, 0);
}

#[test]
fn confirmable_reading_is_retransmitted_until_answered() {
    let mut st = MemoryStorage::default();
    let mut d = registered(PskMode::Mac, &mut st);
    d.publish(at(10), &mut st, &records(1.0), None).unwrap();
    let put = one(&mut d);
    assert!(!d.can_publish(), "NSTART = 1");
    assert_eq!(
        d.publish(at(11), &mut st, &records(1.0), None),
        Err(DeviceError::Busy)
    );
    let deadline = d.poll_timeout().unwrap();
    assert!(deadline > at(10) && deadline <= at(10 + 3000));
    d.handle_timeout(deadline, &mut st).unwrap();
    assert_eq!(one(&mut d), put, "the same datagram, the same MID");
    assert_eq!(d.stats.retransmissions, 1);
    // MAX_RETRANSMIT = 4 retransmissions, then the reading times out.
    let mut now = deadline;
    for _ in 0..10 {
        let Some(t) = d.poll_timeout() else { break };
        now = t;
        d.handle_timeout(now, &mut st).unwrap();
        if !d.can_publish() {
            sent(&mut d);
        } else {
            break;
        }
    }
    assert_eq!(d.stats.retransmissions, 4);
    assert_eq!(
        events(&mut d),
        [PskEvent::Published {
            seq: Some(1),
            outcome: PublishOutcome::TimedOut
        }]
    );
    assert!(d.can_publish());
    assert!(now > at(10));
}

#[test]
fn registration_is_retransmitted_and_its_refresh_is_an_empty_post() {
    let mut st = MemoryStorage::default();
    let mut d = boot(PskMode::Mac, &mut st);
    d.handle_timeout(at(0), &mut st).unwrap();
    let reg = one(&mut d);
    let t = d.poll_timeout().unwrap();
    d.handle_timeout(t, &mut st).unwrap();
    assert_eq!(one(&mut d), reg);
    d.handle_datagram(t, &mut st, &ack(&reg, Code::CREATED, &["rd", "9"]))
        .unwrap();
    assert_eq!(events(&mut d), [PskEvent::Registered]);
    // Refreshed at 4/5 of the lifetime.
    let refresh = d.poll_timeout().unwrap();
    assert_eq!(refresh, t + core::time::Duration::from_secs(240));
    d.handle_timeout(refresh, &mut st).unwrap();
    let upd = one(&mut d);
    let m = Message::parse(&upd).unwrap();
    assert_eq!((m.mtype, m.code), (MessageType::Confirmable, Code::POST));
    assert_eq!(path(&m), ["rd", "9"]);
    assert!(query(&m).is_empty() && m.payload.is_empty());
    d.handle_datagram(refresh, &mut st, &ack(&upd, Code::CHANGED, &[]))
        .unwrap();
    assert_eq!(events(&mut d), [PskEvent::RegistrationRefreshed]);
    // A refresh the directory no longer knows: register again in full, at once.
    let refresh = d.poll_timeout().unwrap();
    d.handle_timeout(refresh, &mut st).unwrap();
    let upd = one(&mut d);
    d.handle_datagram(refresh, &mut st, &ack(&upd, Code::NOT_FOUND, &[]))
        .unwrap();
    assert_eq!(
        events(&mut d),
        [PskEvent::RegistrationFailed {
            code: Code::NOT_FOUND
        }]
    );
    d.handle_timeout(refresh, &mut st).unwrap();
    check_registration(&one(&mut d), 17);
}

#[test]
fn lost_registration_means_register_again_then_publish_again() {
    for code in [Code::NOT_FOUND, Code::UNAUTHORIZED, Code::FORBIDDEN] {
        for mode in [PskMode::Mac, PskMode::Session] {
            let mut st = MemoryStorage::default();
            let mut d = registered(mode, &mut st);
            let first = d.publish(at(10), &mut st, &records(7.0), None).unwrap();
            let put = one(&mut d);
            d.handle_datagram(at(11), &mut st, &ack(&put, code, &[]))
                .unwrap();
            assert_eq!(
                events(&mut d),
                [PskEvent::Published {
                    seq: first,
                    outcome: PublishOutcome::Republishing(code)
                }]
            );
            assert!(!d.is_registered() && !d.can_publish());
            assert!(d.has_pending_republication());
            d.handle_timeout(at(11), &mut st).unwrap();
            let reg = one(&mut d);
            check_registration(&reg, mode.content_format());
            d.handle_datagram(at(12), &mut st, &ack(&reg, Code::CREATED, &["rd", "8"]))
                .unwrap();
            assert_eq!(events(&mut d), [PskEvent::Registered]);
            // The same reading again, Confirmable, to the new topic.
            let again = one(&mut d);
            let m = Message::parse(&again).unwrap();
            assert_eq!(m.mtype, MessageType::Confirmable);
            assert_eq!(path(&m), ["ps", "8", "m"]);
            let second = match mode {
                PskMode::Mac => {
                    let r = MacedReading::parse(m.payload).unwrap();
                    assert_eq!(r.senml(), cbor(7.0));
                    assert!(r.full_seq() > first);
                    r.full_seq()
                }
                PskMode::Session => {
                    assert_eq!(m.payload, cbor(7.0));
                    None
                }
            };
            d.handle_datagram(at(13), &mut st, &ack(&again, Code::CHANGED, &[]))
                .unwrap();
            assert_eq!(
                events(&mut d),
                [PskEvent::Published {
                    seq: second,
                    outcome: PublishOutcome::Acknowledged
                }]
            );
            assert!(d.can_publish());
        }
    }
}

#[test]
fn refusal_right_after_registering_again_backs_off() {
    let mut st = MemoryStorage::default();
    let mut d = registered(PskMode::Mac, &mut st);
    d.publish(at(10), &mut st, &records(7.0), None).unwrap();
    let put = one(&mut d);
    d.handle_datagram(at(11), &mut st, &ack(&put, Code::NOT_FOUND, &[]))
        .unwrap();
    d.handle_timeout(at(11), &mut st).unwrap();
    let reg = one(&mut d);
    d.handle_datagram(at(12), &mut st, &ack(&reg, Code::CREATED, &["rd", "8"]))
        .unwrap();
    let again = one(&mut d);
    d.handle_datagram(at(13), &mut st, &ack(&again, Code::NOT_FOUND, &[]))
        .unwrap();
    events(&mut d);
    d.handle_timeout(at(13), &mut st).unwrap();
    assert!(sent(&mut d).is_empty(), "not at once the second time");
    assert!(d.poll_timeout().unwrap() >= at(13 + 10_000));
}

#[test]
fn reset_resynchronises_and_publishes_again_under_a_new_number() {
    let mut st = MemoryStorage::default();
    let mut d = registered(PskMode::Mac, &mut st);
    let first = d.publish(at(10), &mut st, &records(9.0), None).unwrap();
    let put = one(&mut d);
    let mid = Message::parse(&put).unwrap().message_id;
    d.handle_datagram(at(11), &mut st, &empty(MessageType::Reset, mid))
        .unwrap();
    assert_eq!(
        events(&mut d),
        [
            PskEvent::Published {
                seq: first,
                outcome: PublishOutcome::Reset
            },
            PskEvent::Resynchronising
        ]
    );
    d.handle_timeout(at(11), &mut st).unwrap();
    let reg = one(&mut d);
    check_registration(&reg, 17);
    d.handle_datagram(at(12), &mut st, &ack(&reg, Code::CREATED, &["rd", "7"]))
        .unwrap();
    assert_eq!(events(&mut d), [PskEvent::Registered]);
    let again = one(&mut d);
    let r = MacedReading::parse(Message::parse(&again).unwrap().payload).unwrap();
    assert_eq!(r.full_seq(), Some(2));
    assert_eq!(r.senml(), cbor(9.0));
    r.verify(&RustCrypto, &ReadingKey::derive(&RustCrypto, PSK, &ID), 2)
        .unwrap();
    // A Reset with another MID is nobody's.
    d.handle_datagram(at(13), &mut st, &empty(MessageType::Reset, mid))
        .unwrap();
    assert_eq!(d.stats.unexpected, 1);
}

#[test]
fn service_unavailable_defers_the_reading_for_max_age() {
    let mut st = MemoryStorage::default();
    let mut d = registered(PskMode::Mac, &mut st);
    d.publish(at(10), &mut st, &records(2.0), None).unwrap();
    let put = one(&mut d);
    let m = Message::parse(&put).unwrap();
    let mut buf = [0u8; 32];
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
    d.handle_datagram(at(20), &mut st, &buf[..n]).unwrap();
    assert_eq!(
        events(&mut d),
        [PskEvent::Published {
            seq: Some(1),
            outcome: PublishOutcome::Deferred {
                code: Code::SERVICE_UNAVAILABLE,
                retry_after_secs: 30
            }
        }]
    );
    assert!(d.is_registered() && !d.can_publish() && d.has_pending_republication());
    assert_eq!(d.poll_timeout(), Some(at(30_020)));
    d.handle_timeout(at(30_019), &mut st).unwrap();
    assert!(sent(&mut d).is_empty());
    d.handle_timeout(at(30_020), &mut st).unwrap();
    let again = one(&mut d);
    let m = Message::parse(&again).unwrap();
    assert_eq!(m.mtype, MessageType::Confirmable);
    let r = MacedReading::parse(m.payload).unwrap();
    assert_eq!((r.full_seq(), r.senml()), (Some(2), &cbor(2.0)[..]));
}

#[test]
fn non_confirmable_per_confirm_every() {
    let mut st = MemoryStorage::default();
    let config = PskConfig {
        confirm_every: 3,
        ..PskConfig::default()
    };
    let mut d = PskNode::boot(RustCrypto, config, ID, PSK, &mut st, &mut Fixed(5)).unwrap();
    d.handle_timeout(at(0), &mut st).unwrap();
    let reg = one(&mut d);
    d.handle_datagram(at(1), &mut st, &ack(&reg, Code::CREATED, &["rd", "1"]))
        .unwrap();
    events(&mut d);
    for i in 1..=3u64 {
        d.publish(at(10 * i), &mut st, &records(1.0), None).unwrap();
        let m = one(&mut d);
        let m = Message::parse(&m).unwrap();
        if i < 3 {
            assert_eq!(m.mtype, MessageType::NonConfirmable);
            assert_eq!(
                events(&mut d),
                [PskEvent::Published {
                    seq: Some(i),
                    outcome: PublishOutcome::Sent
                }]
            );
            assert!(d.can_publish());
        } else {
            assert_eq!(m.mtype, MessageType::Confirmable);
            assert!(!d.can_publish());
        }
    }
}

#[test]
fn requests_are_reset_and_a_duplicate_separate_response_acknowledged_again() {
    let mut st = MemoryStorage::default();
    let mut d = registered(PskMode::Session, &mut st);
    // A request to the node: Reset.
    let get = answer(MessageType::Confirmable, Code::GET, 0x1234, &[1], &[]);
    d.handle_datagram(at(5), &mut st, &get).unwrap();
    assert_eq!(sent(&mut d), [empty(MessageType::Reset, 0x1234).to_vec()]);
    d.handle_datagram(at(5), &mut st, b"\xff").unwrap();
    assert_eq!(d.stats.malformed, 1);
    // Empty ACK, then the answer as a separate Confirmable response, twice.
    d.publish(at(10), &mut st, &records(1.0), None).unwrap();
    let put = one(&mut d);
    let m = Message::parse(&put).unwrap();
    d.handle_datagram(
        at(11),
        &mut st,
        &empty(MessageType::Acknowledgement, m.message_id),
    )
    .unwrap();
    d.handle_timeout(at(20_000), &mut st).unwrap();
    assert!(
        sent(&mut d).is_empty(),
        "no retransmission after an Empty ACK"
    );
    let sep = answer(
        MessageType::Confirmable,
        Code::CHANGED,
        0x4242,
        m.token,
        &[],
    );
    d.handle_datagram(at(20_001), &mut st, &sep).unwrap();
    assert_eq!(
        sent(&mut d),
        [empty(MessageType::Acknowledgement, 0x4242).to_vec()]
    );
    assert_eq!(
        events(&mut d),
        [PskEvent::Published {
            seq: None,
            outcome: PublishOutcome::Acknowledged
        }]
    );
    d.handle_datagram(at(20_002), &mut st, &sep).unwrap();
    assert_eq!(
        sent(&mut d),
        [empty(MessageType::Acknowledgement, 0x4242).to_vec()]
    );
    assert!(events(&mut d).is_empty());
}
