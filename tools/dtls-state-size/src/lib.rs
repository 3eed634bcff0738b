//! The per-connection state of `sigil-dtls` for one feature set, as two statics whose sizes
//! are `size_of` of the handshaking connection and of the established one. Built for a
//! device target, the numbers are read from the object with `llvm-nm --print-size`:
//!
//! ```text
//! cargo build --release --manifest-path tools/dtls-state-size/Cargo.toml \
//!     --target thumbv7em-none-eabihf --features psk,ecdhe-ecdsa
//! llvm-nm --print-size --radix=d \
//!     tools/dtls-state-size/target/thumbv7em-none-eabihf/release/libdtls_state_size.rlib \
//!     | grep DTLS_
//! ```
//!
//! The crypto provider type is `()`: the providers are zero-sized, and the connection's
//! layout does not depend on which one it is.
#![no_std]

use core::mem::size_of;
use sigil_dtls::{Connection, NoTrust, Traffic};

const HANDSHAKING: usize = size_of::<Connection<(), NoTrust>>();
const ESTABLISHED: usize = size_of::<Traffic<()>>();

/// A connection during its handshake (and a `Connection` kept after it).
#[no_mangle]
#[used]
pub static DTLS_HANDSHAKING_BYTES: [u8; HANDSHAKING] = [0; HANDSHAKING];

/// The established state alone (`Connection::into_traffic`).
#[no_mangle]
#[used]
pub static DTLS_ESTABLISHED_BYTES: [u8; ESTABLISHED] = [0; ESTABLISHED];
