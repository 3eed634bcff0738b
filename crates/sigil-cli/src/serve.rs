//! `sigil sensor --serve ADDR`: the sensor serves its own signed readings as an ACE resource
//! server (RFC 9200, the DTLS profile's raw-public-key mode, RFC 9202 §3.2), the seed's
//! publisher-as-server model, while it keeps publishing to the broker.
//!
//! One UDP socket carries both:
//! - plain CoAP (a first byte with version 1, 0x40-0x7f): only `POST /authz-info`
//!   (RFC 9200 §5.10.1), the token protected by the AC's signature; anything else is 4.01;
//! - DTLS 1.2 records (content types 20-25): the sensor's own key pair as its raw public key,
//!   the client's raw public key required (a handshake without one fails). Any key that
//!   proves possession completes the handshake; authorization is decided per request by the
//!   token bound to that key (`sigil_ace::rs`): no token 4.01, scope 4.03, expired 4.01.
//!   `GET /reading` returns the latest signed reading exactly as published (its content
//!   format), `GET /history` a CBOR array of the last readings (newest last, as many as fit
//!   one record); `POST /authz-info` is accepted over the session too.
//!
//! Bounded: at most [`MAX_PEERS`] DTLS peers, [`MAX_PEERS_PER_HOST`] of them from one IP address
//! (half-open handshakes expire after
//! [`HANDSHAKE_TIMEOUT`], idle sessions after [`SESSION_IDLE`]); a ClientHello gets a stateless
//! cookie first; the token tables have the byte budgets of [`rs_limits`].

use anyhow::{Context, Result};
use sigil_ace::rs::{HostKey, Method, ResourceServer, CONTENT_FORMAT_ACE_CBOR};
use sigil_client::os::{since, unix_now, OsRng};
use sigil_coap::message::{option, Code, ContentFormat, Message, MessageBuilder, MessageType};
use sigil_crypto::{PublicKey, Rng, RustCrypto, SecretKey};
use sigil_dtls::{
    Config, Connection, CookieKey, ServerCredentials, Stateless, Traffic, Trust, MAX_APP_DATA,
    MAX_DATAGRAM,
};
use sigil_identity::Identity;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use tokio::sync::watch;

/// The resources the sensor serves (paths without the slash).
pub const RESOURCES: &[&str] = &["reading", "history"];
/// Most DTLS peers (handshaking or established) at once.
pub const MAX_PEERS: usize = 16;
/// Most DTLS peers from one IP address: a host that completes handshakes with throwaway keys
/// holds a quarter of the table at most.
pub const MAX_PEERS_PER_HOST: usize = 4;
/// A half-open handshake older than this is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// A session without traffic for this long is dropped.
pub const SESSION_IDLE: Duration = Duration::from_secs(600);
/// Signed readings kept for `/history`.
pub const HISTORY: usize = 8;
const TOKENS: usize = 16;
const CTIS: usize = 64;

/// The token tables' budgets: 16 tokens and 64 remembered `cti` values in all, a quarter of
/// each per source host.
pub fn rs_limits() -> sigil_ace::rs::RsLimits {
    sigil_ace::rs::RsLimits::for_entries(TOKENS, CTIS, 4)
}

/// What the publishing side shares with the serving side: the signed readings as they leave
/// for the broker, and the server key learned in the sensor's DTLS handshake.
#[derive(Clone, Default)]
pub struct Tap(Arc<Mutex<TapState>>);

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tap")
    }
}

#[derive(Default)]
struct TapState {
    readings: VecDeque<(u16, Vec<u8>)>,
    server_key: Option<PublicKey>,
}

impl Tap {
    /// A datagram the device sends: a reading published to the broker (`PUT /ps/...`, whole,
    /// not block-wise) is kept with its content format.
    pub fn outgoing(&self, datagram: &[u8]) {
        let Ok(m) = Message::parse(datagram) else {
            return;
        };
        let first = m.uri_path().next().and_then(Result::ok);
        if m.code != Code::PUT || first != Some("ps") || m.option(option::BLOCK1).is_some() {
            return;
        }
        let cf = m
            .content_format()
            .map_or(ContentFormat::COSE_SIGN1.0, |c| c.0);
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // A retransmission or republication of the same bytes is one reading.
        if s.readings.back().is_some_and(|(_, r)| r == m.payload) {
            return;
        }
        if s.readings.len() == HISTORY {
            s.readings.pop_front();
        }
        s.readings.push_back((cf, m.payload.to_vec()));
    }

