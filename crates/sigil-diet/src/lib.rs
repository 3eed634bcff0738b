//! The IoT-CryptoDiet node-to-node scheme (`iot-cryptodiet.md` §4-5.3), sans-IO and `no_std`:
//! node software for devices that talk to their neighbours without a server, and the seed's
//! six-operation API.
//!
//! - [`ops`]: `ECC_GenKeyPair`, `ECDH_GenSharedKey`, `AES_Encrypt`, `AES_Decrypt`,
//!   `ECDSA_sign`, `ECDSA_verify` on P-256, as byte-array functions a C wrapper maps one to one.
//! - [`Node`]: a bounded neighbour table (`N` entries, no allocator) running the seed's three
//!   phases per neighbour: handshake (signed hellos carrying the ECDH and ECDSA public keys,
//!   retransmitted until the neighbour's arrives), shared key (ECDH + HKDF, one key per
//!   direction) and secure communication (AES-128-CCM-8, then ECDSA over the result, with a
//!   sequence window per direction).
//! - [`wire`]: the hello and data messages as checked views.
//!
//! Where the seed's choices are now known to be weak, this version keeps the shape and the
//! costs but takes the modern choice (docs/security.md, "The CryptoDiet scheme"):
//! - the raw ECDH output is never a key: HKDF-SHA-256 (RFC 5869) derives the keys, salted with
//!   both ECDH public keys, with both nodes' epochs in `info`;
//! - AES-128-CCM-8 (authenticated) replaces the seed's bare AES;
//! - freshness comes from a sequence number checked against a 64-message window, not from
//!   remembering random numbers R1; restarts are covered by the epoch;
//! - a hello is signed, and its signing key must be one the caller trusts (for Sigil: it hashes
//!   to a provisioned identity, RFC 8387 §4), binding the ECDH key to the identity; the seed
//!   trusted whatever key arrived;
//! - one neighbour per signing key, and an address proves it is live before anything but a
//!   challenge goes to it: a hello carries a fresh nonce, and only a signed hello echoing the
//!   nonce sent to that address establishes keys there, moves a neighbour there, or re-keys;
//!   a recorded hello replayed from anywhere changes nothing. Challenges to unproven addresses
//!   have a per-address, per-key and total budget.
#![no_std]
#![forbid(unsafe_code)]

pub mod node;
pub mod ops;
pub mod wire;

pub use node::{Config, Node, NodeKeys, Phase, Received, Transmit};
pub use wire::{DATA_OVERHEAD, HELLO_LEN};

use sigil_crypto::CryptoError;

/// Why a datagram or a call was refused. Each has its own counter in [`Counters`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Wrong length, type byte, flags or key encoding.
    Malformed,
    /// The hello's signing key is not trusted for its sender (an unknown node).
    Untrusted,
    /// Our own hello came back.
    Reflected,
    /// A signature does not verify (a hello or a message was altered or forged).
    BadSignature,
    /// The ciphertext does not authenticate (altered, or sealed under other keys).
    BadTag,
    /// A message from, or for, a neighbour without keys.
    NoSession,
    /// The sequence number was accepted already, or is too old for the window.
    Replay,
    /// A hello of an earlier epoch than the one held for its key (a replayed hello).
    StaleHello,
    /// The neighbour table is full, or the hello came from the address of an established
    /// neighbour with another key (an address is never taken from one in a run).
    TableFull,
    /// A hello that proved nothing, over the budget checked before its signature: one
    /// verification per address and per known key each hello interval, a newcomer's key's
    /// challenges held, and a total rate ([`Config`](node::Config)).
    Budget,
    /// The output buffer is too small.
    BufferTooSmall,
    /// The send counter is exhausted (2^32 messages): restart under a new epoch.
    Exhausted,
    Crypto(CryptoError),
}

