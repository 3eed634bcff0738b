//! CWT access tokens (RFC 8392) in the three forms a Sigil AC issues:
//!
//! - signed: a tagged COSE_Sign1 (RFC 9052 §4.2) under the AC's Ed25519 (EdDSA, -8) or P-256
//!   (ES256, -7) key; any resource server holding the AC's public key checks it offline;
//! - encrypted: a tagged COSE_Encrypt0 (RFC 9052 §5.2) under AES-CCM-16-64-128 (alg 10) with a
//!   key the AC shares with one resource server; the only form that may carry a symmetric PoP
//!   key (RFC 8747 §3.3);
//! - MACed: a tagged COSE_Mac0 (RFC 9052 §6.2) under HMAC 256/64 (alg 4, RFC 9053 §3.1) with a
//!   256-bit key the AC shares with one resource server: integrity without confidentiality, so
//!   like the signed form it never carries a symmetric PoP key.
//!
//! The `alg` is in the protected bucket; `kid` (and for Encrypt0 the 13-byte IV) are in the
//! unprotected one, as in RFC 8392 Appendix A. Tokens are written without the CWT tag (61): the
//! `/authz-info` resource and the `access_token` parameter already say the bytes are a CWT
//! (RFC 9200 §5.10.1); a received tag 61 is accepted.
//!
//! Opening a token verifies it before any claim is read, then parses the claims from the
//! caller's scratch buffer with every size and count bounded.

use crate::cnf::{Confirmation, MAX_KID_LEN};
use crate::error::{Claim, Malformed, TokenError};
use crate::scope::Scope;
use sigil_crypto::{
    CryptoError, CryptoProvider, PublicKey, Rng, SecretKey, SignatureAlgorithm, CCM16_NONCE_LEN,
    CCM8_TAG_LEN, SIGNATURE_LEN,
};
use sigil_objects::cbor::{CborError, Decoder, Encoder, Item};
use sigil_objects::cose::TAG_MAC0;
use sigil_time::UnixTime;
use subtle::ConstantTimeEq;

/// Longest token read or written, in bytes.
pub const MAX_TOKEN_LEN: usize = 512;
/// Most entries in a claims set (unknown claims count too).
pub const MAX_CLAIMS: usize = 16;
/// Longest text claim (`iss`, `sub`, `aud`) and `cti`.
pub const MAX_CLAIM_LEN: usize = 64;
/// Most entries in a COSE header bucket.
const MAX_HEADER_ENTRIES: usize = 4;

/// The CWT tag (RFC 8392 §6).
pub const TAG_CWT: u64 = 61;
const TAG_ENCRYPT0: u64 = 16;
const TAG_SIGN1: u64 = 18;
/// COSE `AES-CCM-16-64-128` (RFC 9053 §4.2).
pub const ALG_AES_CCM_16_64_128: i64 = 10;
/// COSE `HMAC 256/64`, its tag length and the length of the key the AC and a resource server
/// share for MACed tokens (RFC 9053 §3.1): the values MACed readings use too.
pub use sigil_objects::mac::{ALG_HMAC_256_64, HMAC_256_64_TAG_LEN, MAC_KEY_LEN};

const H_ALG: i64 = 1;
const H_CRIT: i64 = 2;
const H_KID: i64 = 4;
const H_IV: i64 = 5;
const H_PARTIAL_IV: i64 = 6;

/// The claims of an access token.
#[derive(Clone, Copy, Debug)]
pub struct Claims<'a> {
    pub iss: Option<&'a str>,
    /// The client the AC issued the token to (RFC 8392 §3.1.2): Sigil puts the identity the
    /// client authenticated to `/token` with, so a resource server can check it is still on the
    /// authorized list.
    pub sub: Option<&'a str>,
    pub aud: Option<&'a str>,
    pub exp: Option<UnixTime>,
    pub nbf: Option<UnixTime>,
    pub iat: Option<UnixTime>,
    pub cti: Option<&'a [u8]>,
    pub scope: Option<Scope<'a>>,
    pub cnf: Option<Confirmation<'a>>,
}

