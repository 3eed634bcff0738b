//! Revocation reaches everything (docs/security.md, "Revocation"), in memory: the real device
//! state machine and real DTLS clients against the real dispatcher, service and DTLS layer,
//! while another connection to the database (as `sigil provision` would) revokes.
//!
//! A revoked identity leaves the lookups and topic discovery, its readings are no longer
//! served (4.03 "revoked"), its registration is no longer live (updates, re-registrations
//! and publications get 4.03 "revoked", even with trust on first use), its live coaps://
//! sessions end and their stored rows go; adding it again does not bring it back, only
//! reinstating does.

use sigil_coap::{Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{PublicKey, RustCrypto};
use sigil_device::{Device, DeviceConfig, MemoryStorage};
use sigil_identity::Identity;
use sigil_server::store::IdentityKind;
use sigil_server::{Stats, Store};
use sigil_testkit::Seeded;
use std::net::SocketAddr;

use common::sensor::Sensor;
use common::{run, Client, Plain, Process, Restore, Secure, NOW};
use sigil_testkit::server as common;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A CoAP request as a plain client (an application, an attacker) sends it.
fn request(code: Code, mid: u16, path: &str, query: &[&str], payload: &[u8]) -> Vec<u8> {
    request_echoing(code, mid, path, query, payload, None)
}

/// [`request`] with the Echo option a 4.01 asked for (RFC 9175 §2.4).
fn request_echoing(
    code: Code,
    mid: u16,
    path: &str,
    query: &[&str],
    payload: &[u8],
    echo: Option<&[u8]>,
) -> Vec<u8> {
    let mut buf = [0u8; 2048];
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, code, mid, &[0x5a]).unwrap();
    b.uri_path(path).unwrap();
    if let Some(e) = echo {
        b.option(sigil_coap::option::ECHO, e).unwrap();
    }
    for q in query {
        b.option(sigil_coap::option::URI_QUERY, q.as_bytes())
            .unwrap();
    }
    let n = b.finish_with_payload(payload).unwrap();
    buf[..n].to_vec()
}

/// A server on a temporary database, with one device registered over coap:// that publishes
/// through the real device state machine.
struct Rig {
    srv: Plain,
    /// The device at 127.0.0.1:41100, its readings in Cel without a time.
    dev: Sensor,
    stats: Stats,
    mid: u16,
    /// The other kit members' keys (empty for a device outside a kit).
    others: Vec<PublicKey>,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn new(trust_on_first_use: bool) -> Self {
        Self::build(trust_on_first_use, &[])
    }

    /// A device in a kit with `others`, authorized by the kit's group identity only.
    fn in_kit(others: &[PublicKey]) -> Self {
        Self::build(false, others)
    }

    fn build(trust_on_first_use: bool, others: &[PublicKey]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let mut dev = Sensor::new(31, addr(41100), DeviceConfig::default(), others);
        dev.unit = Some("Cel");
        dev.time = None;
        dev.exchanges = Some(vec![]);
        let device = &dev.device;
        let listed = if others.is_empty() {
            (*device.identity(), IdentityKind::Device)
        } else {
            let mut keys = vec![*device.public_key()];
            keys.extend_from_slice(others);
            let group = Identity::of_group(&RustCrypto, &keys).unwrap();
            (group, IdentityKind::Group)
        };
        Store::open(&db)
            .unwrap()
            .add_identity(&listed.0, listed.1, "kitchen", NOW)
            .unwrap();
        let srv = Plain::at(&db, 7, |c| {
            c.service.danger_trust_on_first_use = trust_on_first_use;
        });
        let mut rig = Self {
            stats: srv.stats.clone(),
            srv,
            dev,
            mid: 0x6000,
            others: others.to_vec(),
            _dir: dir,
        };
        rig.step(10);
        assert!(rig.dev.device.is_registered(), "{:?}", rig.dev.events);
        rig
    }

    fn id(&self) -> Identity {
        *self.dev.device.identity()
    }

    /// Another connection to the database, as `sigil provision` has.
    fn provision(&self) -> Store {
        Store::open(&self.srv.db).unwrap()
    }

