//! Observe (RFC 7641) on broker topics over coap://, in memory against the real `Dispatcher`
//! and service with a virtual clock: a real signing sensor publishes, observers register with
//! GET + Observe 0 and receive each stored reading as a notification carrying the exact
//! bytes the sensor signed. Every figure asserted is the server's own accounting or the
//! datagrams it sent.

use sigil_coap::exchange::observe::Ordering;
use sigil_coap::{option, Code, Message, MessageBuilder, MessageType};
use sigil_crypto::RustCrypto;
use sigil_objects::reading::{ReadingFormat, SignedReading};
use sigil_time::Instant;
use std::net::SocketAddr;

use common::sensor::{registered, Sensor};
use common::Plain as Server;
use sigil_testkit::server as common;

/// A GET of `path` with Observe `observe` (and Echo).
fn observe_get(mid: u16, token: &[u8], path: &str, observe: u32, echo: Option<&[u8]>) -> Vec<u8> {
    let mut buf = [0u8; 256];
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, mid, token).unwrap();
    b.uint_option(option::OBSERVE, observe).unwrap();
    b.uri_path(path).unwrap();
    if let Some(e) = echo {
        b.option(option::ECHO, e).unwrap();
    }
    let n = b.finish();
    buf[..n].to_vec()
}

/// A client observing one topic from `addr`: what it received, in order.
struct Follower {
    addr: SocketAddr,
    token: Vec<u8>,
    mid: u16,
    got: Vec<Vec<u8>>,
    /// What the server sent to others while this one registered.
    others: Vec<(SocketAddr, Vec<u8>)>,
}

impl Follower {
    fn new(addr: SocketAddr, token: &[u8]) -> Self {
        Self {
            addr,
            token: token.to_vec(),
            mid: 100,
            got: vec![],
            others: vec![],
        }
    }

    /// Registers for `topic` the way aiocoap does: the 4.01 Echo challenge is answered by
    /// repeating the request with the value. Returns the registration's answer.
    fn register(&mut self, s: &mut Server, topic: &str) -> Vec<u8> {
        self.mid += 1;
        let first = s.one(
            self.addr,
            observe_get(self.mid, &self.token, topic, 0, None),
        );
        assert_eq!(first.len(), 1);
        let m = Message::parse(&first[0]).unwrap();
        assert_eq!(
            m.code,
            Code::UNAUTHORIZED,
            "an unproven address is asked for Echo first"
        );
        assert_eq!(m.observe(), None);
        let echo = m.option(option::ECHO).unwrap().to_vec();
        self.mid += 1;
        let sent = s.deliver(vec![(
            self.addr,
            observe_get(self.mid, &self.token, topic, 0, Some(&echo)),
        )]);
        let (mine, others): (Vec<_>, Vec<_>) =
            sent.into_iter().partition(|(to, _)| *to == self.addr);
        self.others.extend(others);
        assert_eq!(mine.len(), 1);
        mine[0].1.clone()
    }

    /// Keeps what `out` holds for this follower (and acknowledges a Confirmable one when
    /// `ack`); returns the acknowledgements to deliver.
    fn take(&mut self, out: &[(SocketAddr, Vec<u8>)], ack: bool) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut acks = vec![];
        for (to, b) in out {
            if *to != self.addr {
                continue;
            }
            let m = Message::parse(b).unwrap();
            if m.token != self.token.as_slice() {
                continue;
            }
            if ack && m.mtype == MessageType::Confirmable {
                acks.push((
                    self.addr,
                    sigil_coap::message::empty(MessageType::Acknowledgement, m.message_id).to_vec(),
                ));
            }
            self.got.push(b.clone());
        }
        acks
    }
}

/// The sensor publishes `v`; every datagram the server sends meanwhile.
fn publish(s: &mut Server, dev: &mut Sensor, v: f64) -> Vec<(SocketAddr, Vec<u8>)> {
    let before = dev.sent.len();
    let mut all = vec![];
    // The sensor's own run hands it only what was sent to its address; the rest is kept by
    // running the same exchange through `deliver` here.
    dev.publish_collecting(s, v, &mut all);
    assert!(dev.sent.len() > before, "the sensor sent its reading");
    all
}

/// Verifies a notification's reading end to end with the sensor's key: its sequence number.
fn verify(n: &Message<'_>, dev: &Sensor) -> u64 {
    let fmt = ReadingFormat::from_content_format(n.content_format().unwrap().0).unwrap();
    let r = SignedReading::parse(fmt, n.payload).unwrap();
    let key = dev.device.public_key();
    let seq = r.full_seq().unwrap();
    let mut scratch = vec![0u8; r.scratch_len()];
    r.verify_end_to_end(&RustCrypto, key, dev.device.identity(), seq, &mut scratch)
        .expect("the notification verifies with the sensor's key");
    seq
}

