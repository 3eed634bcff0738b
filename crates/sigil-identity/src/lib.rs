//! Secure identities (RFC 8387 §4, §4.1).
//!
//! A device's identity is a hash of its own public key and optional other information:
//! `I = h(P|O)`. A kit of devices has a group identity `Igrp = h(Pdev1|…|Pdevm)`, and each member
//! an identity bound to the kit, `Idev = h(Pdev|Potherdev1|…)`. The exact byte layout hashed here
//! is specified in `docs/identity.md`; every input is length-prefixed and domain-separated so no
//! two different (algorithm, key, O) inputs hash the same bytes.
//!
//! Around the identity, Sigil's own formats that carry or check one live here too, so the
//! device, the server and the application share one copy: [`announce`] (the key announcement
//! in link format), [`binding`] (key → identity, group membership) and [`list`] (the identity
//! list scanned from labels). Nothing here allocates.
#![no_std]
#![forbid(unsafe_code)]

pub mod announce;
mod b64;
pub mod binding;
pub mod list;

pub use announce::{AnnounceError, KeyAnnouncement};
pub use binding::{Binding, BindingError};
pub use list::{ListEntry, ListError, ListedKind};

use core::fmt;
use sigil_crypto::{CryptoProvider, PublicKey};

/// Identity length in bytes: SHA-256 truncated to 128 bits (32 hex digits, RFC 8387 §4).
pub const IDENTITY_LEN: usize = 16;
/// Hex digits in the short label printed on small devices ("the last few digits", §4).
pub const SHORT_LABEL_DIGITS: usize = 8;
/// Most keys in one group identity.
pub const MAX_GROUP_MEMBERS: usize = 64;

const DOMAIN_DEVICE: &[u8] = b"sigil-identity-v1\x00";
const DOMAIN_GROUP: &[u8] = b"sigil-group-v1\x00";
const DOMAIN_MEMBER: &[u8] = b"sigil-member-v1\x00";

/// A 128-bit secure identity.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity([u8; IDENTITY_LEN]);

/// Why a set of keys cannot form a group identity, or a string is not an identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentityError {
    /// A group needs at least one key and at most [`MAX_GROUP_MEMBERS`].
    GroupSize,
    /// The same key appears twice in a group.
    DuplicateKey,
    /// The text is not 32 hex digits (separators `-`, `:`, ` ` and `_` are ignored).
    NotHex,
    /// Other information longer than 2^32-1 bytes.
    OtherTooLong,
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::GroupSize => "a group identity needs between 1 and 64 public keys",
            Self::DuplicateKey => "the same public key appears twice in the group",
            Self::NotHex => "an identity is 32 hex digits (separators - : _ and spaces allowed)",
            Self::OtherTooLong => "other information is too long",
        })
    }
}

fn key_entry(key: &PublicKey) -> [u8; 2] {
    [key.algorithm().identity_tag(), key.as_bytes().len() as u8]
}

fn truncate(digest: [u8; 32]) -> Identity {
    let mut id = [0u8; IDENTITY_LEN];
    id.copy_from_slice(&digest[..IDENTITY_LEN]);
    Identity(id)
}

/// Canonical order of keys inside group and member hashes: by algorithm tag, then key bytes.
fn key_order(a: &PublicKey, b: &PublicKey) -> core::cmp::Ordering {
    (a.algorithm().identity_tag(), a.as_bytes()).cmp(&(b.algorithm().identity_tag(), b.as_bytes()))
}

/// Puts references to `keys` into canonical order inside a caller-provided array (no heap) and
/// rejects duplicates. `filler` only initialises unused slots.
fn sorted<'a>(
    keys: &'a [PublicKey],
    filler: &'a PublicKey,
    scratch: &mut [&'a PublicKey; MAX_GROUP_MEMBERS],
) -> Result<usize, IdentityError> {
    if keys.len() > MAX_GROUP_MEMBERS {
        return Err(IdentityError::GroupSize);
    }
    scratch.fill(filler);
    for (slot, k) in scratch.iter_mut().zip(keys) {
        *slot = k;
    }
    let list = &mut scratch[..keys.len()];
    list.sort_unstable_by(|a, b| key_order(a, b));
    if list.windows(2).any(|w| w[0] == w[1]) {
        return Err(IdentityError::DuplicateKey);
    }
    Ok(keys.len())
}

