//! The request handling of the Resource Directory and the broker, synchronous and
//! transport-free: a batch of [`Request`]s in, one [`Reply`] each out, one database
//! transaction per batch (see [`crate::coap`] for the message layer below).
//!
//! A batch is handled in three steps:
//! 1. signature checks of every publication, in parallel, against the registrations known at
//!    the start of the batch (pure CPU work, no shared state written; [`crate::broker`]);
//! 2. everything else in request order inside one database transaction ([`crate::routes`]):
//!    authorization, freshness against the per-identity high-water mark, registrations,
//!    reads;
//! 3. commit; only then are the responses released, so an acknowledged reading is durable.
//!
//! Resources (docs/wire-formats.md):
//! - `GET /.well-known/core` (RFC 6690 §4)
//! - `POST /rd?ep=&lt=&base=&sq=&ss=` register, `POST /rd/N` update, `DELETE /rd/N?sq=&ss=`
//! - `GET /rd-lookup/ep`, `GET /rd-lookup/res` (RFC 9176 §6)
//! - `GET /ps` topic discovery; `PUT /ps/N/<href>` publish; `GET /ps/N/<href>` latest;
//!   `GET /ps/N/<href>?n=&after=` history as a CBOR array of the signed readings.

use crate::auth::Credentials;
use crate::authz::{Authority, Tokens};
use crate::broker::Published;
use crate::context::{diagnostic, Ctx, Reply, Request, Response};
use crate::rd::Entry;
use crate::stats::Stats;
use crate::store::{IdentityKind, Store, StoreError};
use sigil_coap::Code;
use sigil_crypto::RustCrypto;
use sigil_freshness::FreshnessPolicy;
use sigil_identity::Identity;
use sigil_objects::mac::ReadingKey;
use sigil_time::UnixTime;
use std::collections::{BTreeMap, HashMap, HashSet};

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
    /// Most readings one history request may ask for (`n`); more is refused with 4.00.
    pub max_history: u32,
    /// Lifetime when a registration gives none (RFC 9176 §5: 90000 s).
    pub default_lifetime: u32,
    /// Max-Age of the 5.03 answered while the database has no space (seconds).
    pub retry_after_full_secs: u32,
    /// Readings are served only to a coaps:// session of an identity granted the sensor (or
    /// its kit) with `sigil provision grant`, and to the sensor itself: 4.01 without a
    /// session, 4.03 without a grant. Off: anyone may read (every reading is signed end to
    /// end, so reading proves nothing and changes nothing).
    pub authorize_reads: bool,
    /// Seconds an access token from `/token` stays valid.
    pub token_lifetime: u32,
    /// The token tables' caps and how fast `/token` issues, per subject and per session.
    pub token_caps: crate::authz::TokenCaps,
    /// The budget of signature verifications for unauthenticated datagrams
    /// ([`crate::verify`]).
    pub verify_rates: crate::verify::VerifyRates,
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
            retry_after_full_secs: 30,
            authorize_reads: false,
            token_lifetime: 3600,
            token_caps: Default::default(),
            verify_rates: Default::default(),
        }
    }
}

/// Max-Age of the 5.03 answered when the database stayed locked by another process.
const BUSY_RETRY_SECS: u32 = 2;

pub struct Service {
    store: Store,
    state: State,
    data_version: i64,
    /// Bumped whenever the authorized list may have changed; see [`Service::changed_credentials`].
    generation: u64,
    generation_seen: u64,
    stats: Stats,
    local: BTreeMap<&'static str, u64>,
    log: crate::log::LogLimiter,
    /// The access-control server (with coaps:// only: tokens are asked for over a session).
    authority: Option<Authority>,
    /// The tokens held as a resource server, and the generation of their PoP keys last
    /// handed to DTLS.
    tokens: Tokens,
    tokens_seen: u64,
    /// Readings committed and not yet taken for their observers.
    published: Vec<Published>,
}

