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
//! Both tables are capped. When one is full, only stale entries are evicted (a handshake
//! older than `handshake_timeout`, a session idle longer than `session_idle`); a live session
//! is never pushed out by newcomers, so a flood of ClientHellos cannot cut off devices that
//! are already connected. A ClientHello from the address of an established session (a device
//! that rebooted) starts a new handshake beside it, and replaces the session only once the
//! new handshake completes (RFC 6347 §4.2.8).

use crate::auth::{Credentials, PeerAuth};
use crate::stats::Stats;
use sigil_crypto::{CryptoError, CryptoProvider, PublicKey, Rng, RustCrypto, SecretKey};
use sigil_dtls::keys::MAX_PSK_LEN;
use sigil_dtls::record::RecordFacts;
use sigil_dtls::wire::ContentType;
use sigil_dtls::{
    Config, Connection, CookieKey, Peer as DtlsPeer, ServerCredentials, Session, Stateless,
    Traffic, Trust, MAX_DATAGRAM,
};
use sigil_identity::Identity;
use sigil_time::{Instant, UnixTime};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
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
    /// Most handshakes in progress (all peers).
    pub max_handshakes: usize,
    /// Most established sessions.
    pub max_sessions: usize,
    /// A handshake older than this is stale (evictable).
    pub handshake_timeout: Duration,
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
    /// the cache holds at most `max_sessions` entries, oldest dropped first.
    pub session_lifetime: Duration,
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
            max_sessions: 4096,
            handshake_timeout: Duration::from_secs(30),
            session_idle: Duration::from_secs(3600),
            certificate_chain: Vec::new(),
            client_anchors: Vec::new(),
            certificate_key: None,
            resumption: true,
            session_lifetime: Duration::from_secs(24 * 3600),
        }
    }
}

/// What DTLS trusts, shared by every connection and refreshed from the authorized list, with
/// the time certificates are checked at (the caller's, set on every call into the layer).
#[derive(Clone, Default)]
pub struct SharedTrust(Arc<RwLock<Credentials>>, Arc<Vec<Vec<u8>>>, Arc<AtomicI64>);

impl SharedTrust {
    /// With trust anchors for client certificates.
    pub fn with_anchors(anchors: Vec<Vec<u8>>) -> Self {
        Self(Arc::default(), Arc::new(anchors), Arc::default())
    }

    /// The time certificate chains are checked at from now on.
    fn set_time(&self, now: UnixTime) {
        self.2.store(now.as_secs(), Ordering::Relaxed);
    }

    pub fn replace(&self, c: Credentials) {
        if let Ok(mut g) = self.0.write() {
            *g = c;
        }
    }

    fn identity_of_key(key: &PublicKey) -> Option<Identity> {
        Identity::of_key(&RustCrypto, key, b"").ok()
    }
}

impl Trust for SharedTrust {
    /// The PSK identity is the text form of a provisioned identity (any label form).
    fn psk(&self, identity: &[u8], key: &mut [u8; MAX_PSK_LEN]) -> Option<usize> {
        let id = Identity::parse(std::str::from_utf8(identity).ok()?).ok()?;
        let g = self.0.read().ok()?;
        let psk = g.psks.get(&id)?;
        key.get_mut(..psk.len())?.copy_from_slice(psk);
        Some(psk.len())
    }