    /// The server's key, authenticated by a DTLS handshake of the publishing side.
    pub fn learned_server_key(&self, key: PublicKey) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).server_key = Some(key);
    }

    pub fn server_key(&self) -> Option<PublicKey> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).server_key
    }

    fn latest(&self) -> Option<(u16, Vec<u8>)> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .readings
            .back()
            .cloned()
    }

    fn history(&self) -> Vec<Vec<u8>> {
        let s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        s.readings.iter().map(|(_, r)| r.clone()).collect()
    }
}

/// Any raw public key may complete the handshake: it proves possession, and the token bound
/// to it decides what it may do.
#[derive(Clone, Copy)]
struct AnyKey;

impl Trust for AnyKey {
    fn trusted_key(&self, _key: &PublicKey) -> bool {
        true
    }
}

type Handshake = Connection<RustCrypto, AnyKey>;

enum Conn {
    Handshaking(Box<Handshake>),
    Established(Box<Traffic<RustCrypto>>),
}

struct Peer {
    conn: Conn,
    created: Instant,
    last_seen: Instant,
}

/// What the serving side counted.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ServeReport {
    pub handshakes: u64,
    pub handshakes_failed: u64,
    pub peers_refused: u64,
    pub requests: u64,
    pub plain_refused: u64,
    pub dropped: u64,
}

pub struct Server {
    socket: UdpSocket,
    key: SecretKey,
    rs: ResourceServer<'static, TOKENS, CTIS>,
    tap: Tap,
    dtls: Config,
    cookie: CookieKey,
    peers: HashMap<SocketAddr, Peer>,
    start: Instant,
    pub report: ServeReport,
}

impl Server {
    /// Binds `listen`; the sensor (`identity`, `key`) trusts tokens signed by `ac`.
    pub async fn bind(
        listen: SocketAddr,
        identity: Identity,
        key: SecretKey,
        ac: PublicKey,
        tap: Tap,
        dtls: Config,
    ) -> Result<Self> {
        let socket = UdpSocket::bind(listen)
            .await
            .with_context(|| format!("--serve {listen}"))?;
        // One audience string for the life of the process.
        let audience: &'static str = Box::leak(identity.to_string().into_boxed_str());
        let mut secret = [0u8; 32];
        OsRng
            .fill(&mut secret)
            .map_err(|e| anyhow::anyhow!("randomness: {e}"))?;
        Ok(Self {
            socket,
            key,
            rs: ResourceServer::new(audience, ac, RESOURCES, rs_limits()),
            tap,
            dtls,
            cookie: CookieKey::new(secret),
            peers: HashMap::new(),
            start: Instant::now(),
            report: ServeReport::default(),
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.socket.local_addr()?)
    }

    /// Serves until `stop` turns true.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) -> Result<ServeReport> {
        let mut buf = vec![0u8; MAX_DATAGRAM + 64];
        loop {
            if *stop.borrow() {
                break;
            }
            let wake = self.next_wake();
            tokio::select! {
                r = self.socket.recv_from(&mut buf) => {
                    let (n, peer) = match r {
                        Ok(x) => x,
                        Err(e) => {
                            tracing::debug!(error = %e, "serve: receive failed");
                            continue;
                        }
                    };
                    let datagram = buf[..n].to_vec();
                    self.datagram(peer, &datagram).await;
                }
                _ = tokio::time::sleep(wake) => self.timers().await,
                _ = stop.changed() => {}
            }
        }
        Ok(self.report)
    }

    fn next_wake(&self) -> Duration {
        let now = since(self.start);
        self.peers
            .values()
            .filter_map(|p| match &p.conn {
                Conn::Handshaking(c) => c.poll_timeout(),
                Conn::Established(_) => None,
            })
            .min()
            .map_or(Duration::from_secs(1), |t| {
                t.saturating_since(now).max(Duration::from_millis(1))
            })
            .min(Duration::from_secs(1))
    }

    async fn timers(&mut self) {
        let now = since(self.start);
        let wall = Instant::now();
        let mut out = Vec::new();
        self.peers.retain(|addr, p| {
            let stale = match &p.conn {
                Conn::Handshaking(_) => wall.duration_since(p.created) > HANDSHAKE_TIMEOUT,
                Conn::Established(_) => wall.duration_since(p.last_seen) > SESSION_IDLE,
            };
            if stale {
                return false;
            }
            if let Conn::Handshaking(c) = &mut p.conn {
                if c.handle_timeout(now).is_err() || c.failure().is_some() {
                    return false;
                }
                let mut b = vec![0u8; MAX_DATAGRAM];
                while let Some(n) = c.poll_transmit(now, &mut b) {
                    out.push((*addr, b[..n].to_vec()));
                }
            }
            true
        });
        self.rs.expire(unix_now());
        for (addr, d) in out {
            let _ = self.socket.send_to(&d, addr).await;
        }
    }