/// What the service knows in memory (a cache of the database, updated after each commit).
/// Shared read-only with the verification threads.
pub(crate) struct State {
    pub crypto: RustCrypto,
    pub config: ServiceConfig,
    pub entries: HashMap<i64, Entry>,
    pub by_ep: HashMap<Identity, i64>,
    pub authorized: HashMap<Identity, IdentityKind>,
    /// Revoked identities and when each was revoked (docs/security.md, "Revocation").
    pub revoked: HashMap<Identity, i64>,
    /// Read grants: reader identity to the devices and groups it may read.
    pub read_grants: HashMap<Identity, HashSet<Identity>>,
    pub highest: HashMap<Identity, u64>,
    /// The active PSK-only nodes (`sigil provision psk-node`) and their reading keys, for
    /// MACed readings (`sigil_objects::mac`): derived from the PSK, never the PSK itself. Only
    /// these identities may register without a key and publish MACed or session readings.
    pub reading_keys: HashMap<Identity, ReadingKey>,
    /// Signature verification threads (none when `verify_workers` is 1).
    pub pool: Option<rayon::ThreadPool>,
    /// What verifications for unauthenticated datagrams may cost ([`crate::verify`]).
    pub verify: crate::verify::SharedVerifyBudget,
}

/// The reading key of each pre-shared key's identity (`sigil_objects::mac::ReadingKey`).
fn reading_keys(psks: &HashMap<Identity, Vec<u8>>) -> HashMap<Identity, ReadingKey> {
    psks.iter()
        .map(|(id, psk)| (*id, ReadingKey::derive(&RustCrypto, psk, id)))
        .collect()
}

/// Grants as a map from reader to what it may read.
fn grants_by_reader(grants: Vec<(Identity, Identity)>) -> HashMap<Identity, HashSet<Identity>> {
    let mut by_reader: HashMap<Identity, HashSet<Identity>> = HashMap::new();
    for (reader, object) in grants {
        by_reader.entry(reader).or_default().insert(object);
    }
    by_reader
}

impl Service {
    pub fn new(store: Store, config: ServiceConfig, stats: Stats) -> Result<Self, StoreError> {
        let verify_rates = config.verify_rates;
        let token_caps = config.token_caps;
        let mut state = State {
            crypto: RustCrypto,
            config,
            entries: HashMap::new(),
            by_ep: HashMap::new(),
            authorized: store.authorized()?,
            revoked: store.revoked()?,
            read_grants: grants_by_reader(store.effective_read_grants()?),
            highest: store.freshness()?,
            reading_keys: reading_keys(&store.psk_nodes()?),
            pool: None,
            verify: crate::verify::SharedVerifyBudget::new(verify_rates, stats.clone()),
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
            state.entries.insert(reg.id, Entry::new(reg));
        }
        Ok(Self {
            data_version: store.data_version()?,
            generation: 1,
            generation_seen: 0,
            store,
            state,
            stats,
            local: BTreeMap::new(),
            log: crate::log::LogLimiter::default(),
            authority: None,
            tokens: Tokens::new(token_caps),
            tokens_seen: 0,
            published: Vec::new(),
        })
    }

    /// Makes this server an access-control server for itself and for the sensors that serve
    /// their own readings (`/token`, `/authz-info`; [`crate::authz`]).
    pub fn set_authority(&mut self, authority: Authority) {
        self.authority = Some(authority);
    }

    fn count(&mut self, key: &'static str) {
        *self.local.entry(key).or_insert(0) += 1;
    }

    /// The monotonic time the verification budget ([`crate::verify`]) is charged at, set by
    /// the message layer before each batch.
    pub fn set_instant(&mut self, now: sigil_time::Instant) {
        self.state.verify.set_now(now);
        self.state.verify.publish(&self.stats);
    }