impl Identity {
    pub const fn from_bytes(bytes: [u8; IDENTITY_LEN]) -> Self {
        Self(bytes)
    }

    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        Some(Self(bytes.try_into().ok()?))
    }

    pub const fn as_bytes(&self) -> &[u8; IDENTITY_LEN] {
        &self.0
    }

    /// `I = h(P|O)` for one device (RFC 8387 §4). `other` is the optional other information
    /// (empty when none).
    pub fn of_key<C: CryptoProvider + ?Sized>(
        crypto: &C,
        key: &PublicKey,
        other: &[u8],
    ) -> Result<Self, IdentityError> {
        let olen = u32::try_from(other.len()).map_err(|_| IdentityError::OtherTooLong)?;
        Ok(truncate(crypto.sha256(&[
            DOMAIN_DEVICE,
            &key_entry(key),
            key.as_bytes(),
            &olen.to_be_bytes(),
            other,
        ])))
    }

    /// `Igrp = h(Pdev1|…|Pdevm)` (RFC 8387 §4.1). The keys are hashed in canonical order, so
    /// every member computes the same value from the same set.
    pub fn of_group<C: CryptoProvider + ?Sized>(
        crypto: &C,
        keys: &[PublicKey],
    ) -> Result<Self, IdentityError> {
        if keys.is_empty() {
            return Err(IdentityError::GroupSize);
        }
        let mut scratch = [&keys[0]; MAX_GROUP_MEMBERS];
        let n = sorted(keys, &keys[0], &mut scratch)?;
        Ok(Self::hash_keys(crypto, DOMAIN_GROUP, None, &scratch[..n]))
    }

    /// `Idev = h(Pdev|Potherdev1|…|Potherdevn)` (RFC 8387 §4.1): a member's identity bound to
    /// its kit. `others` excludes `own`; their order does not matter.
    pub fn of_member<C: CryptoProvider + ?Sized>(
        crypto: &C,
        own: &PublicKey,
        others: &[PublicKey],
    ) -> Result<Self, IdentityError> {
        if others.len() + 1 > MAX_GROUP_MEMBERS {
            return Err(IdentityError::GroupSize);
        }
        let mut scratch = [own; MAX_GROUP_MEMBERS];
        let n = sorted(others, own, &mut scratch)?;
        if scratch[..n].contains(&own) {
            return Err(IdentityError::DuplicateKey);
        }
        Ok(Self::hash_keys(
            crypto,
            DOMAIN_MEMBER,
            Some(own),
            &scratch[..n],
        ))
    }

    fn hash_keys<C: CryptoProvider + ?Sized>(
        crypto: &C,
        domain: &[u8],
        own: Option<&PublicKey>,
        list: &[&PublicKey],
    ) -> Self {
        // Streamed through a fixed-size part list: domain, [own entry, own key], count, then two
        // parts per key. Up to 64 keys, so at most 4 + 2*64 parts.
        let mut parts: [&[u8]; 4 + 2 * MAX_GROUP_MEMBERS] = [&[]; 4 + 2 * MAX_GROUP_MEMBERS];
        let mut entries = [[0u8; 2]; MAX_GROUP_MEMBERS + 1];
        let count = (list.len() as u16).to_be_bytes();
        let mut n = 0;
        parts[n] = domain;
        n += 1;
        if let Some(own) = own {
            entries[MAX_GROUP_MEMBERS] = key_entry(own);
        }
        for (i, k) in list.iter().enumerate() {
            entries[i] = key_entry(k);
        }
        if let Some(own) = own {
            parts[n] = &entries[MAX_GROUP_MEMBERS];
            parts[n + 1] = own.as_bytes();
            n += 2;
        }
        parts[n] = &count;
        n += 1;
        for (i, k) in list.iter().enumerate() {
            parts[n] = &entries[i];
            parts[n + 1] = k.as_bytes();
            n += 2;
        }
        truncate(crypto.sha256(&parts[..n]))
    }

    /// Parses 32 hex digits, ignoring the separators used on labels (`-`, `:`, `_`, space).
    pub fn parse(text: &str) -> Result<Self, IdentityError> {
        let mut out = [0u8; IDENTITY_LEN];
        let mut n = 0usize;
        for c in text.trim().bytes() {
            if matches!(c, b'-' | b':' | b'_' | b' ') {
                continue;
            }
            let v = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return Err(IdentityError::NotHex),
            };
            if n >= 2 * IDENTITY_LEN {
                return Err(IdentityError::NotHex);
            }
            out[n / 2] |= if n % 2 == 0 { v << 4 } else { v };
            n += 1;
        }
        if n != 2 * IDENTITY_LEN {
            return Err(IdentityError::NotHex);
        }
        Ok(Self(out))
    }

    /// The 32 lower-case hex digits as ASCII, with no separators (the form used on the wire,
    /// e.g. as a Resource Directory endpoint name).
    pub fn hex(&self) -> [u8; 2 * IDENTITY_LEN] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 2 * IDENTITY_LEN];
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = DIGITS[(b >> 4) as usize];
            out[2 * i + 1] = DIGITS[(b & 15) as usize];
        }
        out
    }

    /// The label form: eight groups of four upper-case hex digits, `1A2B-…`, for printing on a
    /// box or a device and reading back by eye or scanner.
    pub fn label(&self) -> Label {
        Label(*self)
    }

    /// The last [`SHORT_LABEL_DIGITS`] hex digits: what fits on a tiny device. It identifies a
    /// device among a few, but is not secure on its own (RFC 8387 §4); never authorize by it.
    pub fn short_label(&self) -> ShortLabel {
        ShortLabel(*self)
    }

    /// True when `text` (any label form, any case) ends with this identity's short label.
    pub fn matches_short(&self, text: &str) -> bool {
        let hex = self.hex();
        let mut digits = [0u8; 2 * IDENTITY_LEN];
        let mut n = 0;
        for c in text.bytes().filter(|c| c.is_ascii_hexdigit()) {
            if n == digits.len() {
                return false;
            }
            digits[n] = c.to_ascii_lowercase();
            n += 1;
        }
        n > 0 && hex.ends_with(&digits[..n])
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({self})")
    }
}

/// See [`Identity::label`].
#[derive(Clone, Copy, Debug)]
pub struct Label(Identity);

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0 .0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str("-")?;
            }
            write!(f, "{:02X}{:02X}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// See [`Identity::short_label`].
#[derive(Clone, Copy, Debug)]
pub struct ShortLabel(Identity);

impl fmt::Display for ShortLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tail = &self.0 .0[IDENTITY_LEN - SHORT_LABEL_DIGITS / 2..];
        for b in tail {
            write!(f, "{b:02X}")?;
        }
        Ok(())
    }
}

impl core::error::Error for IdentityError {}
