//! The CoAP rules of RFC 7252 (and RFC 9176 §6) the server keeps, in memory against its own
//! message layer and handlers: conditional requests, Accept, proxy options, malformed query
//! values, expired registrations, resolved lookup targets. The same rules are checked from
//! outside with aiocoap and libcoap in tests/interop/test_coap_rules.py.

use sigil_coap::{option, Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{Rng, RustCrypto};
use sigil_device::{Device, DeviceConfig, MemoryStorage};
use sigil_objects::senml::{Record, Value};
use sigil_server::store::IdentityKind;
use sigil_server::{Endpoint, Inbound, Stats, Store};
use sigil_testkit::Seeded;
use sigil_time::{Instant, UnixTime};
use std::net::SocketAddr;

use common::Plain;
use sigil_testkit::server as common;

const DEVICE: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 40100);
const CLIENT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 40200);

/// A server with one registered device, and a clock both share.
struct Bench {
    srv: Plain,
    stats: Stats,
    device: Device<RustCrypto>,
    storage: MemoryStorage,
    _dir: tempfile::TempDir,
    mid: u16,
}

/// A received answer, parsed on demand.
struct Answer(Vec<u8>);

impl Answer {
    fn msg(&self) -> Message<'_> {
        Message::parse(&self.0).expect("the server sends well-formed CoAP")
    }
    fn code(&self) -> Code {
        self.msg().code
    }
    fn payload(&self) -> String {
        String::from_utf8_lossy(self.msg().payload).into_owned()
    }
}

/// Rebuilds `msg` with `extra` options added (kept in option-number order).
fn with_options(msg: &Message<'_>, extra: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut opts: Vec<(u16, Vec<u8>)> = msg
        .options()
        .map(|o| (o.number, o.value.to_vec()))
        .collect();
    opts.extend(extra.iter().cloned());
    opts.sort_by_key(|o| o.0);
    let mut buf = vec![0u8; 2048];
    let mut b =
        MessageBuilder::new(&mut buf, msg.mtype, msg.code, msg.message_id, msg.token).unwrap();
    for (n, v) in &opts {
        b.option(*n, v).unwrap();
    }
    let n = b.finish_with_payload(msg.payload).unwrap();
    buf.truncate(n);
    buf
}

impl Bench {
    fn new(lifetime_s: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let srv = Plain::at(&db, 7, |_| {});
        let mut storage = MemoryStorage::default();
        let device = Device::boot(
            RustCrypto,
            DeviceConfig {
                lifetime: std::time::Duration::from_secs(lifetime_s),
                ..Default::default()
            },
            &mut storage,
            &mut Seeded(7),
            &[],
            &[],
        )
        .unwrap();
        srv.provision(device.identity(), IdentityKind::Device);
        Self {
            stats: srv.stats.clone(),
            srv,
            device,
            storage,
            _dir: dir,
            mid: 1,
        }
    }

    fn wall(&self) -> UnixTime {
        common::wall(self.srv.now)
    }

    fn deliver(&mut self, from: SocketAddr, datagram: Vec<u8>) -> Vec<Answer> {
        self.srv
            .one(from, datagram)
            .into_iter()
            .map(Answer)
            .collect()
    }

    /// The device's next datagram, without sending it.
    fn device_datagram(&mut self) -> Vec<u8> {
        self.device
            .handle_timeout(Instant::from_millis(self.srv.now), &mut self.storage)
            .unwrap();
        let mut buf = [0u8; 2048];
        let n = self
            .device
            .poll_transmit(&mut buf)
            .expect("the device has something to send");
        buf[..n].to_vec()
    }

    /// Sends `datagram` as the device and hands the answer back to it.
    fn as_device(&mut self, datagram: Vec<u8>) -> Answer {
        let mut answers = self.deliver(DEVICE, datagram);
        assert_eq!(answers.len(), 1);
        let a = answers.remove(0);
        self.device
            .handle_datagram(Instant::from_millis(self.srv.now), &mut self.storage, &a.0)
            .unwrap();
        a
    }

