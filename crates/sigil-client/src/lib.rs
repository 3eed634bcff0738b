//! Sigil's client side, shared by the `sigil` command, the tests and the measurement tools.
//!
//! - [`transport`]: one socket to one server, plain (coap://) or inside a DTLS 1.2 session
//!   (coaps://, RFC 7252 §9) driven from the sans-IO `sigil-dtls` connection; [`Security`]
//!   names the credentials.
//! - [`coap`]: a CoAP client over a transport: Confirmable requests with retransmission
//!   (RFC 7252 §4.2), Block2 reassembly (RFC 7959), separate responses.
//! - [`app`]: the application of RFC 8387 §7: it looks sensors up in the Resource Directory,
//!   fetches their readings from the broker and verifies each one itself, against its own trust
//!   list. It trusts neither the directory nor the broker.
//! - [`follow`]: the application following readings as they are published: it observes
//!   every topic it may read (RFC 7641) and verifies each notification end to end.
//! - [`ace`]: access tokens: ask the access-control server's `/token`, post to a resource
//!   server's `/authz-info`, and open the session the token's PoP key names (RFC 9200, 9202).
//! - [`sensor_rs`]: a client of a sensor serving its own readings (an ACE resource server): a
//!   token to its `/authz-info`, a resource over a raw-public-key DTLS session, the reading
//!   verified end to end.
//! - [`pem`]: certificates and P-256 keys from PEM files (RFC 7468).
//! - [`os`]: the OS randomness and clock, read here and passed down.

pub mod ace;
pub mod app;
pub mod coap;
pub mod diagnose;
pub mod follow;
pub mod os;
pub mod pem;
pub mod sensor_rs;
pub mod transport;

pub use coap::{ClientResponse, CoapClient, RequestSpec};
pub use transport::{parse_uri, Carrier, Security, ServerUri, Transport};
