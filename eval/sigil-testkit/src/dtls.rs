//! A DTLS client and server in memory, with virtual time and a link between them that has a
//! latency, seeded loss (drop, duplicate, delay) and an MTU: handshakes read as scenarios.
//!
//! ```
//! use core::time::Duration;
//! use sigil_crypto::RustCrypto;
//! use sigil_dtls::{Config, Connection, Credentials, NoTrust, ServerCredentials};
//! use sigil_testkit::dtls::{at, server, Link, Pair, SENSOR_PSK};
//! use sigil_testkit::Seeded;
//!
//! let psk = Credentials::Psk { identity: b"sensor-1", key: b"0123456789abcdef" };
//! let client =
//!     Connection::connect(RustCrypto, NoTrust, Config::default(), &mut Seeded::new(1), psk, at(0))
//!         .unwrap();
//! let offer = ServerCredentials { psk: true, ..ServerCredentials::NONE };
//! let accept = server(SENSOR_PSK, Config::default(), offer, Seeded::new(2));
//! // One datagram in ten dropped, duplicated, delayed; the seed makes the run repeatable.
//! let mut pair = Pair::new(client, accept, Link::lossy(10, 7));
//! assert!(pair.run_until_established(Duration::from_secs(600)));
//! pair.send_client(b"21.5 Cel").unwrap();
//! pair.run_until_quiet();
//! assert!(pair.server_received.len() <= 1, "never twice");
//! ```
//!
//! The server side is what a real server does for a peer it holds no state for: every
//! datagram goes to [`CookieKey::respond`] (a HelloVerifyRequest back through the link) until
//! one carries a valid cookie; only then is the connection made, by the caller's `accept`
//! with the [`CookieVerified`] proof. A refused ClientHello gets the [`refusal`] alert.
//! From then on the pair serves that one peer.
//!
//! Time moves only from event to event (a datagram's arrival, a retransmission timer), so a
//! ten-minute handshake over a bad link waits for no real clock, and the same seed gives the
//! same run.

use crate::rng::Seeded;
use core::time::Duration;
use sigil_crypto::{Rng, RustCrypto};
use sigil_dtls::{
    refusal, Config, Connection, CookieKey, CookieVerified, Error, ServerCredentials, Stateless,
    Traffic, Trust,
};
use sigil_time::Instant;

/// The client's address as the server's cookie binds it (RFC 6347 §4.2.1).
pub const CLIENT_ADDRESS: &[u8] = b"[fe80::1]:5684";

/// A point on the virtual clock, `ms` milliseconds after its origin.
pub fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// Everything `c` has queued to send, taken at once without moving its timers (the instant
/// passed is the clock's origin, which never moves a timer): for tests that hold, reorder
/// or alter datagrams by hand.
pub fn drain<C: sigil_crypto::CryptoProvider, T: Trust>(c: &mut Connection<C, T>) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut buf = [0u8; 2048];
    while let Some(n) = c.poll_transmit(Instant::ZERO, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// A PSK store of one identity (RFC 4279): what a PSK server, or an ECDHE-PSK client,
/// trusts.
#[derive(Clone, Copy, Debug)]
pub struct OnePsk {
    pub identity: &'static [u8],
    pub key: &'static [u8],
}

impl Trust for OnePsk {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == self.identity && self.key.len() <= key.len()).then(|| {
            key[..self.key.len()].copy_from_slice(self.key);
            self.key.len()
        })
    }
}

/// The in-memory tests' sensor: identity `sensor-1`, key `0123456789abcdef`.
pub const SENSOR_PSK: OnePsk = OnePsk {
    identity: b"sensor-1",
    key: b"0123456789abcdef",
};

