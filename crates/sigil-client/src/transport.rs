//! How the command-line clients reach the server: plain UDP (coap://) or a DTLS 1.2 session
//! (coaps://, RFC 7252 §9) driven from the sans-IO `sigil-dtls` connection, its handshake
//! carried as DTLS records or as a CoAP resource ([`Carrier`]).

use anyhow::{anyhow, bail, Context, Result};
use sigil_crypto::{PublicKey, RustCrypto, SecretKey};
use sigil_dtls::{Config, Connection, Credentials, Traffic, Trust, MAX_DATAGRAM};
use sigil_identity::Identity;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

pub use crate::diagnose::{
    explain, explain_stall, no_answer, own_identity, retransmissions_within, Stall,
};
use crate::diagnose::{explain_refused_finished, HandshakeFailure};

/// How a client authenticates over coaps://.
#[derive(Clone, Debug)]
pub enum Security {
    /// Plain CoAP.
    None,
    /// TLS_PSK_WITH_AES_128_CCM_8 (or, with `ecdhe`, TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256
    /// for forward secrecy): the PSK identity is the client's secure identity.
    Psk {
        identity: Vec<u8>,
        key: Vec<u8>,
        ecdhe: bool,
    },
    /// TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with raw public keys: the server's key must hash to
    /// `server` (its RFC 8387 identity); `own` authenticates the client.
    RawPublicKey {
        own: Option<SecretKey>,
        server: Identity,
    },
    /// The same suite with X.509: the server's chain must lead to one of `anchors` (DER);
    /// `own` is the client's chain (leaf first, DER) and the key it certifies. With `server`,
    /// the certified key must also hash to that identity: a CA that certifies devices as well
    /// as the server would otherwise let any device's certificate stand in for the server
    /// (RFC 7925 §4.4.1 asks the client to check which server a certificate names).
    Certificate {
        own: Option<(Vec<Vec<u8>>, SecretKey)>,
        anchors: Vec<Vec<u8>>,
        server: Option<Identity>,
    },
}

impl Security {
    pub fn is_secure(&self) -> bool {
        !matches!(self, Self::None)
    }

    /// A digest of everything these credentials authenticate with and trust: the mode, the
    /// PSK identity and key, the client's key and certificate chain, the pinned server and
    /// the trust anchors. A kept association is bound to it (its file's MAC key is derived
    /// with it), so an association made under other credentials is never taken up: changed
    /// credentials mean a new handshake, which the server judges afresh.
    pub fn binding(&self) -> [u8; 32] {
        use sigil_crypto::CryptoProvider;
        let len = |b: &[u8]| (b.len() as u64).to_be_bytes();
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut put = |b: &[u8]| {
            parts.push(len(b).to_vec());
            parts.push(b.to_vec());
        };
        let public = |k: &SecretKey| {
            RustCrypto
                .public_key(k)
                .map(|p| p.as_bytes().to_vec())
                .unwrap_or_default()
        };
        match self {
            Self::None => put(b"none"),
            Self::Psk {
                identity,
                key,
                ecdhe,
            } => {
                put(if *ecdhe { b"ecdhe-psk" } else { b"psk" });
                put(identity);
                put(key);
            }
            Self::RawPublicKey { own, server } => {
                put(b"rpk");
                put(&own.as_ref().map(public).unwrap_or_default());
                put(server.as_bytes());
            }
            Self::Certificate {
                own,
                anchors,
                server,
            } => {
                put(b"cert");
                if let Some((chain, key)) = own {
                    put(&public(key));
                    for c in chain {
                        put(c);
                    }
                }
                put(b"anchors");
                for a in anchors {
                    put(a);
                }
                put(server.as_ref().map_or(&[][..], |s| &s.as_bytes()[..]));
            }
        }
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        RustCrypto.sha256(&refs)
    }
}

