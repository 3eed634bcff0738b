//! Issue 12, attacks 1 and 2, in memory: the real device state machine registers and publishes
//! through the real dispatcher, and an attacker with plain CoAP tools tries to change its
//! registration (forged links, a one-second lifetime, replayed statements). Registration state
//! changes only by the identity it belongs to (docs/security.md, "Registration ownership").

use base64::Engine;
use sigil_coap::{option, Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{CryptoProvider, RustCrypto, SignatureAlgorithm};
use sigil_device::{DeviceConfig, Event, PublishOutcome};
use sigil_identity::{Identity, KeyAnnouncement};
use sigil_objects::resync::{sign_statement, Operation, OperationKind};
use sigil_server::store::IdentityKind;
use sigil_server::{PeerAuth, Stats, Store};
use sigil_testkit::Seeded;
use std::net::SocketAddr;

use common::sensor::{Sensor, Server as _};
use common::Plain;
use sigil_testkit::server as common;

const NOW: i64 = 1_700_000_000;
const DEVICE: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 41100);
const ATTACKER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 41200);

/// How the device reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// coap://: registrations carry the device's statement.
    Plain,
    /// coaps://: a DTLS session authenticated with the device's PSK.
    Session,
}

/// A server, one provisioned device on it, and a clock both share.
struct Rig {
    srv: Plain,
    /// The device at [`DEVICE`], its readings in Cel without a time, each datagram sent alone.
    dev: Sensor,
    stats: Stats,
    mid: u16,
    _dir: tempfile::TempDir,
}

struct Answer {
    code: Code,
    payload: String,
}

