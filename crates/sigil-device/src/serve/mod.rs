//! A sensor serving its own signed readings as an ACE resource server (RFC 9200, the DTLS
//! profile's raw-public-key mode, RFC 9202 §3.2): the seed's publisher-as-server model, sans-IO.
//!
//! The caller owns the socket, both clocks and randomness; it passes datagrams, the monotonic
//! time ([`sigil_time::Instant`], for handshakes and idle sessions) and the wall time
//! ([`UnixTime`], for token expiry) in, and takes datagrams out. Nothing here allocates.
//!
//! - [`Readings`]: the last signed readings exactly as the device published them
//!   ([`Readings::outgoing`] keeps a whole `PUT /ps/...` the device sends), in fixed slots.
//! - [`ReadingResources`]: the CoAP side. Plain CoAP (coap://) reaches only `POST /authz-info`
//!   (RFC 9200 §5.10.1; the token is protected by the AC's signature), anything else is 4.01
//!   without a body, and an answer stays within three times its request (the source is
//!   unverified). Inside a session, `GET /reading` answers the latest reading (its content
//!   format as published), `GET /history` a CBOR array of the last readings (newest last, as
//!   many as fit one record), `POST /authz-info` is accepted too; each request is decided by
//!   the token bound to the session's peer key ([`sigil_ace::rs::ResourceServer`]): no token
//!   4.01, outside its scope 4.03, expired 4.01.
//! - With the `serve-dtls` feature, [`ReadingServer`]: one port for both, plain CoAP by its
//!   first byte and DTLS 1.2 records (the sensor's own key as its raw public key, the client's
//!   required), a stateless cookie before any state, and a table of peers in caller storage,
//!   capped per host (an IPv4 address or an IPv6 /64) and in total, half-open handshakes
//!   expiring after [`HANDSHAKE_TIMEOUT`] and idle sessions after [`SESSION_IDLE`].
//!
//! Every refusal is counted ([`ServeStats`], and the token tables' own
//! [`sigil_ace::rs::RsCounters`]) and reported with who and why ([`Event`]).

use sigil_ace::rs::{
    HostKey, IntakeError, Method, Refusal, ResourceServer, CONTENT_FORMAT_ACE_CBOR,
};
use sigil_coap::message::{option, Code, ContentFormat, Message, MessageBuilder, MessageType};
use sigil_crypto::{CryptoProvider, PublicKey};
use sigil_time::UnixTime;

#[cfg(feature = "serve-dtls")]
mod dtls;
#[cfg(feature = "serve-dtls")]
pub use dtls::{
    empty_peers, Limits, PeerSlot, ReadingServer, HANDSHAKE_TIMEOUT, MAX_PEERS, MAX_PEERS_PER_HOST,
    SESSION_IDLE,
};

#[cfg(test)]
mod tests;

pub use sigil_ace::rs::{RsCounters, RsLimits};

/// The resources served (paths without the slash).
pub const RESOURCES: &[&str] = &["reading", "history"];
/// Signed readings kept for `/history`.
pub const HISTORY: usize = 8;
/// The largest reading kept: a whole publication fits one of the device's datagrams.
pub const MAX_READING: usize = crate::MAX_DATAGRAM;
/// The largest answer: one DTLS record's application data (`sigil_dtls::MAX_APP_DATA`).
pub const MAX_ANSWER: usize = 1024;
/// Token slots of the resource server.
pub const TOKENS: usize = 16;
/// Remembered `cti` slots of the resource server.
pub const CTIS: usize = 64;
/// Events kept until the caller takes them; more are counted in [`ServeStats::events_lost`].
pub const MAX_EVENTS: usize = 8;
/// Bytes of a refused request's path kept in its [`Event`].
pub const MAX_EVENT_PATH: usize = 32;

/// The token tables' budgets: [`TOKENS`] tokens and [`CTIS`] remembered `cti` values in all, a
/// quarter of each per source host.
pub const fn rs_limits() -> RsLimits {
    RsLimits::for_entries(TOKENS, CTIS, 4)
}

/// A peer's UDP address: an IPv4 address as IPv4-mapped IPv6, and the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr {
    pub ip: [u8; 16],
    pub port: u16,
}

