//! Identities (RFC 8387 §4, §4.1) and their label forms, and public keys as C sees them.

use crate::ffi::{input, output, reference, required, status, write_c_str, CResult};
use crate::status::sigil_status::{self, *};
use core::ffi::c_char;
use core::fmt::Write;
use sigil_crypto::{PublicKey, SignatureAlgorithm, MAX_PUBLIC_KEY_LEN};
use sigil_identity::{Identity, IDENTITY_LEN};

/// Length of an identity in bytes.
pub const SIGIL_IDENTITY_LEN: usize = 16;
/// Longest public key (an uncompressed P-256 point); Ed25519 keys are 32 bytes.
pub const SIGIL_MAX_PUBLIC_KEY: usize = 65;
/// Length of a secret key of either algorithm.
pub const SIGIL_SECRET_KEY_LEN: usize = 32;
/// Most keys in one kit (the member and its other members) the C API takes at once.
pub const SIGIL_MAX_GROUP: usize = 17;
/// Buffer sizes for [`sigil_identity_format`], each with its NUL.
pub const SIGIL_HEX_BUF: usize = 33;
// 32 digits, a dash between each group of four (7), the NUL.
pub const SIGIL_LABEL_BUF: usize = 40;
pub const SIGIL_SHORT_LABEL_BUF: usize = 9;

// The header's values are the cores' (cbindgen copies literals only).
const _: () = assert!(SIGIL_IDENTITY_LEN == IDENTITY_LEN);
const _: () = assert!(SIGIL_MAX_PUBLIC_KEY == MAX_PUBLIC_KEY_LEN);
const _: () = assert!(SIGIL_MAX_GROUP == ::sigil_device::MAX_GROUP_KEYS + 1);
const _: () = assert!(SIGIL_HEX_BUF == 2 * IDENTITY_LEN + 1);
const _: () = assert!(SIGIL_LABEL_BUF == 2 * IDENTITY_LEN + IDENTITY_LEN / 2);
const _: () = assert!(SIGIL_SHORT_LABEL_BUF == sigil_identity::SHORT_LABEL_DIGITS + 1);

/// Signature algorithms (the `alg` of a [`sigil_key`] and of a device configuration).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sigil_alg {
    /// Ed25519 (RFC 8032): 32-byte public keys.
    SIGIL_ALG_ED25519 = 1,
    /// ECDSA on P-256 with SHA-256: 65-byte uncompressed public keys (SEC 1 §2.3.3).
    SIGIL_ALG_ECDSA_P256 = 2,
}

/// The printed forms of an identity, for [`sigil_identity_format`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sigil_identity_form {
    /// 32 lower-case hex digits, the wire form (a Resource Directory endpoint name).
    /// Needs `SIGIL_HEX_BUF` bytes.
    SIGIL_FORM_HEX = 1,
    /// Eight groups of four upper-case hex digits, `1A2B-...`, printed on the device's label.
    /// Needs `SIGIL_LABEL_BUF` bytes.
    SIGIL_FORM_LABEL = 2,
    /// The last eight hex digits, for tiny displays; never authorise by it (RFC 8387 §4).
    /// Needs `SIGIL_SHORT_LABEL_BUF` bytes.
    SIGIL_FORM_SHORT = 3,
}

/// A public key: an algorithm (a `sigil_alg` value) and its bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sigil_key {
    pub alg: u32,
    pub bytes: *const u8,
    pub len: usize,
}

pub(crate) fn algorithm(alg: u32) -> CResult<SignatureAlgorithm> {
    match alg {
        1 => Ok(SignatureAlgorithm::Ed25519),
        2 => Ok(SignatureAlgorithm::EcdsaP256),
        _ => Err(SIGIL_ERR_BAD_ARGUMENT),
    }
}

pub(crate) fn alg_value(alg: SignatureAlgorithm) -> u32 {
    match alg {
        SignatureAlgorithm::Ed25519 => sigil_alg::SIGIL_ALG_ED25519 as u32,
        SignatureAlgorithm::EcdsaP256 => sigil_alg::SIGIL_ALG_ECDSA_P256 as u32,
    }
}

pub(crate) unsafe fn public_key(key: *const sigil_key) -> CResult<PublicKey> {
    let key = unsafe { reference(key) }?;
    let alg = algorithm(key.alg)?;
    let bytes = unsafe { input(key.bytes, key.len) }?;
    if bytes.is_empty() {
        return Err(SIGIL_ERR_BAD_LENGTH);
    }
    Ok(PublicKey::from_bytes(alg, bytes)?)
}

/// Up to [`SIGIL_MAX_GROUP`] - `reserve` keys from a C array, into `slots`.
pub(crate) unsafe fn public_keys(
    keys: *const sigil_key,
    count: usize,
    slots: &mut [PublicKey; SIGIL_MAX_GROUP],
    reserve: usize,
) -> CResult<&[PublicKey]> {
    if count > SIGIL_MAX_GROUP - reserve {
        return Err(SIGIL_ERR_BAD_LENGTH);
    }
    if count > 0 && keys.is_null() {
        return Err(SIGIL_ERR_NULL);
    }
    for (i, slot) in slots.iter_mut().take(count).enumerate() {
        // SAFETY: `keys` holds `count` entries (the C contract) and `i < count`.
        *slot = unsafe { public_key(keys.add(i)) }?;
    }
    Ok(&slots[..count])
}

