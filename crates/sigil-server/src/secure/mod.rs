//! CoAP over DTLS (coaps://, RFC 7252 §9): the server's table of DTLS peers around the sans-IO
//! [`sigil_dtls::Connection`].
//!
//! Transport-free like [`crate::coap::Dispatcher`]: datagrams, the caller's clock (an
//! [`Instant`] for timers, a [`UnixTime`] for certificates) and the caller's randomness in,
//! datagrams and authenticated CoAP messages out. What it needs to know about a datagram before
//! it holds state for the peer it reads through [`RecordFacts`], never at byte offsets. A peer without state gets only the
//! stateless cookie exchange (no memory, no amplification); a ClientHello with a valid cookie
//! takes a slot in the handshake table; a completed handshake moves to the session table and
//! its identity goes with every request it carries ([`PeerAuth`]). A session keeps only the
//! established [`Traffic`] state, not the handshake's buffers.
//!
//! Every table has a byte budget per source host (an IPv4 address or an IPv6 /64, see
//! [`crate::budget`]) and in total; each entry is charged a fixed figure ([`HANDSHAKE_BYTES`],
//! [`SESSION_BYTES`], [`RESUMPTION_BYTES`]). A cookie proves only that the address receives,
//! so a host that returns cookies from many ports still gets one host's share of half-open
//! handshakes (`max_handshakes_per_host`); beyond it, its ClientHellos are refused after the
//! cookie check, before any handshake work. When the handshake table is full, a ClientHello is
//! first accepted by the handshake (one it refuses pushes no one out); then it may push out a
//! stranger's half-open handshake that went [`HANDSHAKE_SHIELD`] (7 s) without progress (a
//! client flight that moved it on), those that never progressed first: the one of the host
//! holding the most, if that host holds more than the newcomer's host would, else, if the
//! newcomer's host holds none (or it is a known peer), the first of all; within a total budget
//! of evictions (`max_handshakes` per `handshake_timeout`, and a reserve); otherwise it is
//! refused. Above half full, strangers' handshakes without progress for
//! `crowded_handshake_timeout` expire first. A known peer is one at the address of a live
//! session, or one resuming a cached session made from its own host (one such handshake per
//! cached session): a session ID alone, seen on the wire, makes no one known. A live session
//! is never pushed out by newcomers, so a flood of ClientHellos cannot cut off devices that are already
//! connected; stale entries (a handshake older than `handshake_timeout`, a session idle longer
//! than `session_idle`, a resumable session older than `session_lifetime`) expire and their
//! memory is returned. A ClientHello from the address of an established session (a device
//! that rebooted) starts a new handshake beside it, and replaces the session only once the new
//! handshake completes (RFC 6347 §4.2.8). A session's read mark (the highest record of its
//! peer it took, whatever the record carried) is stored before what a batch delivered is
//! acted on ([`SecureLayer::persist_read_marks`]), so a restored session takes none of those
//! records again; a session whose save fails ends, and what it delivered in the batch is
//! dropped. Log lines a peer can cause go through a
//! [`LogLimiter`]; the counters stay exact. docs/security.md, "DTLS tables under a flood".
//!
//! The same port also serves the handshake as a CoAP resource ([`sigil_dtls_coap`], the
//! `coap_carrier` setting): a datagram whose first byte is not a DTLS content type is a CoAP
//! message for the carrier's [`Endpoint`]s ([`CARRIER_SHARDS`] fixed tables of
//! [`CARRIER_SLOTS`] handshakes each, a host always in the same one, chosen by a hash keyed per
//! process; a share of it per host; the same per-host handshake rate; admitted only with room
//! in the session table). A handshake completed there leaves the endpoint at once and becomes an ordinary
//! session here: the same budgets, connection IDs, database rows and resumption cache, and its
//! application data arrives as records like any other session's.
//!
//! This module holds the tables, the routing of records to them (by address, then by
//! connection ID) and the entry points (`handle_datagram`, `handle_timeout`, `poll_timeout`,
//! `send`); the rest is in its parts: `config` (the settings), `trust` (PSKs, keys,
//! certificates, revocation), `admission` (cookies, budgets, who may start a handshake and
//! what gives way), `carrier` (the CoAP carrier's tables), `session` (a completed handshake
//! becomes a session), `resume` (the resumption cache) and `persist` (sessions kept across
//! restarts).
//!
//! [`Endpoint`]: sigil_dtls_coap::Endpoint

