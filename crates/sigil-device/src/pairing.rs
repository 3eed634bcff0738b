//! Pairing (RFC 8387 §4.1): the device learns its trusted server, its group and its default
//! subscriber from one message of the server's, encrypted to the device's key and signed by
//! the server (`sigil_ace::pairing`), and applies it exactly once.
//!
//! "Exactly once" rests on one record in the device's storage, written in one write: before
//! the write returns the device is unpaired and the same message may be applied again (it was
//! applied zero times); after it, every pairing message is refused, the same one as
//! [`PairingRefusal::Replayed`] and any other as [`PairingRefusal::AlreadyPaired`], until a
//! factory reset erases the record. The first valid message a device without a configured
//! server sees is trusted (trust on first use, `docs/security.md`).

use crate::storage::DeviceStorage;
use core::fmt;
use sigil_ace::{Pairing, PairingError};
use sigil_crypto::{PublicKey, SignatureAlgorithm, MAX_PUBLIC_KEY_LEN};
use sigil_identity::{Identity, IDENTITY_LEN};

/// Storage that also keeps the device's pairing. `store_pairing` must be durable and atomic
/// when it returns: the old record or the new one, never a torn one.
pub trait PairingStorage: DeviceStorage {
    fn load_pairing(&mut self) -> Result<Option<Pairing>, Self::Error>;
    fn store_pairing(&mut self, pairing: &Pairing) -> Result<(), Self::Error>;
}

/// Why the device refused a pairing message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairingRefusal {
    /// The message itself was refused; the error says why.
    Invalid(PairingError),
    /// The device already applied this very message (same server, same serial).
    Replayed { serial: u64 },
    /// The device is paired already (with `server`, under `serial`); only a factory reset
    /// lets it be paired again.
    AlreadyPaired { server: Identity, serial: u64 },
    /// The pairing could not be read or written; nothing was applied.
    Storage,
}

impl fmt::Display for PairingRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(e) => write!(f, "{e}"),
            Self::Replayed { serial } => {
                write!(f, "pairing message {serial} was applied already (replay)")
            }
            Self::AlreadyPaired { server, serial } => write!(
                f,
                "already paired with server {server} (pairing {serial}); a factory reset unpairs"
            ),
            Self::Storage => f.write_str("pairing storage failed; nothing was applied"),
        }
    }
}

impl core::error::Error for PairingRefusal {}

/// Length of a stored pairing record.
pub const PAIRING_RECORD_LEN: usize =
    1 + 8 + 3 * IDENTITY_LEN + 2 + MAX_PUBLIC_KEY_LEN + 1 + sigil_ace::pairing::MAX_SERVER_URI_LEN;
const RECORD_VERSION: u8 = 1;

/// The fixed-size record a byte-oriented store keeps: version (1), serial (8, big-endian),
/// server, group and subscriber identities (16 each), the server key's algorithm tag and
/// length (1 each) and bytes (65, zero-padded), the URI's length (1) and bytes (64).
pub fn encode_record(p: &Pairing) -> [u8; PAIRING_RECORD_LEN] {
    let mut r = [0u8; PAIRING_RECORD_LEN];
    r[0] = RECORD_VERSION;
    r[1..9].copy_from_slice(&p.serial.to_be_bytes());
    let mut at = 9;
    for id in [&p.server, &p.group, &p.subscriber] {
        r[at..at + IDENTITY_LEN].copy_from_slice(id.as_bytes());
        at += IDENTITY_LEN;
    }
    let key = p.server_key.as_bytes();
    r[at] = p.server_key.algorithm().identity_tag();
    r[at + 1] = key.len() as u8;
    r[at + 2..at + 2 + key.len()].copy_from_slice(key);
    at += 2 + MAX_PUBLIC_KEY_LEN;
    let uri = p.server_uri().unwrap_or("").as_bytes();
    r[at] = uri.len() as u8;
    r[at + 1..at + 1 + uri.len()].copy_from_slice(uri);
    r
}

/// Reads a record written by [`encode_record`]; `None` if it is not one.
pub fn decode_record(r: &[u8]) -> Option<Pairing> {
    let r: &[u8; PAIRING_RECORD_LEN] = r.try_into().ok()?;
    if r[0] != RECORD_VERSION {
        return None;
    }
    let serial = u64::from_be_bytes(r[1..9].try_into().ok()?);
    let id = |at: usize| Identity::from_slice(&r[at..at + IDENTITY_LEN]);
    let (server, group, subscriber) = (id(9)?, id(9 + IDENTITY_LEN)?, id(9 + 2 * IDENTITY_LEN)?);
    let at = 9 + 3 * IDENTITY_LEN;
    let alg = SignatureAlgorithm::from_identity_tag(r[at])?;
    let key = r.get(at + 2..at + 2 + usize::from(r[at + 1]))?;
    let server_key = PublicKey::from_bytes(alg, key).ok()?;
    let at = at + 2 + MAX_PUBLIC_KEY_LEN;
    let uri = r.get(at + 1..at + 1 + usize::from(r[at]))?;
    let uri = core::str::from_utf8(uri).ok()?;
    Pairing::new(
        serial,
        server,
        server_key,
        group,
        subscriber,
        (!uri.is_empty()).then_some(uri),
    )
}
