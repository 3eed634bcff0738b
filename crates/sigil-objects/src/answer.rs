//! Signed answers: how a device on plain coap:// (no DTLS session to authenticate what comes
//! back) knows that an answer it acts on comes from its trusted server (RFC 8387 §4.1).
//!
//! A device that requires signed answers adds the elective option
//! [`REQUIRE_OPTION`] (empty) to its request. The server then puts the elective option
//! [`SIGNATURE_OPTION`] on the answers that change the device's state: its signature, by the
//! server's long-term key (the one pairing messages and tokens are signed with), over the
//! statement
//!
//! ```text
//! "sigil-answer-v1" (15) || device identity (16) || token length (1) || token (0-8)
//!   || response code (1) || request digest (32)
//!   || Location-Path count (1) || { segment length (1) || segment }*
//! ```
//!
//! The request digest ([`RequestDigest`]) covers the request's code, its options except the
//! message-layer ones that differ from block to block or from attempt to attempt (Block1,
//! Block2, Size1, Size2, Echo, Request-Tag and the two options here), and its whole payload
//! (reassembled, for a Block1 transfer), so an answer cannot be moved onto another request,
//! another device's exchange or another token. Layout and option numbers in
//! `docs/wire-formats.md`, "Signed answers".

use sigil_crypto::{CryptoError, CryptoProvider, PublicKey, SecretKey, Signature, SIGNATURE_LEN};
use sigil_identity::{Identity, IDENTITY_LEN};

/// "I require signed answers": elective (even), safe to forward, from the experimental range
/// (RFC 7252 §12.2). Empty value.
pub const REQUIRE_OPTION: u16 = 65000;
/// The signature on an answer: elective (even), from the experimental range. The value is the
/// 64-byte signature (EdDSA, or ES256 as `r || s`).
pub const SIGNATURE_OPTION: u16 = 65002;
/// The code of the signed "resynchronise" answer to a Confirmable publication whose sequence
/// number the broker finds replayed or out of window (RFC 8387 §8.2), in place of the bare
/// Reset a device that does not require signed answers gets: 4.09 Conflict, piggybacked.
pub const RESYNC_CODE: u8 = (4 << 5) | 9;
/// The statement's domain separation prefix.
pub const ANSWER_CONTEXT: &[u8; 15] = b"sigil-answer-v1";
/// The request digest's domain separation prefix.
pub const REQUEST_CONTEXT: &[u8; 19] = b"sigil-answer-req-v1";
/// Longest CoAP token (RFC 7252 §3).
pub const MAX_TOKEN_LEN: usize = 8;
/// Most Location-Path segments a statement binds.
pub const MAX_LOCATION_SEGMENTS: usize = 8;
/// Most bytes of Location-Path (segments and their length bytes) a statement binds.
pub const MAX_LOCATION_LEN: usize = 64;
/// Longest statement.
pub const MAX_STATEMENT_LEN: usize =
    ANSWER_CONTEXT.len() + IDENTITY_LEN + 1 + MAX_TOKEN_LEN + 1 + 32 + 1 + MAX_LOCATION_LEN;
/// Bytes a signature option adds to an answer whose previous option number is at most 268:
/// one header byte, two of extended delta, one of extended length, and the signature.
pub const SIGNATURE_OPTION_OVERHEAD: usize = 4 + SIGNATURE_LEN;

// The option numbers must be elective (RFC 7252 §5.4.6: an odd number is critical).
const _: () = assert!(REQUIRE_OPTION % 2 == 0 && SIGNATURE_OPTION % 2 == 0);

/// Why an answer's signature was not accepted, or a statement could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerError {
    /// The answer carries no signature option.
    Unsigned,
    /// More than one signature option.
    Duplicate,
    /// A signature option that is not [`SIGNATURE_LEN`] bytes.
    BadLength,
    /// A token longer than [`MAX_TOKEN_LEN`] or a Location-Path over the limits.
    TooLong,
    /// The signature does not verify under the trusted key.
    BadSignature,
}