impl Rig {
    fn new(via: Via) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let srv = Plain::at(&dir.path().join("s.db"), 7, |_| {});
        let mut dev = Sensor::new(12, DEVICE, DeviceConfig::default(), &[]);
        dev.unit = Some("Cel");
        dev.time = None;
        dev.exchanges = Some(vec![]);
        dev.session = (via == Via::Session).then(|| PeerAuth::Psk(*dev.device.identity()));
        srv.provision(dev.device.identity(), IdentityKind::Device);
        let mut rig = Self {
            stats: srv.stats.clone(),
            srv,
            dev,
            mid: 0x7000,
            _dir: dir,
        };
        rig.step(10);
        assert!(rig.dev.device.is_registered(), "{:?}", rig.dev.events);
        rig
    }

    fn id(&self) -> Identity {
        *self.dev.device.identity()
    }

    fn deliver(
        &mut self,
        from: SocketAddr,
        auth: Option<PeerAuth>,
        bytes: Vec<u8>,
    ) -> Vec<Vec<u8>> {
        let batch = vec![(from, bytes)];
        let answers = match auth {
            None => self.srv.deliver(batch),
            Some(a) => self.srv.deliver_in_session(&a, batch),
        };
        answers.into_iter().map(|(_, b)| b).collect()
    }

    /// Runs the device against the server until nothing more happens in the next `for_ms`.
    fn step(&mut self, for_ms: u64) {
        self.dev.step(&mut self.srv, for_ms);
    }

    /// Publishes one reading and returns whether the broker acknowledged it.
    fn publish_acked(&mut self, v: f64) -> bool {
        let seq = self.dev.publish(&mut self.srv, v);
        self.dev.acked().contains(&seq)
    }

    /// The registration's location, `rd/N`.
    fn location(&self) -> String {
        self.dev.device.location().unwrap().to_string()
    }

    /// A Confirmable request from `from`, in the session `auth` if any. Like any client of
    /// RFC 9175 §2.4 (an attacker too), it repeats a request answered with 4.01 and an Echo
    /// option, with that Echo.
    fn request(
        &mut self,
        from: SocketAddr,
        auth: Option<PeerAuth>,
        code: Code,
        path: &str,
        query: &[String],
        payload: &[u8],
    ) -> Answer {
        let mut echo: Option<Vec<u8>> = None;
        loop {
            self.mid = self.mid.wrapping_add(1);
            let mut buf = vec![0u8; 2048];
            let mut b =
                MessageBuilder::new(&mut buf, MessageType::Confirmable, code, self.mid, &[9])
                    .unwrap();
            for seg in path.split('/') {
                b.option(option::URI_PATH, seg.as_bytes()).unwrap();
            }
            if !payload.is_empty() {
                b.uint_option(option::CONTENT_FORMAT, 40).unwrap();
            }
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
            buf.truncate(n);
            let mut answers = self.deliver(from, auth.clone(), buf);
            assert_eq!(answers.len(), 1);
            let a = answers.remove(0);
            let m = Message::parse(&a).unwrap();
            match m.option(option::ECHO) {
                Some(e) if m.code == Code::UNAUTHORIZED && echo.is_none() => {
                    echo = Some(e.to_vec())
                }
                _ => {
                    return Answer {
                        code: m.code,
                        payload: String::from_utf8_lossy(m.payload).into_owned(),
                    }
                }
            }
        }
    }

    /// A plain request from the attacker's own socket.
    fn attack(&mut self, code: Code, path: &str, query: &[String], payload: &[u8]) -> Code {
        self.request(ATTACKER, None, code, path, query, payload)
            .code
    }

    /// The same datagram the device sent, again from the attacker with a new message ID.
    fn replay(&mut self, datagram: &[u8]) -> Code {
        let mut again = datagram.to_vec();
        self.mid = self.mid.wrapping_add(1);
        again[2..4].copy_from_slice(&self.mid.to_be_bytes());
        let a = self.deliver(ATTACKER, None, again);
        Message::parse(&a[0]).unwrap().code
    }

    fn lookup(&mut self) -> String {
        let a = self.request(ATTACKER, None, Code::GET, "rd-lookup/res", &[], &[]);
        assert_eq!(a.code, Code::CONTENT);
        a.payload
    }

    /// The device's registration datagram (the last one it sent).
    fn registration(&self) -> Vec<u8> {
        self.dev
            .sent
            .iter()
            .rev()
            .find(|d| {
                let m = Message::parse(d).unwrap();
                m.code == Code::POST && m.uri_path().count() == 1
            })
            .unwrap()
            .clone()
    }

    /// The device's own link-format payload, with `ct=18` replaced by `ct`.
    fn links_with_ct(&self, ct: u16) -> String {
        let reg = self.registration();
        let links = String::from_utf8(Message::parse(&reg).unwrap().payload.to_vec()).unwrap();
        assert!(links.contains("ct=18"), "{links}");
        links.replace("ct=18", &format!("ct={ct}"))
    }

    /// `sq`/`ss` for `op` under `seq`, signed with the device's own key (what a device, or a
    /// thief of its key, can make).
    fn signed(&self, op: Operation<'_>, seq: u64) -> Vec<String> {
        let key = self.dev.storage.key.clone().unwrap();
        let digest = op.digest(&RustCrypto).unwrap();
        let sig = sign_statement(&RustCrypto, &key, &self.id(), seq, &digest).unwrap();
        vec![
            format!("sq={seq}"),
            format!(
                "ss={}",
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig.0)
            ),
        ]
    }
}

fn update(lifetime: Option<u32>) -> Operation<'static> {
    Operation {
        kind: OperationKind::Update,
        lifetime,
        base: None,
        payload: &[],
    }
}