#[test]
fn an_observer_receives_every_stored_reading_as_signed_in_order() {
    let mut s = Server::new(|_| {});
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    let mut f = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5000)), &[7, 7]);
    let answer = f.register(&mut s, &topic);
    let m = Message::parse(&answer).unwrap();
    assert_eq!(m.code, Code::CONTENT);
    assert!(m.payload.is_empty(), "nothing published yet");
    let first_seq = m.observe().expect("registered: the answer carries Observe");
    assert_eq!(
        m.uint_option(option::MAX_AGE),
        Some(240),
        "twice the refresh"
    );
    assert_eq!(s.stats.get("observe.registered"), 1);
    assert_eq!(s.stats.get("observe.echo_first"), 1);

    let mut base = None;
    let mut order = Ordering::new();
    assert!(order.accept(first_seq, Instant::from_millis(s.now)));
    for i in 0..20u32 {
        let out = publish(&mut s, &mut dev, f64::from(i));
        let acks = f.take(&out, true);
        s.deliver(acks);
        let n = Message::parse(f.got.last().unwrap()).unwrap();
        assert_eq!(n.code, Code::CONTENT);
        assert!(order.accept(n.observe().unwrap(), Instant::from_millis(s.now)));
        // The exact bytes the sensor signed, and they verify end to end.
        let seq = verify(&n, &dev);
        let base = *base.get_or_insert(seq);
        assert_eq!(seq, base + u64::from(i), "each reading once, in order");
        assert!(
            dev.sent
                .iter()
                .any(|d| Message::parse(d).is_ok_and(|m| m.payload == n.payload)),
            "the bytes the sensor sent"
        );
        assert_eq!(n.option(option::ETAG), Some(&seq.to_be_bytes()[..]));
    }
    assert_eq!(f.got.len(), 20);
    // One in 16 is Confirmable, and acknowledged.
    assert_eq!(s.stats.get("observe.notified.con"), 1);
    assert_eq!(s.stats.get("observe.notified.non"), 19);
    assert_eq!(s.stats.get("observe.acknowledged"), 1);
    assert_eq!(s.gauge("observe.observers"), 1);
}

#[test]
fn observe_1_and_a_reset_end_an_observation() {
    let mut s = Server::new(|_| {});
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    let mut a = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5000)), &[1]);
    let mut b = Follower::new(SocketAddr::from(([127, 0, 0, 10], 5000)), &[2]);
    a.register(&mut s, &topic);
    b.register(&mut s, &topic);
    let out = publish(&mut s, &mut dev, 1.0);
    a.take(&out, true);
    b.take(&out, true);
    assert_eq!((a.got.len(), b.got.len()), (1, 1));
    // a: GET with Observe 1 (the same token) deregisters and is answered without Observe.
    a.mid += 1;
    let r = s.one(a.addr, observe_get(a.mid, &a.token, &topic, 1, None));
    let m = Message::parse(&r[0]).unwrap();
    assert_eq!((m.code, m.observe()), (Code::CONTENT, None));
    assert_eq!(s.stats.get("observe.deregistered"), 1);
    // b: a Reset to the notification it got.
    let mid = Message::parse(&b.got[0]).unwrap().message_id;
    s.one(
        b.addr,
        sigil_coap::message::empty(MessageType::Reset, mid).to_vec(),
    );
    assert_eq!(s.stats.get("observe.cancelled.reset"), 1);
    assert_eq!(s.gauge("observe.observers"), 0);
    let out = publish(&mut s, &mut dev, 2.0);
    a.take(&out, true);
    b.take(&out, true);
    assert_eq!((a.got.len(), b.got.len()), (1, 1), "nothing after the end");
    assert_eq!(s.gauge("mem.observe.bytes"), 0, "the bytes given back");
}

#[test]
fn an_observer_that_vanishes_is_dropped_after_the_retransmissions() {
    let mut s = Server::new(|c| c.observe.confirmable_every = 1);
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    let mut gone = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5000)), &[1]);
    let mut here = Follower::new(SocketAddr::from(([127, 0, 0, 10], 5000)), &[2]);
    gone.register(&mut s, &topic);
    here.register(&mut s, &topic);
    let out = publish(&mut s, &mut dev, 1.0);
    gone.take(&out, false);
    s.deliver(here.take(&out, true));
    let n = Message::parse(&gone.got[0]).unwrap();
    assert_eq!(n.mtype, MessageType::Confirmable);
    // Virtual time passes; the server sends the same notification again with exponential
    // back-off (RFC 7252 §4.2), then forgets the observer.
    let start = s.now;
    let mut resent = vec![];
    while s.now < start + 100_000 {
        s.now += 100;
        for (to, b) in s.tick() {
            if to == gone.addr {
                assert_eq!(b, gone.got[0], "the same message again");
                resent.push(s.now - start);
            }
        }
    }
    assert_eq!(resent.len(), 4, "{resent:?}");
    let first = resent[0];
    assert!((2_000..=3_000).contains(&first), "{first}");
    assert_eq!(s.stats.get("observe.gave_up"), 1);
    assert_eq!(s.stats.get("observe.retransmitted"), 4);
    assert_eq!(
        s.gauge("observe.observers"),
        1,
        "the one that acknowledges stays"
    );
    let out = publish(&mut s, &mut dev, 2.0);
    s.deliver(here.take(&out, true));
    assert_eq!(here.got.len(), 2);
    assert!(out.iter().all(|(to, _)| *to != gone.addr));
}

