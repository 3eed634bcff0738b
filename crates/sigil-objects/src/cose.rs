//! COSE_Sign1 (RFC 9052 §4.2, §4.4) and COSE_Mac0 (§6.2, §6.3) with Sigil's protected header.
//!
//! The protected header of a Sigil reading (docs/wire-formats.md) is the CBOR map
//! `{1: alg, 4: kid, -65537: seq}` (or `-65539: [k, low bits]` in place of `seq`), with the
//! optional `-65538: timestamp`. Labels below -65536 are private use (RFC 9052 §11.1).
//! [`CoseSign1::parse`] keeps the protected bucket's original bytes; verification rebuilds the
//! Sig_structure around exactly those bytes.

use crate::cbor::{CborError, Decoder, Encoder, Item};
use core::fmt;

/// CBOR tag of COSE_Sign1 (RFC 9052 §2).
pub const TAG_SIGN1: u64 = 18;
/// CBOR tag of COSE_Mac0 (RFC 9052 §2).
pub const TAG_MAC0: u64 = 17;

/// Header labels: IANA "COSE Header Parameters" and Sigil's private-use labels.
pub mod header {
    pub const ALG: i64 = 1;
    pub const CRIT: i64 = 2;
    pub const CONTENT_TYPE: i64 = 3;
    pub const KID: i64 = 4;
    /// Sigil: the full sequence number (RFC 8387 §8.2), unsigned integer.
    pub const SIGIL_SEQ: i64 = -65537;
    /// Sigil: creation time, seconds since the Unix epoch, unsigned integer.
    pub const SIGIL_TIME: i64 = -65538;
    /// Sigil: `[k, low]`, the k least-significant bits of the sequence number; the full number
    /// is then bound through the external AAD (8 bytes, big-endian).
    pub const SIGIL_SEQ_LSB: i64 = -65539;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoseError {
    Cbor(CborError),
    /// Not a 4-element array, or tagged with a tag other than 18.
    NotSign1,
    /// Not a 4-element array, or tagged with a tag other than 17.
    NotMac0,
    /// A header parameter has the wrong type.
    HeaderType(&'static str),
    /// A label appears twice, or in both buckets (RFC 9052 §3).
    DuplicateLabel,
    /// A `crit` header lists parameters (Sigil understands none beyond the registry basics).
    CriticalHeader,
    /// The payload is nil (detached content is not used for readings).
    DetachedPayload,
    /// Output buffer too small.
    BufferTooSmall,
}

impl From<CborError> for CoseError {
    fn from(e: CborError) -> Self {
        match e {
            CborError::BufferTooSmall => CoseError::BufferTooSmall,
            e => CoseError::Cbor(e),
        }
    }
}

impl fmt::Display for CoseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cbor(e) => write!(f, "COSE: {e}"),
            Self::NotSign1 => f.write_str("not a COSE_Sign1 structure"),
            Self::NotMac0 => f.write_str("not a COSE_Mac0 structure"),
            Self::HeaderType(h) => write!(f, "COSE header {h} has the wrong type"),
            Self::DuplicateLabel => f.write_str("COSE header label appears twice"),
            Self::CriticalHeader => {
                f.write_str("COSE crit header lists parameters Sigil does not understand")
            }
            Self::DetachedPayload => f.write_str("COSE payload is detached"),
            Self::BufferTooSmall => f.write_str("COSE output buffer too small"),
        }
    }
}

/// How the sequence number travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqField {
    Full(u64),
    /// `k` low bits of the number (1..=32).
    LowBits {
        k: u8,
        bits: u64,
    },
}

/// The decoded protected (and, for `kid`, unprotected) header of a COSE_Sign1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Headers<'a> {
    pub alg: Option<i64>,
    /// True when `alg` came from the unprotected bucket (RFC 9052 §3.1 recommends protecting
    /// it; Sigil readings require it).
    pub alg_unprotected: bool,
    pub kid: Option<&'a [u8]>,
    /// True when `kid` came from the unprotected bucket (not covered by the signature).
    pub kid_unprotected: bool,
    pub seq: Option<SeqField>,
    pub time: Option<u64>,
    pub content_type: Option<u64>,
}

/// A parsed COSE_Sign1 borrowing the received bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoseSign1<'a> {
    /// The protected bucket's serialized map, exactly as received.
    pub protected_raw: &'a [u8],
    pub headers: Headers<'a>,
    pub payload: &'a [u8],
    pub signature: &'a [u8],
}

fn label(d: &mut Decoder<'_>) -> Result<Option<i64>, CoseError> {
    Ok(match d.item()? {
        Item::Unsigned(v) => Some(i64::try_from(v).map_err(|_| CoseError::HeaderType("label"))?),
        Item::Negative(v) => {
            Some(-1 - i64::try_from(v).map_err(|_| CoseError::HeaderType("label"))?)
        }
        Item::Text(_) => None,
        _ => return Err(CoseError::HeaderType("label")),
    })
}

