//! A MACed reading, for nodes without public-key crypto: the SenML-CBOR pack a signed reading
//! carries, inside a COSE_Mac0 (RFC 9052 §6.2) under HMAC 256/64 (alg 4, RFC 9053 §3.1), with
//! the protected header of a signed reading (`kid`, `seq` or `seq-lsb`, optional `time`;
//! docs/wire-formats.md).
//!
//! The key is the node's *reading key*, derived from its pre-shared key with HKDF-SHA-256
//! ([`ReadingKey::derive`]). The server, which holds the PSK, derives it to verify; it may
//! disclose the reading key (never the PSK) to subscribers it authorizes, who then verify the
//! reading themselves. A MAC authenticates among the holders of the key: any of them could have
//! made it, so unlike a signature it does not prove to a third party which holder did.

use crate::cbor::Encoder;
use crate::cose::{self, CoseError, CoseMac0, SeqField};
use crate::reading::{Freshness, ReadingError};
use sigil_crypto::CryptoProvider;
use sigil_identity::Identity;
use subtle::ConstantTimeEq;

/// COSE `HMAC 256/64`: HMAC-SHA-256 cut to its first 64 bits (RFC 9053 §3.1, Table 7).
pub const ALG_HMAC_256_64: i64 = 4;
/// Length of an HMAC 256/64 tag.
pub const HMAC_256_64_TAG_LEN: usize = 8;
/// Length of an HMAC 256/64 key (RFC 9053 §3.1: the key is as long as the hash, 256 bits).
pub const MAC_KEY_LEN: usize = 32;
/// CoAP content-format 17, `application/cose; cose-type="cose-mac0"` (RFC 9052 §9.2).
pub const CONTENT_FORMAT_MAC0: u16 = 17;
/// The HKDF `info` prefix of a reading key; the node's 16-byte identity follows it. Distinct
/// from every other label derived from a PSK, so the reading key reveals nothing of the keys
/// a DTLS session with the same PSK uses.
pub const READING_KEY_INFO: &[u8] = b"sigil-reading-mac-key-v1\0";

/// The HMAC 256/64 tag of a COSE_Mac0: HMAC-SHA-256 with `key` over
/// `MAC_structure = ["MAC0", protected, external_aad, payload]` (RFC 9052 §6.3), cut to its
/// first 8 bytes. `protected` is the protected bucket's bytes as they are on the wire. The parts
/// go to the provider as they are, so neither payload nor protected bucket is copied.
pub fn hmac_256_64_tag<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &[u8; MAC_KEY_LEN],
    protected: &[u8],
    external_aad: &[u8],
    payload: &[u8],
) -> Result<[u8; HMAC_256_64_TAG_LEN], CoseError> {
    let mut head = [0u8; 16];
    let head_len = {
        let mut e = Encoder::new(&mut head);
        e.array(4)?.text("MAC0")?.bytes_header(protected.len())?;
        e.finish()
    };
    let mut aad_head = [0u8; 9];
    let aad_head_len = {
        let mut e = Encoder::new(&mut aad_head);
        e.bytes_header(external_aad.len())?;
        e.finish()
    };
    let mut payload_head = [0u8; 9];
    let payload_head_len = {
        let mut e = Encoder::new(&mut payload_head);
        e.bytes_header(payload.len())?;
        e.finish()
    };
    let full = crypto.hmac_sha256(
        key,
        &[
            &head[..head_len],
            protected,
            &aad_head[..aad_head_len],
            external_aad,
            &payload_head[..payload_head_len],
            payload,
        ],
    );
    let mut tag = [0u8; HMAC_256_64_TAG_LEN];
    tag.copy_from_slice(&full[..HMAC_256_64_TAG_LEN]);
    Ok(tag)
}

/// A node's reading key: the HMAC 256/64 key its MACed readings are made with. Secret: it is
/// not comparable (a tag is checked by [`MacedReading::verify`], in constant time), and it is
/// zeroed when dropped.
#[derive(Clone)]
pub struct ReadingKey([u8; MAC_KEY_LEN]);

impl ReadingKey {
    /// HKDF-SHA-256 (RFC 5869) with an empty salt over the node's pre-shared key, `info` =
    /// [`READING_KEY_INFO`] `||` the node's identity, one expand block of 32 bytes. The
    /// identity in `info` binds the key to the node: the same PSK provisioned under two
    /// identities gives two reading keys.
    pub fn derive<C: CryptoProvider + ?Sized>(crypto: &C, psk: &[u8], node: &Identity) -> Self {
        let mut prk = crypto.hmac_sha256(&[], &[psk]);
        let okm = crypto.hmac_sha256(&prk, &[READING_KEY_INFO, node.as_bytes(), &[1]]);
        prk.fill(0);
        Self(okm)
    }

    /// A key received from the server (disclosed to an authorized subscriber).
    pub const fn from_bytes(bytes: [u8; MAC_KEY_LEN]) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; MAC_KEY_LEN] {
        &self.0
    }
}

