//! DTLS 1.2 (RFC 6347) for constrained devices, under the IoT profile of RFC 7925.
//!
//! The transport-layer alternative to Sigil's signed objects (RFC 8387 §8.3). `no_std`, no heap,
//! no I/O and no clock: every buffer is owned and sized by the caller, time comes in as
//! [`sigil_time::Instant`] (timers) and [`sigil_time::UnixTime`] (certificates), randomness as
//! a [`sigil_crypto::Rng`].
//!
//! Bottom up:
//! - [`codec`]: bounds-checked [`Reader`] and [`Writer`].
//! - [`wire`]: the registries (content types, handshake types, cipher suites, alerts,
//!   extensions, certificate types), open newtypes that keep unknown values, each citing its
//!   IANA table; [`extensions`]: hello extensions as typed values, decoded and encoded in one
//!   place.
//! - [`record`]: the record header (RFC 6347 §4.1), iteration over the records of a datagram,
//!   the anti-replay [`record::ReplayWindow`] of §4.1.2.6, and [`record::RecordFacts`], the
//!   checked view a server reads before it holds state for a peer.
//! - [`protection`]: AES-128-CCM-8 and AES-128-GCM record protection (RFC 6655, RFC 5288,
//!   RFC 9146 for records with a connection ID).
//! - [`handshake`]: handshake headers and fragments (§4.2.2), a bounded
//!   [`handshake::Reassembler`] (§4.2.3), and the hello messages (§4.2.1, RFC 5246 §7.4.1).
//! - [`keys`]: the TLS 1.2 PRF with SHA-256 (RFC 5246 §5), the PSK premaster secret
//!   (RFC 4279 §2), the extended master secret (RFC 7627), the key block and Finished.
//! - [`x509`], [`spki`]: certificates and keys as RFC 7925 profiles them.
//! - [`trust`]: what each side trusts ([`Trust`], [`PinnedIdentities`], [`X509Anchors`]) and
//!   authenticates with ([`Credentials`], [`ServerCredentials`]).
//! - [`cookie`]: the stateless cookie exchange ([`CookieKey`]).
//! - [`Connection`] (feature `record-carrier`): the sans-IO connection for both roles
//!   (`handle_datagram`, `handle_timeout`, `poll_transmit`, `poll_timeout`, `poll_app_data`,
//!   `send`), carrying flights as DTLS records with fragmentation and retransmission.
//! - [`whole::WholeFlights`]: the same handshake states driven by a carrier that exchanges
//!   whole flights (one payload each, no fragmentation, no timer: CoAP in sigil-dtls-coap);
//!   it ends in the same [`Traffic`].
//!
//! What the types enforce:
//! - The handshake is one struct per expected message ([`client`], [`server`],
//!   [`finished`]); a transition consumes the state and one message and checks the message
//!   type first, so an out-of-order message has no state to act on. A ChangeCipherSpec is
//!   acted on only in the state that expects it (the CVE-2017-7243 class).
//! - Three proofs with private constructors: [`cookie::CookieVerified`] (only
//!   [`CookieKey::respond`], after the HMAC cookie checked; [`Connection::accept`] takes it),
//!   [`trust::PeerVerified`] (only the checks of the ServerKeyExchange signature, the client's
//!   CertificateVerify, or the PSK identity against the trust store; with static ECDH or RSA
//!   key transport, the server's trusted key, whose possession its Finished then proves), and
//!   [`finished::FinishedVerified`] (only the Finished check). The established state
//!   ([`traffic::TrafficCore`], [`Traffic`]) cannot be built without the Finished proof, and
//!   holds the peer as a [`trust::Peer`] that carries the peer proof (or, on a server that did
//!   not ask for a client key, the marker that it did not): the peer's key and PSK identity are
//!   readable only from there.
//! - The established state holds no transcript, reassembly buffer, kept fragments or flight:
//!   [`Connection::into_traffic`] keeps only it.
//!
//! Every failure is one [`Error`] variant that names what the peer did, mapped to the alert
//! it warrants in one place ([`Error::alert`]).
#![no_std]
#![forbid(unsafe_code)]

#[cfg(not(any(feature = "psk", feature = "ecdhe-psk", feature = "ecdhe-ecdsa")))]
compile_error!("sigil-dtls needs at least one suite: features psk, ecdhe-psk or ecdhe-ecdsa");

pub mod client;
pub mod codec;
pub mod conn;
pub mod cookie;
pub mod extensions;
pub mod finished;
pub mod flight;
pub mod handshake;
pub mod keys;
pub mod protection;
pub mod record;
pub mod saved;
pub mod server;
pub mod spki;
pub mod traffic;
pub mod trust;
pub mod whole;
pub mod wire;
pub mod x509;

mod error;
pub use codec::{Reader, Writer};
#[cfg(feature = "record-carrier")]
pub use conn::Connection;
pub use conn::{Config, State};
pub use cookie::{refusal, CookieKey, CookieVerified, Stateless, COOKIE_LEN};
pub use error::Error;
pub use flight::{MAX_APP_DATA, MAX_DATAGRAM};
pub use saved::{SavedAssociation, SavedError};
pub use traffic::{Received, Session, Traffic, TrafficCore};
pub use trust::{
    Credentials, NoTrust, Peer, PeerVerified, PinnedIdentities, ServerCredentials, Trust,
    X509Anchors,
};
pub use whole::WholeFlights;
