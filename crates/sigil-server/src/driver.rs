//! The UDP server around [`Service`]: CoAP parsing, message deduplication (RFC 7252 §4.5),
//! block-wise transfer (RFC 7959), batching, and response encoding.
//!
//! One thread owns the socket. It blocks for a datagram, drains whatever else is queued
//! without blocking (up to `batch_max`), handles the lot as one batch (one database commit),
//! and sends the answers. [`Server::start`] is async so a tokio program can start and stop it;
//! the hot path has no hand-offs between tasks or threads. Every table here has a cap: the
//! dedup cache, the Block1 reassembly buffers, the batch.

use crate::secure::{DtlsConfig, SecureLayer, SharedTrust};
use crate::service::{PeerAuth, Reply, Request, Response, Service, ServiceConfig};
use crate::stats::Stats;
use crate::store::{Store, StoreError};
use crate::OsRng;
use sigil_coap::message::{empty, option};
use sigil_coap::{BlockOption, Code, Message, MessageBuilder, MessageType, TransmissionParameters};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_identity::Identity;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub database: PathBuf,
    pub service: ServiceConfig,
    pub transmission: TransmissionParameters,
    /// Most datagrams handled in one batch (one commit).
    pub batch_max: usize,
    /// Most remembered (peer, message ID) pairs.
    pub dedup_capacity: usize,
    /// Largest request body accepted through Block1.
    pub max_body: usize,
    /// Most concurrent Block1 reassemblies (all peers), and per peer.
    pub max_assemblies: usize,
    pub max_assemblies_per_peer: usize,
    /// Block size used for large responses when the client did not ask (Block2 SZX).
    pub block2_szx: u8,
    /// Kernel receive buffer (SO_RCVBUF) in bytes, so bursts queue instead of being dropped.
    pub receive_buffer: usize,
    /// CoAP over DTLS (coaps://) on a second socket, if set.
    pub dtls: Option<DtlsConfig>,
}

impl ServerConfig {
    pub fn new(listen: SocketAddr, database: PathBuf) -> Self {
        Self {
            listen,
            database,
            service: ServiceConfig::default(),
            transmission: TransmissionParameters::default(),
            batch_max: 512,
            dedup_capacity: 200_000,
            max_body: 16 * 1024,
            max_assemblies: 1024,
            max_assemblies_per_peer: 4,
            block2_szx: 6,
            receive_buffer: 8 << 20,
            dtls: None,
        }
    }
}

/// The coaps:// side of a running server.
#[derive(Clone, Debug)]
pub struct DtlsEndpoint {
    pub addr: SocketAddr,
    /// The server's raw public key, and its identity `h(P)` that clients pin.
    pub key: PublicKey,
    pub identity: Identity,
}