impl Drop for ReadingKey {
    fn drop(&mut self) {
        self.0.fill(0);
    }
}

impl core::fmt::Debug for ReadingKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ReadingKey(..)")
    }
}

/// COSE key type Symmetric (RFC 9053 §6.1).
pub const KTY_SYMMETRIC: i64 = 4;
/// Length of a reading key as a COSE_Key with a 16-byte kid (see [`encode_reading_key`]).
pub const READING_KEY_COSE_LEN: usize = 1 + 2 + 18 + 2 + 35;

/// Why a COSE_Key is not a node's reading key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadingKeyError {
    /// Not a CBOR map of integer labels, a label twice, an unknown label, or trailing bytes.
    Malformed,
    /// Not a symmetric HMAC 256/64 key of 32 bytes.
    WrongKind,
    /// The kid is not the node's identity.
    WrongKid,
}

impl core::fmt::Display for ReadingKeyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Malformed => "the reading key is not a well-formed COSE_Key",
            Self::WrongKind => "the COSE_Key is not a 32-byte HMAC 256/64 key",
            Self::WrongKid => "the reading key's kid is not the node's identity",
        })
    }
}

/// A node's reading key as a COSE_Key (RFC 9052 §7): `{1: 4 (Symmetric), 2: kid (the node's
/// identity), 3: 4 (HMAC 256/64), -1: k}`, as the server discloses it to an authorized reader
/// (`GET /keys/<identity>`, docs/wire-formats.md). Returns the length written.
pub fn encode_reading_key(
    key: &ReadingKey,
    node: &Identity,
    out: &mut [u8],
) -> Result<usize, crate::cbor::CborError> {
    let mut e = Encoder::new(out);
    e.map(4)?
        .i64(1)?
        .i64(KTY_SYMMETRIC)?
        .i64(2)?
        .bytes(node.as_bytes())?
        .i64(3)?
        .i64(ALG_HMAC_256_64)?
        .i64(-1)?
        .bytes(key.as_bytes())?;
    Ok(e.finish())
}

/// Parses a reading key's COSE_Key and checks it is `node`'s; any label other than the four
/// above is refused (nothing unknown is silently ignored in key material).
pub fn parse_reading_key(bytes: &[u8], node: &Identity) -> Result<ReadingKey, ReadingKeyError> {
    let m = ReadingKeyError::Malformed;
    let mut d = crate::cbor::Decoder::new(bytes);
    let n = d.map().map_err(|_| m)?;
    let (mut kty, mut kid, mut alg, mut k) = (None, None, None, None);
    for _ in 0..n {
        let slot_taken = match d.i64().map_err(|_| m)? {
            1 => kty.replace(d.i64().map_err(|_| m)?).is_some(),
            2 => kid.replace(d.bytes().map_err(|_| m)?).is_some(),
            3 => alg.replace(d.i64().map_err(|_| m)?).is_some(),
            -1 => k.replace(d.bytes().map_err(|_| m)?).is_some(),
            _ => return Err(m),
        };
        if slot_taken {
            return Err(m);
        }
    }
    d.finish().map_err(|_| m)?;
    if kty != Some(KTY_SYMMETRIC) || alg != Some(ALG_HMAC_256_64) {
        return Err(ReadingKeyError::WrongKind);
    }
    let k: [u8; MAC_KEY_LEN] = k
        .and_then(|k| k.try_into().ok())
        .ok_or(ReadingKeyError::WrongKind)?;
    if kid != Some(&node.as_bytes()[..]) {
        return Err(ReadingKeyError::WrongKid);
    }
    Ok(ReadingKey::from_bytes(k))
}

/// A parsed, not yet verified, MACed reading borrowing the received bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MacedReading<'a> {
    pub kid: Identity,
    pub seq: SeqField,
    pub timestamp: Option<u64>,
    pub raw: &'a [u8],
    mac0: CoseMac0<'a>,
}

impl<'a> MacedReading<'a> {
    /// Parses the COSE_Mac0 and the header fields Sigil needs: `alg` (HMAC 256/64), `kid` (a
    /// 16-byte identity) and the sequence number, all in the protected bucket. Nothing is
    /// trusted yet.
    pub fn parse(raw: &'a [u8]) -> Result<Self, ReadingError> {
        let c = CoseMac0::parse(raw)?;
        if c.headers.alg_unprotected || c.headers.alg != Some(ALG_HMAC_256_64) {
            return Err(ReadingError::UnknownAlgorithm);
        }
        let kid = c.headers.kid.ok_or(ReadingError::BadKid)?;
        if c.headers.kid_unprotected {
            return Err(ReadingError::UnprotectedKid);
        }
        let kid = Identity::from_slice(kid).ok_or(ReadingError::BadKid)?;
        let seq = c.headers.seq.ok_or(ReadingError::MissingSequence)?;
        Ok(Self {
            kid,
            seq,
            timestamp: c.headers.time,
            raw,
            mac0: c,
        })
    }

