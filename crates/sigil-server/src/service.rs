//! The Resource Directory (RFC 9176) and publish-subscribe broker (draft-ietf-core-coap-pubsub)
//! of RFC 8387 §7, as a synchronous request handler over the [`Store`].
//!
//! Requests arrive in batches (see [`crate::driver`]). A batch is handled in three steps:
//! 1. signature checks of every publication, in parallel, against the registrations known at
//!    the start of the batch (pure CPU work, no shared state written);
//! 2. everything else in request order inside one database transaction: authorization,
//!    freshness against the per-identity high-water mark, registrations, reads;
//! 3. commit; only then are the responses released, so an acknowledged reading is durable.
//!
//! Resources:
//! - `GET /.well-known/core` (RFC 6690 §4)
//! - `POST /rd?ep=&lt=&base=&sq=&ss=` register, `POST /rd/N` update, `DELETE /rd/N?sq=&ss=`
//! - `GET /rd-lookup/ep`, `GET /rd-lookup/res` (RFC 9176 §6)
//! - `GET /ps` topic discovery; `PUT /ps/N/<href>` publish; `GET /ps/N/<href>` latest;
//!   `GET /ps/N/<href>?n=&after=` history as a CBOR array of the signed readings.

use crate::stats::Stats;
use crate::store::{Batch, IdentityKind, NewReading, Registration, Store, StoreError};
use base64::Engine;
use sigil_coap::link::{self, write_link};
use sigil_coap::{Code, ContentFormat};
use sigil_crypto::{PublicKey, RustCrypto};
use sigil_freshness::{self as freshness, FreshnessPolicy, Verdict};
use sigil_identity::{AnnounceError, Binding, BindingError, Identity, KeyAnnouncement};
use sigil_objects::cose::SeqField;
use sigil_objects::senml::{self, OwnedValue};
use sigil_objects::{resync, ReadingFormat, SignedReading};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Behaviour of the service.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    pub freshness: FreshnessPolicy,
    /// Trust on first use: a registration from an identity not on the list adds it to the
    /// list. Off by default. With it on, whoever registers an identity first owns it, so an
    /// attacker present at installation time can take the place of a device (RFC 8387 §4).
    pub danger_trust_on_first_use: bool,
    /// Threads for signature verification within a batch.
    pub verify_workers: usize,
    /// Most readings returned by one history request.
    pub max_history: u32,
    /// Lifetime when a registration gives none (RFC 9176 §5: 90000 s).
    pub default_lifetime: u32,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            freshness: FreshnessPolicy::default(),
            danger_trust_on_first_use: false,
            verify_workers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            max_history: 100,
            default_lifetime: 90_000,
        }
    }
}

/// What DTLS trusts, taken from the authorized list: identities (raw public keys are pinned to
/// them) and the pre-shared keys provisioned for some of them.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    pub authorized: std::collections::HashSet<Identity>,
    pub psks: HashMap<Identity, Vec<u8>>,
}

/// A CoAP request after parsing and block-wise reassembly.
#[derive(Clone, Debug)]
pub struct Request {
    pub peer: SocketAddr,
    /// The message ID if the request came Confirmable (for retransmission detection); `None`
    /// for a Non-confirmable request.
    pub message_id: Option<u16>,
    pub code: Code,
    pub path: Vec<String>,
    pub query: Vec<String>,
    pub content_format: Option<u16>,
    pub accept: Option<u16>,
    pub payload: Vec<u8>,
    /// The peer the transport authenticated (coaps://), `None` over plain CoAP.
    pub auth: Option<PeerAuth>,
}

/// Who a DTLS session authenticated. Over coaps:// the RD and broker accept registrations,
/// updates, removals and publications only for the authenticated identity's own entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerAuth {
    /// The pre-shared key provisioned for this identity.
    Psk(Identity),
    /// A raw public key whose identity `h(P)` is on the authorized list.
    RawPublicKey { identity: Identity, key: PublicKey },
}

impl PeerAuth {
    pub fn identity(&self) -> &Identity {
        match self {
            Self::Psk(id) | Self::RawPublicKey { identity: id, .. } => id,
        }
    }

    /// Whether this peer may act for the registration of `ep` with `key`: a PSK names the
    /// identity; a raw public key must be the registered key itself.
    pub fn speaks_for(&self, ep: &Identity, key: &PublicKey) -> bool {
        match self {
            Self::Psk(id) => id == ep,
            Self::RawPublicKey { key: k, .. } => k == key,
        }
    }
}