/// Up to this many labels per bucket are tracked for duplicate detection.
const MAX_LABELS: usize = 16;
/// Labels tracked across both buckets (each may hold `MAX_LABELS`).
const MAX_SEEN: usize = 2 * MAX_LABELS;

fn parse_bucket<'a>(
    d: &mut Decoder<'a>,
    h: &mut Headers<'a>,
    seen: &mut [i64; MAX_SEEN],
    nseen: &mut usize,
    protected: bool,
) -> Result<(), CoseError> {
    let n = d.map()?;
    if n > MAX_LABELS {
        return Err(CoseError::HeaderType("too many header parameters"));
    }
    for _ in 0..n {
        let Some(l) = label(d)? else {
            d.skip()?;
            continue;
        };
        if seen[..*nseen].contains(&l) {
            return Err(CoseError::DuplicateLabel);
        }
        seen[*nseen] = l;
        *nseen += 1;
        match l {
            header::ALG => {
                h.alg_unprotected = !protected;
                h.alg = Some(d.i64().map_err(|_| CoseError::HeaderType("alg"))?);
            }
            header::CRIT => {
                let arr = d.array().map_err(|_| CoseError::HeaderType("crit"))?;
                if arr == 0 || !protected {
                    return Err(CoseError::HeaderType("crit"));
                }
                return Err(CoseError::CriticalHeader);
            }
            header::CONTENT_TYPE => {
                h.content_type = match d.item()? {
                    Item::Unsigned(v) => Some(v),
                    Item::Text(_) => None,
                    _ => return Err(CoseError::HeaderType("content type")),
                }
            }
            header::KID => {
                h.kid = Some(d.bytes().map_err(|_| CoseError::HeaderType("kid"))?);
                h.kid_unprotected = !protected;
            }
            header::SIGIL_SEQ if protected => {
                if h.seq.is_some() {
                    return Err(CoseError::DuplicateLabel);
                }
                h.seq = Some(SeqField::Full(
                    d.u64().map_err(|_| CoseError::HeaderType("seq"))?,
                ));
            }
            header::SIGIL_SEQ_LSB if protected => {
                if h.seq.is_some() {
                    return Err(CoseError::DuplicateLabel);
                }
                if d.array().map_err(|_| CoseError::HeaderType("seq-lsb"))? != 2 {
                    return Err(CoseError::HeaderType("seq-lsb"));
                }
                let k = d.u64().map_err(|_| CoseError::HeaderType("seq-lsb"))?;
                let bits = d.u64().map_err(|_| CoseError::HeaderType("seq-lsb"))?;
                if !(1..=32).contains(&k) || bits >> k != 0 {
                    return Err(CoseError::HeaderType("seq-lsb"));
                }
                h.seq = Some(SeqField::LowBits { k: k as u8, bits });
            }
            header::SIGIL_TIME if protected => {
                h.time = Some(d.u64().map_err(|_| CoseError::HeaderType("time"))?);
            }
            header::SIGIL_SEQ | header::SIGIL_SEQ_LSB | header::SIGIL_TIME => {
                return Err(CoseError::HeaderType("sequence/time (must be protected)"));
            }
            _ => d.skip()?,
        }
    }
    Ok(())
}

/// The four elements shared by COSE_Sign1 and COSE_Mac0 (RFC 9052 §4.2, §6.2): protected
/// bucket (original bytes), headers of both buckets, payload, and the last element (signature
/// or tag). `tag` is the CBOR tag the structure may carry; `wrong` the error for another shape.
type Parts<'a> = (&'a [u8], Headers<'a>, &'a [u8], &'a [u8]);

fn parse_four(bytes: &[u8], tag: u64, wrong: CoseError) -> Result<Parts<'_>, CoseError> {
    let mut d = Decoder::new(bytes);
    if let Item::Tag(t) = d.peek()? {
        if t != tag {
            return Err(wrong);
        }
        d.item()?;
    }
    if d.array().map_err(|_| wrong)? != 4 {
        return Err(wrong);
    }
    let protected_raw = d.bytes().map_err(|_| wrong)?;
    let mut headers = Headers::default();
    let mut seen = [0i64; MAX_SEEN];
    let mut nseen = 0;
    if !protected_raw.is_empty() {
        let mut pd = Decoder::new(protected_raw);
        parse_bucket(&mut pd, &mut headers, &mut seen, &mut nseen, true)?;
        pd.finish()?;
    }
    parse_bucket(&mut d, &mut headers, &mut seen, &mut nseen, false)?;
    let payload = match d.item()? {
        Item::Bytes(b) => b,
        Item::Null => return Err(CoseError::DetachedPayload),
        _ => return Err(wrong),
    };
    let last = d.bytes().map_err(|_| wrong)?;
    d.finish()?;
    Ok((protected_raw, headers, payload, last))
}