#[test]
fn ten_thousand_observers_from_one_host_are_capped_and_other_hosts_are_served() {
    let mut s = Server::new(|_| {});
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    let cap = s.config.observe.max_per_host;
    let mut registered_ok = 0;
    for i in 0..10_000u32 {
        let port = 10_000 + (i % 50_000) as u16;
        let mut f = Follower::new(SocketAddr::from(([127, 0, 0, 66], port)), &i.to_be_bytes());
        let m = f.register(&mut s, &topic);
        if Message::parse(&m).unwrap().observe().is_some() {
            registered_ok += 1;
        }
    }
    assert_eq!(registered_ok, cap);
    assert_eq!(
        s.stats.get("observe.refused.host_full"),
        10_000 - cap as u64
    );
    let mut other = Follower::new(SocketAddr::from(([127, 0, 0, 77], 5000)), &[9]);
    let m = other.register(&mut s, &topic);
    assert!(
        Message::parse(&m).unwrap().observe().is_some(),
        "another host is served"
    );
    let out = publish(&mut s, &mut dev, 1.0);
    other.take(&out, true);
    assert_eq!(other.got.len(), 1);
    let to_flooder = out
        .iter()
        .filter(|(to, _)| to.ip() == std::net::Ipv4Addr::new(127, 0, 0, 66))
        .count();
    assert_eq!(to_flooder, cap, "one notification per observation held");
}

#[test]
fn a_revoked_sensor_ends_the_observation_with_its_refusal() {
    let mut s = Server::new(|c| c.observe.refresh = std::time::Duration::from_secs(60));
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    let mut f = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5000)), &[1]);
    f.register(&mut s, &topic);
    let out = publish(&mut s, &mut dev, 1.0);
    f.take(&out, true);
    // Nothing new for a refresh period: the current state again.
    s.now += 61_000;
    let out = s.tick();
    s.deliver(f.take(&out, true));
    assert_eq!(f.got.len(), 2);
    assert_eq!(f.got[0].len(), f.got[1].len());
    assert_eq!(s.stats.get("observe.refreshed"), 1);
    // The sensor is revoked (by the operator's tool, in another connection): the next
    // notification is the refusal, without Observe, and the observation ends.
    sigil_server::Store::open(&s.db)
        .unwrap()
        .revoke_identity(dev.device.identity(), common::NOW + 100)
        .unwrap();
    s.now += 61_000;
    let out = s.tick();
    f.take(&out, true);
    let last = Message::parse(f.got.last().unwrap()).unwrap();
    assert_eq!(last.code, Code::FORBIDDEN);
    assert_eq!(last.observe(), None);
    assert_eq!(s.stats.get("observe.ended.refused"), 1);
    assert_eq!(s.gauge("observe.observers"), 0);
}

#[test]
fn history_and_other_resources_are_answered_without_observe() {
    let mut s = Server::new(|_| {});
    let mut dev = registered(&mut s, 1);
    dev.publish(&mut s, 1.0);
    let topic = format!("{}?n=2", dev.topic());
    let mut f = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5000)), &[1]);
    f.mid += 1;
    let (p, q) = topic.split_once('?').unwrap();
    let mut buf = [0u8; 256];
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, 9, &[1]).unwrap();
    b.uint_option(option::OBSERVE, 0).unwrap();
    b.uri_path(p).unwrap();
    b.option(option::URI_QUERY, q.as_bytes()).unwrap();
    let n = b.finish();
    let r = s.one(f.addr, buf[..n].to_vec());
    let m = Message::parse(&r[0]).unwrap();
    assert_eq!(m.observe(), None, "the history is not observable");
    let r = s.one(f.addr, observe_get(10, &[2], ".well-known/core", 0, None));
    assert_eq!(Message::parse(&r[0]).unwrap().observe(), None);
    assert_eq!(s.stats.get("observe.registered"), 0);
}