mod admission;
mod carrier;
mod config;
mod persist;
mod resume;
mod session;
mod trust;

pub use admission::{
    CARRIER_HANDSHAKE_SHIELD, COOKIE_ROTATION, HANDSHAKE_SHIELD, RATE_HOSTS, SUSPECT_MEMORY,
};
pub use carrier::{CARRIER_BYTES, CARRIER_SHARDS, CARRIER_SLOTS};
pub use config::DtlsConfig;
pub use persist::SESSION_RESERVE_AHEAD;
pub use resume::RESUMPTION_BYTES;
pub use trust::SharedTrust;

use admission::{caps, StartRate, TotalRate};
use carrier::{Carrier, HOST_BYTES};
use resume::Cached;
use trust::{forget_claimed, take_claimed};

use crate::auth::PeerAuth;
use crate::budget::{shrink_if_sparse, ByteBudget, Host, ENTRY_OVERHEAD};
use crate::log::LogLimiter;
use crate::stats::Stats;
use crate::store::Store;
use sigil_crypto::{CryptoError, CryptoProvider, PublicKey, Rng, RustCrypto, SecretKey};
use sigil_dtls::record::RecordFacts;
use sigil_dtls::wire::ContentType;
use sigil_dtls::{Connection, CookieKey, ServerCredentials, Session, Traffic, MAX_DATAGRAM};
use sigil_dtls_coap::EndpointConfig;
use sigil_identity::Identity;
use sigil_time::{Instant, UnixTime};
use std::collections::{HashMap, HashSet, VecDeque};
use std::mem::size_of;
use std::net::SocketAddr;
use std::time::Duration;

/// Largest CoAP message carried in one record (the DTLS layer's application-data cap); the
/// dispatcher uses 512-byte blocks over DTLS so responses fit.
pub const MAX_COAP_OVER_DTLS: usize = sigil_dtls::MAX_APP_DATA;

/// Length of the connection IDs the server hands out (RFC 9146): 8 random bytes.
pub const CID_LEN: usize = 8;

type Conn = Connection<RustCrypto, SharedTrust>;

/// A peer in one of the tables: `K` is a handshaking [`Conn`] or an established [`Traffic`].
struct Peer<K> {
    conn: Box<K>,
    /// The source host the entry is charged to: the one that made the handshake (a session
    /// that follows its connection ID to another address stays charged to it).
    host: Host,
    /// The connection ID this server gave the peer (RFC 9146), if the peer took one.
    cid: Option<[u8; CID_LEN]>,
    /// The caller's clock at creation and at the last authenticated datagram.
    created: Instant,
    last_seen: Instant,
    /// A handshake's last progress: its creation (kept when its client starts over from the
    /// same address), then each client flight after the ClientHello that moved it on. A
    /// stranger may push it out only [`HANDSHAKE_SHIELD`] after this, and under pressure it
    /// expires `crowded_handshake_timeout` after this.
    progress: Instant,
    /// Whether a client flight after the ClientHello moved it on: those that never did (an
    /// attacker's ClientHello and silence) give way first.
    progressed: bool,
    /// The cached session the ClientHello asked to resume (at most one known handshake per
    /// cached session ID).
    resuming: Option<[u8; 32]>,
    /// The client random of the ClientHello that started the handshake.
    hello_random: [u8; 32],
    auth: Option<PeerAuth>,
    /// The session's row in the database (`dtls_sessions.id`); 0 for a handshake.
    row: i64,
    /// What the handshake's peer claimed (PSK identity or key identity), for the log line if
    /// the handshake fails; `None` before it claims and for a session.
    claimed: Option<String>,
    /// A handshake whose peer completed one before (its address has a session, or it resumes
    /// a cached session made from its host, the only known handshake resuming it): kept over
    /// strangers' handshakes when the table is crowded.
    known: bool,
    /// A session made over the CoAP carrier: its resource's ID (`dtls/<id>`), whose `DELETE`
    /// is answered 4.05 for as long as the session lives.
    carrier_id: Option<u32>,
}

