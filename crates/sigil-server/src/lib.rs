//! The Sigil server: a CoAP Resource Directory (RFC 9176) and publish-subscribe broker
//! (draft-ietf-core-coap-pubsub) that verify every signed reading before storing it
//! (RFC 8387 §7), on an embedded SQLite database.
//!
//! - [`store`]: the database: schema migrations, the authorized identity list, registrations,
//!   readings and freshness state.
//! - [`service`]: the request handling of the RD and the broker, synchronous and
//!   transport-free: CoAP requests in, CoAP responses out, one database transaction per batch.
//! - [`driver`]: the UDP driver: deduplication, block-wise transfer, batching; coap:// and
//!   coaps:// sockets served by one thread.
//! - [`secure`]: CoAP over DTLS: the capped handshake and session tables around
//!   `sigil-dtls`, and the authenticated identity each request carries.
//! - [`stats`]: counters of accepted and rejected messages by reason.

pub mod driver;
pub mod provision;
pub mod secure;
pub mod service;
pub mod stats;
pub mod store;

pub use driver::{Dispatcher, DtlsEndpoint, Endpoint, Inbound, Server, ServerConfig, ServerHandle};
pub use secure::DtlsConfig;
pub use stats::Stats;
pub use store::{Store, StoreError};

/// The operating system's CSPRNG: the driver's randomness, passed in to the layers below.
pub struct OsRng;

impl sigil_crypto::Rng for OsRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), sigil_crypto::CryptoError> {
        getrandom::fill(buf).map_err(|_| sigil_crypto::CryptoError::Rng)
    }
}

/// Seconds since the Unix epoch, the server's only wall-clock read.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