/// A coaps:// server that serves readings only to granted readers, a sensor publishing over
/// coap:// to it, and a reader `seed` with a PSK session, granted the sensor and observing
/// its topic: the server, clock, sensor, reader and topic.
fn secure_observer(seed: u64) -> (common::Secure, u64, Sensor, common::Client, String) {
    use common::{run, Client, Process};
    let mut s = common::Secure::fresh(|_| {}, |c| c.authorize_reads = true, Process::default());
    let dev = registered(&mut s, 1);
    let mut now = s.now;
    let reader = common::ed25519_identity(seed);
    let psk = [seed as u8; 16];
    s.provision(&reader, Some(&psk));
    sigil_server::Store::open(&s.db)
        .unwrap()
        .grant_read(&reader, dev.device.identity(), common::NOW)
        .unwrap();
    let mut c = Client::psk(
        common::addr(seed as u16),
        &reader.to_string(),
        &psk,
        seed,
        now,
    );
    run(&mut s, &mut [&mut c], &mut now, 3_000);
    let topic = dev.topic();
    c.send(&observe_get(1, &[5, 5], &topic, 0, None));
    run(&mut s, &mut [&mut c], &mut now, 300);
    let m = Message::parse(c.inbox.last().expect("an answer")).unwrap();
    assert_eq!(m.code, Code::CONTENT);
    assert!(
        m.observe().is_some(),
        "registered over coaps:// without Echo"
    );
    s.now = now;
    (s, now, dev, c, topic)
}

/// The sensor publishes `v` at `now`; the reader's session runs 300 ms.
fn publish_to(
    s: &mut common::Secure,
    now: &mut u64,
    dev: &mut Sensor,
    c: &mut common::Client,
    v: f64,
) {
    s.now = *now;
    dev.publish(s, v);
    *now = s.now;
    common::run(s, &mut [&mut *c], now, 300);
}

#[test]
fn over_coaps_a_granted_reader_is_notified_until_its_grant_is_withdrawn() {
    let (mut s, mut now, mut dev, mut c, _) = secure_observer(102);
    for i in 0..3 {
        let before = c.inbox.len();
        publish_to(&mut s, &mut now, &mut dev, &mut c, f64::from(i));
        assert_eq!(
            c.inbox.len(),
            before + 1,
            "one notification inside the session"
        );
        let n = Message::parse(c.inbox.last().unwrap()).unwrap();
        assert_eq!(n.code, Code::CONTENT);
        assert!(n.observe().is_some());
        verify(&n, &dev);
    }
    // The operator withdraws the grant (another process): the next reading is not sent; the
    // refusal is, and the observation ends.
    let reader = common::ed25519_identity(102);
    sigil_server::Store::open(&s.db)
        .unwrap()
        .revoke_read(&reader, dev.device.identity())
        .unwrap();
    publish_to(&mut s, &mut now, &mut dev, &mut c, 9.0);
    let last = Message::parse(c.inbox.last().unwrap()).unwrap();
    assert_eq!(last.code, Code::FORBIDDEN);
    assert_eq!(last.observe(), None);
    assert!(
        last.payload.is_empty() || !last.payload.starts_with(&[0xd2]),
        "no reading"
    );
    assert_eq!(s.count("observe.ended.refused"), 1);
    let before = c.inbox.len();
    publish_to(&mut s, &mut now, &mut dev, &mut c, 10.0);
    assert_eq!(c.inbox.len(), before, "nothing more");
}

#[test]
fn over_coaps_an_observation_ends_with_its_session() {
    let (mut s, mut now, mut dev, mut c, _) = secure_observer(103);
    publish_to(&mut s, &mut now, &mut dev, &mut c, 1.0);
    assert_eq!(s.count("observe.notified.non"), 1);
    c.conn.close().unwrap();
    common::run(&mut s, &mut [&mut c], &mut now, 300);
    let before = c.inbox.len();
    publish_to(&mut s, &mut now, &mut dev, &mut c, 2.0);
    assert_eq!(c.inbox.len(), before);
    assert_eq!(s.count("observe.ended.session"), 1);
    assert_eq!(s.stats.get("observe.observers"), 0);
}

