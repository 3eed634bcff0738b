//! A signed sensor reading in either wire form, and the end-to-end check of RFC 8387 §7
//! step 3: the signature verifies under the registered public key, over exactly the bytes
//! received, and that key hashes to the identity named in the reading.

use crate::cose::{self, CoseError, CoseSign1, SeqField};
use crate::jws::{self, Jws, JwsError};
use crate::senml::SenmlError;
use core::fmt;
use sigil_crypto::{CryptoError, CryptoProvider, PublicKey, SecretKey, SignatureAlgorithm};
use sigil_identity::Identity;

/// The two wire forms of a reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadingFormat {
    /// SenML-CBOR inside COSE_Sign1, CoAP content-format 18. The default.
    Cose,
    /// SenML-JSON signed as a compact JWS, CoAP content-format 65100 (experimental range).
    Jws,
}

impl ReadingFormat {
    pub const fn content_format(self) -> u16 {
        match self {
            Self::Cose => 18,
            Self::Jws => 65100,
        }
    }

    pub const fn from_content_format(cf: u16) -> Option<Self> {
        match cf {
            18 => Some(Self::Cose),
            65100 => Some(Self::Jws),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::Cose => "cose",
            Self::Jws => "jws",
        }
    }
}

/// The freshness fields a device puts in a reading (RFC 8387 §8.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freshness {
    /// The full sequence number, reserved in persistent storage before use.
    pub seq: u64,
    /// Send only this many low bits (COSE only); both sides sign the full number.
    pub lsb_bits: Option<u8>,
    /// Seconds since the Unix epoch, if the device has a clock it trusts.
    pub timestamp: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadingError {
    Cose(CoseError),
    Jws(JwsError),
    Senml(SenmlError),
    /// No `alg`, or one Sigil does not implement.
    UnknownAlgorithm,
    /// No `kid`, or not 16 bytes.
    BadKid,
    /// `kid` only in the unprotected bucket (not covered by the signature).
    UnprotectedKid,
    /// No sequence number in the signed part.
    MissingSequence,
    /// The reading's algorithm differs from the registered key's.
    AlgorithmMismatch,
    /// `kid` is not the identity of the key used to verify (§7 step 3).
    KidMismatch,
    /// The full sequence number given for verification does not match the low bits sent.
    SequenceMismatch,
    /// Low-bits sequence transmission is defined for COSE only.
    LsbNotSupported,
    /// The signature does not verify over the bytes received.
    BadSignature,
    /// The MAC tag of a MACed reading does not verify over the bytes received, or is not
    /// 8 bytes long.
    BadTag,
    Crypto(CryptoError),
    BufferTooSmall,
}

impl From<CoseError> for ReadingError {
    fn from(e: CoseError) -> Self {
        Self::Cose(e)
    }
}
impl From<JwsError> for ReadingError {
    fn from(e: JwsError) -> Self {
        Self::Jws(e)
    }
}
impl From<SenmlError> for ReadingError {
    fn from(e: SenmlError) -> Self {
        Self::Senml(e)
    }
}
impl From<CryptoError> for ReadingError {
    fn from(e: CryptoError) -> Self {
        match e {
            CryptoError::BadSignature | CryptoError::SignatureLength => Self::BadSignature,
            e => Self::Crypto(e),
        }
    }
}

impl ReadingError {
    /// A stable short name for counters and logs.
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Cose(_) => "malformed_cose",
            Self::Jws(_) => "malformed_jws",
            Self::Senml(_) => "malformed_senml",
            Self::UnknownAlgorithm => "unknown_algorithm",
            Self::BadKid => "bad_kid",
            Self::UnprotectedKid => "unprotected_kid",
            Self::MissingSequence => "missing_sequence",
            Self::AlgorithmMismatch => "algorithm_mismatch",
            Self::KidMismatch => "kid_mismatch",
            Self::SequenceMismatch => "sequence_mismatch",
            Self::LsbNotSupported => "lsb_not_supported",
            Self::BadSignature => "bad_signature",
            Self::BadTag => "bad_tag",
            Self::Crypto(_) => "crypto_error",
            Self::BufferTooSmall => "buffer_too_small",
        }
    }
}