impl<'a> Claims<'a> {
    /// An empty claims set.
    pub const fn new() -> Self {
        Self {
            iss: None,
            sub: None,
            aud: None,
            exp: None,
            nbf: None,
            iat: None,
            cti: None,
            scope: None,
            cnf: None,
        }
    }

    /// Writes the claims set (a CBOR map in label order) into `out`.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, TokenError> {
        let mut e = Encoder::new(out);
        let n = [
            self.iss.is_some(),
            self.sub.is_some(),
            self.aud.is_some(),
            self.exp.is_some(),
            self.nbf.is_some(),
            self.iat.is_some(),
            self.cti.is_some(),
            self.cnf.is_some(),
            self.scope.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        e.map(n)?;
        if let Some(iss) = self.iss {
            check_len(Claim::Iss, iss.len())?;
            e.u64(Claim::Iss.label())?.text(iss)?;
        }
        if let Some(sub) = self.sub {
            check_len(Claim::Sub, sub.len())?;
            e.u64(Claim::Sub.label())?.text(sub)?;
        }
        if let Some(aud) = self.aud {
            check_len(Claim::Aud, aud.len())?;
            e.u64(Claim::Aud.label())?.text(aud)?;
        }
        for (claim, t) in [
            (Claim::Exp, self.exp),
            (Claim::Nbf, self.nbf),
            (Claim::Iat, self.iat),
        ] {
            if let Some(t) = t {
                e.u64(claim.label())?.i64(t.as_secs())?;
            }
        }
        if let Some(cti) = self.cti {
            check_len(Claim::Cti, cti.len())?;
            e.u64(Claim::Cti.label())?.bytes(cti)?;
        }
        if let Some(cnf) = &self.cnf {
            e.u64(Claim::Cnf.label())?;
            cnf.encode(&mut e)?;
        }
        if let Some(scope) = &self.scope {
            e.u64(Claim::Scope.label())?;
            scope.encode(&mut e)?;
        }
        Ok(e.finish())
    }

    /// Reads a claims set. Unknown claims are skipped (bounded by [`MAX_CLAIMS`]); known ones
    /// must have their registered type and appear once.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, TokenError> {
        let mut d = Decoder::new(bytes);
        let n = d.map().map_err(|_| Malformed::ClaimsSet)?;
        if n > MAX_CLAIMS {
            return Err(Malformed::ClaimsSet.into());
        }
        let mut c = Claims::new();
        let mut seen: u16 = 0;
        for _ in 0..n {
            let label = match d.item()? {
                Item::Unsigned(l) => Claim::from_label(l),
                Item::Negative(_) | Item::Text(_) => None,
                _ => return Err(Malformed::ClaimsSet.into()),
            };
            let Some(claim) = label else {
                d.skip()?;
                continue;
            };
            let bit = 1u16 << claim.label();
            if seen & bit != 0 {
                return Err(Malformed::DuplicateClaim(claim).into());
            }
            seen |= bit;
            let bad = || TokenError::from(Malformed::Claim(claim));
            match claim {
                Claim::Iss | Claim::Sub | Claim::Aud => {
                    let t = d.text().map_err(|_| bad())?;
                    check_len(claim, t.len())?;
                    match claim {
                        Claim::Iss => c.iss = Some(t),
                        Claim::Sub => c.sub = Some(t),
                        _ => c.aud = Some(t),
                    }
                }
                Claim::Exp | Claim::Nbf | Claim::Iat => {
                    let t = Some(UnixTime::from_secs(d.i64().map_err(|_| bad())?));
                    match claim {
                        Claim::Exp => c.exp = t,
                        Claim::Nbf => c.nbf = t,
                        _ => c.iat = t,
                    }
                }
                Claim::Cti => {
                    let b = d.bytes().map_err(|_| bad())?;
                    check_len(claim, b.len())?;
                    c.cti = Some(b);
                }
                Claim::Cnf => c.cnf = Some(Confirmation::parse(&mut d)?),
                Claim::Scope => c.scope = Some(Scope::parse(&mut d)?),
            }
        }
        d.finish()?;
        Ok(c)
    }
}

impl Default for Claims<'_> {
    fn default() -> Self {
        Self::new()
    }
}

