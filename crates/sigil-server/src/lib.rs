//! The Sigil server: a CoAP Resource Directory (RFC 9176) and publish-subscribe broker
//! (draft-ietf-core-coap-pubsub) that verify every signed reading before storing it
//! (RFC 8387 §7), on an embedded SQLite database.
//!
//! From the socket up (docs/architecture.md):
//! - [`socket`]: the thread that owns the sockets, binds, polls, reads batches and sends
//!   answers; the only reader of the OS clocks and randomness.
//! - [`secure`]: CoAP over DTLS: the capped handshake and session tables around
//!   `sigil-dtls`, and the authenticated identity each request carries ([`auth`]).
//! - [`coap`]: the message layer (RFC 7252, RFC 7959): parsing, deduplication, Block1/Block2,
//!   piggybacked and Non-confirmable responses; time passed in. [`echo`]: the amplification
//!   limit of coap:// answers and the Echo option (RFC 9175 §2.4).
//! - [`service`]: one database transaction per batch around the handlers.
//! - [`routes`]: the path table. [`rd`]: the Resource Directory. [`broker`]: topics,
//!   publication, latest reading and history.
//! - [`context`]: [`Request`], [`Reply`], the per-batch context, and [`Rejection`], each
//!   refusal's CoAP code and counter.
//! - [`answers`]: signed answers on coap:// for devices that require them, and their
//!   signature budget.
//! - [`budget`]: byte budgets per source host and in total for every table a peer can
//!   fill; [`log`]: rate-limited logging of what peers cause.
//! - [`verify`]: the budget of signature verifications done for datagrams nobody has
//!   authenticated yet (readings, registration statements, tokens).
//! - [`store`]: the database. [`stats`]: counters by reason. [`provision`]: identity lists.

pub mod answers;
pub mod auth;
pub mod authz;
pub mod broker;
pub mod budget;
pub mod channel;
pub mod coap;
pub mod context;
pub mod echo;
pub mod log;
pub mod provision;
pub mod rd;
pub mod routes;
pub mod secure;
pub mod service;
pub mod socket;
pub mod stats;
pub mod store;
pub mod verify;

pub use auth::{Credentials, PeerAuth};
pub use channel::{Channel, Endpoint, Inbound};
pub use coap::Dispatcher;
pub use context::{Operation, Rejection, Reply, Request, Response};
pub use secure::DtlsConfig;
pub use service::{Service, ServiceConfig};
pub use socket::{Clock, DtlsEndpoint, OsRng, Server, ServerConfig, ServerHandle, StartError};
pub use stats::Stats;
pub use store::{Store, StoreError};