#[test]
fn over_the_coap_carrier_a_session_observes_too() {
    use common::{run, Process};
    let mut s = common::Secure::fresh(|_| {}, |_| {}, Process::default());
    let mut dev = registered(&mut s, 1);
    let mut now = s.now;
    let reader = common::ed25519_identity(104);
    let psk = [104u8; 16];
    s.provision(&reader, Some(&psk));
    let text = reader.to_string();
    let creds = sigil_dtls::Credentials::Psk {
        identity: text.as_bytes(),
        key: &psk,
    };
    // A reader whose session is made over the CoAP carrier (the DTLS handshake inside CoAP,
    // `sigil-dtls-coap`), then carries its records directly.
    let config = sigil_dtls::Config::default();
    let mut c = common::Client::connect(common::addr(104), config, creds, 104, now)
        .over_coap(creds, 104, now);
    run(&mut s, &mut [&mut c], &mut now, 3_000);
    assert!(c.traffic.is_some(), "the carrier handshake completed");
    let topic = dev.topic();
    c.traffic
        .as_mut()
        .unwrap()
        .send(&observe_get(1, &[6], &topic, 0, None))
        .unwrap();
    run(&mut s, &mut [&mut c], &mut now, 300);
    let m = Message::parse(c.inbox.last().expect("answered")).unwrap();
    assert!(m.observe().is_some());
    for i in 0..2 {
        s.now = now;
        dev.publish(&mut s, f64::from(i));
        now = s.now;
        run(&mut s, &mut [&mut c], &mut now, 300);
        let n = Message::parse(c.inbox.last().unwrap()).unwrap();
        assert!(n.observe().is_some());
        verify(&n, &dev);
    }
    assert_eq!(c.inbox.len(), 3);
}

#[test]
fn a_lost_notification_and_a_lost_acknowledgement_are_made_good_by_retransmission() {
    let mut s = Server::new(|c| c.observe.confirmable_every = 1);
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    let mut f = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5000)), &[1]);
    f.register(&mut s, &topic);
    // The first notification is lost on the way: nothing reaches the follower.
    let out = publish(&mut s, &mut dev, 1.0);
    assert_eq!(out.iter().filter(|(to, _)| *to == f.addr).count(), 1);
    // Its retransmission arrives; the follower's acknowledgement is lost.
    let mut resent = vec![];
    while resent.is_empty() {
        s.now += 100;
        resent = s.tick();
    }
    f.take(&resent, true);
    assert_eq!(f.got.len(), 1);
    // The next retransmission arrives too (a duplicate: same message ID); this ACK gets
    // through and ends the retransmissions.
    let mut again = vec![];
    while again.is_empty() {
        s.now += 100;
        again = s.tick();
    }
    assert_eq!(again[0].1, resent[0].1, "the same message");
    let acks = f.take(&again, true);
    s.deliver(acks);
    assert_eq!(s.stats.get("observe.acknowledged"), 1);
    assert_eq!(s.stats.get("observe.retransmitted"), 2);
    let until = s.now + 120_000;
    while s.now < until {
        s.now += 1_000;
        assert!(
            s.tick().iter().all(|(to, b)| *to != f.addr
                || Message::parse(b).unwrap().message_id
                    != Message::parse(&again[0].1).unwrap().message_id),
            "nothing sent again once acknowledged"
        );
    }
    assert_eq!(s.stats.get("observe.gave_up"), 0);
    // A restart of the server (a new dispatcher over the same database): no observer is kept;
    // the follower registers again and is notified.
    let db = s.db.clone();
    let (d, stats, _) = common::plain_dispatcher(&db, 43, |_| {});
    s.d = d;
    s.stats = stats;
    let mut f2 = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5001)), &[2]);
    f2.register(&mut s, &topic);
    let before = f.got.len();
    let out = publish(&mut s, &mut dev, 2.0);
    f.take(&out, true);
    f2.take(&out, true);
    assert_eq!(f2.got.len(), 1, "the new registration is notified");
    assert_eq!(
        f.got.len(),
        before,
        "the observation from before the restart is not"
    );
}

#[test]
fn a_full_observer_table_gives_way_to_a_newcomer_from_the_host_holding_most() {
    let mut s = Server::new(|c| {
        c.observe.max_observers = 128;
        c.observe.give_way_per_sec = 4;
    });
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    // Two hosts fill the table with their 64 each.
    let mut flood = vec![];
    for h in 0..2u8 {
        for i in 0..64u16 {
            let mut f = Follower::new(
                SocketAddr::from(([127, 0, 1, h], 10_000 + i)),
                &[h, i as u8],
            );
            let m = f.register(&mut s, &topic);
            assert!(Message::parse(&m).unwrap().observe().is_some());
            flood.push(f);
        }
    }
    assert_eq!(s.gauge("observe.observers"), 128);
    // Newcomers from other hosts: each takes the place of one of the flood's, up to the
    // give-way rate (4 a second); then refused until the next second.
    let mut taken = 0;
    let mut newcomers = vec![];
    for n in 0..6u8 {
        let mut f = Follower::new(SocketAddr::from(([127, 0, 2, n], 5000)), &[9]);
        let m = f.register(&mut s, &topic);
        if Message::parse(&m).unwrap().observe().is_some() {
            taken += 1;
        }
        newcomers.push(f);
    }
    assert_eq!(taken, 4);
    assert_eq!(s.stats.get("observe.gave_way"), 4);
    assert_eq!(s.stats.get("observe.give_way_rate_limited"), 2);
    // Each observation that gave way was told: 5.03 without Observe.
    let out: Vec<_> = newcomers
        .iter()
        .flat_map(|f: &Follower| f.others.clone())
        .collect();
    let told: Vec<_> = out
        .iter()
        .filter(|(to, _)| to.ip().to_string().starts_with("127.0.1."))
        .map(|(_, b)| Message::parse(b).unwrap().code)
        .collect();
    assert_eq!(told, vec![Code::SERVICE_UNAVAILABLE; 4]);
    s.now += 1_000;
    let mut late = Follower::new(SocketAddr::from(([127, 0, 2, 99], 5000)), &[9]);
    let m = late.register(&mut s, &topic);
    assert!(
        Message::parse(&m).unwrap().observe().is_some(),
        "a second later, room again"
    );
    // A reading reaches the newcomers.
    let out = publish(&mut s, &mut dev, 1.0);
    late.take(&out, true);
    assert_eq!(late.got.len(), 1);
    assert_eq!(s.gauge("observe.observers"), 128);
}

