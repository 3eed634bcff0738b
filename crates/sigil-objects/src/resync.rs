//! The signed resync statement (RFC 8387 §8.2): at registration a device announces its current
//! sequence number (`sq`) with its signature (`ss`) over
//! `"sigil-resync-v1" || I (16 bytes) || sq (8 bytes, big-endian)`, so the broker can move the
//! identity's high-water mark forward. Layout in `docs/wire-formats.md`.

use sigil_crypto::{CryptoError, CryptoProvider, PublicKey, SecretKey, Signature};
use sigil_identity::{Identity, IDENTITY_LEN};

/// The statement's domain separation prefix.
pub const RESYNC_CONTEXT: &[u8; 15] = b"sigil-resync-v1";
/// Length of the signed statement.
pub const RESYNC_LEN: usize = RESYNC_CONTEXT.len() + IDENTITY_LEN + 8;

/// The bytes a device signs to announce `seq` as its current sequence number.
pub fn resync_statement(identity: &Identity, seq: u64) -> [u8; RESYNC_LEN] {
    let mut m = [0u8; RESYNC_LEN];
    m[..RESYNC_CONTEXT.len()].copy_from_slice(RESYNC_CONTEXT);
    m[RESYNC_CONTEXT.len()..RESYNC_CONTEXT.len() + IDENTITY_LEN]
        .copy_from_slice(identity.as_bytes());
    m[RESYNC_CONTEXT.len() + IDENTITY_LEN..].copy_from_slice(&seq.to_be_bytes());
    m
}

/// Signs the statement for `identity` and `seq` (the device side).
pub fn sign_resync<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &SecretKey,
    identity: &Identity,
    seq: u64,
) -> Result<Signature, CryptoError> {
    crypto.sign(key, &resync_statement(identity, seq))
}

/// Checks a received `ss` for `identity` and `sq` under the registered key (the broker side).
pub fn verify_resync<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &PublicKey,
    identity: &Identity,
    seq: u64,
    signature: &[u8],
) -> Result<(), CryptoError> {
    crypto.verify(key, &resync_statement(identity, seq), signature)
}