/// Attack 1 over coap://: an unsigned re-registration of the device's endpoint with
/// `ct=65100` made the broker refuse every reading with 4.15 until the device rebooted.
#[test]
fn a_forged_registration_cannot_change_a_signed_entry() {
    let mut r = Rig::new(Via::Plain);
    assert!(r.publish_acked(21.0));
    let ep = format!("ep={}", r.id());
    let forged = r.links_with_ct(65100);
    assert_eq!(
        r.attack(
            Code::POST,
            "rd",
            &[ep.clone(), "lt=300".into()],
            forged.as_bytes()
        ),
        Code::UNAUTHORIZED
    );
    assert_eq!(r.stats.get("register.rejected.not_owner"), 1);
    // Half a statement is no statement.
    assert_eq!(
        r.attack(
            Code::POST,
            "rd",
            &[ep.clone(), "sq=999999".into()],
            forged.as_bytes()
        ),
        Code::UNAUTHORIZED
    );
    // The device's captured statement does not sign other links (and its number is at the
    // mark already, which refuses it before its signature is checked).
    let reg_bytes = r.registration();
    let reg = Message::parse(&reg_bytes).unwrap();
    let captured: Vec<String> = ["sq", "ss"]
        .iter()
        .map(|k| format!("{k}={}", reg.query_param(k).unwrap()))
        .collect();
    let mut query = vec![ep.clone(), format!("lt={}", 300)];
    query.extend(captured);
    assert_eq!(
        r.attack(Code::POST, "rd", &query, forged.as_bytes()),
        Code::UNAUTHORIZED
    );
    assert_eq!(r.stats.get("register.rejected.stale_statement"), 1);
    assert_eq!(r.stats.get("verify.performed"), 2, "no verification for it");
    let lookup = r.lookup();
    assert!(
        lookup.contains("ct=18") && !lookup.contains("65100"),
        "{lookup}"
    );
    assert!(r.publish_acked(21.5), "{:?}", r.dev.events);
    assert_eq!(
        r.stats.get("publish.rejected.unsupported_content_format"),
        0
    );
}

/// Attack 1 against a device that registered over coaps://: the same entry could be
/// changed over coap://. An entry made in a session changes only in a session for it.
#[test]
fn a_session_owned_entry_refuses_every_plain_change_signed_or_not() {
    let mut r = Rig::new(Via::Session);
    assert!(r.publish_acked(19.0));
    let ep = format!("ep={}", r.id());
    let loc = r.location();
    let forged = r.links_with_ct(65100);
    let next = r.dev.device.next_sequence() + 100;
    assert_eq!(
        r.attack(
            Code::POST,
            "rd",
            &[ep.clone(), "lt=300".into()],
            forged.as_bytes()
        ),
        Code::FORBIDDEN
    );
    // Even the device's own statement (its key stolen, or the device moved to coap://).
    let op = Operation {
        kind: OperationKind::Register,
        lifetime: Some(300),
        base: None,
        payload: forged.as_bytes(),
    };
    let mut query = vec![ep.clone(), "lt=300".into()];
    query.extend(r.signed(op, next));
    assert_eq!(
        r.attack(Code::POST, "rd", &query, forged.as_bytes()),
        Code::FORBIDDEN
    );
    assert_eq!(
        r.attack(Code::POST, &loc, &["lt=1".into()], &[]),
        Code::FORBIDDEN
    );
    let mut query = vec!["lt=1".to_string()];
    query.extend(r.signed(update(Some(1)), next + 1));
    assert_eq!(r.attack(Code::POST, &loc, &query, &[]), Code::FORBIDDEN);
    let removal = Operation {
        kind: OperationKind::Remove,
        lifetime: None,
        base: None,
        payload: &[],
    };
    let query = r.signed(removal, next + 2);
    assert_eq!(r.attack(Code::DELETE, &loc, &query, &[]), Code::FORBIDDEN);
    assert_eq!(r.stats.get("register.rejected.not_owner"), 5);
    // A session for another identity does not speak for it either.
    let other = Identity::parse("00112233445566778899aabbccddeeff").unwrap();
    let a = r.request(
        ATTACKER,
        Some(PeerAuth::Psk(other)),
        Code::POST,
        &loc,
        &["lt=1".into()],
        &[],
    );
    assert_eq!(a.code, Code::FORBIDDEN);
    assert_eq!(r.stats.get("register.rejected.dtls_identity_mismatch"), 1);
    r.srv.now += 2_000;
    let lookup = r.lookup();
    assert!(
        lookup.contains("ct=18") && !lookup.contains("65100"),
        "{lookup}"
    );
    assert!(r.publish_acked(19.5), "{:?}", r.dev.events);
    // The device's own session may change it (here: its periodic refresh).
    r.step(300_000);
    assert!(
        r.dev.events.contains(&Event::RegistrationRefreshed),
        "{:?}",
        r.dev.events
    );
    assert!(r.publish_acked(20.0));
}

