//! The confirmation claim (RFC 8747 §3.1): the proof-of-possession key a client must show.
//!
//! Read and written: a COSE_Key (RFC 9052 §7) that is Symmetric (kty 4: kid, k), EC2 on P-256
//! (kty 2, crv 1: x, y) or OKP Ed25519 (kty 1, crv 6: x), under cnf label 1; or only a key
//! identifier, under cnf label 3. An encrypted COSE_Key (cnf label 2) is refused.

use crate::error::{Malformed, TokenError};
use sigil_crypto::{PublicKey, SignatureAlgorithm};
use sigil_objects::cbor::{Decoder, Encoder, Item};

/// Longest key identifier read or written.
pub const MAX_KID_LEN: usize = 32;
/// Symmetric PoP keys this crate reads: 16 (AES-128, the DTLS PSK of RFC 9202) to 32 bytes.
pub const SYMMETRIC_KEY_LENS: core::ops::RangeInclusive<usize> = 16..=32;

const CNF_COSE_KEY: i64 = 1;
const CNF_ENCRYPTED_COSE_KEY: i64 = 2;
const CNF_KID: i64 = 3;

const KTY: i64 = 1;
const KID: i64 = 2;
const ALG: i64 = 3;
const CRV_OR_K: i64 = -1;
const X: i64 = -2;
const Y: i64 = -3;

const KTY_OKP: i64 = 1;
const KTY_EC2: i64 = 2;
const KTY_SYMMETRIC: i64 = 4;
const CRV_P256: i64 = 1;
const CRV_ED25519: i64 = 6;

/// A proof-of-possession key as the token carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confirmation<'a> {
    /// A symmetric key (the client's DTLS PSK, RFC 9202 §3.3); only inside an encrypted token.
    Symmetric { kid: &'a [u8], key: &'a [u8] },
    /// The client's public key (raw public key in DTLS, RFC 9202 §3.2).
    PublicKey {
        kid: Option<&'a [u8]>,
        key: PublicKey,
    },
    /// Only the identifier of a key the resource server already has.
    KeyId(&'a [u8]),
}

impl Confirmation<'_> {
    pub(crate) fn is_symmetric(&self) -> bool {
        matches!(self, Self::Symmetric { .. })
    }

    pub(crate) fn encode(&self, e: &mut Encoder<'_>) -> Result<(), TokenError> {
        e.map(1)?;
        match *self {
            Self::KeyId(kid) => {
                check_kid(kid)?;
                e.i64(CNF_KID)?.bytes(kid)?;
            }
            Self::Symmetric { kid, key } => {
                check_kid(kid)?;
                if !SYMMETRIC_KEY_LENS.contains(&key.len()) {
                    return Err(Malformed::Cnf("symmetric key length").into());
                }
                // Deterministic order (RFC 8949 §4.2.1): 1, 2, then -1.
                e.i64(CNF_COSE_KEY)?.map(3)?;
                e.i64(KTY)?.i64(KTY_SYMMETRIC)?;
                e.i64(KID)?.bytes(kid)?;
                e.i64(CRV_OR_K)?.bytes(key)?;
            }
            Self::PublicKey { kid, key } => {
                if let Some(kid) = kid {
                    check_kid(kid)?;
                }
                let bytes = key.as_bytes();
                let (kty, crv, n) = match key.algorithm() {
                    SignatureAlgorithm::EcdsaP256 => (KTY_EC2, CRV_P256, 4),
                    SignatureAlgorithm::Ed25519 => (KTY_OKP, CRV_ED25519, 3),
                };
                e.i64(CNF_COSE_KEY)?.map(n + usize::from(kid.is_some()))?;
                e.i64(KTY)?.i64(kty)?;
                if let Some(kid) = kid {
                    e.i64(KID)?.bytes(kid)?;
                }
                e.i64(CRV_OR_K)?.i64(crv)?;
                match key.algorithm() {
                    SignatureAlgorithm::EcdsaP256 => {
                        e.i64(X)?.bytes(&bytes[1..33])?;
                        e.i64(Y)?.bytes(&bytes[33..65])?;
                    }
                    SignatureAlgorithm::Ed25519 => {
                        e.i64(X)?.bytes(bytes)?;
                    }
                }
            }
        }
        Ok(())
    }

    pub(crate) fn parse<'a>(d: &mut Decoder<'a>) -> Result<Confirmation<'a>, TokenError> {
        let n = d.map().map_err(|_| Malformed::Cnf("not a map"))?;
        if n != 1 {
            return Err(Malformed::Cnf("not exactly one confirmation method").into());
        }
        match d.i64().map_err(|_| Malformed::Cnf("method label"))? {
            CNF_KID => {
                let kid = d.bytes().map_err(|_| Malformed::Cnf("kid is not bytes"))?;
                check_kid(kid)?;
                Ok(Confirmation::KeyId(kid))
            }
            CNF_COSE_KEY => parse_cose_key(d),
            CNF_ENCRYPTED_COSE_KEY => {
                Err(Malformed::Cnf("encrypted COSE_Key not supported").into())
            }
            _ => Err(Malformed::Cnf("unknown confirmation method").into()),
        }
    }
}

