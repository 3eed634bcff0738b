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

use crate::auth::{Credentials, PeerAuth};
use crate::budget::{
    shrink_if_sparse, shrink_queue_if_sparse, ByteBudget, Caps, Host, Over, ENTRY_OVERHEAD,
};
use crate::log::LogLimiter;
use crate::stats::Stats;
use crate::store::{DtlsSessionRow, Store};
use sigil_crypto::{CryptoError, CryptoProvider, PublicKey, Rng, RustCrypto, SecretKey};
use sigil_dtls::keys::MAX_PSK_LEN;
use sigil_dtls::record::RecordFacts;
use sigil_dtls::wire::ContentType;
use sigil_dtls::{
    Config, Connection, CookieKey, Peer as DtlsPeer, SavedAssociation, ServerCredentials, Session,
    Stateless, Traffic, Trust, MAX_DATAGRAM,
};
use sigil_dtls_coap::{Endpoint, EndpointConfig, Standing};
use sigil_identity::Identity;
use sigil_time::{Instant, UnixTime};
use std::collections::{HashMap, HashSet, VecDeque};
use std::mem::size_of;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Largest CoAP message carried in one record (the DTLS layer's application-data cap); the
/// dispatcher uses 512-byte blocks over DTLS so responses fit.
pub const MAX_COAP_OVER_DTLS: usize = sigil_dtls::MAX_APP_DATA;

/// Length of the connection IDs the server hands out (RFC 9146): 8 random bytes.
pub const CID_LEN: usize = 8;

/// DTLS settings of the server.
#[derive(Clone, Debug)]
pub struct DtlsConfig {
    /// The coaps:// socket (RFC 7252: port 5684).
    pub listen: SocketAddr,
    pub dtls: Config,
    /// Accept TLS_PSK_WITH_AES_128_CCM_8 with keys provisioned per identity.
    pub psk: bool,
    /// Accept TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with raw public keys.
    pub rpk: bool,
    /// With raw public keys: require the client's key (mutual authentication). Without it a
    /// client may stay anonymous and is treated like a plain-CoAP client.
    pub require_client_auth: bool,
    /// Most handshakes in progress (all peers): the handshake table's byte budget is this
    /// many times [`HANDSHAKE_BYTES`].
    pub max_handshakes: usize,
    /// Most handshakes in progress from one source host (IPv4 address or IPv6 /64, whatever
    /// the ports): that host's share of the handshake table.
    pub max_handshakes_per_host: usize,
    /// Most established sessions (the session table's budget is this many times
    /// [`SESSION_BYTES`]; the resumption cache's, this many times [`RESUMPTION_BYTES`]).
    pub max_sessions: usize,
    /// Most sessions (and cached resumable sessions) charged to one source host. A site
    /// behind one NAT address needs one per device, so this is a large fraction of
    /// `max_sessions`, never all of it.
    pub max_sessions_per_host: usize,
    /// Most sessions one authenticated identity (a PSK's, a key's, a token's subject) holds
    /// at once, from however many addresses and hosts: at the cap, its least recently active
    /// session gives way to its new one (closed with an alert, `dtls.gave_way.identity_cap`).
    /// So one provisioned identity cannot fill the session table from many hosts and lock
    /// every new device out. Sessions without client authentication have no identity and
    /// are held only to the host and total budgets.
    pub max_sessions_per_identity: usize,
    /// Handshakes one source host may start (each costs the server its key exchange and,
    /// with keys, a signature) in a burst, then `handshakes_per_host_per_sec` sustained: a
    /// token bucket per host, so a host that fails its handshakes at once to start new ones
    /// cannot take the server's CPU. Buckets are kept for at most [`RATE_HOSTS`] hosts.
    pub handshake_burst_per_host: u32,
    /// Sustained handshake starts per second per source host (see above).
    pub handshakes_per_host_per_sec: u32,
    /// A handshake older than this is stale (evictable).
    pub handshake_timeout: Duration,
    /// Above half full, a half-open handshake without progress for this long is dropped
    /// first (on either carrier; never less than the carrier's shield, [`HANDSHAKE_SHIELD`] or
    /// [`CARRIER_HANDSHAKE_SHIELD`]), unless its peer is known: under pressure a handshake
    /// must move on within this long, so slots an attacker holds without progress give way.
    pub crowded_handshake_timeout: Duration,
    /// A session without traffic for this long is stale (evictable).
    pub session_idle: Duration,
    /// X.509 (RFC 7925 §4.4): the server's chain (leaf first, DER) for its key; clients that
    /// do not ask for a raw public key get it.
    pub certificate_chain: Vec<Vec<u8>>,
    /// Trust anchors (DER) for client certificates. A client certificate must lead to one
    /// of them and its key's identity `h(P)` must be on the authorized list.
    pub client_anchors: Vec<Vec<u8>>,
    /// The key `certificate_chain` certifies (replaces the server's stored raw key).
    pub certificate_key: Option<SecretKey>,
    /// Issue session IDs so clients can resume (abbreviated handshake, RFC 5246 §7.3). Costs
    /// 32 bytes in every full handshake's ServerHello.
    pub resumption: bool,
    /// How long a session may be resumed (abbreviated handshake) after its full handshake;
    /// the cache holds at most `max_sessions` entries (`max_sessions_per_host` per host); when
    /// full, the oldest entry of the host holding the most is dropped first.
    pub session_lifetime: Duration,
    /// Also serve the handshake as a CoAP resource on this port (`PUT /dtls`, sigil-dtls-coap).
    pub coap_carrier: bool,
}

impl DtlsConfig {
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            dtls: Config::default(),
            psk: true,
            rpk: true,
            require_client_auth: true,
            max_handshakes: 256,
            max_handshakes_per_host: 16,
            max_sessions: 4096,
            max_sessions_per_host: 1024,
            max_sessions_per_identity: 16,
            handshake_burst_per_host: 32,
            handshakes_per_host_per_sec: 8,
            handshake_timeout: Duration::from_secs(30),
            crowded_handshake_timeout: Duration::from_secs(8),
            session_idle: Duration::from_secs(3600),
            certificate_chain: Vec::new(),
            client_anchors: Vec::new(),
            certificate_key: None,
            resumption: true,
            session_lifetime: Duration::from_secs(24 * 3600),
            coap_carrier: true,
        }
    }
}

/// What DTLS trusts, shared by every connection and refreshed from the authorized list, with
/// the time certificates are checked at (the caller's, set on every call into the layer).
/// The last field counts [`SharedTrust::replace`]s, so the layer notices new credentials.
#[derive(Clone, Default)]
pub struct SharedTrust(
    Arc<RwLock<Credentials>>,
    Arc<Vec<Vec<u8>>>,
    Arc<AtomicI64>,
    Arc<AtomicU64>,
);

impl SharedTrust {
    /// With trust anchors for client certificates.
    pub fn with_anchors(anchors: Vec<Vec<u8>>) -> Self {
        Self(
            Arc::default(),
            Arc::new(anchors),
            Arc::default(),
            Arc::default(),
        )
    }

    /// How many times the credentials were replaced.
    fn generation(&self) -> u64 {
        self.3.load(Ordering::Acquire)
    }

    /// Whether `auth` speaks for a revoked identity: a PSK or raw public key of one, or a
    /// token issued to one.
    fn is_revoked(&self, auth: &PeerAuth) -> bool {
        self.0
            .read()
            .is_ok_and(|g| g.revoked.contains(auth.identity()))
    }

    /// The time certificate chains are checked at from now on.
    fn set_time(&self, now: UnixTime) {
        self.2.store(now.as_secs(), Ordering::Relaxed);
    }

    /// New credentials; the layer ends the sessions of identities they revoke at its next
    /// call ([`SecureLayer::handle_datagram`], [`SecureLayer::handle_timeout`]).
    pub fn replace(&self, c: Credentials) {
        if let Ok(mut g) = self.0.write() {
            *g = c;
        }
        self.3.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether `auth` is the session of a PSK-only node, which is never kept across a restart.
    fn is_psk_node(&self, auth: Option<&PeerAuth>) -> bool {
        match auth {
            Some(PeerAuth::Psk(id)) => self.0.read().is_ok_and(|g| g.psk_nodes.contains(id)),
            _ => false,
        }
    }

    /// The client a token's PoP key speaks for.
    fn token_subject(&self, kid: &[u8]) -> Option<Identity> {
        self.0.read().ok()?.token_psks.get(kid).map(|(_, s)| *s)
    }

    fn identity_of_key(key: &PublicKey) -> Option<Identity> {
        Identity::of_key(&RustCrypto, key, b"").ok()
    }
}

impl Trust for SharedTrust {
    /// The PSK identity is the text form of a provisioned identity (any label form).
    /// An identity that starts with [`crate::authz::KID_PREFIX`] is the kid of a token's PoP
    /// key (RFC 9202 §3.3).
    fn psk(&self, identity: &[u8], key: &mut [u8; MAX_PSK_LEN]) -> Option<usize> {
        // The peer chose these bytes: cleaned for the log.
        let shown = crate::context::peer_text(&String::from_utf8_lossy(identity));
        refused_identity(format!("{shown} (PSK identity)"));
        let g = self.0.read().ok()?;
        let psk = if identity.first() == Some(&crate::authz::KID_PREFIX) {
            &g.token_psks.get(identity)?.0
        } else {
            let id = Identity::parse(std::str::from_utf8(identity).ok()?).ok()?;
            g.psks.get(&id)?
        };
        key.get_mut(..psk.len())?.copy_from_slice(psk);
        Some(psk.len())
    }