impl PeerAddr {
    pub const fn v4(octets: [u8; 4], port: u16) -> Self {
        let [a, b, c, d] = octets;
        Self {
            ip: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d],
            port,
        }
    }

    pub const fn v6(ip: [u8; 16], port: u16) -> Self {
        Self { ip, port }
    }

    fn is_v4(&self) -> bool {
        self.ip[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
    }

    /// The host the budgets charge: the IPv4 address, or the IPv6 /64 prefix (zero-padded).
    pub fn host(&self) -> HostKey {
        let mut k = self.ip;
        if !self.is_v4() {
            k[8..].fill(0);
        }
        k
    }

    /// The address and port as bytes (what a cookie is bound to).
    pub fn to_bytes(&self) -> [u8; 18] {
        let mut b = [0u8; 18];
        b[..16].copy_from_slice(&self.ip);
        b[16..].copy_from_slice(&self.port.to_be_bytes());
        b
    }
}

#[derive(Clone, Copy)]
struct Slot<const LEN: usize> {
    cf: u16,
    len: u16,
    bytes: [u8; LEN],
}

/// The last `N` signed readings (of at most `LEN` bytes each) with their content formats,
/// oldest first.
pub struct Readings<const N: usize = HISTORY, const LEN: usize = MAX_READING> {
    slots: [Slot<LEN>; N],
    /// Index of the oldest kept reading.
    first: usize,
    count: usize,
    /// Readings not kept: larger than `LEN`.
    pub too_large: u64,
}

impl<const N: usize, const LEN: usize> Default for Readings<N, LEN> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize, const LEN: usize> Readings<N, LEN> {
    pub const fn new() -> Self {
        Self {
            slots: [Slot {
                cf: 0,
                len: 0,
                bytes: [0; LEN],
            }; N],
            first: 0,
            count: 0,
            too_large: 0,
        }
    }

    /// A datagram the device sends: a reading published to the broker (`PUT /ps/...`, whole,
    /// not block-wise) is kept with its content format (COSE_Sign1 when it names none).
    /// Whether it was kept.
    pub fn outgoing(&mut self, datagram: &[u8]) -> bool {
        let Ok(m) = Message::parse(datagram) else {
            return false;
        };
        let first = m.uri_path().next().and_then(Result::ok);
        if m.code != Code::PUT || first != Some("ps") || m.option(option::BLOCK1).is_some() {
            return false;
        }
        let cf = m
            .content_format()
            .map_or(ContentFormat::COSE_SIGN1.0, |c| c.0);
        self.push(cf, m.payload)
    }

    /// Keeps `reading`, dropping the oldest when full. A repetition of the latest (a
    /// retransmission or a republication of the same bytes) is one reading.
    pub fn push(&mut self, cf: u16, reading: &[u8]) -> bool {
        if self.latest().is_some_and(|(_, r)| r == reading) {
            return false;
        }
        if reading.len() > LEN || N == 0 {
            self.too_large += 1;
            return false;
        }
        let at = if self.count == N {
            let at = self.first;
            self.first = (self.first + 1) % N;
            at
        } else {
            self.count += 1;
            (self.first + self.count - 1) % N
        };
        let s = &mut self.slots[at];
        s.cf = cf;
        s.len = reading.len() as u16;
        s.bytes[..reading.len()].copy_from_slice(reading);
        true
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The `i`th kept reading, oldest first, with its content format.
    pub fn get(&self, i: usize) -> Option<(u16, &[u8])> {
        if i >= self.count {
            return None;
        }
        let s = &self.slots[(self.first + i) % N];
        Some((s.cf, &s.bytes[..usize::from(s.len)]))
    }

    /// The latest reading.
    pub fn latest(&self) -> Option<(u16, &[u8])> {
        self.count.checked_sub(1).and_then(|i| self.get(i))
    }
}

/// A request path as far as an [`Event`] keeps it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct EventPath {
    bytes: [u8; MAX_EVENT_PATH],
    len: u8,
}