/// What one half-open handshake is charged: the boxed connection state (its transcript hash,
/// reassembly buffer, messages ahead and flight are all inline: about 16 KB on x86-64 with the
/// `x509` feature the server is built with; tools/dtls-state-size), the table entry (address
/// and [`Peer`] fields) and the map's bookkeeping. The datagrams a flight sends are written
/// into the caller's batch and freed with it, so they are not held per peer.
pub const HANDSHAKE_BYTES: usize =
    size_of::<Conn>() + size_of::<SocketAddr>() + size_of::<Peer<Conn>>() + ENTRY_OVERHEAD;

/// What one established session is charged: the boxed [`Traffic`] state (keys, replay
/// window, peer; about 4.3 KB), the table entry, its connection-ID index entry and the
/// bookkeeping.
pub const SESSION_BYTES: usize = size_of::<Traffic<RustCrypto>>()
    + size_of::<SocketAddr>()
    + size_of::<Peer<Traffic<RustCrypto>>>()
    + CID_LEN
    + size_of::<SocketAddr>()
    + 2 * ENTRY_OVERHEAD;

/// The gauge names (`mem.<name>.*`) of the three tables.
pub const HANDSHAKE_TABLE: &str = "dtls_handshakes";
pub const SESSION_TABLE: &str = "dtls_sessions";
pub const RESUMPTION_TABLE: &str = "dtls_resumption";

/// How often idle sessions, stale handshakes and old resumable sessions are swept out.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What the tables drain from either kind of peer.
trait Outputs {
    fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize>;
    fn poll_app_data(&mut self, out: &mut [u8]) -> Option<usize>;
}

impl Outputs for Conn {
    fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        Connection::poll_transmit(self, now, out)
    }
    fn poll_app_data(&mut self, out: &mut [u8]) -> Option<usize> {
        Connection::poll_app_data(self, out)
    }
}

impl Outputs for Traffic<RustCrypto> {
    fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        Traffic::poll_transmit(self, now, out)
    }
    fn poll_app_data(&mut self, out: &mut [u8]) -> Option<usize> {
        Traffic::poll_app_data(self, out)
    }
}

/// An authenticated CoAP message from a session.
pub struct Delivered {
    pub peer: SocketAddr,
    pub auth: Option<PeerAuth>,
    pub message: Vec<u8>,
}

/// The server's DTLS peers.
pub struct SecureLayer {
    config: DtlsConfig,
    key: SecretKey,
    cookie: CookieKey,
    trust: SharedTrust,
    handshakes: HashMap<SocketAddr, Peer<Conn>>,
    handshake_bytes: ByteBudget,
    sessions: HashMap<SocketAddr, Peer<Traffic<RustCrypto>>>,
    session_bytes: ByteBudget,
    /// Sessions by connection ID, to follow a client whose address changed.
    by_cid: HashMap<[u8; CID_LEN], SocketAddr>,
    /// Resumable sessions by session ID, and their IDs oldest first.
    cache: HashMap<[u8; 32], Cached>,
    cache_order: VecDeque<[u8; 32]>,
    cache_bytes: ByteBudget,
    start_rate: StartRate,
    /// Evictions from the handshake table, in all: `max_handshakes` per `handshake_timeout`
    /// and a reserve of a sixteenth of the table.
    evictions: TotalRate,
    /// Cached session IDs a known half-open handshake over the CoAP carrier asked to resume,
    /// and from which address: one known handshake per cached session.
    carrier_resuming: HashMap<[u8; 32], SocketAddr>,
    /// Hosts whose last handshake started (on either carrier) has not completed, and when it
    /// started: for [`SUSPECT_MEMORY`] after it, unless the host completes one, a host holding
    /// no half-open handshake is a suspect and takes only free slots (at most [`RATE_HOSTS`]).
    unfinished: HashMap<Host, Instant>,
    next_sweep: Instant,
    next_cookie_rotation: Instant,
    log: LogLimiter,
    stats: Stats,
    buf: Vec<u8>,
    /// Where established sessions are kept across restarts (a connection of its own to the
    /// server's database), and the key their records are MACed under.
    saved: Option<Store>,
    storage_key: [u8; 32],
    /// The last session row id handed out.
    next_row: i64,
    /// The caller's Unix time at the last call (rows record when they were saved).
    wall: UnixTime,
    /// The handshake as a CoAP resource: empty if disabled, else [`CARRIER_SHARDS`] tables.
    carrier: Vec<Box<Carrier>>,
    /// Sessions that accepted records above their persisted read mark in this batch.
    marks_due: HashSet<SocketAddr>,
    /// The addresses of sessions ended in this batch because a save failed while their read
    /// mark was due: what they delivered there earlier in the batch is dropped.
    unmarked: Vec<SocketAddr>,
    /// The trust's generation the sessions were last checked against for revocations.
    trust_seen: u64,
    /// Picks a host's table.
    shard_of: std::collections::hash_map::RandomState,
}

