//! A signing sensor (the real `sigil-device` state machine) run against the in-memory coap://
//! server: registered, publishing, and only ever handed what the server sent to its address.

use super::{Plain, Secure, NOW};
use crate::Seeded;
use sigil_crypto::{PublicKey, RustCrypto};
use sigil_device::{Device, DeviceConfig, Event, MemoryStorage, PublishOutcome};
use sigil_objects::senml::{Record, Value};
use sigil_server::store::IdentityKind;
use sigil_server::{Dispatcher, Endpoint, Inbound, PeerAuth};
use sigil_time::{Instant, UnixTime};
use std::net::SocketAddr;
use std::path::Path;

/// A server a sensor talks coap:// to, on a virtual clock.
pub trait Server {
    /// The virtual clock (milliseconds).
    fn now(&mut self) -> &mut u64;
    /// One batch of plain datagrams at the current time; what the server sends to coap://
    /// addresses meanwhile.
    fn deliver(&mut self, batch: Vec<(SocketAddr, Vec<u8>)>) -> Vec<(SocketAddr, Vec<u8>)>;
    fn provision(&self, id: &sigil_identity::Identity, kind: IdentityKind);
    fn dispatcher(&mut self) -> &mut Dispatcher;

    /// One batch at the current time as the DTLS layer hands it up: each datagram from a
    /// session authenticated as `auth` (no handshake: the tests of what the dispatcher does
    /// with a session's requests); the answers to those sessions.
    fn deliver_in_session(
        &mut self,
        auth: &PeerAuth,
        batch: Vec<(SocketAddr, Vec<u8>)>,
    ) -> Vec<(SocketAddr, Vec<u8>)> {
        let now = *self.now();
        let batch = batch
            .into_iter()
            .map(|(addr, bytes)| Inbound {
                from: Endpoint::dtls(addr),
                to: None,
                auth: Some(auth.clone()),
                bytes,
            })
            .collect();
        self.dispatcher()
            .handle_inbound_at(batch, super::ms(now), super::wall(now))
            .into_iter()
            .map(|(e, b)| (e.addr, b))
            .collect()
    }
}

impl Server for Plain {
    fn now(&mut self) -> &mut u64 {
        &mut self.now
    }
    fn deliver(&mut self, batch: Vec<(SocketAddr, Vec<u8>)>) -> Vec<(SocketAddr, Vec<u8>)> {
        Plain::deliver(self, batch)
    }
    fn provision(&self, id: &sigil_identity::Identity, kind: IdentityKind) {
        Plain::provision(self, id, kind)
    }
    fn dispatcher(&mut self) -> &mut Dispatcher {
        &mut self.d
    }
}

/// The coap:// side of the server that also has the DTLS layer.
impl Server for Secure {
    fn now(&mut self) -> &mut u64 {
        &mut self.now
    }
    fn deliver(&mut self, batch: Vec<(SocketAddr, Vec<u8>)>) -> Vec<(SocketAddr, Vec<u8>)> {
        let now = self.now;
        self.d.handle_at(batch, super::ms(now), super::wall(now))
    }
    fn provision(&self, id: &sigil_identity::Identity, kind: IdentityKind) {
        sigil_server::Store::open(&self.db)
            .unwrap()
            .add_identity(id, kind, "", NOW)
            .unwrap();
    }
    fn dispatcher(&mut self) -> &mut Dispatcher {
        &mut self.d
    }
}

/// A dispatcher the test keeps itself, with the test's clock and database, as a [`Server`]
/// (for tests that restart the dispatcher over the same database and clock).
pub struct Link<'a> {
    pub d: &'a mut Dispatcher,
    pub now: &'a mut u64,
    pub db: &'a Path,
}

impl Server for Link<'_> {
    fn now(&mut self) -> &mut u64 {
        self.now
    }
    fn deliver(&mut self, batch: Vec<(SocketAddr, Vec<u8>)>) -> Vec<(SocketAddr, Vec<u8>)> {
        let now = *self.now;
        self.d.handle_at(batch, super::ms(now), super::wall(now))
    }
    fn provision(&self, id: &sigil_identity::Identity, kind: IdentityKind) {
        sigil_server::Store::open(self.db)
            .unwrap()
            .add_identity(id, kind, "", NOW)
            .unwrap();
    }
    fn dispatcher(&mut self) -> &mut Dispatcher {
        self.d
    }
}

/// A sensor run against the server until nothing more happens.
pub struct Sensor {
    pub device: Device<RustCrypto>,
    pub storage: MemoryStorage,
    pub addr: SocketAddr,
    pub events: Vec<Event>,
    pub sent: Vec<Vec<u8>>,
    /// The unit of its readings (none by default).
    pub unit: Option<&'static str>,
    /// The time its readings carry (the wall clock's origin by default).
    pub time: Option<UnixTime>,
    /// When set, each datagram goes to the server alone and every (request, answer) pair is
    /// kept here, in order.
    pub exchanges: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    /// When set, its datagrams reach the dispatcher as from a DTLS session authenticated as
    /// this ([`Server::deliver_in_session`]); plain coap:// otherwise.
    pub session: Option<PeerAuth>,
}

impl Sensor {
    pub fn new(seed: u64, addr: SocketAddr, config: DeviceConfig, kit: &[PublicKey]) -> Self {
        let mut storage = MemoryStorage::default();
        let device = Device::boot(
            RustCrypto,
            config,
            &mut storage,
            &mut Seeded(seed),
            kit,
            &[],
        )
        .unwrap();
        Self {
            device,
            storage,
            addr,
            events: vec![],
            sent: vec![],
            unit: None,
            time: Some(UnixTime::from_secs(NOW)),
            exchanges: None,
            session: None,
        }
    }

