//! The messages of the token endpoint (RFC 9200 §5.8) and the error answers of `/token` and
//! `/authz-info` (§5.8.3, §5.10.1.1), as `application/ace+cbor` maps with the CBOR labels of
//! RFC 9200 Table 5 (and `rs_cnf`, RFC 9201 §5).
//!
//! A client asks with a [`TokenRequest`] (`audience`, `scope`, optionally `req_cnf`: the public
//! key the token should bind, with `req_cnf_pop`, the client's proof that it holds that key:
//! [`req_cnf_pop_input`]); the AC answers with a [`TokenResponse`] (`access_token`,
//! `expires_in`, the `cnf` it made for a symmetric proof-of-possession key, the resource
//! server's key in `rs_cnf`, `ace_profile`), or with an [`AceError`]. Every parser is bounded
//! and refuses what it does not understand with a [`TokenError`].

use crate::cnf::Confirmation;
use crate::error::{Malformed, TokenError};
use crate::scope::Scope;
use crate::token::{MAX_CLAIM_LEN, MAX_TOKEN_LEN};
use sigil_objects::cbor::{Decoder, Encoder, Item};

/// `application/ace+cbor` (RFC 9200 §8.16).
pub const CONTENT_FORMAT_ACE_CBOR: u16 = 19;
/// `application/cwt` (RFC 8392 §9.3): a token posted to `/authz-info` as it is.
pub const CONTENT_FORMAT_CWT: u16 = 61;
/// `ace_profile` value of the DTLS profile, `coap_dtls` (RFC 9202 §11.2).
pub const PROFILE_COAP_DTLS: u64 = 1;
/// Longest request or response body read here.
pub const MAX_PARAMS_LEN: usize = MAX_TOKEN_LEN + 256;
/// Most parameters one message may carry (unknown ones are skipped up to this bound).
const MAX_PARAMS: usize = 16;

const P_ACCESS_TOKEN: u64 = 1;
const P_EXPIRES_IN: u64 = 2;
const P_REQ_CNF: u64 = 4;
const P_AUDIENCE: u64 = 5;
const P_CNF: u64 = 8;
const P_SCOPE: u64 = 9;
const P_ERROR: u64 = 30;
const P_ERROR_DESCRIPTION: u64 = 31;
const P_ACE_PROFILE: u64 = 38;
const P_RS_CNF: u64 = 41;
/// `req_cnf_pop` goes under the label -65537 (a negative label, outside the unsigned values
/// RFC 9200 registers): CBOR's argument of that negative integer.
const REQ_CNF_POP_ARG: u64 = 65536;
/// How `req_cnf_pop` is known inside this module (no unsigned label is this large).
const P_REQ_CNF_POP: u64 = u64::MAX;
/// Bytes of [`req_cnf_pop_input`] at most (the client's identity is at most
/// [`MAX_CLAIM_LEN`] bytes of text).
pub const REQ_CNF_POP_INPUT_MAX: usize = 160;
/// What [`req_cnf_pop_input`] starts with: the signature proves possession for `/token` and
/// nothing else (no reading, hello or pairing message starts so).
const REQ_CNF_POP_CONTEXT: &str = "sigil /token req_cnf proof of possession";

/// What a client asks `/token` for.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokenRequest<'a> {
    /// The resource server the token is for (becomes the token's `aud`).
    pub audience: Option<&'a str>,
    /// What the client wants to do there (AIF, [`Scope`]).
    pub scope: Option<Scope<'a>>,
    /// The public key the token should bind (asymmetric proof of possession, RFC 9201 §3.1).
    /// Without it the AC binds the key the client authenticated with, or makes a symmetric key.
    pub req_cnf: Option<Confirmation<'a>>,
    /// The client's proof that it holds the private half of `req_cnf`: that key's signature over
    /// [`req_cnf_pop_input`] (the client's own identity and the key). Sigil's AC binds a key
    /// other than the session's own only with it, so no client gets a token for another's key.
    pub req_cnf_pop: Option<&'a [u8]>,
}