/// A running server.
pub struct ServerHandle {
    pub local_addr: SocketAddr,
    pub dtls: Option<DtlsEndpoint>,
    pub stats: Stats,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerHandle {
    /// Stops receiving, finishes the batch in hand, and waits for the service thread.
    pub async fn shutdown(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

pub struct Server;

/// A received datagram and its sender.
type Datagram = (SocketAddr, Vec<u8>);

/// Where a CoAP message came from: the plain socket, or a DTLS session (coaps://).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub secure: bool,
}

impl Endpoint {
    pub fn plain(addr: SocketAddr) -> Self {
        Self {
            addr,
            secure: false,
        }
    }
}

/// A CoAP message as received, with the identity its DTLS session authenticated.
#[derive(Clone, Debug)]
pub struct Inbound {
    pub from: Endpoint,
    pub auth: Option<PeerAuth>,
    pub bytes: Vec<u8>,
}

impl Server {
    /// Opens the database, binds the socket and starts serving.
    pub async fn start(config: ServerConfig, stats: Stats) -> Result<ServerHandle, StartError> {
        let store = Store::open(&config.database)?;
        let secure = match &config.dtls {
            Some(dc) => {
                let key = match &dc.certificate_key {
                    Some(k) => k.clone(),
                    None => server_key(&store)?,
                };
                let dsock = bind_udp(dc.listen, config.receive_buffer)?;
                let mut secret = [0u8; 32];
                getrandom::fill(&mut secret).map_err(|e| std::io::Error::other(e.to_string()))?;
                let trust = SharedTrust::with_anchors(dc.client_anchors.clone());
                let layer = SecureLayer::new(dc.clone(), key, secret, trust, stats.clone());
                Some((dsock, layer))
            }
            None => None,
        };
        let service = Service::new(store, config.service.clone(), stats.clone())?;
        let socket = bind_udp(config.listen, config.receive_buffer)?;
        let local_addr = socket.local_addr()?;
        let mut dtls = None;
        if let Some((dsock, layer)) = &secure {
            let key = layer
                .public_key()
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            let identity = Identity::of_key(&RustCrypto, &key, b"")
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            dtls = Some(DtlsEndpoint {
                addr: dsock.local_addr()?,
                key,
                identity,
            });
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread_stop = stop.clone();
        let thread_stats = stats.clone();
        let thread = std::thread::Builder::new()
            .name("sigil-service".into())
            .spawn(move || {
                let mut core = Dispatcher::new(config, service, thread_stats);
                core.run(socket, secure, thread_stop);
            })?;
        tracing::info!(addr = %local_addr, "sigil server listening");
        Ok(ServerHandle {
            local_addr,
            dtls,
            stats,
            stop,
            thread: Some(thread),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
}

/// A remembered exchange: `None` while the first copy is still being handled.
struct DedupEntry {
    response: Option<Vec<u8>>,
    at: Instant,
}

struct Assembly {
    body: Vec<u8>,
    next: u32,
    at: Instant,
}

/// A request waiting for its batch, with what is needed to answer it.
struct Pending {
    from: Endpoint,
    mtype: MessageType,
    mid: u16,
    token: Vec<u8>,
    block2: Option<BlockOption>,
    /// Block1 of the final block, echoed in the response (RFC 7959 §2.3).
    block1: Option<BlockOption>,
    request: Request,
}

/// Everything about CoAP that is not RD or broker logic: parsing, deduplication, Block1
/// reassembly, Block2 slicing and response encoding, around a [`Service`]. Transport-free:
/// datagrams in, datagrams out, so tests and fuzzers drive it without sockets.
pub struct Dispatcher {
    config: ServerConfig,
    service: Service,
    stats: Stats,
    dedup: HashMap<(Endpoint, u16), DedupEntry>,
    dedup_order: VecDeque<((Endpoint, u16), Instant)>,
    assemblies: HashMap<(Endpoint, String), Assembly>,
}

impl Dispatcher {
    pub fn new(config: ServerConfig, service: Service, stats: Stats) -> Self {
        Self {
            config,
            service,
            stats,
            dedup: HashMap::new(),
            dedup_order: VecDeque::new(),
            assemblies: HashMap::new(),
        }
    }

    /// The datagram loop: wait until a socket is readable or a DTLS timer is due (waking
    /// every 200 ms for expiry and shutdown), drain whatever is queued on both sockets (up to
    /// `batch_max` each), handle it all as one batch, send the answers. One thread, no
    /// hand-offs on the hot path.
    fn run(
        &mut self,
        socket: std::net::UdpSocket,
        mut secure: Option<(std::net::UdpSocket, SecureLayer)>,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) {
        let start = Instant::now();
        let clock = || start.elapsed().as_millis() as u64;
        let mut buf = vec![0u8; 65_536];
        let _ = socket.set_nonblocking(true);
        if let Some((s, _)) = &secure {
            let _ = s.set_nonblocking(true);
        }
        loop {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let mut wait = 200u64;
            if let Some(t) = secure.as_ref().and_then(|(_, l)| l.poll_timeout()) {
                wait = wait.min(t.as_millis().saturating_sub(clock()));
            }
            let (plain_ready, secure_ready) =
                wait_readable(&socket, secure.as_ref().map(|(s, _)| s), wait);
            let mut plain: Vec<Datagram> = Vec::new();
            if plain_ready {
                drain(&socket, &mut buf, self.config.batch_max, &mut plain);
            }
            if !plain.is_empty() {
                for (peer, bytes) in self.handle(plain) {
                    if let Err(e) = socket.send_to(&bytes, peer) {
                        tracing::debug!(error = %e, %peer, "send failed");
                        self.count("server.send_failed");
                    }
                }
            } else {
                self.expire();
            }
            if let Some((dsock, layer)) = &mut secure {
                let mut datagrams: Vec<Datagram> = Vec::new();
                if secure_ready {
                    drain(dsock, &mut buf, self.config.batch_max, &mut datagrams);
                }
                for (peer, bytes) in self.handle_secure_at(
                    layer,
                    datagrams,
                    sigil_time::Instant::from_millis(clock()),
                    sigil_time::UnixTime::from_secs(crate::unix_now()),
                    &mut OsRng,
                ) {
                    if let Err(e) = dsock.send_to(&bytes, peer) {
                        tracing::debug!(error = %e, %peer, "send failed (coaps)");
                        self.count("server.send_failed");
                    }
                }
            }
        }
    }

    /// The coaps:// path for a batch of datagrams at `now` (the DTLS clock) and `unix` (for
    /// certificates and the service), with the caller's randomness: refreshes what DTLS
    /// trusts from the authorized list, runs the DTLS peers, hands the CoAP messages they
    /// carried (with their identities) to the service as one batch, protects the answers, and
    /// runs due retransmission timers. Returns the datagrams to send.
    pub fn handle_secure_at(
        &mut self,
        layer: &mut SecureLayer,
        datagrams: Vec<Datagram>,
        now: sigil_time::Instant,
        unix: sigil_time::UnixTime,
        rng: &mut dyn sigil_crypto::Rng,
    ) -> Vec<Datagram> {
        if let Some(c) = self.service.changed_credentials() {
            layer.trust().replace(c);
        }
        let mut out = Vec::new();
        let mut batch = Vec::new();
        for (peer, bytes) in datagrams {
            for d in layer.handle_datagram(now, unix, rng, peer, &bytes, &mut out) {
                batch.push(Inbound {
                    from: Endpoint {
                        addr: d.peer,
                        secure: true,
                    },
                    auth: d.auth,
                    bytes: d.message,
                });
            }
        }
        if !batch.is_empty() {
            for (to, bytes) in self.handle_inbound_at(batch, unix.as_secs()) {
                layer.send(now, to.addr, &bytes, &mut out);
            }
        }
        layer.handle_timeout(now, unix, &mut out);
        out
    }

    fn expire(&mut self) {
        let lifetime = self.config.transmission.exchange_lifetime();
        let now = Instant::now();
        while let Some((key, at)) = self.dedup_order.front().copied() {
            if now.duration_since(at) < lifetime && self.dedup.len() <= self.config.dedup_capacity {
                break;
            }
            self.dedup_order.pop_front();
            if self.dedup.get(&key).is_some_and(|e| e.at == at) {
                self.dedup.remove(&key);
            }
        }
        self.assemblies
            .retain(|_, a| now.duration_since(a.at) < lifetime);
    }

    fn count(&self, key: &str) {
        self.stats.incr(key);
    }

    /// Handles one batch of datagrams (one database commit); returns the datagrams to send.
    pub fn handle(&mut self, batch: Vec<Datagram>) -> Vec<(SocketAddr, Vec<u8>)> {
        self.handle_at(batch, crate::unix_now())
    }

    /// [`Dispatcher::handle`] with the wall-clock time (Unix seconds) given by the caller.
    pub fn handle_at(&mut self, batch: Vec<Datagram>, now: i64) -> Vec<(SocketAddr, Vec<u8>)> {
        let batch = batch
            .into_iter()
            .map(|(addr, bytes)| Inbound {
                from: Endpoint::plain(addr),
                auth: None,
                bytes,
            })
            .collect();
        self.handle_inbound_at(batch, now)
            .into_iter()
            .map(|(e, b)| (e.addr, b))
            .collect()
    }

    /// Handles a batch of CoAP messages from plain and secure endpoints; the answers go back
    /// to the endpoint each request came from.
    pub fn handle_inbound_at(&mut self, batch: Vec<Inbound>, now: i64) -> Vec<(Endpoint, Vec<u8>)> {
        let mut out = Vec::new();
        let mut pending: Vec<Pending> = Vec::new();
        for d in &batch {
            self.stats.incr("coap.received");
            match self.intake(d, &mut out) {
                Some(p) => pending.push(p),
                None => continue,
            }
        }
        if pending.is_empty() {
            self.expire();
            return out;
        }
        let requests: Vec<Request> = pending.iter().map(|p| p.request.clone()).collect();
        let replies = self.service.handle_batch(&requests, now);
        for (p, reply) in pending.into_iter().zip(replies) {
            let bytes = match reply {
                Reply::Response(r) => encode_response(&p, r, self.szx_for(p.from)),
                Reply::Reset => Some(empty(MessageType::Reset, p.mid).to_vec()),
                Reply::Nothing => None,
            };
            if p.mtype == MessageType::Confirmable {
                if let Some(e) = self.dedup.get_mut(&(p.from, p.mid)) {
                    e.response = bytes.clone();
                }
            }
            if let Some(b) = bytes {
                out.push((p.from, b));
            }
        }
        self.expire();
        out
    }

    /// Block2 size for an endpoint: over DTLS at most 512-byte blocks, so a response fits in
    /// one record.
    fn szx_for(&self, from: Endpoint) -> u8 {
        if from.secure {
            self.config.block2_szx.min(5)
        } else {
            self.config.block2_szx
        }
    }

    /// Parses, deduplicates and reassembles one datagram. Returns a request for the service,
    /// or answers it directly (into `out`).
    fn intake(&mut self, d: &Inbound, out: &mut Vec<(Endpoint, Vec<u8>)>) -> Option<Pending> {
        let msg = match Message::parse(&d.bytes) {
            Ok(m) => m,
            Err(e) => {
                self.count("coap.malformed");
                tracing::debug!(peer = %d.from.addr, error = %e, "malformed datagram");
                // RFC 7252 §4.2: a Confirmable message with a format error is rejected with
                // Reset if its header could be read.
                if d.bytes.len() >= 4 && d.bytes[0] >> 6 == 1 && (d.bytes[0] >> 4) & 3 == 0 {
                    out.push((
                        d.from,
                        empty(
                            MessageType::Reset,
                            u16::from_be_bytes([d.bytes[2], d.bytes[3]]),
                        )
                        .to_vec(),
                    ));
                }
                return None;
            }
        };
        match msg.mtype {
            MessageType::Acknowledgement | MessageType::Reset => {
                // The server sends no Confirmable messages, so nothing waits for these.
                self.count("coap.unexpected_ack_or_reset");
                return None;
            }
            _ => {}
        }
        if msg.code == Code::EMPTY {
            // CoAP ping (§4.3): answer Reset.
            if msg.mtype == MessageType::Confirmable {
                self.count("coap.ping");
                out.push((d.from, empty(MessageType::Reset, msg.message_id).to_vec()));
            }
            return None;
        }
        if !msg.code.is_request() {
            self.count("coap.unexpected_response");
            if msg.mtype == MessageType::Confirmable {
                out.push((d.from, empty(MessageType::Reset, msg.message_id).to_vec()));
            }
            return None;
        }
        // Deduplication (§4.5): a retransmitted Confirmable request gets the same answer.
        if msg.mtype == MessageType::Confirmable {
            let key = (d.from, msg.message_id);
            if let Some(e) = self.dedup.get(&key) {
                self.count("coap.duplicate");
                if let Some(r) = &e.response {
                    out.push((d.from, r.clone()));
                }
                return None;
            }
            let now = Instant::now();
            self.dedup.insert(
                key,
                DedupEntry {
                    response: None,
                    at: now,
                },
            );
            self.dedup_order.push_back((key, now));
            if self.dedup.len() > self.config.dedup_capacity {
                self.expire();
            }
        }
        let mut reply_now = |core: &mut Self, code: Code, text: &str| {
            core.answer_directly(d.from, &msg, None, code, text, "coap.rejected_request", out);
        };
        if let Some(n) = msg.unknown_critical_option() {
            reply_now(
                self,
                Code::BAD_OPTION,
                &format!("unrecognized critical option {n}"),
            );
            return None;
        }
        let (Ok(path), Ok(query)) = (
            msg.uri_path().collect::<Result<Vec<_>, _>>(),
            msg.uri_query().collect::<Result<Vec<_>, _>>(),
        ) else {
            reply_now(
                self,
                Code::BAD_REQUEST,
                "Uri-Path or Uri-Query is not UTF-8",
            );
            return None;
        };
        let block2 = match msg.block2() {
            Some(Ok(b)) => Some(b),
            Some(Err(_)) => {
                reply_now(self, Code::BAD_OPTION, "bad Block2");
                return None;
            }
            None => None,
        };
        let mut payload = msg.payload.to_vec();
        let mut block1_echo = None;
        match msg.block1() {
            Some(Err(_)) => {
                reply_now(self, Code::BAD_OPTION, "bad Block1");
                return None;
            }
            Some(Ok(b1)) => {
                let key = (d.from, format!("{}?{}", path.join("/"), query.join("&")));
                if b1.num == 0 {
                    let per_peer = self.assemblies.keys().filter(|(p, _)| *p == d.from).count();
                    if per_peer >= self.config.max_assemblies_per_peer
                        || self.assemblies.len() >= self.config.max_assemblies
                    {
                        reply_now(
                            self,
                            Code::SERVICE_UNAVAILABLE,
                            "too many block-wise transfers",
                        );
                        return None;
                    }
                    self.assemblies.insert(
                        key.clone(),
                        Assembly {
                            body: Vec::new(),
                            next: 0,
                            at: Instant::now(),
                        },
                    );
                }
                let Some(a) = self.assemblies.get_mut(&key) else {
                    reply_now(
                        self,
                        Code::REQUEST_ENTITY_INCOMPLETE,
                        "Block1 transfer not started",
                    );
                    return None;
                };
                if b1.num != a.next
                    || a.body.len() != b1.offset()
                    || (b1.more && msg.payload.len() != b1.size())
                {
                    self.assemblies.remove(&key);
                    reply_now(
                        self,
                        Code::REQUEST_ENTITY_INCOMPLETE,
                        "Block1 out of sequence",
                    );
                    return None;
                }
                if a.body.len() + msg.payload.len() > self.config.max_body {
                    self.assemblies.remove(&key);
                    reply_now(self, Code::REQUEST_ENTITY_TOO_LARGE, "body too large");
                    return None;
                }
                a.body.extend_from_slice(msg.payload);
                a.next += 1;
                a.at = Instant::now();
                if b1.more {
                    // RFC 7959 §2.3: acknowledge the block with 2.31 Continue.
                    self.answer_directly(
                        d.from,
                        &msg,
                        Some(b1),
                        Code::CONTINUE,
                        "",
                        "coap.block1_continue",
                        out,
                    );
                    return None;
                }
                payload = self
                    .assemblies
                    .remove(&key)
                    .map(|a| a.body)
                    .unwrap_or_default();
                block1_echo = Some(b1);
            }
            None => {}
        }
        Some(Pending {
            from: d.from,
            mtype: msg.mtype,
            mid: msg.message_id,
            token: msg.token.to_vec(),
            block2,
            block1: block1_echo,
            request: Request {
                peer: d.from.addr,
                message_id: (msg.mtype == MessageType::Confirmable).then_some(msg.message_id),
                code: msg.code,
                path: path.into_iter().map(str::to_string).collect(),
                query: query.into_iter().map(str::to_string).collect(),
                content_format: msg.content_format().map(|c| c.0),
                accept: msg.accept().map(|c| c.0),
                payload,
                auth: d.auth.clone(),
            },
        })
    }
}

/// The server's long-term DTLS key (P-256, the curve every DTLS peer supports), made at first
/// start and kept in the database so clients can pin its identity.
fn server_key(store: &Store) -> Result<SecretKey, StartError> {
    const NAME: &str = "dtls";
    let (alg, secret) = match store.server_key(NAME)? {
        Some(k) => k,
        None => {
            let key = RustCrypto
                .generate(SignatureAlgorithm::EcdsaP256, &mut OsRng)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            store.put_server_key(NAME, SignatureAlgorithm::EcdsaP256.cose(), &key.to_bytes())?
        }
    };
    let alg = SignatureAlgorithm::from_cose(alg).ok_or(StoreError::Corrupt {
        table: "server_key",
        what: "alg".into(),
    })?;
    SecretKey::from_bytes(alg, &secret).map_err(|_| {
        StartError::Store(StoreError::Corrupt {
            table: "server_key",
            what: "secret".into(),
        })
    })
}

/// Reads what is queued on a non-blocking socket, up to `max` datagrams.
fn drain(socket: &std::net::UdpSocket, buf: &mut [u8], max: usize, into: &mut Vec<Datagram>) {
    while into.len() < max {
        match socket.recv_from(buf) {
            Ok((n, peer)) => into.push((peer, buf[..n].to_vec())),
            // WouldBlock ends the drain; ICMP errors surface here on some platforms: keep
            // serving.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => {
                tracing::debug!(error = %e, "recv error");
                if e.kind() != std::io::ErrorKind::ConnectionRefused {
                    break;
                }
            }
        }
    }
}

/// Waits up to `wait_ms` until one of the sockets is readable; says which.
fn wait_readable(
    plain: &std::net::UdpSocket,
    secure: Option<&std::net::UdpSocket>,
    wait_ms: u64,
) -> (bool, bool) {
    use std::os::fd::AsRawFd;
    let mut fds = [
        libc::pollfd {
            fd: plain.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: secure.map_or(-1, |s| s.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let n = secure.map_or(1, |_| 2);
    // SAFETY: `fds` is a valid array of `n` pollfd structures for the duration of the call.
    let r = unsafe {
        libc::poll(
            fds.as_mut_ptr(),
            n as libc::nfds_t,
            wait_ms.min(1000) as i32,
        )
    };
    if r <= 0 {
        return (false, false);
    }
    (fds[0].revents != 0, n == 2 && fds[1].revents != 0)
}

/// Binds the server socket with a large receive buffer (the kernel may cap it), blocking with a
/// 200 ms read timeout so the loop can run timers and notice shutdown.
fn bind_udp(addr: SocketAddr, rcvbuf: usize) -> std::io::Result<std::net::UdpSocket> {
    let domain = if addr.is_ipv6() {
        socket2::Domain::IPV6
    } else {
        socket2::Domain::IPV4
    };
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    if let Err(e) = s.set_recv_buffer_size(rcvbuf) {
        tracing::debug!(error = %e, "cannot enlarge the receive buffer");
    }
    s.bind(&addr.into())?;
    let socket: std::net::UdpSocket = s.into();
    socket.set_read_timeout(Some(Duration::from_millis(200)))?;
    Ok(socket)
}

impl Dispatcher {
    /// Answers a request without the service (a CoAP-level refusal, or 2.31 Continue), and
    /// remembers the answer for retransmissions of the same message.
    #[allow(clippy::too_many_arguments)]
    fn answer_directly(
        &mut self,
        peer: Endpoint,
        msg: &Message<'_>,
        block1: Option<BlockOption>,
        code: Code,
        text: &str,
        counter: &str,
        out: &mut Vec<(Endpoint, Vec<u8>)>,
    ) {
        self.count(counter);
        let p = Pending {
            from: peer,
            mtype: msg.mtype,
            mid: msg.message_id,
            token: msg.token.to_vec(),
            block2: None,
            block1,
            request: empty_request(peer.addr),
        };
        let response = Response {
            code,
            payload: text.as_bytes().to_vec(),
            ..Default::default()
        };
        if let Some(b) = encode_response(&p, response, self.szx_for(peer)) {
            if let Some(e) = self.dedup.get_mut(&(peer, msg.message_id)) {
                e.response = Some(b.clone());
            }
            out.push((peer, b));
        }
    }
}

fn empty_request(peer: SocketAddr) -> Request {
    Request {
        peer,
        message_id: None,
        code: Code::EMPTY,
        path: vec![],
        query: vec![],
        content_format: None,
        accept: None,
        payload: vec![],
        auth: None,
    }
}

/// Encodes a response: piggybacked in an ACK for a Confirmable request, Non-confirmable
/// otherwise (§5.2); large bodies are cut into Block2 blocks (RFC 7959 §2.4).
fn encode_response(p: &Pending, r: Response, default_szx: u8) -> Option<Vec<u8>> {
    let (mtype, mid) = match p.mtype {
        MessageType::Confirmable => (MessageType::Acknowledgement, p.mid),
        // A response to a NON request is NON with a fresh message ID; derive it from the
        // request's so it is stable for the same request.
        _ => (MessageType::NonConfirmable, p.mid.wrapping_add(0x8000)),
    };
    let szx = p.block2.map_or(default_szx, |b| b.szx.min(default_szx));
    let block_size = 1usize << (szx + 4);
    let (body, block2) = if r.payload.len() > block_size || p.block2.is_some_and(|b| b.num > 0) {
        let want = BlockOption::new(p.block2.map_or(0, |b| b.num), false, szx);
        match want.slice(&r.payload) {
            Some((part, more)) => (part.to_vec(), Some(BlockOption::new(want.num, more, szx))),
            None => {
                // Block past the end: 4.02 (RFC 7959 §2.2), answered without Block2.
                let plain = Pending {
                    from: p.from,
                    mtype: p.mtype,
                    mid: p.mid,
                    token: p.token.clone(),
                    block2: None,
                    block1: None,
                    request: empty_request(p.from.addr),
                };
                let refusal = Response {
                    code: Code::BAD_OPTION,
                    payload: b"block out of range".to_vec(),
                    ..Default::default()
                };
                return encode_response(&plain, refusal, default_szx);
            }
        }
    } else {
        (r.payload.clone(), None)
    };
    let mut buf =
        vec![0u8; body.len() + 256 + r.location_path.iter().map(|s| s.len() + 3).sum::<usize>()];
    let mut b = MessageBuilder::new(&mut buf, mtype, r.code, mid, &p.token).ok()?;
    if let Some(etag) = &r.etag {
        b.option(option::ETAG, etag).ok()?;
    }
    for seg in &r.location_path {
        b.option(option::LOCATION_PATH, seg.as_bytes()).ok()?;
    }
    if let Some(cf) = r.content_format {
        b.uint_option(option::CONTENT_FORMAT, u32::from(cf)).ok()?;
    }
    if let Some(b2) = block2 {
        let (v, n) = b2.encode().ok()?;
        b.option(option::BLOCK2, &v[..n]).ok()?;
    }
    if let Some(b1) = p.block1 {
        let (v, n) = b1.encode().ok()?;
        b.option(option::BLOCK1, &v[..n]).ok()?;
    }
    if block2.is_some_and(|b| b.num == 0) {
        b.uint_option(option::SIZE2, r.payload.len() as u32).ok()?;
    }
    let n = b.finish_with_payload(&body).ok()?;
    buf.truncate(n);
    Some(buf)
}
