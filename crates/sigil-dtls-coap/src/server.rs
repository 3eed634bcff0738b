//! The server role: the `/dtls` resource and the session resources below it.
//!
//! - `PUT /dtls` is stateless until its ClientHello carries a valid cookie
//!   ([`sigil_dtls::CookieKey::respond`], bound to the peer's address and the ClientHello): it
//!   is answered with 4.01 and the HelloVerifyRequest, never larger than the request, and
//!   nothing is kept. With a valid cookie the session resource `dtls/<id>` is created and the
//!   answer is 2.01 with its Location-Path and the server's flight.
//! - `POST /dtls/<id>` carries the client's next flight (Block1 when large, gathered in the
//!   session by the message core's [`sigil_coap::exchange::blockwise::Reassembly`]; block 0
//!   starts it over); the answer is 2.04 with the server's final flight.
//! - `GET /dtls/<id>` returns the server's latest flight, for Block2 (RFC 7959 §2.4; a client
//!   asking for larger blocks gets the server's size at the offset it asked for).
//! - `DELETE /dtls/<id>` abandons a session still in its handshake (2.02). An established
//!   session is not deleted by a plain CoAP request, which anyone who can send from the peer's
//!   address could forge: it ends with an authenticated DTLS `close_notify` on the record
//!   layer, after which the caller calls [`Endpoint::remove`].
//!
//! The table holds at most `N` sessions, and at most [`EndpointConfig::max_per_peer`] for one
//! peer (or for one host, with [`EndpointConfig::host_prefix`]). When it is full, a ClientHello
//! with a valid cookie is first accepted by the handshake (one it refuses pushes no one out);
//! then it may take the place of a stranger's half-open handshake (not one of a peer the caller
//! knows completed a handshake before) that went `handshake_shield` without progress (a client
//! flight that moved it on; 15 s by default, one CoAP retransmission sequence), those that
//! never progressed first: the oldest such of the peer holding the most, if that peer holds
//! more than the newcomer's would, else, for a newcomer whose host holds none (or a known
//! peer), the oldest such of all; a newcomer the caller calls a [`Standing::Suspect`] (its
//! host's last handshake was dropped unfinished) takes only a free slot. Evictions have a budget of `N` per `handshake_timeout` and a
//! reserve of [`EVICTION_RESERVE`]; past it, and with no candidate, the newcomer gets 5.03. A
//! handshake expires `handshake_timeout` after it was created (with more than half the table in
//! handshakes, a stranger's once it went `crowded_handshake_timeout`, at least a third more
//! than the shield, without progress), an established session after it was idle for `idle_timeout`. Session IDs are
//! random, so an off-path sender cannot name another peer's session. Each session answers a
//! retransmitted request (same peer, message ID, token and length) with the cached response
//! instead of a second handshake step (RFC 7252 §4.5): the message core's deduplication
//! ([`sigil_coap::exchange::dedup`]) keeps the session's latest request and its answer until
//! the next request or EXCHANGE_LIFETIME (247 s by default) after it arrived, whichever comes
//! first; while it is kept, a copy of a request older than it is dropped. Every refusal is
//! counted in [`Counters`].
//!
//! A caller that keeps established sessions in a table of its own (a server that also speaks
//! record-layer DTLS) takes each one out with [`Endpoint::take_established`]; the slot then
//! keeps only the last response, for a retransmission of the final request, until it is
//! needed for a new session or `handshake_timeout` has passed (the response itself at most
//! EXCHANGE_LIFETIME).

use crate::{parse_id, MAX_FLIGHT, PATH};
use core::time::Duration;
use sigil_coap::exchange::blockwise::{block2_of, BlockwiseError, Reassembly};
use sigil_coap::message::option;
use sigil_coap::{BlockOption, Code, Message, MessageType, TransmissionParameters};
use sigil_crypto::{CryptoProvider, Rng};
use sigil_dtls::handshake::{ClientHello, Fragment};
use sigil_dtls::record::Record;
use sigil_dtls::{Config, CookieKey, ServerCredentials, Stateless, Traffic, Trust, WholeFlights};
use sigil_time::Instant;

mod admission;
mod reply;
use reply::{answers, cache, key, write_reply, Answers, Reply};

/// Longest peer address (the caller's bytes, e.g. an IPv6 socket address).
pub const MAX_PEER: usize = 32;