impl From<CryptoError> for Error {
    fn from(e: CryptoError) -> Self {
        match e {
            CryptoError::BadSignature => Error::BadSignature,
            CryptoError::BadTag => Error::BadTag,
            e => Error::Crypto(e),
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Malformed => "malformed message",
            Self::Untrusted => "hello from an untrusted key",
            Self::Reflected => "our own hello came back",
            Self::BadSignature => "signature does not verify",
            Self::BadTag => "ciphertext does not authenticate",
            Self::NoSession => "no keys with this neighbour",
            Self::Replay => "replayed or too old",
            Self::StaleHello => "hello of an earlier epoch",
            Self::TableFull => "neighbour table full",
            Self::Budget => "hello over the challenge budget",
            Self::BufferTooSmall => "buffer too small",
            Self::Exhausted => "sequence numbers exhausted",
            Self::Crypto(e) => return write!(f, "crypto: {e}"),
        })
    }
}

/// What a node sent, accepted and refused, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub hellos_sent: u64,
    pub hellos_accepted: u64,
    pub messages_sent: u64,
    pub messages_accepted: u64,
    pub malformed: u64,
    pub untrusted: u64,
    pub reflected: u64,
    pub bad_signature: u64,
    pub bad_tag: u64,
    pub no_session: u64,
    pub replayed: u64,
    pub stale_hellos: u64,
    pub table_full: u64,
    /// Hellos refused before verification for the challenge budget ([`Error::Budget`]).
    pub over_budget: u64,
    pub other: u64,
    /// Verified hellos that proved nothing yet (no echo of our challenge): answered with a
    /// challenge, nothing else changed.
    pub challenged: u64,
    /// Challenges sent to addresses that have not proved themselves (a newcomer's, or a known
    /// key's claimed new address); each is one hello.
    pub challenges_sent: u64,
    /// Neighbours that proved they moved to a new address (keys and window kept).
    pub moved: u64,
}

impl Counters {
    fn record(&mut self, r: &Result<Received, Error>) {
        let c = match r {
            Ok(Received::Hello { .. }) => &mut self.hellos_accepted,
            Ok(Received::Message { .. }) => &mut self.messages_accepted,
            Ok(Received::Challenged) => &mut self.challenged,
            Ok(Received::Moved { .. }) => {
                self.hellos_accepted += 1;
                &mut self.moved
            }
            Err(Error::Malformed) => &mut self.malformed,
            Err(Error::Untrusted) => &mut self.untrusted,
            Err(Error::Reflected) => &mut self.reflected,
            Err(Error::BadSignature) => &mut self.bad_signature,
            Err(Error::BadTag) => &mut self.bad_tag,
            Err(Error::NoSession) => &mut self.no_session,
            Err(Error::Replay) => &mut self.replayed,
            Err(Error::StaleHello) => &mut self.stale_hellos,
            Err(Error::TableFull) => &mut self.table_full,
            Err(Error::Budget) => &mut self.over_budget,
            Err(_) => &mut self.other,
        };
        *c += 1;
    }

    /// Datagrams refused, for any reason.
    pub fn refused(&self) -> u64 {
        self.malformed
            + self.untrusted
            + self.reflected
            + self.bad_signature
            + self.bad_tag
            + self.no_session
            + self.replayed
            + self.stale_hellos
            + self.table_full
            + self.over_budget
            + self.other
    }
}

/// The receive side's sequence window: the highest number accepted and a bitmap of the 64
/// below it (the shape of RFC 6347 §4.1.2.6). Nothing is accepted twice.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplayWindow {
    highest: Option<u32>,
    bits: u64,
}

impl ReplayWindow {
    /// The highest sequence number accepted so far.
    pub fn highest(&self) -> Option<u32> {
        self.highest
    }

    /// Not seen, and not older than the window.
    pub fn is_fresh(&self, seq: u32) -> bool {
        match self.highest {
            None => true,
            Some(h) if seq > h => true,
            Some(h) => h - seq < 64 && self.bits & (1 << (h - seq)) == 0,
        }
    }

    /// Marks `seq` seen (after it authenticated).
    pub fn accept(&mut self, seq: u32) {
        match self.highest {
            Some(h) if seq <= h => {
                if h - seq < 64 {
                    self.bits |= 1 << (h - seq)
                }
            }
            Some(h) => {
                let shift = seq - h;
                self.bits = if shift >= 64 { 0 } else { self.bits << shift } | 1;
                self.highest = Some(seq);
            }
            None => {
                self.highest = Some(seq);
                self.bits = 1;
            }
        }
    }
}