    fn register(&mut self) {
        let reg = self.device_datagram();
        assert_eq!(self.as_device(reg).code(), Code::CREATED);
        assert!(self.device.is_registered());
    }

    fn topic(&self) -> String {
        let n = self
            .device
            .location()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_string();
        format!("ps/{n}/m")
    }

    /// A fresh signed reading from the device, sent with `extra` options.
    fn publish(&mut self, v: f64, extra: &[(u16, Vec<u8>)]) -> Answer {
        let r = [Record {
            name: Some("t"),
            value: Some(Value::Number(v)),
            ..Default::default()
        }];
        self.device
            .publish(
                Instant::from_millis(self.srv.now),
                &mut self.storage,
                &r,
                None,
            )
            .unwrap();
        let put = self.device_datagram();
        let put = with_options(&Message::parse(&put).unwrap(), extra);
        self.as_device(put)
    }

    /// A Confirmable request from another client.
    fn build(&mut self, code: Code, path: &str, opts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        self.mid += 1;
        let mut buf = [0u8; 512];
        let b =
            MessageBuilder::new(&mut buf, MessageType::Confirmable, code, self.mid, &[1]).unwrap();
        let n = b.finish();
        let base = Message::parse(&buf[..n]).unwrap();
        let (p, q) = path.split_once('?').unwrap_or((path, ""));
        let mut all: Vec<(u16, Vec<u8>)> = opts.to_vec();
        all.extend(
            p.split('/')
                .map(|s| (option::URI_PATH, s.as_bytes().to_vec())),
        );
        all.extend(
            q.split('&')
                .filter(|s| !s.is_empty())
                .map(|s| (option::URI_QUERY, s.as_bytes().to_vec())),
        );
        with_options(&base, &all)
    }

    /// A request from another client, and its answer. Like a client of RFC 9175 §2.4, it
    /// repeats a request answered with 4.01 and an Echo option, with that Echo.
    fn request(&mut self, code: Code, path: &str, opts: &[(u16, Vec<u8>)]) -> Answer {
        let m = self.build(code, path, opts);
        let mut answers = self.deliver(CLIENT, m);
        assert_eq!(answers.len(), 1);
        let a = answers.remove(0);
        let echo = match a.msg().option(option::ECHO) {
            Some(e) if a.code() == Code::UNAUTHORIZED => e.to_vec(),
            _ => return a,
        };
        let mut opts = opts.to_vec();
        opts.push((option::ECHO, echo));
        let m = self.build(code, path, &opts);
        let mut answers = self.deliver(CLIENT, m);
        assert_eq!(answers.len(), 1);
        answers.remove(0)
    }

    fn readings(&self) -> u64 {
        Store::open(&self.srv.db).unwrap().reading_count().unwrap()
    }
}

fn uint(v: u32) -> Vec<u8> {
    v.to_be_bytes()
        .iter()
        .copied()
        .skip_while(|b| *b == 0)
        .collect()
}

#[test]
fn if_none_match_on_a_topic_that_holds_a_reading_is_not_performed() {
    let mut b = Bench::new(3600);
    b.register();
    let inm = [(option::IF_NONE_MATCH, vec![])];
    assert_eq!(b.publish(1.0, &inm).code(), Code::CHANGED);
    let refused = b.publish(2.0, &inm);
    assert_eq!(refused.code(), Code::PRECONDITION_FAILED);
    assert_eq!(b.readings(), 1);
    assert_eq!(b.stats.get("request.precondition_failed"), 1);
}