/// The server's parameters.
#[derive(Clone, Copy, Debug)]
pub struct EndpointConfig {
    /// The handshake's; its timers and PMTU are not used here.
    pub dtls: Config,
    /// Block size exponent of the server's responses (RFC 7959 §2.2); 6 at most.
    pub block_szx: u8,
    /// Sessions one peer address may hold (in their handshake or established here).
    pub max_per_peer: usize,
    /// How many leading bytes of a peer address name its host, for `max_per_peer`: a caller
    /// that writes the host first (an IPv4 address, an IPv6 /64) limits hosts rather than
    /// ports. 0: the whole address.
    pub host_prefix: usize,
    /// A session still in its handshake is removed after this long without a request.
    pub handshake_timeout: Duration,
    /// With more than half the table in handshakes, a stranger's handshake (see
    /// [`Endpoint::handle_datagram_from`])     /// without progress (a client flight that moved it on) for this long is removed first
    /// (never less than a third more than `handshake_shield`, so a newcomer has a while to
    /// push out what went the shield without progress before it expires).
    pub crowded_handshake_timeout: Duration,
    /// A newcomer may push out a stranger's half-open handshake only once it had no progress
    /// for this long: one CoAP retransmission sequence (RFC 7252 §4.8: 2 + 4 + 8 s), so a
    /// client that lost a request or its answer twice still moves its handshake on in time.
    pub handshake_shield: Duration,
    /// An established session is removed after this long unused.
    pub idle_timeout: Duration,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            dtls: Config::default(),
            block_szx: 6,
            max_per_peer: 2,
            host_prefix: 0,
            handshake_timeout: Duration::from_secs(247),
            crowded_handshake_timeout: Duration::from_secs(8),
            handshake_shield: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(3600),
        }
    }
}

/// What the endpoint did with what it was given, one counter per outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// HelloVerifyRequests sent for a ClientHello without a cookie.
    pub hello_verify: u64,
    /// ClientHellos whose cookie was not this server's for that peer and ClientHello
    /// (answered with a fresh HelloVerifyRequest).
    pub bad_cookie: u64,
    /// Session resources created.
    pub created: u64,
    /// Handshakes completed.
    pub established: u64,
    /// Refused: the table is full (5.03).
    pub table_full: u64,
    /// Refused: the peer address holds its maximum of sessions (5.03).
    pub peer_limit: u64,
    /// Refused: no such session for this peer, or no such resource (4.04).
    pub unknown_session: u64,
    /// Dropped or refused: not a CoAP request this endpoint can read (4.00, 4.02, 4.08, or
    /// nothing for a datagram that is not a Confirmable request).
    pub malformed: u64,
    /// Refused: a method the resource does not allow (4.05).
    pub wrong_method: u64,
    /// Refused: a payload larger than a flight, or a ClientHello in blocks (4.13).
    pub oversized: u64,
    /// The handshake failed on a flight: the session is removed (4.03).
    pub handshake_failed: u64,
    /// The ClientHello with a valid cookie was refused by the handshake (4.03; no state).
    pub refused_hello: u64,
    /// A retransmitted request answered with the cached response.
    pub duplicates: u64,
    /// A HelloVerifyRequest that would have been larger than its request: dropped.
    pub amplification: u64,
    /// Sessions removed by idle expiry.
    pub expired: u64,
    /// Sessions removed by `DELETE`.
    pub deleted: u64,
    /// Refused: the caller's admission check said no (5.03), e.g. the host's handshake rate.
    pub not_admitted: u64,
    /// Established sessions the caller took out ([`Endpoint::take_established`]).
    pub handed_off: u64,
    /// Half-open handshakes pushed out for a newcomer when the table was full (the oldest of
    /// the host holding the most).
    pub evicted: u64,
    /// Half-open handshakes of strangers pushed out, oldest first, for a newcomer whose host
    /// held none (or a peer that completed a handshake before) when no host held more.
    pub evicted_oldest: u64,
    /// Strangers' handshakes removed early, without progress for `crowded_handshake_timeout`
    /// with more than half the table in handshakes.
    pub expired_crowded: u64,
    /// Refused (5.03): the table is full and its budget of evictions (`N` per
    /// `handshake_timeout`, and a reserve of 2) is spent for now.
    pub eviction_budget: u64,
}

#[allow(clippy::large_enum_variant)]
enum SessionState<C, T> {
    Handshake(WholeFlights<C, T>),
    Established(Traffic<C>),
    /// Established and taken out by the caller: only the cached response is kept.
    HandedOff,
    /// Only while moving from one to the other.
    Moving,
}