#[test]
fn notifications_keep_the_block_size_the_registration_asked_for() {
    let mut s = Server::new(|_| {});
    let mut dev = registered(&mut s, 1);
    dev.publish(&mut s, 1.0);
    let topic = dev.topic();
    let addr = SocketAddr::from(([127, 0, 0, 9], 5000));
    // GET + Observe 0 + Block2 0/64 B, repeated with the Echo value.
    let get = |mid: u16, echo: Option<&[u8]>| {
        let mut buf = [0u8; 256];
        let mut b =
            MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, mid, &[4]).unwrap();
        b.uint_option(option::OBSERVE, 0).unwrap();
        b.uri_path(&topic).unwrap();
        let (v, n) = sigil_coap::BlockOption::new(0, false, 2).encode().unwrap();
        b.option(option::BLOCK2, &v[..n]).unwrap();
        if let Some(e) = echo {
            b.option(option::ECHO, e).unwrap();
        }
        let n = b.finish();
        buf[..n].to_vec()
    };
    let first = s.one(addr, get(1, None));
    let echo = Message::parse(&first[0])
        .unwrap()
        .option(option::ECHO)
        .unwrap()
        .to_vec();
    let answer = s.one(addr, get(2, Some(&echo)));
    let m = Message::parse(&answer[0]).unwrap();
    assert!(m.observe().is_some());
    assert_eq!(m.payload.len(), 64);
    let out = publish(&mut s, &mut dev, 2.0);
    let n = out.iter().find(|(to, _)| *to == addr).expect("notified");
    let n = Message::parse(&n.1).unwrap();
    assert_eq!(n.payload.len(), 64, "the first block of the size asked for");
    let b2 = n.block2().unwrap().unwrap();
    assert!(b2.more && b2.num == 0 && b2.szx == 2);
}

#[test]
fn an_observer_slower_than_the_readings_is_not_dropped() {
    // Every other notification Confirmable; the follower's ACK of each arrives only after the
    // next reading. While one is unacknowledged nothing more is sent (RFC 7641 §4.5.1); the
    // ACK releases the newest state. Before, each reading replaced the unacknowledged one
    // under a new message ID that no ACK matched, and the observer was given up on.
    let mut s = Server::new(|c| c.observe.confirmable_every = 2);
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    let mut f = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5000)), &[1]);
    f.register(&mut s, &topic);
    let mut late_acks = vec![];
    for i in 0..40 {
        let out = publish(&mut s, &mut dev, f64::from(i));
        let mut acks = f.take(&out, true);
        let released = s.deliver(std::mem::take(&mut late_acks));
        acks.extend(f.take(&released, true));
        late_acks = acks;
    }
    let released = s.deliver(late_acks);
    let acks = f.take(&released, true);
    s.deliver(acks);
    let etags: Vec<u64> = f
        .got
        .iter()
        .filter_map(|b| {
            let m = Message::parse(b).unwrap();
            (m.code == Code::CONTENT)
                .then(|| u64::from_be_bytes(m.option(option::ETAG).unwrap().try_into().unwrap()))
        })
        .collect();
    // Each held reading is released by the ACK before the next one comes: all arrive.
    assert_eq!(etags.len(), 40);
    assert!(
        etags.windows(2).all(|w| w[0] < w[1]),
        "newer each time: {etags:?}"
    );
    let newest = dev.device.next_sequence() - 1;
    assert_eq!(
        etags.last().copied(),
        Some(newest),
        "the newest reading reached it"
    );
    assert_eq!(s.stats.get("observe.gave_up"), 0);
    assert_eq!(
        s.stats.get("coap.unexpected_ack_or_reset"),
        0,
        "every ACK matched"
    );
    assert!(s.stats.get("observe.held") >= 10);
    assert!(s.stats.get("observe.released") >= 10);
    // Long after, the observer is still there and still notified.
    s.now += 120_000;
    let out = publish(&mut s, &mut dev, 99.0);
    f.take(&out, true);
    assert_eq!(s.gauge("observe.observers"), 1);
}