impl fmt::Display for ReadingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cose(e) => write!(f, "{e}"),
            Self::Jws(e) => write!(f, "{e}"),
            Self::Senml(e) => write!(f, "{e}"),
            Self::UnknownAlgorithm => f.write_str("missing or unsupported signature algorithm"),
            Self::BadKid => f.write_str("kid missing or not a 16-byte identity"),
            Self::UnprotectedKid => f.write_str("kid is not in the protected header"),
            Self::MissingSequence => f.write_str("no sequence number in the signed header"),
            Self::AlgorithmMismatch => {
                f.write_str("reading algorithm differs from the registered key")
            }
            Self::KidMismatch => f.write_str("kid is not the identity of the registered key"),
            Self::SequenceMismatch => {
                f.write_str("full sequence number does not match the low bits sent")
            }
            Self::LsbNotSupported => {
                f.write_str("low-bits sequence numbers are defined for COSE only")
            }
            Self::BadSignature => f.write_str("signature does not verify"),
            Self::BadTag => f.write_str("MAC tag does not verify"),
            Self::Crypto(e) => write!(f, "{e}"),
            Self::BufferTooSmall => f.write_str("buffer too small"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inner<'a> {
    Cose(CoseSign1<'a>),
    Jws(Jws<'a>),
}

/// A parsed, not yet verified, signed reading borrowing the received bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignedReading<'a> {
    pub format: ReadingFormat,
    pub alg: SignatureAlgorithm,
    pub kid: Identity,
    pub seq: SeqField,
    pub timestamp: Option<u64>,
    pub raw: &'a [u8],
    inner: Inner<'a>,
}

impl<'a> SignedReading<'a> {
    /// Parses the envelope and the header fields Sigil needs. Nothing is trusted yet.
    pub fn parse(format: ReadingFormat, raw: &'a [u8]) -> Result<Self, ReadingError> {
        match format {
            ReadingFormat::Cose => {
                let c = CoseSign1::parse(raw)?;
                if c.headers.alg_unprotected {
                    return Err(ReadingError::UnknownAlgorithm);
                }
                let alg = c
                    .headers
                    .alg
                    .and_then(SignatureAlgorithm::from_cose)
                    .ok_or(ReadingError::UnknownAlgorithm)?;
                let kid = c.headers.kid.ok_or(ReadingError::BadKid)?;
                if c.headers.kid_unprotected {
                    return Err(ReadingError::UnprotectedKid);
                }
                let kid = Identity::from_slice(kid).ok_or(ReadingError::BadKid)?;
                let seq = c.headers.seq.ok_or(ReadingError::MissingSequence)?;
                Ok(Self {
                    format,
                    alg,
                    kid,
                    seq,
                    timestamp: c.headers.time,
                    raw,
                    inner: Inner::Cose(c),
                })
            }
            ReadingFormat::Jws => {
                let j = Jws::parse(raw)?;
                let alg = j.header.alg.ok_or(ReadingError::UnknownAlgorithm)?;
                let kid = Identity::from_bytes(j.header.kid.ok_or(ReadingError::BadKid)?);
                let seq = SeqField::Full(j.header.seq.ok_or(ReadingError::MissingSequence)?);
                Ok(Self {
                    format,
                    alg,
                    kid,
                    seq,
                    timestamp: j.header.iat,
                    raw,
                    inner: Inner::Jws(j),
                })
            }
        }
    }

    /// The full sequence number when it was sent in full.
    pub fn full_seq(&self) -> Option<u64> {
        match self.seq {
            SeqField::Full(s) => Some(s),
            SeqField::LowBits { .. } => None,
        }
    }

    /// Scratch space [`SignedReading::verify`] needs.
    pub fn scratch_len(&self) -> usize {
        match self.inner {
            Inner::Cose(c) => c.protected_raw.len() + c.payload.len() + 40,
            Inner::Jws(_) => 0,
        }
    }

    /// Verifies the signature under `key` over exactly the received bytes. `full_seq` is the
    /// complete sequence number (reconstructed by the receiver in low-bits mode); `scratch`
    /// holds the COSE Sig_structure (see [`SignedReading::scratch_len`]).
    ///
    /// This checks the signature only; [`SignedReading::verify_end_to_end`] also binds the key
    /// to the identity.
    pub fn verify<C: CryptoProvider + ?Sized>(
        &self,
        crypto: &C,
        key: &PublicKey,
        full_seq: u64,
        scratch: &mut [u8],
    ) -> Result<(), ReadingError> {
        if key.algorithm() != self.alg {
            return Err(ReadingError::AlgorithmMismatch);
        }
        match (&self.inner, self.seq) {
            (Inner::Cose(c), SeqField::Full(s)) => {
                if s != full_seq {
                    return Err(ReadingError::SequenceMismatch);
                }
                let tbs = c
                    .to_be_signed(&[], scratch)
                    .map_err(|_| ReadingError::BufferTooSmall)?;
                crypto.verify(key, tbs, c.signature)?;
            }
            (Inner::Cose(c), SeqField::LowBits { k, bits }) => {
                if full_seq & ((1u64 << k) - 1) != bits {
                    return Err(ReadingError::SequenceMismatch);
                }
                let aad = full_seq.to_be_bytes();
                let tbs = c
                    .to_be_signed(&aad, scratch)
                    .map_err(|_| ReadingError::BufferTooSmall)?;
                crypto.verify(key, tbs, c.signature)?;
            }
            (Inner::Jws(j), SeqField::Full(s)) => {
                if s != full_seq {
                    return Err(ReadingError::SequenceMismatch);
                }
                if !j.signature_len_ok() {
                    return Err(ReadingError::BadSignature);
                }
                crypto.verify(key, j.signing_input, j.signature())?;
            }
            (Inner::Jws(_), SeqField::LowBits { .. }) => return Err(ReadingError::LsbNotSupported),
        }
        Ok(())
    }

    /// RFC 8387 §7 step 3: `kid` must equal `key_identity` (the identity the verifier derived
    /// from `key`, e.g. with `Identity::of_key`), and the signature must verify under `key`.
    pub fn verify_end_to_end<C: CryptoProvider + ?Sized>(
        &self,
        crypto: &C,
        key: &PublicKey,
        key_identity: &Identity,
        full_seq: u64,
        scratch: &mut [u8],
    ) -> Result<(), ReadingError> {
        if &self.kid != key_identity {
            return Err(ReadingError::KidMismatch);
        }
        self.verify(crypto, key, full_seq, scratch)
    }

    /// The SenML payload bytes. For COSE they are borrowed; for JWS they are decoded into `buf`.
    pub fn senml<'b>(&self, buf: &'b mut [u8]) -> Result<&'b [u8], ReadingError>
    where
        'a: 'b,
    {
        match &self.inner {
            Inner::Cose(c) => Ok(c.payload),
            Inner::Jws(j) => Ok(j.payload_into(buf)?),
        }
    }

    /// Upper bound on the decoded SenML length.
    pub fn senml_len_bound(&self) -> usize {
        match &self.inner {
            Inner::Cose(c) => c.payload.len(),
            Inner::Jws(j) => j.payload_b64.len() * 3 / 4 + 3,
        }
    }
}