/// What a client signs with the key it asks `/token` to bind (`req_cnf`), as `req_cnf_pop`:
/// the CBOR array `["sigil /token req_cnf proof of possession", client, alg, h'key']`, where
/// `client` is the identity the client's session authenticates (its text form), `alg` the
/// key's algorithm name (`ed25519`, `p256`) and `key` its public bytes. It names the client,
/// so another client cannot use it; it names the key, so it proves nothing about another.
pub fn req_cnf_pop_input(
    client: &str,
    key: &sigil_crypto::PublicKey,
    out: &mut [u8],
) -> Result<usize, TokenError> {
    check_text(client)?;
    let mut e = Encoder::new(out);
    e.array(4)?
        .text(REQ_CNF_POP_CONTEXT)?
        .text(client)?
        .text(key.algorithm().name())?
        .bytes(key.as_bytes())?;
    Ok(e.finish())
}

/// What `/token` answers on success.
#[derive(Clone, Copy, Debug)]
pub struct TokenResponse<'a> {
    pub access_token: &'a [u8],
    /// Seconds the token stays valid.
    pub expires_in: Option<u64>,
    /// The symmetric proof-of-possession key the AC made for the client (RFC 9201 §3.2).
    pub cnf: Option<Confirmation<'a>>,
    /// The resource server's public key, for the client to pin in its handshake (RFC 9201 §5).
    pub rs_cnf: Option<Confirmation<'a>>,
    /// The scope granted, when it is less than the one asked for (RFC 9200 §5.8.2).
    pub scope: Option<Scope<'a>>,
    pub ace_profile: Option<u64>,
}

/// The error codes of RFC 9200 §5.8.3 (Table 4's CBOR values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AceErrorCode {
    InvalidRequest,
    InvalidClient,
    InvalidGrant,
    UnauthorizedClient,
    UnsupportedGrantType,
    InvalidScope,
    UnsupportedPopKey,
    IncompatibleAceProfiles,
    /// A value this crate does not know.
    Other(u64),
}

impl AceErrorCode {
    pub const fn value(self) -> u64 {
        match self {
            Self::InvalidRequest => 1,
            Self::InvalidClient => 2,
            Self::InvalidGrant => 3,
            Self::UnauthorizedClient => 4,
            Self::UnsupportedGrantType => 5,
            Self::InvalidScope => 6,
            Self::UnsupportedPopKey => 7,
            Self::IncompatibleAceProfiles => 8,
            Self::Other(v) => v,
        }
    }

    pub const fn from_value(v: u64) -> Self {
        match v {
            1 => Self::InvalidRequest,
            2 => Self::InvalidClient,
            3 => Self::InvalidGrant,
            4 => Self::UnauthorizedClient,
            5 => Self::UnsupportedGrantType,
            6 => Self::InvalidScope,
            7 => Self::UnsupportedPopKey,
            8 => Self::IncompatibleAceProfiles,
            v => Self::Other(v),
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::InvalidClient => "invalid_client",
            Self::InvalidGrant => "invalid_grant",
            Self::UnauthorizedClient => "unauthorized_client",
            Self::UnsupportedGrantType => "unsupported_grant_type",
            Self::InvalidScope => "invalid_scope",
            Self::UnsupportedPopKey => "unsupported_pop_key",
            Self::IncompatibleAceProfiles => "incompatible_ace_profiles",
            Self::Other(_) => "unknown_error",
        }
    }
}

/// An error answer: its code and a short description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AceError<'a> {
    pub code: AceErrorCode,
    pub description: Option<&'a str>,
}

impl<'a> TokenRequest<'a> {
    /// Writes the request map. The scope goes as a byte string holding the AIF array, as the
    /// `scope` parameter carries AIF (RFC 9237 §3).
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, TokenError> {
        let mut scope_buf = [0u8; 1024];
        let scope_len = aif_bytes(self.scope.as_ref(), &mut scope_buf)?;
        let mut e = Encoder::new(out);
        let n = usize::from(self.audience.is_some())
            + usize::from(self.scope.is_some())
            + usize::from(self.req_cnf.is_some())
            + usize::from(self.req_cnf_pop.is_some());
        e.map(n)?;
        if let Some(c) = &self.req_cnf {
            e.u64(P_REQ_CNF)?;
            c.encode(&mut e)?;
        }
        if let Some(sig) = self.req_cnf_pop {
            e.i64(-1 - REQ_CNF_POP_ARG as i64)?.bytes(sig)?;
        }
        if let Some(a) = self.audience {
            check_text(a)?;
            e.u64(P_AUDIENCE)?.text(a)?;
        }
        if let Some(n) = scope_len {
            e.u64(P_SCOPE)?.bytes(&scope_buf[..n])?;
        }
        Ok(e.finish())
    }