impl SecureLayer {
    /// `key` is the server's raw public key credential; `cookie_secret` keys the stateless
    /// cookies (random per process).
    pub fn new(
        config: DtlsConfig,
        key: SecretKey,
        cookie_secret: [u8; 32],
        trust: SharedTrust,
        stats: Stats,
    ) -> Self {
        let handshake_bytes = ByteBudget::new(
            HANDSHAKE_TABLE,
            caps(
                config.max_handshakes,
                config.max_handshakes_per_host,
                HANDSHAKE_BYTES,
            ),
        );
        let session_bytes = ByteBudget::new(
            SESSION_TABLE,
            caps(
                config.max_sessions,
                config.max_sessions_per_host,
                SESSION_BYTES,
            ),
        );
        let evictions = TotalRate::new(
            config.max_handshakes,
            config.handshake_timeout,
            (config.max_handshakes / 16).max(4),
        );
        let start_rate = StartRate::new(
            config.handshake_burst_per_host,
            config.handshakes_per_host_per_sec,
        );
        let cache_bytes = ByteBudget::new(
            RESUMPTION_TABLE,
            caps(
                config.max_sessions,
                config.max_sessions_per_host,
                RESUMPTION_BYTES,
            ),
        );
        // The key saved sessions are MACed under: only this server (holding its DTLS key)
        // can have written a row it restores.
        let storage_key = RustCrypto.hmac_sha256(&key.to_bytes(), &[b"sigil-server dtls sessions"]);
        let shards = if config.coap_carrier {
            CARRIER_SHARDS
        } else {
            0
        };
        let endpoint = EndpointConfig {
            dtls: config.dtls,
            block_szx: 6,
            max_per_peer: config.max_handshakes_per_host.clamp(1, CARRIER_SLOTS / 2),
            host_prefix: HOST_BYTES,
            handshake_timeout: config.handshake_timeout,
            crowded_handshake_timeout: config.crowded_handshake_timeout,
            handshake_shield: CARRIER_HANDSHAKE_SHIELD,
            idle_timeout: config.session_idle,
        };
        let secret = RustCrypto.hmac_sha256(&cookie_secret, &[b"sigil-server coap carrier"]);
        let carrier = (0..shards)
            .map(|_| {
                Box::new(Carrier::new(
                    RustCrypto,
                    trust.clone(),
                    ServerCredentials::NONE,
                    endpoint,
                    secret,
                ))
            })
            .collect();
        let mut layer = Self {
            config,
            key,
            cookie: CookieKey::new(cookie_secret),
            trust,
            handshakes: HashMap::new(),
            handshake_bytes,
            sessions: HashMap::new(),
            session_bytes,
            by_cid: HashMap::new(),
            cache: HashMap::new(),
            cache_order: VecDeque::new(),
            cache_bytes,
            start_rate,
            evictions,
            carrier_resuming: HashMap::new(),
            unfinished: HashMap::new(),
            next_sweep: Instant::ZERO,
            next_cookie_rotation: Instant::ZERO.saturating_add(COOKIE_ROTATION),
            log: LogLimiter::default(),
            stats,
            buf: vec![0u8; MAX_DATAGRAM],
            saved: None,
            storage_key: [0; 32],
            next_row: 0,
            wall: UnixTime::from_secs(0),
            carrier,
            marks_due: HashSet::new(),
            unmarked: Vec::new(),
            shard_of: Default::default(),
            trust_seen: 0,
        };
        layer.storage_key = storage_key;
        layer.publish();
        layer
    }

    /// The server's public key (clients pin its identity).
    pub fn public_key(&self) -> Result<PublicKey, CryptoError> {
        RustCrypto.public_key(&self.key)
    }

    pub fn trust(&self) -> &SharedTrust {
        &self.trust
    }

    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    pub fn handshakes(&self) -> usize {
        self.handshakes.len()
    }