impl Request {
    pub fn confirmable(&self) -> bool {
        self.message_id.is_some()
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find_map(|q| {
            let (k, v) = q.split_once('=').unwrap_or((q.as_str(), ""));
            (k == name).then_some(v)
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    pub code: Code,
    pub content_format: Option<u16>,
    pub payload: Vec<u8>,
    pub location_path: Vec<String>,
    pub etag: Option<Vec<u8>>,
}

/// What to answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Response(Response),
    /// A Reset (RFC 7252 §4.2), the §8.2 signal to resynchronise.
    Reset,
    /// Nothing (a rejected Non-confirmable message).
    Nothing,
}

fn respond(code: Code) -> Reply {
    Reply::Response(Response {
        code,
        ..Default::default()
    })
}

fn diagnostic(code: Code, text: &str) -> Reply {
    Reply::Response(Response {
        code,
        payload: text.as_bytes().to_vec(),
        ..Default::default()
    })
}

fn content(cf: ContentFormat, payload: Vec<u8>) -> Reply {
    Reply::Response(Response {
        code: Code::CONTENT,
        content_format: Some(cf.0),
        payload,
        ..Default::default()
    })
}

/// A registration with its hosted resources parsed out.
#[derive(Clone, Debug)]
struct Entry {
    reg: Registration,
    /// Registered hrefs without the leading `/`, with their content-format and rt.
    resources: Vec<(String, Option<u16>, Option<String>)>,
}

/// Result of the parallel signature check of one publication.
#[derive(Clone, Debug)]
struct Checked {
    reg_id: i64,
    ep: Identity,
    seq: u64,
    timestamp: Option<u64>,
    content_format: u16,
    decoded: String,
    /// Low-bits mode: the full number was reconstructed from the high-water mark.
    lsb: Option<(u8, u64)>,
}

pub struct Service {
    store: Store,
    state: State,
    data_version: i64,
    /// Bumped whenever the authorized list may have changed; see [`Service::changed_credentials`].
    generation: u64,
    generation_seen: u64,
    stats: Stats,
    local: BTreeMap<&'static str, u64>,
}

/// What the service knows in memory (a cache of the database, updated after each commit).
/// Shared read-only with the verification threads.
struct State {
    crypto: RustCrypto,
    config: ServiceConfig,
    entries: HashMap<i64, Entry>,
    by_ep: HashMap<Identity, i64>,
    authorized: HashMap<Identity, IdentityKind>,
    highest: HashMap<Identity, u64>,
    /// Signature verification threads (none when `verify_workers` is 1).
    pool: Option<rayon::ThreadPool>,
}

fn parse_entry(reg: Registration) -> Entry {
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

impl Service {
    pub fn new(store: Store, config: ServiceConfig, stats: Stats) -> Result<Self, StoreError> {
        let mut state = State {
            crypto: RustCrypto,
            config,
            entries: HashMap::new(),
            by_ep: HashMap::new(),
            authorized: store.authorized()?,
            highest: store.freshness()?,
            pool: None,
        };
        if state.config.verify_workers > 1 {
            state.pool = rayon::ThreadPoolBuilder::new()
                .num_threads(state.config.verify_workers)
                .thread_name(|i| format!("sigil-verify-{i}"))
                .build()
                .ok();
        }
        for reg in store.registrations()? {
            state.by_ep.insert(reg.ep, reg.id);
            state.entries.insert(reg.id, parse_entry(reg));
        }
        Ok(Self {
            data_version: store.data_version()?,
            generation: 1,
            generation_seen: 0,
            store,
            state,
            stats,
            local: BTreeMap::new(),
        })
    }

    fn count(&mut self, key: &'static str) {
        *self.local.entry(key).or_insert(0) += 1;
    }

    /// Reloads the authorized list when another process (e.g. `sigil provision`) committed.
    fn refresh_authorized(&mut self) {
        if let Ok(v) = self.store.data_version() {
            if v != self.data_version {
                if let Ok(a) = self.store.authorized() {
                    self.state.authorized = a;
                    self.data_version = v;
                    self.generation += 1;
                }
            }
        }
    }

    /// The DTLS credentials (active identities and their pre-shared keys) if they may have
    /// changed since the last call, e.g. after `sigil provision` committed.
    pub fn changed_credentials(&mut self) -> Option<Credentials> {
        self.refresh_authorized();
        if self.generation == self.generation_seen {
            return None;
        }
        let psks = match self.store.psks() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "cannot read pre-shared keys");
                return None;
            }
        };
        self.generation_seen = self.generation;
        Some(Credentials {
            authorized: self.state.authorized.keys().copied().collect(),
            psks: psks
                .into_iter()
                .filter(|(id, _)| self.state.authorized.contains_key(id))
                .collect(),
        })
    }

