//! JWS compact serialization (RFC 7515 §7.1) of SenML-JSON readings: the JOSE option of
//! RFC 8387 §7 step 2.
//!
//! Sigil's protected header is `{"alg":"EdDSA"|"ES256","kid":"<32 hex digits>","seq":N}` with an
//! optional `"iat"` (seconds). The signing input is the received `header.payload` text itself.

use crate::json::{parse_flat_object, write_base64url, write_string, FlatValue, SliceWriter};
use base64::Engine;
use core::fmt::{self, Write};
use sigil_crypto::SignatureAlgorithm;

/// Largest decoded protected header accepted.
pub const MAX_HEADER: usize = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JwsError {
    /// Not three base64url parts separated by dots.
    NotCompact,
    /// A part is not valid unpadded base64url.
    Base64,
    /// The header is not a flat JSON object with the expected member types.
    Header,
    /// A header member appears twice (RFC 7515 §4: must be rejected or use last; Sigil rejects).
    DuplicateMember,
    /// `crit` or `b64` present: extensions Sigil does not implement (RFC 7515 §4.1.11).
    UnsupportedExtension,
    /// Header longer than [`MAX_HEADER`].
    HeaderTooLong,
    BufferTooSmall,
}

impl fmt::Display for JwsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotCompact => "JWS is not in compact serialization",
            Self::Base64 => "JWS part is not base64url",
            Self::Header => "JWS protected header malformed",
            Self::DuplicateMember => "JWS header member appears twice",
            Self::UnsupportedExtension => "JWS uses crit or b64 extensions",
            Self::HeaderTooLong => "JWS header too long",
            Self::BufferTooSmall => "JWS output buffer too small",
        })
    }
}

/// The fields Sigil reads from a JWS protected header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JwsHeader {
    pub alg: Option<SignatureAlgorithm>,
    /// The `alg` text was present but names an algorithm Sigil does not implement.
    pub alg_unknown: bool,
    pub kid: Option<[u8; 16]>,
    pub seq: Option<u64>,
    pub iat: Option<u64>,
}

/// A parsed compact JWS borrowing the received text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Jws<'a> {
    pub header: JwsHeader,
    /// `BASE64URL(header) '.' BASE64URL(payload)`, exactly as received.
    pub signing_input: &'a [u8],
    pub payload_b64: &'a [u8],
    pub signature: [u8; 64],
    pub signature_len: usize,
}

