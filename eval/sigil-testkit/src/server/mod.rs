//! The in-memory harnesses the server's integration tests share: the real dispatcher and
//! service over one database (with the DTLS layer for coaps://) on a virtual clock, DTLS
//! clients at addresses of their own, and the CoAP requests they send. Each test binary uses
//! a part of it.

pub mod sensor;

use crate::Seeded;
use sigil_coap::{Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SignatureAlgorithm};
use sigil_device::{Device, DeviceConfig, Event, MemoryStorage};
use sigil_dtls::{Config, Connection, Credentials, Traffic, Trust};
use sigil_dtls_coap::{CarrierConfig, Client as CoapClient};
use sigil_identity::Identity;
use sigil_server::secure::{DtlsConfig, SecureLayer, SharedTrust};
use sigil_server::service::ServiceConfig;
use sigil_server::store::IdentityKind;
use sigil_server::{Dispatcher, ServerConfig, Stats, Store};
use sigil_time::UnixTime;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The wall clock at the virtual clock's origin (seconds since 1970).
pub const NOW: i64 = 1_700_000_000;

/// The tests' virtual clock (milliseconds) as the DTLS layer takes it.
pub use crate::dtls::at as ms;

/// The wall clock `t` milliseconds after the virtual clock's origin.
pub fn wall(t: u64) -> UnixTime {
    UnixTime::from_secs(NOW + (t / 1000) as i64)
}

/// Port `n`'s address: 10.0.x.y, a host of its own for each `n`.
pub fn addr(n: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, (n >> 8) as u8, n as u8], 40000 + n))
}

/// Trusts the server's key whatever it is (these tests are about the server's side).
pub struct AnyServer;
impl Trust for AnyServer {
    fn trusted_key(&self, _: &PublicKey) -> bool {
        true
    }
}

/// The identity of the Ed25519 key drawn from `seed`.
pub fn ed25519_identity(seed: u64) -> Identity {
    let sk = RustCrypto
        .generate(SignatureAlgorithm::Ed25519, &mut Seeded(seed))
        .unwrap();
    Identity::of_key(&RustCrypto, &RustCrypto.public_key(&sk).unwrap(), b"").unwrap()
}

/// Adds `id` as a device to the database at `db`, with its PSK if given.
pub fn provision(db: &Path, id: &Identity, psk: Option<&[u8]>) {
    let s = Store::open(db).unwrap();
    s.add_identity(id, IdentityKind::Device, "", NOW).unwrap();
    if let Some(k) = psk {
        s.set_psk(id, k, NOW).unwrap();
    }
}

/// The plain coap:// server's parts over `db` (one verify worker, `tweak` on its config): the
/// dispatcher with the dispatcher secret `[secret; 32]`, its stats and the config it took.
pub fn plain_dispatcher(
    db: &Path,
    secret: u8,
    tweak: impl FnOnce(&mut ServerConfig),
) -> (Dispatcher, Stats, ServerConfig) {
    let stats = Stats::default();
    let mut config = ServerConfig::new("127.0.0.1:5683".parse().unwrap(), db.to_path_buf());
    config.service.verify_workers = 1;
    tweak(&mut config);
    let svc = sigil_server::Service::new(
        Store::open(db).unwrap(),
        config.service.clone(),
        stats.clone(),
    )
    .unwrap();
    (
        Dispatcher::new(config.clone(), svc, stats.clone(), [secret; 32]),
        stats,
        config,
    )
}

/// How a [`Secure`] server process is made.
pub struct Process {
    /// Installs the access-control server: it signs with the server's key, tokens live 60 s.
    pub authority: bool,
    /// The DTLS layer's and the dispatcher's secrets are `[secret; 32]`.
    pub secret: u8,
    /// The seed of the server's randomness (the driver passes the OS's in).
    pub rng: u64,
    /// Restores the sessions stored in the database (as `sigil server` does at its start).
    pub restore: Restore,
}

/// Whether a server process restores the sessions stored in its database.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Restore {
    No,
    /// Restores them.
    Sessions,
    /// Takes the database's credentials first, then restores them.
    WithCredentials,
}

impl Default for Process {
    fn default() -> Self {
        Self {
            authority: false,
            secret: 7,
            rng: 1234,
            restore: Restore::No,
        }
    }
}