struct Session<C, T> {
    id: u32,
    peer: [u8; MAX_PEER],
    peer_len: usize,
    /// When the session resource was created: a handshake expires `handshake_timeout` after
    /// it, however busy the peer keeps it.
    created: Instant,
    /// The last request (an established session's idle expiry), or the hand-off.
    last_seen: Instant,
    /// Its creation, then each client flight that moved the handshake on: a stranger's is
    /// safe from newcomers `handshake_shield` after this.
    progress: Instant,
    /// Whether a client flight moved it on: those that never did give way first.
    progressed: bool,
    state: SessionState<C, T>,
    /// The server's latest flight (the resource's representation, source of Block2).
    flight: [u8; MAX_FLIGHT],
    flight_len: usize,
    /// The client's flight gathered from Block1 requests, and where that stands.
    body: [u8; MAX_FLIGHT],
    upload: Reassembly,
    /// Its peer completed a handshake before (the caller said so): kept over strangers'.
    known: bool,
    /// The message ID of the `PUT` that created it: with the latest one, the span of this
    /// client's requests so far (it sends one at a time, with increasing IDs).
    first_mid: u16,
    /// The latest request and the response sent to it (RFC 7252 §4.5), until
    /// EXCHANGE_LIFETIME after it arrived or the next request.
    dedup: Answers,
}

impl<C, T> Session<C, T> {
    fn peer(&self) -> &[u8] {
        &self.peer[..self.peer_len]
    }

    fn established(&self) -> bool {
        matches!(self.state, SessionState::Established(_))
    }

    fn handed_off(&self) -> bool {
        matches!(self.state, SessionState::HandedOff)
    }
}

/// An established session taken out of the endpoint.
pub struct Established<C> {
    /// The session resource's ID (`dtls/<id>`).
    pub id: u32,
    peer: [u8; MAX_PEER],
    peer_len: usize,
    pub traffic: Traffic<C>,
}

impl<C> Established<C> {
    /// The peer address bytes the handshake came from.
    pub fn peer(&self) -> &[u8] {
        &self.peer[..self.peer_len]
    }
}

/// The server's `/dtls` resource and its table of at most `N` session resources.
///
/// `T` is what the handshakes trust, cloned into each (a reference, or a handle to shared
/// state).
pub struct Endpoint<'a, C, T, const N: usize> {
    crypto: C,
    trust: T,
    offer: ServerCredentials<'a>,
    config: EndpointConfig,
    cookies: CookieKey,
    sessions: [Option<Session<C, T>>; N],
    counters: Counters,
    /// What the caller knows of the peer of the datagram in hand
    /// ([`Endpoint::handle_datagram_from`]).
    standing: Standing,
    /// Evictions left (thousandths), refilled at `N` per `handshake_timeout`, at most
    /// [`EVICTION_RESERVE`], as of `evictions_at`.
    evictions: u64,
    evictions_at: Option<Instant>,
}

/// The evictions a full table allows at once, before its rate of `N` per
/// `handshake_timeout`.
pub const EVICTION_RESERVE: u64 = 2;

impl<'a, C: CryptoProvider + Clone, T: Trust + Clone, const N: usize> Endpoint<'a, C, T, N> {
    /// An endpoint with an empty table. `cookie_secret` keys the stateless cookies (fresh
    /// random bytes, rotated by making a new endpoint or kept for the process's life).
    pub fn new(
        crypto: C,
        trust: T,
        offer: ServerCredentials<'a>,
        config: EndpointConfig,
        cookie_secret: [u8; 32],
    ) -> Self {
        Self {
            crypto,
            trust,
            offer,
            config: EndpointConfig {
                block_szx: config.block_szx.min(6),
                ..config
            },
            cookies: CookieKey::new(cookie_secret),
            sessions: core::array::from_fn(|_| None),
            counters: Counters::default(),
            standing: Standing::Stranger,
            evictions: EVICTION_RESERVE * 1000,
            evictions_at: None,
        }
    }