pub(crate) unsafe fn identity_in(id: *const u8, len: usize) -> CResult<Identity> {
    let bytes = unsafe { required(id, len, IDENTITY_LEN, IDENTITY_LEN) }?;
    Identity::from_slice(bytes).ok_or(SIGIL_ERR_BAD_LENGTH)
}

pub(crate) unsafe fn identity_out(id: &Identity, out: *mut u8, out_len: usize) -> CResult {
    unsafe { output(out, out_len, IDENTITY_LEN) }?.copy_from_slice(id.as_bytes());
    Ok(())
}

fn placeholder() -> PublicKey {
    // Any valid key: slots are overwritten before use.
    PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &[0; 32]).unwrap_or_else(|_| unreachable!())
}

/// `I = h(P|O)` (RFC 8387 §4): the identity of `key` with the other information `other`
/// (`other_len` bytes; NULL with 0 for none). Writes 16 bytes to `out` (`out_len` >= 16).
#[no_mangle]
pub unsafe extern "C" fn sigil_identity_of_key(
    key: *const sigil_key,
    other: *const u8,
    other_len: usize,
    out: *mut u8,
    out_len: usize,
) -> sigil_status {
    status((|| {
        let key = unsafe { public_key(key) }?;
        let other = unsafe { input(other, other_len) }?;
        let _ = unsafe { output(out, out_len, IDENTITY_LEN) }?;
        let id = Identity::of_key(&sigil_crypto::RustCrypto, &key, other)?;
        unsafe { identity_out(&id, out, out_len) }
    })())
}

/// `Igrp = h(Pdev1|...|Pdevm)` (RFC 8387 §4.1): the identity of a kit of `count` keys
/// (1 to `SIGIL_MAX_GROUP`, any order). Writes 16 bytes to `out`.
#[no_mangle]
pub unsafe extern "C" fn sigil_identity_of_group(
    keys: *const sigil_key,
    count: usize,
    out: *mut u8,
    out_len: usize,
) -> sigil_status {
    status((|| {
        if count == 0 {
            return Err(SIGIL_ERR_BAD_LENGTH);
        }
        let mut slots = [placeholder(); SIGIL_MAX_GROUP];
        let keys = unsafe { public_keys(keys, count, &mut slots, 0) }?;
        let _ = unsafe { output(out, out_len, IDENTITY_LEN) }?;
        let id = Identity::of_group(&sigil_crypto::RustCrypto, keys)?;
        unsafe { identity_out(&id, out, out_len) }
    })())
}

/// `Idev = h(Pdev|Potherdev1|...|Potherdevn)` (RFC 8387 §4.1): the identity of `own` in a kit
/// whose other members are `others` (`count` keys, 0 to `SIGIL_MAX_GROUP` - 1). Writes 16
/// bytes to `out`.
#[no_mangle]
pub unsafe extern "C" fn sigil_identity_of_member(
    own: *const sigil_key,
    others: *const sigil_key,
    count: usize,
    out: *mut u8,
    out_len: usize,
) -> sigil_status {
    status((|| {
        let own = unsafe { public_key(own) }?;
        let mut slots = [placeholder(); SIGIL_MAX_GROUP];
        let others = unsafe { public_keys(others, count, &mut slots, 1) }?;
        let _ = unsafe { output(out, out_len, IDENTITY_LEN) }?;
        let id = Identity::of_member(&sigil_crypto::RustCrypto, &own, others)?;
        unsafe { identity_out(&id, out, out_len) }
    })())
}

struct Text<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Write for Text<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(core::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Writes identity `id` (`id_len` = 16 bytes) in `form` (a `sigil_identity_form` value) as a
/// NUL-terminated string into `out` (`out_len` bytes: `SIGIL_HEX_BUF`, `SIGIL_LABEL_BUF` or
/// `SIGIL_SHORT_LABEL_BUF`).
#[no_mangle]
pub unsafe extern "C" fn sigil_identity_format(
    id: *const u8,
    id_len: usize,
    form: u32,
    out: *mut c_char,
    out_len: usize,
) -> sigil_status {
    status((|| {
        let id = unsafe { identity_in(id, id_len) }?;
        let mut text = Text::<40> {
            buf: [0; 40],
            len: 0,
        };
        let written = match form {
            1 => {
                let hex = id.hex();
                text.buf[..hex.len()].copy_from_slice(&hex);
                text.len = hex.len();
                Ok(())
            }
            2 => write!(text, "{}", id.label()),
            3 => write!(text, "{}", id.short_label()),
            _ => return Err(SIGIL_ERR_BAD_ARGUMENT),
        };
        written.map_err(|_| SIGIL_ERR_ENCODING)?;
        unsafe { write_c_str(out, out_len, &text.buf[..text.len]) }
    })())
}

/// Parses an identity from `text` (`text_len` bytes, no NUL needed): 32 hex digits in any
/// case, with the label separators `-`, `:`, `_` and spaces ignored. Writes 16 bytes to `out`.
#[no_mangle]
pub unsafe extern "C" fn sigil_identity_parse(
    text: *const c_char,
    text_len: usize,
    out: *mut u8,
    out_len: usize,
) -> sigil_status {
    status((|| {
        let bytes = unsafe { required(text.cast::<u8>(), text_len, 1, usize::MAX) }?;
        let text = core::str::from_utf8(bytes).map_err(|_| SIGIL_ERR_BAD_ARGUMENT)?;
        let _ = unsafe { output(out, out_len, IDENTITY_LEN) }?;
        let id = Identity::parse(text)?;
        unsafe { identity_out(&id, out, out_len) }
    })())
}