/// The coaps:// server in memory: its DTLS layer, dispatcher and service over one database,
/// with virtual time.
pub struct Secure {
    pub d: Dispatcher,
    pub layer: SecureLayer,
    /// The server's randomness (the driver passes the OS's in; these tests a seeded one).
    pub rng: Seeded,
    pub stats: Stats,
    pub db: PathBuf,
    /// The temporary directory holding `db`, when the server made it.
    pub dir: Option<tempfile::TempDir>,
    /// How many stored sessions the process restored at its start.
    pub restored: usize,
    /// A virtual clock for drivers that keep none of their own (milliseconds).
    pub now: u64,
}

impl Secure {
    /// A server on a fresh database, its DTLS config passed through `tune`.
    pub fn new(tune: impl FnOnce(&mut DtlsConfig)) -> Self {
        Self::fresh(tune, |_| {}, Process::default())
    }

    /// A server on a fresh database in a temporary directory.
    pub fn fresh(
        tune: impl FnOnce(&mut DtlsConfig),
        service: impl FnOnce(&mut ServiceConfig),
        process: Process,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let mut s = Self::start(db, tune, service, process);
        s.dir = Some(dir);
        s
    }

    /// A server process over the database at `db`.
    pub fn start(
        db: PathBuf,
        tune: impl FnOnce(&mut DtlsConfig),
        service: impl FnOnce(&mut ServiceConfig),
        process: Process,
    ) -> Self {
        let stats = Stats::default();
        let mut config = ServerConfig::new("127.0.0.1:5683".parse().unwrap(), db.clone());
        config.service.verify_workers = 1;
        service(&mut config.service);
        let mut dc = DtlsConfig::new("127.0.0.1:5684".parse().unwrap());
        tune(&mut dc);
        let mut svc = sigil_server::service::Service::new(
            Store::open(&db).unwrap(),
            config.service.clone(),
            stats.clone(),
        )
        .unwrap();
        let key = RustCrypto
            .generate(SignatureAlgorithm::EcdsaP256, &mut Seeded(99))
            .unwrap();
        if process.authority {
            svc.set_authority(
                sigil_server::authz::Authority::new(key.clone(), [5; 16], 60, Box::new(Seeded(77)))
                    .unwrap(),
            );
        }
        let secret = [process.secret; 32];
        let mut layer = SecureLayer::new(dc, key, secret, SharedTrust::default(), stats.clone());
        if process.restore == Restore::WithCredentials {
            if let Some(c) = svc.changed_credentials() {
                layer.trust().replace(c);
            }
        }
        let restored = match process.restore {
            Restore::No => 0,
            Restore::Sessions | Restore::WithCredentials => {
                layer.restore_sessions(Store::open(&db).unwrap(), ms(0), UnixTime::from_secs(NOW))
            }
        };
        Self {
            d: Dispatcher::new(config, svc, stats.clone(), secret),
            layer,
            rng: Seeded(process.rng),
            stats,
            db,
            dir: None,
            restored,
            now: 0,
        }
    }

    /// Adds `id` as a device, with its PSK if given.
    pub fn provision(&self, id: &Identity, psk: Option<&[u8]>) {
        provision(&self.db, id, psk);
    }

    /// Adds the identity of the Ed25519 key drawn from `seed` as a device with the PSK `key`;
    /// returns it (its text is the PSK identity).
    pub fn provision_psk(&self, seed: u8, key: &[u8]) -> Identity {
        let id = ed25519_identity(u64::from(seed));
        self.provision(&id, Some(key));
        id
    }

    /// The server after a crash: everything in memory is gone (no close_notify, no clean
    /// shutdown), the database stays; a new process (`process`) starts over it, keeping the
    /// temporary directory. Its `restored` says how many stored sessions came back.
    pub fn restart(self, process: Process) -> Self {
        let Secure { dir, db, .. } = self;
        let mut s = Secure::start(db, |_| {}, |_| {}, process);
        s.dir = dir;
        s
    }

    /// The identities of the DTLS sessions kept in the database, the newest first.
    pub fn stored_sessions(&self) -> Vec<String> {
        Store::open(&self.db)
            .unwrap()
            .dtls_sessions()
            .unwrap()
            .into_iter()
            .map(|r| r.identity)
            .collect()
    }