    /// Turns the cookie secret (RFC 6347 §4.2.1) to one derived from it; cookies of the
    /// previous secret stay valid until the next turn.
    pub fn rotate_cookie_secret(&mut self) {
        self.cookies.rotate_derived(&self.crypto);
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Sessions in the table (in their handshake or established here; not the ones taken
    /// out).
    pub fn sessions(&self) -> usize {
        self.sessions
            .iter()
            .flatten()
            .filter(|s| !s.handed_off())
            .count()
    }

    /// Handshakes in progress whose peer address starts with `host` (all of them for an
    /// empty `host`): what a caller with its own session table counts as sessions to be.
    pub fn half_open(&self, host: &[u8]) -> usize {
        self.sessions
            .iter()
            .flatten()
            .filter(|s| !s.established() && !s.handed_off() && s.peer().starts_with(host))
            .count()
    }

    /// Takes out an established session, if there is one: its [`Traffic`] is the caller's
    /// from now on. Its slot keeps the last response, for a retransmission of the request
    /// that completed the handshake, until the slot is needed, `handshake_timeout` passed, or
    /// EXCHANGE_LIFETIME after that request.
    pub fn take_established(&mut self) -> Option<Established<C>> {
        let s = self
            .sessions
            .iter_mut()
            .flatten()
            .find(|s| s.established())?;
        let SessionState::Established(traffic) =
            core::mem::replace(&mut s.state, SessionState::HandedOff)
        else {
            return None;
        };
        self.counters.handed_off += 1;
        Some(Established {
            id: s.id,
            peer: s.peer,
            peer_len: s.peer_len,
            traffic,
        })
    }

    /// For a caller that keeps established sessions itself: if `datagram` is a Confirmable
    /// `DELETE /dtls/<id>` of `established` (the ID of the caller's session with this peer,
    /// made over this carrier), answers it 4.05 into `out` as for an established session here
    /// (it ends with its authenticated `close_notify`, never a forgeable CoAP request), also
    /// once the handed-off slot is gone. None for anything else (hand it to
    /// [`Endpoint::handle_datagram_with`]).
    pub fn refuse_delete_of(
        &mut self,
        established: u32,
        datagram: &[u8],
        out: &mut [u8],
    ) -> Option<usize> {
        let req = Message::parse(datagram).ok()?;
        if req.mtype != MessageType::Confirmable || req.code != Code::DELETE {
            return None;
        }
        let mut path = req.option_values(option::URI_PATH);
        match (path.next(), path.next(), path.next()) {
            (Some(p), Some(id), None)
                if p == PATH.as_bytes() && parse_id(id) == Some(established) => {}
            _ => return None,
        }
        self.counters.wrong_method += 1;
        write_reply(&req, &Reply::code(Code::METHOD_NOT_ALLOWED), out)
    }

    /// Removes session `id` of `peer` (e.g. after its authenticated `close_notify`). True if
    /// it was there.
    pub fn remove(&mut self, id: u32, peer: &[u8]) -> bool {
        let Some(slot) = self
            .sessions
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|s| s.id == id && s.peer() == peer))
        else {
            return false;
        };
        *slot = None;
        true
    }

    /// The session `id` of `peer`, if established: its [`Traffic`], for the DTLS records of
    /// application data. Using it counts as activity (idle expiry starts again at `now`).
    pub fn traffic_mut(&mut self, id: u32, peer: &[u8], now: Instant) -> Option<&mut Traffic<C>> {
        let s = self
            .sessions
            .iter_mut()
            .flatten()
            .find(|s| s.id == id && s.peer() == peer)?;
        s.last_seen = now;
        match &mut s.state {
            SessionState::Established(t) => Some(t),
            _ => None,
        }
    }

    /// The established session of `peer` with the highest id, if any (how a caller routes a
    /// DTLS record datagram that carries no connection ID).
    pub fn session_of_peer(&self, peer: &[u8]) -> Option<u32> {
        self.sessions
            .iter()
            .flatten()
            .filter(|s| s.peer() == peer && s.established())
            .map(|s| s.id)
            .max()
    }