    /// Reads a request map. The scope may be a byte string wrapping the AIF array or the array
    /// itself; a text scope is refused (Sigil's scopes are AIF).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, TokenError> {
        let mut r = TokenRequest::default();
        each_param(bytes, |label, d| {
            match label {
                P_AUDIENCE => {
                    let t = d.text().map_err(|_| Malformed::Param("audience"))?;
                    check_text(t)?;
                    r.audience = Some(t);
                }
                P_SCOPE => r.scope = Some(scope_param(d)?),
                P_REQ_CNF => r.req_cnf = Some(Confirmation::parse(d)?),
                P_REQ_CNF_POP => {
                    if r.req_cnf_pop.is_some() {
                        return Err(Malformed::Param("parameter appears twice").into());
                    }
                    let sig = d.bytes().map_err(|_| Malformed::Param("req_cnf_pop"))?;
                    if sig.is_empty() || sig.len() > 128 {
                        return Err(Malformed::Param("req_cnf_pop length").into());
                    }
                    r.req_cnf_pop = Some(sig);
                }
                _ => d.skip()?,
            }
            Ok(())
        })?;
        Ok(r)
    }
}

impl<'a> TokenResponse<'a> {
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, TokenError> {
        let mut scope_buf = [0u8; 1024];
        let scope_len = aif_bytes(self.scope.as_ref(), &mut scope_buf)?;
        let mut e = Encoder::new(out);
        let n = 1
            + usize::from(self.expires_in.is_some())
            + usize::from(self.scope.is_some())
            + usize::from(self.cnf.is_some())
            + usize::from(self.rs_cnf.is_some())
            + usize::from(self.ace_profile.is_some());
        e.map(n)?;
        e.u64(P_ACCESS_TOKEN)?.bytes(self.access_token)?;
        if let Some(x) = self.expires_in {
            e.u64(P_EXPIRES_IN)?.u64(x)?;
        }
        if let Some(c) = &self.cnf {
            e.u64(P_CNF)?;
            c.encode(&mut e)?;
        }
        if let Some(n) = scope_len {
            e.u64(P_SCOPE)?.bytes(&scope_buf[..n])?;
        }
        if let Some(p) = self.ace_profile {
            e.u64(P_ACE_PROFILE)?.u64(p)?;
        }
        if let Some(c) = &self.rs_cnf {
            e.u64(P_RS_CNF)?;
            c.encode(&mut e)?;
        }
        Ok(e.finish())
    }

    pub fn parse(bytes: &'a [u8]) -> Result<Self, TokenError> {
        let (mut token, mut expires_in, mut cnf, mut rs_cnf, mut profile) =
            (None, None, None, None, None);
        let mut scope = None;
        each_param(bytes, |label, d| {
            match label {
                P_ACCESS_TOKEN => {
                    let t = d.bytes().map_err(|_| Malformed::Param("access_token"))?;
                    if t.len() > MAX_TOKEN_LEN {
                        return Err(TokenError::Oversized {
                            len: t.len(),
                            max: MAX_TOKEN_LEN,
                        });
                    }
                    token = Some(t);
                }
                P_EXPIRES_IN => {
                    expires_in = Some(d.u64().map_err(|_| Malformed::Param("expires_in"))?)
                }
                P_CNF => cnf = Some(Confirmation::parse(d)?),
                P_RS_CNF => rs_cnf = Some(Confirmation::parse(d)?),
                P_SCOPE => scope = Some(scope_param(d)?),
                P_ACE_PROFILE => {
                    profile = Some(d.u64().map_err(|_| Malformed::Param("ace_profile"))?)
                }
                _ => d.skip()?,
            }
            Ok(())
        })?;
        Ok(Self {
            access_token: token.ok_or(Malformed::Param("access_token missing"))?,
            expires_in,
            cnf,
            rs_cnf,
            scope,
            ace_profile: profile,
        })
    }
}