    /// Handles a batch; returns one reply per request, in order.
    pub fn handle_batch(&mut self, requests: &[Request], now: i64) -> Vec<Reply> {
        self.refresh_authorized();
        let checks = self.state.check_publications(requests, now);
        let mut replies = Vec::with_capacity(requests.len());
        // Cache changes become visible only after the commit succeeds.
        let mut new_highest: HashMap<Identity, u64> = HashMap::new();
        let mut new_entries: Vec<Entry> = Vec::new();
        let mut removed: Vec<i64> = Vec::new();
        let mut new_authorized: Vec<Identity> = Vec::new();
        let mut local = std::mem::take(&mut self.local);
        let result = {
            let mut ctx = Ctx {
                svc: &self.state,
                now,
                new_highest: &mut new_highest,
                new_entries: &mut new_entries,
                removed: &mut removed,
                new_authorized: &mut new_authorized,
                counts: &mut local,
            };
            // The handlers read the service's caches while writing through the transaction.
            let mut out = Vec::with_capacity(requests.len());
            let res = self.store.shared_transaction(|b| {
                for (req, check) in requests.iter().zip(&checks) {
                    out.push(ctx.handle(b, req, check)?);
                }
                Ok(())
            });
            res.map(|_| out)
        };
        self.local = local;
        match result {
            Ok(out) => {
                let st = &mut self.state;
                for (ep, h) in new_highest {
                    st.highest.insert(ep, h);
                }
                for id in removed {
                    if let Some(e) = st.entries.remove(&id) {
                        st.by_ep.remove(&e.reg.ep);
                    }
                }
                for e in new_entries {
                    st.by_ep.insert(e.reg.ep, e.reg.id);
                    st.entries.insert(e.reg.id, e);
                }
                for id in new_authorized {
                    st.authorized.insert(id, IdentityKind::Device);
                    self.generation += 1;
                }
                replies.extend(out);
            }
            Err(e) => {
                tracing::error!(error = %e, "batch transaction failed; nothing from it was stored");
                self.count("server.store_error");
                replies.extend(
                    requests
                        .iter()
                        .map(|_| diagnostic(Code::INTERNAL_SERVER_ERROR, "storage failure")),
                );
            }
        }
        let mut local = std::mem::take(&mut self.local);
        self.stats.merge(&mut local);
        self.local = local;
        replies
    }
}

impl State {
    /// Step 1: signature checks of all publications, spread over worker threads.
    fn check_publications(
        &self,
        requests: &[Request],
        now: i64,
    ) -> Vec<Option<Result<Checked, &'static str>>> {
        let mut out: Vec<Option<Result<Checked, &'static str>>> = vec![None; requests.len()];
        let jobs: Vec<usize> = (0..requests.len())
            .filter(|i| is_publish(&requests[*i]))
            .collect();
        if jobs.is_empty() {
            return out;
        }
        // Small batches are verified inline; larger ones on the persistent worker pool.
        let results: Vec<(usize, Result<Checked, &'static str>)> = match &self.pool {
            Some(pool) if jobs.len() >= 4 => {
                use rayon::prelude::*;
                pool.install(|| {
                    jobs.par_iter()
                        .map(|&i| (i, self.check_one(&requests[i], now)))
                        .collect()
                })
            }
            _ => jobs
                .iter()
                .map(|&i| (i, self.check_one(&requests[i], now)))
                .collect(),
        };
        for (i, r) in results {
            out[i] = Some(r);
        }
        out
    }

    /// Everything about a publication that does not depend on other requests in the batch.
    fn check_one(&self, req: &Request, now: i64) -> Result<Checked, &'static str> {
        let (entry, href) = self.topic(req, now).ok_or("unknown_topic")?;
        let cf = req.content_format.ok_or("unsupported_content_format")?;
        let format = ReadingFormat::from_content_format(cf).ok_or("unsupported_content_format")?;
        if let Some((_, Some(topic_cf), _)) = entry.resources.iter().find(|(h, _, _)| h == href) {
            if *topic_cf != cf {
                return Err("unsupported_content_format");
            }
        }
        let reading = SignedReading::parse(format, &req.payload).map_err(|e| e.reason())?;
        if reading.kid != entry.reg.ep {
            return Err("kid_mismatch");
        }
        let highest = self.highest.get(&entry.reg.ep).copied().unwrap_or(0);
        let (seq, lsb) = match reading.seq {
            SeqField::Full(s) => (s, None),
            SeqField::LowBits { k, bits } => (
                freshness::reconstruct(highest, k, bits).ok_or("sequence_mismatch")?,
                Some((k, bits)),
            ),
        };
        let mut buf = vec![0u8; reading.senml_len_bound()];
        let senml_bytes = reading.senml(&mut buf).map_err(|e| e.reason())?;
        let decoded = decode_senml(format, senml_bytes)?;
        let mut scratch = vec![0u8; reading.scratch_len()];
        reading
            .verify_end_to_end(
                &self.crypto,
                &entry.reg.key,
                &entry.reg.ep,
                seq,
                &mut scratch,
            )
            .map_err(|e| e.reason())?;
        Ok(Checked {
            reg_id: entry.reg.id,
            ep: entry.reg.ep,
            seq,
            timestamp: reading.timestamp,
            content_format: cf,
            decoded,
            lsb,
        })
    }

    /// The live registration and href a `/ps/N/<href>` path names.
    fn topic<'r>(&self, req: &'r Request, now: i64) -> Option<(&Entry, &'r str)> {
        let [ps, n, href] = req.path.as_slice() else {
            return None;
        };
        if ps != "ps" {
            return None;
        }
        let entry = self.entries.get(&n.parse::<i64>().ok()?)?;
        if entry.reg.expires_at < now || !entry.resources.iter().any(|(h, _, _)| h == href) {
            return None;
        }
        Some((entry, href.as_str()))
    }
}