    /// When the next session expires.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.sessions.iter().flatten().map(|s| self.expiry(s)).min()
    }

    /// A handshake `handshake_timeout` after its creation; an established session
    /// `idle_timeout` after its last use; a handed-off slot once a retransmission of its last
    /// request can no longer come (RFC 7252 §4.8.2: MAX_TRANSMIT_SPAN, 45 s), and not before
    /// `handshake_timeout`.
    fn expiry(&self, s: &Session<C, T>) -> Instant {
        match s.state {
            SessionState::Established(_) => s.last_seen.saturating_add(self.config.idle_timeout),
            SessionState::HandedOff => s.last_seen.saturating_add(
                self.config
                    .handshake_timeout
                    .max(TransmissionParameters::default().max_transmit_span()),
            ),
            _ => s.created.saturating_add(self.config.handshake_timeout),
        }
    }

    /// Removes the sessions past their expiry.
    pub fn handle_timeout(&mut self, now: Instant) {
        for i in 0..N {
            let expired = self.sessions[i]
                .as_ref()
                .is_some_and(|s| now >= self.expiry(s));
            if let Some(s) = self.sessions[i].as_mut() {
                s.dedup.handle_timeout(now);
            }
            if expired {
                // A handed-off slot only held an answer: not a session that expired.
                if self.sessions[i].take().is_some_and(|s| !s.handed_off()) {
                    self.counters.expired += 1;
                }
            }
        }
    }

    /// One datagram from `peer` (its address bytes). Returns the length of the response
    /// written to `out`, if any; `out` should hold [`crate::MAX_DATAGRAM`] bytes.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        peer: &[u8],
        datagram: &[u8],
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Option<usize> {
        let offer = self.offer;
        self.handle_datagram_with(now, peer, datagram, &offer, &mut |_| true, rng, out)
    }

    /// [`Endpoint::handle_datagram_with`] for a peer of the given [`Standing`]: a
    /// [`Standing::Known`] peer (e.g. the caller holds a session for its address, or made
    /// the session it asks to resume for its host) may push out a stranger's half-open
    /// handshake when the table is full, and its own is kept over strangers' when the table
    /// is crowded; a [`Standing::Suspect`] one takes only a free slot.
    #[allow(clippy::too_many_arguments)]
    pub fn handle_datagram_from(
        &mut self,
        now: Instant,
        peer: &[u8],
        standing: Standing,
        datagram: &[u8],
        offer: &ServerCredentials<'_>,
        admit: &mut dyn FnMut(&[u8]) -> bool,
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Option<usize> {
        self.standing = standing;
        let r = self.handle_datagram_with(now, peer, datagram, offer, admit, rng, out);
        self.standing = Standing::Stranger;
        r
    }

    /// [`Endpoint::handle_datagram`] with this ClientHello's `offer` instead of the one the
    /// endpoint was made with (e.g. a fresh connection ID, a session to resume, credentials
    /// the caller owns), and `admit`, asked with the peer's address once its cookie is valid
    /// and the table has room, before any handshake work: false refuses the session (5.03),
    /// e.g. for the caller's per-host rate or its own session budget.
    #[allow(clippy::too_many_arguments)]
    pub fn handle_datagram_with(
        &mut self,
        now: Instant,
        peer: &[u8],
        datagram: &[u8],
        offer: &ServerCredentials<'_>,
        admit: &mut dyn FnMut(&[u8]) -> bool,
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Option<usize> {
        self.handle_timeout(now);
        let Ok(req) = Message::parse(datagram) else {
            self.counters.malformed += 1;
            return None;
        };
        // Only Confirmable requests: the carrier's reliability is CoAP's.
        if req.mtype != MessageType::Confirmable || !req.code.is_request() {
            self.counters.malformed += 1;
            return None;
        }
        if peer.len() > MAX_PEER || req.unknown_critical_option().is_some() {
            self.counters.malformed += 1;
            return write_reply(&req, &Reply::code(Code::BAD_OPTION), out);
        }
        // A retransmission of a request a session answered: the same answer (§4.5).
        let k = key(&req, datagram.len());
        if let Some(answer) = self
            .sessions
            .iter_mut()
            .flatten()
            .filter(|s| s.peer() == peer)
            .find_map(|s| s.dedup.seen(&k, req.message_id, now))
        {
            self.counters.duplicates += 1;
            // None kept (it did not fit the caller's buffer): nothing to send again.
            let a = answer?;
            out.get_mut(..a.len())?.copy_from_slice(a);
            return Some(a.len());
        }
        // A late copy of an earlier request of a session (its answer was superseded, and the
        // client has moved on): dropped, so it cannot open a second session.
        if self.sessions.iter().flatten().any(|s| {
            s.peer() == peer
                && s.dedup.store().mid().is_some_and(|last| {
                    req.message_id.wrapping_sub(s.first_mid) < last.wrapping_sub(s.first_mid)
                })
        }) {
            self.counters.duplicates += 1;
            return None;
        }
        let mut path = req.option_values(option::URI_PATH);
        let route = match (path.next(), path.next(), path.next()) {
            (Some(p), None, _) if p == PATH.as_bytes() => Route::Dtls,
            (Some(p), Some(id), None) if p == PATH.as_bytes() => match parse_id(id) {
                Some(id) => Route::Session(id),
                None => Route::Unknown,
            },
            _ => Route::Unknown,
        };
        match (route, req.code) {
            (Route::Dtls, Code::PUT) => {
                let hello = Hello {
                    request_len: datagram.len(),
                    offer,
                    admit,
                    known: self.standing == Standing::Known,
                    may_evict: self.standing != Standing::Suspect,
                };
                self.hello(now, peer, &req, hello, rng, out)
            }
            (Route::Dtls, _) => {
                self.counters.wrong_method += 1;
                write_reply(&req, &Reply::code(Code::METHOD_NOT_ALLOWED), out)
            }
            (Route::Session(id), _) => self.session(now, peer, id, &req, datagram.len(), out),
            (Route::Unknown, _) => {
                self.counters.unknown_session += 1;
                write_reply(&req, &Reply::code(Code::NOT_FOUND), out)
            }
        }
    }

    /// `PUT /dtls`: the cookie exchange, then the session resource.
    fn hello(
        &mut self,
        now: Instant,
        peer: &[u8],
        req: &Message<'_>,
        hello: Hello<'_, '_>,
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Option<usize> {
        let request_len = hello.request_len;
        // A stateless server cannot gather blocks: the ClientHello comes whole.
        if req.block1().is_some() || req.payload.len() > MAX_FLIGHT {
            self.counters.oversized += 1;
            return write_reply(req, &Reply::code(Code::REQUEST_ENTITY_TOO_LARGE), out);
        }
        let mut hvr = [0u8; 128];
        let proof = match self
            .cookies
            .respond(&self.crypto, peer, req.payload, &mut hvr)
        {
            Stateless::HelloVerify(n) => {
                if carries_cookie(req.payload) {
                    self.counters.bad_cookie += 1;
                } else {
                    self.counters.hello_verify += 1;
                }
                let reply = Reply {
                    payload: &hvr[..n],
                    ..Reply::code(Code::UNAUTHORIZED)
                };
                let len = write_reply(req, &reply, out)?;
                // No amplification: an unverified address never gets more than it sent.
                if len > request_len {
                    self.counters.amplification += 1;
                    return None;
                }
                return Some(len);
            }
            Stateless::Drop(_) => {
                self.counters.malformed += 1;
                return write_reply(req, &Reply::code(Code::BAD_REQUEST), out);
            }
            Stateless::Accept(proof) => proof,
        };
        // The address is verified now; the table's bounds come next.
        let host = host_part(peer, self.config.host_prefix);
        if self
            .sessions
            .iter()
            .flatten()
            .filter(|s| !s.handed_off() && s.peer().starts_with(host))
            .count()
            >= self.config.max_per_peer
        {
            self.counters.peer_limit += 1;
            return write_reply(req, &Reply::code(Code::SERVICE_UNAVAILABLE), out);
        }
        // Crowded (more than half the table in handshakes): strangers' handshakes older than
        // the short bound go first.
        self.expire_crowded(now);
        // A free slot, else the one handed off longest ago (it only holds a cached answer),
        // else the oldest half-open handshake of the host holding the most, if it holds more
        // than the newcomer's host would with this one, else (for a newcomer whose host holds
        // none, or a known peer) the oldest stranger's that has had its round trips.
        let free = self.sessions.iter().position(Option::is_none).or_else(|| {
            (0..N)
                .filter(|&i| self.sessions[i].as_ref().is_some_and(|s| s.handed_off()))
                .min_by_key(|&i| self.sessions[i].as_ref().map(|s| s.last_seen))
        });
        let (slot, evicting) = match free {
            Some(slot) => (slot, None),
            None => match self
                .eviction_for(now, host, hello.known)
                .filter(|_| hello.may_evict)
            {
                // A known peer's push-out is not held to the budget strangers spend.
                Some(_) if !hello.known && !self.eviction_left(now) => {
                    self.counters.eviction_budget += 1;
                    return write_reply(req, &Reply::code(Code::SERVICE_UNAVAILABLE), out);
                }
                Some((slot, oldest)) => (slot, Some(oldest)),
                None => {
                    self.counters.table_full += 1;
                    return write_reply(req, &Reply::code(Code::SERVICE_UNAVAILABLE), out);
                }
            },
        };
        if !(hello.admit)(peer) {
            self.counters.not_admitted += 1;
            return write_reply(req, &Reply::code(Code::SERVICE_UNAVAILABLE), out);
        }
        let Some(id) = self.fresh_id(rng) else {
            self.counters.table_full += 1;
            return write_reply(req, &Reply::code(Code::SERVICE_UNAVAILABLE), out);
        };
        // The ClientHello is accepted before anyone is pushed out: one the handshake refuses
        // costs no one a slot.
        let mut flight = [0u8; MAX_FLIGHT];
        let hs = match WholeFlights::accept(
            self.crypto.clone(),
            self.trust.clone(),
            self.config.dtls,
            hello.offer,
            rng,
            proof,
            req.payload,
            &mut flight,
        ) {
            Ok((hs, n)) => (hs, n),
            Err(_) => {
                self.counters.refused_hello += 1;
                return write_reply(req, &Reply::code(Code::FORBIDDEN), out);
            }
        };
        if let Some(oldest) = evicting {
            self.sessions[slot] = None;
            if !hello.known {
                self.evictions = self.evictions.saturating_sub(1000);
            }
            if oldest {
                self.counters.evicted_oldest += 1;
            } else {
                self.counters.evicted += 1;
            }
        }
        let mut p = [0u8; MAX_PEER];
        p[..peer.len()].copy_from_slice(peer);
        let s = self.sessions[slot].insert(Session {
            id,
            peer: p,
            peer_len: peer.len(),
            created: now,
            last_seen: now,
            progress: now,
            progressed: false,
            state: SessionState::Handshake(hs.0),
            flight,
            flight_len: hs.1,
            body: [0; MAX_FLIGHT],
            upload: Reassembly::new(MAX_FLIGHT),
            known: hello.known,
            first_mid: req.message_id,
            dedup: answers(),
        });
        self.counters.created += 1;
        let (range, block2) = block2_of(None, self.config.block_szx, s.flight_len).ok()?;
        let reply = Reply {
            location: Some(id),
            block2,
            payload: &s.flight[range],
            ..Reply::code(Code::CREATED)
        };
        cache(&mut s.dedup, now, req, request_len, &reply, out)
    }

    /// A random session ID no session holds (nonzero).
    fn fresh_id(&self, rng: &mut dyn Rng) -> Option<u32> {
        for _ in 0..8 {
            let mut b = [0u8; 4];
            rng.fill(&mut b).ok()?;
            let id = u32::from_be_bytes(b);
            if id != 0 && !self.sessions.iter().flatten().any(|s| s.id == id) {
                return Some(id);
            }
        }
        None
    }

    /// A request to the session resource `id`.
    fn session(
        &mut self,
        now: Instant,
        peer: &[u8],
        id: u32,
        req: &Message<'_>,
        len: usize,
        out: &mut [u8],
    ) -> Option<usize> {
        let Some(slot) = self
            .sessions
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.id == id && s.peer() == peer))
        else {
            self.counters.unknown_session += 1;
            return write_reply(req, &Reply::code(Code::NOT_FOUND), out);
        };
        let szx = self.config.block_szx;
        let s = self.sessions[slot].as_mut()?;
        if s.handed_off() {
            // Only its final answer is left (retransmissions were answered above); the
            // session is established at the caller, so a DELETE is refused as for one here.
            if req.code == Code::DELETE {
                self.counters.wrong_method += 1;
                return write_reply(req, &Reply::code(Code::METHOD_NOT_ALLOWED), out);
            }
            self.counters.unknown_session += 1;
            return write_reply(req, &Reply::code(Code::NOT_FOUND), out);
        }
        s.last_seen = now;
        match req.code {
            Code::DELETE if s.established() => {
                // Forgeable from the peer's address: an established session ends with its
                // authenticated close_notify instead.
                self.counters.wrong_method += 1;
                write_reply(req, &Reply::code(Code::METHOD_NOT_ALLOWED), out)
            }
            Code::DELETE => {
                self.sessions[slot] = None;
                self.counters.deleted += 1;
                write_reply(req, &Reply::code(Code::DELETED), out)
            }
            Code::GET => {
                let asked = match req.block2() {
                    None => None,
                    Some(Ok(b)) => Some(b),
                    Some(Err(_)) => {
                        self.counters.malformed += 1;
                        return write_reply(req, &Reply::code(Code::BAD_OPTION), out);
                    }
                };
                let Ok((range, block2)) = block2_of(asked, szx, s.flight_len) else {
                    self.counters.malformed += 1;
                    return write_reply(req, &Reply::code(Code::BAD_OPTION), out);
                };
                // A flight in one block is still answered with its Block2 (§2.4: the
                // client asked for a block).
                let whole = BlockOption::new(0, false, asked.map_or(szx, |b| b.szx.min(szx)));
                let reply = Reply {
                    block2: block2.or(Some(whole)),
                    payload: &s.flight[range],
                    ..Reply::code(Code::CONTENT)
                };
                cache(&mut s.dedup, now, req, len, &reply, out)
            }
            Code::POST if !s.established() => self.flight(now, slot, req, len, out),
            _ => {
                self.counters.wrong_method += 1;
                write_reply(req, &Reply::code(Code::METHOD_NOT_ALLOWED), out)
            }
        }
    }

    /// `POST /dtls/<id>`: one block (or all) of the client's flight.
    fn flight(
        &mut self,
        now: Instant,
        slot: usize,
        req: &Message<'_>,
        len: usize,
        out: &mut [u8],
    ) -> Option<usize> {
        let szx = self.config.block_szx;
        let s = self.sessions[slot].as_mut()?;
        let block1 = match req.block1() {
            None => None,
            Some(Ok(b)) => Some(b),
            Some(Err(_)) => {
                self.counters.malformed += 1;
                return write_reply(req, &Reply::code(Code::BAD_OPTION), out);
            }
        };
        // Without Block1 the payload is the whole flight: one last block 0.
        let block = block1.unwrap_or(BlockOption::new(0, false, 6));
        let at = match s.upload.accept(block, req.payload.len()) {
            Ok(at) => at,
            Err(e) => {
                // A refused block ends the transfer: the client starts the body again.
                s.upload = Reassembly::new(MAX_FLIGHT);
                let code = match e {
                    // RFC 7959 §2.3: 4.08 for a block out of sequence.
                    BlockwiseError::OutOfSequence => Code::REQUEST_ENTITY_INCOMPLETE,
                    BlockwiseError::TooLarge => Code::REQUEST_ENTITY_TOO_LARGE,
                    _ => Code::BAD_REQUEST,
                };
                if code == Code::REQUEST_ENTITY_TOO_LARGE {
                    self.counters.oversized += 1;
                } else {
                    self.counters.malformed += 1;
                }
                return write_reply(req, &Reply::code(code), out);
            }
        };
        s.body[at.offset..at.offset + req.payload.len()].copy_from_slice(req.payload);
        if let Some(b) = block1.filter(|b| b.more) {
            let reply = Reply {
                block1: Some(b),
                ..Reply::code(Code::CONTINUE)
            };
            return cache(&mut s.dedup, now, req, len, &reply, out);
        }
        let SessionState::Handshake(hs) = &mut s.state else {
            return None;
        };
        let n = match hs.handle_flight(&s.body[..s.upload.received()], &mut s.flight) {
            Ok(n) => n,
            Err(_) => {
                self.sessions[slot] = None;
                self.counters.handshake_failed += 1;
                return write_reply(req, &Reply::code(Code::FORBIDDEN), out);
            }
        };
        s.flight_len = n;
        s.upload = Reassembly::new(MAX_FLIGHT);
        s.progress = now;
        s.progressed = true;
        if hs.is_established() {
            if let SessionState::Handshake(hs) =
                core::mem::replace(&mut s.state, SessionState::Moving)
            {
                if let Some(t) = hs.into_established() {
                    s.state = SessionState::Established(t);
                }
            }
            if !s.established() {
                self.sessions[slot] = None;
                return None;
            }
            self.counters.established += 1;
        }
        let (range, block2) = block2_of(None, szx, s.flight_len).ok()?;
        let reply = Reply {
            block2,
            block1: block1.map(|b| BlockOption::new(b.num, false, b.szx)),
            payload: &s.flight[range],
            ..Reply::code(Code::CHANGED)
        };
        cache(&mut s.dedup, now, req, len, &reply, out)
    }
}