/// Signs a reading on the device. `senml` is the already-encoded pack (SenML-CBOR for COSE,
/// SenML-JSON for JWS). `scratch` must hold the to-be-signed bytes (payload + about 100 bytes);
/// the result goes to `out`. No heap.
#[allow(clippy::too_many_arguments)]
pub fn sign_reading<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &SecretKey,
    kid: &Identity,
    format: ReadingFormat,
    freshness: &Freshness,
    senml: &[u8],
    scratch: &mut [u8],
    out: &mut [u8],
) -> Result<usize, ReadingError> {
    let alg = key.algorithm();
    match format {
        ReadingFormat::Cose => {
            let mut protected = [0u8; 64];
            let (seq, aad_buf, aad_len) = match freshness.lsb_bits {
                None => (SeqField::Full(freshness.seq), [0u8; 8], 0),
                Some(k) if (1..=32).contains(&k) => (
                    SeqField::LowBits {
                        k,
                        bits: freshness.seq & ((1u64 << k) - 1),
                    },
                    freshness.seq.to_be_bytes(),
                    8,
                ),
                Some(_) => return Err(ReadingError::SequenceMismatch),
            };
            let pn = cose::encode_protected(
                alg.cose(),
                kid.as_bytes(),
                seq,
                freshness.timestamp,
                &mut protected,
            )?;
            let tn = cose::sig_structure(&protected[..pn], &aad_buf[..aad_len], senml, scratch)?;
            let sig = crypto.sign(key, &scratch[..tn])?;
            Ok(cose::encode_sign1(&protected[..pn], senml, &sig.0, out)?)
        }
        ReadingFormat::Jws => {
            if freshness.lsb_bits.is_some() {
                return Err(ReadingError::LsbNotSupported);
            }
            let n = jws::write_signing_input(
                alg,
                kid.as_bytes(),
                freshness.seq,
                freshness.timestamp,
                senml,
                out,
            )?;
            let sig = crypto.sign(key, &out[..n])?;
            Ok(jws::append_signature(out, n, &sig.0)?)
        }
    }
}

impl core::error::Error for ReadingError {}