/// How the DTLS handshake travels; the session's records are the same either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Carrier {
    /// DTLS flights over UDP, with DTLS's own retransmission timers and fragmentation.
    #[default]
    Records,
    /// Each flight in a Confirmable CoAP request or response to the server's `/dtls`
    /// resource (sigil-dtls-coap): CoAP's retransmission and block-wise transfer.
    Coap,
}

/// Trusts exactly the server's pinned identity (raw public keys), or chains to the anchors
/// at the time the handshake passes (X.509; the transport sets it when the handshake starts),
/// whose certified key must hash to the pinned identity when there is one. The last key the
/// server presented is kept, so a refused pin can say which identity the server showed.
struct PinnedServer(
    Option<Identity>,
    Vec<Vec<u8>>,
    std::sync::Arc<std::sync::Mutex<Option<PublicKey>>>,
);

impl PinnedServer {
    fn presented(&self, key: &PublicKey) {
        if let Ok(mut g) = self.2.lock() {
            *g = Some(*key);
        }
    }
}

impl Trust for PinnedServer {
    fn trusted_key(&self, key: &PublicKey) -> bool {
        self.presented(key);
        self.0
            .is_some_and(|id| Identity::of_key(&RustCrypto, key, b"").is_ok_and(|k| k == id))
    }

    fn certificate_chain(
        &self,
        chain: &[&[u8]],
        now: sigil_time::UnixTime,
    ) -> Result<PublicKey, sigil_dtls::Error> {
        let anchors: Vec<&[u8]> = self.1.iter().map(Vec::as_slice).collect();
        let key = sigil_dtls::x509::verify_chain(&RustCrypto, chain, &anchors, now)?;
        self.presented(&key);
        match self.0 {
            Some(_) if !self.trusted_key(&key) => Err(sigil_dtls::Error::UntrustedKey),
            _ => Ok(key),
        }
    }
}

type Handshake = Connection<RustCrypto, PinnedServer>;
/// An established session: only its traffic state, the handshake's buffers dropped.
type Session = Traffic<RustCrypto>;

/// A socket to one server, plain or protected.
pub struct Transport {
    socket: UdpSocket,
    server: SocketAddr,
    security: Security,
    config: Config,
    carrier: Carrier,
    session: Option<Box<Session>>,
    start: Instant,
    inbox: VecDeque<Vec<u8>>,
    buf: Vec<u8>,
    /// Completed DTLS handshakes (1 after `open`, more after reconnects).
    pub handshakes: u32,
    /// Of those, abbreviated ones that resumed the previous session.
    pub resumed: u32,
    /// The session of the last handshake, offered for resumption on reconnect.
    resumable: Option<sigil_dtls::Session>,
    /// Where the established association is kept between runs, and the key its record is
    /// MACed under ([`Transport::keep_association`]).
    kept: Option<(PathBuf, [u8; 32])>,
    /// Sessions restored from the kept association instead of a handshake.
    pub restored: u32,
    /// Writes of the kept association (each one file written, synced and renamed).
    pub association_writes: u64,
    /// Give up on a handshake after this long ([`Transport::open_within`]).
    handshake_limit: Option<Duration>,
    /// Whether the server sent anything during the last handshake (a stalled handshake
    /// after an answer is not an absent server).
    heard: bool,
    /// Where the last handshake stood when it was last driven: what a give-up explains.
    stall: Stall,
}

/// Records a kept association may seal per write of its file: the sequence reserved ahead.
pub const ASSOCIATION_RESERVE_AHEAD: u64 = 64;

impl Transport {
    /// Binds a socket and, for coaps://, completes the DTLS handshake (retransmitting with
    /// the configured timers) before returning.
    pub async fn open(server: SocketAddr, security: Security, config: Config) -> Result<Self> {
        Self::open_over(server, security, config, Carrier::Records).await
    }

    /// [`Transport::open`] with the handshake carried by `carrier`.
    pub async fn open_over(
        server: SocketAddr,
        security: Security,
        config: Config,
        carrier: Carrier,
    ) -> Result<Self> {
        let mut t = Self::bind(server, security, config).await?;
        t.set_carrier(carrier);
        if t.security.is_secure() {
            t.handshake().await?;
        }
        Ok(t)
    }