fn is_publish(req: &Request) -> bool {
    req.code == Code::PUT && req.path.first().is_some_and(|p| p == "ps") && req.path.len() == 3
}

/// Decodes and validates the SenML pack, returning the resolved records as JSON.
fn decode_senml(format: ReadingFormat, bytes: &[u8]) -> Result<String, &'static str> {
    let resolved = match format {
        ReadingFormat::Cose => {
            let pack = senml::Pack::parse_cbor(bytes).map_err(|_| "malformed_senml")?;
            senml::resolve(pack.records())
        }
        ReadingFormat::Jws => {
            let recs = senml::parse_json(bytes).map_err(|_| "malformed_senml")?;
            senml::resolve(recs.iter().map(|r| r.as_record()))
        }
    }
    .map_err(|_| "malformed_senml")?;
    let json: Vec<serde_json::Value> = resolved
        .iter()
        .map(|r| {
            let mut m = serde_json::Map::new();
            m.insert("n".into(), r.name.clone().into());
            if let Some(u) = &r.unit {
                m.insert("u".into(), u.clone().into());
            }
            match &r.value {
                Some(OwnedValue::Number(v)) => {
                    m.insert("v".into(), (*v).into());
                }
                Some(OwnedValue::String(s)) => {
                    m.insert("vs".into(), s.clone().into());
                }
                Some(OwnedValue::Bool(b)) => {
                    m.insert("vb".into(), (*b).into());
                }
                Some(OwnedValue::Data(d)) => {
                    m.insert("vd".into(), B64.encode(d).into());
                }
                None => {}
            }
            if let Some(s) = r.sum {
                m.insert("s".into(), s.into());
            }
            m.insert("t".into(), r.time.into());
            serde_json::Value::Object(m)
        })
        .collect();
    serde_json::to_string(&json).map_err(|_| "malformed_senml")
}

/// Per-batch handling context.
struct Ctx<'a> {
    svc: &'a State,
    now: i64,
    new_highest: &'a mut HashMap<Identity, u64>,
    new_entries: &'a mut Vec<Entry>,
    removed: &'a mut Vec<i64>,
    new_authorized: &'a mut Vec<Identity>,
    counts: &'a mut BTreeMap<&'static str, u64>,
}