#[test]
fn a_spoofed_registration_from_an_address_verified_earlier_is_asked_for_echo_again() {
    // A victim registered once (answering Echo) and deregistered. A registration spoofed from
    // its address and port without an Echo value of its own is challenged, not taken: the
    // earlier verification does not make notifications go there again.
    let mut s = Server::new(|_| {});
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    let mut victim = Follower::new(SocketAddr::from(([127, 0, 0, 62], 40002)), &[1]);
    victim.register(&mut s, &topic);
    victim.mid += 1;
    s.one(victim.addr, observe_get(victim.mid, &[1], &topic, 1, None));
    assert_eq!(s.gauge("observe.observers"), 0);
    let spoofed = s.one(victim.addr, observe_get(77, &[2], &topic, 0, None));
    let m = Message::parse(&spoofed[0]).unwrap();
    assert_eq!(m.code, Code::UNAUTHORIZED);
    assert!(m.option(option::ECHO).is_some());
    assert_eq!(s.stats.get("observe.echo_first"), 2);
    assert_eq!(s.gauge("observe.observers"), 0);
    let out = publish(&mut s, &mut dev, 1.0);
    assert!(
        out.iter().all(|(to, _)| *to != victim.addr),
        "nothing sent there"
    );
}

#[test]
fn notification_message_ids_cannot_be_guessed_from_another_observers() {
    let mut s = Server::new(|_| {});
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    let mut a = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5000)), &[1]);
    let mut b = Follower::new(SocketAddr::from(([127, 0, 0, 10], 5000)), &[2]);
    a.register(&mut s, &topic);
    b.register(&mut s, &topic);
    let mut mids = vec![];
    for i in 0..3 {
        let out = publish(&mut s, &mut dev, f64::from(i));
        s.deliver(a.take(&out, true));
        s.deliver(b.take(&out, true));
        let ma = Message::parse(a.got.last().unwrap()).unwrap().message_id;
        let mb = Message::parse(b.got.last().unwrap()).unwrap().message_id;
        mids.push((ma, mb));
    }
    // Each observer's own IDs go up by one (none repeats within 65,536), from starts that
    // are far apart: A's IDs say nothing about B's.
    assert!(mids
        .windows(2)
        .all(|w| w[1].0 == w[0].0.wrapping_add(1) && w[1].1 == w[0].1.wrapping_add(1)));
    let gap = mids[0]
        .0
        .wrapping_sub(mids[0].1)
        .min(mids[0].1.wrapping_sub(mids[0].0));
    assert!(gap > 64, "{mids:?}");
    // A spraying Resets at B's address with IDs near its own does not end B's observation.
    for d in 0..32u16 {
        let reset = sigil_coap::message::empty(
            MessageType::Reset,
            mids[2].0.wrapping_add(d).wrapping_sub(16),
        );
        s.deliver(vec![(b.addr, reset.to_vec())]);
    }
    assert_eq!(s.gauge("observe.observers"), 2);
    assert_eq!(s.stats.get("observe.cancelled.reset"), 0);
}

#[test]
fn registrations_that_cannot_push_anyone_out_do_not_spend_the_give_way_rate() {
    let mut s = Server::new(|c| {
        c.observe.max_observers = 128;
        c.observe.give_way_per_sec = 4;
    });
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    for h in 0..2u8 {
        for i in 0..64u16 {
            let mut f = Follower::new(
                SocketAddr::from(([127, 0, 1, h], 10_000 + i)),
                &[h, i as u8],
            );
            f.register(&mut s, &topic);
        }
    }
    // A full host keeps registering: refused at its own cap, nothing given way, no rate spent.
    for i in 0..20u16 {
        let mut f = Follower::new(
            SocketAddr::from(([127, 0, 1, 0], 20_000 + i)),
            &[9, i as u8],
        );
        let m = f.register(&mut s, &topic);
        assert!(Message::parse(&m).unwrap().observe().is_none());
    }
    assert_eq!(s.stats.get("observe.gave_way"), 0);
    assert_eq!(s.stats.get("observe.give_way_rate_limited"), 0);
    // A newcomer still gets in, the same second.
    let mut late = Follower::new(SocketAddr::from(([127, 0, 2, 1], 5000)), &[9]);
    let m = late.register(&mut s, &topic);
    assert!(Message::parse(&m).unwrap().observe().is_some());
    let out = publish(&mut s, &mut dev, 1.0);
    late.take(&out, true);
    assert_eq!(late.got.len(), 1);
}