/// Attack 2: `POST /rd/N?lt=1` from anyone expired any entry a second later. Only the
/// device's statement (bound to the lifetime it asks for, accepted once) changes it.
#[test]
fn only_the_devices_statement_changes_the_lifetime_and_statements_are_not_replayed() {
    let mut r = Rig::new(Via::Plain);
    assert!(r.publish_acked(18.0));
    let loc = r.location();
    for lt in ["lt=1", "lt=60"] {
        assert_eq!(
            r.attack(Code::POST, &loc, &[lt.into()], &[]),
            Code::UNAUTHORIZED
        );
    }
    assert_eq!(r.stats.get("register.rejected.not_owner"), 2);
    r.srv.now += 61_000;
    assert!(r.publish_acked(18.5), "{:?}", r.dev.events);

    // The device refreshes with a signed update of its own (a fresh number).
    r.step(300_000);
    assert!(
        r.dev.events.contains(&Event::RegistrationRefreshed),
        "{:?}",
        r.dev.events
    );
    assert!(r.stats.get("register.updated") >= 1);
    let refresh = r
        .dev
        .sent
        .iter()
        .rev()
        .find(|d| Message::parse(d).unwrap().uri_path().count() == 2)
        .unwrap()
        .clone();
    let m = Message::parse(&refresh).unwrap();
    assert!(m.query_param("sq").is_some() && m.query_param("ss").is_some());

    // Replays: the update and the registration as sent, and the update's statement with
    // another lifetime.
    let before = r.stats.get("register.rejected.stale_statement");
    assert_eq!(r.replay(&refresh), Code::UNAUTHORIZED);
    let reg = r.registration();
    assert_eq!(r.replay(&reg), Code::UNAUTHORIZED);
    assert_eq!(r.stats.get("register.rejected.stale_statement"), before + 2);
    let query: Vec<String> = ["sq", "ss"]
        .iter()
        .map(|k| format!("{k}={}", m.query_param(k).unwrap()))
        .chain(["lt=1".to_string()])
        .collect();
    assert_eq!(r.attack(Code::POST, &loc, &query, &[]), Code::UNAUTHORIZED);
    // A fresh statement for lt=1 by the device's key is the owner's own choice.
    let next = r.dev.device.next_sequence() + 10;
    let mut query = vec!["lt=1".to_string()];
    query.extend(r.signed(update(Some(1)), next));
    assert_eq!(r.attack(Code::POST, &loc, &query, &[]), Code::CHANGED);
    // ... and accepted once.
    assert_eq!(r.attack(Code::POST, &loc, &query, &[]), Code::UNAUTHORIZED);
}

/// RFC 9176 §5: `lt` is 1 to 4294967295, on registration and on update.
#[test]
fn lifetimes_outside_the_rfc_range_are_refused() {
    let mut r = Rig::new(Via::Plain);
    let ep = format!("ep={}", r.id());
    let links = r.links_with_ct(18);
    let loc = r.location();
    for lt in ["lt=0", "lt=4294967296", "lt=-1"] {
        assert_eq!(
            r.attack(Code::POST, "rd", &[ep.clone(), lt.into()], links.as_bytes()),
            Code::BAD_REQUEST,
            "{lt}"
        );
        assert_eq!(
            r.attack(Code::POST, &loc, &[lt.into()], &[]),
            Code::BAD_REQUEST,
            "{lt}"
        );
    }
    assert!(r.publish_acked(17.0));
}