impl<'a> AceError<'a> {
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, TokenError> {
        let mut e = Encoder::new(out);
        e.map(1 + usize::from(self.description.is_some()))?;
        e.u64(P_ERROR)?.u64(self.code.value())?;
        if let Some(d) = self.description {
            e.u64(P_ERROR_DESCRIPTION)?.text(d)?;
        }
        Ok(e.finish())
    }

    pub fn parse(bytes: &'a [u8]) -> Result<Self, TokenError> {
        let (mut code, mut description) = (None, None);
        each_param(bytes, |label, d| {
            match label {
                P_ERROR => {
                    code = Some(AceErrorCode::from_value(
                        d.u64().map_err(|_| Malformed::Param("error"))?,
                    ))
                }
                P_ERROR_DESCRIPTION => {
                    description = Some(
                        d.text()
                            .map_err(|_| Malformed::Param("error_description"))?,
                    )
                }
                _ => d.skip()?,
            }
            Ok(())
        })?;
        Ok(Self {
            code: code.ok_or(Malformed::Param("error missing"))?,
            description,
        })
    }
}

/// Walks one parameter map of at most [`MAX_PARAMS_LEN`] bytes: `f` gets each parameter with an
/// unsigned label (seen once at most) and must read or skip its value; other labels are
/// skipped here. Nothing may follow the map.
fn each_param<'a>(
    bytes: &'a [u8],
    mut f: impl FnMut(u64, &mut Decoder<'a>) -> Result<(), TokenError>,
) -> Result<(), TokenError> {
    if bytes.len() > MAX_PARAMS_LEN {
        return Err(TokenError::Oversized {
            len: bytes.len(),
            max: MAX_PARAMS_LEN,
        });
    }
    let mut d = Decoder::new(bytes);
    let n = params_map(&mut d)?;
    let mut seen = 0u64;
    for _ in 0..n {
        let Some(label) = label(&mut d)? else {
            d.skip()?;
            continue;
        };
        once(&mut seen, label)?;
        f(label, &mut d)?;
    }
    d.finish()?;
    Ok(())
}

fn params_map(d: &mut Decoder<'_>) -> Result<usize, TokenError> {
    let n = d.map().map_err(|_| Malformed::Param("not a map"))?;
    if n > MAX_PARAMS {
        return Err(Malformed::Param("too many parameters").into());
    }
    Ok(n)
}

/// A parameter label: unsigned integers are RFC 9200's; anything else is skipped by the caller.
fn label(d: &mut Decoder<'_>) -> Result<Option<u64>, TokenError> {
    Ok(match d.item()? {
        Item::Unsigned(l) => Some(l),
        Item::Negative(REQ_CNF_POP_ARG) => Some(P_REQ_CNF_POP),
        Item::Negative(_) | Item::Text(_) => None,
        _ => return Err(Malformed::Param("label").into()),
    })
}

/// Refuses a parameter that appears twice (only labels below 64 are tracked; the others are
/// skipped anyway).
fn once(seen: &mut u64, label: u64) -> Result<(), TokenError> {
    if label < 64 {
        let bit = 1u64 << label;
        if *seen & bit != 0 {
            return Err(Malformed::Param("parameter appears twice").into());
        }
        *seen |= bit;
    }
    Ok(())
}

fn check_text(t: &str) -> Result<(), TokenError> {
    if t.is_empty() || t.len() > MAX_CLAIM_LEN {
        return Err(Malformed::Param("text length").into());
    }
    Ok(())
}

/// The AIF array of `scope` written into `buf`, for a `scope` parameter (a byte string
/// holding it, RFC 9237 §3).
fn aif_bytes(scope: Option<&Scope<'_>>, buf: &mut [u8]) -> Result<Option<usize>, TokenError> {
    let Some(s) = scope else {
        return Ok(None);
    };
    let mut e = Encoder::new(buf);
    s.encode(&mut e)?;
    Ok(Some(e.finish()))
}

fn scope_param<'a>(d: &mut Decoder<'a>) -> Result<Scope<'a>, TokenError> {
    match d.peek()? {
        Item::Bytes(b) => {
            d.skip()?;
            let mut inner = Decoder::new(b);
            let s = Scope::parse(&mut inner)?;
            inner.finish()?;
            Ok(s)
        }
        Item::Array(_) => Scope::parse(d),
        _ => Err(Malformed::Param("scope is not AIF").into()),
    }
}
