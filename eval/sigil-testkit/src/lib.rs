//! What Sigil's tests share. A dev-dependency only: the dependency-rule test
//! (`tests/dependency_rules.rs`) fails if a product crate links it.
//!
//! - [`rng`]: deterministic randomness ([`Seeded`], [`Fixed`], [`Counter`]). Never for keys
//!   that protect anything.
//! - [`dtls`]: a DTLS client and server in memory with virtual time, on a link with latency,
//!   seeded loss (drop, duplicate, delay) and an MTU, the server running the real stateless
//!   cookie exchange before it accepts ([`dtls::Pair`]).
//! - [`pki`]: the test PKI (root, intermediate, server and client certificates and keys, and
//!   the certificates that must be refused), generated with pyca/cryptography and kept as files.
//! - [`readings`]: signed readings in either wire form, with the key and identity that verify
//!   them.
//! - [`server`] (feature `server`, for sigil-server's tests): the server in memory on a
//!   virtual clock ([`server::Plain`]: the dispatcher and service over a fresh database;
//!   [`server::Secure`]: with the DTLS layer), DTLS clients ([`server::Client`]) exchanging
//!   datagrams with it ([`server::step`], [`server::run`]) and the signing sensor running the
//!   real `sigil-device` machine ([`server::sensor::Sensor`]).

pub mod dtls;
pub mod pki;
pub mod readings;
pub mod rng;
#[cfg(feature = "server")]
pub mod server;

pub use rng::{Counter, Fixed, Seeded};
