//! The request handlers: `POST /token`, `POST /authz-info`, `GET /keys/<identity>`, and the
//! checks the RD and the broker ask of a session (reads, lookups, publishing by token).

use super::{Binding, Held, PopKey, TokenCheck};
use crate::budget::Host;
use sigil_ace::{AceError, AceErrorCode, Confirmation, Permissions, Scope, ScopeEntry};
use sigil_crypto::{CryptoProvider, RustCrypto};
use sigil_identity::Identity;

use crate::auth::PeerAuth;
use crate::context::{Ctx, Rejection, Reply, Request, Response};
use sigil_ace::{TokenRequest, TokenResponse, CONTENT_FORMAT_ACE_CBOR, PROFILE_COAP_DTLS};
use sigil_coap::{Code, ContentFormat};

/// An `application/ace+cbor` error answer (RFC 9200 §5.8.3).
fn ace_error(code: Code, err: AceErrorCode, description: &str) -> Reply {
    let mut buf = [0u8; 128];
    let n = AceError {
        code: err,
        description: Some(description),
    }
    .encode(&mut buf)
    .unwrap_or(0);
    Reply::Response(Response {
        code,
        content_format: Some(CONTENT_FORMAT_ACE_CBOR),
        payload: buf[..n].to_vec(),
        ..Default::default()
    })
}