/// A plain RFC 9176 client (no `sq`/`ss`) still registers a new entry and refreshes or
/// replaces its open entry; a statement makes the entry the device's.
#[test]
fn a_plain_client_registers_and_refreshes_its_open_entry() {
    let mut r = Rig::new(Via::Plain);
    let sk = RustCrypto
        .generate(SignatureAlgorithm::Ed25519, &mut Seeded(77))
        .unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    let id = Identity::of_key(&RustCrypto, &pk, b"").unwrap();
    let store = Store::open(&r._dir.path().join("s.db")).unwrap();
    store
        .add_identity(&id, IdentityKind::Device, "", NOW)
        .unwrap();
    let mut links = String::from("</m>;rt=\"sigil.env\";ct=18");
    KeyAnnouncement::new(pk, b"")
        .unwrap()
        .emit(&mut links, [] as [sigil_crypto::PublicKey; 0])
        .unwrap();
    let ep = format!("ep={id}");
    let a = r.request(
        ATTACKER,
        None,
        Code::POST,
        "rd",
        &[ep.clone(), "lt=120".into()],
        links.as_bytes(),
    );
    assert_eq!(a.code, Code::CREATED, "{}", a.payload);
    let lookup = r.lookup();
    assert!(lookup.contains(&id.to_string()), "{lookup}");
    let loc = {
        let entry = lookup
            .split(',')
            .find(|l| l.contains(&id.to_string()))
            .unwrap()
            .to_string();
        let n = entry
            .split("/ps/")
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_string();
        format!("rd/{n}")
    };
    assert_eq!(
        r.attack(Code::POST, &loc, &["lt=600".into()], &[]),
        Code::CHANGED
    );
    let again = links.replace("ct=18", "ct=65100");
    assert_eq!(
        r.attack(
            Code::POST,
            "rd",
            std::slice::from_ref(&ep),
            again.as_bytes()
        ),
        Code::CREATED
    );
    // Its owner signs an update: from now on the entry is the device's.
    let digest = update(None).digest(&RustCrypto).unwrap();
    let sig = sign_statement(&RustCrypto, &sk, &id, 5, &digest).unwrap();
    let query = vec![
        "sq=5".to_string(),
        format!(
            "ss={}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig.0)
        ),
    ];
    assert_eq!(r.attack(Code::POST, &loc, &query, &[]), Code::CHANGED);
    assert_eq!(
        r.attack(Code::POST, &loc, &["lt=1".into()], &[]),
        Code::UNAUTHORIZED
    );
    assert_eq!(
        r.attack(Code::POST, "rd", &[ep], links.as_bytes()),
        Code::UNAUTHORIZED
    );
    // The device on the rig was never touched.
    assert!(r.publish_acked(16.0));
}

/// The device side of issue 12: a reading refused with 4.04 (its registration gone) is
/// published again after a full registration, not dropped.
#[test]
fn a_reading_refused_for_a_removed_registration_is_published_again() {
    let mut r = Rig::new(Via::Plain);
    assert!(r.publish_acked(15.0));
    let loc = r.location();
    // A number above everything the device used so far (its next reading takes it too, but
    // that reading is refused for the missing topic before its number is looked at).
    let next = r.dev.device.next_sequence();
    let removal = Operation {
        kind: OperationKind::Remove,
        lifetime: None,
        base: None,
        payload: &[],
    };
    let query = r.signed(removal, next);
    assert_eq!(r.attack(Code::DELETE, &loc, &query, &[]), Code::DELETED);
    let acked = r.dev.events.len();
    assert!(!r.publish_acked(15.5));
    assert!(r.dev.events[acked..].iter().any(|e| matches!(
        e,
        Event::Published {
            outcome: PublishOutcome::Republishing(c),
            ..
        } if *c == Code::NOT_FOUND
    )));
    r.step(10);
    let last = r.dev.events.iter().rev().find_map(|e| match e {
        Event::Published { seq, outcome } => Some((*seq, *outcome)),
        _ => None,
    });
    assert!(
        matches!(last, Some((s, PublishOutcome::Acknowledged)) if s > next),
        "{:?}",
        r.dev.events
    );
    assert_eq!(r.stats.get("publish.accepted"), 2);
}