    /// Reloads the authorized list when another process (e.g. `sigil provision`) committed.
    fn refresh_authorized(&mut self) {
        if let Ok(v) = self.store.data_version() {
            if v != self.data_version {
                if let (Ok(a), Ok(g), Ok(p), Ok(r)) = (
                    self.store.authorized(),
                    self.store.effective_read_grants(),
                    self.store.psk_nodes(),
                    self.store.revoked(),
                ) {
                    self.state.authorized = a;
                    self.state.revoked = r;
                    // A revoked subject's tokens and `cti`s go now, not at their expiry.
                    let authorized = &self.state.authorized;
                    self.tokens
                        .forget_subjects(|id| authorized.contains_key(id));
                    self.state.read_grants = grants_by_reader(g);
                    self.state.reading_keys = reading_keys(&p);
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
        if self.generation == self.generation_seen && self.tokens.generation == self.tokens_seen {
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
        self.tokens_seen = self.tokens.generation;
        Some(Credentials {
            token_psks: self
                .tokens
                .psks(|id| self.state.authorized.contains_key(id)),
            token_keys: self
                .tokens
                .keys(|id| self.state.authorized.contains_key(id)),
            authorized: self.state.authorized.keys().copied().collect(),
            psk_nodes: self.state.reading_keys.keys().copied().collect(),
            revoked: self.state.revoked.keys().copied().collect(),
            psks: psks
                .into_iter()
                .filter(|(id, _)| self.state.authorized.contains_key(id))
                .collect(),
        })
    }

    /// Deletes up to `limit` readings received before `before` (Unix seconds) through the
    /// service's own connection, between batches ([`Store::prune_readings`]: never a device's
    /// or a topic's latest, never waiting for another process's lock). Its own commits leave
    /// `PRAGMA data_version` as it is, so pruning a backlog does not make every batch reload
    /// the authorized list and the DTLS credentials.
    pub fn prune_readings(&mut self, before: i64, limit: u32) -> Result<u64, StoreError> {
        self.store.prune_readings(before, limit)
    }

    /// The readings stored since the last call, in the order they were committed.
    pub fn take_published(&mut self) -> Vec<Published> {
        std::mem::take(&mut self.published)
    }

    /// Whether the observation registered by `req` may go on at `now` (see
    /// [`Ctx::observe_check`]): the observed registration's id, or the refusal that ends it.
    pub fn observe_check(&mut self, req: &Request, now: UnixTime) -> Result<i64, Box<Reply>> {
        self.refresh_authorized();
        self.tokens.expire(now);
        let (mut h, mut e, mut r, mut a, mut p) = Default::default();
        let mut local = std::mem::take(&mut self.local);
        let result = Ctx {
            svc: &self.state,
            now,
            new_highest: &mut h,
            new_entries: &mut e,
            removed: &mut r,
            new_authorized: &mut a,
            counts: &mut local,
            log: &mut self.log,
            authority: self.authority.as_mut(),
            tokens: &mut self.tokens,
            published: &mut p,
        }
        .observe_check(req);
        self.stats.merge(&mut local);
        self.local = local;
        result
    }

    /// Handles a batch at wall-clock time `now` (registrations' lifetimes, stored
    /// timestamps); returns one reply per request, in order.
    pub fn handle_batch(&mut self, requests: &[Request], now: UnixTime) -> Vec<Reply> {
        self.refresh_authorized();
        self.tokens.expire(now);
        let checks = self.state.check_publications(requests, now);
        let mut replies = Vec::with_capacity(requests.len());
        // Cache changes become visible only after the commit succeeds.
        let mut new_highest: HashMap<Identity, u64> = HashMap::new();
        let mut new_entries: Vec<Entry> = Vec::new();
        let mut removed: Vec<i64> = Vec::new();
        let mut new_authorized: Vec<Identity> = Vec::new();
        let mut published = Vec::new();
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
                log: &mut self.log,
                authority: self.authority.as_mut(),
                tokens: &mut self.tokens,
                published: &mut published,
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
                self.published.extend(published);
            }
            Err(e) => {
                tracing::error!(error = %e, "batch transaction failed; nothing from it was stored");
                self.count("server.store_error");
                let reply = match e {
                    // Lack of space passes (a checkpoint, an operator freeing space): 5.03
                    // with Max-Age tells the client when to try again (RFC 7252 §5.9.3.4).
                    StoreError::Full(_) => {
                        self.count("server.store_full");
                        Reply::Response(Response {
                            code: Code::SERVICE_UNAVAILABLE,
                            payload: b"storage full; nothing was stored".to_vec(),
                            max_age: Some(self.state.config.retry_after_full_secs),
                            ..Default::default()
                        })
                    }
                    // Another process held the database past the busy timeout, twice: the
                    // client tries again shortly (a Sigil device keeps the reading).
                    StoreError::Busy(_) => {
                        self.count("server.store_busy");
                        Reply::Response(Response {
                            code: Code::SERVICE_UNAVAILABLE,
                            payload: b"database busy; nothing was stored".to_vec(),
                            max_age: Some(BUSY_RETRY_SECS),
                            ..Default::default()
                        })
                    }
                    _ => diagnostic(Code::INTERNAL_SERVER_ERROR, "storage failure"),
                };
                replies.extend(requests.iter().map(|_| reply.clone()));
            }
        }
        self.tokens.publish(&self.stats);
        let mut local = std::mem::take(&mut self.local);
        self.stats.merge(&mut local);
        self.local = local;
        for (kind, n) in self.log.flush(now.as_secs()) {
            tracing::warn!(
                kind,
                suppressed = n,
                "similar log lines suppressed (counters are exact)"
            );
        }
        replies
    }
}