/// What happens to a datagram on the link, each with its own probability (0.0..=1.0), drawn
/// per datagram from the link's seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Loss {
    /// The datagram never arrives.
    pub drop: f64,
    /// It arrives twice (the copy 5 ms after the original).
    pub duplicate: f64,
    /// It is held back for up to [`Loss::max_delay`] more than the latency, so later ones
    /// overtake it.
    pub delay: f64,
    pub max_delay: Duration,
}

impl Loss {
    /// Every datagram arrives, once, in order.
    pub const NONE: Loss = Loss {
        drop: 0.0,
        duplicate: 0.0,
        delay: 0.0,
        max_delay: Duration::ZERO,
    };

    /// Dropped, duplicated and delayed (by up to 450 ms) each with probability `1/n`.
    pub fn one_in(n: u32) -> Loss {
        let p = 1.0 / f64::from(n.max(1));
        Loss {
            drop: p,
            duplicate: p,
            delay: p,
            max_delay: Duration::from_millis(450),
        }
    }
}

/// The link between client and server: the same in both directions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    /// One-way delay of every datagram.
    pub latency: Duration,
    pub loss: Loss,
    /// Datagrams larger than this are dropped (and counted as too big); `None`: no limit. The
    /// connections' own `Config::pmtu` decides how they cut their flights.
    pub mtu: Option<usize>,
    /// Seeds the loss decisions and the server's cookie secret.
    pub seed: u64,
}

impl Link {
    /// No latency, no loss, no MTU: each flight arrives at the instant it is sent.
    pub const PERFECT: Link = Link {
        latency: Duration::ZERO,
        loss: Loss::NONE,
        mtu: None,
        seed: 0,
    };

    /// 10 ms of latency, and each datagram dropped, duplicated and delayed with probability
    /// `1/n` (see [`Loss::one_in`]).
    pub fn lossy(n: u32, seed: u64) -> Link {
        Link {
            latency: Duration::from_millis(10),
            loss: Loss::one_in(n),
            mtu: None,
            seed,
        }
    }
}

/// One end of the pair; as a datagram's `to`, where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

/// What one direction of the link carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flow {
    /// Datagrams sent into the link (before loss), and their bytes.
    pub datagrams: u64,
    pub bytes: u64,
    /// Lost to [`Loss::drop`].
    pub dropped: u64,
    /// Lost for being larger than [`Link::mtu`].
    pub too_big: u64,
    pub duplicated: u64,
    pub delayed: u64,
}

/// What a run did, both ways.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub to_server: Flow,
    pub to_client: Flow,
    /// Retransmission timers that fired (each resends a flight, or gives up).
    pub client_retransmissions: u32,
    pub server_retransmissions: u32,
    /// HelloVerifyRequests the stateless server sent.
    pub hello_verify_requests: u32,
    /// Datagrams the stateless server dropped (not a ClientHello, or malformed).
    pub stateless_drops: u32,
}

/// A datagram as it entered the link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    pub at: Instant,
    pub to: Side,
    pub bytes: Vec<u8>,
    /// Dropped (drawn, or placed by hand) or too big: it never arrived.
    pub lost: bool,
}

/// How the server side makes its connection from the cookie proof, the ClientHello that
/// carried the cookie, and the time: [`Connection::accept`] with the caller's trust,
/// configuration, offer and randomness (see [`server`]).
pub type Accept<'a, U> = Box<
    dyn FnOnce(CookieVerified, &[u8], Instant) -> Result<Connection<RustCrypto, U>, Error> + 'a,
>;

/// `accept` for [`Pair::new`]: [`Connection::accept`] with these.
pub fn server<'a, U: Trust + 'a>(
    trust: U,
    config: Config,
    offer: ServerCredentials<'a>,
    mut rng: impl Rng + 'a,
) -> impl FnOnce(CookieVerified, &[u8], Instant) -> Result<Connection<RustCrypto, U>, Error> + 'a {
    move |cookie, client_hello, now| {
        Connection::accept(
            RustCrypto,
            trust,
            config,
            &offer,
            &mut rng,
            cookie,
            client_hello,
            now,
        )
    }
}