    /// One batch of datagrams at `now_ms`; what the server sends.
    pub fn handle(
        &mut self,
        now_ms: u64,
        datagrams: Vec<(SocketAddr, Vec<u8>)>,
    ) -> Vec<(SocketAddr, Vec<u8>)> {
        sigil_server::socket::secure_batch(
            &mut self.d,
            &mut self.layer,
            datagrams.into_iter().map(|(p, b)| (p, None, b)).collect(),
            ms(now_ms),
            wall(now_ms),
            &mut self.rng,
        )
    }

    pub fn count(&self, key: &str) -> u64 {
        self.stats.get(key)
    }
}

/// A client in the virtual network: what it sends at `now`, and a datagram for it.
pub trait Peer {
    fn addr(&self) -> SocketAddr;
    fn outgoing(&mut self, now: u64) -> Vec<(SocketAddr, Vec<u8>)>;
    fn incoming(&mut self, now: u64, datagram: &[u8]);
}

/// Exchanges datagrams between the clients and the server at `now` until both are quiet.
pub fn step<P: Peer>(s: &mut Secure, clients: &mut [&mut P], now: u64) {
    loop {
        let mut sent = vec![];
        for c in clients.iter_mut() {
            sent.extend(c.outgoing(now));
        }
        let replies = s.handle(now, sent.clone());
        for (to, bytes) in &replies {
            if let Some(c) = clients.iter_mut().find(|c| c.addr() == *to) {
                c.incoming(now, bytes);
            }
        }
        if sent.is_empty() && replies.is_empty() {
            break;
        }
    }
}

/// Runs clients and the server for `for_ms` of virtual time in 10 ms steps.
pub fn run<P: Peer>(s: &mut Secure, clients: &mut [&mut P], now: &mut u64, for_ms: u64) {
    let until = *now + for_ms;
    while *now < until {
        step(s, clients, *now);
        *now += 10;
    }
}

/// What `conn` at `addr` sends at `now` (its timers run first).
pub fn transmit(
    conn: &mut Connection<RustCrypto, AnyServer>,
    addr: SocketAddr,
    now: u64,
) -> Vec<(SocketAddr, Vec<u8>)> {
    let _ = conn.handle_timeout(ms(now));
    let mut out = vec![];
    let mut buf = [0u8; 1500];
    while let Some(n) = conn.poll_transmit(ms(now), &mut buf) {
        out.push((addr, buf[..n].to_vec()));
    }
    out
}

/// A DTLS client at `addr`; the CoAP answers it got inside its session, in order. With
/// [`Client::over_coap`] its handshake runs as a CoAP resource (`conn` stays unused) and the
/// session is `traffic`; with a `device` above it, the device sends through the session and
/// gets what comes back (instead of `inbox`).
pub struct Client {
    pub addr: SocketAddr,
    pub conn: Connection<RustCrypto, AnyServer>,
    /// The handshake over the CoAP carrier, until it ends.
    pub carrier: Option<CoapClient<RustCrypto, AnyServer>>,
    pub over_coap: bool,
    /// The session the carrier's handshake made.
    pub traffic: Option<Traffic<RustCrypto>>,
    /// The carrier handshake's randomness.
    pub rng: Seeded,
    pub device: Option<(Device<RustCrypto>, MemoryStorage)>,
    pub inbox: Vec<Vec<u8>>,
    /// What the device reported.
    pub events: Vec<Event>,
    /// CoAP messages the device sent.
    pub sent: Vec<Vec<u8>>,
    /// The last message ID it used.
    pub mid: u16,
}

impl Client {
    pub fn connect(
        addr: SocketAddr,
        config: Config,
        creds: Credentials<'_>,
        seed: u64,
        now: u64,
    ) -> Self {
        let conn = Connection::connect(
            RustCrypto,
            AnyServer,
            config,
            &mut Seeded(seed),
            creds,
            ms(now),
        )
        .unwrap();
        let mut c = Self::with(addr, conn);
        c.rng = Seeded(seed + 1);
        c
    }

    /// A client at `addr` around a connection the test made (a resumption, say).
    pub fn with(addr: SocketAddr, conn: Connection<RustCrypto, AnyServer>) -> Self {
        Self {
            addr,
            conn,
            carrier: None,
            over_coap: false,
            traffic: None,
            rng: Seeded(0),
            device: None,
            inbox: vec![],
            events: vec![],
            sent: vec![],
            mid: 0,
        }
    }

