//! The Resource Directory (RFC 9176): registration (§5), update (§5.3.1), removal (§5.3.2),
//! lookup (§6) and lifetimes, with the key check of RFC 8387 §7 step 1 and the signed
//! resynchronisation of §8.2.
//!
//! The key announcement (`key`, `alg`, `grp`, `io`) and the binding check come from
//! `sigil_identity`, the resync statement from `sigil_objects::resync`; this module maps their
//! refusals to [`Rejection`]s.

use crate::auth::mismatched;
use crate::context::{respond, Ctx, Operation, Rejection, Reply, Request, Response};
use crate::store::{Batch, IdentityKind, Registration, StoreError};
use base64::Engine;
use sigil_coap::link::{self, write_link};
use sigil_coap::{Code, ContentFormat};
use sigil_crypto::PublicKey;
use sigil_freshness as freshness;
use sigil_identity::{AnnounceError, Binding, BindingError, Identity, KeyAnnouncement};
use sigil_objects::resync;

pub(crate) const B64: base64::engine::GeneralPurpose =
    base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Lifetimes a registration may ask for, in seconds (RFC 9176 §5: `lt`, 1 to 2^32 - 1).
pub const LIFETIME_RANGE: (u64, u64) = (1, u32::MAX as u64);

/// A registration with its hosted resources parsed out.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub reg: Registration,
    /// Registered hrefs without the leading `/`, with their content-format and rt.
    pub resources: Vec<(String, Option<u16>, Option<String>)>,
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
        Entry { reg, resources }
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