/// The first `prefix` bytes of a peer address (its host), or all of it for 0.
fn host_part(peer: &[u8], prefix: usize) -> &[u8] {
    if prefix == 0 {
        peer
    } else {
        &peer[..prefix.min(peer.len())]
    }
}

/// What the caller knows of a peer ([`Endpoint::handle_datagram_from`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// It (or a device at its host) completed a handshake before: when the table is full it
    /// may push out a stranger's half-open handshake, not held to the budget of evictions
    /// strangers spend, and its own is never pushed out or expired early for a stranger.
    Known,
    /// Nothing: when the table is full it may push out a stranger's half-open handshake if
    /// its host holds none (or less than the host holding the most).
    Stranger,
    /// Its host's last handshake was dropped unfinished (the caller keeps that): it takes
    /// only a free slot, so hosts that hold handshakes without finishing them cannot push out
    /// others' in turn.
    Suspect,
}

/// What `PUT /dtls` needs besides the request.
struct Hello<'o, 'f> {
    request_len: usize,
    known: bool,
    /// Whether it may push anyone out (not a [`Standing::Suspect`]).
    may_evict: bool,
    offer: &'o ServerCredentials<'o>,
    admit: &'f mut dyn FnMut(&[u8]) -> bool,
}

#[derive(Clone, Copy)]
enum Route {
    Dtls,
    Session(u32),
    Unknown,
}

/// Whether the ClientHello in `payload` carries a cookie at all.
fn carries_cookie(payload: &[u8]) -> bool {
    Record::parse(payload)
        .ok()
        .and_then(|(r, _)| Fragment::parse(r.fragment).ok())
        .and_then(|(f, _)| ClientHello::parse(f.body).ok())
        .is_some_and(|ch| !ch.cookie.is_empty())
}