    async fn datagram(&mut self, peer: SocketAddr, datagram: &[u8]) {
        match datagram.first() {
            Some(0x14..=0x19) => self.dtls_datagram(peer, datagram).await,
            Some(b) if b >> 6 == 1 => {
                if let Some(reply) = self.plain(peer, datagram) {
                    let _ = self.socket.send_to(&reply, peer).await;
                }
            }
            _ => self.report.dropped += 1,
        }
    }

    /// coap://: `POST /authz-info` only.
    fn plain(&mut self, peer: SocketAddr, datagram: &[u8]) -> Option<Vec<u8>> {
        let Ok(m) = Message::parse(datagram) else {
            self.report.dropped += 1;
            return None;
        };
        if !m.code.is_request() {
            return None;
        }
        if path_of(&m).as_deref() == Some("authz-info") {
            let reply = self.respond(&m, peer, None);
            // The source is unverified (plain UDP): an answer stays within 3x the request, so
            // a refusal's error map goes only to requests big enough to carry it.
            if reply.len() > 3 * datagram.len() {
                let code = Message::parse(&reply).map_or(Code::UNAUTHORIZED, |r| r.code);
                return Some(response(&m, code, None, b""));
            }
            return Some(reply);
        }
        self.report.plain_refused += 1;
        // No body: an answer to an unverified source is no larger than its request.
        Some(response(&m, Code::UNAUTHORIZED, None, b""))
    }

    async fn dtls_datagram(&mut self, addr: SocketAddr, datagram: &[u8]) {
        let now = since(self.start);
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut b = vec![0u8; MAX_DATAGRAM];
        let Some(mut p) = self.peers.remove(&addr) else {
            self.new_peer(addr, datagram).await;
            return;
        };
        p.last_seen = Instant::now();
        let mut keep = true;
        let mut requests = Vec::new();
        match &mut p.conn {
            Conn::Handshaking(c) => {
                if c.handle_datagram(now, datagram).is_err() && c.failure().is_some() {
                    self.report.handshakes_failed += 1;
                    keep = false;
                }
                while let Some(n) = c.poll_transmit(now, &mut b) {
                    out.push(b[..n].to_vec());
                }
            }
            Conn::Established(t) => {
                if t.handle_datagram(now, datagram).is_err() {
                    keep = false;
                }
                let mut app = vec![0u8; MAX_APP_DATA];
                while let Some(n) = t.poll_app_data(&mut app) {
                    requests.push(app[..n].to_vec());
                }
            }
        }
        p.conn = match p.conn {
            Conn::Handshaking(c) if c.is_established() => match (*c).into_traffic() {
                Ok(t) => {
                    self.report.handshakes += 1;
                    Conn::Established(Box::new(t))
                }
                Err(c) => {
                    keep = false;
                    Conn::Handshaking(Box::new(c))
                }
            },
            other => other,
        };
        if let Conn::Established(t) = &mut p.conn {
            let key = t.peer_public_key().copied();
            for r in requests {
                let Ok(m) = Message::parse(&r) else {
                    continue;
                };
                if !m.code.is_request() {
                    continue;
                }
                self.report.requests += 1;
                let reply = self.respond(&m, addr, Some(key));
                if t.send(&reply).is_err() {
                    keep = false;
                    break;
                }
            }
            while let Some(n) = t.poll_transmit(now, &mut b) {
                out.push(b[..n].to_vec());
            }
            if t.failure().is_some() {
                keep = false;
            }
        }
        if keep {
            self.peers.insert(addr, p);
        }
        for d in out {
            let _ = self.socket.send_to(&d, addr).await;
        }
    }

