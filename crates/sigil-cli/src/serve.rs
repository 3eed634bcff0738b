//! `sigil sensor --serve ADDR`: the sensor serves its own signed readings as an ACE resource
//! server (RFC 9200, the DTLS profile's raw-public-key mode, RFC 9202 §3.2), the seed's
//! publisher-as-server model, while it keeps publishing to the broker.
//!
//! The protocol is `sigil_device::serve` (no_std, sans-IO, the same code firmware links):
//! plain CoAP for `POST /authz-info` only, DTLS 1.2 with raw public keys for `/reading` and
//! `/history`, each request decided by the token bound to the session's peer key, and a
//! bounded table of peers ([`MAX_PEERS`] here, `MAX_PEERS_PER_HOST` per host, half-open
//! handshakes expiring after `HANDSHAKE_TIMEOUT`, idle sessions after `SESSION_IDLE`).
//! What is here: the socket, the OS clocks and randomness, the state directory's file and the
//! log lines.

use anyhow::{Context, Result};
use sigil_client::os::{since, unix_now, OsRng};
use sigil_crypto::{PublicKey, Rng, RustCrypto, SecretKey};
use sigil_device::serve::MAX_PEERS;
use sigil_device::serve::{
    rs_limits, Event, Limits, PeerAddr, PeerSlot, ReadingServer, Readings, ServeStats,
};
use sigil_dtls::{Config, MAX_DATAGRAM};
use sigil_identity::Identity;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use tokio::sync::watch;

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
    readings: Readings,
    server_key: Option<PublicKey>,
}

impl Tap {
    fn lock(&self) -> std::sync::MutexGuard<'_, TapState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A datagram the device sends: a reading published to the broker (`PUT /ps/...`, whole,
    /// not block-wise) is kept with its content format.
    pub fn outgoing(&self, datagram: &[u8]) {
        self.lock().readings.outgoing(datagram);
    }

    /// The server's key, authenticated by a DTLS handshake of the publishing side.
    pub fn learned_server_key(&self, key: PublicKey) {
        self.lock().server_key = Some(key);
    }

    pub fn server_key(&self) -> Option<PublicKey> {
        self.lock().server_key
    }
}

/// What the serving side counted (the core's counters and the token tables').
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ServeReport {
    pub handshakes: u64,
    pub handshakes_failed: u64,
    pub peers_refused: u64,
    pub peers_refused_per_host: u64,
    pub peers_expired: u64,
    pub requests: u64,
    pub plain_refused: u64,
    pub duplicates: u64,
    pub dropped: u64,
    pub tokens_accepted: u64,
    pub tokens_refused: u64,
    /// Of those refused, unchecked: the second's token verifications were spent.
    pub tokens_verify_budget: u64,
    /// Token signatures checked.
    pub verifications: u64,
    pub requests_refused: u64,
}

impl ServeReport {
    fn of(s: &ServeStats, rs: &sigil_ace::rs::RsCounters) -> Self {
        Self {
            handshakes: s.handshakes,
            handshakes_failed: s.handshakes_failed,
            peers_refused: s.peers_refused,
            peers_refused_per_host: s.peers_refused_per_host,
            peers_expired: s.peers_expired,
            requests: s.requests,
            plain_refused: s.plain_refused,
            duplicates: s.duplicates,
            dropped: s.dropped,
            tokens_accepted: rs.tokens_accepted,
            tokens_refused: rs.tokens_invalid
                + rs.tokens_malformed
                + rs.tokens_replayed
                + rs.tokens_busy
                + rs.tokens_verify_budget
                + rs.tokens_expired,
            tokens_verify_budget: rs.tokens_verify_budget,
            verifications: rs.verifications,
            requests_refused: rs.requests_no_token + rs.requests_forbidden + rs.requests_not_found,
        }
    }
}

type Core = ReadingServer<'static, RustCrypto, Box<[PeerSlot<RustCrypto>]>>;