    /// A raw public key is trusted when its identity `h(P)` is on the authorized list.
    fn trusted_key(&self, key: &PublicKey) -> bool {
        let Some(id) = Self::identity_of_key(key) else {
            return false;
        };
        refused_identity(format!("{id} (key)"));
        self.0
            .read()
            .is_ok_and(|g| g.authorized.contains(&id) || g.token_keys.contains(&id))
    }

    /// A certificate chain must reach a configured anchor at the current time, and the
    /// certified key must be one the authorized list trusts: the CA vouches for the key,
    /// provisioning still decides who may connect.
    fn certificate_chain(&self, chain: &[&[u8]]) -> Result<PublicKey, sigil_dtls::Error> {
        let anchors: Vec<&[u8]> = self.1.iter().map(Vec::as_slice).collect();
        let now = UnixTime::from_secs(self.2.load(Ordering::Relaxed));
        let key = sigil_dtls::x509::verify_chain(&RustCrypto, chain, &anchors, now)?;
        if !self.trusted_key(&key) {
            return Err(sigil_dtls::Error::UntrustedKey);
        }
        Ok(key)
    }
}

std::thread_local! {
    /// The identity the datagram being processed on this thread claimed in a handshake (its
    /// PSK identity or its key's identity). Cleared as each datagram starts
    /// ([`forget_claimed`]) and taken into the handshake's own state ([`Peer::claimed`])
    /// after it, so a log line names only what that handshake's peer claimed.
    static CLAIMED: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

fn refused_identity(claimed: String) {
    CLAIMED.with(|c| *c.borrow_mut() = Some(claimed));
}

/// What this datagram's handshake claimed, if it claimed anything (taken).
fn take_claimed() -> Option<String> {
    CLAIMED.with(|c| c.borrow_mut().take())
}

/// Drops whatever an earlier call left (a check of a stored session's key, a handshake that
/// claimed and went on): nothing carries over to another peer's datagram.
fn forget_claimed() {
    take_claimed();
}

type Conn = Connection<RustCrypto, SharedTrust>;

/// The handshakes a CoAP-carrier table refused on a flight (4.03), so far.
fn refused_flights(ep: &Carrier) -> u64 {
    let c = ep.counters();
    c.handshake_failed + c.refused_hello
}

/// The identity an established session speaks for, from the peer its handshake proved.
fn auth_of(traffic: &Traffic<RustCrypto>, trust: &SharedTrust) -> Option<PeerAuth> {
    match traffic.peer() {
        DtlsPeer::Key { key, .. } => {
            SharedTrust::identity_of_key(key).map(|identity| PeerAuth::RawPublicKey {
                identity,
                key: *key,
            })
        }
        DtlsPeer::Psk { .. } => {
            let id = traffic.psk_identity();
            if id.first() == Some(&crate::authz::KID_PREFIX) {
                trust.token_subject(id).map(|subject| PeerAuth::Token {
                    kid: id.to_vec(),
                    subject,
                })
            } else {
                std::str::from_utf8(id)
                    .ok()
                    .and_then(|t| Identity::parse(t).ok())
                    .map(PeerAuth::Psk)
            }
        }
        DtlsPeer::Anonymous(_) => None,
    }
}

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

/// A resumable session in the cache, with when it was made and the host it is charged to.
struct Cached {
    session: Session,
    made: Instant,
    host: Host,
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

/// What one cached resumable session is charged: the [`Session`] (ID, master secret, peer),
/// its key and its place in the age queue, and the bookkeeping.
pub const RESUMPTION_BYTES: usize = 32 + size_of::<Cached>() + 32 + ENTRY_OVERHEAD;

/// Handshakes one of the CoAP carrier's tables holds at once; a host gets at most half of its
/// table, and no more than `max_handshakes_per_host`.
pub const CARRIER_SLOTS: usize = 8;

/// The carrier's tables (hosts are spread over them by a keyed hash).
pub const CARRIER_SHARDS: usize = 8;

/// One of the carrier's endpoints: a fixed table (about 14.5 KB a slot), allocated once.
type Carrier = Endpoint<'static, RustCrypto, SharedTrust, CARRIER_SLOTS>;

/// What the carrier's tables take, whatever their peers do.
pub const CARRIER_BYTES: usize = CARRIER_SHARDS * size_of::<Carrier>();

/// The gauge names (`mem.<name>.*`) of the three tables.
pub const HANDSHAKE_TABLE: &str = "dtls_handshakes";
pub const SESSION_TABLE: &str = "dtls_sessions";
pub const RESUMPTION_TABLE: &str = "dtls_resumption";

/// How often idle sessions, stale handshakes and old resumable sessions are swept out.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How often the cookie secrets turn (RFC 6347 §4.2.1): a cookie seen on the wire is good for
/// at most two of these, from its peer address and for its ClientHello only.
pub const COOKIE_ROTATION: Duration = Duration::from_secs(60);

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

/// Why a ClientHello with a valid cookie got no handshake: its counter, for the stats and the
/// rate-limited log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// The host already holds its share of half-open handshakes.
    HostHandshakes,
    /// The handshake table is full and no host holds more than the newcomer's would.
    Handshakes,
    /// The host's share of sessions is taken by live sessions (and its own handshakes).
    HostSessions,
    /// The session table is full of live sessions (and handshakes that may become some).
    Sessions,
    /// The host started its burst of handshakes and is above its sustained rate.
    HostRate,
    /// The table is full and the total budget of evictions is spent for now.
    EvictionBudget,
}

/// How long after its last progress a stranger's half-open handshake is safe from newcomers
/// (on the record layer): RFC 6347 §4.2.4.1 retransmits after 1 s, then 2 s, then 4 s, so a
/// client whose flight (or the server's answer) is lost twice still sends the flight that
/// moves its handshake on within 1 + 2 + 4 = 7 s.
pub const HANDSHAKE_SHIELD: Duration = Duration::from_secs(7);

/// How long after its last progress a stranger's half-open handshake over the CoAP carrier is
/// safe from newcomers: one CoAP retransmission sequence (RFC 7252 §4.8: ACK_TIMEOUT 2 s,
/// doubled on each of the first retransmissions: 2 + 4 + 8 = 14 s), and a second for the
/// random factor's spread and a signature on a slow device.
pub const CARRIER_HANDSHAKE_SHIELD: Duration = Duration::from_secs(15);

/// A token bucket for the whole table (thousandths of an eviction): how many half-open
/// handshakes newcomers may push out, whatever the number of their hosts.
struct TotalRate {
    tokens: u64,
    burst: u64,
    /// Tokens added every `period_ms`.
    per: u64,
    period_ms: u64,
    at: Instant,
}

impl TotalRate {
    /// `per` evictions every `period`, and a reserve of `burst`.
    fn new(per: usize, period: Duration, burst: usize) -> Self {
        let burst = (burst.max(1) as u64) * 1000;
        Self {
            tokens: burst,
            burst,
            per: per.max(1) as u64,
            period_ms: (period.as_millis().clamp(1, u128::from(u32::MAX))) as u64,
            at: Instant::ZERO,
        }
    }

    fn refill(&mut self, now: Instant) {
        let ms = now
            .saturating_since(self.at)
            .as_millis()
            .min(u128::from(u32::MAX)) as u64;
        let add = ms.saturating_mul(self.per).saturating_mul(1000) / self.period_ms;
        if add > 0 {
            self.tokens = self.tokens.saturating_add(add).min(self.burst);
            self.at = now;
        }
    }

    fn has(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= 1000
    }

    fn take(&mut self, now: Instant) -> bool {
        if !self.has(now) {
            return false;
        }
        self.tokens -= 1000;
        true
    }
}

impl Refusal {
    fn counter(self) -> &'static str {
        match self {
            Self::EvictionBudget => "dtls.refused_eviction_budget",
            Self::HostHandshakes => "dtls.refused_host_handshakes",
            Self::Handshakes => "dtls.refused_tables_full",
            Self::HostSessions => "dtls.refused_host_sessions",
            Self::Sessions => "dtls.refused_tables_full",
            Self::HostRate => "dtls.refused_host_rate",
        }
    }
}

/// Most hosts whose handshake-rate bucket is kept (about 48 B each: 196 KiB at most). A
/// bucket that has filled up again is the same as none and goes first; past that, the host
/// with the most tokens left (the least throttled) gives its bucket up.
pub const RATE_HOSTS: usize = 4096;

/// Handshake starts per source host: a token bucket in thousandths of a handshake.
struct StartRate {
    burst: u64,
    per_sec: u64,
    hosts: HashMap<Host, (u64, Instant)>,
}

impl StartRate {
    fn new(burst: u32, per_sec: u32) -> Self {
        Self {
            burst: u64::from(burst.max(1)) * 1000,
            per_sec: u64::from(per_sec),
            hosts: HashMap::new(),
        }
    }