fn check_len(claim: Claim, len: usize) -> Result<(), TokenError> {
    if len > MAX_CLAIM_LEN {
        Err(Malformed::Claim(claim).into())
    } else {
        Ok(())
    }
}

/// Which COSE structure protected a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenForm {
    Signed(SignatureAlgorithm),
    Encrypted,
    /// COSE_Mac0 under HMAC 256/64.
    Maced,
}

/// The AC's signing key as a resource server knows it.
#[derive(Clone, Copy, Debug)]
pub struct AcSigningKey<'a> {
    /// The kid the AC puts in its tokens; `None` accepts tokens with any kid or none.
    pub kid: Option<&'a [u8]>,
    pub key: PublicKey,
}

/// The key the AC and this resource server share for encrypted tokens.
#[derive(Clone, Copy)]
pub struct AcSharedKey<'a> {
    /// The kid the AC puts in its tokens; `None` accepts tokens with any kid or none.
    pub kid: Option<&'a [u8]>,
    pub key: &'a [u8; 16],
}

impl core::fmt::Debug for AcSharedKey<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AcSharedKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// The key the AC and this resource server share for MACed tokens.
#[derive(Clone, Copy)]
pub struct AcMacKey<'a> {
    /// The kid the AC puts in its tokens; `None` accepts tokens with any kid or none.
    pub kid: Option<&'a [u8]>,
    pub key: &'a [u8; MAC_KEY_LEN],
}

impl core::fmt::Debug for AcMacKey<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AcMacKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// The keys through which a resource server trusts its AC: a token protected by anything else
/// is refused with [`TokenError::UnknownKey`].
#[derive(Clone, Copy, Debug, Default)]
pub struct AcTrust<'a> {
    pub signing: Option<AcSigningKey<'a>>,
    pub shared: Option<AcSharedKey<'a>>,
    pub mac: Option<AcMacKey<'a>>,
}

/// A CBOR error while reading a field: a wrong type names the field, anything else (truncation,
/// indefinite lengths, nesting) stays the CBOR error it is.
fn typed(e: CborError, field: Malformed) -> TokenError {
    match e {
        CborError::UnexpectedType { .. } | CborError::Overflow => field.into(),
        e => e.into(),
    }
}

fn kid_matches(expected: Option<&[u8]>, got: Option<&[u8]>) -> bool {
    match (expected, got) {
        (Some(e), Some(g)) => e == g,
        // A token without a kid is tried against the one key of this kind.
        (Some(_), None) | (None, _) => true,
    }
}

/// Writes a signed token: a tagged COSE_Sign1 over the claims, signed with `key` (the AC's).
/// A symmetric PoP key is refused here ([`TokenError::ExposedPopKey`]).
pub fn encode_signed<P: CryptoProvider + ?Sized>(
    claims: &Claims<'_>,
    kid: Option<&[u8]>,
    key: &SecretKey,
    provider: &P,
    out: &mut [u8],
) -> Result<usize, TokenError> {
    if claims.cnf.is_some_and(|c| c.is_symmetric()) {
        return Err(TokenError::ExposedPopKey);
    }
    if kid.is_some_and(|k| k.is_empty() || k.len() > MAX_KID_LEN) {
        return Err(Malformed::Header("kid length").into());
    }
    let alg = key.algorithm();
    let mut payload = [0u8; MAX_TOKEN_LEN];
    let plen = claims.encode(&mut payload)?;
    let payload = &payload[..plen];
    let mut protected = [0u8; 4];
    let prot_len = {
        let mut e = Encoder::new(&mut protected);
        e.map(1)?.i64(H_ALG)?.i64(alg.cose())?;
        e.finish()
    };
    let protected = &protected[..prot_len];
    let mut tbs = [0u8; MAX_TOKEN_LEN + 32];
    let tbs_len =
        sigil_objects::cose::sig_structure(protected, &[], payload, &mut tbs).map_err(|_| {
            TokenError::Oversized {
                len: plen,
                max: MAX_TOKEN_LEN,
            }
        })?;
    let sig = provider
        .sign(key, &tbs[..tbs_len])
        .map_err(TokenError::Crypto)?;
    let mut e = Encoder::new(out);
    e.tag(TAG_SIGN1)?.array(4)?.bytes(protected)?;
    match kid {
        Some(kid) => e.map(1)?.i64(H_KID)?.bytes(kid)?,
        None => e.map(0)?,
    };
    e.bytes(payload)?.bytes(&sig.0)?;
    let n = e.finish();
    if n > MAX_TOKEN_LEN {
        return Err(TokenError::Oversized {
            len: n,
            max: MAX_TOKEN_LEN,
        });
    }
    Ok(n)
}