    /// A raw public key is trusted when its identity `h(P)` is on the authorized list.
    fn trusted_key(&self, key: &PublicKey) -> bool {
        let Some(id) = Self::identity_of_key(key) else {
            return false;
        };
        self.0.read().is_ok_and(|g| g.authorized.contains(&id))
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

type Conn = Connection<RustCrypto, SharedTrust>;

/// A peer in one of the tables: `K` is a handshaking [`Conn`] or an established [`Traffic`].
struct Peer<K> {
    conn: Box<K>,
    /// The connection ID this server gave the peer (RFC 9146), if the peer took one.
    cid: Option<[u8; CID_LEN]>,
    /// The caller's clock at creation and at the last authenticated datagram.
    created: Instant,
    last_seen: Instant,
    /// The client random of the ClientHello that started the handshake.
    hello_random: [u8; 32],
    auth: Option<PeerAuth>,
}

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
    sessions: HashMap<SocketAddr, Peer<Traffic<RustCrypto>>>,
    /// Sessions by connection ID, to follow a client whose address changed.
    by_cid: HashMap<[u8; CID_LEN], SocketAddr>,
    /// Resumable sessions by session ID, with the time they were made.
    cache: HashMap<[u8; 32], (Session, Instant)>,
    cache_order: VecDeque<[u8; 32]>,
    stats: Stats,
    buf: Vec<u8>,
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
        Self {
            config,
            key,
            cookie: CookieKey::new(cookie_secret),
            trust,
            handshakes: HashMap::new(),
            sessions: HashMap::new(),
            by_cid: HashMap::new(),
            cache: HashMap::new(),
            cache_order: VecDeque::new(),
            stats,
            buf: vec![0u8; MAX_DATAGRAM],
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

    /// The authenticated identity of an established session.
    pub fn session_auth(&self, peer: &SocketAddr) -> Option<&PeerAuth> {
        self.sessions.get(peer)?.auth.as_ref()
    }

    fn count(&self, key: &str) {
        self.stats.incr(key);
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
            let r = p
                .conn
                .handle_datagram(now, datagram)
                .and_then(|()| p.conn.failure().map_or(Ok(()), Err));
            self.flush(now, peer, &mut p, out);
            match r {
                Err(e) => {
                    self.count("dtls.handshake_failed");
                    tracing::debug!(%peer, error = %e, "DTLS handshake failed");
                    return Vec::new();
                }
                Ok(()) if p.conn.is_established() => return self.established(now, peer, p),
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
        let before = p.conn.dropped();
        let r = p
            .conn
            .handle_datagram(now, datagram)
            .and_then(|()| p.conn.failure().map_or(Ok(()), Err));
        self.flush(now, peer, &mut p, out);
        if let Err(e) = r {
            self.forget_cid(p.cid);
            self.count("dtls.session_closed");
            tracing::debug!(%peer, error = %e, "DTLS session ended");
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
                self.count("dtls.address_changed");
                tracing::debug!(%peer, "DTLS session followed its connection ID to a new address");
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
        if let Some(cid) = p.cid {
            self.by_cid.insert(cid, at);
        }
        if let Some(replaced) = self.sessions.insert(at, p) {
            // The new address had a session of its own (another client behind a rebinding
            // NAT): that one ends.
            self.forget_cid(replaced.cid);
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
        }
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
        if let Err(e) = p.conn.send(message) {
            self.count("dtls.send_failed");
            tracing::debug!(%peer, error = %e, "cannot protect response");
        }
        self.flush(now, peer, &mut p, out);
        self.sessions.insert(peer, p);
    }

    /// Retransmissions and expiry; call at [`SecureLayer::poll_timeout`] or sooner. Only
    /// handshakes have timers: an established session retransmits nothing on its own.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        unix: UnixTime,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        self.trust.set_time(unix);
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
                    self.forget_cid(p.cid);
                    self.count("dtls.handshake_timeout");
                }
            }
        }
        let stale = self.config.handshake_timeout;
        let before = self.handshakes.len();
        self.handshakes
            .retain(|_, p| now.saturating_since(p.created) < stale);
        for _ in self.handshakes.len()..before {
            self.count("dtls.handshake_expired");
        }
    }