    /// The handshake table's bytes, per host and in total.
    pub fn handshake_budget(&self) -> &ByteBudget {
        &self.handshake_bytes
    }

    /// The session table's bytes, per host and in total.
    pub fn session_budget(&self) -> &ByteBudget {
        &self.session_bytes
    }

    /// The resumption cache's bytes, per host and in total.
    pub fn resumption_budget(&self) -> &ByteBudget {
        &self.cache_bytes
    }

    /// Publishes the tables' gauges (`mem.dtls_handshakes.*`, `mem.dtls_sessions.*`,
    /// `mem.dtls_resumption.*`) and how many hosts have a handshake-rate bucket
    /// (`dtls.rate_hosts`, at most [`RATE_HOSTS`]); done on every
    /// [`SecureLayer::handle_timeout`].
    pub fn publish(&self) {
        self.handshake_bytes.publish(&self.stats);
        self.session_bytes.publish(&self.stats);
        self.cache_bytes.publish(&self.stats);
        self.stats
            .set("dtls.rate_hosts", self.start_rate.hosts.len() as u64);
        self.publish_carrier();
    }

    /// The authenticated identity of an established session.
    pub fn session_auth(&self, peer: &SocketAddr) -> Option<&PeerAuth> {
        self.sessions.get(peer)?.auth.as_ref()
    }

    fn count(&self, key: &str) {
        self.stats.incr(key);
    }

    /// Seconds of the caller's monotonic clock, for the log limiter's windows.
    fn secs(now: Instant) -> i64 {
        i64::try_from(now.as_millis() / 1000).unwrap_or(i64::MAX)
    }