    fn deliver(&mut self, from: SocketAddr, bytes: Vec<u8>) -> Vec<Vec<u8>> {
        self.srv.one(from, bytes)
    }

    /// Runs the device against the server for `for_ms`.
    fn step(&mut self, for_ms: u64) {
        self.dev.step(&mut self.srv, for_ms);
    }

    /// The codes and payloads of the answers the device got, in order.
    fn answers(&self) -> Vec<(Code, Vec<u8>)> {
        let exchanges = self.dev.exchanges.iter().flatten();
        exchanges
            .filter_map(|(_, a)| Message::parse(a).ok().map(|m| (m.code, m.payload.to_vec())))
            .collect()
    }

    /// Publishes one reading; whether the broker acknowledged it.
    fn publish_acked(&mut self, v: f64) -> bool {
        let seq = self.dev.publish(&mut self.srv, v);
        self.dev.acked().contains(&seq)
    }

    /// A plain request from an application's address; the answer's code and payload. Like
    /// any client of RFC 9175 §2.4, it repeats a request answered with 4.01 and an Echo.
    fn get(&mut self, path: &str, query: &[&str]) -> (Code, String) {
        let mut echo: Option<Vec<u8>> = None;
        loop {
            self.mid += 1;
            let req = request_echoing(Code::GET, self.mid, path, query, &[], echo.as_deref());
            let replies = self.deliver(addr(41300), req);
            let m = Message::parse(&replies[0]).unwrap();
            match m.option(sigil_coap::option::ECHO) {
                Some(e) if m.code == Code::UNAUTHORIZED && echo.is_none() => {
                    echo = Some(e.to_vec())
                }
                _ => return (m.code, String::from_utf8_lossy(m.payload).into_owned()),
            }
        }
    }

    /// The device's topic, `ps/N/<href>`.
    fn topic(&self) -> String {
        let regs = self.provision().registrations().unwrap();
        let href = regs[0]
            .links
            .split('<')
            .nth(1)
            .and_then(|l| l.split('>').next())
            .unwrap();
        format!("ps/{}{}", regs[0].id, href)
    }
}

#[test]
fn a_revoked_device_leaves_the_directory_and_its_readings_are_no_longer_served() {
    let mut r = Rig::new(false);
    assert!(r.publish_acked(21.0));
    let (id, topic) = (r.id().to_string(), r.topic());
    let location = r.dev.device.location().unwrap().to_string();
    for path in ["rd-lookup/ep", "rd-lookup/res", "ps"] {
        let (code, body) = r.get(path, &[]);
        assert_eq!(code, Code::CONTENT);
        let shown = if path == "ps" { &topic } else { &id };
        assert!(body.contains(shown.as_str()), "{path}: {body}");
    }
    assert_eq!(r.get(&topic, &[]).0, Code::CONTENT);
    assert_eq!(r.get(&topic, &["n=5"]).0, Code::CONTENT);

    assert!(r.provision().revoke_identity(&r.id(), NOW + 5).unwrap());

    // Gone from every lookup, whatever its lifetime says.
    for path in ["rd-lookup/ep", "rd-lookup/res", "ps"] {
        let (code, body) = r.get(path, &[]);
        assert_eq!(code, Code::CONTENT);
        assert!(
            !body.contains(&id) && !body.contains(&topic),
            "{path}: {body}"
        );
    }
    let (code, body) = r.get("rd-lookup/res", &[&format!("ep={id}")]);
    assert_eq!((code, body.as_str()), (Code::CONTENT, ""));
    // Its readings are refused with the reason, latest and history alike.
    assert_eq!(r.get(&topic, &[]), (Code::FORBIDDEN, "revoked".to_string()));
    assert_eq!(
        r.get(&topic, &["n=5"]),
        (Code::FORBIDDEN, "revoked".to_string())
    );
    assert_eq!(r.stats.get("read.rejected.revoked"), 2);

    // Its own requests: a publication, an update and a new registration all get 4.03
    // "revoked".
    assert!(!r.publish_acked(22.0));
    assert_eq!(
        r.answers().last().unwrap(),
        &(Code::FORBIDDEN, b"revoked".to_vec())
    );
    assert_eq!(r.stats.get("publish.rejected.revoked"), 1);
    r.mid += 1;
    let update = request(Code::POST, r.mid, &location, &["lt=600"], &[]);
    let reply = r.deliver(addr(41100), update);
    let m = Message::parse(&reply[0]).unwrap();
    assert_eq!((m.code, m.payload), (Code::FORBIDDEN, &b"revoked"[..]));
    assert_eq!(r.stats.get("register.rejected.revoked"), 1);
    r.reboot();
    assert!(!r.dev.device.is_registered());
    assert_eq!(
        r.answers().last().unwrap(),
        &(Code::FORBIDDEN, b"revoked".to_vec())
    );
    assert_eq!(r.stats.get("register.rejected.revoked"), 2);

    // Added again (a re-imported label file): still revoked.
    assert!(!r
        .provision()
        .add_identity(&r.id(), IdentityKind::Device, "", NOW + 9)
        .unwrap());
    r.reboot();
    assert!(!r.dev.device.is_registered());
    assert_eq!(r.stats.get("register.rejected.revoked"), 3);

    // Reinstated: it registers, publishes and is listed again.
    assert!(r
        .provision()
        .reinstate_identity(&r.id(), IdentityKind::Device, "", NOW + 10)
        .unwrap());
    r.reboot();
    assert!(r.dev.device.is_registered(), "{:?}", r.answers());
    assert!(r.publish_acked(23.0));
    assert!(r.get("rd-lookup/ep", &[]).1.contains(&id));
    assert_eq!(r.get(&r.topic(), &[]).0, Code::CONTENT);
}