#[test]
fn if_match_compares_the_topics_etag() {
    let mut b = Bench::new(3600);
    b.register();
    let exists = [(option::IF_MATCH, vec![])];
    // No reading yet: the topic has no current representation.
    assert_eq!(b.publish(1.0, &exists).code(), Code::PRECONDITION_FAILED);
    assert_eq!(b.publish(1.0, &[]).code(), Code::CHANGED);
    assert_eq!(b.publish(2.0, &exists).code(), Code::CHANGED);
    let topic = b.topic();
    let latest = b.request(Code::GET, &topic, &[]);
    let etag = latest.msg().option(option::ETAG).unwrap().to_vec();
    assert_eq!(
        b.publish(3.0, &[(option::IF_MATCH, vec![0, 1])]).code(),
        Code::PRECONDITION_FAILED
    );
    assert_eq!(
        b.publish(
            3.0,
            &[(option::IF_MATCH, vec![9]), (option::IF_MATCH, etag)]
        )
        .code(),
        Code::CHANGED
    );
    assert_eq!(b.readings(), 3);
    // A GET is conditional too: If-None-Match on a topic with a reading.
    let got = b.request(Code::GET, &topic, &[(option::IF_NONE_MATCH, vec![])]);
    assert_eq!(got.code(), Code::PRECONDITION_FAILED);
}

#[test]
fn accept_is_honoured_on_every_representation() {
    let mut b = Bench::new(3600);
    b.register();
    b.publish(1.0, &[]);
    let topic = b.topic();
    let json = [(option::ACCEPT, uint(50))];
    let links = [(option::ACCEPT, uint(40))];
    for path in [".well-known/core", "rd-lookup/ep", "rd-lookup/res", "ps"] {
        assert_eq!(
            b.request(Code::GET, path, &json).code(),
            Code::NOT_ACCEPTABLE,
            "{path}"
        );
        let ok = b.request(Code::GET, path, &links);
        assert_eq!(ok.code(), Code::CONTENT, "{path}");
        assert_eq!(ok.msg().content_format().map(|c| c.0), Some(40));
    }
    assert_eq!(
        b.request(Code::GET, &topic, &json).code(),
        Code::NOT_ACCEPTABLE
    );
    assert_eq!(
        b.request(Code::GET, &format!("{topic}?n=2"), &json).code(),
        Code::NOT_ACCEPTABLE
    );
    assert_eq!(
        b.request(
            Code::GET,
            &format!("{topic}?n=2"),
            &[(option::ACCEPT, uint(60))]
        )
        .code(),
        Code::CONTENT
    );
    assert!(b.stats.get("request.not_acceptable") >= 6);
}

#[test]
fn proxy_options_get_proxying_not_supported() {
    let mut b = Bench::new(3600);
    for opt in [
        (option::PROXY_URI, b"coap://192.0.2.1/x".to_vec()),
        (option::PROXY_SCHEME, b"http".to_vec()),
    ] {
        let a = b.request(Code::GET, ".well-known/core", &[opt]);
        assert_eq!(a.code(), Code::new(5, 5));
    }
}

#[test]
fn malformed_lifetimes_are_refused_and_nothing_is_registered() {
    let mut b = Bench::new(3600);
    let reg = b.device_datagram();
    let m = Message::parse(&reg).unwrap();
    for (i, lt) in ["0", "-5", "abc", "4294967296", ""].into_iter().enumerate() {
        // The device's own registration with its lt replaced.
        let opts: Vec<(u16, Vec<u8>)> = m
            .options()
            .filter(|o| o.number != option::URI_QUERY || !o.value.starts_with(b"lt="))
            .map(|o| (o.number, o.value.to_vec()))
            .chain([(option::URI_QUERY, format!("lt={lt}").into_bytes())])
            .collect();
        let mut buf = vec![0u8; 2048];
        // A message ID of its own each time, so deduplication does not answer for it.
        let mut bl = MessageBuilder::new(&mut buf, m.mtype, m.code, 900 + i as u16, &[2]).unwrap();
        let mut sorted = opts.clone();
        sorted.sort_by_key(|o| o.0);
        for (n, v) in &sorted {
            bl.option(*n, v).unwrap();
        }
        let n = bl.finish_with_payload(m.payload).unwrap();
        let a = b.deliver(DEVICE, buf[..n].to_vec()).remove(0);
        assert_eq!(a.code(), Code::BAD_REQUEST, "lt={lt}");
        assert_eq!(a.payload(), "lt must be an integer from 1 to 4294967295");
        let lookup = b.request(Code::GET, "rd-lookup/ep", &[]);
        assert_eq!(lookup.payload(), "", "lt={lt} registered something");
    }
    assert_eq!(b.stats.get("request.rejected.bad_query"), 5);
    // The unmodified registration goes through.
    assert_eq!(b.as_device(reg).code(), Code::CREATED);
}