    async fn new_peer(&mut self, addr: SocketAddr, datagram: &[u8]) {
        let mut b = vec![0u8; MAX_DATAGRAM];
        let addr_bytes = addr.to_string();
        let cookie = match self
            .cookie
            .respond(&RustCrypto, addr_bytes.as_bytes(), datagram, &mut b)
        {
            Stateless::HelloVerify(n) => {
                let _ = self.socket.send_to(&b[..n], addr).await;
                return;
            }
            Stateless::Drop(_) => {
                self.report.dropped += 1;
                return;
            }
            Stateless::Accept(c) => c,
        };
        let of_host = |peers: &HashMap<SocketAddr, Peer>| {
            peers.keys().filter(|a| a.ip() == addr.ip()).count()
        };
        if self.peers.len() >= MAX_PEERS || of_host(&self.peers) >= MAX_PEERS_PER_HOST {
            // Room only from a peer gone stale.
            let wall = Instant::now();
            self.peers.retain(|_, p| match p.conn {
                Conn::Handshaking(_) => wall.duration_since(p.created) <= HANDSHAKE_TIMEOUT,
                Conn::Established(_) => wall.duration_since(p.last_seen) <= SESSION_IDLE,
            });
            if self.peers.len() >= MAX_PEERS || of_host(&self.peers) >= MAX_PEERS_PER_HOST {
                self.report.peers_refused += 1;
                return;
            }
        }
        let offer = ServerCredentials {
            key: Some(&self.key),
            require_client_key: true,
            ..ServerCredentials::NONE
        };
        let now = since(self.start);
        match Connection::accept(
            RustCrypto, AnyKey, self.dtls, &offer, &mut OsRng, cookie, datagram, now,
        ) {
            Ok(mut c) => {
                let mut out = Vec::new();
                while let Some(n) = c.poll_transmit(now, &mut b) {
                    out.push(b[..n].to_vec());
                }
                let wall = Instant::now();
                self.peers.insert(
                    addr,
                    Peer {
                        conn: Conn::Handshaking(Box::new(c)),
                        created: wall,
                        last_seen: wall,
                    },
                );
                for d in out {
                    let _ = self.socket.send_to(&d, addr).await;
                }
            }
            Err(e) => {
                self.report.handshakes_failed += 1;
                tracing::debug!(%addr, error = %e, "serve: ClientHello refused");
                if let Some(n) = sigil_dtls::refusal(&e, datagram, &mut b) {
                    let _ = self.socket.send_to(&b[..n], addr).await;
                }
            }
        }
    }

    /// A request, from plain CoAP (`session` None) or from a DTLS session whose peer
    /// authenticated with the key inside (`Some(None)`: anonymous).
    fn respond(
        &mut self,
        m: &Message<'_>,
        addr: SocketAddr,
        session: Option<Option<PublicKey>>,
    ) -> Vec<u8> {
        let now = unix_now();
        let Some(path) = path_of(m) else {
            return response(m, Code::NOT_FOUND, None, b"no such resource");
        };
        if path == "authz-info" {
            if m.code != Code::POST {
                return response(m, Code::METHOD_NOT_ALLOWED, None, b"POST a token");
            }
            return match self
                .rs
                .authz_info(&RustCrypto, now, host_key(&addr), m.payload)
            {
                Ok(a) => {
                    tracing::info!(%addr, exp = a.exp.as_secs(), replaced = a.replaced, "access token accepted");
                    response(m, Code::CREATED, None, b"")
                }
                Err(e) => {
                    tracing::info!(%addr, error = %e, "access token refused");
                    let mut body = [0u8; 160];
                    let n = e.encode_payload(&mut body).unwrap_or(0);
                    response(
                        m,
                        code_of(e.response_code()),
                        Some(CONTENT_FORMAT_ACE_CBOR),
                        &body[..n],
                    )
                }
            };
        }
        let Some(peer) = session else {
            return response(m, Code::UNAUTHORIZED, None, b"coaps:// only");
        };
        let method = match m.code {
            Code::GET => Method::Get,
            Code::POST => Method::Post,
            Code::PUT => Method::Put,
            Code::DELETE => Method::Delete,
            _ => Method::Other,
        };
        if let Err(r) = self.rs.authorize(now, peer.as_ref(), &path, method) {
            tracing::info!(%addr, path, refusal = %r, "request refused");
            return response(
                m,
                code_of(r.response_code()),
                None,
                r.to_string().as_bytes(),
            );
        }
        if m.code != Code::GET {
            return response(m, Code::METHOD_NOT_ALLOWED, None, b"GET only");
        }
        match path.as_str() {
            "reading" => match self.tap.latest() {
                Some((cf, r)) => response(m, Code::CONTENT, Some(cf), &r),
                None => response(m, Code::SERVICE_UNAVAILABLE, None, b"no reading yet"),
            },
            _ => {
                let readings = self.tap.history();
                // Newest last, as many as fit one record with the CoAP header.
                let mut body = Vec::new();
                let mut taken = 0;
                let mut size = 1 + 2;
                for r in readings.iter().rev() {
                    if size + r.len() + 3 > MAX_APP_DATA - 32 {
                        break;
                    }
                    size += r.len() + 3;
                    taken += 1;
                }
                let mut e = vec![0u8; size + 8];
                let n = {
                    let mut enc = sigil_objects::cbor::Encoder::new(&mut e);
                    let ok = enc.array(taken).is_ok()
                        && readings[readings.len() - taken..]
                            .iter()
                            .all(|r| enc.bytes(r).is_ok());
                    if ok {
                        enc.finish()
                    } else {
                        0
                    }
                };
                body.extend_from_slice(&e[..n]);
                response(m, Code::CONTENT, Some(ContentFormat::CBOR.0), &body)
            }
        }
    }
}

