//! Signed readings (RFC 8387 §7): SenML records, signing with a key the caller holds, and
//! verifying end to end, as the application does.

use crate::device::reading_format;
use crate::ffi::{c_str, out, output, reference, required, status, CResult};
use crate::identity::{
    alg_value, algorithm, identity_in, public_key, sigil_key, SIGIL_SECRET_KEY_LEN,
};
use crate::status::sigil_status::{self, *};
use core::ffi::c_char;
use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey};
use sigil_identity::Identity;
use sigil_objects::cose::SeqField;
use sigil_objects::senml::{self, Record, Value};
use sigil_objects::{reading, Freshness, ReadingFormat, SignedReading};

/// Most records in one reading.
pub const SIGIL_MAX_RECORDS: usize = 8;
/// Longest record name or unit, in bytes.
pub const SIGIL_MAX_NAME: usize = 64;
/// Longest signed reading the library signs or verifies.
pub const SIGIL_MAX_READING: usize = 1024;
/// Longest SenML pack `sigil_reading_sign` takes.
pub const SIGIL_MAX_SENML: usize = 768;

/// One SenML record (RFC 8428 §4): a name, a unit and a number. `name` and `unit` are
/// NUL-terminated UTF-8 of at most `SIGIL_MAX_NAME` bytes, or NULL to leave them out.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sigil_record {
    pub name: *const c_char,
    pub unit: *const c_char,
    pub value: f64,
}

/// Reads `count` C records into `buf`.
pub(crate) unsafe fn records<'a>(
    recs: *const sigil_record,
    count: usize,
    buf: &'a mut [Record<'a>; SIGIL_MAX_RECORDS],
) -> CResult<&'a [Record<'a>]> {
    if recs.is_null() {
        return Err(SIGIL_ERR_NULL);
    }
    if count == 0 || count > SIGIL_MAX_RECORDS {
        return Err(SIGIL_ERR_BAD_LENGTH);
    }
    for (i, slot) in buf.iter_mut().take(count).enumerate() {
        // SAFETY: `recs` holds `count` records (the C contract) and `i < count`.
        let r = unsafe { &*recs.add(i) };
        *slot = Record {
            name: unsafe { c_str(r.name, SIGIL_MAX_NAME) }?,
            unit: unsafe { c_str(r.unit, SIGIL_MAX_NAME) }?,
            value: Some(Value::Number(r.value)),
            ..Record::default()
        };
    }
    Ok(&buf[..count])
}

/// Encodes `count` records (1 to `SIGIL_MAX_RECORDS`) as a SenML pack for `format` (a
/// `sigil_format`: SenML-CBOR for COSE, SenML-JSON for JWS) into `out` (`cap` bytes); its
/// length goes to `len`.
#[no_mangle]
pub unsafe extern "C" fn sigil_senml_encode(
    format: u32,
    recs: *const sigil_record,
    count: usize,
    out_buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> sigil_status {
    status((|| {
        let f = reading_format(format)?;
        let mut buf = [Record::default(); SIGIL_MAX_RECORDS];
        let recs = unsafe { records(recs, count, &mut buf) }?;
        let len = unsafe { out(len) }?;
        let out_buf = unsafe { output(out_buf, cap, 0) }?;
        let mut tmp = [0u8; SIGIL_MAX_SENML];
        let n = match f {
            ReadingFormat::Cose => senml::encode_cbor(recs, &mut tmp),
            ReadingFormat::Jws => senml::encode_json(recs, &mut tmp),
        }
        .map_err(|_| SIGIL_ERR_TOO_LARGE)?;
        if cap < n {
            return Err(SIGIL_ERR_SHORT_BUFFER);
        }
        // SAFETY: `out_buf` is non-NULL with `cap >= n` writable bytes.
        unsafe { core::ptr::copy_nonoverlapping(tmp.as_ptr(), out_buf.as_mut_ptr(), n) };
        *len = n;
        Ok(())
    })())
}

/// Freshness of a reading (RFC 8387 §8.2).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sigil_freshness {
    /// The full sequence number, reserved in storage before use.
    pub seq: u64,
    /// Send only this many low bits (1 to 32, COSE only); 0 sends it whole.
    pub lsb_bits: u8,
    /// Seconds since 1970 for the signed header, or negative to leave the time out.
    pub unix_time: i64,
}

unsafe fn secret_key(alg: u32, secret: *const u8, secret_len: usize) -> CResult<SecretKey> {
    let alg = algorithm(alg)?;
    let n = SIGIL_SECRET_KEY_LEN;
    Ok(SecretKey::from_bytes(alg, unsafe {
        required(secret, secret_len, n, n)
    }?)?)
}