impl Rig {
    /// The device starts again from its storage (same key, same identity) and registers.
    fn reboot(&mut self) {
        self.dev.device = Device::boot(
            RustCrypto,
            DeviceConfig::default(),
            &mut self.dev.storage,
            &mut Seeded(self.srv.now),
            &self.others,
            &[],
        )
        .unwrap();
        self.step(10);
    }
}

/// A kit member is authorized by its kit's group identity: revoking the kit takes the member
/// out of the directory and refuses its readings; revoking the member alone (recorded as
/// revoked by name) refuses it even though its kit is still listed.
#[test]
fn revoking_a_kit_reaches_its_members_and_a_revoked_member_stays_out_of_its_kit() {
    let others: Vec<PublicKey> = (0..2)
        .map(|i| {
            let mut st = MemoryStorage::default();
            let d = Device::boot(
                RustCrypto,
                DeviceConfig::default(),
                &mut st,
                &mut Seeded(200 + i),
                &[],
                &[],
            )
            .unwrap();
            *d.public_key()
        })
        .collect();
    let mut r = Rig::in_kit(&others);
    assert!(r.publish_acked(20.0));
    let (id, topic) = (r.id().to_string(), r.topic());
    let group = r.provision().registrations().unwrap()[0].authorized_by;
    assert_ne!(group, r.id());
    assert!(r.get("rd-lookup/res", &[]).1.contains(&id));

    assert!(r.provision().revoke_identity(&group, NOW + 1).unwrap());
    assert!(!r.get("rd-lookup/res", &[]).1.contains(&id));
    assert_eq!(r.get(&topic, &[]), (Code::FORBIDDEN, "revoked".to_string()));
    assert!(!r.publish_acked(21.0));
    r.reboot();
    assert!(!r.dev.device.is_registered());
    assert_eq!(r.stats.get("register.rejected.revoked"), 1);

    // The kit back, the member (never on the list by name) revoked alone: it stays out.
    let store = r.provision();
    assert!(store
        .reinstate_identity(&group, IdentityKind::Group, "", NOW + 2)
        .unwrap());
    assert!(!store.revoke_identity(&r.id(), NOW + 3).unwrap());
    assert!(store.revoke_unlisted(&r.id(), NOW + 3).unwrap());
    assert!(!store.revoke_unlisted(&group, NOW + 3).unwrap());
    r.reboot();
    assert!(!r.dev.device.is_registered());
    assert_eq!(r.stats.get("register.rejected.revoked"), 2);
    assert_eq!(r.get(&topic, &[]), (Code::FORBIDDEN, "revoked".to_string()));
}