/// A client and a server connection on one [`Link`], in virtual time.
pub struct Pair<'a, T, U> {
    pub client: Connection<RustCrypto, T>,
    /// `None` until a ClientHello carried a valid cookie and `accept` made the connection.
    pub server: Option<Connection<RustCrypto, U>>,
    accept: Option<Accept<'a, U>>,
    /// The stateless server's secret (from the link's seed).
    pub cookies: CookieKey,
    pub link: Link,
    rng: Seeded,
    now: Instant,
    /// In flight, in the order sent: (arrival, to, bytes).
    in_flight: Vec<(Instant, Side, Vec<u8>)>,
    /// Datagrams still to be lost on purpose, towards the server and towards the client.
    lose: [usize; 2],
    /// Every datagram sent, in order, with what became of it.
    pub log: Vec<Datagram>,
    pub stats: Stats,
    /// Every error either core returned: `handle_datagram` on both sides, and `accept`.
    pub errors: Vec<Error>,
    /// Application data each side received, one record per entry, in order.
    pub server_received: Vec<Vec<u8>>,
    pub client_received: Vec<Vec<u8>>,
}

impl<'a, T: Trust, U: Trust> Pair<'a, T, U> {
    /// `client` (made with `Connection::connect` or `resume` at the clock's origin, its first
    /// flight queued) and the server that `accept` makes, on `link`.
    pub fn new(
        client: Connection<RustCrypto, T>,
        accept: impl FnOnce(CookieVerified, &[u8], Instant) -> Result<Connection<RustCrypto, U>, Error>
            + 'a,
        link: Link,
    ) -> Self {
        Pair {
            client,
            server: None,
            accept: Some(Box::new(accept)),
            cookies: CookieKey::new([link.seed as u8; 32]),
            rng: Seeded::new(link.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            link,
            now: Instant::ZERO,
            in_flight: vec![],
            lose: [0; 2],
            log: vec![],
            stats: Stats::default(),
            errors: vec![],
            server_received: vec![],
            client_received: vec![],
        }
    }

    /// The virtual clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Moves the clock to `t` (never backwards), without handling anything.
    pub fn advance_to(&mut self, t: Instant) -> &mut Self {
        self.now = self.now.max(t);
        self
    }

    /// The server's connection.
    ///
    /// # Panics
    /// If no ClientHello was accepted yet.
    pub fn server(&mut self) -> &mut Connection<RustCrypto, U> {
        self.server
            .as_mut()
            .expect("the server has accepted no ClientHello")
    }

    /// Both ends are established.
    pub fn is_established(&self) -> bool {
        self.client.is_established() && self.server.as_ref().is_some_and(|s| s.is_established())
    }

    /// Either end has failed (a fatal error, an alert, a timeout), or the server refused the
    /// ClientHello.
    pub fn has_failed(&self) -> bool {
        self.client.failure().is_some()
            || self.server.as_ref().is_some_and(|s| s.failure().is_some())
            || (self.server.is_none() && self.accept.is_none())
    }

    /// Nothing is in flight.
    pub fn link_is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// The next `n` datagrams sent towards `to` are lost (counted as dropped), whatever the
    /// link's loss draws: a loss placed by hand.
    pub fn lose_next(&mut self, to: Side, n: usize) -> &mut Self {
        self.lose[to as usize] += n;
        self
    }

    /// Queues `data` as one application record from the client.
    pub fn send_client(&mut self, data: &[u8]) -> Result<(), Error> {
        self.client.send(data)
    }

    /// Queues `data` as one application record from the server.
    pub fn send_server(&mut self, data: &[u8]) -> Result<(), Error> {
        self.server
            .as_mut()
            .ok_or(Error::NotEstablished)?
            .send(data)
    }

    /// Runs until both ends are established (true), or until one has failed and the link is
    /// empty, nothing is left to happen, or `limit` of virtual time passed (false).
    pub fn run_until_established(&mut self, limit: Duration) -> bool {
        self.run_until(limit, |p| {
            p.is_established() || (p.has_failed() && p.in_flight.is_empty())
        });
        self.is_established()
    }

    /// Runs until the server has made its connection (its first flight still queued, not
    /// sent): the cookie exchange is over. False if it refused, or nothing more happens.
    pub fn run_until_accepted(&mut self) -> bool {
        loop {
            if self.server.is_some() {
                return true;
            }
            if self.has_failed() {
                return false;
            }
            self.transmit();
            let Some(next) = self.next_event() else {
                return false;
            };
            self.now = self.now.max(next);
            self.fire_timers();
            let mut due = self.take_due().into_iter();
            while let Some((_, to, bytes)) = due.next() {
                self.deliver(to, &bytes);
                if self.server.is_some() {
                    // What arrived with the accepted ClientHello waits for the next run.
                    let mut rest: Vec<_> = due.collect();
                    rest.append(&mut self.in_flight);
                    self.in_flight = rest;
                    return true;
                }
            }
        }
    }

    /// Sends what both ends queued and delivers everything in flight (timers that come due
    /// meanwhile fire), until the link is empty.
    pub fn run_until_quiet(&mut self) {
        self.run_until(Duration::MAX, |p| p.in_flight.is_empty());
    }

    /// Runs until nothing is in flight and neither end waits for a timer, or `limit` of
    /// virtual time passed (false).
    pub fn run_until_idle(&mut self, limit: Duration) -> bool {
        self.run_until(limit, |p| {
            p.in_flight.is_empty()
                && p.client.poll_timeout().is_none()
                && p.server.as_ref().and_then(|s| s.poll_timeout()).is_none()
        })
    }

    /// The loop under every run: send what is queued; stop if `done`; else move the clock to
    /// the next event (an arrival or a timer) and handle it. False if nothing was left to
    /// happen or the next event lies beyond `limit` from now.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let end = self.now.saturating_add(limit);
        loop {
            self.transmit();
            if done(self) {
                return true;
            }
            let Some(next) = self.next_event() else {
                return false;
            };
            if next > end {
                return false;
            }
            self.now = self.now.max(next);
            self.fire_timers();
            for (_, to, bytes) in self.take_due() {
                self.deliver(to, &bytes);
            }
        }
    }