fn code_of((class, detail): (u8, u8)) -> Code {
    Code::new(class, detail)
}

fn path_of(m: &Message<'_>) -> Option<String> {
    let parts: Result<Vec<&str>, _> = m.uri_path().collect();
    parts.ok().map(|p| p.join("/"))
}

fn host_key(addr: &SocketAddr) -> HostKey {
    let mut k = [0u8; 16];
    match addr.ip() {
        std::net::IpAddr::V4(v4) => k = v4.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v6) => k[..8].copy_from_slice(&v6.octets()[..8]),
    }
    k
}

/// A piggybacked response to a Confirmable request, or a Non-confirmable one.
fn response(req: &Message<'_>, code: Code, cf: Option<u16>, payload: &[u8]) -> Vec<u8> {
    let mtype = match req.mtype {
        MessageType::Confirmable => MessageType::Acknowledgement,
        _ => MessageType::NonConfirmable,
    };
    let mid = match mtype {
        MessageType::Acknowledgement => req.message_id,
        _ => sigil_client::os::random_u32() as u16,
    };
    let mut buf = vec![0u8; payload.len() + 32];
    let Ok(mut b) = MessageBuilder::new(&mut buf, mtype, code, mid, req.token) else {
        return Vec::new();
    };
    if let Some(cf) = cf {
        if b.uint_option(option::CONTENT_FORMAT, u32::from(cf))
            .is_err()
        {
            return Vec::new();
        }
    }
    let n = if payload.is_empty() {
        b.finish()
    } else {
        b.finish_with_payload(payload).unwrap_or(0)
    };
    buf.truncate(n);
    buf
}

/// File in the state directory keeping the server key learned in a handshake (`alg:hex`).
pub const LEARNED_SERVER_KEY: &str = "server-key";

/// What `sigil sensor --serve` starts with.
pub struct ServeStart {
    pub listen: SocketAddr,
    pub state: std::path::PathBuf,
    pub identity: Identity,
    pub key: SecretKey,
    pub pairing: Option<sigil_device::Pairing>,
    /// The server identity the sensor was provisioned with (`--server-identity`).
    pub server_identity: Option<Identity>,
    pub tap: Tap,
    pub dtls: Config,
}

/// Serves once the trusted AC key is known (`sigil_device::trusted_ac_key`): from the
/// pairing, from the key kept in the state directory, or, with only a server identity, from
/// the sensor's next DTLS handshake with the server (then kept). Ends with `stop`.
pub async fn serve(s: ServeStart, mut stop: watch::Receiver<bool>) -> Result<ServeReport> {
    let path = s.state.join(LEARNED_SERVER_KEY);
    let kept = match std::fs::read_to_string(&path) {
        Ok(text) => Some(
            crate::args::parse_key(text.trim())
                .with_context(|| format!("{}: not an alg:hex public key", path.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut logged = false;
    let (ac, source) = loop {
        let learned = s.tap.server_key().or(kept);
        match sigil_device::trusted_ac_key(
            &RustCrypto,
            s.pairing.as_ref(),
            s.server_identity,
            learned.as_ref(),
        ) {
            Ok(found) => break found,
            Err(sigil_device::AcRefusal::NotLearned { server }) => {
                if !logged {
                    logged = true;
                    eprintln!(
                        "serve: waiting for a DTLS handshake with server {server} to learn its key"
                    );
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = stop.changed() => return Ok(ServeReport::default()),
                }
            }
            Err(e) => anyhow::bail!("--serve: {e}"),
        }
    };
    if source == sigil_device::AcSource::Handshake && kept != Some(ac) {
        let text = format!("{}:{}\n", ac.algorithm().name(), hex::encode(ac.as_bytes()));
        sigil_client::transport::write_atomically(&path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let server = Server::bind(s.listen, s.identity, s.key, ac, s.tap, s.dtls).await?;
    eprintln!(
        "serving coaps://{}/reading and /history, coap:// /authz-info on the same port (AC key from the {})",
        server.local_addr()?,
        match source {
            sigil_device::AcSource::Pairing => "pairing",
            sigil_device::AcSource::Handshake => "server's DTLS handshake",
        }
    );
    server.run(stop).await
}