impl Ctx<'_> {
    fn refuse(&mut self, why: Rejection, req: &Request) -> Handled {
        Ok(self.reject(why, req))
    }

    /// `POST /rd`: RFC 9176 §5 registration, with the key check of RFC 8387 §7 step 1.
    pub fn register(&mut self, b: &Batch<'_>, req: &Request) -> Handled {
        if req
            .content_format
            .is_some_and(|cf| cf != ContentFormat::LINK_FORMAT.0)
        {
            return self.refuse(Rejection::UnsupportedFormat(Operation::Register), req);
        }
        let lifetime = match req.query_int("lt", LIFETIME_RANGE.0, LIFETIME_RANGE.1) {
            Ok(lt) => lt.map_or(self.svc.config.default_lifetime, |v| v as u32),
            Err(why) => return self.refuse(why, req),
        };
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
        if mismatched(req.auth.as_ref(), &ep, &key) {
            return self.refuse(Rejection::PeerMismatch(Operation::Register), req);
        }
        // Checked before anything is written: a failed precondition performs nothing.
        if !req.conditions.hold(Some(None)) {
            // `/rd` always exists and has no ETag (RFC 7252 §5.10.8).
            return self.refuse(Rejection::PreconditionFailed, req);
        }
        let authorized_by = if let Some(by) = binding.authorized_by(|i| self.is_authorized(i)) {
            by
        } else if self.svc.config.danger_trust_on_first_use && binding.group.is_none() {
            b.add_identity(&ep, IdentityKind::Device, "trust on first use", self.secs())?;
            self.new_authorized.push(ep);
            self.count("register.trust_on_first_use");
            tracing::warn!(ep = %ep, peer = %req.peer, "identity added by trust on first use");
            ep
        } else {
            return self.refuse(Rejection::NotAuthorized(Operation::Register), req);
        };
        // §8.2 resynchronisation: a signed announcement of the device's current number.
        if let Some(reply) = self.resync(b, req, &ep, &key)? {
            return Ok(reply);
        }
        let now = self.secs();
        let reg = Registration {
            id: 0,
            ep,
            authorized_by,
            key,
            other_info: announced.other,
            group_keys: announced.group,
            base: req.query("base").map(str::to_string),
            lifetime,
            links: text.to_string(),
            registered_at: now,
            updated_at: now,
            expires_at: now.saturating_add(i64::from(lifetime)),
        };
        let id = b.upsert_registration(&reg)?;
        let mut entry = Entry::new(reg);
        entry.reg.id = id;
        self.new_entries.push(entry);
        self.count("register.accepted");
        tracing::info!(ep = %ep, id, peer = %req.peer, "registered");
        Ok(Reply::Response(Response {
            code: Code::CREATED,
            location_path: vec!["rd".into(), id.to_string()],
            ..Default::default()
        }))
    }

    /// Applies `sq`/`ss` if present. Returns a reply when the announcement is invalid.
    pub fn resync(
        &mut self,
        b: &Batch<'_>,
        req: &Request,
        ep: &Identity,
        key: &PublicKey,
    ) -> Result<Option<Reply>, StoreError> {
        let (Some(sq), Some(ss)) = (req.query("sq"), req.query("ss")) else {
            return Ok(None);
        };
        let (Ok(seq), Ok(sig)) = (sq.parse::<u64>(), B64.decode(ss)) else {
            return Ok(Some(self.reject(Rejection::MalformedResync, req)));
        };
        if resync::verify_resync(&self.svc.crypto, key, ep, seq, &sig).is_err() {
            return Ok(Some(self.reject(Rejection::BadResyncSignature, req)));
        }
        let highest = self.highest(ep);
        let new = freshness::resync(highest, seq);
        if new != highest {
            b.set_highest(ep, new, self.secs())?;
            self.new_highest.insert(*ep, new);
            self.count("freshness.resynchronised");
        }
        Ok(None)
    }

    /// The registration `/rd/<id>` names, if its lifetime has not run out.
    fn live_entry(&self, id: &str) -> Option<Entry> {
        let e = self.entry(id.parse().ok()?)?;
        e.is_live(self.secs()).then(|| e.clone())
    }

    /// `POST /rd/N`: RFC 9176 §5.3.1 registration update.
    pub fn update(&mut self, b: &Batch<'_>, req: &Request, id: &str) -> Handled {
        let Some(mut e) = self.live_entry(id) else {
            return self.refuse(Rejection::UnknownRegistration, req);
        };
        if !self.is_authorized(&e.reg.authorized_by) {
            return self.refuse(Rejection::NotAuthorized(Operation::Register), req);
        }
        if mismatched(req.auth.as_ref(), &e.reg.ep, &e.reg.key) {
            return self.refuse(Rejection::PeerMismatch(Operation::Register), req);
        }
        let lifetime = match req.query_int("lt", LIFETIME_RANGE.0, LIFETIME_RANGE.1) {
            Ok(lt) => lt.map_or(e.reg.lifetime, |v| v as u32),
            Err(why) => return self.refuse(why, req),
        };
        if !req.conditions.hold(Some(None)) {
            return self.refuse(Rejection::PreconditionFailed, req);
        }
        if let Some(reply) = self.resync(b, req, &e.reg.ep, &e.reg.key)? {
            return Ok(reply);
        }
        let base = req.query("base");
        let now = self.secs();
        let expires = now.saturating_add(i64::from(lifetime));
        b.update_registration(e.reg.id, lifetime, base, now, expires)?;
        e.reg.lifetime = lifetime;
        e.reg.updated_at = now;
        e.reg.expires_at = expires;
        if let Some(base) = base {
            e.reg.base = Some(base.to_string());
        }
        self.new_entries.push(e);
        self.count("register.updated");
        Ok(respond(Code::CHANGED))
    }

    /// `DELETE /rd/N`: removal (RFC 9176 §5.3.2) needs a signed announcement (`sq`, `ss`)
    /// so nobody else can remove a device, or a DTLS session authenticated as the device.
    pub fn remove(&mut self, b: &Batch<'_>, req: &Request, id: &str) -> Handled {
        let Some(e) = self.live_entry(id) else {
            return self.refuse(Rejection::UnknownRegistration, req);
        };
        let by_session = match &req.auth {
            Some(a) if !a.speaks_for(&e.reg.ep, &e.reg.key) => {
                return self.refuse(Rejection::PeerMismatch(Operation::Register), req);
            }
            Some(_) => true,
            None => false,
        };
        let signed = req.query("sq").is_some() && req.query("ss").is_some();
        if !signed && !by_session {
            return self.refuse(Rejection::UnsignedRemoval, req);
        }
        // The statement is the resync one, so its number must be new (RFC 8387 §8.2): a
        // statement seen before (the registration's own, an earlier removal) cannot be
        // replayed to remove.
        let highest = self.highest(&e.reg.ep);
        if signed
            && !req
                .query("sq")
                .is_some_and(|sq| sq.parse::<u64>().is_ok_and(|n| n > highest))
        {
            return self.refuse(Rejection::StaleRemoval, req);
        }
        if !req.conditions.hold(Some(None)) {
            return self.refuse(Rejection::PreconditionFailed, req);
        }
        if let Some(reply) = self.resync(b, req, &e.reg.ep, &e.reg.key)? {
            return Ok(reply);
        }
        b.delete_registration(e.reg.id)?;
        self.removed.push(e.reg.id);
        self.count("register.removed");
        Ok(respond(Code::DELETED))
    }

    /// Registrations whose lifetime has not run out, in location order.
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
            .filter(|e| e.is_live(now))
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
            // Registration refused `io` over the announcement's bound, so this is always Some.
            let Some(announced) = KeyAnnouncement::new(e.reg.key, &e.reg.other_info) else {
                continue;
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
                let _ = announced.emit(&mut s, &e.reg.group_keys);
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