impl<'a> CoseSign1<'a> {
    /// Parses a COSE_Sign1, tagged (18) or untagged.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, CoseError> {
        let (protected_raw, headers, payload, signature) =
            parse_four(bytes, TAG_SIGN1, CoseError::NotSign1)?;
        Ok(Self {
            protected_raw,
            headers,
            payload,
            signature,
        })
    }

    /// Writes the to-be-signed bytes (Sig_structure, RFC 9052 §4.4) into `scratch`.
    pub fn to_be_signed<'s>(
        &self,
        external_aad: &[u8],
        scratch: &'s mut [u8],
    ) -> Result<&'s [u8], CoseError> {
        // An encoded empty map means "no protected attributes", which the Sig_structure carries
        // as a zero-length bstr (RFC 9052 §4.4; cose-wg Examples sign-pass-01).
        let protected = if self.protected_raw == [0xa0] {
            &[][..]
        } else {
            self.protected_raw
        };
        let n = sig_structure(protected, external_aad, self.payload, scratch)?;
        Ok(&scratch[..n])
    }
}

/// A parsed COSE_Mac0 borrowing the received bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoseMac0<'a> {
    /// The protected bucket's serialized map, exactly as received.
    pub protected_raw: &'a [u8],
    pub headers: Headers<'a>,
    pub payload: &'a [u8],
    pub tag: &'a [u8],
}

impl<'a> CoseMac0<'a> {
    /// Parses a COSE_Mac0, tagged (17) or untagged.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, CoseError> {
        let (protected_raw, headers, payload, tag) =
            parse_four(bytes, TAG_MAC0, CoseError::NotMac0)?;
        Ok(Self {
            protected_raw,
            headers,
            payload,
            tag,
        })
    }
}

/// `Sig_structure = ["Signature1", body_protected, external_aad, payload]` (RFC 9052 §4.4).
pub fn sig_structure(
    protected_raw: &[u8],
    external_aad: &[u8],
    payload: &[u8],
    out: &mut [u8],
) -> Result<usize, CoseError> {
    let mut e = Encoder::new(out);
    e.array(4)?
        .text("Signature1")?
        .bytes(protected_raw)?
        .bytes(external_aad)?
        .bytes(payload)?;
    Ok(e.finish())
}

/// Encodes Sigil's protected header map.
pub fn encode_protected(
    alg: i64,
    kid: &[u8],
    seq: SeqField,
    time: Option<u64>,
    out: &mut [u8],
) -> Result<usize, CoseError> {
    let mut e = Encoder::new(out);
    e.map(3 + usize::from(time.is_some()))?;
    e.i64(header::ALG)?.i64(alg)?;
    e.i64(header::KID)?.bytes(kid)?;
    // Deterministic key order (RFC 8949 §4.2.1): 0x3a000100 < 0x3a000101 < 0x3a000102.
    match seq {
        SeqField::Full(s) => {
            e.i64(header::SIGIL_SEQ)?.u64(s)?;
            if let Some(t) = time {
                e.i64(header::SIGIL_TIME)?.u64(t)?;
            }
        }
        SeqField::LowBits { k, bits } => {
            if let Some(t) = time {
                e.i64(header::SIGIL_TIME)?.u64(t)?;
            }
            e.i64(header::SIGIL_SEQ_LSB)?
                .array(2)?
                .u64(u64::from(k))?
                .u64(bits)?;
        }
    }
    Ok(e.finish())
}

/// Encodes a tagged COSE_Mac0 with an empty unprotected bucket.
pub fn encode_mac0(
    protected_raw: &[u8],
    payload: &[u8],
    tag: &[u8],
    out: &mut [u8],
) -> Result<usize, CoseError> {
    let mut e = Encoder::new(out);
    e.tag(TAG_MAC0)?
        .array(4)?
        .bytes(protected_raw)?
        .map(0)?
        .bytes(payload)?
        .bytes(tag)?;
    Ok(e.finish())
}

/// Encodes a tagged COSE_Sign1 with an empty unprotected bucket.
pub fn encode_sign1(
    protected_raw: &[u8],
    payload: &[u8],
    signature: &[u8],
    out: &mut [u8],
) -> Result<usize, CoseError> {
    let mut e = Encoder::new(out);
    e.tag(TAG_SIGN1)?
        .array(4)?
        .bytes(protected_raw)?
        .map(0)?
        .bytes(payload)?
        .bytes(signature)?;
    Ok(e.finish())
}

impl core::error::Error for CoseError {}