/// The public key of secret key `secret` (`secret_len` = 32 bytes of algorithm `alg`) into
/// `out` (`cap` >= the key's length, `SIGIL_MAX_PUBLIC_KEY` always suffices); its length goes
/// to `len`.
#[no_mangle]
pub unsafe extern "C" fn sigil_key_public(
    alg: u32,
    secret: *const u8,
    secret_len: usize,
    out_buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> sigil_status {
    status((|| {
        let key = unsafe { secret_key(alg, secret, secret_len) }?;
        let len = unsafe { out(len) }?;
        let public = RustCrypto.public_key(&key)?;
        let bytes = public.as_bytes();
        unsafe { output(out_buf, cap, bytes.len()) }?.copy_from_slice(bytes);
        *len = bytes.len();
        Ok(())
    })())
}

/// Signs a SenML pack (`senml`, `senml_len` bytes, 1 to `SIGIL_MAX_SENML`; encoded for the
/// format) as a reading of `format` with secret key `secret` (32 bytes of algorithm `alg`),
/// key identifier `kid` (the signer's 16-byte identity) and `freshness`. The reading goes to
/// `out` (`cap` bytes) and its length to `len`; when `cap` is too small the status is
/// `SIGIL_ERR_SHORT_BUFFER` and `len` holds the length needed.
#[no_mangle]
pub unsafe extern "C" fn sigil_reading_sign(
    alg: u32,
    secret: *const u8,
    secret_len: usize,
    kid: *const u8,
    kid_len: usize,
    format: u32,
    freshness: *const sigil_freshness,
    senml: *const u8,
    senml_len: usize,
    out_buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> sigil_status {
    status((|| {
        let key = unsafe { secret_key(alg, secret, secret_len) }?;
        let kid = unsafe { identity_in(kid, kid_len) }?;
        let f = reading_format(format)?;
        let fr = unsafe { reference(freshness) }?;
        if fr.lsb_bits > 32 {
            return Err(SIGIL_ERR_BAD_ARGUMENT);
        }
        let senml = unsafe { required(senml, senml_len, 1, SIGIL_MAX_SENML) }?;
        let len = unsafe { out(len) }?;
        if out_buf.is_null() {
            return Err(SIGIL_ERR_NULL);
        }
        let freshness = Freshness {
            seq: fr.seq,
            lsb_bits: (fr.lsb_bits > 0).then_some(fr.lsb_bits),
            timestamp: u64::try_from(fr.unix_time).ok(),
        };
        let mut scratch = [0u8; SIGIL_MAX_SENML + 128];
        let mut signed = [0u8; SIGIL_MAX_READING];
        let n = reading::sign_reading(
            &RustCrypto,
            &key,
            &kid,
            f,
            &freshness,
            senml,
            &mut scratch,
            &mut signed,
        )
        .map_err(|e| match e {
            sigil_objects::ReadingError::LsbNotSupported
            | sigil_objects::ReadingError::SequenceMismatch => SIGIL_ERR_CONFIG,
            sigil_objects::ReadingError::Crypto(c) => c.into(),
            _ => SIGIL_ERR_TOO_LARGE,
        })?;
        *len = n;
        unsafe { output(out_buf, cap, n) }?.copy_from_slice(&signed[..n]);
        Ok(())
    })())
}

/// What a reading says about itself, from `sigil_reading_parse`. Nothing in it is verified.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sigil_reading_info {
    /// The signature algorithm (a `sigil_alg`).
    pub alg: u32,
    /// The key identifier: the signer's claimed identity.
    pub kid: [u8; 16],
    /// The sequence number: whole, or its `lsb_bits` low bits.
    pub seq: u64,
    /// 0 when `seq` is whole; else how many low bits it holds (the receiver reconstructs the
    /// full number, RFC 8387 §8.2).
    pub lsb_bits: u8,
    pub has_time: bool,
    /// Seconds since 1970 from the signed header, when `has_time`.
    pub unix_time: u64,
}

unsafe fn parse<'a>(format: u32, raw: *const u8, raw_len: usize) -> CResult<SignedReading<'a>> {
    let f = reading_format(format)?;
    let raw = unsafe { required(raw, raw_len, 1, SIGIL_MAX_READING) }?;
    Ok(SignedReading::parse(f, raw)?)
}

/// Parses a signed reading (`raw`, `raw_len` bytes, 1 to `SIGIL_MAX_READING`) of `format`
/// and fills `info` with its unverified header fields.
#[no_mangle]
pub unsafe extern "C" fn sigil_reading_parse(
    format: u32,
    raw: *const u8,
    raw_len: usize,
    info: *mut sigil_reading_info,
) -> sigil_status {
    status((|| {
        let r = unsafe { parse(format, raw, raw_len) }?;
        let info = unsafe { out(info) }?;
        let (seq, lsb_bits) = match r.seq {
            SeqField::Full(s) => (s, 0),
            SeqField::LowBits { k, bits } => (bits, k),
        };
        *info = sigil_reading_info {
            alg: alg_value(r.alg),
            kid: *r.kid.as_bytes(),
            seq,
            lsb_bits,
            has_time: r.timestamp.is_some(),
            unix_time: r.timestamp.unwrap_or(0),
        };
        Ok(())
    })())
}

/// Verifies a signed reading end to end (RFC 8387 §7 step 3): its `kid` must be `identity`
/// (16 bytes: the identity the verifier holds for `key`, e.g. from `sigil_identity_of_key`),
/// and its signature must verify under `key` over exactly the bytes received, with `full_seq`
/// the full sequence number (the one it carries, or the one the receiver reconstructed from
/// its low bits). `SIGIL_OK` only when all holds.
#[no_mangle]
pub unsafe extern "C" fn sigil_reading_verify(
    format: u32,
    raw: *const u8,
    raw_len: usize,
    key: *const sigil_key,
    identity: *const u8,
    identity_len: usize,
    full_seq: u64,
) -> sigil_status {
    status((|| {
        let r = unsafe { parse(format, raw, raw_len) }?;
        let key = unsafe { public_key(key) }?;
        let id: Identity = unsafe { identity_in(identity, identity_len) }?;
        let mut scratch = [0u8; SIGIL_MAX_READING + 64];
        let need = r.scratch_len();
        let scratch = scratch.get_mut(..need).ok_or(SIGIL_ERR_TOO_LARGE)?;
        Ok(r.verify_end_to_end(&RustCrypto, &key, &id, full_seq, scratch)?)
    })())
}
