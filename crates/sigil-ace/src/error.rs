//! Why a token was refused: one variant per reason, so a resource server can log it and map it
//! to a CoAP response (RFC 9200 §5.10.1.1) in one place.

use core::fmt;
use sigil_crypto::CryptoError;
use sigil_objects::cbor::CborError;
use sigil_time::UnixTime;

/// A claim of the CWT claims set (RFC 8392 §3.1, RFC 8747 §3.1, RFC 9200 §5.9.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    Iss,
    Sub,
    Aud,
    Exp,
    Nbf,
    Iat,
    Cti,
    Cnf,
    Scope,
}

impl Claim {
    /// The CWT Claims registry label.
    pub const fn label(self) -> u64 {
        match self {
            Self::Iss => 1,
            Self::Sub => 2,
            Self::Aud => 3,
            Self::Exp => 4,
            Self::Nbf => 5,
            Self::Iat => 6,
            Self::Cti => 7,
            Self::Cnf => 8,
            Self::Scope => 9,
        }
    }

    pub const fn from_label(label: u64) -> Option<Self> {
        Some(match label {
            1 => Self::Iss,
            2 => Self::Sub,
            3 => Self::Aud,
            4 => Self::Exp,
            5 => Self::Nbf,
            6 => Self::Iat,
            7 => Self::Cti,
            8 => Self::Cnf,
            9 => Self::Scope,
            _ => return None,
        })
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::Iss => "iss",
            Self::Sub => "sub",
            Self::Aud => "aud",
            Self::Exp => "exp",
            Self::Nbf => "nbf",
            Self::Iat => "iat",
            Self::Cti => "cti",
            Self::Cnf => "cnf",
            Self::Scope => "scope",
        }
    }
}

/// What in a token's encoding was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// The CBOR itself is broken (truncated, indefinite length, nesting too deep...).
    Cbor(CborError),
    /// The token is not a tagged COSE_Sign1 (18), COSE_Encrypt0 (16) or COSE_Mac0 (17), with or
    /// without the CWT tag (61).
    NotCose,
    /// A COSE header is missing, has the wrong type, is repeated or is not understood.
    Header(&'static str),
    /// A claim has the wrong type or is out of range.
    Claim(Claim),
    /// A claim appears twice.
    DuplicateClaim(Claim),
    /// The claims set is not a map, or has more entries than [`crate::MAX_CLAIMS`].
    ClaimsSet,
    /// The scope is not an AIF array of `[object, permissions]` pairs within the bounds.
    Scope(&'static str),
    /// The confirmation claim or its COSE_Key is not one this crate reads.
    Cnf(&'static str),
    /// A parameter of a `/token` request, response or error map (RFC 9200 §5.8) is missing,
    /// repeated or of the wrong type.
    Param(&'static str),
}

impl From<CborError> for Malformed {
    fn from(e: CborError) -> Self {
        Self::Cbor(e)
    }
}

/// The reason a token was refused (or could not be made).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenError {
    /// `exp` is at or before the current time (RFC 8392 §3.1.4).
    Expired { exp: UnixTime, now: UnixTime },
    /// `nbf` is after the current time (RFC 8392 §3.1.5).
    NotYetValid { nbf: UnixTime, now: UnixTime },
    /// `aud` does not name this resource server (RFC 8392 §3.1.3).
    WrongAudience,
    /// The COSE_Sign1 signature does not verify: the token was altered or not signed by the AC.
    BadSignature,
    /// The COSE_Encrypt0 or COSE_Mac0 tag does not match: the token was altered or protected
    /// under another key.
    BadTag,
    /// The token names a key (kid, or an algorithm) that is not the AC's.
    UnknownKey,
    /// The encoding is wrong; the variant says where.
    Malformed(Malformed),
    /// The token (or a part of it) is longer than the bound this crate reads.
    Oversized { len: usize, max: usize },
    /// The COSE algorithm is not one of EdDSA (-8), ES256 (-7), AES-CCM-16-64-128 (10) or
    /// HMAC 256/64 (4), or not the one the token's COSE structure takes.
    UnsupportedAlgorithm(i64),
    /// A claim every Sigil access token carries (`aud`, `exp`, `scope`) is absent.
    MissingClaim(Claim),
    /// A symmetric proof-of-possession key in a token that is only signed or MACed: the key
    /// would travel in the clear (RFC 8747 §3.3 requires it encrypted), so it is neither made
    /// nor accepted.
    ExposedPopKey,
    /// The caller's output or scratch buffer is too small.
    BufferTooSmall,
    /// The crypto provider failed (for example it lacks the algorithm).
    Crypto(CryptoError),
}

impl From<CborError> for TokenError {
    fn from(e: CborError) -> Self {
        match e {
            CborError::BufferTooSmall => Self::BufferTooSmall,
            e => Self::Malformed(Malformed::Cbor(e)),
        }
    }
}

impl From<Malformed> for TokenError {
    fn from(m: Malformed) -> Self {
        Self::Malformed(m)
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cbor(e) => write!(f, "{e}"),
            Self::NotCose => f.write_str("not a tagged COSE_Sign1, COSE_Encrypt0 or COSE_Mac0"),
            Self::Header(h) => write!(f, "COSE header: {h}"),
            Self::Claim(c) => write!(f, "claim {} has the wrong type or range", c.name()),
            Self::DuplicateClaim(c) => write!(f, "claim {} appears twice", c.name()),
            Self::ClaimsSet => f.write_str("claims set is not a bounded map"),
            Self::Scope(s) => write!(f, "scope: {s}"),
            Self::Cnf(s) => write!(f, "cnf: {s}"),
            Self::Param(s) => write!(f, "ACE parameter: {s}"),
        }
    }
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Expired { exp, now } => write!(
                f,
                "token expired at {} (now {})",
                exp.as_secs(),
                now.as_secs()
            ),
            Self::NotYetValid { nbf, now } => write!(
                f,
                "token not valid before {} (now {})",
                nbf.as_secs(),
                now.as_secs()
            ),
            Self::WrongAudience => f.write_str("token is for another audience"),
            Self::BadSignature => f.write_str("token signature does not verify (tampered)"),
            Self::BadTag => f.write_str("token authentication tag does not match (tampered)"),
            Self::UnknownKey => f.write_str("token names a key that is not the AC's"),
            Self::Malformed(m) => write!(f, "malformed token: {m}"),
            Self::Oversized { len, max } => write!(f, "token of {len} bytes exceeds {max}"),
            Self::UnsupportedAlgorithm(a) => write!(f, "unsupported COSE algorithm {a}"),
            Self::MissingClaim(c) => write!(f, "token lacks the {} claim", c.name()),
            Self::ExposedPopKey => f.write_str("symmetric PoP key in an unencrypted token"),
            Self::BufferTooSmall => f.write_str("buffer too small for the token"),
            Self::Crypto(e) => write!(f, "crypto provider: {e}"),
        }
    }
}

impl core::error::Error for TokenError {}