#[test]
fn malformed_history_queries_are_refused_and_the_limit_is_documented() {
    let mut b = Bench::new(3600);
    b.register();
    b.publish(1.0, &[]);
    let topic = b.topic();
    // Diagnostics longer than three times the request go only to an address verified by
    // Echo (RFC 9175 §2.4); a first large answer verifies this client.
    b.request(Code::GET, ".well-known/core", &[]);
    for q in ["n=-1", "n=abc", "n=0", "n=101", "after=x", "after=-3"] {
        let a = b.request(Code::GET, &format!("{topic}?{q}"), &[]);
        assert_eq!(a.code(), Code::BAD_REQUEST, "{q}");
        let name = q.split('=').next().unwrap();
        assert!(
            a.payload()
                .starts_with(&format!("{name} must be an integer from")),
            "{q}: {}",
            a.payload()
        );
    }
    assert!(b
        .request(Code::GET, &format!("{topic}?n=101"), &[])
        .payload()
        .ends_with("from 1 to 100"));
    assert_eq!(
        b.request(Code::GET, &format!("{topic}?n=100"), &[]).code(),
        Code::CONTENT
    );
    for q in ["count=x", "count=0", "page=-1"] {
        assert_eq!(
            b.request(Code::GET, &format!("rd-lookup/res?{q}"), &[])
                .code(),
            Code::BAD_REQUEST,
            "{q}"
        );
    }
}

#[test]
fn an_expired_registrations_readings_stay_readable() {
    let mut b = Bench::new(60);
    b.register();
    assert_eq!(b.publish(1.0, &[]).code(), Code::CHANGED);
    let topic = b.topic();
    b.srv.now += 120_000;
    let latest = b.request(Code::GET, &topic, &[]);
    assert_eq!(latest.code(), Code::CONTENT);
    assert_eq!(latest.msg().content_format().map(|c| c.0), Some(18));
    let history = b.request(Code::GET, &format!("{topic}?n=5"), &[]);
    assert_eq!(history.code(), Code::CONTENT);
    // Publication needs a live registration; discovery lists live registrations only.
    assert_eq!(b.publish(2.0, &[]).code(), Code::NOT_FOUND);
    assert_eq!(b.request(Code::GET, "ps", &[]).payload(), "");
    assert_eq!(b.request(Code::GET, "rd-lookup/res", &[]).payload(), "");
    assert_eq!(b.readings(), 1);
}