/// Writes an encrypted token: a tagged COSE_Encrypt0 under AES-CCM-16-64-128 with `key` (shared
/// by the AC and the resource server). The 13-byte IV is drawn from `rng`, so no two tokens
/// under one key share a nonce.
pub fn encode_encrypted<P: CryptoProvider + ?Sized>(
    claims: &Claims<'_>,
    kid: Option<&[u8]>,
    key: &[u8; 16],
    provider: &P,
    rng: &mut dyn Rng,
    out: &mut [u8],
) -> Result<usize, TokenError> {
    if kid.is_some_and(|k| k.is_empty() || k.len() > MAX_KID_LEN) {
        return Err(Malformed::Header("kid length").into());
    }
    let mut iv = [0u8; CCM16_NONCE_LEN];
    rng.fill(&mut iv).map_err(TokenError::Crypto)?;
    let mut body = [0u8; MAX_TOKEN_LEN];
    let plen = claims.encode(&mut body[..MAX_TOKEN_LEN - CCM8_TAG_LEN])?;
    let protected = [0xa1, 0x01, ALG_AES_CCM_16_64_128 as u8];
    let mut aad = [0u8; 32];
    let aad_len = enc_structure(&protected, &mut aad)?;
    let tag = provider
        .aes128_ccm16_64_seal(key, &iv, &aad[..aad_len], &mut body[..plen])
        .map_err(TokenError::Crypto)?;
    body[plen..plen + CCM8_TAG_LEN].copy_from_slice(&tag);
    let mut e = Encoder::new(out);
    e.tag(TAG_ENCRYPT0)?.array(3)?.bytes(&protected)?;
    // Deterministic order: kid (4) before IV (5).
    e.map(1 + usize::from(kid.is_some()))?;
    if let Some(kid) = kid {
        e.i64(H_KID)?.bytes(kid)?;
    }
    e.i64(H_IV)?.bytes(&iv)?;
    e.bytes(&body[..plen + CCM8_TAG_LEN])?;
    let n = e.finish();
    if n > MAX_TOKEN_LEN {
        return Err(TokenError::Oversized {
            len: n,
            max: MAX_TOKEN_LEN,
        });
    }
    Ok(n)
}

/// Writes a MACed token: a tagged COSE_Mac0 over the claims under HMAC 256/64 with `key`
/// (shared by the AC and the resource server). A symmetric PoP key is refused here
/// ([`TokenError::ExposedPopKey`]): the claims travel in the clear.
pub fn encode_maced<P: CryptoProvider + ?Sized>(
    claims: &Claims<'_>,
    kid: Option<&[u8]>,
    key: &[u8; MAC_KEY_LEN],
    provider: &P,
    out: &mut [u8],
) -> Result<usize, TokenError> {
    if claims.cnf.is_some_and(|c| c.is_symmetric()) {
        return Err(TokenError::ExposedPopKey);
    }
    if kid.is_some_and(|k| k.is_empty() || k.len() > MAX_KID_LEN) {
        return Err(Malformed::Header("kid length").into());
    }
    let mut payload = [0u8; MAX_TOKEN_LEN];
    let plen = claims.encode(&mut payload)?;
    let payload = &payload[..plen];
    let protected = [0xa1, 0x01, ALG_HMAC_256_64 as u8];
    let tag = hmac_256_64_tag(provider, key, &protected, payload)?;
    let mut e = Encoder::new(out);
    e.tag(TAG_MAC0)?.array(4)?.bytes(&protected)?;
    match kid {
        Some(kid) => e.map(1)?.i64(H_KID)?.bytes(kid)?,
        None => e.map(0)?,
    };
    e.bytes(payload)?.bytes(&tag)?;
    let n = e.finish();
    if n > MAX_TOKEN_LEN {
        return Err(TokenError::Oversized {
            len: n,
            max: MAX_TOKEN_LEN,
        });
    }
    Ok(n)
}

