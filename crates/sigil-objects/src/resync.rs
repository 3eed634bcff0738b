//! The signed registration statement: RFC 8387 §8.2 resynchronisation bound to the RFC 9176
//! operation it authorises. A device announces a fresh sequence number `sq` with its
//! signature `ss` over
//! `"sigil-rd-v1" || I (16 bytes) || sq (8 bytes, big-endian) || SHA-256(operation)`,
//! where the operation digest covers what the request changes (see [`Operation`]), so a
//! captured statement cannot be replayed with other links, another lifetime or for another
//! operation. The directory accepts each `sq` once (it must be above the identity's
//! high-water mark) and then moves the mark to it. Layout in `docs/wire-formats.md`.

use sigil_crypto::{CryptoError, CryptoProvider, PublicKey, SecretKey, Signature};
use sigil_identity::{Identity, IDENTITY_LEN};

/// The statement's domain separation prefix.
pub const STATEMENT_CONTEXT: &[u8; 11] = b"sigil-rd-v1";
/// Length of the signed statement.
pub const STATEMENT_LEN: usize = STATEMENT_CONTEXT.len() + IDENTITY_LEN + 8 + 32;

/// Which RFC 9176 interface a statement authorises (the first byte of the operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum OperationKind {
    /// `POST /rd` (§5).
    Register = 1,
    /// `POST /rd/N` (§5.3.1).
    Update = 2,
    /// `DELETE /rd/N` (§5.3.2).
    Remove = 3,
}

/// What a registration request changes, as the statement binds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operation<'a> {
    pub kind: OperationKind,
    /// `lt` as sent, `None` when absent.
    pub lifetime: Option<u32>,
    /// `base` as sent, `None` when absent.
    pub base: Option<&'a str>,
    /// The request's payload (the link-format document; empty for update and removal).
    pub payload: &'a [u8],
}

impl Operation<'_> {
    /// `SHA-256(kind (1) || lt (4, big-endian; 0 when absent) || base present (1: 0 or 1) ||
    /// base length (2, big-endian) || base || payload)`. An `lt` of 0 is never valid
    /// (RFC 9176 §5), so 0 marks its absence unambiguously. Hashed in parts: the payload
    /// is not copied. A base longer than 65535 bytes (a Uri-Query holds at most 255) has no
    /// digest.
    pub fn digest<C: CryptoProvider + ?Sized>(&self, crypto: &C) -> Option<[u8; 32]> {
        let base = self.base.unwrap_or("").as_bytes();
        let base_len = u16::try_from(base.len()).ok()?;
        Some(crypto.sha256(&[
            &[self.kind as u8],
            &self.lifetime.unwrap_or(0).to_be_bytes(),
            &[u8::from(self.base.is_some())],
            &base_len.to_be_bytes(),
            base,
            self.payload,
        ]))
    }
}

/// The bytes a device signs to authorise the operation with digest `digest` under `seq`.
pub fn statement(identity: &Identity, seq: u64, digest: &[u8; 32]) -> [u8; STATEMENT_LEN] {
    let mut m = [0u8; STATEMENT_LEN];
    let (ctx, rest) = m.split_at_mut(STATEMENT_CONTEXT.len());
    ctx.copy_from_slice(STATEMENT_CONTEXT);
    let (id, rest) = rest.split_at_mut(IDENTITY_LEN);
    id.copy_from_slice(identity.as_bytes());
    let (sq, d) = rest.split_at_mut(8);
    sq.copy_from_slice(&seq.to_be_bytes());
    d.copy_from_slice(digest);
    m
}

/// Signs the statement (the device side).
pub fn sign_statement<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &SecretKey,
    identity: &Identity,
    seq: u64,
    digest: &[u8; 32],
) -> Result<Signature, CryptoError> {
    crypto.sign(key, &statement(identity, seq, digest))
}

/// Checks a received `ss` for `identity`, `sq` and the request's operation digest under the
/// registered (or announced) key (the directory side).
pub fn verify_statement<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &PublicKey,
    identity: &Identity,
    seq: u64,
    digest: &[u8; 32],
    signature: &[u8],
) -> Result<(), CryptoError> {
    crypto.verify(key, &statement(identity, seq, digest), signature)
}