impl EventPath {
    fn new(path: &str) -> Self {
        let mut n = path.len().min(MAX_EVENT_PATH);
        while !path.is_char_boundary(n) {
            n -= 1;
        }
        let mut bytes = [0u8; MAX_EVENT_PATH];
        bytes[..n].copy_from_slice(&path.as_bytes()[..n]);
        Self {
            bytes,
            len: n as u8,
        }
    }

    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl core::fmt::Debug for EventPath {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// What happened, with who it was: for the caller to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A token posted to `/authz-info` was kept.
    TokenAccepted {
        peer: PeerAddr,
        exp: UnixTime,
        replaced: bool,
    },
    /// A token posted to `/authz-info` was refused, and why.
    TokenRefused { peer: PeerAddr, error: IntakeError },
    /// A request inside a session was refused by the token check.
    RequestRefused {
        peer: PeerAddr,
        path: EventPath,
        refusal: Refusal,
    },
    /// A ClientHello with a valid cookie found no room: the table or this host's share of it
    /// is full of live peers.
    PeerRefused { peer: PeerAddr, per_host: bool },
    /// A handshake failed.
    #[cfg(feature = "serve-dtls")]
    HandshakeFailed {
        peer: PeerAddr,
        error: sigil_dtls::Error,
    },
}

/// What the serving side counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServeStats {
    /// Handshakes completed.
    pub handshakes: u64,
    /// Handshakes that failed (a refused ClientHello included).
    pub handshakes_failed: u64,
    /// ClientHellos with a valid cookie refused for want of room (per host or in total).
    pub peers_refused: u64,
    /// Of those, refused because the host held its share of the table.
    pub peers_refused_per_host: u64,
    /// Peers dropped: half-open past the handshake timeout, idle sessions, or failed
    /// retransmissions.
    pub peers_expired: u64,
    /// Requests inside sessions.
    pub requests: u64,
    /// Plain CoAP requests for anything but `/authz-info` (4.01).
    pub plain_refused: u64,
    /// Plain Confirmable requests received again within EXCHANGE_LIFETIME, answered as the
    /// first time (RFC 7252 §4.5).
    pub duplicates: u64,
    /// Datagrams dropped: neither CoAP nor a DTLS record, malformed, or not a ClientHello
    /// from an unknown peer.
    pub dropped: u64,
    /// Events the caller did not take before more came.
    pub events_lost: u64,
}

/// The CoAP side of the resources, over a sigil-ace [`ResourceServer`] with `TOKENS` token
/// and `CTIS` replay-cache slots.
pub struct ReadingResources<
    'a,
    const TOKENS: usize = { self::TOKENS },
    const CTIS: usize = { self::CTIS },
> {
    /// The token tables and their counters.
    pub rs: ResourceServer<'a, TOKENS, CTIS>,
    pub stats: ServeStats,
    events: [Option<Event>; MAX_EVENTS],
    events_first: usize,
    events_count: usize,
}

impl<'a, const TOKENS: usize, const CTIS: usize> ReadingResources<'a, TOKENS, CTIS> {
    /// Resources of the sensor whose identity text is `audience`, trusting tokens signed by
    /// `ac` (the key [`crate::trusted_ac_key`] chose).
    pub fn new(audience: &'a str, ac: PublicKey, limits: RsLimits) -> Self {
        Self {
            rs: ResourceServer::new(audience, ac, RESOURCES, limits),
            stats: ServeStats::default(),
            events: [None; MAX_EVENTS],
            events_first: 0,
            events_count: 0,
        }
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        if self.events_count == 0 {
            return None;
        }
        let e = self.events[self.events_first].take();
        self.events_first = (self.events_first + 1) % MAX_EVENTS;
        self.events_count -= 1;
        e
    }

    pub(crate) fn event(&mut self, e: Event) {
        if self.events_count == MAX_EVENTS {
            self.stats.events_lost += 1;
            return;
        }
        self.events[(self.events_first + self.events_count) % MAX_EVENTS] = Some(e);
        self.events_count += 1;
    }