impl core::fmt::Display for AnswerError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Unsigned => "answer is not signed",
            Self::Duplicate => "answer carries more than one signature",
            Self::BadLength => "answer signature has the wrong length",
            Self::TooLong => "token or location too long for a signed answer",
            Self::BadSignature => "answer signature does not verify",
        })
    }
}

impl core::error::Error for AnswerError {}

/// Whether option `number` of a request is covered by its digest.
pub const fn covered(number: u16) -> bool {
    // Block2 23, Size2 28, Block1 27, Size1 60, Echo 252, Request-Tag 292 (RFC 9175).
    !matches!(
        number,
        23 | 27 | 28 | 60 | 252 | 292 | REQUIRE_OPTION | SIGNATURE_OPTION
    )
}

/// The digest of a request an answer is bound to, fed option by option:
/// `d0 = SHA-256(REQUEST_CONTEXT || code)`, then for each covered option in message order
/// `d = SHA-256(d || number (2, big-endian) || length (2, big-endian) || value)`, and the
/// digest `SHA-256(d || 0xff || payload)`. Chained, so neither side needs a buffer for the
/// options and the payload is not copied.
#[derive(Clone, Copy, Debug)]
pub struct RequestDigest {
    state: [u8; 32],
}

impl RequestDigest {
    pub fn new<C: CryptoProvider + ?Sized>(crypto: &C, code: u8) -> Self {
        Self {
            state: crypto.sha256(&[REQUEST_CONTEXT, &[code]]),
        }
    }

    /// Feeds one option (skipped if not [`covered`]). A value over 65535 bytes is cut at
    /// that length (CoAP allows at most 65535 + 269 bytes; no request here comes near).
    pub fn option<C: CryptoProvider + ?Sized>(&mut self, crypto: &C, number: u16, value: &[u8]) {
        if !covered(number) {
            return;
        }
        let len = value.len().min(usize::from(u16::MAX));
        self.state = crypto.sha256(&[
            &self.state,
            &number.to_be_bytes(),
            &(len as u16).to_be_bytes(),
            &value[..len],
        ]);
    }

    pub fn finish<C: CryptoProvider + ?Sized>(self, crypto: &C, payload: &[u8]) -> [u8; 32] {
        crypto.sha256(&[&self.state, &[0xff], payload])
    }

    /// The digest of a request with `code`, `options` (number and value, in message order)
    /// and the whole `payload`.
    pub fn of<'a, C: CryptoProvider + ?Sized>(
        crypto: &C,
        code: u8,
        options: impl IntoIterator<Item = (u16, &'a [u8])>,
        payload: &[u8],
    ) -> [u8; 32] {
        let mut d = Self::new(crypto, code);
        for (n, v) in options {
            d.option(crypto, n, v);
        }
        d.finish(crypto, payload)
    }
}

/// What an answer's signature binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer<'a> {
    /// The device the request came from (as the server authenticated it).
    pub device: &'a Identity,
    /// The request's token, which the answer repeats.
    pub token: &'a [u8],
    /// The response code.
    pub code: u8,
    /// The [`RequestDigest`] of the request.
    pub request: &'a [u8; 32],
}