    /// [`Transport::open_over`] giving up on the handshake after `limit` (the server silent,
    /// or its handshake stalled), with an error that says which.
    pub async fn open_within(
        server: SocketAddr,
        security: Security,
        config: Config,
        carrier: Carrier,
        limit: Duration,
    ) -> Result<Self> {
        let mut t = Self::bind(server, security, config).await?;
        t.set_carrier(carrier);
        t.handshake_limit = Some(limit);
        if t.security.is_secure() {
            t.handshake().await?;
        }
        Ok(t)
    }

    /// The error of a handshake that did not complete (within `limit`, or before the DTLS
    /// layer's own retransmissions ran out), chosen by where it stopped ([`Stall`]).
    fn stalled(&self, limit: Option<Duration>) -> anyhow::Error {
        anyhow!(
            "{}",
            explain_stall(self.stall, self.server, &self.security, limit)
        )
    }

    /// How later handshakes travel.
    pub fn set_carrier(&mut self, carrier: Carrier) {
        self.carrier = carrier;
    }

    /// Binds a socket for `server` without a DTLS handshake: for coaps://, the caller runs
    /// [`Transport::handshake`] (and retries it) before sending.
    pub async fn bind(server: SocketAddr, security: Security, config: Config) -> Result<Self> {
        let bind: SocketAddr = if server.is_ipv6() {
            "[::]:0".parse()?
        } else {
            "0.0.0.0:0".parse()?
        };
        let socket = UdpSocket::bind(bind).await?;
        Ok(Self {
            socket,
            server,
            security,
            config,
            carrier: Carrier::Records,
            session: None,
            start: Instant::now(),
            inbox: VecDeque::new(),
            buf: vec![0u8; 65_536],
            handshakes: 0,
            resumed: 0,
            resumable: None,
            kept: None,
            restored: 0,
            association_writes: 0,
            handshake_limit: None,
            heard: false,
            stall: Stall::Silent,
        })
    }

    pub fn is_secure(&self) -> bool {
        self.security.is_secure()
    }

    /// Keeps every established association in the file `path` (written atomically: a
    /// temporary file, synced, renamed), MACed under `key` (derived from a secret of this
    /// device), with its record sequence reserved [`ASSOCIATION_RESERVE_AHEAD`] ahead: no
    /// record is sealed beyond what the file says may have been used, so a restart from it
    /// never reuses a nonce. [`Transport::restore`] takes it up again.
    pub fn keep_association(&mut self, path: PathBuf, key: [u8; 32]) {
        self.kept = Some((path, key));
    }