    /// Handles one datagram from `peer` at `now`, with the caller's Unix time `unix` (for
    /// certificates) and randomness `rng` (server randoms, ephemeral keys, session and
    /// connection IDs). Datagrams to send go to `out`; returns the CoAP messages it carried,
    /// with the session's identity.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        unix: UnixTime,
        rng: &mut dyn Rng,
        peer: SocketAddr,
        datagram: &[u8],
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) -> Vec<Delivered> {
        self.count("dtls.received");
        self.wall = unix;
        self.end_revoked_sessions(now, out);
        forget_claimed();
        if !self.carrier.is_empty() && !sigil_dtls_coap::is_dtls_record(datagram) {
            return self.carrier_datagram(now, unix, rng, peer, datagram, out);
        }
        let facts = RecordFacts::parse(datagram, CID_LEN).ok();
        let client_hello = facts.as_ref().is_some_and(RecordFacts::is_client_hello);
        // A ClientHello with a new random from a peer mid-handshake is a client that started
        // over (e.g. rebooted): its old handshake is abandoned instead of blocking it until
        // the handshake timeout.
        // Only a valid cookie (the stateless path) replaces it, so a spoofed ClientHello cannot
        // abort someone else's handshake.
        let random = facts
            .as_ref()
            .and_then(|f| f.client_hello.as_ref())
            .map(|ch| *ch.random);
        if client_hello
            && self
                .handshakes
                .get(&peer)
                .is_some_and(|p| random.is_some_and(|r| r != p.hello_random))
        {
            self.new_handshake(now, unix, rng, peer, datagram, facts.as_ref(), out);
            return Vec::new();
        }
        if let Some(mut p) = self.handshakes.remove(&peer) {
            let state = p.conn.state();
            let r = p
                .conn
                .handle_datagram(now, datagram)
                .and_then(|_| p.conn.failure().map_or(Ok(()), Err));
            // A client flight that moved the handshake on (not a repeat, not a forgery: the
            // connection's state changed without failing) renews its shield.
            if r.is_ok() && p.conn.state() != state {
                p.progress = now;
                p.progressed = true;
            }
            if let Some(c) = take_claimed() {
                p.claimed = Some(c);
            }
            self.flush(now, peer, &mut p, out);
            match r {
                Err(e) => {
                    let claimed = p.claimed.take().unwrap_or_else(|| "-".into());
                    self.release_handshake(p);
                    self.count("dtls.handshake_failed");
                    if matches!(
                        e,
                        sigil_dtls::Error::UnknownPskIdentity
                            | sigil_dtls::Error::UntrustedKey
                            | sigil_dtls::Error::BadFinished
                    ) {
                        // A device not (or no longer) provisioned: the operator's to fix, so
                        // at the default level.
                        crate::limited!(self.log, Self::secs(now), "dtls.handshake_refused_identity", warn, %peer, claimed = %claimed, error = %e, "DTLS handshake refused (identity not provisioned, revoked or without a PSK)");
                    } else {
                        crate::limited!(self.log, Self::secs(now), "dtls.handshake_failed", debug, %peer, claimed = %claimed, error = %e, "DTLS handshake failed");
                    }
                    return Vec::new();
                }
                Ok(()) if p.conn.is_established() => {
                    return self.established(now, peer, p, out);
                }
                Ok(()) => {
                    self.handshakes.insert(peer, p);
                    return Vec::new();
                }
            }
        }
        if client_hello {
            self.new_handshake(now, unix, rng, peer, datagram, facts.as_ref(), out);
            return Vec::new();
        }
        let (mut p, moved_from) = match self.sessions.remove(&peer) {
            Some(p) => (p, None),
            None => match facts.as_ref().and_then(|f| self.session_by_cid(f)) {
                Some((old, p)) => (p, Some(old)),
                None => {
                    self.count("dtls.no_session");
                    return Vec::new();
                }
            },
        };
        let from = moved_from.unwrap_or(peer);
        if p.conn.core().reserved_left() == 0 && !self.save_session(now, peer, &mut p) {
            self.release_unsaved(from, p);
            return Vec::new();
        }
        let r = p
            .conn
            .handle_datagram(now, datagram)
            .and_then(|received| p.conn.failure().map_or(Ok(received), Err));
        self.flush(now, peer, &mut p, out);
        let received = match r {
            Ok(received) => received,
            Err(e) => {
                self.release_session(p);
                self.count("dtls.session_closed");
                crate::limited!(self.log, Self::secs(now), "dtls.session_closed", debug, %peer, error = %e, "DTLS session ended");
                return Vec::new();
            }
        };
        if received.dropped > 0 {
            self.count("dtls.records_dropped");
        }
        // A datagram from a new address moves the session only if every record in it
        // authenticated under the session's keys and passed its replay window (RFC 9146 §6),
        // as the connection reports it.
        let authenticated = received.is_authenticated();
        let at = match moved_from {
            Some(old) if !authenticated => old,
            Some(_) => {
                if !self.save_session(now, peer, &mut p) {
                    self.release_unsaved(from, p);
                    return Vec::new();
                }
                self.count("dtls.address_changed");
                crate::limited!(self.log, Self::secs(now), "dtls.address_changed", debug, %peer, "DTLS session followed its connection ID to a new address");
                peer
            }
            None => peer,
        };
        let delivered = if at == peer {
            self.drain(peer, &mut p)
        } else {
            Vec::new()
        };
        if !delivered.is_empty() {
            p.last_seen = now;
        }
        // Its read mark is persisted before what it delivered is acted on
        // ([`SecureLayer::persist_read_marks`], once per batch), whatever the records carried:
        // one that delivered nothing (a retransmitted Finished, an alert) moved the window
        // too, and taken again after a restart it would move the session by connection ID.
        if p.conn.core().read_mark_passed() && self.saved.is_some() {
            self.marks_due.insert(at);
        }
        if let Some(cid) = p.cid {
            self.by_cid.insert(cid, at);
        }
        if let Some(replaced) = self.sessions.insert(at, p) {
            // The new address had a session of its own (another client behind a rebinding
            // NAT): that one ends.
            self.release_session(replaced);
        }
        delivered
    }

    /// The session a `tls12_cid` record from an unknown address names, taken out of the
    /// table (with its old address).
    fn session_by_cid(
        &mut self,
        facts: &RecordFacts<'_>,
    ) -> Option<(SocketAddr, Peer<Traffic<RustCrypto>>)> {
        if facts.content_type != ContentType::TLS12_CID {
            return None;
        }
        let cid: [u8; CID_LEN] = facts.cid.try_into().ok()?;
        let old = *self.by_cid.get(&cid)?;
        match self.sessions.remove(&old) {
            Some(p) if p.cid == Some(cid) => Some((old, p)),
            Some(p) => {
                self.sessions.insert(old, p);
                self.by_cid.remove(&cid);
                None
            }
            None => {
                self.by_cid.remove(&cid);
                None
            }
        }
    }

    fn forget_cid(&mut self, cid: Option<[u8; CID_LEN]>) {
        if let Some(cid) = cid {
            self.by_cid.remove(&cid);
            shrink_if_sparse(&mut self.by_cid);
        }
    }

    /// A handshake that left the table for good (failed, timed out, evicted, or became a
    /// session): its bytes go back to its host.
    fn release_handshake(&mut self, p: Peer<Conn>) {
        self.handshake_bytes.refund(p.host, HANDSHAKE_BYTES);
        shrink_if_sparse(&mut self.handshakes);
    }

    /// Ends session `p`, last at `from`, whose save failed. If its read mark was due (it
    /// delivered there earlier in this batch), [`SecureLayer::persist_read_marks`] returns
    /// `from` with the failed peers, so that what it delivered is dropped too.
    fn release_unsaved(&mut self, from: SocketAddr, p: Peer<Traffic<RustCrypto>>) {
        if self.marks_due.remove(&from) {
            self.unmarked.push(from);
        }
        self.release_session(p);
    }

    /// A session that left the table for good (closed, replaced, idle).
    fn release_session(&mut self, p: Peer<Traffic<RustCrypto>>) {
        // Connection IDs are unique (`fresh_cid`), so no other session holds this one.
        self.forget_cid(p.cid);
        self.forget_stored(p.row);
        self.session_bytes.refund(p.host, SESSION_BYTES);
        shrink_if_sparse(&mut self.sessions);
    }

    /// A connection ID no session holds.
    fn fresh_cid(&self, rng: &mut dyn Rng) -> Option<[u8; CID_LEN]> {
        for _ in 0..8 {
            let mut cid = [0u8; CID_LEN];
            rng.fill(&mut cid).ok()?;
            if !self.by_cid.contains_key(&cid) {
                return Some(cid);
            }
        }
        None
    }

    /// Protects one CoAP message for an established session.
    pub fn send(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        message: &[u8],
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        let Some(mut p) = self.sessions.remove(&peer) else {
            self.count("dtls.send_without_session");
            return;
        };
        if p.conn.core().reserved_left() == 0 && !self.save_session(now, peer, &mut p) {
            self.release_session(p);
            return;
        }
        if let Err(e) = p.conn.send(message) {
            self.count("dtls.send_failed");
            crate::limited!(self.log, Self::secs(now), "dtls.send_failed", debug, %peer, error = %e, "cannot protect response");
        }
        self.flush(now, peer, &mut p, out);
        self.sessions.insert(peer, p);
    }

    /// Retransmissions and expiry; call at [`SecureLayer::poll_timeout`] or sooner. Only
    /// handshakes have timers: an established session retransmits nothing on its own. Stale
    /// handshakes, idle sessions and old resumable sessions are swept out (at most once a
    /// second) and the gauges published.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        unix: UnixTime,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        self.wall = unix;
        self.end_revoked_sessions(now, out);
        let due: Vec<SocketAddr> = self
            .handshakes
            .iter()
            .filter(|(_, p)| p.conn.poll_timeout().is_some_and(|t| t <= now))
            .map(|(a, _)| *a)
            .collect();
        for peer in due {
            let Some(mut p) = self.handshakes.remove(&peer) else {
                continue;
            };
            let r = p
                .conn
                .handle_timeout(now)
                .and_then(|()| p.conn.failure().map_or(Ok(()), Err));
            self.flush(now, peer, &mut p, out);
            match r {
                Ok(()) => {
                    self.handshakes.insert(peer, p);
                }
                Err(_) => {
                    self.release_handshake(p);
                    self.count("dtls.handshake_timeout");
                }
            }
        }
        if now >= self.next_sweep {
            self.next_sweep = now.saturating_add(SWEEP_EVERY);
            self.expire_handshakes(now);
            self.expire_sessions(now);
            self.expire_resumable(now);
            self.unfinished
                .retain(|_, t| now.saturating_since(*t) < SUSPECT_MEMORY);
            shrink_if_sparse(&mut self.unfinished);
            for ep in &mut self.carrier {
                ep.handle_timeout(now);
            }
        }
        if now >= self.next_cookie_rotation {
            self.next_cookie_rotation = now.saturating_add(COOKIE_ROTATION);
            self.cookie.rotate_derived(&RustCrypto);
            for ep in &mut self.carrier {
                ep.rotate_cookie_secret();
            }
            self.count("dtls.cookie_rotations");
        }
        for (kind, n) in self.log.flush(Self::secs(now)) {
            tracing::warn!(
                kind,
                suppressed = n,
                "similar log lines suppressed (counters are exact)"
            );
        }
        self.publish();
    }

    /// The earliest retransmission timer, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.handshakes
            .values()
            .filter_map(|p| p.conn.poll_timeout())
            .min()
    }

    /// Drops sessions without traffic for `session_idle` (a device that comes back
    /// handshakes again, or resumes).
    fn expire_sessions(&mut self, now: Instant) {
        let idle = self.config.session_idle;
        let old: Vec<SocketAddr> = self
            .sessions
            .iter()
            .filter(|(_, p)| now.saturating_since(p.last_seen) >= idle)
            .map(|(a, _)| *a)
            .collect();
        for a in old {
            if let Some(p) = self.sessions.remove(&a) {
                self.release_session(p);
                self.count("dtls.session_evicted_idle");
            }
        }
        let sessions = &self.sessions;
        self.by_cid
            .retain(|cid, addr| sessions.get(addr).is_some_and(|p| p.cid == Some(*cid)));
        shrink_if_sparse(&mut self.by_cid);
    }

    fn flush<K: Outputs>(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        p: &mut Peer<K>,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        while let Some(n) = p.conn.poll_transmit(now, &mut self.buf) {
            out.push((peer, self.buf[..n].to_vec()));
        }
    }

    fn drain<K: Outputs>(&mut self, peer: SocketAddr, p: &mut Peer<K>) -> Vec<Delivered> {
        let mut v = Vec::new();
        while let Some(n) = p.conn.poll_app_data(&mut self.buf) {
            self.count("dtls.app_records");
            v.push(Delivered {
                peer,
                auth: p.auth.clone(),
                message: self.buf[..n].to_vec(),
            });
        }
        v
    }

    /// Identities with a session (for tests and status).
    pub fn authenticated(&self) -> HashSet<Identity> {
        self.sessions
            .values()
            .filter_map(|p| p.auth.as_ref().map(|a| *a.identity()))
            .collect()
    }
}