impl Answer<'_> {
    /// Writes the statement with the answer's Location-Path `location` into `out`; returns its
    /// length.
    pub fn statement<'l>(
        &self,
        location: impl IntoIterator<Item = &'l [u8]>,
        out: &mut [u8; MAX_STATEMENT_LEN],
    ) -> Result<usize, AnswerError> {
        if self.token.len() > MAX_TOKEN_LEN {
            return Err(AnswerError::TooLong);
        }
        let mut n = 0;
        let mut put = |bytes: &[u8]| {
            out[n..n + bytes.len()].copy_from_slice(bytes);
            n += bytes.len();
        };
        put(ANSWER_CONTEXT);
        put(self.device.as_bytes());
        put(&[self.token.len() as u8]);
        put(self.token);
        put(&[self.code]);
        put(self.request);
        let count_at = ANSWER_CONTEXT.len() + IDENTITY_LEN + 1 + self.token.len() + 1 + 32;
        put(&[0]);
        let (mut count, mut used) = (0usize, 0usize);
        for seg in location {
            used += 1 + seg.len();
            count += 1;
            if count > MAX_LOCATION_SEGMENTS || used > MAX_LOCATION_LEN {
                return Err(AnswerError::TooLong);
            }
            put(&[seg.len() as u8]);
            put(seg);
        }
        out[count_at] = count as u8;
        Ok(n)
    }

    /// Signs the statement (the server side).
    pub fn sign<'l, C: CryptoProvider + ?Sized>(
        &self,
        crypto: &C,
        key: &SecretKey,
        location: impl IntoIterator<Item = &'l [u8]>,
    ) -> Result<Signature, AnswerError> {
        let mut m = [0u8; MAX_STATEMENT_LEN];
        let n = self.statement(location, &mut m)?;
        crypto
            .sign(key, &m[..n])
            .map_err(|_: CryptoError| AnswerError::BadSignature)
    }

    /// Checks the signature option of an answer (its `options`, number and value in message
    /// order) under the trusted server `key` (the device side).
    pub fn verify<'o, C: CryptoProvider + ?Sized>(
        &self,
        crypto: &C,
        key: &PublicKey,
        options: impl IntoIterator<Item = (u16, &'o [u8])> + Clone,
    ) -> Result<(), AnswerError> {
        let signature = signature_of(options.clone())?;
        let location = options
            .into_iter()
            .filter(|(n, _)| *n == LOCATION_PATH)
            .map(|(_, v)| v);
        let mut m = [0u8; MAX_STATEMENT_LEN];
        let n = self.statement(location, &mut m)?;
        crypto
            .verify(key, &m[..n], signature)
            .map_err(|_| AnswerError::BadSignature)
    }
}

/// Location-Path (RFC 7252 §5.10.7).
const LOCATION_PATH: u16 = 8;