pub struct Server {
    socket: UdpSocket,
    core: Box<Core>,
    tap: Tap,
    start: Instant,
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
        // On the heap from the start: a slot holds a whole connection.
        let peers: Box<[PeerSlot<RustCrypto>]> = (0..MAX_PEERS).map(|_| None).collect();
        let core = Box::new(ReadingServer::new(
            RustCrypto,
            audience,
            key,
            ac,
            dtls,
            secret,
            rs_limits(),
            Limits::default(),
            peers,
        ));
        Ok(Self {
            socket,
            core,
            tap,
            start: Instant::now(),
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.socket.local_addr()?)
    }

    fn report(&self) -> ServeReport {
        ServeReport::of(&self.core.resources.stats, &self.core.resources.rs.counters)
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
                    {
                        let tap = self.tap.lock();
                        self.core.handle_datagram(
                            since(self.start),
                            unix_now(),
                            &mut OsRng,
                            peer_addr(&peer),
                            &buf[..n],
                            &tap.readings,
                        );
                    }
                    self.flush().await;
                }
                _ = tokio::time::sleep(wake) => {
                    self.core.handle_timeout(since(self.start), unix_now());
                    self.flush().await;
                }
                _ = stop.changed() => {}
            }
        }
        Ok(self.report())
    }

    /// Until the next handshake timer or expiry; at least once a second (token expiry runs
    /// on the wall clock).
    fn next_wake(&self) -> Duration {
        let now = since(self.start);
        self.core
            .poll_timeout()
            .map_or(Duration::from_secs(1), |t| {
                t.saturating_since(now).max(Duration::from_millis(1))
            })
            .min(Duration::from_secs(1))
    }

    /// Sends what the core queued and logs what it reported.
    async fn flush(&mut self) {
        let mut b = vec![0u8; MAX_DATAGRAM];
        let now = since(self.start);
        while let Some((to, n)) = self.core.poll_transmit(now, &mut b) {
            let _ = self.socket.send_to(&b[..n], socket_addr(&to)).await;
        }
        while let Some(e) = self.core.poll_event() {
            log(&e);
        }
    }
}

fn log(e: &Event) {
    match e {
        Event::TokenAccepted {
            peer,
            exp,
            replaced,
        } => {
            let addr = socket_addr(peer);
            tracing::info!(%addr, exp = exp.as_secs(), replaced, "access token accepted");
        }
        Event::TokenRefused { peer, error } => {
            let addr = socket_addr(peer);
            tracing::info!(%addr, %error, "access token refused");
        }
        Event::RequestRefused {
            peer,
            path,
            refusal,
        } => {
            let addr = socket_addr(peer);
            tracing::info!(%addr, path = path.as_str(), %refusal, "request refused");
        }
        Event::PeerRefused { peer, per_host } => {
            let addr = socket_addr(peer);
            tracing::info!(
                %addr,
                why = if *per_host { "this host's share of the peer table is taken" } else { "the peer table is full" },
                "serve: ClientHello refused"
            );
        }
        Event::HandshakeFailed { peer, error } => {
            let addr = socket_addr(peer);
            tracing::debug!(%addr, %error, "serve: handshake failed");
        }
    }
}

fn peer_addr(a: &SocketAddr) -> PeerAddr {
    match a.ip() {
        IpAddr::V4(v4) => PeerAddr::v4(v4.octets(), a.port()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => PeerAddr::v4(v4.octets(), a.port()),
            None => PeerAddr::v6(v6.octets(), a.port()),
        },
    }
}

fn socket_addr(p: &PeerAddr) -> SocketAddr {
    let v6 = std::net::Ipv6Addr::from(p.ip);
    match v6.to_ipv4_mapped() {
        Some(v4) => SocketAddr::new(IpAddr::V4(v4), p.port),
        None => SocketAddr::new(IpAddr::V6(v6), p.port),
    }
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