/// The HMAC 256/64 tag of a COSE_Mac0 with an empty external AAD (RFC 9052 §6.3), as a
/// token carries it: [`sigil_objects::mac::hmac_256_64_tag`], the one implementation tokens and
/// MACed readings share. `protected` is the protected bucket's bytes as they are on the wire.
pub fn hmac_256_64_tag<P: CryptoProvider + ?Sized>(
    provider: &P,
    key: &[u8; MAC_KEY_LEN],
    protected: &[u8],
    payload: &[u8],
) -> Result<[u8; HMAC_256_64_TAG_LEN], TokenError> {
    sigil_objects::mac::hmac_256_64_tag(provider, key, protected, &[], payload)
        .map_err(|_| TokenError::BufferTooSmall)
}

/// `Enc_structure = ["Encrypt0", protected, external_aad = h'']` (RFC 9052 §5.3).
fn enc_structure(protected: &[u8], out: &mut [u8]) -> Result<usize, TokenError> {
    let mut e = Encoder::new(out);
    e.array(3)?.text("Encrypt0")?.bytes(protected)?.bytes(&[])?;
    Ok(e.finish())
}

#[derive(Default)]
struct Headers<'a> {
    alg: Option<i64>,
    kid: Option<&'a [u8]>,
    iv: Option<&'a [u8]>,
}

/// Reads one header bucket into `h`. `protected` says which bucket: `alg` is only read from the
/// protected one, `kid` and `IV` from either, and a label in both buckets is refused.
fn read_bucket<'a>(
    d: &mut Decoder<'a>,
    h: &mut Headers<'a>,
    protected: bool,
) -> Result<(), TokenError> {
    let n = d
        .map()
        .map_err(|e| typed(e, Malformed::Header("bucket is not a map")))?;
    if n > MAX_HEADER_ENTRIES {
        return Err(Malformed::Header("too many header parameters").into());
    }
    for _ in 0..n {
        let label = d
            .i64()
            .map_err(|e| typed(e, Malformed::Header("label is not an integer")))?;
        match label {
            H_ALG if protected => {
                if h.alg
                    .replace(d.i64().map_err(|e| typed(e, Malformed::Header("alg")))?)
                    .is_some()
                {
                    return Err(Malformed::Header("alg repeated").into());
                }
            }
            H_ALG => return Err(Malformed::Header("alg not protected").into()),
            H_KID => {
                let kid = d
                    .bytes()
                    .map_err(|e| typed(e, Malformed::Header("kid is not bytes")))?;
                if kid.len() > MAX_KID_LEN {
                    return Err(Malformed::Header("kid length").into());
                }
                if h.kid.replace(kid).is_some() {
                    return Err(Malformed::Header("kid repeated").into());
                }
            }
            H_IV => {
                let iv = d
                    .bytes()
                    .map_err(|e| typed(e, Malformed::Header("IV is not bytes")))?;
                if h.iv.replace(iv).is_some() {
                    return Err(Malformed::Header("IV repeated").into());
                }
            }
            H_CRIT => return Err(Malformed::Header("critical parameters not understood").into()),
            H_PARTIAL_IV => return Err(Malformed::Header("Partial IV not supported").into()),
            _ => d.skip()?,
        }
    }
    Ok(())
}

