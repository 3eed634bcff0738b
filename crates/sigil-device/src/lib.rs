//! The Sigil sensor (RFC 8387 §7) as a sans-IO state machine.
//!
//! The caller owns the clock, the socket, storage and randomness. It feeds the device
//! datagrams ([`Device::handle_datagram`]) and time ([`Device::handle_timeout`]), asks it to
//! publish readings ([`Device::publish`]), and drains what to send ([`Device::poll_transmit`]),
//! when to wake up ([`Device::poll_timeout`]) and what happened ([`Device::poll_event`]).
//! Nothing here allocates: every buffer is a fixed-size field.
//!
//! Life of a device:
//! 1. [`Device::boot`] loads the key pair from storage or, on first boot, generates one from
//!    the caller's CSPRNG and stores it (§4). The identity is `I = h(P|O)`, or the kit-bound
//!    `Idev` when the device belongs to a group (§4.1).
//! 2. It registers with the Resource Directory: `POST /rd?ep=<I>&lt=..&sq=<n>&ss=<sig>` with a
//!    link-format payload carrying its public key (§7 step 1). `sq`/`ss` announce a fresh
//!    sequence number, signed together with a hash of the registration itself
//!    (`sigil_objects::resync`), which is how the broker resynchronises (§8.2) and why nobody
//!    else can change the registration. Its periodic refresh (`POST /rd/<N>`) is signed the
//!    same way, with a number of its own.
//! 3. It publishes signed readings to `/ps/<N>/<resource>`, where `/rd/<N>` is the location of
//!    its registration (§7 step 2). A Reset in answer to a Confirmable reading means the broker
//!    considers the number out of window: the device re-registers and publishes the reading
//!    again under a new number. A 4.04 (registration gone) or 4.15 (topic registered with
//!    another format) makes it register again in full and publish the same reading again,
//!    backing off if that repeats right after a fresh registration.
//! 4. Optionally, before it has been paired with anyone, it applies a pairing message
//!    ([`Device::apply_pairing`], §4.1): its trusted server, its group and its default
//!    subscriber, encrypted to its key, signed by the server, kept in storage, applied once.
//! 5. Serving its own readings as an ACE resource server, it trusts tokens signed by its
//!    trusted server's key and no other ([`ac::trusted_ac_key`]); [`serve`] answers the
//!    requests (token intake at `/authz-info`, the scope check, `/reading` and `/history`)
//!    and, with the `serve-dtls` feature, holds the DTLS peers on its port.
//!
//! A node with only a pre-shared key is a [`PskNode`] instead ([`psk`]): a provisioned random
//! identity, readings MACed under a key derived from the PSK (COSE_Mac0) or sent plain inside a
//! DTLS-PSK session, and no public-key code at all.
#![no_std]
#![forbid(unsafe_code)]

pub mod ac;
mod exchange;
mod machine;
pub mod pairing;
pub mod psk;
pub mod serve;
mod storage;

pub use ac::{trusted_ac_key, AcRefusal, AcSource};
pub use machine::{
    Device, DeviceConfig, DeviceError, DeviceStats, Event, PublishOutcome, Resource, MAX_DATAGRAM,
    MAX_GROUP_KEYS, MAX_OTHER_INFO,
};
pub use pairing::{PairingRefusal, PairingStorage};
pub use psk::{PskConfig, PskEvent, PskMode, PskNode, MAX_PSK_LEN, MIN_PSK_LEN};
pub use sigil_ace::{Pairing, PairingError};
pub use storage::{DeviceStorage, MemoryStorage};
