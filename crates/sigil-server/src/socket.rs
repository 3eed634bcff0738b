//! The socket side: the one thread that owns the coap:// and coaps:// sockets, waits for
//! them, reads batches of datagrams and sends the answers. It is the only place in the
//! server that reads the operating system's clocks ([`Clock`]) and randomness (`OsRng`);
//! everything below it ([`crate::coap`], the service, the handlers) takes time as an argument.
//!
//! It blocks until a socket is readable (or a timer is due), drains whatever else is queued
//! without blocking (up to `batch_max`), hands the lot to the [`Dispatcher`] as one batch
//! (one database commit), and sends the answers. [`Server::start`] is async so a tokio
//! program can start and stop it; the hot path has no hand-offs between tasks or threads.

use crate::budget::Caps;
use crate::channel::{Channel, Endpoint, Inbound};
use crate::coap::Dispatcher;
use crate::secure::{DtlsConfig, SecureLayer, SharedTrust};
use crate::service::{Service, ServiceConfig};
use crate::stats::Stats;
use crate::store::{Store, StoreError};
use sigil_coap::TransmissionParameters;
use sigil_crypto::{
    CryptoError, CryptoProvider, PublicKey, Rng, RustCrypto, SecretKey, SignatureAlgorithm,
};
use sigil_identity::Identity;
use sigil_time::{Instant, UnixTime};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
    /// Bytes of the dedup cache (entries and the answers they keep), in total and per source
    /// host. Default 8 MiB and 256 KiB: a device sending one request a second holds about
    /// 27 KiB over EXCHANGE_LIFETIME, so a host's share covers some ten of them behind one
    /// address, and 32 hosts at their share fill the table. Over a share, answers are not
    /// remembered (docs/security.md).
    pub dedup_caps: Caps,
    /// With the dedup table full, entries of the hosts holding the most give way to new
    /// exchanges at most this many times a second (and as many at once): the table (some
    /// 70,000 entries at 8 MiB) then cannot be turned over faster than its entries expire
    /// anyway (EXCHANGE_LIFETIME, 247 s), whatever a flood sends.
    pub dedup_give_way_per_sec: u32,
    /// Largest request body accepted through Block1.
    pub max_body: usize,
    /// Most concurrent Block1 reassemblies per peer address (the table as a whole is bounded
    /// by `block1_caps` alone, each transfer charged at least
    /// [`crate::coap::BLOCK1_MIN_CHARGE`]).
    pub max_assemblies_per_peer: usize,
    /// An unfinished Block1 transfer is dropped this long after its last block. Default 45 s
    /// (MAX_TRANSMIT_SPAN: a client retransmitting its next block gets it there within it).
    pub block1_idle: Duration,
    /// Bytes of Block1 reassembly, in total and per source host. Default 4 MiB (256 bodies
    /// of `max_body`) and 4 × `max_body` per host (64 KiB): four full-size registrations at
    /// once from one address, or some forty of the usual 1-2 KiB.
    pub block1_caps: Caps,
    /// With the Block1 table full, transfers give way to new ones at most this many times a
    /// second (and as many at once). Below `block1_caps.total / BLOCK1_MIN_CHARGE /
    /// block1_idle` (about 83 at the defaults), first blocks that never continue expire
    /// faster than a flood can push them in by giving way.
    pub block1_give_way_per_sec: u32,
    /// Bytes of the table of addresses verified by Echo (RFC 9175 §2.4), 96 bytes an
    /// address. Default 1 MiB (about 10,900 addresses) and 16 KiB (170) per host.
    pub verified_caps: Caps,
    /// Block size used for large responses when the client did not ask (Block2 SZX).
    pub block2_szx: u8,
    /// Kernel receive buffer (SO_RCVBUF) in bytes, so bursts queue instead of being dropped.
    pub receive_buffer: usize,
    /// CoAP over DTLS (coaps://) on a second socket, if set.
    pub dtls: Option<DtlsConfig>,
    /// Signature budget of signed answers on coap:// ([`crate::answers`]).
    pub answer_rates: crate::answers::AnswerRates,
    /// Readings received longer ago than this are deleted (never the latest of a device or a
    /// topic): at start, then every [`PRUNE_EVERY`], at most [`PRUNE_BATCH`] per turn of the
    /// datagram loop. `None`: kept for ever.
    pub retain: Option<Duration>,
    /// Observers of topics (RFC 7641): caps and timing ([`crate::coap::ObserveConfig`]).
    pub observe: crate::coap::ObserveConfig,
}