/// Trust on first use adds an unknown identity that registers; a revoked one is not unknown:
/// it stays out.
#[test]
fn trust_on_first_use_does_not_bring_a_revoked_identity_back() {
    let mut r = Rig::new(true);
    assert!(r.provision().revoke_identity(&r.id(), NOW + 1).unwrap());
    r.reboot();
    assert!(!r.dev.device.is_registered());
    assert_eq!(r.stats.get("register.rejected.revoked"), 1);
    assert_eq!(r.stats.get("register.trust_on_first_use"), 0);
    let store = r.provision();
    assert!(!store.authorized().unwrap().contains_key(&r.id()));
    assert_eq!(store.revoked_at(&r.id()).unwrap(), Some(NOW + 1));
}

// ---- coaps:// ----

/// The server's side of coaps:// in memory, with virtual time; sessions are kept in the
/// database, as `sigil server` keeps them.
fn secure() -> Secure {
    Secure::fresh(
        |_| {},
        |_| {},
        Process {
            restore: Restore::Sessions,
            ..Process::default()
        },
    )
}

/// `c` asks for `/.well-known/core` in its session: whether an answer came.
fn discovery_answered(c: &mut Client, s: &mut Secure, now: &mut u64, mid: u16) -> bool {
    let before = c.inbox.len();
    if c.conn
        .send(&request(Code::GET, mid, ".well-known/core", &[], &[]))
        .is_err()
    {
        return false;
    }
    run(s, &mut [&mut *c], now, 300);
    c.inbox.len() > before
}

fn identity(seed: u8) -> Identity {
    Identity::from_bytes([seed; 16])
}

/// The session of a revoked identity ends as soon as the server notices the revocation (the
/// next datagram or timer), with a close_notify, and its stored row is deleted; another
/// identity's session carries on; the revoked one cannot open a new one.
#[test]
fn a_revoked_identitys_live_session_ends_and_its_stored_row_goes() {
    let mut s = secure();
    let (revoked, kept) = (identity(0x51), identity(0x52));
    s.provision(&revoked, Some(&[0x51; 16]));
    s.provision(&kept, Some(&[0x52; 16]));
    let mut now = 0;
    let mut a = Client::psk(addr(51), &revoked.to_string(), &[0x51; 16], 51, now);
    let mut b = Client::psk(addr(52), &kept.to_string(), &[0x52; 16], 52, now);
    run(&mut s, &mut [&mut a, &mut b], &mut now, 2_000);
    assert!(a.conn.is_established() && b.conn.is_established());
    assert!(discovery_answered(&mut a, &mut s, &mut now, 1));
    assert_eq!(s.layer.sessions(), 2);
    let mut stored = s.stored_sessions();
    stored.sort();
    assert_eq!(stored, vec![revoked.to_string(), kept.to_string()]);

    assert!(Store::open(&s.db)
        .unwrap()
        .revoke_identity(&revoked, NOW + 1)
        .unwrap());
    // `sigil provision revoke` deleted the stored row; the server ends the live session at
    // its next call, even with no datagram from that peer.
    assert_eq!(s.stored_sessions(), vec![kept.to_string()]);
    run(&mut s, &mut [&mut a, &mut b], &mut now, 100);
    assert_eq!(s.layer.sessions(), 1);
    assert_eq!(s.stats.get("dtls.session_revoked"), 1);
    assert!(
        !a.conn.is_established() && a.conn.failure().is_some(),
        "the client got a close_notify"
    );
    assert!(!s.layer.authenticated().contains(&revoked));
    assert!(!discovery_answered(&mut a, &mut s, &mut now, 2));
    assert!(discovery_answered(&mut b, &mut s, &mut now, 3));
    assert_eq!(s.stored_sessions(), vec![kept.to_string()]);

    // A new handshake with the same PSK gets no session.
    let mut again = Client::psk(addr(53), &revoked.to_string(), &[0x51; 16], 53, now);
    run(&mut s, &mut [&mut again], &mut now, 2_000);
    assert!(!again.conn.is_established());
    assert_eq!(s.layer.sessions(), 1);
}