#[test]
fn a_reader_of_a_few_topics_is_not_pushed_out_by_many_addresses_holding_one_each() {
    // The table holds 8: a reader with 3 observations, 5 addresses with 1 each. A newcomer
    // finds no host above the floor of 4 to give way: refused, and the reader keeps all 3.
    let mut s = Server::new(|c| c.observe.max_observers = 8);
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    let mut reader = vec![];
    for t in 0..3u8 {
        let mut f = Follower::new(
            SocketAddr::from(([127, 0, 3, 1], 6000 + u16::from(t))),
            &[t],
        );
        f.register(&mut s, &topic);
        reader.push(f);
    }
    for h in 0..5u8 {
        let mut f = Follower::new(SocketAddr::from(([127, 0, 4, h], 7000)), &[h]);
        f.register(&mut s, &topic);
    }
    assert_eq!(s.gauge("observe.observers"), 8);
    let mut newcomer = Follower::new(SocketAddr::from(([127, 0, 5, 1], 8000)), &[1]);
    let m = newcomer.register(&mut s, &topic);
    assert!(Message::parse(&m).unwrap().observe().is_none());
    assert_eq!(s.stats.get("observe.gave_way"), 0);
    let out = publish(&mut s, &mut dev, 1.0);
    for f in reader.iter_mut() {
        f.take(&out, true);
        assert_eq!(f.got.len(), 1, "the reader keeps its observations");
    }
}

#[test]
fn a_registration_in_the_batch_that_stores_a_reading_does_not_hide_it_from_the_others() {
    use sigil_objects::senml::{Record, Value};
    let mut s = Server::new(|_| {});
    let mut dev = registered(&mut s, 1);
    let topic = dev.topic();
    let mut a = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5000)), &[1]);
    a.register(&mut s, &topic);
    // B's first GET gets its Echo value.
    let b = SocketAddr::from(([127, 0, 0, 10], 5000));
    let first = s.one(b, observe_get(1, &[2], &topic, 0, None));
    let echo = Message::parse(&first[0])
        .unwrap()
        .option(option::ECHO)
        .unwrap()
        .to_vec();
    // One batch: the sensor's reading, then B's registration.
    let r = [Record {
        name: Some("t"),
        value: Some(Value::Number(1.0)),
        ..Default::default()
    }];
    dev.device
        .publish(Instant::from_millis(s.now), &mut dev.storage, &r, None)
        .unwrap();
    let mut buf = [0u8; 2048];
    let n = dev.device.poll_transmit(&mut buf).unwrap();
    let out = s.deliver(vec![
        (dev.addr, buf[..n].to_vec()),
        (b, observe_get(2, &[2], &topic, 0, Some(&echo))),
    ]);
    let answer = out.iter().find(|(to, _)| *to == b).unwrap();
    assert!(
        !Message::parse(&answer.1).unwrap().payload.is_empty(),
        "B's answer carries it"
    );
    a.take(&out, true);
    assert_eq!(a.got.len(), 1, "A is notified of the same reading");
}

#[test]
fn a_re_registration_over_the_hosts_bytes_ends_it_and_gives_its_bytes_back_once() {
    let mut s = Server::new(|c| c.observe.caps.per_host = 400);
    let _dev = registered(&mut s, 1);
    let topic = _dev.topic();
    let mut keep = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5000)), &[1]);
    let mut grow = Follower::new(SocketAddr::from(([127, 0, 0, 9], 5001)), &[2]);
    keep.register(&mut s, &topic);
    grow.register(&mut s, &topic);
    let two = s.gauge("mem.observe.bytes");
    assert!(two > 0 && two <= 400);
    // The same endpoint and token again, with a request too long for the host's share.
    let long = format!("{topic}?x={}", "a".repeat(300));
    let (p, q) = long.split_once('?').unwrap();
    let mut buf = [0u8; 512];
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, 900, &[2]).unwrap();
    b.uint_option(option::OBSERVE, 0).unwrap();
    b.uri_path(p).unwrap();
    b.option(option::URI_QUERY, q.as_bytes()).unwrap();
    let n = b.finish();
    let first = s.one(grow.addr, buf[..n].to_vec());
    let echo = Message::parse(&first[0])
        .unwrap()
        .option(option::ECHO)
        .unwrap()
        .to_vec();
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, 901, &[2]).unwrap();
    b.uint_option(option::OBSERVE, 0).unwrap();
    b.uri_path(p).unwrap();
    b.option(option::URI_QUERY, q.as_bytes()).unwrap();
    b.option(option::ECHO, &echo).unwrap();
    let n = b.finish();
    s.one(grow.addr, buf[..n].to_vec());
    assert_eq!(s.stats.get("observe.refused.host_bytes"), 1);
    assert_eq!(
        s.gauge("observe.observers"),
        1,
        "the other observation stays"
    );
    assert_eq!(
        s.gauge("mem.observe.bytes"),
        two / 2,
        "what the other holds, once"
    );
}
