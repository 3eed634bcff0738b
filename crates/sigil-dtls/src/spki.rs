//! The few DER structures a raw-public-key handshake carries: SubjectPublicKeyInfo for P-256
//! and Ed25519 keys (RFC 7250 §3, RFC 5480, RFC 8410) and ECDSA signatures (RFC 5480 §2.2.3,
//! `ECDSA-Sig-Value`). Parsing is exact: only the canonical DER of these shapes is accepted.

use crate::{Error, Writer};
use sigil_crypto::{PublicKey, SignatureAlgorithm};

/// `SEQUENCE { SEQUENCE { id-ecPublicKey, secp256r1 }, BIT STRING (65 bytes) }` up to the point.
const P256_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// `SEQUENCE { SEQUENCE { id-Ed25519 }, BIT STRING (32 bytes) }` up to the key.
const ED25519_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// Writes the SubjectPublicKeyInfo of `key`.
pub fn write_spki(key: &PublicKey, w: &mut Writer<'_>) -> Result<(), Error> {
    match key.algorithm() {
        SignatureAlgorithm::EcdsaP256 => w.bytes(&P256_PREFIX)?,
        SignatureAlgorithm::Ed25519 => w.bytes(&ED25519_PREFIX)?,
    }
    w.bytes(key.as_bytes())
}

/// Length of `key`'s SubjectPublicKeyInfo.
pub fn spki_len(key: &PublicKey) -> usize {
    match key.algorithm() {
        SignatureAlgorithm::EcdsaP256 => P256_PREFIX.len() + 65,
        SignatureAlgorithm::Ed25519 => ED25519_PREFIX.len() + 32,
    }
}

/// Parses a SubjectPublicKeyInfo holding a P-256 (uncompressed) or Ed25519 key.
pub fn parse_spki(der: &[u8]) -> Result<PublicKey, Error> {
    let (alg, key) = if let Some(k) = der.strip_prefix(&P256_PREFIX[..]) {
        (SignatureAlgorithm::EcdsaP256, k)
    } else if let Some(k) = der.strip_prefix(&ED25519_PREFIX[..]) {
        (SignatureAlgorithm::Ed25519, k)
    } else {
        return Err(Error::UnsupportedKey);
    };
    PublicKey::from_bytes(alg, key).map_err(|_| Error::UnsupportedKey)
}

fn write_integer(v: &[u8; 32], w: &mut Writer<'_>) -> Result<(), Error> {
    let mut i = 0;
    while i < 31 && v[i] == 0 {
        i += 1;
    }
    let pad = v[i] & 0x80 != 0;
    w.u8(0x02)?;
    w.u8((32 - i + usize::from(pad)) as u8)?;
    if pad {
        w.u8(0)?;
    }
    w.bytes(&v[i..])
}

/// `r || s` (64 bytes) as DER `ECDSA-Sig-Value`.
pub fn ecdsa_to_der(sig: &[u8; 64], out: &mut [u8; 72]) -> Result<usize, Error> {
    let mut body = [0u8; 70];
    let mut w = Writer::new(&mut body);
    let (r, s) = sig.split_at(32);
    write_integer(r.try_into().map_err(|_| Error::BufferTooSmall)?, &mut w)?;
    write_integer(s.try_into().map_err(|_| Error::BufferTooSmall)?, &mut w)?;
    let n = w.len();
    out[0] = 0x30;
    out[1] = n as u8;
    out[2..2 + n].copy_from_slice(&body[..n]);
    Ok(2 + n)
}

fn read_integer<'a>(der: &'a [u8], out: &mut [u8]) -> Result<&'a [u8], Error> {
    let bad = Error::Decode("ECDSA signature");
    let (&tag, rest) = der.split_first().ok_or(bad)?;
    let (&len, rest) = rest.split_first().ok_or(bad)?;
    let len = usize::from(len);
    if tag != 0x02 || len == 0 || len > 33 || rest.len() < len {
        return Err(bad);
    }
    let (mut v, rest) = rest.split_at(len);
    if v[0] & 0x80 != 0 {
        return Err(bad); // negative
    }
    if v.len() > 1 && v[0] == 0 {
        if v[1] & 0x80 == 0 {
            return Err(bad); // not minimal
        }
        v = &v[1..];
    }
    if v.len() > 32 {
        return Err(bad);
    }
    out[32 - v.len()..].copy_from_slice(v);
    Ok(rest)
}

/// DER `ECDSA-Sig-Value` to `r || s`.
pub fn ecdsa_from_der(der: &[u8]) -> Result<[u8; 64], Error> {
    let bad = Error::Decode("ECDSA signature");
    if der.len() < 2 || der[0] != 0x30 || usize::from(der[1]) != der.len() - 2 || der[1] > 0x7f {
        return Err(bad);
    }
    let mut sig = [0u8; 64];
    let rest = read_integer(&der[2..], &mut sig[..32])?;
    let rest = read_integer(rest, &mut sig[32..])?;
    if !rest.is_empty() {
        return Err(bad);
    }
    Ok(sig)
}