/// How often the server looks for readings past [`ServerConfig::retain`].
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Most readings deleted in one turn of the datagram loop (one short transaction).
pub const PRUNE_BATCH: u32 = 500;

impl ServerConfig {
    pub fn new(listen: SocketAddr, database: PathBuf) -> Self {
        Self {
            listen,
            database,
            service: ServiceConfig::default(),
            transmission: TransmissionParameters::default(),
            batch_max: 512,
            dedup_capacity: 200_000,
            dedup_caps: Caps {
                total: 8 << 20,
                per_host: 256 << 10,
            },
            dedup_give_way_per_sec: 200,
            max_body: 16 * 1024,
            max_assemblies_per_peer: 4,
            block1_idle: Duration::from_secs(45),
            block1_caps: Caps {
                total: 4 << 20,
                per_host: 4 * 16 * 1024,
            },
            block1_give_way_per_sec: 50,
            verified_caps: Caps {
                total: 1 << 20,
                per_host: 16 << 10,
            },
            block2_szx: 6,
            receive_buffer: 8 << 20,
            dtls: None,
            answer_rates: Default::default(),
            retain: None,
            observe: Default::default(),
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
    /// The server's long-term public key: signed answers on coap:// ([`crate::answers`]),
    /// pairing messages and tokens are signed with it.
    pub answer_key: PublicKey,
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

/// The operating system's clocks, read once per turn of the loop.
pub struct Clock {
    start: std::time::Instant,
}

impl Clock {
    pub fn new() -> Self {
        Self {
            start: std::time::Instant::now(),
        }
    }

    /// Monotonic milliseconds since the clock was made.
    pub fn now(&self) -> Instant {
        Instant::from_millis(u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    /// The wall clock.
    pub fn wall(&self) -> UnixTime {
        UnixTime::from_secs(unix_now())
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Seconds since the Unix epoch from the system clock (0 if it is set before 1970).
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The operating system's CSPRNG: the server's randomness, passed in to the layers below.
pub struct OsRng;

impl Rng for OsRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        getrandom::fill(buf).map_err(|_| CryptoError::Rng)
    }
}

impl Server {
    /// Opens the database, binds the socket and starts serving.
    pub async fn start(mut config: ServerConfig, stats: Stats) -> Result<ServerHandle, StartError> {
        // Both sockets first: a port in use is refused before a database file is created.
        let socket =
            bind_udp(config.listen, config.receive_buffer).map_err(|source| StartError::Bind {
                addr: config.listen,
                source,
            })?;
        let dsock = match &config.dtls {
            Some(dc) => Some(
                bind_udp(dc.listen, config.receive_buffer).map_err(|source| StartError::Bind {
                    addr: dc.listen,
                    source,
                })?,
            ),
            None => None,
        };
        let store = Store::open(&config.database)?;
        let secure = match (&config.dtls, dsock) {
            (Some(dc), Some(dsock)) => {
                let key = match &dc.certificate_key {
                    Some(k) => k.clone(),
                    None => server_key(&store)?,
                };
                if dc.listen.ip().is_unspecified() {
                    if let Err(e) = report_destinations(&dsock) {
                        tracing::warn!(error = %e, "coaps:// lookup targets will name the wildcard address");
                    }
                }
                let mut secret = [0u8; 32];
                OsRng
                    .fill(&mut secret)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                let trust = SharedTrust::with_anchors(dc.client_anchors.clone());
                let layer = SecureLayer::new(dc.clone(), key, secret, trust, stats.clone());
                Some((dsock, layer))
            }
            _ => None,
        };
        // The AC signs with the server's own key (the one pairing messages are signed with and
        // sensors pin), also when DTLS presents a certificate's key.
        let ac_keys = match &secure {
            Some(_) => Some((server_key(&store)?, token_key(&store)?)),
            None => None,
        };
        // Signed answers on coap:// are signed with the same key ([`crate::answers`]).
        let answer_key = server_key(&store)?;
        let answer_public = RustCrypto
            .public_key(&answer_key)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut service = Service::new(store, config.service.clone(), stats.clone())?;
        let mut secure = secure;
        if let Some((ac_key, rs_key)) = ac_keys {
            let authority = crate::authz::Authority::new(
                ac_key,
                rs_key,
                config.service.token_lifetime,
                Box::new(OsRng),
            )
            .map_err(|e| std::io::Error::other(e.to_string()))?;
            service.set_authority(authority);
        }
        if let Some((_, layer)) = &mut secure {
            // The sessions stored before a restart come back once the trust they are checked
            // against is loaded; the layer keeps its own connection to the database for them.
            if let Some(c) = service.changed_credentials() {
                layer.trust().replace(c);
            }
            let sessions = Store::open(&config.database)?;
            let clock = Clock::new();
            let n = layer.restore_sessions(sessions, clock.now(), clock.wall());
            if n > 0 {
                tracing::info!(sessions = n, "DTLS sessions restored from the database");
            }
        }
        if config.listen.ip().is_unspecified() {
            if let Err(e) = report_destinations(&socket) {
                tracing::warn!(error = %e, "lookup targets will name the wildcard address");
            }
        }
        let local_addr = socket.local_addr()?;
        // The addresses actually bound (a port 0 was chosen by the kernel): links in answers
        // are resolved against them.
        config.listen = local_addr;
        let mut dtls = None;
        if let Some((dsock, layer)) = &secure {
            let key = layer
                .public_key()
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            let identity = Identity::of_key(&RustCrypto, &key, b"")
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            let addr = dsock.local_addr()?;
            if let Some(dc) = &mut config.dtls {
                dc.listen = addr;
            }
            dtls = Some(DtlsEndpoint {
                addr,
                key,
                identity,
            });
        }
        let mut echo_secret = [0u8; 32];
        OsRng
            .fill(&mut echo_secret)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        // Retention runs on the datagram thread between batches, through the service's own
        // connection (a bounded delete that never waits for another process's lock).
        let pruner = config.retain.map(|retain| Pruner {
            retain,
            next: std::time::Instant::now(),
        });
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread_stop = stop.clone();
        let thread_stats = stats.clone();
        let thread = std::thread::Builder::new()
            .name("sigil-service".into())
            .spawn(move || {
                let batch_max = config.batch_max;
                let mut core = Dispatcher::new(config, service, thread_stats.clone(), echo_secret);
                core.set_answer_key(answer_key);
                run(
                    &mut core,
                    batch_max,
                    &thread_stats,
                    socket,
                    secure,
                    pruner,
                    &thread_stop,
                );
            })?;
        tracing::info!(addr = %local_addr, "sigil server listening");
        Ok(ServerHandle {
            local_addr,
            dtls,
            answer_key: answer_public,
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
    /// A socket could not be bound (e.g. another process has the port); no database file
    /// was created.
    #[error("cannot listen on {addr}: {}", bind_reason(.source))]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
}

/// The reason a bind failed, in words (the OS text carries an error number).
fn bind_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => "address already in use".into(),
        std::io::ErrorKind::AddrNotAvailable => "no such local address".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// How soon pruning is tried again after finding the database locked by another connection.
const PRUNE_BUSY_RETRY: Duration = Duration::from_secs(1);

/// Deletes readings past the retention window, at most [`PRUNE_BATCH`] a call, through the
/// service's connection: between two batches of datagrams (the first before the first
/// datagram), never for long, and never waiting for a lock another connection holds.
struct Pruner {
    retain: Duration,
    next: std::time::Instant,
}

impl Pruner {
    /// One bounded pass if one is due; the next is due at once while a backlog remains,
    /// after [`PRUNE_EVERY`] otherwise.
    fn run_due(&mut self, d: &mut Dispatcher, stats: &Stats) {
        let now = std::time::Instant::now();
        if now < self.next {
            return;
        }
        let before =
            unix_now().saturating_sub(i64::try_from(self.retain.as_secs()).unwrap_or(i64::MAX));
        match d.prune_readings(before, PRUNE_BATCH) {
            Ok(n) => {
                if n > 0 {
                    stats.add("store.readings_pruned", n);
                    tracing::debug!(readings = n, "readings past the retention window deleted");
                }
                self.next = if n >= u64::from(PRUNE_BATCH) {
                    now
                } else {
                    now + PRUNE_EVERY
                };
            }
            Err(e) if e.is_busy() => {
                // Another connection holds the write lock: not a failure, a later turn.
                stats.incr("store.prune_busy");
                tracing::debug!(error = %e, "database locked; pruning tried again shortly");
                self.next = now + PRUNE_BUSY_RETRY;
            }
            Err(e) => {
                stats.incr("store.prune_failed");
                tracing::warn!(error = %e, "pruning old readings failed; tried again in a minute");
                self.next = now + PRUNE_EVERY;
            }
        }
    }
}

/// The datagram loop: wait until a socket is readable or a DTLS timer is due (waking
/// every 200 ms for expiry and shutdown), drain whatever is queued on both sockets (up to
/// `batch_max` each), handle it all as one batch, send the answers. One thread, no
/// hand-offs on the hot path.
fn run(
    d: &mut Dispatcher,
    batch_max: usize,
    stats: &Stats,
    socket: std::net::UdpSocket,
    mut secure: Option<(std::net::UdpSocket, SecureLayer)>,
    mut pruner: Option<Pruner>,
    stop: &std::sync::atomic::AtomicBool,
) {
    let clock = Clock::new();
    let mut buf = vec![0u8; 65_536];
    let _ = socket.set_nonblocking(true);
    if let Some((s, _)) = &secure {
        let _ = s.set_nonblocking(true);
    }
    loop {
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        if let Some(p) = &mut pruner {
            p.run_due(d, stats);
        }
        let mut wait = 200u64;
        if let Some(t) = secure.as_ref().and_then(|(_, l)| l.poll_timeout()) {
            wait = wait.min(t.as_millis().saturating_sub(clock.now().as_millis()));
        }
        if let Some(t) = d.observe_wake() {
            wait = wait.min(t.as_millis().saturating_sub(clock.now().as_millis()));
        }
        let (plain_ready, secure_ready) =
            wait_readable(&socket, secure.as_ref().map(|(s, _)| s), wait);
        let mut plain: Vec<Received> = Vec::new();
        if plain_ready {
            drain(&socket, &mut buf, batch_max, &mut plain);
        }
        if !plain.is_empty() {
            let batch = plain
                .into_iter()
                .map(|(peer, to, bytes)| Inbound {
                    from: Endpoint::plain(peer),
                    to,
                    auth: None,
                    bytes,
                })
                .collect();
            for (to, bytes) in d.handle_inbound_at(batch, clock.now(), clock.wall()) {
                let peer = to.addr;
                if let Err(e) = socket.send_to(&bytes, peer) {
                    tracing::debug!(error = %e, %peer, "send failed");
                    stats.incr("server.send_failed");
                }
            }
        } else {
            d.handle_timeout(clock.now());
        }
        for (peer, bytes) in d.take_notifications_for(Channel::Plain) {
            if let Err(e) = socket.send_to(&bytes, peer) {
                tracing::debug!(error = %e, %peer, "send failed (notification)");
                stats.incr("server.send_failed");
            }
        }
        if let Some((dsock, layer)) = &mut secure {
            let mut received: Vec<Received> = Vec::new();
            if secure_ready {
                drain(dsock, &mut buf, batch_max, &mut received);
            }
            for (peer, bytes) in
                secure_batch(d, layer, received, clock.now(), clock.wall(), &mut OsRng)
            {
                if let Err(e) = dsock.send_to(&bytes, peer) {
                    tracing::debug!(error = %e, %peer, "send failed (coaps)");
                    stats.incr("server.send_failed");
                }
            }
        }
    }
}

/// The coaps:// path of one batch at `now` (the DTLS clock too) and `wall` (certificates and
/// the service), with the caller's randomness. This drives both layers, neither of which calls
/// the other: the DTLS layer takes the credentials the service changed, then the datagrams;
/// the CoAP messages its sessions delivered go to the dispatcher as one batch with their
/// identities ([`Channel::Dtls`]), once the sessions' read marks are stored; the answers and
/// the notifications for sessions (each only into a session that still authenticates its
/// observer) go back through the DTLS layer, whose timers run last. Returns the datagrams to
/// send on the coaps:// socket. `datagrams` carry each one's destination address when the
/// socket reports it.
pub fn secure_batch(
    d: &mut Dispatcher,
    layer: &mut SecureLayer,
    datagrams: Vec<Received>,
    now: Instant,
    wall: UnixTime,
    rng: &mut dyn sigil_crypto::Rng,
) -> Vec<(SocketAddr, Vec<u8>)> {
    if let Some(c) = d.changed_credentials() {
        layer.trust().replace(c);
    }
    let mut out = Vec::new();
    let mut batch = Vec::new();
    for (peer, to, bytes) in datagrams {
        for m in layer.handle_datagram(now, wall, rng, peer, &bytes, &mut out) {
            batch.push(Inbound {
                from: Endpoint::dtls(m.peer),
                to,
                auth: m.auth,
                bytes: m.message,
            });
        }
    }
    // The sessions' read marks are stored before their requests are acted on.
    let unmarked = layer.persist_read_marks(now);
    batch.retain(|i| !unmarked.contains(&i.from.addr));
    if !batch.is_empty() {
        for (to, bytes) in d.handle_inbound_at(batch, now, wall) {
            layer.send(now, to.addr, &bytes, &mut out);
        }
    }
    for (to, bytes) in d.take_secure_notifications(|a| layer.session_auth(a).cloned()) {
        layer.send(now, to, &bytes, &mut out);
    }
    layer.handle_timeout(now, wall, &mut out);
    out
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

/// The key the access-control server encrypts tokens for this server with (it is both AC
/// and resource server), made at first start and kept in the database so the tokens it gave
/// out stay valid across a restart.
fn token_key(store: &Store) -> Result<[u8; 16], StartError> {
    const NAME: &str = "ac-rs";
    let secret = match store.server_key(NAME)? {
        Some((_, s)) => s,
        None => {
            let mut k = [0u8; 16];
            OsRng
                .fill(&mut k)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            // alg 10: AES-CCM-16-64-128, what the tokens are encrypted with.
            store.put_server_key(NAME, 10, &k)?.1
        }
    };
    secret.try_into().map_err(|_| {
        StartError::Store(StoreError::Corrupt {
            table: "server_key",
            what: NAME.into(),
        })
    })
}

/// A received datagram: its sender, the address it was sent to (when the socket reports it),
/// its bytes.
pub type Received = (SocketAddr, Option<IpAddr>, Vec<u8>);

/// Reads what is queued on a non-blocking socket, up to `max` datagrams.
fn drain(socket: &UdpSocket, buf: &mut [u8], max: usize, into: &mut Vec<Received>) {
    while into.len() < max {
        match recv_with_destination(socket, buf) {
            Ok((n, peer, to)) => into.push((peer, to, buf[..n].to_vec())),
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

/// Asks the kernel to report each datagram's destination address (IP_PKTINFO,
/// IPV6_RECVPKTINFO, RFC 3542 §6): on a wildcard address the server then knows which of its
/// addresses a request was sent to.
fn report_destinations(socket: &UdpSocket) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (level, name) = if socket.local_addr()?.is_ipv6() {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
    } else {
        (libc::IPPROTO_IP, libc::IP_PKTINFO)
    };
    let on: libc::c_int = 1;
    // SAFETY: `on` outlives the call and its size is passed with it.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `recvmsg`: the datagram into `buf`, its sender, and its destination address if the socket
/// reports it (see [`report_destinations`]).
fn recv_with_destination(
    socket: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<(usize, SocketAddr, Option<IpAddr>)> {
    use std::os::fd::AsRawFd;
    // SAFETY: all-zero is a valid value of these plain C structures.
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one in6_pktinfo control message, 8-byte aligned.
    let mut control = [0u64; 16];
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: every pointer in `msg` points into live buffers of the lengths given.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let peer = socket_addr(&name)
        .ok_or_else(|| std::io::Error::other("datagram from an address that is not IP"))?;
    let mut to = None;
    // SAFETY: the kernel filled `control` up to `msg_controllen`; the CMSG macros stay
    // within it, and the payloads are read unaligned as the structure the header names.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let h = &*c;
            if h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_PKTINFO {
                let info: libc::in_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                to = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    info.ipi_addr.s_addr,
                ))));
            } else if h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_PKTINFO {
                let info: libc::in6_pktinfo = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                to = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let len = usize::try_from(n).unwrap_or(0).min(buf.len());
    Ok((len, peer, to))
}

fn socket_addr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a: libc::sockaddr_in =
                unsafe { std::ptr::read_unaligned((s as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::from((
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a: libc::sockaddr_in6 =
                unsafe { std::ptr::read_unaligned((s as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
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
