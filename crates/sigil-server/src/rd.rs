//! The Resource Directory (RFC 9176): registration (§5), update (§5.3.1), removal (§5.3.2),
//! lookup (§6) and lifetimes, with the key check of RFC 8387 §7 step 1 and the signed
//! resynchronisation of §8.2.
//!
//! The key announcement (`key`, `alg`, `grp`, `io`) and the binding check come from
//! `sigil_identity`, the resync statement from `sigil_objects::resync`; this module maps their
//! refusals to [`Rejection`]s.

use crate::auth::{mismatched, PeerAuth};
use crate::context::{respond, Ctx, Operation, Rejection, Reply, Request, Response};
use crate::store::{Batch, IdentityKind, Ownership, Registration, StoreError};
use base64::Engine;
use sigil_coap::link::{self, write_link};
use sigil_coap::{Code, ContentFormat};
use sigil_crypto::PublicKey;
use sigil_freshness as freshness;
use sigil_identity::{AnnounceError, Binding, BindingError, Identity, KeyAnnouncement};
use sigil_objects::resync;

pub(crate) const B64: base64::engine::GeneralPurpose =
    base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Lifetimes a registration or update may ask for, in seconds: RFC 9176 §5 gives `lt` the
/// range 1-4294967295 (early drafts of it said 60-4294967295; the published RFC does not).
/// A short lifetime is the owner's choice: only the owner may set it (see [`may_change`]).
pub const LIFETIME_RANGE: (u64, u64) = (1, u32::MAX as u64);

/// A registration with its hosted resources parsed out.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub reg: Registration,
    /// Registered hrefs without the leading `/`, with their content-format and rt.
    pub resources: Vec<(String, Option<u16>, Option<String>)>,
    /// The address of the last registration or update that proved the device (a statement
    /// or its session), since this server started: where a signed 4.09 may go
    /// ([`crate::answers`]).
    pub peer: Option<std::net::SocketAddr>,
    /// The digest of the registration request that made this entry with a statement
    /// ([`registration_digest`]), so that the same request repeated (a retransmission the
    /// dedup cache did not keep) gets the same answer instead of 4.01 `stale sq`.
    pub made_by: Option<[u8; 32]>,
}

/// How long after a registration an exact repeat of its request is answered as it was: a
/// sender's retransmissions end within EXCHANGE_LIFETIME (RFC 7252 §4.8.2, 247 s).
const REPEAT_WINDOW_SECS: i64 = 247;

/// What identifies a registration request for [`Entry::made_by`]: its statement (`sq`,
/// `ss`), lifetime, base and payload.
fn registration_digest(crypto: &impl sigil_crypto::CryptoProvider, req: &Request) -> [u8; 32] {
    let q = |k| req.query(k).unwrap_or("").as_bytes();
    crypto.sha256(&[
        b"sigil registration repeat v1\0",
        q("ep"),
        b"\0",
        q("sq"),
        b"\0",
        q("ss"),
        b"\0",
        q("lt"),
        b"\0",
        q("base"),
        b"\0",
        &req.payload,
    ])
}

