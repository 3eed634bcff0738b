//! A device that requires signed answers (RFC 8387 §4.1 on plain coap://,
//! `sigil_objects::answer`): it acts on a registration's 2.01, an update's 2.04 and a
//! resynchronisation only when its trusted server signed them for this request, and treats
//! anything else, a bare Reset included, as no answer.

use sigil_coap::message::{empty, option};
use sigil_coap::{Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_device::{Device, DeviceConfig, Event, MemoryStorage, PublishOutcome};
use sigil_identity::Identity;
use sigil_objects::answer::{self, Answer, RequestDigest};
use sigil_objects::senml::{Record, Value};
use sigil_testkit::Fixed;
use sigil_time::Instant;

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn server_key(seed: u8) -> (SecretKey, PublicKey) {
    let k = SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &[seed; 32]).unwrap();
    let p = RustCrypto.public_key(&k).unwrap();
    (k, p)
}

fn sent(d: &mut Device<RustCrypto>) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut buf = [0u8; 1024];
    while let Some(n) = d.poll_transmit(&mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

fn boot(require: bool, trusted: Option<PublicKey>) -> (Device<RustCrypto>, MemoryStorage) {
    let mut st = MemoryStorage::default();
    let config = DeviceConfig {
        require_signed_answers: require,
        ..Default::default()
    };
    let mut d = Device::boot(RustCrypto, config, &mut st, &mut Fixed(3), &[], &[]).unwrap();
    if let Some(k) = trusted {
        d.trust_server_key(k);
    }
    (d, st)
}

/// How the answer is made.
struct Signing<'a> {
    key: &'a SecretKey,
    device: Identity,
    /// Sign for this token instead of the request's.
    token: Option<&'a [u8]>,
    /// Sign for this location instead of the one the answer carries.
    location: Option<&'a [&'a str]>,
}

/// An ACK answering `request` with `code` and `location`, signed as `signing` says (the
/// server's side: the digest of the request as sent).
fn answer_to(
    request: &[u8],
    code: Code,
    location: &[&str],
    signing: Option<Signing<'_>>,
) -> Vec<u8> {
    let m = Message::parse(request).unwrap();
    let mut buf = [0u8; 256];
    let mut b = MessageBuilder::new(
        &mut buf,
        MessageType::Acknowledgement,
        code,
        m.message_id,
        m.token,
    )
    .unwrap();
    for seg in location {
        b.option(option::LOCATION_PATH, seg.as_bytes()).unwrap();
    }
    if let Some(s) = signing {
        let digest = RequestDigest::of(
            &RustCrypto,
            m.code.0,
            m.options().map(|o| (o.number, o.value)),
            m.payload,
        );
        let signed_location = s.location.unwrap_or(location);
        let sig = Answer {
            device: &s.device,
            token: s.token.unwrap_or(m.token),
            code: code.0,
            request: &digest,
        }
        .sign(
            &RustCrypto,
            s.key,
            signed_location.iter().map(|l| l.as_bytes()),
        )
        .unwrap();
        b.option(answer::SIGNATURE_OPTION, &sig.0).unwrap();
    }
    let n = b.finish();
    buf[..n].to_vec()
}

fn signing<'a>(key: &'a SecretKey, d: &Device<RustCrypto>) -> Signing<'a> {
    Signing {
        key,
        device: *d.identity(),
        token: None,
        location: None,
    }
}

fn requires(request: &[u8]) -> bool {
    Message::parse(request)
        .unwrap()
        .option(answer::REQUIRE_OPTION)
        .is_some_and(<[u8]>::is_empty)
}

/// Registers with a properly signed 2.01 for rd/7.
fn registered(key: &SecretKey, public: PublicKey) -> (Device<RustCrypto>, MemoryStorage) {
    let (mut d, mut st) = boot(true, Some(public));
    d.handle_timeout(at(0), &mut st).unwrap();
    let reg = sent(&mut d).pop().unwrap();
    assert!(requires(&reg));
    let ok = answer_to(&reg, Code::CREATED, &["rd", "7"], Some(signing(key, &d)));
    d.handle_datagram(at(1), &mut st, &ok).unwrap();
    assert_eq!(d.poll_event(), Some(Event::Registered));
    assert_eq!(d.location(), Some("rd/7"));
    (d, st)
}