    /// The next arrival or timer.
    fn next_event(&self) -> Option<Instant> {
        [
            self.in_flight.iter().map(|d| d.0).min(),
            self.client.poll_timeout(),
            self.server.as_ref().and_then(|s| s.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The datagrams that have arrived by now, in the order sent.
    fn take_due(&mut self) -> Vec<(Instant, Side, Vec<u8>)> {
        let now = self.now;
        let (due, later) = core::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|d| d.0 <= now);
        self.in_flight = later;
        due
    }

    /// Both connections, for a test to drive by hand from here.
    pub fn into_parts(self) -> (Connection<RustCrypto, T>, Option<Connection<RustCrypto, U>>) {
        (self.client, self.server)
    }

    /// Both connections once established, as their [`Traffic`] alone.
    ///
    /// # Panics
    /// If either is not established.
    pub fn into_traffic(self) -> (Traffic<RustCrypto>, Traffic<RustCrypto>) {
        let client = self.client.into_traffic();
        let server = self.server.map(Connection::into_traffic);
        match (client, server) {
            (Ok(c), Some(Ok(s))) => (c, s),
            _ => panic!("into_traffic: the handshake is not complete on both ends"),
        }
    }

    fn transmit(&mut self) {
        let mut buf = [0u8; 2048];
        while let Some(n) = self.client.poll_transmit(self.now, &mut buf) {
            self.send(Side::Server, buf[..n].to_vec());
        }
        if let Some(s) = self.server.as_mut() {
            let mut out = vec![];
            while let Some(n) = s.poll_transmit(self.now, &mut buf) {
                out.push(buf[..n].to_vec());
            }
            for d in out {
                self.send(Side::Client, d);
            }
        }
    }

    fn fire_timers(&mut self) {
        let now = self.now;
        if self.client.poll_timeout().is_some_and(|t| t <= now) {
            let _ = self.client.handle_timeout(now);
            self.stats.client_retransmissions += 1;
        }
        if let Some(s) = self.server.as_mut() {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                let _ = s.handle_timeout(now);
                self.stats.server_retransmissions += 1;
            }
        }
    }

    /// One datagram into the link: its fate is drawn now.
    fn send(&mut self, to: Side, bytes: Vec<u8>) {
        let now = self.now;
        let link = self.link;
        let flow = match to {
            Side::Server => &mut self.stats.to_server,
            Side::Client => &mut self.stats.to_client,
        };
        flow.datagrams += 1;
        flow.bytes += bytes.len() as u64;
        let too_big = link.mtu.is_some_and(|m| bytes.len() > m);
        let by_hand = !too_big && self.lose[to as usize] > 0;
        if by_hand {
            self.lose[to as usize] -= 1;
        }
        let lost = too_big || by_hand || self.rng.chance(link.loss.drop);
        if too_big {
            flow.too_big += 1;
        } else if lost {
            flow.dropped += 1;
        }
        self.log.push(Datagram {
            at: now,
            to,
            bytes: bytes.clone(),
            lost,
        });
        if lost {
            return;
        }
        let mut arrival = now + link.latency;
        if self.rng.chance(link.loss.delay) {
            flow.delayed += 1;
            let ms = link.loss.max_delay.as_millis() as u64;
            arrival += Duration::from_millis(self.rng.below(ms + 1));
        }
        if self.rng.chance(link.loss.duplicate) {
            flow.duplicated += 1;
            self.in_flight
                .push((arrival + Duration::from_millis(5), to, bytes.clone()));
        }
        self.in_flight.push((arrival, to, bytes));
    }

    fn deliver(&mut self, to: Side, d: &[u8]) {
        let now = self.now;
        let mut buf = [0u8; 2048];
        match to {
            Side::Client => {
                if let Err(e) = self.client.handle_datagram(now, d) {
                    self.errors.push(e);
                }
                while let Some(n) = self.client.poll_app_data(&mut buf) {
                    self.client_received.push(buf[..n].to_vec());
                }
            }
            Side::Server => match self.server.as_mut() {
                Some(s) => {
                    if let Err(e) = s.handle_datagram(now, d) {
                        self.errors.push(e);
                    }
                    while let Some(n) = s.poll_app_data(&mut buf) {
                        self.server_received.push(buf[..n].to_vec());
                    }
                }
                None => self.stateless(d),
            },
        }
    }

    /// The server without state for the peer: cookie exchange, then `accept`.
    fn stateless(&mut self, d: &[u8]) {
        let mut out = [0u8; 512];
        match self
            .cookies
            .respond(&RustCrypto, CLIENT_ADDRESS, d, &mut out)
        {
            Stateless::HelloVerify(n) => {
                self.stats.hello_verify_requests += 1;
                self.send(Side::Client, out[..n].to_vec());
            }
            Stateless::Accept(cookie) => {
                let Some(accept) = self.accept.take() else {
                    // Refused once already: this one-peer server stays closed.
                    self.stats.stateless_drops += 1;
                    return;
                };
                match accept(cookie, d, self.now) {
                    Ok(s) => self.server = Some(s),
                    Err(e) => {
                        self.errors.push(e);
                        if let Some(n) = refusal(&e, d, &mut out) {
                            self.send(Side::Client, out[..n].to_vec());
                        }
                    }
                }
            }
            Stateless::Drop(_) => self.stats.stateless_drops += 1,
        }
    }
}