    /// A PSK client with the PSK identity `identity`.
    pub fn psk(addr: SocketAddr, identity: &str, key: &[u8], seed: u64, now: u64) -> Self {
        Self::connect(
            addr,
            Config::default(),
            Credentials::Psk {
                identity: identity.as_bytes(),
                key,
            },
            seed,
            now,
        )
    }

    /// The same client with its handshake over CoAP (`PUT /dtls`).
    pub fn over_coap(mut self, creds: Credentials<'_>, seed: u64, now: u64) -> Self {
        self.carrier = Some(
            CoapClient::connect(
                RustCrypto,
                AnyServer,
                CarrierConfig::default(),
                &mut Seeded(seed),
                creds,
                ms(now),
            )
            .unwrap(),
        );
        self.over_coap = true;
        self
    }

    pub fn is_established(&self) -> bool {
        if self.over_coap {
            self.traffic.is_some()
        } else {
            self.conn.is_established()
        }
    }

    pub fn send(&mut self, msg: &[u8]) {
        self.conn.send(msg).unwrap();
    }

    pub fn next_mid(&mut self) -> u16 {
        self.mid = self.mid.wrapping_add(1);
        self.mid
    }

    /// The answers to its CoAP requests that were 2.05 Content.
    pub fn answered(&self) -> usize {
        self.inbox
            .iter()
            .filter(|m| Message::parse(m).is_ok_and(|m| m.code == Code::CONTENT))
            .count()
    }

    fn outgoing_over_coap(&mut self, now: u64) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut out = vec![];
        let mut buf = [0u8; 2048];
        if let Some(hs) = self.carrier.as_mut() {
            let _ = hs.handle_timeout(ms(now));
            while let Some(n) = hs.poll_transmit(ms(now), &mut buf) {
                out.push((self.addr, buf[..n].to_vec()));
            }
        }
        let Some(t) = self.traffic.as_mut() else {
            return out;
        };
        if let Some((dev, st)) = &mut self.device {
            dev.handle_timeout(ms(now), st).unwrap();
            while let Some(n) = dev.poll_transmit(&mut buf) {
                t.send(&buf[..n]).unwrap();
                self.sent.push(buf[..n].to_vec());
            }
            while let Some(e) = dev.poll_event() {
                self.events.push(e);
            }
        }
        while let Some(n) = t.poll_transmit(ms(now), &mut buf) {
            out.push((self.addr, buf[..n].to_vec()));
        }
        out
    }
}

impl Peer for Client {
    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn outgoing(&mut self, now: u64) -> Vec<(SocketAddr, Vec<u8>)> {
        if self.over_coap {
            return self.outgoing_over_coap(now);
        }
        if let Some((dev, st)) = &mut self.device {
            dev.handle_timeout(ms(now), st).unwrap();
            let mut buf = [0u8; 2048];
            while let Some(n) = dev.poll_transmit(&mut buf) {
                if self.conn.is_established() {
                    self.conn.send(&buf[..n]).unwrap();
                    self.sent.push(buf[..n].to_vec());
                }
            }
            while let Some(e) = dev.poll_event() {
                self.events.push(e);
            }
        }
        transmit(&mut self.conn, self.addr, now)
    }

    fn incoming(&mut self, now: u64, datagram: &[u8]) {
        if let Some(hs) = self.carrier.as_mut() {
            let _ = hs.handle_datagram(ms(now), datagram, &mut self.rng);
            if hs.is_established() {
                let hs = self.carrier.take().unwrap();
                self.traffic = Some(hs.into_traffic().ok().unwrap());
            }
            return;
        }
        let mut buf = [0u8; 2048];
        let mut app = vec![];
        match self.traffic.as_mut() {
            Some(t) => {
                let _ = t.handle_datagram(ms(now), datagram);
                while let Some(n) = t.poll_app_data(&mut buf) {
                    app.push(buf[..n].to_vec());
                }
            }
            None => {
                let _ = self.conn.handle_datagram(ms(now), datagram);
                while let Some(n) = self.conn.poll_app_data(&mut buf) {
                    app.push(buf[..n].to_vec());
                }
            }
        }
        for m in app {
            match &mut self.device {
                Some((dev, st)) => dev.handle_datagram(ms(now), st, &m).unwrap(),
                None => self.inbox.push(m),
            }
        }
    }
}

