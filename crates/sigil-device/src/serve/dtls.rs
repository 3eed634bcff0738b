//! The reading resources on one UDP port: plain CoAP for `/authz-info`, DTLS 1.2 with raw
//! public keys for everything, and the bounded table of DTLS peers.

use super::{Event, PeerAddr, ReadingResources, Readings, MAX_ANSWER};
use core::time::Duration;
use sigil_ace::rs::RsLimits;
use sigil_coap::exchange::dedup::{Dedup, Received, Slots};
use sigil_coap::TransmissionParameters;
use sigil_crypto::{CryptoProvider, PublicKey, Rng, SecretKey};
use sigil_dtls::{
    Config, Connection, CookieKey, ServerCredentials, Stateless, Trust, MAX_APP_DATA, MAX_DATAGRAM,
};
use sigil_time::{Instant, UnixTime};

/// Most DTLS peers (handshaking or established) the CLI's table holds.
pub const MAX_PEERS: usize = 16;
/// Most DTLS peers from one host: a host that completes handshakes with throwaway keys holds a
/// quarter of the table at most.
pub const MAX_PEERS_PER_HOST: usize = 4;
/// A half-open handshake older than this is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// A session without traffic for this long is dropped.
pub const SESSION_IDLE: Duration = Duration::from_secs(600);

const _: () = assert!(MAX_ANSWER <= MAX_APP_DATA);

/// The table's caps and lifetimes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most peers from one host (an IPv4 address or an IPv6 /64).
    pub peers_per_host: usize,
    pub handshake_timeout: Duration,
    pub session_idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            peers_per_host: MAX_PEERS_PER_HOST,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            session_idle: SESSION_IDLE,
        }
    }
}

/// Any raw public key may complete the handshake: it proves possession, and the token bound
/// to it decides what it may do.
#[derive(Clone, Copy, Debug)]
pub struct AnyKey;

impl Trust for AnyKey {
    fn trusted_key(&self, _key: &PublicKey) -> bool {
        true
    }
}

/// One DTLS peer: its connection (kept whole once established: in a fixed slot the
/// handshake's buffers cost nothing extra).
pub struct Peer<C: CryptoProvider> {
    addr: PeerAddr,
    conn: Connection<C, AnyKey>,
    established: bool,
    created: Instant,
    last_seen: Instant,
    /// Dropped: what it queued (an alert) goes out, then the slot is free.
    closing: bool,
}

impl<C: CryptoProvider> Peer<C> {
    fn deadline(&self, limits: &Limits) -> Instant {
        if self.established {
            self.last_seen + limits.session_idle
        } else {
            self.created + limits.handshake_timeout
        }
    }

    fn stale(&self, now: Instant, limits: &Limits) -> bool {
        now > self.deadline(limits)
    }
}

/// A slot of the peer table; the caller owns the storage (an array of `N` of them in
/// firmware, a boxed slice elsewhere).
pub type PeerSlot<C> = Option<Peer<C>>;

/// `N` empty peer slots.
pub fn empty_peers<C: CryptoProvider, const N: usize>() -> [PeerSlot<C>; N] {
    core::array::from_fn(|_| None)
}

/// The sensor's resource server on one port. `S` is the peer table's storage; its length is
/// the total cap.
pub struct ReadingServer<
    'a,
    C,
    S,
    const TOKENS: usize = { super::TOKENS },
    const CTIS: usize = { super::CTIS },
> where
    C: CryptoProvider + Clone,
    S: AsMut<[PeerSlot<C>]> + AsRef<[PeerSlot<C>]>,
{
    crypto: C,
    key: SecretKey,
    dtls: Config,
    cookie: CookieKey,
    limits: Limits,
    /// The CoAP side: token tables, counters, events.
    pub resources: ReadingResources<'a, TOKENS, CTIS>,
    peers: S,
    /// One answer made without state (a plain CoAP answer, a HelloVerifyRequest, an alert).
    pending: Option<(PeerAddr, usize)>,
    pending_buf: [u8; MAX_DATAGRAM],
    /// Plain Confirmable requests seen within EXCHANGE_LIFETIME and their answers (the
    /// message core's [`Dedup`]): a `POST /authz-info` sent again because its ACK was lost
    /// gets its 2.01 again instead of a second intake, which would refuse the same token as
    /// replayed.
    dedup: Dedup<PeerAddr, Slots<PeerAddr, DEDUP_ENTRIES, DEDUP_ANSWER>>,
}

/// Plain Confirmable requests remembered, in all and from one address.
const DEDUP_ENTRIES: usize = 16;
const DEDUP_PER_PEER: usize = 2;
/// The longest answer kept for a repeated request (`/authz-info` answers an unverified
/// address with at most three times its request, and its refusals carry a short error map).
const DEDUP_ANSWER: usize = 128;