    /// The tokens (thousandths) of a bucket at `now`.
    fn level(&self, (tokens, at): (u64, Instant), now: Instant) -> u64 {
        let ms = now
            .saturating_since(at)
            .as_millis()
            .min(u128::from(u32::MAX)) as u64;
        tokens
            .saturating_add(ms.saturating_mul(self.per_sec))
            .min(self.burst)
    }

    /// Whether `host`'s bucket holds a handshake start (nothing taken).
    fn has(&self, now: Instant, host: Host) -> bool {
        self.hosts
            .get(&host)
            .is_none_or(|b| self.level(*b, now) >= 1000)
    }

    /// Takes one handshake start from `host`'s bucket, if it has one.
    fn take(&mut self, now: Instant, host: Host) -> bool {
        if !self.hosts.contains_key(&host) && self.hosts.len() >= RATE_HOSTS {
            let (burst, per_sec) = (self.burst, self.per_sec);
            let probe = Self {
                burst,
                per_sec,
                hosts: HashMap::new(),
            };
            self.hosts.retain(|_, b| probe.level(*b, now) < burst);
            if self.hosts.len() >= RATE_HOSTS {
                let least_throttled = self
                    .hosts
                    .iter()
                    .max_by_key(|(_, b)| probe.level(**b, now))
                    .map(|(h, _)| *h);
                if let Some(h) = least_throttled {
                    self.hosts.remove(&h);
                }
            }
            shrink_if_sparse(&mut self.hosts);
        }
        let bucket = self.hosts.get(&host).copied().unwrap_or((self.burst, now));
        let level = self.level(bucket, now);
        if level < 1000 {
            self.hosts.insert(host, (level, now));
            return false;
        }
        self.hosts.insert(host, (level - 1000, now));
        true
    }
}

/// The caps of a table of `entries` entries of `bytes` each, `per_host` of them per host.
fn caps(entries: usize, per_host: usize, bytes: usize) -> Caps {
    Caps {
        total: entries.saturating_mul(bytes),
        per_host: per_host.clamp(1, entries.max(1)).saturating_mul(bytes),
    }
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

/// Records a session may seal per database write: the write sequence is reserved this far
/// ahead, so a restarted server skips at most this many numbers per session.
pub const SESSION_RESERVE_AHEAD: u64 = 256;

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

    /// Keeps established sessions in `store` from now on, and restores the ones it holds:
    /// each row's MAC must verify under this server's key, its peer must still be trusted
    /// (a revoked identity or replaced PSK does not come back), it must be younger than
    /// `session_lifetime` and fit the session table's budgets; every other row is deleted.
    /// A restored session gets a new write reservation before it seals anything. Returns how
    /// many were restored.
    pub fn restore_sessions(&mut self, store: Store, now: Instant, unix: UnixTime) -> usize {
        self.wall = unix;
        self.trust.set_time(unix);
        let rows = match store.dtls_sessions() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read stored DTLS sessions");
                Vec::new()
            }
        };
        self.next_row = rows.iter().map(|r| r.id).max().unwrap_or(0);
        self.saved = Some(store);
        let lifetime = i64::try_from(self.config.session_lifetime.as_secs()).unwrap_or(i64::MAX);
        let mut restored = 0;
        let mut rows = rows;
        rows.sort_by_key(|r| std::cmp::Reverse(r.saved_at));
        for row in rows {
            match self.restore_row(now, &row, lifetime) {
                Ok(()) => {
                    restored += 1;
                    self.count("dtls.session_restored");
                }
                Err(why) => {
                    self.forget_stored(row.id);
                    self.count("dtls.session_not_restored");
                    tracing::info!(addr = %row.addr, reason = why, "stored DTLS session not restored");
                }
            }
        }
        self.publish();
        restored
    }

    fn restore_row(
        &mut self,
        now: Instant,
        row: &DtlsSessionRow,
        lifetime: i64,
    ) -> Result<(), &'static str> {
        if self.wall.as_secs().saturating_sub(row.saved_at) >= lifetime {
            return Err("expired");
        }
        let peer: SocketAddr = row.addr.parse().map_err(|_| "bad address")?;
        let saved = SavedAssociation::decode(&RustCrypto, &self.storage_key, &row.record)
            .map_err(|_| "record refused (MAC, version or field)")?;
        // A row without a read mark (stored by an older server) would restore the replay
        // window of its last save: records accepted since could be taken again. It is
        // dropped; its device handshakes anew.
        if saved.read_mark().is_none() {
            self.count("dtls.session_not_restored_no_read_mark");
            return Err("saved without a read mark (an older server's row)");
        }
        let trusted =
            saved.still_trusted(&RustCrypto, &self.trust, !self.config.require_client_auth);
        // The key check names the stored peer: not a handshake's claim.
        forget_claimed();
        if !trusted {
            return Err("peer no longer trusted");
        }
        if self.sessions.contains_key(&peer) {
            return Err("address taken");
        }
        let cid: Option<[u8; CID_LEN]> = saved.connection_id().try_into().ok();
        if cid.is_some_and(|c| self.by_cid.contains_key(&c)) {
            return Err("connection ID taken");
        }
        let host = Host::of(peer);
        let traffic = Traffic::restore(RustCrypto, saved);
        let auth = auth_of(&traffic, &self.trust);
        if self.trust.is_psk_node(auth.as_ref()) {
            return Err("a PSK-only node's session is not kept");
        }
        // The identity's cap holds across a restart too (the most recently saved first).
        if let Some(a) = &auth {
            let held = self
                .sessions
                .values()
                .filter(|p| {
                    p.auth
                        .as_ref()
                        .is_some_and(|b| b.identity() == a.identity())
                })
                .count();
            if held >= self.config.max_sessions_per_identity.max(1) {
                return Err("its identity holds its cap of sessions");
            }
        }
        if self.session_bytes.charge(host, SESSION_BYTES).is_err() {
            return Err("no room in the session table");
        }
        let mut p = Peer {
            conn: Box::new(traffic),
            host,
            cid,
            created: now,
            last_seen: now,
            progress: now,
            progressed: true,
            resuming: None,
            hello_random: [0; 32],
            auth,
            row: row.id,
            claimed: None,
            known: true,
            carrier_id: None,
        };
        if !self.save_session(now, peer, &mut p) {
            self.session_bytes.refund(host, SESSION_BYTES);
            return Err("cannot store a new reservation");
        }
        if let Some(c) = cid {
            self.by_cid.insert(c, peer);
        }
        self.sessions.insert(peer, p);
        Ok(())
    }

    /// Stores session `p` (at `peer`) with its write sequence reserved
    /// [`SESSION_RESERVE_AHEAD`] records ahead, and only then lets it seal up to that
    /// reservation. Without a database it is unbounded, as before. False when the write
    /// failed: the session must end (it cannot seal more without risking a reused nonce
    /// after a restart).
    fn save_session(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        p: &mut Peer<Traffic<RustCrypto>>,
    ) -> bool {
        if self.saved.is_none() {
            return true;
        }
        // A PSK-only node's session readings carry no number of their own: only the session's
        // replay window keeps them fresh, and a window restored from a row saved some records
        // ago would take those records again. Its session is never stored (so never restored,
        // so never sealing under a reused nonce either): after a restart it handshakes anew.
        if self.trust.is_psk_node(p.auth.as_ref()) {
            return true;
        }
        let Some((saved, row)) = self.session_row(peer, p) else {
            return false;
        };
        let Some(store) = &self.saved else {
            return true;
        };
        match store.put_dtls_session(&row) {
            Ok(()) => {
                p.conn.persisted(&saved);
                self.count("dtls.session_saved");
                true
            }
            Err(e) => {
                self.count("dtls.session_save_failed");
                crate::limited!(self.log, Self::secs(now), "dtls.session_save_failed", warn, %peer, error = %e, "cannot store DTLS session: it ends");
                false
            }
        }
    }

    /// Persists the read mark of every session that accepted records above it since the last
    /// call (one row write per such session per batch): call after the batch's datagrams and
    /// before acting on what they delivered. Returns the peers whose mark could not be
    /// stored, and the addresses of sessions ended earlier in the batch by a failed save
    /// while their mark was due: those sessions are ended, and what they delivered there must
    /// be dropped (after a restart it could be taken again).
    pub fn persist_read_marks(&mut self, now: Instant) -> Vec<SocketAddr> {
        let due: Vec<SocketAddr> = std::mem::take(&mut self.marks_due)
            .into_iter()
            .filter(|a| {
                self.sessions
                    .get(a)
                    .is_some_and(|p| p.conn.core().read_mark_passed())
            })
            .collect();
        let mut failed = std::mem::take(&mut self.unmarked);
        let mut rows = Vec::new();
        for peer in due {
            match self
                .sessions
                .get(&peer)
                .and_then(|p| self.session_row(peer, p))
            {
                Some((saved, row)) => rows.push((peer, saved, row)),
                None => failed.push(peer),
            }
        }
        // One transaction (one sync) for the batch's rows.
        let written = match &self.saved {
            Some(store) if !rows.is_empty() => store.shared_transaction(|_| {
                for (_, _, row) in &rows {
                    store.put_dtls_session(row)?;
                }
                Ok(())
            }),
            _ => Ok(()),
        };
        match written {
            Ok(()) => {
                for (peer, saved, _) in rows {
                    if let Some(p) = self.sessions.get_mut(&peer) {
                        p.conn.persisted(&saved);
                    }
                    self.count("dtls.session_saved");
                    self.count("dtls.read_mark_saved");
                }
            }
            Err(e) => {
                self.count("dtls.session_save_failed");
                crate::limited!(self.log, Self::secs(now), "dtls.session_save_failed", warn, sessions = rows.len(), error = %e, "cannot store DTLS read marks: those sessions end");
                failed.extend(rows.into_iter().map(|(peer, _, _)| peer));
            }
        }
        for peer in &failed {
            if let Some(p) = self.sessions.remove(peer) {
                self.release_session(p);
            }
        }
        failed
    }

    /// Session `p`'s row (at `peer`) with its write sequence reserved
    /// [`SESSION_RESERVE_AHEAD`] records ahead and its read mark at the highest record taken,
    /// and the association to confirm once the row is stored. None if it cannot be encoded.
    fn session_row(
        &self,
        peer: SocketAddr,
        p: &Peer<Traffic<RustCrypto>>,
    ) -> Option<(SavedAssociation, DtlsSessionRow)> {
        let saved = p.conn.save_marking_reads(SESSION_RESERVE_AHEAD, 0).ok()?;
        let mut buf = [0u8; sigil_dtls::saved::MAX_ENCODED_LEN];
        let n = saved
            .encode(&RustCrypto, &self.storage_key, &mut buf)
            .ok()?;
        let row = DtlsSessionRow {
            id: p.row,
            addr: peer.to_string(),
            identity: p
                .auth
                .as_ref()
                .map(|a| a.identity().to_string())
                .unwrap_or_default(),
            saved_at: self.wall.as_secs(),
            record: buf[..n].to_vec(),
        };
        Some((saved, row))
    }

    /// Deletes a session's row (the session ended, expired or was replaced).
    fn forget_stored(&mut self, row: i64) {
        if row == 0 {
            return;
        }
        if let Some(store) = &self.saved {
            if let Err(e) = store.delete_dtls_session(row) {
                self.stats.incr("dtls.session_delete_failed");
                tracing::warn!(error = %e, "cannot delete a stored DTLS session");
            }
        }
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
        if !self.carrier.is_empty() {
            let mut c = sigil_dtls_coap::Counters::default();
            let mut sessions = 0;
            for ep in &self.carrier {
                c = add_counters(c, ep.counters());
                sessions += ep.sessions();
            }
            for (name, v) in [
                ("dtls_coap.hello_verify", c.hello_verify),
                ("dtls_coap.bad_cookie", c.bad_cookie),
                ("dtls_coap.created", c.created),
                ("dtls_coap.established", c.established),
                ("dtls_coap.table_full", c.table_full),
                ("dtls_coap.peer_limit", c.peer_limit),
                ("dtls_coap.not_admitted", c.not_admitted),
                ("dtls_coap.unknown_session", c.unknown_session),
                ("dtls_coap.malformed", c.malformed),
                ("dtls_coap.wrong_method", c.wrong_method),
                ("dtls_coap.oversized", c.oversized),
                ("dtls_coap.handshake_failed", c.handshake_failed),
                ("dtls_coap.refused_hello", c.refused_hello),
                ("dtls_coap.duplicates", c.duplicates),
                ("dtls_coap.amplification", c.amplification),
                ("dtls_coap.expired", c.expired),
                ("dtls_coap.deleted", c.deleted),
                ("dtls_coap.handed_off", c.handed_off),
                ("dtls_coap.evicted", c.evicted),
                ("dtls_coap.evicted_oldest", c.evicted_oldest),
                ("dtls_coap.expired_crowded", c.expired_crowded),
                ("dtls_coap.eviction_budget", c.eviction_budget),
                ("dtls_coap.sessions", sessions as u64),
                ("mem.dtls_coap.total", CARRIER_BYTES as u64),
            ] {
                self.stats.set(name, v);
            }
        }
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
        self.trust.set_time(unix);
        self.wall = unix;
        self.end_revoked_sessions(now, out);
        forget_claimed();
        if !self.carrier.is_empty() && !sigil_dtls_coap::is_dtls_record(datagram) {
            return self.carrier_datagram(now, rng, peer, datagram, out);
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
            self.new_handshake(now, rng, peer, datagram, facts.as_ref(), out);
            return Vec::new();
        }
        if let Some(mut p) = self.handshakes.remove(&peer) {
            let state = p.conn.state();
            let r = p
                .conn
                .handle_datagram(now, datagram)
                .and_then(|()| p.conn.failure().map_or(Ok(()), Err));
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
            self.new_handshake(now, rng, peer, datagram, facts.as_ref(), out);
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
        let before = p.conn.dropped();
        let r = p
            .conn
            .handle_datagram(now, datagram)
            .and_then(|()| p.conn.failure().map_or(Ok(()), Err));
        self.flush(now, peer, &mut p, out);
        if let Err(e) = r {
            self.release_session(p);
            self.count("dtls.session_closed");
            crate::limited!(self.log, Self::secs(now), "dtls.session_closed", debug, %peer, error = %e, "DTLS session ended");
            return Vec::new();
        }
        let authenticated = p.conn.dropped() == before;
        if !authenticated {
            self.count("dtls.records_dropped");
        }
        // A record from a new address moves the session only once it authenticated under
        // the session's keys and passed its replay window (RFC 9146 §6).
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

    /// The cached session a ClientHello asks to resume, if it is there and young enough.
    fn resumable(&self, requested: Option<&[u8; 32]>, now: Instant) -> Option<Session> {
        let lifetime = self.config.session_lifetime;
        requested
            .and_then(|id| self.cache.get(id))
            .filter(|c| now.saturating_since(c.made) < lifetime)
            .map(|c| c.session.clone())
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
        self.trust.set_time(unix);
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

    /// Once the credentials changed: ends every session that speaks for an identity they
    /// revoke (its PSK, its raw public key, or a token issued to it), with a close_notify,
    /// and deletes its stored row, so revocation reaches sessions already open
    /// (docs/security.md, "Revocation"). New handshakes and resumptions of such a peer fail
    /// on the trust itself.
    fn end_revoked_sessions(&mut self, now: Instant, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        let generation = self.trust.generation();
        if generation == self.trust_seen {
            return;
        }
        self.trust_seen = generation;
        let revoked: Vec<SocketAddr> = self
            .sessions
            .iter()
            .filter(|(_, p)| p.auth.as_ref().is_some_and(|a| self.trust.is_revoked(a)))
            .map(|(a, _)| *a)
            .collect();
        for peer in revoked {
            let Some(mut p) = self.sessions.remove(&peer) else {
                continue;
            };
            if p.conn.close().is_ok() {
                self.flush(now, peer, &mut p, out);
            }
            let identity = p.auth.as_ref().map(|a| a.identity().to_string());
            self.release_session(p);
            self.count("dtls.session_revoked");
            crate::limited!(self.log, Self::secs(now), "dtls.session_revoked", warn, %peer, identity = identity.as_deref().unwrap_or(""), "DTLS session ended: its identity was revoked");
        }
    }

    /// Drops handshakes older than `handshake_timeout`; with the table above half full, also
    /// strangers' handshakes without progress for [`crowded_lifetime`]
    /// (`dtls.handshake_expired_crowded`).
    fn expire_handshakes(&mut self, now: Instant) {
        let stale = self.config.handshake_timeout;
        let crowded = self.handshake_bytes.used() * 2 > self.handshake_bytes.caps().total;
        let short = crowded_lifetime(&self.config);
        let old: Vec<(SocketAddr, bool)> = self
            .handshakes
            .iter()
            .filter_map(|(a, p)| {
                let age = now.saturating_since(p.created);
                if age >= stale {
                    Some((*a, false))
                } else if crowded && !p.known && now.saturating_since(p.progress) >= short {
                    Some((*a, true))
                } else {
                    None
                }
            })
            .collect();
        for (a, early) in old {
            if let Some(p) = self.handshakes.remove(&a) {
                self.release_handshake(p);
                self.count(if early {
                    "dtls.handshake_expired_crowded"
                } else {
                    "dtls.handshake_expired"
                });
            }
        }
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

    /// Drops resumable sessions older than `session_lifetime`.
    fn expire_resumable(&mut self, now: Instant) {
        let lifetime = self.config.session_lifetime;
        while let Some(id) = self.cache_order.front().copied() {
            match self.cache.get(&id) {
                Some(c) if now.saturating_since(c.made) < lifetime => break,
                _ => {
                    self.cache_order.pop_front();
                    self.forget_resumable(&id);
                }
            }
        }
        shrink_queue_if_sparse(&mut self.cache_order);
    }

    fn forget_resumable(&mut self, id: &[u8; 32]) {
        self.carrier_resuming.remove(id);
        if let Some(c) = self.cache.remove(id) {
            self.cache_bytes.refund(c.host, RESUMPTION_BYTES);
            shrink_if_sparse(&mut self.cache);
        }
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

    /// A ClientHello: the stateless cookie exchange, then (cookie valid, room in the tables)
    /// a handshake slot.
    fn new_handshake(
        &mut self,
        now: Instant,
        rng: &mut dyn Rng,
        peer: SocketAddr,
        datagram: &[u8],
        facts: Option<&RecordFacts<'_>>,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        let addr = peer_bytes(&peer);
        let cookie = match self
            .cookie
            .respond(&RustCrypto, &addr, datagram, &mut self.buf)
        {
            Stateless::HelloVerify(n) => {
                self.count("dtls.hello_verify");
                out.push((peer, self.buf[..n].to_vec()));
                return;
            }
            Stateless::Drop(e) => {
                self.count("dtls.bad_client_hello");
                crate::limited!(self.log, Self::secs(now), "dtls.bad_client_hello", debug, %peer, error = %e, "ClientHello dropped");
                return;
            }
            Stateless::Accept(cookie) => cookie,
        };
        // The cookie checked out, so the ClientHello parsed: its facts are there.
        let Some(hello) = facts.and_then(|f| f.client_hello) else {
            self.count("dtls.bad_client_hello");
            return;
        };
        let host = Host::of(peer);
        let requested = hello.requested_session.copied();
        // A peer that completed a handshake before: a session at this address, or a cached
        // session it asks to resume that was made from this host, if no other handshake is
        // already resuming it as known. Session IDs travel in clear, so naming one alone
        // proves nothing.
        let known = self.sessions.contains_key(&peer)
            || self.vouched(host)
            || requested.is_some_and(|id| {
                self.resumable_from(&id, host, now)
                    && !self
                        .handshakes
                        .iter()
                        .any(|(a, p)| *a != peer && p.known && p.resuming == Some(id))
            });
        // A client that started over gives up its old handshake first (its own slot); it
        // still counts as holding one, so starting over never pushes out someone else's, and
        // its new handshake keeps the old one's progress (starting over is not progress).
        let restarted = match self.handshakes.remove(&peer) {
            Some(old) => {
                let since = (old.progress, old.progressed);
                self.release_handshake(old);
                Some(since)
            }
            None => None,
        };
        // Room is found before any handshake work, but nothing is pushed out until the
        // ClientHello has been accepted.
        let room = self
            .make_room(now, host, peer, known, restarted.is_some())
            .and_then(|victim| {
                if self.start_rate.take(now, host) {
                    Ok(victim)
                } else {
                    Err(Refusal::HostRate)
                }
            });
        let victim = match room {
            Ok(v) => v,
            Err(refusal) => {
                self.count(refusal.counter());
                crate::limited!(self.log, Self::secs(now), refusal.counter(), info, %peer, reason = ?refusal, "ClientHello refused: no room in the DTLS tables");
                return;
            }
        };
        let chain = chain_of(&self.config);
        let cid = self.fresh_cid(rng);
        let resume = self.resumable(hello.requested_session, now);
        let offer = offer(
            &self.config,
            &self.key,
            &chain,
            cid.as_ref(),
            resume.as_ref(),
        );
        match Connection::accept(
            RustCrypto,
            self.trust.clone(),
            self.config.dtls,
            &offer,
            rng,
            cookie,
            datagram,
            now,
        ) {
            Ok(conn) => {
                if let Some((at, why)) = victim {
                    if let Some(p) = self.handshakes.remove(&at) {
                        if !known {
                            self.evictions.take(now);
                        }
                        self.release_handshake(p);
                        self.count("dtls.handshake_evicted");
                        self.count(why);
                    }
                }
                if self.handshake_bytes.charge(host, HANDSHAKE_BYTES).is_err() {
                    // make_room found room; this is unreachable unless the caps are zero.
                    self.count(Refusal::Handshakes.counter());
                    return;
                }
                let took_cid = !conn.connection_id().is_empty();
                if took_cid {
                    self.count("dtls.connection_id");
                }
                let (progress, progressed) = restarted.unwrap_or((now, false));
                let mut p = Peer {
                    cid: cid.filter(|_| took_cid),
                    conn: Box::new(conn),
                    host,
                    created: now,
                    last_seen: now,
                    progress,
                    progressed,
                    resuming: requested.filter(|_| resume.is_some()),
                    hello_random: *hello.random,
                    auth: None,
                    row: 0,
                    claimed: take_claimed(),
                    known,
                    carrier_id: None,
                };
                self.count("dtls.handshake_started");
                note_unfinished(&mut self.unfinished, host, now);
                if restarted.is_some() {
                    self.count("dtls.handshake_restarted");
                }
                self.flush(now, peer, &mut p, out);
                self.handshakes.insert(peer, p);
            }
            Err(e) => {
                // Nothing was pushed out for it.
                self.count("dtls.handshake_failed");
                crate::limited!(self.log, Self::secs(now), "dtls.handshake_failed", debug, %peer, error = %e, "ClientHello refused");
                if let Some(n) = sigil_dtls::refusal(&e, datagram, &mut self.buf) {
                    out.push((peer, self.buf[..n].to_vec()));
                }
            }
        }
    }

    /// Whether `host` holds no half-open handshake here and its last one started (on either
    /// carrier) within [`SUSPECT_MEMORY`] did not complete: it was pushed out, expired or
    /// failed, and none completed since. Such a host takes only free slots
    /// (`dtls.refused_tables_full` otherwise), so hosts that hold handshakes without finishing
    /// them cannot push out others' in turn.
    fn suspect(&self, host: Host, now: Instant) -> bool {
        self.handshake_bytes.held_by(host) == 0
            && self
                .unfinished
                .get(&host)
                .is_some_and(|t| now.saturating_since(*t) < SUSPECT_MEMORY)
    }

    /// Whether `host` holds a live session: a device there completed an authenticated
    /// handshake, so the host's newcomers count as known (not suspects, not held to the
    /// eviction budget strangers spend). A host an attacker shares with honest devices (one
    /// NAT) is vouched for too; it stays within the host's share and handshake rate.
    fn vouched(&self, host: Host) -> bool {
        self.session_bytes.held_by(host) > 0
    }

    /// Whether the cached session `id` may be resumed and was made from `host`.
    fn resumable_from(&self, id: &[u8; 32], host: Host, now: Instant) -> bool {
        self.cache.get(id).is_some_and(|c| {
            c.host == host && now.saturating_since(c.made) < self.config.session_lifetime
        })
    }

    /// Room for one more half-open handshake from `host` (at `peer`), which may become a
    /// session; nothing is pushed out here, the handshake to push out (and its counter) is
    /// returned for the caller to remove once the ClientHello is accepted:
    /// - the host's own share of the handshake table: stale handshakes expire first; beyond
    ///   that, refused (the host's other handshakes are not pushed out, so a burst of its own
    ///   devices still completes one by one);
    /// - the whole handshake table: stale handshakes expire first (above half full, a
    ///   stranger's without progress for [`crowded_lifetime`]); then, within the total
    ///   budget of evictions ([`TotalRate`]), the handshake [`SecureLayer::victim`] names;
    ///   else refused. Nothing is pushed out for a host above its handshake rate;
    /// - the session table, counting every handshake in progress as a session to be: idle
    ///   sessions expire first; a live session is never pushed out. A handshake from the
    ///   address of an existing session will replace it, so it needs no new room.
    fn make_room(
        &mut self,
        now: Instant,
        host: Host,
        peer: SocketAddr,
        known: bool,
        restarted: bool,
    ) -> Result<Option<(SocketAddr, &'static str)>, Refusal> {
        if self.handshake_bytes.check(host, HANDSHAKE_BYTES).is_err() {
            self.expire_handshakes(now);
        }
        let mut victim = None;
        match self.handshake_bytes.check(host, HANDSHAKE_BYTES) {
            Ok(()) => {}
            Err(Over::Host) => return Err(Refusal::HostHandshakes),
            Err(Over::Total) => {
                if !self.start_rate.has(now, host) {
                    return Err(Refusal::HostRate);
                }
                let Some(v) = self.victim(now, host, known, restarted) else {
                    return Err(Refusal::Handshakes);
                };
                // A known peer's push-out is not held to the budget: it is spent by strangers.
                if !known && !self.evictions.has(now) {
                    return Err(Refusal::EvictionBudget);
                }
                victim = Some(v);
            }
        }
        if self.sessions.contains_key(&peer) {
            return Ok(victim);
        }
        let in_flight = self.carrier_in_flight(peer);
        // The victim's slot would be freed for this one.
        let freed = usize::from(victim.is_some());
        let mut room = self.session_room(host, in_flight, freed);
        if room.is_err() {
            self.expire_sessions(now);
            room = self.session_room(host, in_flight, freed);
        }
        room.map(|()| victim)
    }

    /// Whether the session table has room for the sessions the handshakes in progress (and
    /// one more from `host`, less `freed` about to be pushed out) may become; `carrier` is
    /// the CoAP carrier's half-open handshakes (the host's, all), which are not in the
    /// handshake table.
    fn session_room(
        &self,
        host: Host,
        carrier: (usize, usize),
        freed: usize,
    ) -> Result<(), Refusal> {
        let host_handshakes = self.handshake_bytes.held_by(host) / HANDSHAKE_BYTES + carrier.0;
        let host_would = self
            .session_bytes
            .held_by(host)
            .saturating_add((host_handshakes + 1).saturating_mul(SESSION_BYTES));
        if host_would > self.session_bytes.caps().per_host {
            return Err(Refusal::HostSessions);
        }
        let all_would = self.session_bytes.used().saturating_add(
            (self.handshakes.len() + carrier.1 + 1)
                .saturating_sub(freed)
                .saturating_mul(SESSION_BYTES),
        );
        if all_would > self.session_bytes.caps().total {
            return Err(Refusal::Sessions);
        }
        Ok(())
    }

    /// The half-open handshake a newcomer from `host` may push out of a full table, and its
    /// counter. Only a stranger's (not `known`) without progress for [`HANDSHAKE_SHIELD`] is
    /// a candidate, and of those the ones that never progressed go first, then the longest
    /// without progress. The candidate of the host holding the most goes if that host holds
    /// more than `host` would with one more (`dtls.handshake_evicted_heaviest`); else, for a
    /// newcomer whose host holds none (`restarted`: it just gave one up, so it does not) or a
    /// known peer, the first candidate of all (`dtls.handshake_evicted_oldest`).
    fn victim(
        &self,
        now: Instant,
        host: Host,
        known: bool,
        restarted: bool,
    ) -> Option<(SocketAddr, &'static str)> {
        if !known && self.suspect(host, now) {
            return None;
        }
        let candidate =
            |p: &Peer<Conn>| !p.known && now.saturating_since(p.progress) >= HANDSHAKE_SHIELD;
        let order = |p: &Peer<Conn>| (p.progressed, p.progress, p.created);
        let mut by_host: HashMap<Host, usize> = HashMap::new();
        for p in self.handshakes.values() {
            *by_host.entry(p.host).or_insert(0) += 1;
        }
        let own = self.handshake_bytes.held_by(host) / HANDSHAKE_BYTES;
        let heavier: HashSet<Host> = by_host
            .iter()
            .filter(|(_, n)| **n > own + 1)
            .map(|(h, _)| *h)
            .collect();
        if !heavier.is_empty() {
            let most = by_host
                .iter()
                .filter(|(h, _)| heavier.contains(*h))
                .map(|(_, n)| *n)
                .max()
                .unwrap_or(0);
            let heaviest = self
                .handshakes
                .iter()
                .filter(|(_, p)| by_host.get(&p.host) == Some(&most) && candidate(p))
                .min_by_key(|(_, p)| order(p))
                .map(|(a, _)| *a);
            if let Some(a) = heaviest {
                return Some((a, "dtls.handshake_evicted_heaviest"));
            }
        }
        let holds_none = !restarted && own == 0;
        if !holds_none && !known {
            return None;
        }
        self.handshakes
            .iter()
            .filter(|(_, p)| candidate(p))
            .min_by_key(|(_, p)| order(p))
            .map(|(a, _)| (*a, "dtls.handshake_evicted_oldest"))
    }

    /// A completed handshake becomes a session: only its established state is kept.
    fn established(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        p: Peer<Conn>,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) -> Vec<Delivered> {
        self.handshake_bytes.refund(p.host, HANDSHAKE_BYTES);
        shrink_if_sparse(&mut self.handshakes);
        self.unfinished.remove(&p.host);
        let Peer {
            conn,
            host,
            cid,
            created,
            hello_random,
            ..
        } = p;
        let traffic = match conn.into_traffic() {
            Ok(t) => t,
            Err(_) => {
                self.count("dtls.handshake_failed");
                return Vec::new();
            }
        };
        self.install_session(now, peer, traffic, host, cid, created, hello_random, out)
    }

    /// An established [`Traffic`] (from either carrier) becomes the session of `peer`: charged
    /// to `host`, remembered for resumption, stored before it seals anything.
    #[allow(clippy::too_many_arguments)]
    fn install_session(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        traffic: Traffic<RustCrypto>,
        host: Host,
        cid: Option<[u8; CID_LEN]>,
        created: Instant,
        hello_random: [u8; 32],
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) -> Vec<Delivered> {
        let auth = auth_of(&traffic, &self.trust);
        // The session it replaces (a device that rebooted at the same address) goes first,
        // so its bytes are there for the new one.
        let replaced = self.sessions.remove(&peer);
        if let Some(old) = replaced {
            self.count("dtls.session_replaced");
            self.release_session(old);
        }
        self.next_row += 1;
        let mut p = Peer {
            conn: Box::new(traffic),
            host,
            cid,
            created,
            last_seen: now,
            progress: now,
            progressed: true,
            resuming: None,
            hello_random,
            auth,
            row: self.next_row,
            claimed: None,
            known: true,
            carrier_id: None,
        };
        // At its identity's cap, the identity's least recently active session gives way
        // ([`SecureLayer::make_room_for_identity`]): after the new one has its room, unless
        // the room is what that session's bytes are needed for.
        let mut charged = self.session_bytes.charge(host, SESSION_BYTES).is_ok();
        if let Some(identity) = p.auth.as_ref().map(|a| *a.identity()) {
            self.make_room_for_identity(now, &identity, out);
            if !charged {
                charged = self.session_bytes.charge(host, SESSION_BYTES).is_ok();
            }
        }
        if !charged {
            // Room was checked when the handshake started, counting it; this happens only
            // if that room went to a session that moved here by connection ID since.
            self.count("dtls.refused_sessions_full");
            crate::limited!(self.log, Self::secs(now), "dtls.refused_sessions_full", info, %peer, "DTLS session refused: no room in the session table");
            if p.conn.close().is_ok() {
                self.flush(now, peer, &mut p, out);
            }
            return Vec::new();
        }
        self.count("dtls.handshake_completed");
        if p.conn.resumed() {
            self.count("dtls.resumed");
        } else if let Some(session) = p.conn.session() {
            self.remember(session, host, now);
        }
        crate::limited!(self.log, Self::secs(now), "dtls.session_established", debug, %peer, auth = ?p.auth.as_ref().map(|a| a.identity().to_string()), "DTLS session established");
        // Stored (with its write sequence reserved ahead) before anything more is sealed.
        if !self.save_session(now, peer, &mut p) {
            self.release_session(p);
            return Vec::new();
        }
        let delivered = self.drain(peer, &mut p);
        if let Some(cid) = p.cid {
            self.by_cid.insert(cid, peer);
        }
        self.sessions.insert(peer, p);
        delivered
    }

    /// Before `identity` gets a new session: if it holds `max_sessions_per_identity`
    /// already, its least recently active one is closed (an alert to its address) and its
    /// bytes go back, whatever host it is charged to.
    fn make_room_for_identity(
        &mut self,
        now: Instant,
        identity: &Identity,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        let cap = self.config.max_sessions_per_identity.max(1);
        loop {
            // The least recently active, preferring one that delivered nothing in this batch
            // (whose read mark is not due); among sessions restored at once, the one stored
            // first (row IDs grow).
            let mut held = 0usize;
            let mut oldest: Option<((bool, Instant, i64), SocketAddr)> = None;
            for (addr, p) in &self.sessions {
                if p.auth.as_ref().is_some_and(|a| a.identity() == identity) {
                    held += 1;
                    let rank = (self.marks_due.contains(addr), p.last_seen, p.row);
                    if oldest.is_none_or(|(r, _)| rank < r) {
                        oldest = Some((rank, *addr));
                    }
                }
            }
            let Some((_, addr)) = oldest.filter(|_| held >= cap) else {
                return;
            };
            let Some(mut p) = self.sessions.remove(&addr) else {
                return;
            };
            self.count("dtls.gave_way.identity_cap");
            crate::limited!(self.log, Self::secs(now), "dtls.gave_way.identity_cap", info, peer = %addr, identity = %identity, cap, "DTLS session closed: its identity opened a new one at its cap");
            if p.conn.close().is_ok() {
                self.flush(now, addr, &mut p, out);
            }
            // What it delivered in this batch is dropped with it, as for a failed save: its
            // stored row (and read mark) goes, so those records must not be acted on.
            self.release_unsaved(addr, p);
        }
    }

    /// The carrier's table of `host`, out of `tables`.
    fn shard(&self, host: Host, tables: usize) -> usize {
        use std::hash::BuildHasher;
        (self.shard_of.hash_one(host) % tables.max(1) as u64) as usize
    }

    /// The CoAP carrier's half-open handshakes: those of `peer`'s host, and all.
    fn carrier_in_flight(&self, peer: SocketAddr) -> (usize, usize) {
        if self.carrier.is_empty() {
            return (0, 0);
        }
        let key = carrier_peer(&peer);
        let shard = self.shard(Host::of(peer), self.carrier.len());
        (
            self.carrier[shard].half_open(&key[..HOST_BYTES]),
            self.carrier.iter().map(|ep| ep.half_open(&[])).sum(),
        )
    }

    /// A CoAP message on the DTLS port: the handshake as a CoAP resource. Its answer goes to
    /// `out`; a handshake it completes becomes a session.
    fn carrier_datagram(
        &mut self,
        now: Instant,
        rng: &mut dyn Rng,
        peer: SocketAddr,
        datagram: &[u8],
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) -> Vec<Delivered> {
        let mut carrier = std::mem::take(&mut self.carrier);
        if carrier.is_empty() {
            return Vec::new();
        }
        self.count("dtls_coap.received");
        let host = Host::of(peer);
        let shard = self.shard(host, carrier.len());
        let key = carrier_peer(&peer);
        // Only a `PUT /dtls` can start a handshake: what its ClientHello would be offered (a
        // fresh connection ID, the session it asks to resume if the cache has it) is made for
        // that alone.
        let message = sigil_coap::Message::parse(datagram).ok();
        let is_put = message
            .as_ref()
            .is_some_and(|m| m.code == sigil_coap::Code::PUT);
        let requested = message
            .as_ref()
            .filter(|_| is_put)
            .and_then(|m| RecordFacts::parse(m.payload, 0).ok())
            .and_then(|f| f.client_hello)
            .and_then(|ch| ch.requested_session.copied());
        let resume = self.resumable(requested.as_ref(), now);
        // A peer that completed a handshake before (a session at this address, or a cached
        // session made from this host that no other address is resuming as known) is kept
        // over strangers in a crowded table.
        let resumed_here = requested.is_some_and(|id| {
            self.resumable_from(&id, host, now)
                && self.carrier_resuming.get(&id).is_none_or(|a| *a == peer)
        });
        let known =
            is_put && (self.sessions.contains_key(&peer) || self.vouched(host) || resumed_here);
        if is_put && resumed_here {
            if let Some(id) = requested {
                self.carrier_resuming.insert(id, peer);
            }
        }
        let cid = if is_put { self.fresh_cid(rng) } else { None };
        // Admitted (once the cookie is valid) only with room in the session table for what
        // it may become, counting the handshakes in progress over either carrier, and within
        // the host's handshake rate.
        let room = if !is_put || self.sessions.contains_key(&peer) {
            Ok(())
        } else {
            let in_flight = (
                carrier[shard].half_open(&key[..HOST_BYTES]),
                carrier.iter().map(|ep| ep.half_open(&[])).sum(),
            );
            let mut room = self.session_room(host, in_flight, 0);
            if room.is_err() {
                self.expire_sessions(now);
                room = self.session_room(host, in_flight, 0);
            }
            room
        };
        let chain = chain_of(&self.config);
        let offer = offer(
            &self.config,
            &self.key,
            &chain,
            cid.as_ref(),
            resume.as_ref(),
        );
        let standing = if known {
            Standing::Known
        } else if self.suspect(host, now) {
            Standing::Suspect
        } else {
            Standing::Stranger
        };
        let start_rate = &mut self.start_rate;
        let unfinished = &mut self.unfinished;
        let mut refusal = None;
        let mut admit = |_: &[u8]| {
            if let Err(r) = room {
                refusal = Some(r);
                return false;
            }
            if !start_rate.take(now, host) {
                refusal = Some(Refusal::HostRate);
                return false;
            }
            note_unfinished(unfinished, host, now);
            true
        };
        let ep = &mut carrier[shard];
        // DELETE of the resource an established session was made at: 4.05 (it ends with its
        // authenticated close_notify), also after the carrier's slot has gone.
        if let Some(id) = self.sessions.get(&peer).and_then(|p| p.carrier_id) {
            if let Some(n) = ep.refuse_delete_of(id, datagram, &mut self.buf) {
                out.push((peer, self.buf[..n].to_vec()));
                self.count("dtls_coap.delete_of_established");
                self.carrier = carrier;
                return Vec::new();
            }
        }
        let refused_before = refused_flights(ep);
        forget_claimed();
        let answer = ep.handle_datagram_from(
            now,
            &key,
            standing,
            datagram,
            &offer,
            &mut admit,
            rng,
            &mut self.buf,
        );
        // A whole flight is handled in one call: what it claimed is this datagram's.
        let claimed = take_claimed();
        if let Some(n) = answer {
            out.push((peer, self.buf[..n].to_vec()));
        }
        if let Some(r) = refusal {
            self.count(r.counter());
            crate::limited!(self.log, Self::secs(now), r.counter(), info, %peer, reason = ?r, "ClientHello over CoAP refused");
        }
        if refused_flights(ep) > refused_before {
            // The endpoint answers 4.03 without saying why: a flight that named an identity
            // and failed is most often one not provisioned, revoked or without a PSK (the
            // operator's to fix, so at the default level, as on the record layer).
            match &claimed {
                Some(c) => {
                    crate::limited!(self.log, Self::secs(now), "dtls.handshake_refused_identity", warn, %peer, claimed = %c, "DTLS handshake over CoAP refused (identity not provisioned, revoked or without a PSK, or a bad Finished)");
                }
                None => {
                    crate::limited!(self.log, Self::secs(now), "dtls.handshake_failed", debug, %peer, claimed = "-", "DTLS handshake over CoAP failed");
                }
            }
        }
        let mut delivered = Vec::new();
        while let Some(est) = ep.take_established() {
            // Only the datagram just handled can have completed a handshake.
            if est.peer() != key {
                self.count("dtls_coap.peer_mismatch");
                continue;
            }
            let cid: Option<[u8; CID_LEN]> = est.traffic.connection_id().try_into().ok();
            if cid.is_some_and(|c| self.by_cid.contains_key(&c)) {
                self.count("dtls_coap.cid_taken");
                continue;
            }
            let id = est.id;
            delivered.extend(self.install_session(
                now,
                peer,
                est.traffic,
                host,
                cid,
                now,
                [0; 32],
                out,
            ));
            if let Some(p) = self.sessions.get_mut(&peer) {
                p.carrier_id = Some(id);
                self.count("dtls_coap.handshake_completed");
                self.unfinished.remove(&host);
            }
        }
        self.carrier = carrier;
        delivered
    }

    /// Keeps a session for resumption, charged to `host`. Beyond the host's share its own
    /// oldest entry goes; beyond the total, the oldest entry of the host holding the most.
    fn remember(&mut self, session: Session, host: Host, now: Instant) {
        let id = session.id;
        if self.cache.contains_key(&id) {
            // Session IDs are random 32 bytes; a repeat replaces the entry in place.
            self.forget_resumable(&id);
            self.cache_order.retain(|x| *x != id);
        }
        loop {
            match self.cache_bytes.check(host, RESUMPTION_BYTES) {
                Ok(()) => break,
                Err(Over::Host) => {
                    if !self.drop_oldest_resumable(Some(host)) {
                        return;
                    }
                }
                Err(Over::Total) => {
                    if !self.drop_oldest_resumable(None) {
                        return;
                    }
                }
            }
        }
        if self.cache_bytes.charge(host, RESUMPTION_BYTES).is_ok() {
            self.cache.insert(
                id,
                Cached {
                    session,
                    made: now,
                    host,
                },
            );
            self.cache_order.push_back(id);
        }
    }

    /// Drops the oldest resumable session of `host`, or (None) of the host holding the most.
    fn drop_oldest_resumable(&mut self, host: Option<Host>) -> bool {
        let host = match host {
            Some(h) => h,
            None => {
                let mut by_host: HashMap<Host, usize> = HashMap::new();
                for c in self.cache.values() {
                    *by_host.entry(c.host).or_insert(0) += 1;
                }
                match by_host.into_iter().max_by_key(|(_, n)| *n) {
                    Some((h, _)) => h,
                    None => return false,
                }
            }
        };
        let cache = &self.cache;
        let Some(i) = self
            .cache_order
            .iter()
            .position(|id| cache.get(id).is_some_and(|c| c.host == host))
        else {
            return false;
        };
        if let Some(id) = self.cache_order.remove(i) {
            self.forget_resumable(&id);
            self.count("dtls.resumable_evicted");
        }
        true
    }

    /// Identities with a session (for tests and status).
    pub fn authenticated(&self) -> HashSet<Identity> {
        self.sessions
            .values()
            .filter_map(|p| p.auth.as_ref().map(|a| *a.identity()))
            .collect()
    }
}

/// How long, under pressure (the table above half full), a stranger's half-open handshake
/// lives after its last progress: `crowded_handshake_timeout`, never less than a third more
/// than [`HANDSHAKE_SHIELD`] (so a newcomer has a while to push out what went the shield
/// without progress before it expires), nor more than `handshake_timeout`.
fn crowded_lifetime(config: &DtlsConfig) -> Duration {
    config
        .crowded_handshake_timeout
        .max(HANDSHAKE_SHIELD + HANDSHAKE_SHIELD / 3)
        .min(config.handshake_timeout)
}

/// How long a host whose handshake did not complete stays a suspect (unless it completes one):
/// longer than an attacker's cycle of holding a slot until it expires and starting again, so
/// hosts that never finish a handshake push out at most one each.
pub const SUSPECT_MEMORY: Duration = Duration::from_secs(600);

/// Notes that `host` started a handshake at `now` (kept for at most [`RATE_HOSTS`] hosts:
/// entries older than [`SUSPECT_MEMORY`] go first; with none of those, the host is not noted).
fn note_unfinished(map: &mut HashMap<Host, Instant>, host: Host, now: Instant) {
    if !map.contains_key(&host) && map.len() >= RATE_HOSTS {
        map.retain(|_, t| now.saturating_since(*t) < SUSPECT_MEMORY);
        if map.len() >= RATE_HOSTS {
            return;
        }
    }
    map.insert(host, now);
}

/// The server's certificate chain, leaf first (empty without X.509).
fn chain_of(config: &DtlsConfig) -> Vec<&[u8]> {
    config.certificate_chain.iter().map(Vec::as_slice).collect()
}

/// What a ClientHello is offered (either carrier): the server's key, its chain, PSKs, a fresh
/// connection ID and the session it asks to resume.
fn offer<'a>(
    config: &DtlsConfig,
    key: &'a SecretKey,
    chain: &'a [&'a [u8]],
    cid: Option<&'a [u8; CID_LEN]>,
    resume: Option<&'a Session>,
) -> ServerCredentials<'a> {
    ServerCredentials {
        issue_session_ids: config.resumption,
        resume: resume.filter(|_| config.resumption),
        connection_id: cid.map_or(&[][..], |c| &c[..]),
        psk: config.psk,
        key: (config.rpk || !chain.is_empty()).then_some(key),
        require_client_key: config.require_client_auth,
        chain: (!chain.is_empty()).then_some(chain),
    }
}

/// The sum of two tables' counters.
fn add_counters(
    a: sigil_dtls_coap::Counters,
    b: &sigil_dtls_coap::Counters,
) -> sigil_dtls_coap::Counters {
    sigil_dtls_coap::Counters {
        hello_verify: a.hello_verify + b.hello_verify,
        bad_cookie: a.bad_cookie + b.bad_cookie,
        created: a.created + b.created,
        established: a.established + b.established,
        table_full: a.table_full + b.table_full,
        peer_limit: a.peer_limit + b.peer_limit,
        unknown_session: a.unknown_session + b.unknown_session,
        malformed: a.malformed + b.malformed,
        wrong_method: a.wrong_method + b.wrong_method,
        oversized: a.oversized + b.oversized,
        handshake_failed: a.handshake_failed + b.handshake_failed,
        refused_hello: a.refused_hello + b.refused_hello,
        duplicates: a.duplicates + b.duplicates,
        amplification: a.amplification + b.amplification,
        expired: a.expired + b.expired,
        deleted: a.deleted + b.deleted,
        not_admitted: a.not_admitted + b.not_admitted,
        handed_off: a.handed_off + b.handed_off,
        evicted: a.evicted + b.evicted,
        evicted_oldest: a.evicted_oldest + b.evicted_oldest,
        eviction_budget: a.eviction_budget + b.eviction_budget,
        expired_crowded: a.expired_crowded + b.expired_crowded,
    }
}

/// Leading bytes of [`carrier_peer`] that name the host: the host's family and its address
/// (IPv4, or the IPv6 /64) padded to 8 bytes.
const HOST_BYTES: usize = 9;

/// A peer address as the carrier's endpoint sees it: its host first (family, then an IPv4
/// address or an IPv6 /64), so the endpoint's per-peer limit is per host and no IPv4 host
/// shares its bytes with an IPv6 one; then the address and the port.
fn carrier_peer(peer: &SocketAddr) -> [u8; 27] {
    let mut b = [0u8; 27];
    match Host::of(*peer).ip() {
        std::net::IpAddr::V4(h) => {
            b[0] = 4;
            b[1..5].copy_from_slice(&h.octets());
        }
        std::net::IpAddr::V6(h) => {
            b[0] = 6;
            b[1..HOST_BYTES].copy_from_slice(&h.octets()[..HOST_BYTES - 1]);
        }
    }
    let ip = match peer.ip() {
        std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(a) => a.octets(),
    };
    b[HOST_BYTES..HOST_BYTES + 16].copy_from_slice(&ip);
    b[HOST_BYTES + 16..].copy_from_slice(&peer.port().to_be_bytes());
    b
}

/// The address bytes the cookie is bound to.
fn peer_bytes(peer: &SocketAddr) -> Vec<u8> {
    let mut v = match peer.ip() {
        std::net::IpAddr::V4(a) => a.octets().to_vec(),
        std::net::IpAddr::V6(a) => a.octets().to_vec(),
    };
    v.extend_from_slice(&peer.port().to_be_bytes());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rate table stays within [`RATE_HOSTS`] buckets under a spread of hosts; refilled
    /// buckets go first, then the least throttled, so a throttled host keeps its bucket.
    #[test]
    fn rate_buckets_are_bounded_and_throttled_hosts_keep_theirs() {
        let mut r = StartRate::new(2, 1);
        let t0 = Instant::ZERO;
        let throttled = Host::of_ip([198, 51, 100, 1].into());
        assert!(r.take(t0, throttled) && r.take(t0, throttled));
        assert!(!r.take(t0, throttled));
        for i in 0..3 * RATE_HOSTS as u32 {
            let h = Host::of_ip(std::net::Ipv4Addr::from(0x0a00_0000 + i).into());
            assert!(r.take(t0, h), "a new host has its burst");
            assert!(r.hosts.len() <= RATE_HOSTS);
        }
        assert!(
            !r.take(t0, throttled),
            "the throttled host kept its empty bucket"
        );
        // A second on, one token back.
        let t1 = t0 + Duration::from_secs(1);
        assert!(r.take(t1, throttled));
        assert!(!r.take(t1, throttled));
    }

    /// The figures docs/security.md quotes (x86-64, the server's feature set): an entry is
    /// charged at least its state, and not far beyond it.
    #[test]
    fn carrier_peers_are_host_first_with_their_family() {
        let key = |a: &str| carrier_peer(&a.parse().unwrap());
        // Distinct addresses stay distinct.
        assert_ne!(key("10.1.2.3:5683"), key("10.1.2.3:5684"));
        assert_ne!(key("10.1.2.3:1"), key("[2001:db8::1]:1"));
        // One /64 is one host; an IPv4-mapped address is its IPv4 host.
        let (x, y) = (
            key("[2001:db8:1:2:3:4:5:6]:1"),
            key("[2001:db8:1:2:ff:4:5:6]:2"),
        );
        assert_eq!(x[..HOST_BYTES], y[..HOST_BYTES]);
        assert_eq!(
            key("10.1.2.3:1")[..HOST_BYTES],
            key("[::ffff:10.1.2.3]:2")[..HOST_BYTES]
        );
        // An IPv6 /64 whose first bytes spell an IPv4 host is another host.
        assert_ne!(
            key("32.1.13.184:1")[..HOST_BYTES],
            key("[2001:db8::1]:1")[..HOST_BYTES]
        );
    }

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