/// The one signature option among an answer's `options`: absent, repeated, or not
/// [`SIGNATURE_LEN`] bytes is refused.
pub fn signature_of<'o>(
    options: impl IntoIterator<Item = (u16, &'o [u8])>,
) -> Result<&'o [u8; SIGNATURE_LEN], AnswerError> {
    let mut found = None;
    for (n, v) in options {
        if n != SIGNATURE_OPTION {
            continue;
        }
        if found.is_some() {
            return Err(AnswerError::Duplicate);
        }
        found = Some(v);
    }
    found
        .ok_or(AnswerError::Unsigned)?
        .try_into()
        .map_err(|_| AnswerError::BadLength)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigil_crypto::{RustCrypto, SignatureAlgorithm};

    fn fixture(alg: SignatureAlgorithm) -> (SecretKey, PublicKey, Identity) {
        let key = SecretKey::from_bytes(alg, &[0x42; 32]).unwrap();
        let public = RustCrypto.public_key(&key).unwrap();
        let device = Identity::of_key(&RustCrypto, &public, b"device").unwrap();
        (key, public, device)
    }

    #[test]
    fn signed_answer_verifies_and_binds_every_part() {
        for alg in SignatureAlgorithm::ALL {
            let (key, public, device) = fixture(alg);
            let request = RequestDigest::of(
                &RustCrypto,
                2,
                [(11, &b"rd"[..]), (15, b"ep=1"), (27, b"\x08")],
                b"</m>",
            );
            let answer = Answer {
                device: &device,
                token: &[1, 2, 3, 4],
                code: 0x41,
                request: &request,
            };
            let sig = answer.sign(&RustCrypto, &key, [&b"rd"[..], b"7"]).unwrap();
            let opts = [
                (8u16, &b"rd"[..]),
                (8, b"7"),
                (SIGNATURE_OPTION, &sig.0[..]),
            ];
            assert_eq!(answer.verify(&RustCrypto, &public, opts), Ok(()));
            // Another location, token, code, device or request: refused.
            let moved = [
                (8u16, &b"rd"[..]),
                (8, b"8"),
                (SIGNATURE_OPTION, &sig.0[..]),
            ];
            assert_eq!(
                answer.verify(&RustCrypto, &public, moved),
                Err(AnswerError::BadSignature)
            );
            let other = Identity::of_key(&RustCrypto, &public, b"other").unwrap();
            let other_request = RequestDigest::of(&RustCrypto, 2, [(11, &b"rd"[..])], b"</m>");
            for a in [
                Answer {
                    token: &[1, 2, 3, 5],
                    ..answer
                },
                Answer {
                    code: 0x44,
                    ..answer
                },
                Answer {
                    device: &other,
                    ..answer
                },
                Answer {
                    request: &other_request,
                    ..answer
                },
            ] {
                assert_eq!(
                    a.verify(&RustCrypto, &public, opts),
                    Err(AnswerError::BadSignature)
                );
            }
            assert_eq!(
                answer.verify(&RustCrypto, &public, [(8u16, &b"rd"[..]), (8, b"7")]),
                Err(AnswerError::Unsigned)
            );
            assert_eq!(
                answer.verify(
                    &RustCrypto,
                    &public,
                    [
                        (SIGNATURE_OPTION, &sig.0[..]),
                        (SIGNATURE_OPTION, &sig.0[..])
                    ]
                ),
                Err(AnswerError::Duplicate)
            );
            assert_eq!(
                answer.verify(&RustCrypto, &public, [(SIGNATURE_OPTION, &sig.0[..63])]),
                Err(AnswerError::BadLength)
            );
        }
    }

    #[test]
    fn digest_skips_message_layer_options_only() {
        let base = RequestDigest::of(&RustCrypto, 2, [(11, &b"rd"[..])], b"x");
        let blocks = RequestDigest::of(
            &RustCrypto,
            2,
            [
                (11, &b"rd"[..]),
                (27, b"\x0e"),
                (60, b"\x01"),
                (252, b"echo"),
                (REQUIRE_OPTION, b""),
            ],
            b"x",
        );
        assert_eq!(base, blocks);
        for changed in [
            RequestDigest::of(&RustCrypto, 3, [(11, &b"rd"[..])], b"x"),
            RequestDigest::of(&RustCrypto, 2, [(11, &b"rd"[..]), (15, b"lt=1")], b"x"),
            RequestDigest::of(&RustCrypto, 2, [(11, &b"r"[..])], b"dx"),
            RequestDigest::of(&RustCrypto, 2, [(11, &b"rd"[..])], b"y"),
        ] {
            assert_ne!(base, changed);
        }
    }

    #[test]
    fn statement_limits() {
        let (_, _, device) = fixture(SignatureAlgorithm::Ed25519);
        let answer = Answer {
            device: &device,
            token: &[0; 9],
            code: 0x41,
            request: &[0; 32],
        };
        let mut m = [0u8; MAX_STATEMENT_LEN];
        assert_eq!(answer.statement([], &mut m), Err(AnswerError::TooLong));
        let answer = Answer {
            token: &[0; 8],
            ..answer
        };
        let long = [0u8; 64];
        assert_eq!(
            answer.statement([&long[..]], &mut m),
            Err(AnswerError::TooLong)
        );
        let n = answer.statement([&long[..63]], &mut m).unwrap();
        assert_eq!(n, MAX_STATEMENT_LEN);
        let nine = [&b"a"[..]; 9];
        assert_eq!(answer.statement(nine, &mut m), Err(AnswerError::TooLong));
    }
}