impl<'a, C, S, const TOKENS: usize, const CTIS: usize> ReadingServer<'a, C, S, TOKENS, CTIS>
where
    C: CryptoProvider + Clone,
    S: AsMut<[PeerSlot<C>]> + AsRef<[PeerSlot<C>]>,
{
    /// The sensor (`audience`, its identity text; `key`, its key pair) serving with `peers`
    /// as its table, trusting tokens signed by `ac`. `cookie_secret` comes from the caller's
    /// CSPRNG.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        crypto: C,
        audience: &'a str,
        key: SecretKey,
        ac: PublicKey,
        dtls: Config,
        cookie_secret: [u8; 32],
        rs_limits: RsLimits,
        limits: Limits,
        mut peers: S,
    ) -> Self {
        peers.as_mut().iter_mut().for_each(|p| *p = None);
        Self {
            crypto,
            key,
            dtls,
            cookie: CookieKey::new(cookie_secret),
            limits,
            resources: ReadingResources::new(audience, ac, rs_limits),
            peers,
            pending: None,
            pending_buf: [0; MAX_DATAGRAM],
            dedup: Dedup::new(&TransmissionParameters::default(), DEDUP_PER_PEER),
        }
    }

    /// Peers held (handshaking or established).
    pub fn peers(&self) -> usize {
        self.live().count()
    }

    /// Peers held from `addr`'s host.
    pub fn peers_of(&self, addr: &PeerAddr) -> usize {
        let host = addr.host();
        self.live().filter(|p| p.addr.host() == host).count()
    }

    /// Established sessions.
    pub fn sessions(&self) -> usize {
        self.live().filter(|p| p.established).count()
    }

    fn live(&self) -> impl Iterator<Item = &Peer<C>> {
        self.peers.as_ref().iter().flatten().filter(|p| !p.closing)
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.resources.poll_event()
    }

    /// When to call [`Self::handle_timeout`] next: a handshake's retransmission, or a peer
    /// going stale. Token expiry runs on the wall clock: call it at least once a second.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.live()
            .flat_map(|p| {
                p.conn
                    .poll_timeout()
                    .into_iter()
                    .chain(Some(p.deadline(&self.limits)))
            })
            .min()
    }

    /// Retransmits handshake flights that are due, drops stale peers and expired tokens.
    pub fn handle_timeout(&mut self, now: Instant, unix: UnixTime) {
        let limits = self.limits;
        let stats = &mut self.resources.stats;
        for slot in self.peers.as_mut() {
            let Some(p) = slot else { continue };
            if p.closing {
                continue;
            }
            let mut drop = p.stale(now, &limits);
            if !drop && !p.established {
                drop = p.conn.handle_timeout(now).is_err() || p.conn.failure().is_some();
            }
            if drop {
                stats.peers_expired += 1;
                *slot = None;
            }
        }
        self.resources.rs.expire(unix);
    }

    /// What to send next, to whom: drain it after every [`Self::handle_datagram`] and
    /// [`Self::handle_timeout`].
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<(PeerAddr, usize)> {
        if let Some((to, n)) = self.pending.take() {
            if let Some(o) = out.get_mut(..n) {
                o.copy_from_slice(&self.pending_buf[..n]);
                return Some((to, n));
            }
        }
        for slot in self.peers.as_mut() {
            let Some(p) = slot else { continue };
            match p.conn.poll_transmit(now, out) {
                Some(n) => return Some((p.addr, n)),
                None if p.closing => *slot = None,
                None => {}
            }
        }
        None
    }

    /// A datagram from `peer`: plain CoAP by its first byte (version 1), or DTLS records
    /// (content types 20-25). `readings` are what `/reading` and `/history` answer.
    #[allow(clippy::too_many_arguments)]
    pub fn handle_datagram<const N: usize, const LEN: usize>(
        &mut self,
        now: Instant,
        unix: UnixTime,
        rng: &mut dyn Rng,
        peer: PeerAddr,
        datagram: &[u8],
        readings: &Readings<N, LEN>,
    ) {
        match datagram.first() {
            Some(0x14..=0x19) => self.dtls_datagram(now, unix, rng, peer, datagram, readings),
            Some(b) if b >> 6 == 1 => {
                // A Confirmable request seen before (RFC 7252 §4.5): its answer again.
                let confirmable = (b >> 4) & 3 == 0;
                let request_mid = match datagram.get(2..4) {
                    Some(m) if confirmable => Some(u16::from_be_bytes([m[0], m[1]])),
                    _ => None,
                };
                if let Some(rm) = request_mid {
                    match self.dedup.receive(peer, rm, now) {
                        Received::Again(a) => {
                            self.pending_buf[..a.len()].copy_from_slice(a);
                            self.pending = Some((peer, a.len()));
                            self.resources.stats.duplicates += 1;
                            return;
                        }
                        Received::Seen => {
                            self.resources.stats.duplicates += 1;
                            return;
                        }
                        Received::New | Received::NotRemembered(_) => {}
                    }
                }
                let mid = random_mid(rng);
                let n = self.resources.plain(
                    &self.crypto,
                    unix,
                    peer,
                    datagram,
                    mid,
                    &mut self.pending_buf,
                );
                if let (Some(rm), Some(n)) = (request_mid, n) {
                    self.dedup.answered(peer, rm, &self.pending_buf[..n]);
                }
                self.pending = n.map(|n| (peer, n));
            }
            _ => self.resources.stats.dropped += 1,
        }
    }

    fn find(&self, addr: &PeerAddr) -> Option<usize> {
        self.peers
            .as_ref()
            .iter()
            .position(|s| s.as_ref().is_some_and(|p| !p.closing && p.addr == *addr))
    }

    fn dtls_datagram<const N: usize, const LEN: usize>(
        &mut self,
        now: Instant,
        unix: UnixTime,
        rng: &mut dyn Rng,
        addr: PeerAddr,
        datagram: &[u8],
        readings: &Readings<N, LEN>,
    ) {
        let Some(i) = self.find(&addr) else {
            self.new_peer(now, rng, addr, datagram);
            return;
        };
        let Some(p) = self.peers.as_mut()[i].as_mut() else {
            return;
        };
        let stats = &mut self.resources.stats;
        p.last_seen = now;
        let mut keep = true;
        let r = p.conn.handle_datagram(now, datagram);
        if !p.established {
            if r.is_err() && p.conn.failure().is_some() {
                stats.handshakes_failed += 1;
                keep = false;
            } else if p.conn.is_established() {
                p.established = true;
                stats.handshakes += 1;
            }
        } else if r.is_err() {
            keep = false;
        }
        if keep && p.established {
            let key = p.conn.peer_public_key().copied();
            let mut app = [0u8; MAX_APP_DATA];
            let mut reply = [0u8; MAX_APP_DATA];
            while let Some(n) = p.conn.poll_app_data(&mut app) {
                let mid = random_mid(rng);
                let Some(m) = self.resources.secure(
                    &self.crypto,
                    unix,
                    addr,
                    key.as_ref(),
                    readings,
                    &app[..n],
                    mid,
                    &mut reply,
                ) else {
                    continue;
                };
                if p.conn.send(&reply[..m]).is_err() {
                    keep = false;
                    break;
                }
            }
            if p.conn.failure().is_some() {
                keep = false;
            }
        }
        if !keep {
            p.closing = true;
        }
    }

    /// A datagram from an address without a peer: a ClientHello, answered statelessly with a
    /// cookie first (the cheap refusal), then given a slot if its host and the table have
    /// room.
    fn new_peer(&mut self, now: Instant, rng: &mut dyn Rng, addr: PeerAddr, datagram: &[u8]) {
        let cookie = match self.cookie.respond(
            &self.crypto,
            &addr.to_bytes(),
            datagram,
            &mut self.pending_buf,
        ) {
            Stateless::HelloVerify(n) => {
                self.pending = Some((addr, n));
                return;
            }
            Stateless::Drop(_) => {
                self.resources.stats.dropped += 1;
                return;
            }
            Stateless::Accept(c) => c,
        };
        let mut room = self.room(&addr);
        if room.is_err() {
            // Room only from a peer gone stale (or one already dropped, its alert unsent).
            let limits = self.limits;
            for slot in self.peers.as_mut() {
                if slot
                    .as_ref()
                    .is_some_and(|p| p.closing || p.stale(now, &limits))
                {
                    if slot.as_ref().is_some_and(|p| !p.closing) {
                        self.resources.stats.peers_expired += 1;
                    }
                    *slot = None;
                }
            }
            room = self.room(&addr);
        }
        let i = match room {
            Ok(i) => i,
            Err(per_host) => {
                let stats = &mut self.resources.stats;
                stats.peers_refused += 1;
                if per_host {
                    stats.peers_refused_per_host += 1;
                }
                self.resources.event(Event::PeerRefused {
                    peer: addr,
                    per_host,
                });
                return;
            }
        };
        let offer = ServerCredentials {
            key: Some(&self.key),
            require_client_key: true,
            ..ServerCredentials::NONE
        };
        match Connection::accept(
            self.crypto.clone(),
            AnyKey,
            self.dtls,
            &offer,
            rng,
            cookie,
            datagram,
            now,
        ) {
            Ok(conn) => {
                self.peers.as_mut()[i] = Some(Peer {
                    addr,
                    conn,
                    established: false,
                    created: now,
                    last_seen: now,
                    closing: false,
                });
            }
            Err(error) => {
                self.resources.stats.handshakes_failed += 1;
                self.resources
                    .event(Event::HandshakeFailed { peer: addr, error });
                if let Some(n) = sigil_dtls::refusal(&error, datagram, &mut self.pending_buf) {
                    self.pending = Some((addr, n));
                }
            }
        }
    }

    /// A free slot for a peer at `addr`, or whether the host's share (`true`) or the whole
    /// table (`false`) is taken.
    fn room(&self, addr: &PeerAddr) -> Result<usize, bool> {
        if self.peers_of(addr) >= self.limits.peers_per_host {
            return Err(true);
        }
        self.peers
            .as_ref()
            .iter()
            .position(Option::is_none)
            .ok_or(false)
    }
}

fn random_mid(rng: &mut dyn Rng) -> u16 {
    let mut b = [0u8; 2];
    let _ = rng.fill(&mut b);
    u16::from_be_bytes(b)
}