    pub fn step(&mut self, s: &mut impl Server, for_ms: u64) {
        self.step_collecting(s, for_ms, &mut Vec::new());
    }

    /// [`Sensor::step`], keeping in `all` every datagram the server sent meanwhile (to this
    /// sensor and to anyone else, e.g. the notifications of its readings).
    pub fn step_collecting(
        &mut self,
        s: &mut impl Server,
        for_ms: u64,
        all: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        self.drive(s, for_ms, all, &mut |_| {});
    }

    /// [`Sensor::step`], calling `after` with the server each time the device's datagrams
    /// were answered (a test acting between them, e.g. other hosts' traffic).
    pub fn step_between<S: Server>(
        &mut self,
        s: &mut S,
        for_ms: u64,
        mut after: impl FnMut(&mut S),
    ) {
        self.drive(s, for_ms, &mut Vec::new(), &mut after);
    }

    fn drive<S: Server>(
        &mut self,
        s: &mut S,
        for_ms: u64,
        all: &mut Vec<(SocketAddr, Vec<u8>)>,
        after: &mut dyn FnMut(&mut S),
    ) {
        let until = *s.now() + for_ms;
        loop {
            let now = Instant::from_millis(*s.now());
            self.device.handle_timeout(now, &mut self.storage).unwrap();
            let mut out = Vec::new();
            let mut buf = [0u8; 2048];
            while let Some(n) = self.device.poll_transmit(&mut buf) {
                self.sent.push(buf[..n].to_vec());
                out.push((self.addr, buf[..n].to_vec()));
            }
            while let Some(e) = self.device.poll_event() {
                self.events.push(e);
            }
            if !out.is_empty() {
                let session = self.session.clone();
                let mut send = |batch| match &session {
                    None => s.deliver(batch),
                    Some(auth) => s.deliver_in_session(auth, batch),
                };
                let sent = match &mut self.exchanges {
                    None => send(out),
                    Some(pairs) => {
                        let mut sent = vec![];
                        for (from, request) in out {
                            let answers = send(vec![(from, request.clone())]);
                            pairs.extend(
                                answers
                                    .iter()
                                    .filter(|(to, _)| *to == self.addr)
                                    .map(|(_, a)| (request.clone(), a.clone())),
                            );
                            sent.extend(answers);
                        }
                        sent
                    }
                };
                all.extend(sent.iter().cloned());
                for (_, reply) in sent.into_iter().filter(|(to, _)| *to == self.addr) {
                    self.device
                        .handle_datagram(now, &mut self.storage, &reply)
                        .unwrap();
                }
                after(s);
                continue;
            }
            match self.device.poll_timeout() {
                Some(t) if t.as_millis() <= until => *s.now() = (*s.now()).max(t.as_millis()),
                _ => {
                    *s.now() = until;
                    return;
                }
            }
        }
    }

    /// Publishes `v` and runs for 1 ms: the reading's number.
    pub fn publish(&mut self, s: &mut impl Server, v: f64) -> u64 {
        self.publish_collecting(s, v, &mut Vec::new())
    }

    /// [`Sensor::publish`], keeping in `all` every datagram the server sent meanwhile.
    pub fn publish_collecting(
        &mut self,
        s: &mut impl Server,
        v: f64,
        all: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) -> u64 {
        let r = [Record {
            name: Some("t"),
            unit: self.unit,
            value: Some(Value::Number(v)),
            ..Default::default()
        }];
        let seq = self
            .device
            .publish(
                Instant::from_millis(*s.now()),
                &mut self.storage,
                &r,
                self.time,
            )
            .unwrap();
        self.step_collecting(s, 1, all);
        seq
    }

    /// The numbers of its readings the server acknowledged, in order.
    pub fn acked(&self) -> Vec<u64> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Published {
                    seq,
                    outcome: PublishOutcome::Acknowledged,
                } => Some(*seq),
                _ => None,
            })
            .collect()
    }

    /// What became of reading `seq` (the last outcome the device reported for it).
    pub fn outcome(&self, seq: u64) -> Option<PublishOutcome> {
        self.events.iter().rev().find_map(|e| match e {
            Event::Published { seq: s, outcome } if *s == seq => Some(*outcome),
            _ => None,
        })
    }

    pub fn topic(&self) -> String {
        let n = self.device.location().unwrap().rsplit('/').next().unwrap();
        format!("ps/{n}/m")
    }
}

/// A registered sensor with `readings` stored readings (its history answer is > 1 KiB from
/// about a dozen).
pub fn sensor_with_history(s: &mut impl Server, readings: u32) -> Sensor {
    let mut dev = registered(s, 1);
    for i in 0..readings {
        dev.publish(s, f64::from(i));
    }
    dev
}

/// A sensor registered with a day's lifetime.
pub fn registered(s: &mut impl Server, seed: u16) -> Sensor {
    let config = DeviceConfig {
        lifetime: std::time::Duration::from_secs(24 * 3600),
        ..Default::default()
    };
    let mut dev = Sensor::new(
        u64::from(seed),
        SocketAddr::from(([127, 0, 0, 1], 40000 + seed)),
        config,
        &[],
    );
    s.provision(dev.device.identity(), IdentityKind::Device);
    dev.step(s, 10);
    assert!(dev.device.is_registered(), "{:?}", dev.events);
    dev
}
