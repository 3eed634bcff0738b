//! A client of the access-control server (ACE, RFC 9200) and of a resource server's DTLS
//! profile (RFC 9202): ask `/token` for an access token over an authenticated coaps://
//! session, post it to the resource server's `/authz-info`, then open the session the token's
//! proof-of-possession key names.

use crate::coap::{CoapClient, RequestSpec};
use crate::transport::{Carrier, Security, Transport};
use anyhow::{anyhow, bail, Context, Result};
use sigil_ace::{
    AceError, Confirmation, Permissions, Scope, ScopeEntry, TokenRequest, TokenResponse,
    CONTENT_FORMAT_ACE_CBOR, CONTENT_FORMAT_CWT,
};
use sigil_coap::Code;
use sigil_crypto::{PublicKey, RustCrypto, SecretKey};
use sigil_identity::Identity;
use std::net::SocketAddr;

/// What `/token` gave: the token, and what the client needs to use it.
#[derive(Clone, Debug)]
pub struct Ticket {
    pub token: Vec<u8>,
    pub expires_in: Option<u64>,
    /// The symmetric PoP key (kid, key) the AC made: the DTLS PSK identity and PSK.
    pub pop: Option<(Vec<u8>, Vec<u8>)>,
    /// The resource server's public key, to pin (`rs_cnf`).
    pub rs_key: Option<PublicKey>,
    /// Bytes of the request and response bodies on the wire.
    pub request_bytes: usize,
    pub response_bytes: usize,
}

/// A refusal from `/token` or `/authz-info`: the CoAP code and the ACE error, if the body
/// carried one.
#[derive(Debug)]
pub struct Refused {
    pub code: Code,
    pub what: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.what)
    }
}

impl std::error::Error for Refused {}

fn refused(code: Code, payload: &[u8]) -> Refused {
    let what = match AceError::parse(payload) {
        Ok(e) => match e.description {
            Some(d) => format!("{} ({d})", e.code.name()),
            None => e.code.name().to_string(),
        },
        Err(_) => String::from_utf8_lossy(payload).into_owned(),
    };
    Refused { code, what }
}

/// A key a token should bind (`req_cnf`) and the identity the client's session authenticates
/// ([`session_identity`]): the request carries the key's signature over both
/// (`req_cnf_pop`, [`sigil_ace::req_cnf_pop_input`]), which the AC asks for before it binds any
/// key other than the session's own.
pub struct BindKey<'a> {
    pub key: &'a SecretKey,
    pub client: Identity,
}

/// The identity a session with these credentials authenticates to the server: the PSK
/// identity (a provisioned identity's text form), or `h(P)` of the client's own raw public key
/// or certified key. `None` without own credentials.
pub fn session_identity(security: &Security) -> Option<Identity> {
    use sigil_crypto::CryptoProvider;
    let of_key = |sk: &SecretKey| {
        let pk = RustCrypto.public_key(sk).ok()?;
        Identity::of_key(&RustCrypto, &pk, b"").ok()
    };
    match security {
        Security::Psk { identity, .. } => std::str::from_utf8(identity)
            .ok()
            .and_then(|t| Identity::parse(t).ok()),
        Security::RawPublicKey { own: Some(sk), .. } => of_key(sk),
        Security::Certificate {
            own: Some((_, sk)), ..
        } => of_key(sk),
        _ => None,
    }
}