    /// The full sequence number when it was sent in full.
    pub fn full_seq(&self) -> Option<u64> {
        match self.seq {
            SeqField::Full(s) => Some(s),
            SeqField::LowBits { .. } => None,
        }
    }

    /// The SenML-CBOR pack, as received.
    pub fn senml(&self) -> &'a [u8] {
        self.mac0.payload
    }

    /// Checks the tag under `key` over exactly the received bytes, in constant time. `full_seq`
    /// is the complete sequence number (reconstructed by the receiver in low-bits mode, where it
    /// is bound through the external AAD as in a signed reading).
    pub fn verify<C: CryptoProvider + ?Sized>(
        &self,
        crypto: &C,
        key: &ReadingKey,
        full_seq: u64,
    ) -> Result<(), ReadingError> {
        let aad = full_seq.to_be_bytes();
        let aad: &[u8] = match self.seq {
            SeqField::Full(s) if s == full_seq => &[],
            SeqField::LowBits { k, bits } if full_seq & ((1u64 << k) - 1) == bits => &aad,
            _ => return Err(ReadingError::SequenceMismatch),
        };
        if self.mac0.tag.len() != HMAC_256_64_TAG_LEN {
            return Err(ReadingError::BadTag);
        }
        let expected = hmac_256_64_tag(
            crypto,
            key.as_bytes(),
            self.mac0.protected_raw,
            aad,
            self.mac0.payload,
        )?;
        if bool::from(expected[..].ct_eq(self.mac0.tag)) {
            Ok(())
        } else {
            Err(ReadingError::BadTag)
        }
    }
}

/// MACs a reading on the device: `senml` is the encoded SenML-CBOR pack, the tagged COSE_Mac0
/// goes to `out` (payload + about 50 bytes). No heap, no scratch: the MAC_structure is fed to
/// HMAC in parts.
pub fn mac_reading<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &ReadingKey,
    kid: &Identity,
    freshness: &Freshness,
    senml: &[u8],
    out: &mut [u8],
) -> Result<usize, ReadingError> {
    let (seq, aad_len) = match freshness.lsb_bits {
        None => (SeqField::Full(freshness.seq), 0),
        Some(k) if (1..=32).contains(&k) => (
            SeqField::LowBits {
                k,
                bits: freshness.seq & ((1u64 << k) - 1),
            },
            8,
        ),
        Some(_) => return Err(ReadingError::SequenceMismatch),
    };
    let aad = freshness.seq.to_be_bytes();
    let mut protected = [0u8; 64];
    let pn = cose::encode_protected(
        ALG_HMAC_256_64,
        kid.as_bytes(),
        seq,
        freshness.timestamp,
        &mut protected,
    )?;
    let tag = hmac_256_64_tag(
        crypto,
        key.as_bytes(),
        &protected[..pn],
        &aad[..aad_len],
        senml,
    )?;
    Ok(cose::encode_mac0(&protected[..pn], senml, &tag, out)?)
}

#[cfg(test)]
mod key_tests {
    use super::*;

    #[test]
    fn a_reading_key_round_trips_as_a_cose_key_and_nothing_else_passes() {
        let node = Identity::from_bytes([3; 16]);
        let key = ReadingKey::from_bytes([9; 32]);
        let mut out = [0u8; 96];
        let n = encode_reading_key(&key, &node, &mut out).unwrap();
        assert_eq!(n, READING_KEY_COSE_LEN);
        let back = parse_reading_key(&out[..n], &node).unwrap();
        assert_eq!(back.as_bytes(), key.as_bytes());
        assert_eq!(
            parse_reading_key(&out[..n], &Identity::from_bytes([4; 16])).unwrap_err(),
            ReadingKeyError::WrongKid
        );
        assert_eq!(
            parse_reading_key(&out[..n - 1], &node).unwrap_err(),
            ReadingKeyError::Malformed
        );
        let mut extra = out;
        extra[n] = 0;
        assert_eq!(
            parse_reading_key(&extra[..n + 1], &node).unwrap_err(),
            ReadingKeyError::Malformed
        );
        // Another kind of key: alg ES256 (-7) instead of HMAC 256/64.
        let mut e = Encoder::new(&mut out);
        e.map(4)
            .unwrap()
            .i64(1)
            .unwrap()
            .i64(4)
            .unwrap()
            .i64(2)
            .unwrap();
        e.bytes(node.as_bytes())
            .unwrap()
            .i64(3)
            .unwrap()
            .i64(-7)
            .unwrap();
        e.i64(-1).unwrap().bytes(&[9; 32]).unwrap();
        let n = e.finish();
        assert_eq!(
            parse_reading_key(&out[..n], &node).unwrap_err(),
            ReadingKeyError::WrongKind
        );
    }
}