fn check_kid(kid: &[u8]) -> Result<(), TokenError> {
    if kid.is_empty() || kid.len() > MAX_KID_LEN {
        return Err(Malformed::Cnf("kid length").into());
    }
    Ok(())
}

/// Most parameters read from one COSE_Key.
const MAX_KEY_PARAMS: usize = 8;

fn parse_cose_key<'a>(d: &mut Decoder<'a>) -> Result<Confirmation<'a>, TokenError> {
    let n = d
        .map()
        .map_err(|_| Malformed::Cnf("COSE_Key is not a map"))?;
    if n > MAX_KEY_PARAMS {
        return Err(Malformed::Cnf("COSE_Key has too many parameters").into());
    }
    let mut kty = None;
    let mut kid = None;
    let mut minus1: Option<Item<'a>> = None;
    let mut x = None;
    let mut y = None;
    let mut seen: u8 = 0;
    for _ in 0..n {
        let label = d.i64().map_err(|_| Malformed::Cnf("COSE_Key label"))?;
        let bit = match label {
            KTY => 1,
            KID => 2,
            ALG => 4,
            CRV_OR_K => 8,
            X => 16,
            Y => 32,
            _ => 0,
        };
        if seen & bit != 0 {
            return Err(Malformed::Cnf("COSE_Key parameter repeated").into());
        }
        seen |= bit;
        match label {
            KTY => kty = Some(d.i64().map_err(|_| Malformed::Cnf("kty"))?),
            KID => kid = Some(d.bytes().map_err(|_| Malformed::Cnf("kid is not bytes"))?),
            CRV_OR_K => match d.item()? {
                it @ (Item::Bytes(_) | Item::Unsigned(_) | Item::Negative(_)) => minus1 = Some(it),
                _ => return Err(Malformed::Cnf("crv or k has the wrong type").into()),
            },
            X => x = Some(d.bytes().map_err(|_| Malformed::Cnf("x is not bytes"))?),
            Y => y = Some(d.bytes().map_err(|_| Malformed::Cnf("y is not bytes"))?),
            // alg and unknown parameters carry nothing this crate uses.
            _ => d.skip()?,
        }
    }
    if let Some(kid) = kid {
        check_kid(kid)?;
    }
    let missing = |what| TokenError::from(Malformed::Cnf(what));
    match kty.ok_or(missing("kty missing"))? {
        KTY_SYMMETRIC => {
            let Some(Item::Bytes(k)) = minus1 else {
                return Err(missing("symmetric k missing"));
            };
            if !SYMMETRIC_KEY_LENS.contains(&k.len()) {
                return Err(missing("symmetric key length"));
            }
            Ok(Confirmation::Symmetric {
                kid: kid.ok_or(missing("symmetric key without kid"))?,
                key: k,
            })
        }
        KTY_EC2 => {
            if minus1 != Some(Item::Unsigned(CRV_P256 as u64)) {
                return Err(missing("EC2 curve is not P-256"));
            }
            let (Some(x), Some(y)) = (x, y) else {
                return Err(missing("EC2 x or y missing"));
            };
            if x.len() != 32 || y.len() != 32 {
                return Err(missing("EC2 coordinate length"));
            }
            let mut point = [0u8; 65];
            point[0] = 0x04;
            point[1..33].copy_from_slice(x);
            point[33..].copy_from_slice(y);
            let key = PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &point)
                .map_err(|_| missing("EC2 key"))?;
            Ok(Confirmation::PublicKey { kid, key })
        }
        KTY_OKP => {
            if minus1 != Some(Item::Unsigned(CRV_ED25519 as u64)) {
                return Err(missing("OKP curve is not Ed25519"));
            }
            let x = x.ok_or(missing("OKP x missing"))?;
            let key = PublicKey::from_bytes(SignatureAlgorithm::Ed25519, x)
                .map_err(|_| missing("OKP key length"))?;
            Ok(Confirmation::PublicKey { kid, key })
        }
        _ => Err(missing("unsupported kty")),
    }
}