fn reading() -> [Record<'static>; 1] {
    [Record {
        name: Some("t"),
        value: Some(Value::Number(1.0)),
        ..Default::default()
    }]
}

#[test]
fn a_forged_created_is_refused_and_the_signed_one_taken() {
    let (key, public) = server_key(7);
    let (attacker, _) = server_key(8);
    let (mut d, mut st) = boot(true, Some(public));
    d.handle_timeout(at(0), &mut st).unwrap();
    let reg = sent(&mut d).pop().unwrap();
    assert!(requires(&reg));
    // Unsigned, with a location of the attacker's choosing.
    d.handle_datagram(
        at(1),
        &mut st,
        &answer_to(&reg, Code::CREATED, &["rd", "99"], None),
    )
    .unwrap();
    // Signed by another key.
    let other = answer_to(
        &reg,
        Code::CREATED,
        &["rd", "99"],
        Some(signing(&attacker, &d)),
    );
    d.handle_datagram(at(2), &mut st, &other).unwrap();
    // The server's signature for rd/7, moved onto an answer naming rd/99.
    let moved = answer_to(
        &reg,
        Code::CREATED,
        &["rd", "99"],
        Some(Signing {
            location: Some(&["rd", "7"]),
            ..signing(&key, &d)
        }),
    );
    d.handle_datagram(at(3), &mut st, &moved).unwrap();
    // An unsigned refusal: no failure either (an off-path sender could make it).
    let refused = answer_to(&reg, Code::FORBIDDEN, &[], None);
    d.handle_datagram(at(4), &mut st, &refused).unwrap();
    assert!(!d.is_registered());
    assert_eq!(d.location(), None);
    assert_eq!(d.poll_event(), None, "no state change, no failure");
    assert_eq!(d.stats.unsigned_answers, 2);
    assert_eq!(d.stats.bad_answer_signatures, 2);
    // The exchange goes on: the registration is retransmitted, unchanged.
    d.handle_timeout(at(3_500), &mut st).unwrap();
    assert_eq!(sent(&mut d), vec![reg.clone()]);
    let ok = answer_to(&reg, Code::CREATED, &["rd", "7"], Some(signing(&key, &d)));
    d.handle_datagram(at(3_600), &mut st, &ok).unwrap();
    assert_eq!(d.poll_event(), Some(Event::Registered));
    assert_eq!(d.location(), Some("rd/7"));
}

#[test]
fn a_signature_for_another_token_or_device_is_refused() {
    let (key, public) = server_key(7);
    let (mut d, mut st) = boot(true, Some(public));
    d.handle_timeout(at(0), &mut st).unwrap();
    let reg = sent(&mut d).pop().unwrap();
    let other_device = Identity::of_key(&RustCrypto, &public, b"someone else").unwrap();
    for s in [
        Signing {
            token: Some(&[9, 9, 9, 9]),
            ..signing(&key, &d)
        },
        Signing {
            device: other_device,
            ..signing(&key, &d)
        },
    ] {
        let a = answer_to(&reg, Code::CREATED, &["rd", "7"], Some(s));
        d.handle_datagram(at(1), &mut st, &a).unwrap();
    }
    assert!(!d.is_registered());
    assert_eq!(d.stats.bad_answer_signatures, 2);
    // A signed answer to an earlier request (another digest) is refused too: the update.
    let (mut d, mut st) = registered(&key, public);
    d.handle_timeout(at(300_000), &mut st).unwrap();
    let upd = sent(&mut d).pop().unwrap();
    assert!(requires(&upd));
    let mut other = upd.clone();
    // Same token and message ID, another request (the first Uri-Query byte changed).
    let at_q = other.windows(3).position(|w| w == b"sq=").unwrap();
    other[at_q + 3] ^= 1;
    let stale = answer_to(&other, Code::CHANGED, &[], Some(signing(&key, &d)));
    d.handle_datagram(at(300_001), &mut st, &stale).unwrap();
    assert_eq!(d.stats.bad_answer_signatures, 1);
    assert_eq!(d.poll_event(), None);
    let unsigned = answer_to(&upd, Code::CHANGED, &[], None);
    d.handle_datagram(at(300_002), &mut st, &unsigned).unwrap();
    assert_eq!(d.stats.unsigned_answers, 1);
    assert_eq!(d.poll_event(), None);
    let ok = answer_to(&upd, Code::CHANGED, &[], Some(signing(&key, &d)));
    d.handle_datagram(at(300_003), &mut st, &ok).unwrap();
    assert_eq!(d.poll_event(), Some(Event::RegistrationRefreshed));
}