    /// The earliest retransmission timer, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.handshakes
            .values()
            .filter_map(|p| p.conn.poll_timeout())
            .min()
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
                tracing::debug!(%peer, error = %e, "ClientHello dropped");
                return;
            }
            Stateless::Accept(cookie) => cookie,
        };
        // The cookie checked out, so the ClientHello parsed: its facts are there.
        let Some(hello) = facts.and_then(|f| f.client_hello) else {
            self.count("dtls.bad_client_hello");
            return;
        };
        if !self.make_room(now) {
            self.count("dtls.refused_tables_full");
            return;
        }
        let chain: Vec<&[u8]> = self
            .config
            .certificate_chain
            .iter()
            .map(Vec::as_slice)
            .collect();
        let cid = self.fresh_cid(rng);
        let lifetime = self.config.session_lifetime;
        let resume: Option<Session> = hello
            .requested_session
            .and_then(|id| self.cache.get(id))
            .filter(|(_, made)| now.saturating_since(*made) < lifetime)
            .map(|(s, _)| s.clone());
        let offer = ServerCredentials {
            issue_session_ids: self.config.resumption,
            resume: resume.as_ref().filter(|_| self.config.resumption),
            connection_id: cid.as_ref().map_or(&[][..], |c| &c[..]),
            psk: self.config.psk,
            key: (self.config.rpk || !chain.is_empty()).then_some(&self.key),
            require_client_key: self.config.require_client_auth,
            chain: (!chain.is_empty()).then_some(&chain[..]),
            ..ServerCredentials::NONE
        };
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
                let took_cid = !conn.connection_id().is_empty();
                if took_cid {
                    self.count("dtls.connection_id");
                }
                let mut p = Peer {
                    cid: cid.filter(|_| took_cid),
                    conn: Box::new(conn),
                    created: now,
                    last_seen: now,
                    hello_random: *hello.random,
                    auth: None,
                };
                self.count("dtls.handshake_started");
                self.flush(now, peer, &mut p, out);
                if self.handshakes.insert(peer, p).is_some() {
                    self.count("dtls.handshake_restarted");
                }
            }
            Err(e) => {
                self.count("dtls.handshake_failed");
                tracing::debug!(%peer, error = %e, "ClientHello refused");
                if let Some(n) = sigil_dtls::refusal(&e, datagram, &mut self.buf) {
                    out.push((peer, self.buf[..n].to_vec()));
                }
            }
        }
    }

    /// Room for one more handshake (which may become a session): evicts stale entries only.
    fn make_room(&mut self, now: Instant) -> bool {
        let stale_hs = self.config.handshake_timeout;
        if self.handshakes.len() >= self.config.max_handshakes {
            self.handshakes
                .retain(|_, p| now.saturating_since(p.created) < stale_hs);
        }
        if self.sessions.len() + self.handshakes.len() >= self.config.max_sessions {
            let idle = self.config.session_idle;
            let before = self.sessions.len();
            self.sessions
                .retain(|_, p| now.saturating_since(p.last_seen) < idle);
            for _ in self.sessions.len()..before {
                self.count("dtls.session_evicted_idle");
            }
            let sessions = &self.sessions;
            self.by_cid
                .retain(|cid, addr| sessions.get(addr).is_some_and(|p| p.cid == Some(*cid)));
        }
        self.handshakes.len() < self.config.max_handshakes
            && self.sessions.len() + self.handshakes.len() < self.config.max_sessions
    }

    /// A completed handshake becomes a session: only its established state is kept.
    fn established(&mut self, now: Instant, peer: SocketAddr, p: Peer<Conn>) -> Vec<Delivered> {
        let Peer {
            conn,
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
        let auth = match traffic.peer() {
            DtlsPeer::Key { key, .. } => {
                SharedTrust::identity_of_key(key).map(|identity| PeerAuth::RawPublicKey {
                    identity,
                    key: *key,
                })
            }
            DtlsPeer::Psk { .. } => std::str::from_utf8(traffic.psk_identity())
                .ok()
                .and_then(|t| Identity::parse(t).ok())
                .map(PeerAuth::Psk),
            DtlsPeer::Anonymous(_) => None,
        };
        self.count("dtls.handshake_completed");
        if traffic.resumed() {
            self.count("dtls.resumed");
        } else if let Some(session) = traffic.session() {
            self.remember(session, now);
        }
        let mut p = Peer {
            conn: Box::new(traffic),
            cid,
            created,
            last_seen: now,
            hello_random,
            auth,
        };
        tracing::debug!(%peer, auth = ?p.auth.as_ref().map(|a| a.identity().to_string()), "DTLS session established");
        let delivered = self.drain(peer, &mut p);
        if let Some(cid) = p.cid {
            self.by_cid.insert(cid, peer);
        }
        if let Some(old) = self.sessions.insert(peer, p) {
            self.count("dtls.session_replaced");
            self.forget_cid(old.cid);
        }
        delivered
    }

    /// Keeps a session for resumption, dropping the oldest beyond the cap.
    fn remember(&mut self, session: Session, now: Instant) {
        let id = session.id;
        if self.cache.insert(id, (session, now)).is_none() {
            self.cache_order.push_back(id);
        }
        while self.cache.len() > self.config.max_sessions {
            match self.cache_order.pop_front() {
                Some(old) => {
                    self.cache.remove(&old);
                }
                None => break,
            }
        }
    }

    /// Identities with a session (for tests and status).
    pub fn authenticated(&self) -> HashSet<Identity> {
        self.sessions
            .values()
            .filter_map(|p| p.auth.as_ref().map(|a| *a.identity()))
            .collect()
    }
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