impl Entry {
    pub fn new(reg: Registration) -> Self {
        let resources = link::parse(&reg.links)
            .map(|links| {
                links
                    .flatten()
                    .map(|l| {
                        (
                            l.target.trim_start_matches('/').to_string(),
                            l.attr("ct").and_then(|c| c.parse().ok()),
                            l.attr("rt").map(str::to_string),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Entry {
            reg,
            resources,
            peer: None,
            made_by: None,
        }
    }

    /// Whether the registration's lifetime has not run out at `now` (RFC 9176 §5).
    pub fn is_live(&self, now: i64) -> bool {
        self.reg.expires_at >= now
    }

    /// The content-format registered for `href`.
    pub fn content_format(&self, href: &str) -> Option<u16> {
        self.resources
            .iter()
            .find(|(h, _, _)| h == href)
            .and_then(|r| r.1)
    }

    pub fn hosts(&self, href: &str) -> bool {
        self.resources.iter().any(|(h, _, _)| h == href)
    }
}

/// The key a registration announces (RFC 8387 §7 step 1), read from its link attributes
/// (`sigil_identity::announce`).
pub(crate) struct AnnouncedKey {
    pub key: PublicKey,
    /// The other kit members' keys (§4.1), empty for a single device.
    pub group: Vec<PublicKey>,
    /// The other information `O` of `I = h(P|O)`.
    pub other: Vec<u8>,
}

/// Every link that carries a key announcement must carry the same one.
pub(crate) fn announced_key(text: &str) -> Result<AnnouncedKey, Rejection> {
    let links = link::parse(text).map_err(|_| Rejection::MalformedLinkFormat)?;
    let mut announced: Option<KeyAnnouncement<'_>> = None;
    for l in links.flatten() {
        let this = match KeyAnnouncement::parse(l.attrs().map(|a| (a.name, a.value))) {
            Ok(None) => continue,
            Ok(Some(a)) => a,
            Err(AnnounceError::BadGroup) => return Err(Rejection::BadGroup),
            Err(AnnounceError::MissingKey) => return Err(Rejection::MissingKey),
            Err(_) => return Err(Rejection::BadKey),
        };
        if announced.as_ref().is_some_and(|prev| prev != &this) {
            return Err(Rejection::BadKey);
        }
        announced = Some(this);
    }
    let announced = announced.ok_or(Rejection::MissingKey)?;
    Ok(AnnouncedKey {
        key: *announced.key(),
        group: announced.group().collect(),
        other: announced.other_info().to_vec(),
    })
}

impl From<BindingError> for Rejection {
    fn from(e: BindingError) -> Self {
        match e {
            BindingError::Mismatch => Rejection::KeyMismatch,
            BindingError::BadGroup => Rejection::BadGroup,
            BindingError::BadKey => Rejection::BadKey,
        }
    }
}

/// Handler results: a refusal is an answer too; only storage failures abort the batch.
type Handled = Result<Reply, StoreError>;

/// What a request proves about who sends it (docs/security.md, "Registration ownership").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proof {
    /// Plain CoAP without a statement: anyone could have sent it.
    Nothing,
    /// Plain CoAP with a valid registration statement for this `sq`.
    Statement(u64),
    /// A DTLS session that speaks for the identity, with the `sq` of a statement if it also
    /// carried one.
    Session(Option<u64>),
}

impl Proof {
    /// The ownership a registration made by this request gets.
    fn ownership(self) -> Ownership {
        match self {
            Self::Nothing => Ownership::Open,
            Self::Statement(_) => Ownership::Signed,
            Self::Session(_) => Ownership::Session,
        }
    }

    /// The announced sequence number, which moves the high-water mark (RFC 8387 §8.2).
    fn seq(self) -> Option<u64> {
        match self {
            Self::Nothing | Self::Session(None) => None,
            Self::Statement(s) | Self::Session(Some(s)) => Some(s),
        }
    }
}

/// Whether a request proving `proof` may change a live registration owned as `owner`, and
/// how the registration is owned afterwards: an `Open` entry anyone may change, a `Signed` one
/// needs a statement or a session, a `Session` one a session; a stronger proof upgrades it.
fn may_change(owner: Ownership, proof: Proof) -> Result<Ownership, Rejection> {
    let by = proof.ownership();
    match owner {
        Ownership::Session if by != Ownership::Session => Err(Rejection::NotOwner(owner)),
        Ownership::Signed if by == Ownership::Open => Err(Rejection::NotOwner(owner)),
        _ => Ok(owner.max(by)),
    }
}

impl Ctx<'_> {
    fn refuse(&mut self, why: Rejection, req: &Request) -> Handled {
        Ok(self.reject(why, req))
    }

    /// When `id` was revoked, if it is.
    pub(crate) fn revoked_at(&self, id: &Identity) -> Option<i64> {
        self.svc.revoked.get(id).copied()
    }

    /// The revoked identity behind a registration, with when it was revoked: the device
    /// itself, or the kit (group) that authorized it (docs/security.md, "Revocation").
    pub(crate) fn entry_revoked(&self, e: &Entry) -> Option<(Identity, i64)> {
        [e.reg.ep, e.reg.authorized_by]
            .into_iter()
            .find_map(|id| Some((id, self.revoked_at(&id)?)))
    }

    /// Counts and logs a refusal because `revoked` (an identity, and when it was revoked) is
    /// revoked, naming it, and makes the answer (4.03, diagnostic "revoked").
    pub(crate) fn reject_revoked(
        &mut self,
        why: Rejection,
        (id, at): (Identity, i64),
        req: &Request,
    ) -> Reply {
        self.count(why.counter());
        let now = self.secs();
        crate::limited!(self.log, now, why.counter(), warn, identity = %id, revoked_at = at, reason = why.reason(), peer = %req.peer, path = req.path.join("/"), "request refused: the identity is revoked");
        why.reply(req.confirmable())
    }

    /// Whether the request came over a DTLS session for `ep`/`key`; a session for anyone else
    /// is refused.
    fn session_for(
        req: &Request,
        ep: &Identity,
        key: Option<&PublicKey>,
    ) -> Result<bool, Rejection> {
        if mismatched(req.auth.as_ref(), ep, key) {
            return Err(Rejection::PeerMismatch(Operation::Register));
        }
        Ok(req.auth.is_some())
    }

    /// Checks `sq`/`ss` if both are present: the signature over the registration statement
    /// for `op` (`sigil_objects::resync`), and a number above the identity's high-water mark
    /// (`stale` otherwise), so no statement is accepted twice. Returns the accepted number.
    fn statement(
        &self,
        req: &Request,
        ep: &Identity,
        key: Option<&PublicKey>,
        op: resync::Operation<'_>,
        stale: Rejection,
    ) -> Result<Option<u64>, Rejection> {
        let (Some(sq), Some(ss)) = (req.query("sq"), req.query("ss")) else {
            return Ok(None);
        };
        // A registration without a key (a PSK-only node) has no statement to check.
        let key = key.ok_or(Rejection::BadResyncSignature)?;
        let (Ok(seq), Ok(sig)) = (sq.parse::<u64>(), B64.decode(ss)) else {
            return Err(Rejection::MalformedResync);
        };
        // The cheap refusal first: a number at or below the mark is stale whatever it signs.
        if seq <= self.highest(ep) {
            return Err(stale);
        }
        let digest = op
            .digest(&self.svc.crypto)
            .ok_or(Rejection::MalformedResync)?;
        let verify = || resync::verify_statement(&self.svc.crypto, key, ep, seq, &digest, &sig);
        let verified = if req.auth.is_some() {
            // The datagram came over an authenticated session.
            verify()
        } else {
            self.svc
                .verify
                .run(req.peer, verify, Result::is_ok)
                .map_err(Rejection::VerifyBudget)?
        };
        if verified.is_err() {
            return Err(Rejection::BadResyncSignature);
        }
        Ok(Some(seq))
    }

    /// What the request proves, for `ep`/`key` and the operation `op`.
    fn proof(
        &self,
        req: &Request,
        ep: &Identity,
        key: Option<&PublicKey>,
        op: resync::Operation<'_>,
        stale: Rejection,
    ) -> Result<Proof, Rejection> {
        let session = Self::session_for(req, ep, key)?;
        let seq = self.statement(req, ep, key, op, stale)?;
        Ok(match (session, seq) {
            (true, seq) => Proof::Session(seq),
            (false, Some(seq)) => Proof::Statement(seq),
            (false, None) => Proof::Nothing,
        })
    }

    /// §8.2 resynchronisation: an accepted statement moves the identity's high-water mark
    /// forward to its `sq`.
    fn resync(&mut self, b: &Batch<'_>, ep: &Identity, proof: Proof) -> Result<(), StoreError> {
        let Some(seq) = proof.seq() else {
            return Ok(());
        };
        let highest = self.highest(ep);
        let new = freshness::resync(highest, seq);
        if new != highest {
            b.set_highest(ep, new, self.secs())?;
            self.new_highest.insert(*ep, new);
            self.count("freshness.resynchronised");
        }
        Ok(())
    }

    /// `POST /rd`: RFC 9176 §5 registration, with the key check of RFC 8387 §7 step 1. A
    /// new entry may be made by anyone (a plain RFC 9176 client); replacing a live one needs
    /// the ownership it has ([`may_change`]).
    pub fn register(&mut self, b: &Batch<'_>, req: &Request) -> Handled {
        if req
            .content_format
            .is_some_and(|cf| cf != ContentFormat::LINK_FORMAT.0)
        {
            return self.refuse(Rejection::UnsupportedFormat(Operation::Register), req);
        }
        let lt = match req.query_int("lt", LIFETIME_RANGE.0, LIFETIME_RANGE.1) {
            Ok(lt) => lt.map(|v| v as u32),
            Err(why) => return self.refuse(why, req),
        };
        let lifetime = lt.unwrap_or(self.svc.config.default_lifetime);
        let Some(ep_text) = req.query("ep") else {
            return self.refuse(Rejection::MissingEp, req);
        };
        let Ok(ep) = Identity::parse(ep_text) else {
            return self.refuse(Rejection::BadEp, req);
        };
        let Ok(text) = std::str::from_utf8(&req.payload) else {
            return self.refuse(Rejection::MalformedLinkFormat, req);
        };
        let announced = match announced_key(text) {
            Ok(a) => a,
            // A node with only a pre-shared key (provisioned as one) announces no key: its own
            // PSK session is the proof (docs/security.md, "Nodes without public-key crypto").
            // Any other identity must announce the key its identity is bound to.
            Err(Rejection::MissingKey)
                if req.auth == Some(PeerAuth::Psk(ep))
                    && self.svc.reading_keys.contains_key(&ep) =>
            {
                return self.register_keyless(b, req, ep, lifetime, text);
            }
            Err(why) => return self.refuse(why, req),
        };
        let key = announced.key;
        let binding = match Binding::check(
            &self.svc.crypto,
            &ep,
            &key,
            &announced.group,
            &announced.other,
        ) {
            Ok(b) => b,
            Err(e) => return self.refuse(e.into(), req),
        };
        if let Err(why) = Self::session_for(req, &ep, Some(&key)) {
            return self.refuse(why, req);
        }
        // Checked before anything is written: a failed precondition performs nothing.
        if !req.conditions.hold(Some(None)) {
            // `/rd` always exists and has no ETag (RFC 7252 §5.10.8).
            return self.refuse(Rejection::PreconditionFailed, req);
        }
        let listed = binding.authorized_by(|i| self.is_authorized(i));
        // A revoked device is refused even if its kit is still listed; a device listed only
        // through a revoked kit too. Never added back by trust on first use.
        let revoked = match (self.revoked_at(&ep), listed, binding.group) {
            (Some(at), _, _) => Some((ep, at)),
            (None, None, Some(g)) => self.revoked_at(&g).map(|at| (g, at)),
            _ => None,
        };
        if let Some(r) = revoked {
            return Ok(self.reject_revoked(Rejection::Revoked(Operation::Register), r, req));
        }
        let first_use = listed.is_none()
            && self.svc.config.danger_trust_on_first_use
            && binding.group.is_none();
        if listed.is_none() && !first_use {
            return self.refuse(Rejection::NotAuthorized(Operation::Register), req);
        }
        let op = resync::Operation {
            kind: resync::OperationKind::Register,
            lifetime: lt,
            base: req.query("base"),
            payload: &req.payload,
        };
        let digest = registration_digest(&self.svc.crypto, req);
        let proof = match self.proof(req, &ep, Some(&key), op, Rejection::StaleStatement) {
            Ok(p) => p,
            Err(Rejection::StaleStatement) if self.is_repeat(&ep, req, &digest) => {
                return self.answer_repeat(&ep, req);
            }
            Err(why) => return self.refuse(why, req),
        };
        let owner = match self.live_entry_of(&ep) {
            Some(e) => match may_change(e.reg.owner, proof) {
                Ok(o) => o,
                Err(why) => return self.refuse(why, req),
            },
            None => proof.ownership(),
        };
        let authorized_by = match listed {
            Some(by) => by,
            None => {
                b.add_identity(&ep, IdentityKind::Device, "trust on first use", self.secs())?;
                self.new_authorized.push(ep);
                self.count("register.trust_on_first_use");
                let now = self.secs();
                crate::limited!(self.log, now, "register.trust_on_first_use", warn, ep = %ep, peer = %req.peer, "identity added by trust on first use");
                ep
            }
        };
        self.resync(b, &ep, proof)?;
        let now = self.secs();
        let reg = Registration {
            id: 0,
            ep,
            authorized_by,
            key: Some(key),
            other_info: announced.other,
            group_keys: announced.group,
            base: req.query("base").map(str::to_string),
            lifetime,
            links: text.to_string(),
            registered_at: now,
            updated_at: now,
            expires_at: now.saturating_add(i64::from(lifetime)),
            owner,
        };
        self.store_registration(b, req, reg, proof.seq().map(|_| digest))
    }

    /// Registration of a node with only a pre-shared key (provisioned as one), over its own PSK
    /// session: no key, no statement, no group; the identity itself must be on the authorized
    /// list (it was assigned with the PSK, not derived from a key). Owned by the session from
    /// then on.
    fn register_keyless(
        &mut self,
        b: &Batch<'_>,
        req: &Request,
        ep: Identity,
        lifetime: u32,
        text: &str,
    ) -> Handled {
        if req.query("sq").is_some() || req.query("ss").is_some() {
            return self.refuse(Rejection::BadResyncSignature, req);
        }
        if !req.conditions.hold(Some(None)) {
            return self.refuse(Rejection::PreconditionFailed, req);
        }
        if let Some(at) = self.revoked_at(&ep) {
            let why = Rejection::Revoked(Operation::Register);
            return Ok(self.reject_revoked(why, (ep, at), req));
        }
        if !self.is_authorized(&ep) {
            return self.refuse(Rejection::NotAuthorized(Operation::Register), req);
        }
        let proof = Proof::Session(None);
        let owner = match self.live_entry_of(&ep) {
            Some(e) => match may_change(e.reg.owner, proof) {
                Ok(o) => o,
                Err(why) => return self.refuse(why, req),
            },
            None => proof.ownership(),
        };
        self.count("register.keyless");
        let now = self.secs();
        let reg = Registration {
            id: 0,
            ep,
            authorized_by: ep,
            key: None,
            other_info: Vec::new(),
            group_keys: Vec::new(),
            base: req.query("base").map(str::to_string),
            lifetime,
            links: text.to_string(),
            registered_at: now,
            updated_at: now,
            expires_at: now.saturating_add(i64::from(lifetime)),
            owner,
        };
        self.store_registration(b, req, reg, None)
    }

    /// Stores a checked registration and answers with its location.
    fn store_registration(
        &mut self,
        b: &Batch<'_>,
        req: &Request,
        reg: Registration,
        made_by: Option<[u8; 32]>,
    ) -> Handled {
        let ep = reg.ep;
        let id = b.upsert_registration(&reg)?;
        let mut entry = Entry::new(reg);
        entry.reg.id = id;
        if entry.reg.owner != Ownership::Open {
            entry.peer = Some(req.peer);
        }
        entry.made_by = made_by;
        self.new_entries.push(entry);
        self.count("register.accepted");
        let now = self.secs();
        crate::limited!(self.log, now, "register.accepted", info, ep = %ep, id, peer = %req.peer, "registered");
        Ok(Reply::Response(Response {
            code: Code::CREATED,
            location_path: vec!["rd".into(), id.to_string()],
            answer_for: Some(ep),
            ..Default::default()
        }))
    }

    /// Whether `req` repeats, from the same address, the request that made `ep`'s live
    /// registration less than [`REPEAT_WINDOW_SECS`] ago (its digest is `digest`): a
    /// retransmission whose exchange the dedup cache did not keep.
    fn is_repeat(&self, ep: &Identity, req: &Request, digest: &[u8; 32]) -> bool {
        let now = self.secs();
        self.live_entry_of(ep).is_some_and(|e| {
            e.made_by.as_ref() == Some(digest)
                && e.peer == Some(req.peer)
                && now.saturating_sub(e.reg.registered_at) < REPEAT_WINDOW_SECS
        })
    }

    /// The answer the registration `req` repeats had: 2.01 with its location, changing
    /// nothing (`register.repeat_answered`).
    fn answer_repeat(&mut self, ep: &Identity, req: &Request) -> Handled {
        let Some(id) = self.live_entry_of(ep).map(|e| e.reg.id) else {
            return self.refuse(Rejection::StaleStatement, req);
        };
        self.count("register.repeat_answered");
        Ok(Reply::Response(Response {
            code: Code::CREATED,
            location_path: vec!["rd".into(), id.to_string()],
            answer_for: Some(*ep),
            ..Default::default()
        }))
    }

    /// The registration `/rd/<id>` names, if its lifetime has not run out (revoked or not).
    fn live_entry(&self, id: &str) -> Option<Entry> {
        let e = self.entry(id.parse().ok()?)?;
        e.is_live(self.secs()).then(|| e.clone())
    }

    /// The registration `/rd/<id>` names for an update or removal: refused as revoked if its
    /// device or kit is, as unknown if its lifetime has run out.
    fn changeable_entry(&self, id: &str) -> Result<Entry, (Rejection, Option<(Identity, i64)>)> {
        let e = self
            .live_entry(id)
            .ok_or((Rejection::UnknownRegistration, None))?;
        match self.entry_revoked(&e) {
            Some(r) => Err((Rejection::Revoked(Operation::Register), Some(r))),
            None => Ok(e),
        }
    }

    /// Answers a refusal of [`Ctx::changeable_entry`].
    fn refuse_entry(
        &mut self,
        why: (Rejection, Option<(Identity, i64)>),
        req: &Request,
    ) -> Handled {
        Ok(match why {
            (why, Some(revoked)) => self.reject_revoked(why, revoked, req),
            (why, None) => self.reject(why, req),
        })
    }

    /// The live registration of `ep`, as this batch sees it.
    fn live_entry_of(&self, ep: &Identity) -> Option<Entry> {
        let id = self
            .new_entries
            .iter()
            .rev()
            .chain(self.svc.entries.values())
            .find(|e| e.reg.ep == *ep)?
            .reg
            .id;
        // `entry` applies this batch's removals and newest changes.
        let e = self.entry(id)?;
        e.is_live(self.secs()).then(|| e.clone())
    }

    /// `POST /rd/N`: RFC 9176 §5.3.1 registration update, by whoever owns the entry.
    pub fn update(&mut self, b: &Batch<'_>, req: &Request, id: &str) -> Handled {
        let mut e = match self.changeable_entry(id) {
            Ok(e) => e,
            Err(why) => return self.refuse_entry(why, req),
        };
        if !self.is_authorized(&e.reg.authorized_by) {
            return self.refuse(Rejection::NotAuthorized(Operation::Register), req);
        }
        if let Err(why) = Self::session_for(req, &e.reg.ep, e.reg.key.as_ref()) {
            return self.refuse(why, req);
        }
        let lt = match req.query_int("lt", LIFETIME_RANGE.0, LIFETIME_RANGE.1) {
            Ok(lt) => lt.map(|v| v as u32),
            Err(why) => return self.refuse(why, req),
        };
        let lifetime = lt.unwrap_or(e.reg.lifetime);
        if !req.conditions.hold(Some(None)) {
            return self.refuse(Rejection::PreconditionFailed, req);
        }
        let base = req.query("base");
        let op = resync::Operation {
            kind: resync::OperationKind::Update,
            lifetime: lt,
            base,
            payload: &req.payload,
        };
        let proof = match self.proof(
            req,
            &e.reg.ep,
            e.reg.key.as_ref(),
            op,
            Rejection::StaleStatement,
        ) {
            Ok(p) => p,
            Err(why) => return self.refuse(why, req),
        };
        let owner = match may_change(e.reg.owner, proof) {
            Ok(o) => o,
            Err(why) => return self.refuse(why, req),
        };
        self.resync(b, &e.reg.ep, proof)?;
        let now = self.secs();
        let expires = now.saturating_add(i64::from(lifetime));
        b.update_registration(e.reg.id, lifetime, base, now, expires, owner)?;
        e.reg.lifetime = lifetime;
        e.reg.updated_at = now;
        e.reg.expires_at = expires;
        e.reg.owner = owner;
        if owner != Ownership::Open {
            e.peer = Some(req.peer);
        }
        if let Some(base) = base {
            e.reg.base = Some(base.to_string());
        }
        let ep = e.reg.ep;
        self.new_entries.push(e);
        self.count("register.updated");
        Ok(Reply::Response(Response {
            code: Code::CHANGED,
            answer_for: Some(ep),
            ..Default::default()
        }))
    }

    /// `DELETE /rd/N`: removal (RFC 9176 §5.3.2) needs a registration statement (`sq`, `ss`)
    /// so nobody else can remove a device, or a DTLS session authenticated as the device; an
    /// entry owned by a session only the session.
    pub fn remove(&mut self, b: &Batch<'_>, req: &Request, id: &str) -> Handled {
        let e = match self.changeable_entry(id) {
            Ok(e) => e,
            Err(why) => return self.refuse_entry(why, req),
        };
        let op = resync::Operation {
            kind: resync::OperationKind::Remove,
            lifetime: None,
            base: None,
            payload: &[],
        };
        // The statement's number must be new (RFC 8387 §8.2): a statement seen before (the
        // registration's own, an earlier removal) cannot be replayed to remove.
        let proof = match self.proof(
            req,
            &e.reg.ep,
            e.reg.key.as_ref(),
            op,
            Rejection::StaleRemoval,
        ) {
            Ok(Proof::Nothing) => return self.refuse(Rejection::UnsignedRemoval, req),
            Ok(p) => p,
            Err(why) => return self.refuse(why, req),
        };
        if let Err(why) = may_change(e.reg.owner, proof) {
            return self.refuse(why, req);
        }
        if !req.conditions.hold(Some(None)) {
            return self.refuse(Rejection::PreconditionFailed, req);
        }
        self.resync(b, &e.reg.ep, proof)?;
        b.delete_registration(e.reg.id)?;
        self.removed.push(e.reg.id);
        self.count("register.removed");
        Ok(respond(Code::DELETED))
    }

    /// Registrations whose lifetime has not run out and whose device and kit are not revoked,
    /// in location order: what lookups and topic discovery show.
    pub fn live_entries(&self) -> Vec<Entry> {
        let mut ids: Vec<i64> = self
            .svc
            .entries
            .keys()
            .copied()
            .chain(self.new_entries.iter().map(|e| e.reg.id))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let now = self.secs();
        ids.into_iter()
            .filter_map(|id| self.entry(id))
            .filter(|e| e.is_live(now) && self.entry_revoked(e).is_none())
            .cloned()
            .collect()
    }

    /// `GET /rd-lookup/ep` and `/rd-lookup/res`: RFC 9176 §6 lookup of endpoints, or of
    /// resources with the key attributes a verifier needs. Targets are absolute URIs resolved
    /// against the address the request was sent to (§6: lookup results carry resolved
    /// references), since the registered resources are hosted by this broker.
    pub fn lookup(&mut self, req: &Request, resources: bool) -> Handled {
        let count = match req.query_int("count", 1, u32::MAX.into()) {
            Ok(c) => c,
            Err(why) => return self.refuse(why, req),
        };
        let page = match req.query_int("page", 0, u32::MAX.into()) {
            Ok(p) => p.unwrap_or(0),
            Err(why) => return self.refuse(why, req),
        };
        self.count(if resources {
            "request.lookup_res"
        } else {
            "request.lookup_ep"
        });
        let want_ep = req.query("ep");
        let want_rt = req.query("rt");
        let mut links: Vec<String> = Vec::new();
        for e in self.live_entries() {
            let ep = e.reg.ep.to_string();
            if want_ep.is_some_and(|w| w != ep) {
                continue;
            }
            if !resources {
                let mut s = String::new();
                let lt = e.reg.lifetime.to_string();
                let mut attrs = vec![("ep", Some(ep.as_str())), ("lt", Some(lt.as_str()))];
                if let Some(base) = &e.reg.base {
                    attrs.push(("base", Some(base.as_str())));
                }
                let _ = write_link(&mut s, &format!("{}/rd/{}", req.origin, e.reg.id), &attrs);
                links.push(s);
                continue;
            }
            // Registration refused `io` over the announcement's bound, so a key always makes
            // an announcement; a PSK-only node's entry has none (its readings are MACed or
            // came over its session: `ct` says which).
            let announced = match e.reg.key {
                Some(key) => match KeyAnnouncement::new(key, &e.reg.other_info) {
                    Some(a) => Some(a),
                    None => continue,
                },
                None => None,
            };
            for (href, ct, rt) in &e.resources {
                if want_rt
                    .is_some_and(|w| rt.as_deref().is_none_or(|r| !r.split(' ').any(|p| p == w)))
                {
                    continue;
                }
                let ct = ct.map(|c| c.to_string());
                let mut attrs: Vec<(&str, Option<&str>)> = vec![("ep", Some(ep.as_str()))];
                if let Some(rt) = rt {
                    attrs.push(("rt", Some(rt.as_str())));
                }
                if let Some(ct) = &ct {
                    attrs.push(("ct", Some(ct.as_str())));
                }
                let mut s = String::new();
                let target = format!("{}/ps/{}/{}", req.origin, e.reg.id, href);
                let _ = write_link(&mut s, &target, &attrs);
                if let Some(announced) = &announced {
                    let _ = announced.emit(&mut s, &e.reg.group_keys);
                }
                links.push(s);
            }
        }
        // Paging (RFC 9176 §6.1): page and count.
        let selected: Vec<String> = match count {
            Some(c) => {
                let c = usize::try_from(c).unwrap_or(usize::MAX);
                let skip = usize::try_from(page).unwrap_or(usize::MAX);
                links
                    .into_iter()
                    .skip(skip.saturating_mul(c))
                    .take(c)
                    .collect()
            }
            None => links,
        };
        Ok(crate::context::content(
            ContentFormat::LINK_FORMAT,
            selected.join(",").into_bytes(),
        ))
    }
}
