//! The server's DTLS settings.

use sigil_crypto::SecretKey;
use sigil_dtls::Config;
use std::net::SocketAddr;
use std::time::Duration;

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
    ///
    /// [`HANDSHAKE_BYTES`]: super::HANDSHAKE_BYTES
    pub max_handshakes: usize,
    /// Most handshakes in progress from one source host (IPv4 address or IPv6 /64, whatever
    /// the ports): that host's share of the handshake table.
    pub max_handshakes_per_host: usize,
    /// Most established sessions (the session table's budget is this many times
    /// [`SESSION_BYTES`]; the resumption cache's, this many times [`RESUMPTION_BYTES`]).
    ///
    /// [`SESSION_BYTES`]: super::SESSION_BYTES
    /// [`RESUMPTION_BYTES`]: super::RESUMPTION_BYTES
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
    ///
    /// [`RATE_HOSTS`]: super::RATE_HOSTS
    pub handshake_burst_per_host: u32,
    /// Sustained handshake starts per second per source host (see above).
    pub handshakes_per_host_per_sec: u32,
    /// A handshake older than this is stale (evictable).
    pub handshake_timeout: Duration,
    /// Above half full, a half-open handshake without progress for this long is dropped
    /// first (on either carrier; never less than the carrier's shield, [`HANDSHAKE_SHIELD`] or
    /// [`CARRIER_HANDSHAKE_SHIELD`]), unless its peer is known: under pressure a handshake
    /// must move on within this long, so slots an attacker holds without progress give way.
    ///
    /// [`HANDSHAKE_SHIELD`]: super::HANDSHAKE_SHIELD
    /// [`CARRIER_HANDSHAKE_SHIELD`]: super::CARRIER_HANDSHAKE_SHIELD
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
