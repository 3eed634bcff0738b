//! The socket side: the one thread that owns the coap:// and coaps:// sockets, waits for
//! them, reads batches of datagrams and sends the answers. It is the only place in the
//! server that reads the operating system's clocks ([`Clock`]) and randomness ([`OsRng`]);
//! everything below it ([`crate::coap`], the service, the handlers) takes time as an argument.
//!
//! It blocks until a socket is readable (or a timer is due), drains whatever else is queued
//! without blocking (up to `batch_max`), hands the lot to the [`Dispatcher`] as one batch
//! (one database commit), and sends the answers. [`Server::start`] is async so a tokio
//! program can start and stop it; the hot path has no hand-offs between tasks or threads.

use crate::coap::{Datagram, Dispatcher};
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
use std::net::SocketAddr;
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
        let store = Store::open(&config.database)?;
        let secure = match &config.dtls {
            Some(dc) => {
                let key = match &dc.certificate_key {
                    Some(k) => k.clone(),
                    None => server_key(&store)?,
                };
                let dsock = bind_udp(dc.listen, config.receive_buffer)?;
                let mut secret = [0u8; 32];
                OsRng
                    .fill(&mut secret)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                let trust = SharedTrust::with_anchors(dc.client_anchors.clone());
                let layer = SecureLayer::new(dc.clone(), key, secret, trust, stats.clone());
                Some((dsock, layer))
            }
            None => None,
        };
        let service = Service::new(store, config.service.clone(), stats.clone())?;
        let socket = bind_udp(config.listen, config.receive_buffer)?;
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
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread_stop = stop.clone();
        let thread_stats = stats.clone();
        let thread = std::thread::Builder::new()
            .name("sigil-service".into())
            .spawn(move || {
                let batch_max = config.batch_max;
                let mut core = Dispatcher::new(config, service, thread_stats.clone());
                run(
                    &mut core,
                    batch_max,
                    &thread_stats,
                    socket,
                    secure,
                    &thread_stop,
                );
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
        let mut wait = 200u64;
        if let Some(t) = secure.as_ref().and_then(|(_, l)| l.poll_timeout()) {
            wait = wait.min(t.as_millis().saturating_sub(clock.now().as_millis()));
        }
        let (plain_ready, secure_ready) =
            wait_readable(&socket, secure.as_ref().map(|(s, _)| s), wait);
        let mut plain: Vec<Datagram> = Vec::new();
        if plain_ready {
            drain(&socket, &mut buf, batch_max, &mut plain);
        }
        if !plain.is_empty() {
            for (peer, bytes) in d.handle_at(plain, clock.now(), clock.wall()) {
                if let Err(e) = socket.send_to(&bytes, peer) {
                    tracing::debug!(error = %e, %peer, "send failed");
                    stats.incr("server.send_failed");
                }
            }
        } else {
            d.handle_timeout(clock.now());
        }
        if let Some((dsock, layer)) = &mut secure {
            let mut datagrams: Vec<Datagram> = Vec::new();
            if secure_ready {
                drain(dsock, &mut buf, batch_max, &mut datagrams);
            }
            for (peer, bytes) in
                d.handle_secure_at(layer, datagrams, clock.now(), clock.wall(), &mut OsRng)
            {
                if let Err(e) = dsock.send_to(&bytes, peer) {
                    tracing::debug!(error = %e, %peer, "send failed (coaps)");
                    stats.incr("server.send_failed");
                }
            }
        }
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
