//! The connection as callers drive it (sans-IO, after quinn-proto): datagrams in through
//! [`Connection::handle_datagram`], time through [`Connection::handle_timeout`]; datagrams out
//! through [`Connection::poll_transmit`], application data through
//! [`Connection::poll_app_data`], the next wake-up from [`Connection::poll_timeout`].
//!
//! Underneath it is one of two things: a handshake (one state struct per expected message,
//! [`crate::client`] and [`crate::server`], sharing the transcript and flight buffers of
//! `HsIo`), or the established [`TrafficCore`](crate::TrafficCore), which holds none of those.
//! Record intake (epochs, replay windows, connection IDs, record protection) is here.
//!
//! The handshake states are carrier-independent: a transition builds its flight in `HsIo` and
//! marks it ready ([`Cx::send_flight`]); the carrier sends it. Two carriers exist:
//! [`Connection`] (feature `record-carrier`: flights cut into datagrams, fragment reassembly,
//! messages kept ahead, the retransmission timer; RFC 6347 §4.2) and
//! [`crate::whole::WholeFlights`] (each flight travels whole as one payload over a carrier
//! that brings reliability and fragmentation itself, such as CoAP).

#[cfg(feature = "record-carrier")]
mod connection;
mod hs;
mod kx;
#[cfg(feature = "record-carrier")]
mod record_carrier;
mod record_layer;

#[cfg(feature = "record-carrier")]
pub use connection::Connection;
pub(crate) use hs::{next_seq, Cx, Hs, HsIo, Next};
pub(crate) use kx::{aead_of, kx_of, Kx, OwnChain};
pub(crate) use record_layer::{read_alert, Epoch1, RecordLayer};

use crate::Error;
use core::time::Duration;
use sigil_time::UnixTime;

/// Timing and size parameters.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Initial retransmission timeout (RFC 6347 §4.2.4.1 suggests 1 s; RFC 7925 §11 allows
    /// more for constrained links, e.g. the seed's 5 s).
    pub initial_timeout: Duration,
    /// Largest timeout after doubling (RFC 6347: 60 s).
    pub max_timeout: Duration,
    /// Give up after this many retransmissions of a flight.
    pub max_retransmissions: u32,
    /// Path MTU available to DTLS records (datagram payload size): handshake messages are
    /// fragmented to fit it, except the ClientHello, which a stateless server must see whole.
    pub pmtu: usize,
    /// An ECDHE-ECDSA client offers TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 instead of the
    /// CCM-8 suite (for comparison: 8 more bytes per record). Servers accept either.
    #[cfg(feature = "gcm")]
    pub gcm: bool,
    /// Static ECDH (PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8, for comparison): a client with a
    /// raw public key offers it instead of ECDHE-ECDSA (and instead of GCM), a server with a
    /// P-256 key accepts it besides its other suites. It gives up forward secrecy: whoever
    /// later learns the server's key decrypts every session recorded with it
    /// (docs/security.md). Negotiated only when both sides set it.
    #[cfg(feature = "static-ecdh")]
    pub danger_static_ecdh: bool,
    /// RSA key transport (TLS_RSA_WITH_AES_128_CCM_8, the seed's suite, for comparison): a
    /// client with RSA certificates offers it instead of ECDHE-RSA, a server with an RSA key
    /// accepts it besides its other suites. It gives up forward secrecy: whoever later learns
    /// the server's RSA key decrypts every session recorded with it (docs/security.md).
    /// Negotiated only when both sides set it.
    #[cfg(feature = "rsa-kx")]
    pub danger_rsa_key_transport: bool,
    /// A client offers the connection_id extension (RFC 9146) with an empty ID of its own:
    /// the server's ID then goes into every protected record the client sends, so the
    /// server keeps the session when the client's address changes.
    pub connection_id: bool,
    /// A client's Unix time for its handshake, given by the caller when it connects: the
    /// server's certificate chain is checked at it ([`crate::Trust::certificate_chain`]; the
    /// library reads no clock). Left at zero, every chain is refused as not yet valid. A
    /// server takes the time of each ClientHello from [`crate::ServerCredentials::now`].
    pub now: UnixTime,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            initial_timeout: Duration::from_secs(1),
            max_timeout: Duration::from_secs(60),
            max_retransmissions: 7,
            pmtu: 1_152,
            #[cfg(feature = "gcm")]
            gcm: false,
            #[cfg(feature = "static-ecdh")]
            danger_static_ecdh: false,
            #[cfg(feature = "rsa-kx")]
            danger_rsa_key_transport: false,
            connection_id: false,
            now: UnixTime::from_secs(0),
        }
    }
}

/// Where a connection is: the name of its current state, for callers and diagnostics (the
/// state's data lives in the state structs, not here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Client: sent a ClientHello, expects HelloVerifyRequest or ServerHello.
    ExpectHelloVerifyOrServerHello,
    /// Client (certificates or raw public keys): expects the server's Certificate.
    ExpectServerCertificate,
    /// Client (ECDHE): expects the ServerKeyExchange.
    ExpectServerKeyExchange,
    /// Client: expects CertificateRequest, ServerKeyExchange (PSK identity hint) or
    /// ServerHelloDone.
    ExpectServerHelloDone,
    /// Server (mutual authentication): expects the client's Certificate.
    ExpectClientCertificate,
    /// Server: expects the client's ClientKeyExchange.
    ExpectClientKeyExchange,
    /// Server (mutual authentication): expects the client's CertificateVerify.
    ExpectCertificateVerify,
    /// Either: expects the peer's ChangeCipherSpec.
    ExpectChangeCipherSpec,
    /// Either: expects the peer's Finished (epoch 1).
    ExpectFinished,
    /// The handshake is complete: application data flows.
    Established,
    /// A fatal error or close_notify: nothing more is accepted or sent (but the alert).
    Failed(Error),
}
