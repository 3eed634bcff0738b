//! Sigil's data objects (RFC 8387 §7): sensor readings as SenML packs (RFC 8428), signed as
//! COSE_Sign1 (RFC 9052, the default) or as a JWS in compact serialization (RFC 7515), and, for
//! nodes without public-key crypto, MACed as COSE_Mac0 under a key derived from their PSK.
//!
//! Everything a device needs to build and sign a reading works without a heap, in buffers the
//! caller owns. Verification takes the exact bytes received and checks the signature over them:
//! nothing is re-encoded before checking (as coset does for protected headers).
//!
//! Layout of the headers Sigil puts in the signed part is in `docs/wire-formats.md`.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod answer;
pub mod cbor;
pub mod cose;
pub mod json;
pub mod jws;
pub mod mac;
pub mod reading;
pub mod resync;
pub mod senml;

pub use mac::{MacedReading, ReadingKey};
pub use reading::{Freshness, ReadingError, ReadingFormat, SignedReading};