/// A Confirmable GET of `path` (token `[1]`).
pub fn coap_get(path: &str, mid: u16) -> Vec<u8> {
    let mut buf = [0u8; 128];
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, mid, &[1]).unwrap();
    b.uri_path(path).unwrap();
    let n = b.finish_with_payload(&[]).unwrap();
    buf[..n].to_vec()
}

/// The coap:// server in memory: the dispatcher and service over a fresh database, with its
/// own virtual clock (`now`, milliseconds).
pub struct Plain {
    pub d: Dispatcher,
    pub stats: Stats,
    pub db: PathBuf,
    pub config: ServerConfig,
    pub now: u64,
    /// The temporary directory holding `db`, when the server made it.
    _dir: Option<tempfile::TempDir>,
}

impl Plain {
    /// A server whose config `tweak` changed (after one verify worker was set).
    pub fn new(tweak: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Self::at(&dir.path().join("s.db"), 42, tweak);
        s._dir = Some(dir);
        s
    }

    /// A server process over the database at `db` (made if missing; the caller keeps the
    /// directory), with the dispatcher secret `[secret; 32]`, its clock at 0.
    pub fn at(db: &Path, secret: u8, tweak: impl FnOnce(&mut ServerConfig)) -> Self {
        let (d, stats, config) = plain_dispatcher(db, secret, tweak);
        Self {
            d,
            stats,
            db: db.to_path_buf(),
            config,
            now: 0,
            _dir: None,
        }
    }

    /// One batch of datagrams at `now`; what the server sends.
    pub fn deliver(&mut self, batch: Vec<(SocketAddr, Vec<u8>)>) -> Vec<(SocketAddr, Vec<u8>)> {
        self.d.handle_at(batch, ms(self.now), wall(self.now))
    }

    /// The server's timers at `now` (retransmitted and refreshed notifications, observers
    /// given up on, expiry): what it sends to coap:// addresses.
    pub fn tick(&mut self) -> Vec<(SocketAddr, Vec<u8>)> {
        self.d.handle_timeout(ms(self.now));
        self.d.take_notifications_for(sigil_server::Channel::Plain)
    }

    /// One datagram; its answers.
    pub fn one(&mut self, from: SocketAddr, datagram: Vec<u8>) -> Vec<Vec<u8>> {
        self.deliver(vec![(from, datagram)])
            .into_iter()
            .map(|(_, b)| b)
            .collect()
    }

    pub fn gauge(&self, name: &str) -> u64 {
        self.stats.get(name)
    }

    pub fn provision(&self, id: &Identity, kind: IdentityKind) {
        Store::open(&self.db)
            .unwrap()
            .add_identity(id, kind, "", NOW)
            .unwrap();
    }

    /// A kit of two members (the devices booted from `seed` and `seed + 1`) provisioned by
    /// its group identity only: the members' keys.
    pub fn provision_kit(&self, seed: u64) -> Vec<PublicKey> {
        let keys: Vec<PublicKey> = (0..2)
            .map(|i| {
                let mut st = MemoryStorage::default();
                *Device::boot(
                    RustCrypto,
                    DeviceConfig::default(),
                    &mut st,
                    &mut Seeded(seed + i),
                    &[],
                    &[],
                )
                .unwrap()
                .public_key()
            })
            .collect();
        let group = Identity::of_group(&RustCrypto, &keys).unwrap();
        self.provision(&group, IdentityKind::Group);
        keys
    }
}

/// The DTLS layer alone, trusting one device (the Ed25519 key of seed 5) with the PSK `psk`:
/// the layer and that device's identity.
pub fn one_psk_layer(psk: &[u8], stats: Stats) -> (SecureLayer, Identity) {
    let id = ed25519_identity(5);
    let mut provisioned = sigil_server::Credentials::default();
    provisioned.authorized.insert(id);
    provisioned.psks.insert(id, psk.to_vec());
    let trust = SharedTrust::default();
    trust.replace(provisioned);
    let key = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Seeded(99))
        .unwrap();
    let layer = SecureLayer::new(
        DtlsConfig::new("127.0.0.1:5684".parse().unwrap()),
        key,
        [7; 32],
        trust,
        stats,
    );
    (layer, id)
}