/// Checks a token's signature or tag against the AC's keys in `trust` and reads its claims.
///
/// The claims are copied (signed and MACed forms) or decrypted (encrypted form) into `scratch`,
/// which must hold the payload; the returned claims borrow it. Nothing is read from a claim
/// before the signature or tag has been checked. Time, audience and required claims are
/// [`validate`]'s.
pub fn open<'s, P: CryptoProvider + ?Sized>(
    token: &[u8],
    trust: &AcTrust<'_>,
    provider: &P,
    scratch: &'s mut [u8],
) -> Result<(TokenForm, Claims<'s>), TokenError> {
    let (mut d, tag) = cose_start(token)?;
    let (form, len) = match tag {
        TAG_SIGN1 => open_sign1(&mut d, trust, provider, scratch)?,
        TAG_ENCRYPT0 => open_encrypt0(&mut d, trust, provider, scratch)?,
        TAG_MAC0 => open_mac0(&mut d, trust, provider, scratch)?,
        _ => return Err(Malformed::NotCose.into()),
    };
    let claims = Claims::parse(&scratch[..len])?;
    if form != TokenForm::Encrypted && claims.cnf.is_some_and(|c| c.is_symmetric()) {
        return Err(TokenError::ExposedPopKey);
    }
    Ok((form, claims))
}

/// The start of a COSE message of `items` elements: the array, the protected bucket (its
/// bytes, kept for the MAC or signature input) and the unprotected one, read into one
/// [`Headers`].
fn read_headers<'a>(
    d: &mut Decoder<'a>,
    items: usize,
) -> Result<(&'a [u8], Headers<'a>), TokenError> {
    if d.array().map_err(|_| Malformed::NotCose)? != items {
        return Err(Malformed::NotCose.into());
    }
    let protected = d
        .bytes()
        .map_err(|e| typed(e, Malformed::Header("protected is not bytes")))?;
    let mut h = Headers::default();
    if !protected.is_empty() {
        let mut p = Decoder::new(protected);
        read_bucket(&mut p, &mut h, true)?;
        p.finish()?;
    }
    read_bucket(d, &mut h, false)?;
    Ok((protected, h))
}

/// A COSE_Sign1 token taken apart, nothing verified yet.
struct Sign1<'a> {
    protected: &'a [u8],
    kid: Option<&'a [u8]>,
    alg: SignatureAlgorithm,
    payload: &'a [u8],
    signature: &'a [u8],
}

/// The checks of a COSE_Sign1 token that come before its signature: structure, algorithm,
/// signature length (cheap refusals first).
fn parse_sign1<'a>(d: &mut Decoder<'a>) -> Result<Sign1<'a>, TokenError> {
    let (protected, h) = read_headers(d, 4)?;
    let payload = d
        .bytes()
        .map_err(|e| typed(e, Malformed::Header("payload is not bytes")))?;
    let signature = d
        .bytes()
        .map_err(|e| typed(e, Malformed::Header("signature is not bytes")))?;
    d.finish()?;
    let alg = h.alg.ok_or(Malformed::Header("alg missing"))?;
    let alg = SignatureAlgorithm::from_cose(alg).ok_or(TokenError::UnsupportedAlgorithm(alg))?;
    if signature.len() != SIGNATURE_LEN {
        return Err(TokenError::BadSignature);
    }
    Ok(Sign1 {
        protected,
        kid: h.kid,
        alg,
        payload,
        signature,
    })
}

/// The start of a token: within [`MAX_TOKEN_LEN`], a COSE tag (under an optional CWT tag);
/// the decoder is left at the COSE message.
fn cose_start(token: &[u8]) -> Result<(Decoder<'_>, u64), TokenError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::Oversized {
            len: token.len(),
            max: MAX_TOKEN_LEN,
        });
    }
    let mut d = Decoder::new(token);
    let mut tag = match d.item()? {
        Item::Tag(t) => t,
        _ => return Err(Malformed::NotCose.into()),
    };
    if tag == TAG_CWT {
        tag = match d.item()? {
            Item::Tag(t) => t,
            _ => return Err(Malformed::NotCose.into()),
        };
    }
    Ok((d, tag))
}