fn hex16(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl<'a> Jws<'a> {
    pub fn parse(raw: &'a [u8]) -> Result<Self, JwsError> {
        let mut parts = raw.split(|c| *c == b'.');
        let (h, p, s) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(h), Some(p), Some(s), None) => (h, p, s),
            _ => return Err(JwsError::NotCompact),
        };
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        if h.len() > MAX_HEADER * 4 / 3 + 4 {
            return Err(JwsError::HeaderTooLong);
        }
        let mut hbuf = [0u8; MAX_HEADER];
        let hn = b64
            .decode_slice(h, &mut hbuf)
            .map_err(|_| JwsError::Base64)?;
        let htext = core::str::from_utf8(&hbuf[..hn]).map_err(|_| JwsError::Header)?;
        let mut header = JwsHeader {
            alg: None,
            alg_unknown: false,
            kid: None,
            seq: None,
            iat: None,
        };
        let mut seen = [false; 4];
        let mut err = None;
        parse_flat_object(htext, |k, v| {
            let slot = match k {
                "alg" => 0,
                "kid" => 1,
                "seq" => 2,
                "iat" => 3,
                "crit" | "b64" => {
                    err = Some(JwsError::UnsupportedExtension);
                    return Err(crate::json::FlatJsonError);
                }
                _ => return Ok(()),
            };
            if seen[slot] {
                err = Some(JwsError::DuplicateMember);
                return Err(crate::json::FlatJsonError);
            }
            seen[slot] = true;
            match (slot, v) {
                (0, FlatValue::Str(a)) => {
                    header.alg = SignatureAlgorithm::from_jose(a);
                    header.alg_unknown = header.alg.is_none();
                }
                (1, FlatValue::Str(kid)) => {
                    header.kid = Some(hex16(kid).ok_or(crate::json::FlatJsonError)?)
                }
                (2, FlatValue::UInt(n)) => header.seq = Some(n),
                (3, FlatValue::UInt(n)) => header.iat = Some(n),
                _ => return Err(crate::json::FlatJsonError),
            }
            Ok(())
        })
        .map_err(|_| err.unwrap_or(JwsError::Header))?;
        let mut signature = [0u8; 64];
        let mut sbuf = [0u8; 96];
        if s.len() > 128 {
            return Err(JwsError::Base64);
        }
        let sn = b64
            .decode_slice(s, &mut sbuf)
            .map_err(|_| JwsError::Base64)?;
        let signature_len = sn.min(64);
        signature[..signature_len].copy_from_slice(&sbuf[..signature_len]);
        let signature_len = if sn > 64 { 65 } else { sn };
        // Check the payload part is base64url now, so later decoding cannot fail.
        if p.iter()
            .any(|c| !(c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_'))
            || p.len() % 4 == 1
        {
            return Err(JwsError::Base64);
        }
        Ok(Self {
            header,
            signing_input: &raw[..h.len() + 1 + p.len()],
            payload_b64: p,
            signature,
            signature_len,
        })
    }

    /// The signature bytes (a wrong length is kept so verification reports it).
    pub fn signature(&self) -> &[u8] {
        &self.signature[..self.signature_len.min(64)]
    }

    pub fn signature_len_ok(&self) -> bool {
        self.signature_len == 64
    }

    /// Decodes the payload into `buf`.
    pub fn payload_into<'b>(&self, buf: &'b mut [u8]) -> Result<&'b [u8], JwsError> {
        let n = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode_slice(self.payload_b64, buf)
            .map_err(|e| match e {
                base64::DecodeSliceError::OutputSliceTooSmall => JwsError::BufferTooSmall,
                _ => JwsError::Base64,
            })?;
        Ok(&buf[..n])
    }
}

/// Writes `BASE64URL(header) '.' BASE64URL(payload)` into `out` and returns its length. The
/// caller signs those bytes and appends the signature with [`append_signature`].
pub fn write_signing_input(
    alg: SignatureAlgorithm,
    kid: &[u8; 16],
    seq: u64,
    iat: Option<u64>,
    payload: &[u8],
    out: &mut [u8],
) -> Result<usize, JwsError> {
    let mut hbuf = [0u8; 128];
    let mut hw = SliceWriter::new(&mut hbuf);
    let r: fmt::Result = (|| {
        hw.write_str("{\"alg\":")?;
        write_string(&mut hw, alg.jose())?;
        hw.write_str(",\"kid\":\"")?;
        for b in kid {
            write!(hw, "{b:02x}")?;
        }
        write!(hw, "\",\"seq\":{seq}")?;
        if let Some(t) = iat {
            write!(hw, ",\"iat\":{t}")?;
        }
        hw.write_char('}')
    })();
    r.map_err(|_| JwsError::BufferTooSmall)?;
    let hn = hw.len();
    let mut w = SliceWriter::new(out);
    let r: fmt::Result = (|| {
        write_base64url(&mut w, &hbuf[..hn])?;
        w.write_char('.')?;
        write_base64url(&mut w, payload)
    })();
    r.map_err(|_| JwsError::BufferTooSmall)?;
    Ok(w.len())
}

/// Appends `'.' BASE64URL(signature)` at `out[len..]`; returns the new length.
pub fn append_signature(out: &mut [u8], len: usize, signature: &[u8]) -> Result<usize, JwsError> {
    let tail = out.get_mut(len..).ok_or(JwsError::BufferTooSmall)?;
    let mut w = SliceWriter::new(tail);
    let r: fmt::Result = (|| {
        w.write_char('.')?;
        write_base64url(&mut w, signature)
    })();
    r.map_err(|_| JwsError::BufferTooSmall)?;
    Ok(len + w.len())
}

impl core::error::Error for JwsError {}