#[test]
fn lookup_targets_are_resolved_against_where_the_request_went() {
    let mut b = Bench::new(3600);
    b.register();
    let topic = b.topic();
    let n = topic.split('/').nth(1).unwrap().to_string();
    let res = b.request(Code::GET, "rd-lookup/res", &[]).payload();
    assert!(
        res.starts_with(&format!("<coap://127.0.0.1:5683/{topic}>;")),
        "{res}"
    );
    let ep = b.request(Code::GET, "rd-lookup/ep", &[]).payload();
    assert!(
        ep.starts_with(&format!("<coap://127.0.0.1:5683/rd/{n}>;")),
        "{ep}"
    );
    let named = b.request(
        Code::GET,
        "rd-lookup/res",
        &[
            (option::URI_HOST, b"sensors.example".to_vec()),
            (option::URI_PORT, uint(7000)),
        ],
    );
    assert!(
        named
            .payload()
            .starts_with(&format!("<coap://sensors.example:7000/{topic}>;")),
        "{}",
        named.payload()
    );
    let v6 = b.request(
        Code::GET,
        "rd-lookup/res",
        &[(option::URI_HOST, b"::1".to_vec())],
    );
    assert!(
        v6.payload()
            .starts_with(&format!("<coap://[::1]:5683/{topic}>;")),
        "{}",
        v6.payload()
    );
    // A Uri-Host that is no host name cannot reach the link format.
    let odd = b.request(
        Code::GET,
        "rd-lookup/res",
        &[(option::URI_HOST, b"a>;x=\"1".to_vec())],
    );
    assert!(
        odd.payload()
            .starts_with(&format!("<coap://127.0.0.1:5683/{topic}>;")),
        "{}",
        odd.payload()
    );
    // Without Uri-Host, the destination address the socket reported (a wildcard listener).
    let m = b.build(Code::GET, "rd-lookup/res", &[]);
    let inbound = Inbound {
        from: Endpoint::plain(CLIENT),
        to: Some("192.0.2.7".parse().unwrap()),
        auth: None,
        bytes: m,
    };
    let out = b
        .srv
        .d
        .handle_inbound_at(vec![inbound], Instant::from_millis(b.srv.now), b.wall());
    let text = String::from_utf8_lossy(Message::parse(&out[0].1).unwrap().payload).into_owned();
    assert!(
        text.starts_with(&format!("<coap://192.0.2.7:5683/{topic}>;")),
        "{text}"
    );
}

/// Requests with the options these rules read (If-Match, If-None-Match, Accept, Uri-Host,
/// Uri-Port, Proxy-*, queries), with bytes changed at random: every answer is well-formed
/// CoAP and nothing panics.
#[test]
fn mutated_requests_get_well_formed_answers() {
    let mut b = Bench::new(3600);
    b.register();
    b.publish(1.0, &[]);
    let topic = b.topic();
    let seeds: Vec<Vec<u8>> = vec![
        b.build(
            Code::GET,
            &format!("{topic}?n=5&after=0"),
            &[(option::IF_MATCH, vec![0; 8])],
        ),
        b.build(Code::PUT, &topic, &[(option::IF_NONE_MATCH, vec![])]),
        b.build(
            Code::GET,
            "rd-lookup/res?page=0&count=1",
            &[
                (option::URI_HOST, b"h.example".to_vec()),
                (option::URI_PORT, uint(1)),
                (option::ACCEPT, uint(40)),
            ],
        ),
        b.build(
            Code::GET,
            ".well-known/core",
            &[(option::PROXY_SCHEME, b"coap".to_vec())],
        ),
        b.build(Code::POST, "rd?ep=00&lt=1", &[]),
    ];
    let mut rng = Seeded(42);
    for i in 0..4000u32 {
        let mut m = seeds[i as usize % seeds.len()].clone();
        let mut r = [0u8; 4];
        rng.fill(&mut r).unwrap();
        for k in 0..(1 + r[0] % 4) {
            let pos = 4 + (usize::from(r[1]) + 31 * usize::from(k)) % (m.len().max(5) - 4);
            if pos < m.len() {
                m[pos] = m[pos].wrapping_add(r[2] | 1).rotate_left(u32::from(k));
            }
        }
        if r[3] % 7 == 0 {
            m.truncate(m.len() - usize::from(r[3]) % m.len().min(6));
        }
        // A fresh message ID each time, so every datagram reaches the handlers.
        m[2..4].copy_from_slice(&(i as u16).to_be_bytes());
        b.srv.now += 1;
        for a in b.deliver(CLIENT, m) {
            Message::parse(&a.0).expect("answers are well-formed CoAP");
        }
    }
    // Most of them still parse and reach the handlers.
    let malformed = b.stats.get("coap.malformed");
    assert!(malformed < 2000, "{:?}", b.stats.snapshot());
}