#[test]
fn a_bare_reset_is_refused_and_a_signed_resync_taken() {
    let (key, public) = server_key(7);
    let (mut d, mut st) = registered(&key, public);
    let seq = d.publish(at(10), &mut st, &reading(), None).unwrap();
    let put = sent(&mut d).pop().unwrap();
    assert!(requires(&put));
    let m = Message::parse(&put).unwrap();
    d.handle_datagram(at(11), &mut st, &empty(MessageType::Reset, m.message_id))
        .unwrap();
    assert_eq!(d.stats.resets_refused, 1);
    assert!(d.is_registered());
    assert_eq!(d.poll_event(), None);
    // An unsigned 4.09 is no resync either.
    let resync = Code(answer::RESYNC_CODE);
    d.handle_datagram(at(12), &mut st, &answer_to(&put, resync, &[], None))
        .unwrap();
    assert_eq!(d.stats.unsigned_answers, 1);
    assert!(d.is_registered());
    // The signed one resynchronises: a full registration follows at once.
    let signed = answer_to(&put, resync, &[], Some(signing(&key, &d)));
    d.handle_datagram(at(13), &mut st, &signed).unwrap();
    assert_eq!(
        d.poll_event(),
        Some(Event::Published {
            seq,
            outcome: PublishOutcome::Reset
        })
    );
    assert_eq!(d.poll_event(), Some(Event::Resynchronising));
    assert!(!d.is_registered());
    d.handle_timeout(at(14), &mut st).unwrap();
    let reg = sent(&mut d).pop().unwrap();
    let r = Message::parse(&reg).unwrap();
    assert_eq!(r.uri_path().map(|s| s.unwrap()).collect::<Vec<_>>(), ["rd"]);
    assert!(requires(&reg));
}

#[test]
fn a_publication_acknowledgement_needs_no_signature() {
    let (key, public) = server_key(7);
    let (mut d, mut st) = registered(&key, public);
    let seq = d.publish(at(10), &mut st, &reading(), None).unwrap();
    let put = sent(&mut d).pop().unwrap();
    d.handle_datagram(at(11), &mut st, &answer_to(&put, Code::CHANGED, &[], None))
        .unwrap();
    assert_eq!(
        d.poll_event(),
        Some(Event::Published {
            seq,
            outcome: PublishOutcome::Acknowledged
        })
    );
}

#[test]
fn without_a_trusted_key_nothing_verifies() {
    let (key, _) = server_key(7);
    let (mut d, mut st) = boot(true, None);
    assert_eq!(d.answer_key(), None);
    d.handle_timeout(at(0), &mut st).unwrap();
    let reg = sent(&mut d).pop().unwrap();
    let a = answer_to(&reg, Code::CREATED, &["rd", "7"], Some(signing(&key, &d)));
    d.handle_datagram(at(1), &mut st, &a).unwrap();
    assert!(!d.is_registered());
    assert_eq!(d.stats.bad_answer_signatures, 1);
}

#[test]
fn with_the_switch_off_unsigned_answers_and_resets_are_taken() {
    let (_, public) = server_key(7);
    let (mut d, mut st) = boot(false, Some(public));
    d.handle_timeout(at(0), &mut st).unwrap();
    let reg = sent(&mut d).pop().unwrap();
    assert!(!requires(&reg));
    d.handle_datagram(
        at(1),
        &mut st,
        &answer_to(&reg, Code::CREATED, &["rd", "5"], None),
    )
    .unwrap();
    assert_eq!(d.poll_event(), Some(Event::Registered));
    let seq = d.publish(at(10), &mut st, &reading(), None).unwrap();
    let put = sent(&mut d).pop().unwrap();
    assert!(!requires(&put));
    let m = Message::parse(&put).unwrap();
    d.handle_datagram(at(11), &mut st, &empty(MessageType::Reset, m.message_id))
        .unwrap();
    assert_eq!(
        d.poll_event(),
        Some(Event::Published {
            seq,
            outcome: PublishOutcome::Reset
        })
    );
    assert_eq!(d.poll_event(), Some(Event::Resynchronising));
    assert_eq!(d.stats.resets_refused, 0);
}