impl Ctx<'_> {
    /// The permissions the policy gives `client` on `object` at this server (`own`) or at
    /// the sensor `sensor`: `rd` lookup to every authenticated identity (here only); reading
    /// a sensor to the sensor itself and to identities granted it or its kit; publishing to a
    /// device's own topic (here only).
    fn policy(&self, client: &Identity, object: &str, own: bool, sensor: Option<&Identity>) -> u32 {
        if object == sigil_ace::RD_OBJECT {
            return if own { Permissions::READ.0 } else { 0 };
        }
        let Ok(id) = Identity::parse(object) else {
            return 0;
        };
        // Objects are named exactly as resource servers compare them.
        if object != id.to_string() || (!own && sensor != Some(&id)) {
            return 0;
        }
        let mut perms = 0;
        if id == *client {
            perms |= Permissions::READ.0;
            if own {
                perms |= Permissions::PUBLISH.0;
            }
        }
        let kit = self
            .svc
            .by_ep
            .get(&id)
            .and_then(|n| self.svc.entries.get(n))
            .map(|e| e.reg.authorized_by);
        if self
            .svc
            .read_grants
            .get(client)
            .is_some_and(|g| g.contains(&id) || kit.is_some_and(|k| g.contains(&k)))
        {
            perms |= Permissions::READ.0;
        }
        perms
    }

    /// `POST /token` (RFC 9200 §5.8).
    pub fn token(&mut self, req: &Request) -> Reply {
        let Some(auth) = req.auth.clone() else {
            self.count("token.refused.no_session");
            return ace_error(
                Code::UNAUTHORIZED,
                AceErrorCode::InvalidClient,
                "coaps:// session needed",
            );
        };
        let client = *auth.identity();
        if matches!(auth, PeerAuth::Token { .. }) || !self.svc.authorized.contains_key(&client) {
            self.count("token.refused.client");
            // Authenticated, but not a client this AC serves (RFC 9200 §5.8.3).
            return ace_error(
                Code::BAD_REQUEST,
                AceErrorCode::UnauthorizedClient,
                "not a provisioned identity",
            );
        }
        // Its rate before anything that costs: each request may cost a signature (a signed
        // token) and a verification (`req_cnf_pop`).
        if let Err(limited) = self.tokens.take_request(&client, req.peer, self.now) {
            self.count(limited.counter());
            crate::limited!(self.log, self.now.as_secs(), limited.counter(), warn, peer = %req.peer, identity = %client, whose = limited.whose, retry_secs = limited.retry_secs, "/token refused: rate limit reached");
            let description = match limited.whose {
                "session" => "rate limited: this session's token requests",
                _ => "rate limited: this client's token requests",
            };
            let Reply::Response(mut r) = ace_error(
                Code::SERVICE_UNAVAILABLE,
                AceErrorCode::InvalidRequest,
                description,
            ) else {
                unreachable!("ace_error answers a response")
            };
            r.max_age = Some(limited.retry_secs.max(1));
            return Reply::Response(r);
        }
        if req
            .content_format
            .is_some_and(|cf| cf != CONTENT_FORMAT_ACE_CBOR)
        {
            self.count("token.refused.malformed");
            return ace_error(
                Code::BAD_REQUEST,
                AceErrorCode::InvalidRequest,
                "application/ace+cbor expected",
            );
        }
        let asked = match TokenRequest::parse(&req.payload) {
            Ok(r) => r,
            Err(_) => {
                self.count("token.refused.malformed");
                return ace_error(Code::BAD_REQUEST, AceErrorCode::InvalidRequest, "malformed");
            }
        };
        let Some(authority) = self.authority.as_deref() else {
            return ace_error(Code::NOT_FOUND, AceErrorCode::InvalidRequest, "no AC here");
        };
        let own_audience = authority.audience().to_string();
        let server_key = authority.public_key();
        let audience = asked.audience.unwrap_or(&own_audience);
        let own = audience == own_audience;
        let sensor = if own {
            None
        } else {
            match Identity::parse(audience)
                .ok()
                .filter(|id| audience == id.to_string())
                .and_then(|id| self.svc.by_ep.get(&id))
                .and_then(|n| self.svc.entries.get(n))
                // A sensor without a key (PSK-only) cannot check a signed token.
                .and_then(|e| Some((e.reg.ep, e.reg.key?)))
            {
                Some(sensor) => Some(sensor),
                None => {
                    self.count("token.refused.audience");
                    return ace_error(
                        Code::BAD_REQUEST,
                        AceErrorCode::InvalidRequest,
                        "unknown audience",
                    );
                }
            }
        };
        let Some(scope) = asked.scope else {
            self.count("token.refused.scope");
            return ace_error(
                Code::BAD_REQUEST,
                AceErrorCode::InvalidScope,
                "scope needed",
            );
        };
        let asked_entries = scope.len();
        let granted: Vec<(String, u32)> = scope
            .iter()
            .filter_map(|e| {
                let p = e.permissions.0
                    & self.policy(&client, e.object, own, sensor.as_ref().map(|s| &s.0));
                (p != 0).then(|| (e.object.to_string(), p))
            })
            .collect();
        if granted.is_empty() {
            self.count("token.refused.scope");
            return ace_error(
                Code::BAD_REQUEST,
                AceErrorCode::InvalidScope,
                "nothing granted",
            );
        }
        let binding = match (asked.req_cnf, &auth) {
            // The key the session itself authenticated with: proven by the handshake.
            (
                Some(Confirmation::PublicKey { key, .. }),
                PeerAuth::RawPublicKey { key: own, .. },
            ) if key == *own => Binding::PublicKey(key),
            (Some(Confirmation::PublicKey { key, .. }), _) => {
                // Never bind the key of another provisioned identity: its holder could then
                // not post tokens of its own for it.
                let other = Identity::of_key(&RustCrypto, &key, b"")
                    .is_ok_and(|id| id != client && self.svc.authorized.contains_key(&id));
                if other {
                    self.count("token.refused.pop_key");
                    return ace_error(
                        Code::BAD_REQUEST,
                        AceErrorCode::UnsupportedPopKey,
                        "req_cnf is another identity's key",
                    );
                }
                // Any other key only with the client's proof that it holds it: its signature
                // over the client's own identity and the key (`req_cnf_pop`). Without it any
                // client could have a token bound to a key it read in another client's token,
                // post it first, and lock that client's own tokens out (`other_subject`).
                let Some(sig) = asked.req_cnf_pop else {
                    self.count("token.refused.pop_unproven");
                    crate::limited!(self.log, self.now.as_secs(), "token.refused.pop_unproven", warn, peer = %req.peer, identity = %client, "/token refused: req_cnf without a proof of possession");
                    return ace_error(
                        Code::BAD_REQUEST,
                        AceErrorCode::UnsupportedPopKey,
                        "req_cnf needs req_cnf_pop (the key's signature)",
                    );
                };
                let mut input = [0u8; sigil_ace::REQ_CNF_POP_INPUT_MAX];
                let proven = sigil_ace::req_cnf_pop_input(&client.to_string(), &key, &mut input)
                    .is_ok_and(|n| RustCrypto.verify(&key, &input[..n], sig).is_ok());
                if !proven {
                    self.count("token.refused.pop_proof");
                    crate::limited!(self.log, self.now.as_secs(), "token.refused.pop_proof", warn, peer = %req.peer, identity = %client, "/token refused: req_cnf_pop does not verify with req_cnf for this client");
                    return ace_error(
                        Code::BAD_REQUEST,
                        AceErrorCode::UnsupportedPopKey,
                        "req_cnf_pop does not verify (not this client's key)",
                    );
                }
                Binding::PublicKey(key)
            }
            (Some(_), _) => {
                self.count("token.refused.pop_key");
                return ace_error(
                    Code::BAD_REQUEST,
                    AceErrorCode::UnsupportedPopKey,
                    "req_cnf must be a public key",
                );
            }
            (None, PeerAuth::RawPublicKey { key, .. }) => Binding::PublicKey(*key),
            (None, _) if own => Binding::Symmetric,
            (None, _) => {
                self.count("token.refused.pop_key");
                return ace_error(
                    Code::BAD_REQUEST,
                    AceErrorCode::UnsupportedPopKey,
                    "a sensor needs a public PoP key",
                );
            }
        };
        let public_binding = matches!(binding, Binding::PublicKey(_));
        let now = self.now;
        let Some(authority) = self.authority.as_deref_mut() else {
            return ace_error(Code::NOT_FOUND, AceErrorCode::InvalidRequest, "no AC here");
        };
        let issued = match authority.issue(&client, audience, &granted, binding, now) {
            Ok(i) => i,
            Err(e) => {
                tracing::error!(error = %e, "cannot make a token");
                self.count("token.error");
                return ace_error(
                    Code::INTERNAL_SERVER_ERROR,
                    AceErrorCode::InvalidRequest,
                    "token",
                );
            }
        };
        let rs_key = match &sensor {
            Some((_, key)) => Some(*key),
            None if public_binding => Some(server_key),
            None => None,
        };
        // The granted scope goes back when it is less than the one asked for (§5.8.2).
        let narrowed = granted.len() < asked_entries
            || scope
                .iter()
                .zip(&granted)
                .any(|(a, g)| a.permissions.0 != g.1);
        let granted_entries: Vec<ScopeEntry<'_>> = granted
            .iter()
            .map(|(o, p)| ScopeEntry {
                object: o,
                permissions: Permissions(*p),
            })
            .collect();
        let response = TokenResponse {
            scope: narrowed.then(|| Scope::new(&granted_entries)),
            access_token: &issued.token,
            expires_in: Some(u64::from(issued.expires_in)),
            cnf: issued
                .pop
                .as_ref()
                .map(|(kid, key)| Confirmation::Symmetric { kid, key: &key[..] }),
            rs_cnf: rs_key.map(|key| Confirmation::PublicKey { kid: None, key }),
            ace_profile: Some(PROFILE_COAP_DTLS),
        };
        let mut buf = vec![0u8; sigil_ace::params::MAX_PARAMS_LEN + 128];
        let n = match response.encode(&mut buf) {
            Ok(n) => n,
            Err(_) => {
                self.count("token.error");
                return ace_error(
                    Code::INTERNAL_SERVER_ERROR,
                    AceErrorCode::InvalidRequest,
                    "token",
                );
            }
        };
        buf.truncate(n);
        self.count("token.issued");
        if public_binding {
            self.count("token.signed");
        }
        Reply::Response(Response {
            code: Code::CREATED,
            content_format: Some(CONTENT_FORMAT_ACE_CBOR),
            payload: buf,
            ..Default::default()
        })
    }

    /// `POST /authz-info` (RFC 9200 §5.10.1, RFC 9202 §3): keeps a valid token for this
    /// server. Open to plain CoAP: the token is its own proof (the AC's signature or
    /// encryption), and every answer is a few bytes, smaller than the token posted.
    pub fn authz_info(&mut self, req: &Request) -> Reply {
        let Some(authority) = self.authority.as_deref() else {
            return ace_error(Code::NOT_FOUND, AceErrorCode::InvalidRequest, "no AC here");
        };
        let svc = self.svc;
        let (now, tokens) = (self.now, &mut *self.tokens);
        let authorized = |id: &Identity| svc.authorized.contains_key(id);
        let mut accept =
            || tokens.accept(authority, &req.payload, Host::of(req.peer), now, authorized);
        // Cheap refusals before an ES256 verification, which is charged to the verification
        // budget for a datagram nobody authenticated ([`crate::verify`]).
        let result = match crate::verify::token_precheck(
            &req.payload,
            now,
            authority.audience(),
            authorized,
        ) {
            Err(why) => Err(why),
            Ok(true) if req.auth.is_none() => match svc.verify.run(req.peer, accept, Result::is_ok)
            {
                Ok(r) => r,
                Err(over) => return self.reject(crate::Rejection::VerifyBudget(over), req),
            },
            Ok(_) => accept(),
        };
        match result {
            Ok(_) => {
                self.count("authz.accepted");
                Reply::Response(Response {
                    code: Code::CREATED,
                    ..Default::default()
                })
            }
            Err(why) => {
                self.count(why.counter());
                let (code, payload) = why.answer();
                Reply::Response(Response {
                    code,
                    content_format: Some(CONTENT_FORMAT_ACE_CBOR),
                    payload,
                    ..Default::default()
                })
            }
        }
    }

    /// The token a session holds (by its PSK kid or its raw public key), checked at `now`.
    fn session_token(&self, auth: &PeerAuth) -> Result<&Held, TokenCheck> {
        let pop = match auth {
            PeerAuth::Token { kid, .. } => PopKey::Kid(kid.clone()),
            PeerAuth::RawPublicKey { identity, .. } => PopKey::Key(*identity),
            PeerAuth::Psk(_) => return Err(TokenCheck::None),
        };
        let svc = self.svc;
        self.tokens
            .valid(&pop, self.now, |id| svc.authorized.contains_key(id))
    }

    /// Whether a token's session may publish to the topic of `ep`: its token is valid, was
    /// issued to `ep` itself, and its scope allows publishing there (the reading is still
    /// verified by its signature).
    pub(crate) fn token_may_publish(&self, auth: &PeerAuth, ep: &Identity) -> bool {
        self.session_token(auth)
            .is_ok_and(|t| t.subject == *ep && t.allows(&ep.to_string(), Permissions::PUBLISH))
    }

    /// With `authorize_reads`: whether the request's session may read the readings of `ep`
    /// (authorized through `kit`): the sensor itself, an identity granted it or its kit, or a
    /// session whose token's scope allows reading it.
    pub(crate) fn may_read_sensor(
        &self,
        req: &Request,
        ep: &Identity,
        kit: &Identity,
    ) -> Result<(), Rejection> {
        let Some(auth) = req.auth.as_ref() else {
            return Err(Rejection::ReadWithoutSession);
        };
        if !matches!(auth, PeerAuth::Token { .. }) {
            let reader = auth.identity();
            // A session opened before its identity was revoked reads nothing more by its
            // grants (a key a token binds is on no list: the token decides, below).
            let active = self.svc.authorized.contains_key(reader);
            let granted = self
                .svc
                .read_grants
                .get(reader)
                .is_some_and(|objects| objects.contains(ep) || objects.contains(kit));
            if active && (reader == ep || granted) {
                return Ok(());
            }
        }
        match self.session_token(auth) {
            Ok(t) => {
                if t.allows(&ep.to_string(), Permissions::READ)
                    || t.allows(&kit.to_string(), Permissions::READ)
                {
                    Ok(())
                } else {
                    Err(Rejection::ReadNotGranted)
                }
            }
            // An identity session without a token was refused by the grants.
            Err(TokenCheck::None) if !matches!(auth, PeerAuth::Token { .. }) => {
                Err(Rejection::ReadNotGranted)
            }
            Err(why) => Err(Rejection::ReadToken(why)),
        }
    }

    /// `GET /keys/<identity>`: the reading key of a PSK-only node (`sigil_objects::mac`), as
    /// a COSE_Key (RFC 9052 §7: kty Symmetric, kid the identity, alg HMAC 256/64, k), so a
    /// subscriber can verify the node's MACed readings. Disclosed only over a coaps:// session
    /// that may read the node's readings (the node itself, a reader granted the node or its kit,
    /// or a token whose scope allows reading it), whatever `--authorize-reads` says: the key
    /// lets its holder make readings too (docs/security.md, "Nodes without public-key crypto").
    pub fn reading_key(&mut self, req: &Request) -> Reply {
        self.count("request.keys");
        // The session first: without one nothing is said, not even whether the node exists.
        if req.auth.is_none() {
            return self.reject(Rejection::ReadWithoutSession, req);
        }
        let node = req
            .path
            .get(1)
            .and_then(|t| Identity::parse(t).ok())
            .and_then(|id| Some((id, self.svc.reading_keys.get(&id)?)));
        let Some((ep, key)) = node else {
            // Not a PSK-only node (a signing device has no reading key to give).
            return self.reject(Rejection::NotFound, req);
        };
        let kit = self
            .svc
            .by_ep
            .get(&ep)
            .and_then(|n| self.entry(*n))
            .map_or(ep, |e| e.reg.authorized_by);
        if let Err(why) = self.may_read_sensor(req, &ep, &kit) {
            return self.reject(why, req);
        }
        let mut buf = [0u8; sigil_objects::mac::READING_KEY_COSE_LEN];
        let Ok(n) = sigil_objects::mac::encode_reading_key(key, &ep, &mut buf) else {
            return crate::context::respond(Code::INTERNAL_SERVER_ERROR);
        };
        self.count("keys.disclosed");
        crate::context::content(ContentFormat::COSE_KEY, buf[..n].to_vec())
    }

    /// With `authorize_reads`: whether the request's session may look up the RD or discover
    /// topics: any provisioned identity's session, or a token's whose scope allows `rd`.
    pub(crate) fn may_look_up(&self, req: &Request) -> Result<(), Rejection> {
        if !self.svc.config.authorize_reads {
            return Ok(());
        }
        let Some(auth) = req.auth.as_ref() else {
            return Err(Rejection::LookupWithoutSession);
        };
        if !matches!(auth, PeerAuth::Token { .. })
            && self.svc.authorized.contains_key(auth.identity())
        {
            return Ok(());
        }
        match self.session_token(auth) {
            Ok(t) if t.allows(sigil_ace::RD_OBJECT, Permissions::READ) => Ok(()),
            Ok(_) => Err(Rejection::LookupNotGranted),
            // A key that never held a token; a token session whose token is gone is 4.01.
            Err(TokenCheck::None) if !matches!(auth, PeerAuth::Token { .. }) => {
                Err(Rejection::LookupNotGranted)
            }
            Err(why) => Err(Rejection::ReadToken(why)),
        }
    }
}