    /// The kept association as the established session, without a handshake, if the file
    /// holds one this device wrote for this server's credentials. False (and the file
    /// removed) otherwise: the caller handshakes. Whether the server still has the session
    /// shows only when it answers; if it does not, the caller handshakes then.
    pub fn restore(&mut self) -> bool {
        let Some((path, key)) = self.kept.clone() else {
            return false;
        };
        let Ok(bytes) = std::fs::read(&path) else {
            return false;
        };
        let saved = match sigil_dtls::SavedAssociation::decode(&RustCrypto, &key, &bytes) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, path = %path.display(), "kept DTLS association refused");
                let _ = std::fs::remove_file(&path);
                return false;
            }
        };
        let mut conn = Box::new(Traffic::restore(RustCrypto, saved));
        if let Err(e) = self.checkpoint(&mut conn) {
            tracing::warn!(error = %e, "cannot keep the DTLS association");
            return false;
        }
        self.resumable = conn.session();
        self.session = Some(conn);
        self.restored += 1;
        true
    }

    /// Writes the association with a new reservation, then lets the session use it.
    fn checkpoint(&mut self, conn: &mut Session) -> Result<()> {
        let Some((path, key)) = &self.kept else {
            return Ok(());
        };
        let saved = conn
            .save(ASSOCIATION_RESERVE_AHEAD)
            .map_err(|e| anyhow!("DTLS: {e}"))?;
        let mut buf = [0u8; sigil_dtls::saved::MAX_ENCODED_LEN];
        let n = saved
            .encode(&RustCrypto, key, &mut buf)
            .map_err(|e| anyhow!("DTLS association: {e}"))?;
        write_atomically(path, &buf[..n])
            .with_context(|| format!("cannot write {}", path.display()))?;
        self.association_writes += 1;
        conn.persisted(&saved);
        Ok(())
    }

    pub fn server(&self) -> SocketAddr {
        self.server
    }

    /// The server's raw public key, once a DTLS session authenticated it.
    pub fn peer_public_key(&self) -> Option<PublicKey> {
        self.session.as_ref()?.peer_public_key().copied()
    }

    /// The DTLS clock: milliseconds since the transport was opened.
    fn now(&self) -> sigil_time::Instant {
        crate::os::since(self.start)
    }

    /// (Re-)establishes the DTLS session: a new handshake from the same socket.
    pub async fn handshake(&mut self) -> Result<()> {
        let security = self.security.clone();
        let (identity, key);
        let chain: Vec<&[u8]> = match &security {
            Security::Certificate {
                own: Some((c, _)), ..
            } => c.iter().map(Vec::as_slice).collect(),
            _ => Vec::new(),
        };
        let credentials = match &security {
            Security::None => return Ok(()),
            Security::Psk {
                identity: i,
                key: k,
                ecdhe,
            } => {
                identity = i.clone();
                key = k.clone();
                if *ecdhe {
                    Credentials::EcdhePsk {
                        identity: &identity,
                        key: &key,
                    }
                } else {
                    Credentials::Psk {
                        identity: &identity,
                        key: &key,
                    }
                }
            }
            Security::RawPublicKey { own, .. } => Credentials::RawPublicKey(own.as_ref()),
            Security::Certificate { own, .. } => {
                Credentials::Certificate(own.as_ref().map(|(_, k)| (&chain[..], k)))
            }
        };
        let pinned = match &security {
            Security::RawPublicKey { server, .. } => Some(*server),
            Security::Certificate { server, .. } => *server,
            _ => None,
        };
        let anchors = match &security {
            Security::Certificate { anchors, .. } => anchors.clone(),
            _ => Vec::new(),
        };
        let presented = std::sync::Arc::default();
        let trust = PinnedServer(pinned, anchors, std::sync::Arc::clone(&presented));
        self.inbox.clear();
        self.heard = false;
        self.stall = Stall::Silent;
        let handshake = match self.carrier {
            Carrier::Records => self.handshake_records(trust, credentials).await,
            Carrier::Coap => self.handshake_coap(trust, credentials).await,
        };
        let conn = handshake.map_err(|e| {
            let shown = presented.lock().ok().and_then(|g| *g);
            match (e, pinned, shown) {
                (HandshakeFailure::Dtls(sigil_dtls::Error::UntrustedKey), Some(pinned), Some(key)) => {
                    let id = Identity::of_key(&RustCrypto, &key, b"")
                        .map_or_else(|e| format!("(none: {e})"), |i| i.to_string());
                    anyhow!(
                        "DTLS handshake with {}: the server presented identity {id} ({} key), not the pinned --server-identity {pinned}: check the pin (`sigil server` prints its identity at start) or the address",
                        self.server,
                        key.algorithm().name()
                    )
                }
                (HandshakeFailure::Dtls(sigil_dtls::Error::HandshakeTimeout), _, _) => {
                    self.stalled(None)
                }
                (HandshakeFailure::Dtls(e), _, _) => {
                    let why = explain(&e, &security);
                    anyhow!("DTLS handshake with {}: {e}{why}", self.server)
                }
                (HandshakeFailure::Other(e), _, _) => e,
            }
        })?;
        let mut conn = Box::new(conn);
        self.checkpoint(&mut conn)?;
        self.drain(&mut conn);
        self.flush(&mut conn).await?;
        if conn.resumed() {
            self.resumed += 1;
        }
        self.resumable = conn.session();
        self.session = Some(conn);
        self.handshakes += 1;
        tracing::debug!(server = %self.server, carrier = ?self.carrier, "DTLS session established");
        Ok(())
    }

    /// The DTLS settings for a handshake starting now, with the wall clock's time at which
    /// the server's certificate chain is checked (the core reads no clock).
    fn handshake_config(&self) -> Config {
        Config {
            now: crate::os::unix_now(),
            ..self.config
        }
    }

    /// A handshake in DTLS records (resuming the last session if there is one).
    async fn handshake_records(
        &mut self,
        trust: PinnedServer,
        credentials: Credentials<'_>,
    ) -> Result<Session, HandshakeFailure> {
        let now = self.now();
        let rng = &mut crate::os::OsRng;
        let config = self.handshake_config();
        let conn = match &self.resumable {
            Some(s) => Connection::resume(RustCrypto, trust, config, rng, credentials, s, now),
            None => Connection::connect(RustCrypto, trust, config, rng, credentials, now),
        };
        let mut conn: Box<Handshake> = Box::new(conn?);
        let started = Instant::now();
        let mut out = [0u8; MAX_DATAGRAM];
        loop {
            while let Some(n) = conn.poll_transmit(self.now(), &mut out) {
                self.socket.send_to(&out[..n], self.server).await?;
            }
            if conn.is_established() {
                break;
            }
            if let Some(e) = conn.failure() {
                return Err(e.into());
            }
            self.stall = Stall::of_records(self.heard, conn.state());
            let now = self.now();
            let wake = conn.poll_timeout().unwrap_or(now + Duration::from_secs(1));
            let mut wait = wake.saturating_since(now).max(Duration::from_millis(1));
            if let Some(limit) = self.handshake_limit {
                let left = limit.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(self.stalled(Some(limit)).into());
                }
                wait = wait.min(left);
            }
            match tokio::time::timeout(wait, self.socket.recv_from(&mut self.buf)).await {
                Err(_) => conn.handle_timeout(self.now())?,
                Ok(r) => {
                    let (n, from) = r.context("socket")?;
                    if from == self.server {
                        self.heard = true;
                        let now = self.now();
                        conn.handle_datagram(now, &self.buf[..n])?;
                    }
                }
            }
        }
        conn.into_traffic()
            .map_err(|_| anyhow!("DTLS handshake with {} incomplete", self.server).into())
    }

    /// A full handshake as a CoAP resource: `PUT /dtls`, then `POST /dtls/<id>`, each
    /// Confirmable, retransmitted on CoAP's timers (RFC 7252 §4.2).
    async fn handshake_coap(
        &mut self,
        trust: PinnedServer,
        credentials: Credentials<'_>,
    ) -> Result<Session, HandshakeFailure> {
        let config = sigil_dtls_coap::CarrierConfig {
            dtls: self.handshake_config(),
            ..Default::default()
        };
        let rng = &mut crate::os::OsRng;
        let server = self.server;
        let security = self.security.clone();
        // After the session resource exists, the client's POST carries its last flight:
        // a 4.03 to it is the server failing to authenticate that flight (the Finished).
        let failed = |e, sent_finished: bool| match e {
            sigil_dtls_coap::Error::Dtls(e) => HandshakeFailure::Dtls(e),
            sigil_dtls_coap::Error::Refused(code)
                if sent_finished && code == sigil_coap::Code::FORBIDDEN =>
            {
                HandshakeFailure::Other(anyhow!(
                    "DTLS handshake over CoAP with {server}: {code} to our Finished{}",
                    explain_refused_finished(&security)
                ))
            }
            e => HandshakeFailure::Other(anyhow!("DTLS handshake over CoAP with {server}: {e:?}")),
        };
        let mut hs = Box::new(
            sigil_dtls_coap::Client::connect(
                RustCrypto,
                trust,
                config,
                rng,
                credentials,
                self.now(),
            )
            .map_err(|e| failed(e, false))?,
        );
        let mut out = vec![0u8; sigil_dtls_coap::MAX_DATAGRAM];
        let started = Instant::now();
        loop {
            while let Some(n) = hs.poll_transmit(self.now(), &mut out) {
                self.socket.send_to(&out[..n], self.server).await?;
            }
            if hs.is_established() {
                break;
            }
            if let Some(e) = hs.failure() {
                return Err(failed(e, hs.session_id().is_some()));
            }
            // The session resource exists once the server took the hello: the POST that
            // follows carries the client's last flight, its Finished included.
            self.stall = match (self.heard, hs.session_id()) {
                (_, Some(_)) => Stall::SentFinished,
                (true, None) => Stall::Answered,
                (false, None) => Stall::Silent,
            };
            let now = self.now();
            let wake = hs.poll_timeout().unwrap_or(now + Duration::from_secs(1));
            let mut wait = wake.saturating_since(now).max(Duration::from_millis(1));
            if let Some(limit) = self.handshake_limit {
                let left = limit.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(self.stalled(Some(limit)).into());
                }
                wait = wait.min(left);
            }
            match tokio::time::timeout(wait, self.socket.recv_from(&mut self.buf)).await {
                Err(_) => {
                    let sent_finished = hs.session_id().is_some();
                    match hs.handle_timeout(self.now()) {
                        Err(sigil_dtls_coap::Error::Timeout) => {
                            return Err(self.stalled(None).into())
                        }
                        r => r.map_err(|e| failed(e, sent_finished))?,
                    }
                }
                Ok(r) => {
                    let (n, from) = r.context("socket")?;
                    if from == self.server {
                        self.heard = true;
                        let now = self.now();
                        let sent_finished = hs.session_id().is_some();
                        hs.handle_datagram(now, &self.buf[..n], rng)
                            .map_err(|e| failed(e, sent_finished))?;
                    }
                }
            }
        }
        hs.into_traffic()
            .map_err(|_| anyhow!("DTLS handshake over CoAP with {} incomplete", self.server).into())
    }

    async fn flush(&mut self, conn: &mut Session) -> Result<()> {
        let mut out = [0u8; MAX_DATAGRAM];
        while let Some(n) = conn.poll_transmit(self.now(), &mut out) {
            self.socket.send_to(&out[..n], self.server).await?;
        }
        Ok(())
    }

    fn drain(&mut self, conn: &mut Session) {
        let mut out = [0u8; MAX_DATAGRAM];
        while let Some(n) = conn.poll_app_data(&mut out) {
            self.inbox.push_back(out[..n].to_vec());
        }
    }

    /// Sends one CoAP message.
    pub async fn send(&mut self, message: &[u8]) -> Result<()> {
        if !self.security.is_secure() {
            self.socket.send_to(message, self.server).await?;
            return Ok(());
        }
        let mut conn = self
            .session
            .take()
            .ok_or_else(|| anyhow!("DTLS session lost"))?;
        if conn.core().reserved_left() == 0 {
            if let Err(e) = self.checkpoint(&mut conn) {
                self.session = Some(conn);
                return Err(e);
            }
        }
        let r = conn.send(message).map_err(|e| anyhow!("DTLS: {e}"));
        let f = self.flush(&mut conn).await;
        self.session = Some(conn);
        r.and(f)
    }

    /// The next CoAP message from the server. Cancel-safe: a message is either returned or
    /// kept for the next call.
    pub async fn recv(&mut self) -> Result<Vec<u8>> {
        loop {
            if let Some(m) = self.inbox.pop_front() {
                return Ok(m);
            }
            let (n, from) = self.socket.recv_from(&mut self.buf).await?;
            if from != self.server {
                continue;
            }
            if !self.security.is_secure() {
                return Ok(self.buf[..n].to_vec());
            }
            if !sigil_dtls_coap::is_dtls_record(&self.buf[..n]) {
                // A late copy of a handshake answer over CoAP: not for the session.
                continue;
            }
            let Some(mut conn) = self.session.take() else {
                bail!("DTLS session lost");
            };
            let now = self.now();
            let r = conn
                .handle_datagram(now, &self.buf[..n])
                .and_then(|_| conn.failure().map_or(Ok(()), Err));
            self.drain(&mut conn);
            if let Err(e) = r {
                // The session failed (e.g. the server sent a fatal alert): reconnecting is the
                // caller's decision.
                let mut out = [0u8; MAX_DATAGRAM];
                while let Some(n) = conn.poll_transmit(now, &mut out) {
                    let _ = self.socket.try_send_to(&out[..n], self.server);
                }
                let why = explain(&e, &self.security);
                bail!("DTLS session with {} ended: {e}{why}", self.server);
            }
            let mut out = [0u8; MAX_DATAGRAM];
            while let Some(n) = conn.poll_transmit(now, &mut out) {
                let _ = self.socket.try_send_to(&out[..n], self.server);
            }
            self.session = Some(conn);
        }
    }

    /// Ends the DTLS session with close_notify, so the server frees it at once; the kept
    /// association goes with it.
    pub async fn close(&mut self) {
        if let Some((path, _)) = &self.kept {
            let _ = std::fs::remove_file(path);
        }
        if let Some(mut conn) = self.session.take() {
            if conn.close().is_ok() {
                let _ = self.flush(&mut conn).await;
            }
        }
    }

    /// Waits up to `wait` for one message.
    pub async fn recv_timeout(&mut self, wait: Duration) -> Option<Vec<u8>> {
        tokio::time::timeout(wait, self.recv()).await.ok()?.ok()
    }
}