/// Everything [`open`] checks of a signed token (CWT in COSE_Sign1) before the signature, at
/// the cost of parsing it: `Ok` when only the signature is left to check. A resource server
/// whose AC signs with `alg` calls it before spending a signature verification on a token
/// ([`crate::rs`]), so malformed tokens and tokens of another algorithm cost no verification.
/// Other forms (MACed, encrypted) and other algorithms are refused with
/// [`TokenError::UnknownKey`], as by a trust store holding only that signing key.
pub fn precheck_signed(token: &[u8], alg: SignatureAlgorithm) -> Result<(), TokenError> {
    let (mut d, tag) = cose_start(token)?;
    match tag {
        TAG_SIGN1 => match parse_sign1(&mut d)? {
            t if t.alg == alg => Ok(()),
            _ => Err(TokenError::UnknownKey),
        },
        TAG_ENCRYPT0 | TAG_MAC0 => Err(TokenError::UnknownKey),
        _ => Err(Malformed::NotCose.into()),
    }
}

fn open_sign1<P: CryptoProvider + ?Sized>(
    d: &mut Decoder<'_>,
    trust: &AcTrust<'_>,
    provider: &P,
    scratch: &mut [u8],
) -> Result<(TokenForm, usize), TokenError> {
    let Sign1 {
        protected,
        kid,
        alg,
        payload,
        signature,
    } = parse_sign1(d)?;
    let ac = trust.signing.ok_or(TokenError::UnknownKey)?;
    if ac.key.algorithm() != alg || !kid_matches(ac.kid, kid) {
        return Err(TokenError::UnknownKey);
    }
    let mut tbs = [0u8; MAX_TOKEN_LEN + 32];
    let n =
        sigil_objects::cose::sig_structure(protected, &[], payload, &mut tbs).map_err(|_| {
            TokenError::Oversized {
                len: payload.len(),
                max: MAX_TOKEN_LEN,
            }
        })?;
    provider
        .verify(&ac.key, &tbs[..n], signature)
        .map_err(|e| match e {
            CryptoError::BadSignature | CryptoError::SignatureLength => TokenError::BadSignature,
            // A key that does not decode was configured by the caller, not sent by the peer.
            e => TokenError::Crypto(e),
        })?;
    let out = scratch
        .get_mut(..payload.len())
        .ok_or(TokenError::BufferTooSmall)?;
    out.copy_from_slice(payload);
    Ok((TokenForm::Signed(alg), payload.len()))
}

fn open_encrypt0<P: CryptoProvider + ?Sized>(
    d: &mut Decoder<'_>,
    trust: &AcTrust<'_>,
    provider: &P,
    scratch: &mut [u8],
) -> Result<(TokenForm, usize), TokenError> {
    let (protected, h) = read_headers(d, 3)?;
    let ciphertext = d
        .bytes()
        .map_err(|e| typed(e, Malformed::Header("ciphertext is not bytes")))?;
    d.finish()?;
    let alg = h.alg.ok_or(Malformed::Header("alg missing"))?;
    if alg != ALG_AES_CCM_16_64_128 {
        return Err(TokenError::UnsupportedAlgorithm(alg));
    }
    let iv: &[u8; CCM16_NONCE_LEN] =
        h.iv.ok_or(Malformed::Header("IV missing"))?
            .try_into()
            .map_err(|_| Malformed::Header("IV length"))?;
    if ciphertext.len() < CCM8_TAG_LEN {
        return Err(TokenError::BadTag);
    }
    let ac = trust.shared.ok_or(TokenError::UnknownKey)?;
    if !kid_matches(ac.kid, h.kid) {
        return Err(TokenError::UnknownKey);
    }
    let mut aad = [0u8; 32];
    let aad_len =
        enc_structure(protected, &mut aad).map_err(|_| Malformed::Header("protected too long"))?;
    let (body, tag) = ciphertext.split_at(ciphertext.len() - CCM8_TAG_LEN);
    let tag: &[u8; CCM8_TAG_LEN] = tag.try_into().map_err(|_| TokenError::BadTag)?;
    let out = scratch
        .get_mut(..body.len())
        .ok_or(TokenError::BufferTooSmall)?;
    out.copy_from_slice(body);
    provider
        .aes128_ccm16_64_open(ac.key, iv, &aad[..aad_len], out, tag)
        .map_err(|e| match e {
            CryptoError::BadTag => TokenError::BadTag,
            e => TokenError::Crypto(e),
        })
        .inspect_err(|_| out.fill(0))?;
    Ok((TokenForm::Encrypted, body.len()))
}