/// Asks the AC (over `c`, an authenticated coaps:// session) for a token for `audience` (the
/// AC's own server when `None`) with `scope`, binding `bind`'s key if given (with its proof of
/// possession).
pub async fn request_token(
    c: &mut CoapClient,
    audience: Option<&str>,
    scope: &[(String, Permissions)],
    bind: Option<BindKey<'_>>,
) -> Result<Ticket> {
    use sigil_crypto::CryptoProvider;
    let req_cnf: Option<PublicKey> = match &bind {
        Some(b) => Some(
            RustCrypto
                .public_key(b.key)
                .map_err(|e| anyhow!("the key to bind: {e}"))?,
        ),
        None => None,
    };
    let pop = match (&bind, &req_cnf) {
        (Some(b), Some(pk)) => {
            let mut input = [0u8; sigil_ace::REQ_CNF_POP_INPUT_MAX];
            let n = sigil_ace::req_cnf_pop_input(&b.client.to_string(), pk, &mut input)
                .map_err(|e| anyhow!("req_cnf_pop: {e}"))?;
            Some(
                RustCrypto
                    .sign(b.key, &input[..n])
                    .map_err(|e| anyhow!("req_cnf_pop: {e}"))?,
            )
        }
        _ => None,
    };
    let entries: Vec<ScopeEntry<'_>> = scope
        .iter()
        .map(|(o, p)| ScopeEntry {
            object: o,
            permissions: *p,
        })
        .collect();
    let req = TokenRequest {
        audience,
        scope: Some(Scope::new(&entries)),
        req_cnf: req_cnf.map(|key| Confirmation::PublicKey { kid: None, key }),
        req_cnf_pop: pop.as_ref().map(|s| &s.0[..]),
    };
    let mut body = vec![0u8; sigil_ace::params::MAX_PARAMS_LEN];
    let n = req
        .encode(&mut body)
        .map_err(|e| anyhow!("token request: {e}"))?;
    body.truncate(n);
    let r = c
        .request(
            Code::POST,
            &RequestSpec {
                path: "token",
                content_format: Some(CONTENT_FORMAT_ACE_CBOR),
                payload: &body,
                ..Default::default()
            },
        )
        .await?;
    if r.code != Code::CREATED {
        return Err(refused(r.code, &r.payload).into());
    }
    let resp = TokenResponse::parse(&r.payload).map_err(|e| anyhow!("token response: {e}"))?;
    let pop = match resp.cnf {
        Some(Confirmation::Symmetric { kid, key }) => Some((kid.to_vec(), key.to_vec())),
        _ => None,
    };
    let rs_key = match resp.rs_cnf {
        Some(Confirmation::PublicKey { key, .. }) => Some(key),
        _ => None,
    };
    Ok(Ticket {
        token: resp.access_token.to_vec(),
        expires_in: resp.expires_in,
        pop,
        rs_key,
        request_bytes: body.len(),
        response_bytes: r.payload.len(),
    })
}

/// Posts `token` to a resource server's `/authz-info` (RFC 9200 §5.10.1).
pub async fn post_authz_info(c: &mut CoapClient, token: &[u8]) -> Result<()> {
    let r = c
        .request(
            Code::POST,
            &RequestSpec {
                path: "authz-info",
                content_format: Some(CONTENT_FORMAT_CWT),
                payload: token,
                ..Default::default()
            },
        )
        .await?;
    if r.code != Code::CREATED {
        return Err(refused(r.code, &r.payload).into());
    }
    Ok(())
}

/// The whole DTLS-profile dance against a server that is its own AC: over a session with
/// the client's own credentials, ask for a token for `scope`, post it to `/authz-info`, and
/// open a new session with the token's symmetric PoP key as PSK (RFC 9202 §3.3). Returns the
/// ticket and the new transport.
pub async fn open_with_token(
    server: SocketAddr,
    own: Security,
    config: sigil_dtls::Config,
    carrier: Carrier,
    scope: &[(String, Permissions)],
) -> Result<(Ticket, Transport)> {
    let t = Transport::open_over(server, own, config, carrier)
        .await
        .context("session with the access-control server")?;
    let mut c = CoapClient::over(t, sigil_coap::TransmissionParameters::default());
    let ticket = request_token(&mut c, None, scope, None)
        .await
        .context("POST /token")?;
    post_authz_info(&mut c, &ticket.token)
        .await
        .context("POST /authz-info")?;
    c.close().await;
    let Some((kid, key)) = ticket.pop.clone() else {
        bail!("the token binds a public key, not a PSK: use the client's own key session");
    };
    let t = Transport::open_over(
        server,
        Security::Psk {
            identity: kid,
            key,
            ecdhe: false,
        },
        config,
        carrier,
    )
    .await
    .context("session with the token's PoP key")?;
    Ok((ticket, t))
}