    /// A plain CoAP datagram from `peer` (no session): `POST /authz-info` only. Writes the
    /// answer to `out` (`mid`: the message ID of a Non-confirmable one) and returns its length.
    pub fn plain<P: CryptoProvider + ?Sized>(
        &mut self,
        crypto: &P,
        now: UnixTime,
        peer: PeerAddr,
        datagram: &[u8],
        mid: u16,
        out: &mut [u8],
    ) -> Option<usize> {
        let Ok(m) = Message::parse(datagram) else {
            self.stats.dropped += 1;
            return None;
        };
        if !m.code.is_request() {
            return None;
        }
        let mut path = [0u8; MAX_PATH];
        if path_of(&m, &mut path) == Some("authz-info") {
            let none: Readings<0, 0> = Readings::new();
            let n = self.respond(crypto, now, peer, None, &none, &m, mid, out);
            // The source is unverified (plain UDP): an answer stays within 3x the request, so
            // a refusal's error map goes only to requests big enough to carry it.
            if n > 3 * datagram.len() {
                let code = Message::parse(&out[..n]).map_or(Code::UNAUTHORIZED, |r| r.code);
                return finish(response(&m, code, None, b"", mid, out));
            }
            return finish(n);
        }
        self.stats.plain_refused += 1;
        // No body: an answer to an unverified source is no larger than its request.
        finish(response(&m, Code::UNAUTHORIZED, None, b"", mid, out))
    }

    /// A request that arrived inside a DTLS session whose peer authenticated with `key`
    /// (`None`: anonymous). Writes the answer to `out` and returns its length; `None` for what
    /// is not a request.
    #[allow(clippy::too_many_arguments)]
    pub fn secure<P: CryptoProvider + ?Sized, const N: usize, const LEN: usize>(
        &mut self,
        crypto: &P,
        now: UnixTime,
        peer: PeerAddr,
        key: Option<&PublicKey>,
        readings: &Readings<N, LEN>,
        request: &[u8],
        mid: u16,
        out: &mut [u8],
    ) -> Option<usize> {
        let Ok(m) = Message::parse(request) else {
            return None;
        };
        if !m.code.is_request() {
            return None;
        }
        self.stats.requests += 1;
        finish(self.respond(crypto, now, peer, Some(key), readings, &m, mid, out))
    }

    /// A request, from plain CoAP (`session` None) or from a session whose peer authenticated
    /// with the key inside (`Some(None)`: anonymous).
    #[allow(clippy::too_many_arguments)]
    fn respond<P: CryptoProvider + ?Sized, const N: usize, const LEN: usize>(
        &mut self,
        crypto: &P,
        now: UnixTime,
        peer: PeerAddr,
        session: Option<Option<&PublicKey>>,
        readings: &Readings<N, LEN>,
        m: &Message<'_>,
        mid: u16,
        out: &mut [u8],
    ) -> usize {
        let mut buf = [0u8; MAX_PATH];
        let Some(path) = path_of(m, &mut buf) else {
            return response(m, Code::NOT_FOUND, None, b"no such resource", mid, out);
        };
        if path == "authz-info" {
            if m.code != Code::POST {
                return response(m, Code::METHOD_NOT_ALLOWED, None, b"POST a token", mid, out);
            }
            return match self.rs.authz_info(crypto, now, peer.host(), m.payload) {
                Ok(a) => {
                    self.event(Event::TokenAccepted {
                        peer,
                        exp: a.exp,
                        replaced: a.replaced,
                    });
                    response(m, Code::CREATED, None, b"", mid, out)
                }
                Err(error) => {
                    self.event(Event::TokenRefused { peer, error });
                    let mut body = [0u8; 160];
                    let n = error.encode_payload(&mut body).unwrap_or(0);
                    response(
                        m,
                        code_of(error.response_code()),
                        Some(CONTENT_FORMAT_ACE_CBOR),
                        &body[..n],
                        mid,
                        out,
                    )
                }
            };
        }
        let Some(key) = session else {
            return response(m, Code::UNAUTHORIZED, None, b"coaps:// only", mid, out);
        };
        let method = match m.code {
            Code::GET => Method::Get,
            Code::POST => Method::Post,
            Code::PUT => Method::Put,
            Code::DELETE => Method::Delete,
            _ => Method::Other,
        };
        if let Err(refusal) = self.rs.authorize(now, key, path, method) {
            self.event(Event::RequestRefused {
                peer,
                path: EventPath::new(path),
                refusal,
            });
            let mut text = TextBuf::<64>::new();
            let _ = core::fmt::write(&mut text, format_args!("{refusal}"));
            return response(
                m,
                code_of(refusal.response_code()),
                None,
                text.as_bytes(),
                mid,
                out,
            );
        }
        if m.code != Code::GET {
            return response(m, Code::METHOD_NOT_ALLOWED, None, b"GET only", mid, out);
        }
        if path == "reading" {
            return match readings.latest() {
                Some((cf, r)) => response(m, Code::CONTENT, Some(cf), r, mid, out),
                None => response(
                    m,
                    Code::SERVICE_UNAVAILABLE,
                    None,
                    b"no reading yet",
                    mid,
                    out,
                ),
            };
        }
        // /history: newest last, as many as fit one record with the CoAP header.
        let mut taken = 0;
        let mut size = 1 + 2;
        for i in (0..readings.len()).rev() {
            let Some((_, r)) = readings.get(i) else { break };
            if size + r.len() + 3 > MAX_ANSWER - 32 {
                break;
            }
            size += r.len() + 3;
            taken += 1;
        }
        let mut body = [0u8; MAX_ANSWER];
        let n = {
            let mut enc = sigil_objects::cbor::Encoder::new(&mut body);
            let ok = enc.array(taken).is_ok()
                && (readings.len() - taken..readings.len())
                    .all(|i| readings.get(i).is_some_and(|(_, r)| enc.bytes(r).is_ok()));
            if ok {
                enc.finish()
            } else {
                0
            }
        };
        response(
            m,
            Code::CONTENT,
            Some(ContentFormat::CBOR.0),
            &body[..n],
            mid,
            out,
        )
    }
}