fn open_mac0<P: CryptoProvider + ?Sized>(
    d: &mut Decoder<'_>,
    trust: &AcTrust<'_>,
    provider: &P,
    scratch: &mut [u8],
) -> Result<(TokenForm, usize), TokenError> {
    let (protected, h) = read_headers(d, 4)?;
    let payload = d
        .bytes()
        .map_err(|e| typed(e, Malformed::Header("payload is not bytes")))?;
    let tag = d
        .bytes()
        .map_err(|e| typed(e, Malformed::Header("tag is not bytes")))?;
    d.finish()?;
    let alg = h.alg.ok_or(Malformed::Header("alg missing"))?;
    if alg != ALG_HMAC_256_64 {
        return Err(TokenError::UnsupportedAlgorithm(alg));
    }
    if tag.len() != HMAC_256_64_TAG_LEN {
        return Err(TokenError::BadTag);
    }
    let ac = trust.mac.ok_or(TokenError::UnknownKey)?;
    if !kid_matches(ac.kid, h.kid) {
        return Err(TokenError::UnknownKey);
    }
    let expected = hmac_256_64_tag(provider, ac.key, protected, payload)?;
    if !bool::from(expected[..].ct_eq(tag)) {
        return Err(TokenError::BadTag);
    }
    let out = scratch
        .get_mut(..payload.len())
        .ok_or(TokenError::BufferTooSmall)?;
    out.copy_from_slice(payload);
    Ok((TokenForm::Maced, payload.len()))
}

/// A token that passed every check of [`validate`]: verified by the AC's key, unexpired, for
/// this audience, with a scope and an expiry.
#[derive(Clone, Copy, Debug)]
pub struct AccessToken<'a> {
    pub form: TokenForm,
    pub claims: Claims<'a>,
    pub aud: &'a str,
    pub exp: UnixTime,
    pub scope: Scope<'a>,
}

impl AccessToken<'_> {
    /// Whether the token grants `wanted` on `object`.
    pub fn allows(&self, object: &str, wanted: crate::Permissions) -> bool {
        self.scope.allows(object, wanted)
    }

    /// The proof-of-possession key the client must show, if the token names one.
    pub fn pop_key(&self) -> Option<&Confirmation<'_>> {
        self.claims.cnf.as_ref()
    }
}

/// Opens `token` (see [`open`]) and checks it for this resource server at `now`:
/// `aud`, `exp` and `scope` present, `now < exp`, `nbf <= now`, and `aud == expected_audience`.
///
/// There is no clock-skew allowance: a caller that wants one moves `now`. What the resource
/// server still has to add is not here: a replay cache of `cti` values for `/authz-info`, and a
/// list of revoked client identities or tokens to check the result against.
pub fn validate<'s, P: CryptoProvider + ?Sized>(
    token: &[u8],
    now: UnixTime,
    expected_audience: &str,
    trust: &AcTrust<'_>,
    provider: &P,
    scratch: &'s mut [u8],
) -> Result<AccessToken<'s>, TokenError> {
    let (form, claims) = open(token, trust, provider, scratch)?;
    check(form, claims, now, expected_audience)
}

/// The claim checks of [`validate`] on already opened claims.
pub fn check<'s>(
    form: TokenForm,
    claims: Claims<'s>,
    now: UnixTime,
    expected_audience: &str,
) -> Result<AccessToken<'s>, TokenError> {
    let aud = claims.aud.ok_or(TokenError::MissingClaim(Claim::Aud))?;
    let exp = claims.exp.ok_or(TokenError::MissingClaim(Claim::Exp))?;
    let scope = claims.scope.ok_or(TokenError::MissingClaim(Claim::Scope))?;
    if now >= exp {
        return Err(TokenError::Expired { exp, now });
    }
    if let Some(nbf) = claims.nbf {
        if now < nbf {
            return Err(TokenError::NotYetValid { nbf, now });
        }
    }
    if aud != expected_audience {
        return Err(TokenError::WrongAudience);
    }
    Ok(AccessToken {
        form,
        claims,
        aud,
        exp,
        scope,
    })
}