impl Ctx<'_> {
    fn count(&mut self, key: &'static str) {
        *self.counts.entry(key).or_insert(0) += 1;
    }

    fn highest(&self, ep: &Identity) -> u64 {
        self.new_highest
            .get(ep)
            .or_else(|| self.svc.highest.get(ep))
            .copied()
            .unwrap_or(0)
    }

    fn entry(&self, id: i64) -> Option<&Entry> {
        if self.removed.contains(&id) {
            return None;
        }
        self.new_entries
            .iter()
            .rev()
            .find(|e| e.reg.id == id)
            .or_else(|| self.svc.entries.get(&id))
    }

    fn is_authorized(&self, id: &Identity) -> bool {
        self.svc.authorized.contains_key(id) || self.new_authorized.contains(id)
    }

    fn handle(
        &mut self,
        b: &Batch<'_>,
        req: &Request,
        check: &Option<Result<Checked, &'static str>>,
    ) -> Result<Reply, StoreError> {
        let path: Vec<&str> = req.path.iter().map(String::as_str).collect();
        let reply = match (req.code, path.as_slice()) {
            (Code::GET, [".well-known", "core"]) => self.well_known_core(req),
            (Code::POST, ["rd"]) => self.register(b, req)?,
            (Code::POST, ["rd", id]) => self.update(b, req, id)?,
            (Code::DELETE, ["rd", id]) => self.remove(b, req, id)?,
            (Code::GET, ["rd-lookup", "ep"]) => self.lookup(req, false),
            (Code::GET, ["rd-lookup", "res"]) => self.lookup(req, true),
            (Code::GET, ["ps"]) => self.topics(),
            (Code::PUT, ["ps", _, _]) => self.publish(b, req, check)?,
            (Code::GET, ["ps", _, _]) => self.read_topic(b, req)?,
            (
                _,
                [".well-known", "core"]
                | ["rd"]
                | ["rd", _]
                | ["rd-lookup", _]
                | ["ps"]
                | ["ps", _, _],
            ) => {
                self.count("request.method_not_allowed");
                respond(Code::METHOD_NOT_ALLOWED)
            }
            _ => {
                self.count("request.not_found");
                respond(Code::NOT_FOUND)
            }
        };
        Ok(reply)
    }

    fn well_known_core(&mut self, req: &Request) -> Reply {
        self.count("request.discovery");
        let all = [
            ("/rd", "core.rd"),
            ("/rd-lookup/ep", "core.rd-lookup-ep"),
            ("/rd-lookup/res", "core.rd-lookup-res"),
            ("/ps", "core.ps"),
        ];
        let mut out = String::new();
        for (href, rt) in all {
            if let Some(want) = req.query("rt") {
                let matches = match want.strip_suffix('*') {
                    Some(prefix) => rt.starts_with(prefix),
                    None => rt == want,
                };
                if !matches {
                    continue;
                }
            }
            if !out.is_empty() {
                out.push(',');
            }
            let _ = write_link(&mut out, href, &[("rt", Some(rt)), ("ct", Some("40"))]);
        }
        content(ContentFormat::LINK_FORMAT, out.into_bytes())
    }

    fn reject_registration(&mut self, reason: &'static str, code: Code, req: &Request) -> Reply {
        self.count(match reason {
            "missing_ep" => "register.rejected.missing_ep",
            "bad_ep" => "register.rejected.bad_ep",
            "malformed_link_format" => "register.rejected.malformed_link_format",
            "missing_key" => "register.rejected.missing_key",
            "bad_key" => "register.rejected.bad_key",
            "bad_group" => "register.rejected.bad_group",
            "identity_mismatch" => "register.rejected.identity_mismatch",
            "dtls_identity_mismatch" => "register.rejected.dtls_identity_mismatch",
            "unauthorized_identity" => "register.rejected.unauthorized_identity",
            "bad_resync_signature" => "register.rejected.bad_resync_signature",
            "unsupported_content_format" => "register.rejected.unsupported_content_format",
            _ => "register.rejected.other",
        });
        tracing::warn!(reason, peer = %req.peer, ep = req.query("ep").unwrap_or(""), "registration refused");
        diagnostic(code, reason)
    }

    /// RFC 9176 §5 registration, with the key check of RFC 8387 §7 step 1.
    fn register(&mut self, b: &Batch<'_>, req: &Request) -> Result<Reply, StoreError> {
        if req
            .content_format
            .is_some_and(|cf| cf != ContentFormat::LINK_FORMAT.0)
        {
            return Ok(self.reject_registration(
                "unsupported_content_format",
                Code::UNSUPPORTED_CONTENT_FORMAT,
                req,
            ));
        }
        let Some(ep_text) = req.query("ep") else {
            return Ok(self.reject_registration("missing_ep", Code::BAD_REQUEST, req));
        };
        let Ok(ep) = Identity::parse(ep_text) else {
            return Ok(self.reject_registration("bad_ep", Code::BAD_REQUEST, req));
        };
        let Ok(text) = std::str::from_utf8(&req.payload) else {
            return Ok(self.reject_registration("malformed_link_format", Code::BAD_REQUEST, req));
        };
        let Ok(links) = link::parse(text) else {
            return Ok(self.reject_registration("malformed_link_format", Code::BAD_REQUEST, req));
        };
        // The key announcement (sigil_identity::announce): every link that carries one must
        // carry the same.
        let mut announced: Option<KeyAnnouncement<'_>> = None;
        for l in links.flatten() {
            let this = match KeyAnnouncement::parse(l.attrs().map(|a| (a.name, a.value))) {
                Ok(None) => continue,
                Ok(Some(a)) => a,
                Err(AnnounceError::BadGroup) => {
                    return Ok(self.reject_registration("bad_group", Code::BAD_REQUEST, req))
                }
                Err(AnnounceError::MissingKey) => {
                    return Ok(self.reject_registration("missing_key", Code::BAD_REQUEST, req))
                }
                Err(_) => return Ok(self.reject_registration("bad_key", Code::BAD_REQUEST, req)),
            };
            if announced.as_ref().is_some_and(|prev| prev != &this) {
                return Ok(self.reject_registration("bad_key", Code::BAD_REQUEST, req));
            }
            announced = Some(this);
        }
        let Some(announced) = announced else {
            return Ok(self.reject_registration("missing_key", Code::BAD_REQUEST, req));
        };
        let key = *announced.key();
        let group: Vec<PublicKey> = announced.group().collect();
        let other = announced.other_info().to_vec();
        let binding = match Binding::check(&self.svc.crypto, &ep, &key, &group, &other) {
            Ok(b) => b,
            Err(BindingError::Mismatch) => {
                return Ok(self.reject_registration("identity_mismatch", Code::FORBIDDEN, req))
            }
            Err(BindingError::BadGroup) => {
                return Ok(self.reject_registration("bad_group", Code::BAD_REQUEST, req))
            }
            Err(BindingError::BadKey) => {
                return Ok(self.reject_registration("bad_key", Code::BAD_REQUEST, req))
            }
        };
        if req.auth.as_ref().is_some_and(|a| !a.speaks_for(&ep, &key)) {
            return Ok(self.reject_registration("dtls_identity_mismatch", Code::FORBIDDEN, req));
        }
        let authorized_by = if let Some(by) = binding.authorized_by(|i| self.is_authorized(i)) {
            by
        } else if self.svc.config.danger_trust_on_first_use && binding.group.is_none() {
            b.add_identity(&ep, IdentityKind::Device, "trust on first use", self.now)?;
            self.new_authorized.push(ep);
            self.count("register.trust_on_first_use");
            tracing::warn!(ep = %ep, peer = %req.peer, "identity added by trust on first use");
            ep
        } else {
            return Ok(self.reject_registration("unauthorized_identity", Code::FORBIDDEN, req));
        };
        // §8.2 resynchronisation: a signed announcement of the device's current number.
        if let Some(reply) = self.resync(b, req, &ep, &key)? {
            return Ok(reply);
        }
        let lifetime = req
            .query("lt")
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|v| *v > 0)
            .unwrap_or(self.svc.config.default_lifetime);
        let reg = Registration {
            id: 0,
            ep,
            authorized_by,
            key,
            other_info: other,
            group_keys: group,
            base: req.query("base").map(str::to_string),
            lifetime,
            links: text.to_string(),
            registered_at: self.now,
            updated_at: self.now,
            expires_at: self.now + i64::from(lifetime),
        };
        let id = b.upsert_registration(&reg)?;
        let mut entry = parse_entry(reg);
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
    fn resync(
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
            return Ok(Some(self.reject_registration(
                "bad_resync_signature",
                Code::BAD_REQUEST,
                req,
            )));
        };
        if resync::verify_resync(&self.svc.crypto, key, ep, seq, &sig).is_err() {
            return Ok(Some(self.reject_registration(
                "bad_resync_signature",
                Code::UNAUTHORIZED,
                req,
            )));
        }
        let highest = self.highest(ep);
        let new = freshness::resync(highest, seq);
        if new != highest {
            b.set_highest(ep, new, self.now)?;
            self.new_highest.insert(*ep, new);
            self.count("freshness.resynchronised");
        }
        Ok(None)
    }

    fn live_entry(&self, id: &str) -> Option<Entry> {
        let e = self.entry(id.parse().ok()?)?;
        (e.reg.expires_at >= self.now).then(|| e.clone())
    }

    /// RFC 9176 §5.3.1 registration update.
    fn update(&mut self, b: &Batch<'_>, req: &Request, id: &str) -> Result<Reply, StoreError> {
        let Some(mut e) = self.live_entry(id) else {
            self.count("register.update_not_found");
            return Ok(respond(Code::NOT_FOUND));
        };
        if !self.is_authorized(&e.reg.authorized_by) {
            return Ok(self.reject_registration("unauthorized_identity", Code::FORBIDDEN, req));
        }
        if req
            .auth
            .as_ref()
            .is_some_and(|a| !a.speaks_for(&e.reg.ep, &e.reg.key))
        {
            return Ok(self.reject_registration("dtls_identity_mismatch", Code::FORBIDDEN, req));
        }
        if let Some(reply) = self.resync(b, req, &e.reg.ep, &e.reg.key)? {
            return Ok(reply);
        }
        let lifetime = req
            .query("lt")
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|v| *v > 0)
            .unwrap_or(e.reg.lifetime);
        let base = req.query("base");
        b.update_registration(
            e.reg.id,
            lifetime,
            base,
            self.now,
            self.now + i64::from(lifetime),
        )?;
        e.reg.lifetime = lifetime;
        e.reg.updated_at = self.now;
        e.reg.expires_at = self.now + i64::from(lifetime);
        if let Some(base) = base {
            e.reg.base = Some(base.to_string());
        }
        self.new_entries.push(e);
        self.count("register.updated");
        Ok(respond(Code::CHANGED))
    }

    /// Removal needs a signed announcement (`sq`, `ss`) so nobody else can remove a device,
    /// or a DTLS session authenticated as the device itself.
    fn remove(&mut self, b: &Batch<'_>, req: &Request, id: &str) -> Result<Reply, StoreError> {
        let Some(e) = self.live_entry(id) else {
            return Ok(respond(Code::NOT_FOUND));
        };
        let by_session = match &req.auth {
            Some(a) if !a.speaks_for(&e.reg.ep, &e.reg.key) => {
                return Ok(self.reject_registration(
                    "dtls_identity_mismatch",
                    Code::FORBIDDEN,
                    req,
                ));
            }
            Some(_) => true,
            None => false,
        };
        let signed = req.query("sq").is_some() && req.query("ss").is_some();
        if !signed && !by_session {
            self.count("register.rejected.unsigned_removal");
            return Ok(diagnostic(
                Code::UNAUTHORIZED,
                "removal must be signed (sq, ss)",
            ));
        }
        // The statement is the resync one, so its number must be new (§8.2): a statement seen
        // before (the registration's own, an earlier removal) cannot be replayed to remove.
        let fresh = |sq: &str| sq.parse::<u64>().is_ok_and(|n| n > self.highest(&e.reg.ep));
        if signed && !req.query("sq").is_some_and(fresh) {
            self.count("register.rejected.stale_removal");
            return Ok(diagnostic(
                Code::UNAUTHORIZED,
                "removal sequence number not above the last one seen",
            ));
        }
        if let Some(reply) = self.resync(b, req, &e.reg.ep, &e.reg.key)? {
            return Ok(reply);
        }
        b.delete_registration(e.reg.id)?;
        self.removed.push(e.reg.id);
        self.count("register.removed");
        Ok(respond(Code::DELETED))
    }

    fn live_entries(&self) -> Vec<Entry> {
        let mut ids: Vec<i64> = self
            .svc
            .entries
            .keys()
            .copied()
            .chain(self.new_entries.iter().map(|e| e.reg.id))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .filter_map(|id| self.entry(id))
            .filter(|e| e.reg.expires_at >= self.now)
            .cloned()
            .collect()
    }

    /// RFC 9176 §6 lookup: endpoints, or resources with the key attributes a verifier needs.
    fn lookup(&mut self, req: &Request, resources: bool) -> Reply {
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
                let _ = write_link(&mut s, &format!("/rd/{}", e.reg.id), &attrs);
                links.push(s);
                continue;
            }
            // Registration refused `io` over the announcement's bound, so this is always Some.
            let Some(announced) = KeyAnnouncement::new(e.reg.key, &e.reg.other_info) else {
                continue;
            };
            for (href, ct, rt) in &e.resources {
                if want_rt.is_some_and(|w| {
                    rt.as_deref()
                        .map_or(true, |r| !r.split(' ').any(|p| p == w))
                }) {
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
                let _ = write_link(&mut s, &format!("/ps/{}/{}", e.reg.id, href), &attrs);
                let _ = announced.emit(&mut s, &e.reg.group_keys);
                links.push(s);
            }
        }
        // Paging (RFC 9176 §6.1): page and count.
        let count = req.query("count").and_then(|c| c.parse::<usize>().ok());
        let page = req
            .query("page")
            .and_then(|p| p.parse::<usize>().ok())
            .unwrap_or(0);
        let selected: Vec<String> = match count {
            Some(c) => links
                .into_iter()
                .skip(page.saturating_mul(c))
                .take(c)
                .collect(),
            None => links,
        };
        content(ContentFormat::LINK_FORMAT, selected.join(",").into_bytes())
    }

    fn topics(&mut self) -> Reply {
        self.count("request.topics");
        let mut links = Vec::new();
        for e in self.live_entries() {
            for (href, ct, rt) in &e.resources {
                let ct = ct.map(|c| c.to_string());
                let mut attrs: Vec<(&str, Option<&str>)> = vec![("rt", rt.as_deref())];
                attrs.retain(|a| a.1.is_some());
                if let Some(ct) = &ct {
                    attrs.push(("ct", Some(ct.as_str())));
                }
                let mut s = String::new();
                let _ = write_link(&mut s, &format!("/ps/{}/{}", e.reg.id, href), &attrs);
                links.push(s);
            }
        }
        content(ContentFormat::LINK_FORMAT, links.join(",").into_bytes())
    }

    fn reject_publication(&mut self, reason: &'static str, req: &Request) -> Reply {
        let (counter, code) = match reason {
            "unknown_topic" => ("publish.rejected.unknown_topic", Code::NOT_FOUND),
            "unsupported_content_format" => (
                "publish.rejected.unsupported_content_format",
                Code::UNSUPPORTED_CONTENT_FORMAT,
            ),
            "unauthorized_identity" => ("publish.rejected.unauthorized_identity", Code::FORBIDDEN),
            "kid_mismatch" => ("publish.rejected.kid_mismatch", Code::FORBIDDEN),
            "dtls_identity_mismatch" => {
                ("publish.rejected.dtls_identity_mismatch", Code::FORBIDDEN)
            }
            "bad_signature" => ("publish.rejected.bad_signature", Code::UNAUTHORIZED),
            "algorithm_mismatch" => ("publish.rejected.algorithm_mismatch", Code::UNAUTHORIZED),
            "sequence_mismatch" => ("publish.rejected.sequence_mismatch", Code::UNAUTHORIZED),
            "replay" => ("publish.rejected.replay", Code::FORBIDDEN),
            "out_of_window" => ("publish.rejected.out_of_window", Code::FORBIDDEN),
            "malformed_senml" => ("publish.rejected.malformed_senml", Code::BAD_REQUEST),
            "malformed_cose" => ("publish.rejected.malformed_cose", Code::BAD_REQUEST),
            "malformed_jws" => ("publish.rejected.malformed_jws", Code::BAD_REQUEST),
            _ => ("publish.rejected.malformed_reading", Code::BAD_REQUEST),
        };
        self.count(counter);
        tracing::warn!(reason, peer = %req.peer, topic = req.path.join("/"), "publication refused");
        // §8.2: a Confirmable update whose number is out of window is answered with Reset, so
        // the device resynchronises by re-registering.
        if matches!(reason, "replay" | "out_of_window") {
            return if req.confirmable() {
                Reply::Reset
            } else {
                Reply::Nothing
            };
        }
        diagnostic(code, reason)
    }

    /// `PUT /ps/N/<href>`: verify (done in step 1), authorize, check freshness, store.
    fn publish(
        &mut self,
        b: &Batch<'_>,
        req: &Request,
        check: &Option<Result<Checked, &'static str>>,
    ) -> Result<Reply, StoreError> {
        let checked = match check {
            Some(Ok(c)) => c.clone(),
            Some(Err(reason)) => return Ok(self.reject_publication(reason, req)),
            None => return Ok(self.reject_publication("unknown_topic", req)),
        };
        let Some(entry) = self.entry(checked.reg_id).cloned() else {
            return Ok(self.reject_publication("unknown_topic", req));
        };
        if !self.is_authorized(&entry.reg.authorized_by) {
            return Ok(self.reject_publication("unauthorized_identity", req));
        }
        if req
            .auth
            .as_ref()
            .is_some_and(|a| !a.speaks_for(&entry.reg.ep, &entry.reg.key))
        {
            return Ok(self.reject_publication("dtls_identity_mismatch", req));
        }
        let mut checked = checked;
        let highest = self.highest(&checked.ep);
        if let Some((k, bits)) = checked.lsb {
            // Another reading of this device earlier in the batch may have moved the mark.
            let seq = freshness::reconstruct(highest, k, bits).unwrap_or(0);
            if seq != checked.seq {
                let Some(c) = self
                    .svc
                    .check_one(req, self.now)
                    .ok()
                    .filter(|c| c.seq == seq)
                else {
                    return Ok(self.reject_publication("sequence_mismatch", req));
                };
                checked = c;
            }
        }
        match freshness::check(highest, checked.seq, &self.svc.config.freshness) {
            Verdict::Fresh => {}
            verdict => {
                // A retransmission of the Confirmable message that delivered a stored reading
                // (same sender, same message ID, same bytes) gets its original answer; the
                // same bytes from anyone else, or in a new message, are a replay.
                if let Some(stored) = b.reading(&checked.ep, checked.seq)? {
                    if stored.raw == req.payload
                        && req.message_id.is_some()
                        && stored.message_id == req.message_id
                        && stored.peer == req.peer.to_string()
                    {
                        self.count("publish.duplicate");
                        return Ok(respond(Code::CHANGED));
                    }
                }
                return Ok(self.reject_publication(verdict.reason(), req));
            }
        }
        let topic = req.path.join("/");
        b.insert_reading(&NewReading {
            registration: checked.reg_id,
            ep: &checked.ep,
            topic: &topic,
            seq: checked.seq,
            timestamp: checked.timestamp,
            content_format: checked.content_format,
            raw: &req.payload,
            decoded: &checked.decoded,
            received_at: self.now,
            peer: &req.peer.to_string(),
            message_id: req.message_id,
        })?;
        b.set_highest(&checked.ep, checked.seq, self.now)?;
        self.new_highest.insert(checked.ep, checked.seq);
        self.count("publish.accepted");
        tracing::debug!(ep = %checked.ep, seq = checked.seq, "reading stored");
        Ok(respond(Code::CHANGED))
    }

    /// `GET /ps/N/<href>`: the latest reading, or history with `n`/`after`.
    fn read_topic(&mut self, b: &Batch<'_>, req: &Request) -> Result<Reply, StoreError> {
        let Some((entry, href)) = self.svc.topic(req, self.now) else {
            self.count("request.not_found");
            return Ok(respond(Code::NOT_FOUND));
        };
        let ep = entry.reg.ep;
        let topic_cf = entry
            .resources
            .iter()
            .find(|(h, _, _)| h == href)
            .and_then(|r| r.1);
        let history = req.query("n").is_some() || req.query("after").is_some();
        if !history {
            self.count("request.latest");
            if req.accept.is_some_and(|a| Some(a) != topic_cf) {
                return Ok(respond(Code::NOT_ACCEPTABLE));
            }
            return Ok(match b.latest_reading(&ep)? {
                Some(r) => Reply::Response(Response {
                    code: Code::CONTENT,
                    content_format: Some(r.content_format),
                    etag: Some(r.seq.to_be_bytes().to_vec()),
                    payload: r.raw,
                    ..Default::default()
                }),
                None => diagnostic(Code::NOT_FOUND, "no reading yet"),
            });
        }
        self.count("request.history");
        if req.accept.is_some_and(|a| a != ContentFormat::CBOR.0) {
            return Ok(respond(Code::NOT_ACCEPTABLE));
        }
        let n = req
            .query("n")
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(10)
            .min(self.svc.config.max_history);
        let readings = match req.query("after").and_then(|v| v.parse::<u64>().ok()) {
            Some(after) => b.history(&ep, after, n)?,
            None => b.recent(&ep, n)?,
        };
        // A CBOR array of byte strings, each the exact signed reading as received.
        let mut out = Vec::new();
        cbor_head(&mut out, 4, readings.len() as u64);
        for r in &readings {
            cbor_head(&mut out, 2, r.raw.len() as u64);
            out.extend_from_slice(&r.raw);
        }
        Ok(content(ContentFormat::CBOR, out))
    }
}

fn cbor_head(out: &mut Vec<u8>, major: u8, n: u64) {
    let mut buf = [0u8; 9];
    let mut e = sigil_objects::cbor::Encoder::new(&mut buf);
    let r = match major {
        4 => e.array(n as usize).map(|_| ()),
        _ => e.bytes_header(n as usize).map(|_| ()),
    };
    if r.is_ok() {
        let len = e.finish();
        out.extend_from_slice(&buf[..len]);
    }
}