/// The longest request path looked at (longer ones are no resource here).
const MAX_PATH: usize = 64;

/// The request's path without the leading slash, joined with `/`, written to `buf`.
fn path_of<'b>(m: &Message<'_>, buf: &'b mut [u8; MAX_PATH]) -> Option<&'b str> {
    let mut n = 0;
    for (i, seg) in m.uri_path().enumerate() {
        let seg = seg.ok()?;
        let need = usize::from(i > 0) + seg.len();
        if n + need > MAX_PATH {
            // Too long for any resource: named by nothing served here.
            return Some("");
        }
        if i > 0 {
            buf[n] = b'/';
            n += 1;
        }
        buf[n..n + seg.len()].copy_from_slice(seg.as_bytes());
        n += seg.len();
    }
    core::str::from_utf8(&buf[..n]).ok()
}

fn code_of((class, detail): (u8, u8)) -> Code {
    Code::new(class, detail)
}

fn finish(n: usize) -> Option<usize> {
    (n > 0).then_some(n)
}

/// A piggybacked response to a Confirmable request, or a Non-confirmable one with `mid`,
/// written to `out`; its length (0 when it does not fit).
fn response(
    req: &Message<'_>,
    code: Code,
    cf: Option<u16>,
    payload: &[u8],
    mid: u16,
    out: &mut [u8],
) -> usize {
    let (mtype, mid) = match req.mtype {
        MessageType::Confirmable => (MessageType::Acknowledgement, req.message_id),
        _ => (MessageType::NonConfirmable, mid),
    };
    let Ok(mut b) = MessageBuilder::new(out, mtype, code, mid, req.token) else {
        return 0;
    };
    if let Some(cf) = cf {
        if b.uint_option(option::CONTENT_FORMAT, u32::from(cf))
            .is_err()
        {
            return 0;
        }
    }
    // 5.03 (a budget of this second spent, tables full): try again in a second (RFC 7252
    // §5.9.3.4).
    if code == Code::SERVICE_UNAVAILABLE && b.uint_option(option::MAX_AGE, 1).is_err() {
        return 0;
    }
    if payload.is_empty() {
        b.finish()
    } else {
        b.finish_with_payload(payload).unwrap_or(0)
    }
}

/// Text written into a fixed buffer, cut at its end.
struct TextBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> TextBuf<N> {
    fn new() -> Self {
        Self {
            buf: [0; N],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> core::fmt::Write for TextBuf<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let mut n = s.len().min(N - self.len);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}