/// Replaces `path` with `bytes` so that a power cut leaves either the old or the new content:
/// a temporary file beside it, synced, renamed over it, and the directory synced.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    // Readable by its owner only: it holds session keys.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// The parts of a `coap://` or `coaps://` URI this tool uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerUri {
    pub addr: SocketAddr,
    pub secure: bool,
    /// The Uri-Path, without the leading `/` (empty for the root).
    pub path: String,
}

/// Parses `coap://host[:port][/path]`, `coaps://host[:port][/path]` (port 5683 / 5684), or a
/// bare `host:port`.
pub fn parse_uri(uri: &str) -> Result<ServerUri> {
    let (secure, rest) = if let Some(r) = uri.strip_prefix("coaps://") {
        (true, r)
    } else if let Some(r) = uri.strip_prefix("coap://") {
        (false, r)
    } else if uri.contains("://") {
        bail!("only coap:// and coaps:// URIs are supported: {uri}");
    } else {
        (false, uri)
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let default_port = if secure { 5684 } else { 5683 };
    let with_port = if authority.starts_with('[') {
        if authority.contains("]:") {
            authority.to_string()
        } else {
            format!("{authority}:{default_port}")
        }
    } else if authority.matches(':').count() == 1 {
        authority.to_string()
    } else {
        format!("{authority}:{default_port}")
    };
    use std::net::ToSocketAddrs;
    let addr = with_port
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {uri}"))?
        .next()
        .with_context(|| format!("no address for {uri}"))?;
    Ok(ServerUri {
        addr,
        secure,
        path: path.trim_end_matches('/').to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigil_testkit::pki;

    fn identity_of(der: &[u8]) -> Identity {
        let key = sigil_dtls::x509::parse(der).unwrap().key;
        Identity::of_key(&RustCrypto, &key, b"").unwrap()
    }

    /// A kept association is bound to the credentials it was made with: any change of mode,
    /// PSK, client key or chain, anchors or pinned server gives another binding.
    #[test]
    fn the_association_binding_changes_with_every_credential() {
        let psk = |id: &[u8], key: &[u8], ecdhe| Security::Psk {
            identity: id.to_vec(),
            key: key.to_vec(),
            ecdhe,
        };
        let cert = |chain: Vec<Vec<u8>>, anchors: Vec<Vec<u8>>, server| Security::Certificate {
            own: Some((chain, pki::secret(pki::SERVER_KEY))),
            anchors,
            server,
        };
        let a = Identity::from_bytes([1; 16]);
        let b = Identity::from_bytes([2; 16]);
        let all = [
            Security::None.binding(),
            psk(b"a", &[1; 16], false).binding(),
            psk(b"a", &[2; 16], false).binding(),
            psk(b"b", &[1; 16], false).binding(),
            psk(b"a", &[1; 16], true).binding(),
            Security::RawPublicKey {
                own: None,
                server: a,
            }
            .binding(),
            Security::RawPublicKey {
                own: None,
                server: b,
            }
            .binding(),
            cert(vec![pki::SERVER.to_vec()], vec![pki::ROOT.to_vec()], None).binding(),
            cert(vec![pki::ROOT.to_vec()], vec![pki::ROOT.to_vec()], None).binding(),
            cert(vec![pki::SERVER.to_vec()], vec![], None).binding(),
            cert(
                vec![pki::SERVER.to_vec()],
                vec![pki::ROOT.to_vec()],
                Some(a),
            )
            .binding(),
        ];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x, y);
            }
        }
        assert_eq!(
            psk(b"a", &[1; 16], false).binding(),
            psk(b"a", &[1; 16], false).binding()
        );
    }

    #[test]
    fn a_pinned_x509_server_must_be_the_one_the_certificate_names() {
        let anchors = vec![pki::ROOT.to_vec()];
        let chain = pki::server_chain();
        let now = crate::os::unix_now();
        // Chained to the anchor, no identity pinned: the CA alone decides.
        assert!(PinnedServer(None, anchors.clone(), Default::default())
            .certificate_chain(&chain, now)
            .is_ok());
        // The chain is checked at the time the handshake passes, not at the OS clock's.
        assert!(PinnedServer(None, anchors.clone(), Default::default())
            .certificate_chain(&chain, sigil_time::UnixTime::from_secs(0))
            .is_err());
        // Pinned to the server's identity: accepted.
        let server = identity_of(pki::SERVER);
        let key = PinnedServer(Some(server), anchors.clone(), Default::default())
            .certificate_chain(&chain, now)
            .unwrap();
        assert_eq!(Identity::of_key(&RustCrypto, &key, b"").unwrap(), server);
        // A device certified by the same CA cannot stand in for the pinned server.
        let device_chain = pki::client_chain();
        assert_eq!(
            PinnedServer(Some(server), anchors, Default::default())
                .certificate_chain(&device_chain, now)
                .unwrap_err(),
            sigil_dtls::Error::UntrustedKey
        );
    }

    #[test]
    fn a_one_shot_handshake_gives_up_within_its_limit() {
        let c = Config::default();
        // 1 + 2 + 4 s: two retransmissions end within 10 s, three (15 s) do not.
        assert_eq!(retransmissions_within(&c, Duration::from_secs(10)), 2);
        assert_eq!(retransmissions_within(&c, Duration::from_secs(16)), 3);
        assert_eq!(retransmissions_within(&c, Duration::from_millis(500)), 0);
        // Never more than configured: 1+2+4+8+16+32+60+60 s = 183 s.
        assert_eq!(retransmissions_within(&c, Duration::from_secs(3600)), 7);
    }

    #[test]
    fn uris() {
        let u = parse_uri("coaps://127.0.0.1").unwrap();
        assert_eq!((u.addr.port(), u.secure), (5684, true));
        let u = parse_uri("coap://127.0.0.1/rd-lookup/res").unwrap();
        assert_eq!(
            (u.addr.port(), u.secure, u.path.as_str()),
            (5683, false, "rd-lookup/res")
        );
        let u = parse_uri("coaps://[::1]:6000/").unwrap();
        assert_eq!((u.addr.port(), u.secure, u.path.as_str()), (6000, true, ""));
        assert_eq!(parse_uri("127.0.0.1:7").unwrap().addr.port(), 7);
        assert!(parse_uri("coap://[::1]").unwrap().addr.is_ipv6());
        assert!(parse_uri("http://x").is_err());
    }
}