/// The server's certificate chain, leaf first (empty without X.509).
fn chain_of(config: &DtlsConfig) -> Vec<&[u8]> {
    config.certificate_chain.iter().map(Vec::as_slice).collect()
}

/// What a ClientHello is offered (either carrier): the server's key, its chain, PSKs, a fresh
/// connection ID, the session it asks to resume, and the caller's Unix time `now`, at which a
/// client certificate chain is checked.
fn offer<'a>(
    config: &DtlsConfig,
    key: &'a SecretKey,
    chain: &'a [&'a [u8]],
    cid: Option<&'a [u8; CID_LEN]>,
    resume: Option<&'a Session>,
    now: UnixTime,
) -> ServerCredentials<'a> {
    ServerCredentials {
        issue_session_ids: config.resumption,
        resume: resume.filter(|_| config.resumption),
        connection_id: cid.map_or(&[][..], |c| &c[..]),
        psk: config.psk,
        key: (config.rpk || !chain.is_empty()).then_some(key),
        require_client_key: config.require_client_auth,
        chain: (!chain.is_empty()).then_some(chain),
        now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures docs/security.md quotes (x86-64, the server's feature set): an entry is
    /// charged at least its state, and not far beyond it.
    #[test]
    fn entry_charges_cover_the_state() {
        assert!(HANDSHAKE_BYTES > size_of::<Conn>());
        assert!(SESSION_BYTES > size_of::<Traffic<RustCrypto>>());
        assert!(RESUMPTION_BYTES > size_of::<Session>());
        if cfg!(target_pointer_width = "64") {
            assert!(
                (16_000..18_000).contains(&HANDSHAKE_BYTES),
                "{HANDSHAKE_BYTES}"
            );
            assert!((4_500..5_500).contains(&SESSION_BYTES), "{SESSION_BYTES}");
            assert!((300..600).contains(&RESUMPTION_BYTES), "{RESUMPTION_BYTES}");
            // docs/security.md: 8 tables of 8 handshakes over CoAP, about 116 KB each.
            assert!(
                (100_000..130_000).contains(&size_of::<Carrier>()),
                "{}",
                size_of::<Carrier>()
            );
        }
    }
}
