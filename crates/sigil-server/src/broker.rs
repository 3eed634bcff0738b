//! The publish-subscribe broker (draft-ietf-core-coap-pubsub) of RFC 8387 §7: topic discovery,
//! publication (verify before store), the latest reading and the history.
//!
//! A topic `/ps/N/<href>` is a resource the registration `/rd/N` announced. Publication needs
//! a live registration; the stored readings stay readable after the registration's lifetime
//! has run out (each carries its own proof), until the registration is removed or its device
//! (or kit) is revoked.
//!
//! A reading is protected one of three ways ([`Protection`], docs/security.md): signed
//! (COSE_Sign1 or JWS, the RFC 8387 default), MACed (COSE_Mac0 under the reading key a
//! PSK-only node derives from its pre-shared key), or not at all but sent over the node's own
//! DTLS session (plain SenML; the broker numbers such readings itself).

use crate::auth::{mismatched, PeerAuth};
use crate::context::{
    content, diagnostic, respond, Ctx, Operation, Rejection, Reply, Request, Response,
};
use crate::rd::{Entry, B64};
use crate::service::State;
use crate::store::{Batch, NewReading, Protection, StoreError};
use base64::Engine;
use sigil_coap::link::write_link;
use sigil_coap::{Code, ContentFormat};
use sigil_freshness::{self as freshness, Verdict};
use sigil_identity::Identity;
use sigil_objects::cose::SeqField;
use sigil_objects::mac::{MacedReading, CONTENT_FORMAT_MAC0};
use sigil_objects::senml::{self, OwnedValue};
use sigil_objects::{ReadingFormat, SignedReading};
use sigil_time::UnixTime;
use std::collections::HashMap;

/// Readings a history request returns when it gives no `n`.
pub const DEFAULT_HISTORY: u32 = 10;

/// Result of the parallel signature check of one publication.
#[derive(Clone, Debug)]
pub(crate) struct Checked {
    reg_id: i64,
    ep: Identity,
    seq: u64,
    timestamp: Option<u64>,
    content_format: u16,
    decoded: String,
    /// Low-bits mode: the full number was reconstructed from the high-water mark.
    lsb: Option<(u8, u64)>,
    protection: Protection,
    /// Whether the signature (or tag) was checked. A signed reading a cheap check refuses
    /// anyway (a number at or below the mark or too far ahead, a revoked or unlisted device)
    /// is not verified: the verification budget is kept for the rest ([`crate::verify`]).
    verified: bool,
}

/// What makes publications in one batch copies of each other: the topic's path, the content
/// format and the payload.
type Copies<'r> = (&'r [String], Option<u16>, &'r [u8]);

/// What step 1 found for one request: `None` for a request that is no publication.
pub(crate) type Check = Option<Result<Checked, Rejection>>;

/// A reading a batch stored: what its topic's observers are sent once the batch commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The registration whose topics it belongs to.
    pub registration: i64,
    pub seq: u64,
    pub content_format: u16,
    /// The reading exactly as received (signed, or MACed, or as the session delivered it).
    pub raw: Vec<u8>,
}

pub(crate) fn is_publish(req: &Request) -> bool {
    req.code == Code::PUT && req.path.first().is_some_and(|p| p == "ps") && req.path.len() == 3
}

/// The ETag of a topic's current representation: its latest sequence number, 8 bytes
/// big-endian (RFC 7252 §5.10.6).
pub fn etag(seq: u64) -> Vec<u8> {
    seq.to_be_bytes().to_vec()
}

impl State {
    /// Step 1: signature checks of all publications, spread over worker threads.
    pub(crate) fn check_publications(&self, requests: &[Request], now: UnixTime) -> Vec<Check> {
        let mut out: Vec<Check> = vec![None; requests.len()];
        let publications: Vec<usize> = (0..requests.len())
            .filter(|i| is_publish(&requests[*i]))
            .collect();
        if publications.is_empty() {
            return out;
        }
        // Copies of one publication in the batch (the same bytes to the same topic, none over
        // a session, from any address) have one outcome: the first is checked, the copies
        // take its result without a verification of their own (below).
        let mut first: HashMap<Copies<'_>, usize> = HashMap::new();
        let mut jobs = Vec::with_capacity(publications.len());
        let mut copies = Vec::new();
        for i in publications {
            let r = &requests[i];
            if r.auth.is_some() {
                jobs.push(i);
                continue;
            }
            match first.entry((r.path.as_slice(), r.content_format, r.payload.as_slice())) {
                std::collections::hash_map::Entry::Occupied(f) => copies.push((i, *f.get())),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(i);
                    jobs.push(i);
                }
            }
        }
        // Small batches are verified inline; larger ones on the persistent worker pool.
        let results: Vec<(usize, Result<Checked, Rejection>)> = match &self.pool {
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
        // A copy of a reading that verified is refused by its number once the first is stored
        // (or verified then, if the first was refused for something of its own), so a reading
        // captured on the path and sent many times in one batch costs one verification; a copy
        // of one refused is refused alike. One the budget refused is charged on its own.
        for (i, f) in copies {
            let result = match &out[f] {
                Some(Ok(c)) => Ok(Checked {
                    verified: false,
                    ..c.clone()
                }),
                Some(Err(Rejection::VerifyBudget(_))) | None => self.check_one(&requests[i], now),
                Some(Err(why)) => Err(*why),
            };
            if !matches!(&out[f], Some(Err(Rejection::VerifyBudget(_))) | None) {
                self.verify.skipped_copy();
            }
            out[i] = Some(result);
        }
        out
    }

    /// Everything about a publication that does not depend on other requests in the batch.
    fn check_one(&self, req: &Request, now: UnixTime) -> Result<Checked, Rejection> {
        self.check_at(req, now, None)
    }

    /// [`State::check_one`], with low-bits numbers reconstructed from `highest` (this batch's
    /// high-water mark) instead of the committed one.
    pub(crate) fn check_at(
        &self,
        req: &Request,
        now: UnixTime,
        highest: Option<u64>,
    ) -> Result<Checked, Rejection> {
        self.check_verifying(req, now, highest, false)
    }

    /// [`State::check_at`]; with `always`, the signature is verified even if a cheap check
    /// says the reading will be refused.
    fn check_verifying(
        &self,
        req: &Request,
        now: UnixTime,
        highest: Option<u64>,
        always: bool,
    ) -> Result<Checked, Rejection> {
        let (entry, href) = self
            .topic(req)
            .filter(|(e, _)| e.is_live(now.as_secs()))
            .ok_or(Rejection::UnknownTopic)?;
        let unsupported = Rejection::UnsupportedFormat(Operation::Publish);
        let cf = req.content_format.ok_or(unsupported)?;
        if entry.content_format(href).is_some_and(|t| t != cf) {
            return Err(unsupported);
        }
        let highest =
            highest.unwrap_or_else(|| self.highest.get(&entry.reg.ep).copied().unwrap_or(0));
        let psk_only = cf == CONTENT_FORMAT_MAC0
            || cf == ContentFormat::SENML_CBOR.0
            || cf == ContentFormat::SENML_JSON.0;
        if psk_only {
            // Only a PSK-only node's (keyless) entry takes these, and only over the node's own
            // session: a signing device's entry never does, and a holder of the reading key (a
            // granted reader) cannot publish as the node.
            if entry.reg.key.is_some() {
                return Err(unsupported);
            }
            if !matches!(&req.auth, Some(PeerAuth::Psk(id)) if *id == entry.reg.ep) {
                return Err(Rejection::NodeSessionRequired);
            }
            return if cf == CONTENT_FORMAT_MAC0 {
                self.check_maced(req, entry, highest)
            } else {
                Self::check_unprotected(req, entry, cf)
            };
        }
        let format = ReadingFormat::from_content_format(cf).ok_or(unsupported)?;
        // A PSK-only node registered no key: nothing to verify a signature with.
        let key = entry.reg.key.as_ref().ok_or(unsupported)?;
        let reading = SignedReading::parse(format, &req.payload)?;
        if reading.kid != entry.reg.ep {
            return Err(Rejection::KidMismatch);
        }
        let (seq, lsb) = match reading.seq {
            SeqField::Full(s) => (s, None),
            SeqField::LowBits { k, bits } => (
                freshness::reconstruct(highest, k, bits).ok_or(Rejection::SequenceMismatch)?,
                Some((k, bits)),
            ),
        };
        let mut buf = vec![0u8; reading.senml_len_bound()];
        let senml_bytes = reading.senml(&mut buf)?;
        let decoded = decode_senml(format, senml_bytes).ok_or(Rejection::MalformedSenml)?;
        // The cheap refusals before the verification: the publication handler refuses these
        // whatever the signature says.
        let refused_anyway = !always
            && (freshness::check(highest, seq, &self.config.freshness) != Verdict::Fresh
                || [entry.reg.ep, entry.reg.authorized_by]
                    .iter()
                    .any(|id| self.revoked.contains_key(id))
                || !self.authorized.contains_key(&entry.reg.authorized_by));
        if !refused_anyway {
            let mut scratch = vec![0u8; reading.scratch_len()];
            let mut verify =
                || reading.verify_end_to_end(&self.crypto, key, &entry.reg.ep, seq, &mut scratch);
            if req.auth.is_some() {
                // The datagram came over an authenticated session.
                verify()?;
            } else {
                self.verify
                    .run(req.peer, verify, Result::is_ok)
                    .map_err(Rejection::VerifyBudget)??;
            }
        }
        Ok(Checked {
            reg_id: entry.reg.id,
            ep: entry.reg.ep,
            seq,
            timestamp: reading.timestamp,
            content_format: cf,
            decoded,
            lsb,
            protection: Protection::Signed,
            verified: !refused_anyway,
        })
    }

    /// A COSE_Mac0 reading: the tag under the node's reading key (derived from its PSK), the
    /// kid and the sequence number as for a signed one.
    fn check_maced(
        &self,
        req: &Request,
        entry: &Entry,
        highest: u64,
    ) -> Result<Checked, Rejection> {
        let reading = MacedReading::parse(&req.payload)?;
        if reading.kid != entry.reg.ep {
            return Err(Rejection::KidMismatch);
        }
        let key = self
            .reading_keys
            .get(&entry.reg.ep)
            .ok_or(Rejection::NoReadingKey)?;
        let (seq, lsb) = match reading.seq {
            SeqField::Full(s) => (s, None),
            SeqField::LowBits { k, bits } => (
                freshness::reconstruct(highest, k, bits).ok_or(Rejection::SequenceMismatch)?,
                Some((k, bits)),
            ),
        };
        reading.verify(&self.crypto, key, seq)?;
        let decoded =
            decode_senml(ReadingFormat::Cose, reading.senml()).ok_or(Rejection::MalformedSenml)?;
        Ok(Checked {
            reg_id: entry.reg.id,
            ep: entry.reg.ep,
            seq,
            timestamp: reading.timestamp,
            content_format: CONTENT_FORMAT_MAC0,
            decoded,
            lsb,
            protection: Protection::Mac,
            verified: true,
        })
    }

    /// A plain SenML reading (its integrity and freshness are the node's session's, checked
    /// by the caller). Numbered when stored ([`Ctx::publish`]).
    fn check_unprotected(req: &Request, entry: &Entry, cf: u16) -> Result<Checked, Rejection> {
        let format = if cf == ContentFormat::SENML_CBOR.0 {
            ReadingFormat::Cose
        } else {
            ReadingFormat::Jws
        };
        let decoded = decode_senml(format, &req.payload).ok_or(Rejection::MalformedSenml)?;
        Ok(Checked {
            reg_id: entry.reg.id,
            ep: entry.reg.ep,
            seq: 0,
            timestamp: None,
            content_format: cf,
            decoded,
            lsb: None,
            protection: Protection::Session,
            verified: true,
        })
    }

    /// The registration and href a `/ps/N/<href>` path names, live or expired.
    fn topic<'r>(&self, req: &'r Request) -> Option<(&Entry, &'r str)> {
        let [ps, n, href] = req.path.as_slice() else {
            return None;
        };
        if ps != "ps" {
            return None;
        }
        let entry = self.entries.get(&n.parse::<i64>().ok()?)?;
        entry.hosts(href).then_some((entry, href.as_str()))
    }
}

/// Decodes and validates the SenML pack, returning the resolved records as JSON.
fn decode_senml(format: ReadingFormat, bytes: &[u8]) -> Option<String> {
    let resolved = match format {
        ReadingFormat::Cose => {
            let pack = senml::Pack::parse_cbor(bytes).ok()?;
            senml::resolve(pack.records())
        }
        ReadingFormat::Jws => {
            let recs = senml::parse_json(bytes).ok()?;
            senml::resolve(recs.iter().map(|r| r.as_record()))
        }
    }
    .ok()?;
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
    serde_json::to_string(&json).ok()
}

type Handled = Result<Reply, StoreError>;

impl Ctx<'_> {
    /// The registration and href a `/ps/N/<href>` path names as this batch sees it, live or
    /// expired.
    fn topic_entry(&self, req: &Request) -> Option<(Entry, String)> {
        let [_, n, href] = req.path.as_slice() else {
            return None;
        };
        let e = self.entry(n.parse().ok()?)?;
        e.hosts(href).then(|| (e.clone(), href.clone()))
    }

    /// `GET /ps`: topic discovery, the topics of live registrations (RFC 6690 link format).
    pub fn topics(&mut self) -> Reply {
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

    /// `PUT /ps/N/<href>`: verify (done in step 1), authorize, check freshness, evaluate
    /// If-Match / If-None-Match against the topic's latest reading (RFC 7252 §5.10.8), store.
    pub fn publish(&mut self, b: &Batch<'_>, req: &Request, check: &Check) -> Handled {
        let checked = match check {
            Some(Ok(c)) => c.clone(),
            Some(Err(why)) => return Ok(self.reject(*why, req)),
            None => return Ok(self.reject(Rejection::UnknownTopic, req)),
        };
        let Some(entry) = self
            .entry(checked.reg_id)
            .filter(|e| e.is_live(self.secs()))
            .cloned()
        else {
            return Ok(self.reject(Rejection::UnknownTopic, req));
        };
        if let Some(r) = self.entry_revoked(&entry) {
            return Ok(self.reject_revoked(Rejection::Revoked(Operation::Publish), r, req));
        }
        if !self.is_authorized(&entry.reg.authorized_by) {
            return Ok(self.reject(Rejection::NotAuthorized(Operation::Publish), req));
        }
        let refused = match &req.auth {
            // A token's session publishes only what its scope allows, for its own subject.
            Some(auth @ crate::auth::PeerAuth::Token { .. }) => {
                !self.token_may_publish(auth, &entry.reg.ep)
            }
            auth => mismatched(auth.as_ref(), &entry.reg.ep, entry.reg.key.as_ref()),
        };
        if refused {
            return Ok(self.reject(Rejection::PeerMismatch(Operation::Publish), req));
        }
        let mut checked = checked;
        let highest = self.highest(&checked.ep);
        if checked.protection == Protection::Session {
            // The session delivered it: a retransmission of the message that delivered the
            // latest reading gets its original answer; anything else is the next number.
            if let Some(latest) = b.latest_reading(&checked.ep)? {
                if latest.raw == req.payload
                    && req.message_id.is_some()
                    && latest.message_id == req.message_id
                    && latest.peer == req.peer.to_string()
                {
                    self.count("publish.duplicate");
                    return Ok(respond(Code::CHANGED));
                }
            }
            let Some(next) = highest.checked_add(1) else {
                return Ok(self.reject(Rejection::OutOfWindow, req));
            };
            checked.seq = next;
        }
        if let Some((k, bits)) = checked.lsb {
            // Another reading of this device earlier in the batch may have moved the mark.
            let seq = freshness::reconstruct(highest, k, bits).unwrap_or(0);
            if seq != checked.seq {
                let Some(c) = self
                    .svc
                    .check_at(req, self.now, Some(highest))
                    .ok()
                    .filter(|c| c.seq == seq)
                else {
                    return Ok(self.reject(Rejection::SequenceMismatch, req));
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
                        return Ok(Reply::Response(Response {
                            code: Code::CHANGED,
                            ..Default::default()
                        }));
                    }
                }
                let why = match verdict {
                    Verdict::TooFarAhead { .. } => Rejection::OutOfWindow,
                    _ => Rejection::Replay,
                };
                let reply = self.reject(why, req);
                // A signed 4.09 only toward the address the device last used: its last
                // proven registration or update, or its latest stored reading. Anyone can
                // replay a public reading from anywhere else, and gets the bare Reset.
                let from_device = req.signed_answer
                    && (entry.peer == Some(req.peer)
                        || b.latest_reading(&checked.ep)?
                            .is_some_and(|r| r.peer == req.peer.to_string()));
                if req.signed_answer && req.confirmable() && !from_device {
                    self.count("answer.unsigned.resync_other_address");
                }
                return Ok(crate::answers::resync(reply, req, checked.ep, from_device));
            }
        }
        if !checked.verified {
            // Skipped by a cheap check against the committed mark, fresh against this
            // batch's: verified now.
            match self.svc.check_verifying(req, self.now, Some(highest), true) {
                Ok(c) if c.verified && c.seq == checked.seq => checked = c,
                Ok(_) => return Ok(self.reject(Rejection::SequenceMismatch, req)),
                Err(why) => return Ok(self.reject(why, req)),
            }
        }
        let latest = b.latest_reading(&checked.ep)?.map(|r| etag(r.seq));
        if !req.conditions.hold(latest.as_deref().map(Some)) {
            return Ok(self.reject(Rejection::PreconditionFailed, req));
        }
        let topic = req.path.join("/");
        let now = self.secs();
        b.insert_reading(&NewReading {
            registration: checked.reg_id,
            ep: &checked.ep,
            topic: &topic,
            seq: checked.seq,
            timestamp: checked.timestamp,
            content_format: checked.content_format,
            raw: &req.payload,
            decoded: &checked.decoded,
            received_at: now,
            peer: &req.peer.to_string(),
            message_id: req.message_id,
            protection: checked.protection,
        })?;
        b.set_highest(&checked.ep, checked.seq, now)?;
        self.new_highest.insert(checked.ep, checked.seq);
        self.published.push(Published {
            registration: checked.reg_id,
            seq: checked.seq,
            content_format: checked.content_format,
            raw: req.payload.clone(),
        });
        self.count("publish.accepted");
        self.count(match checked.protection {
            Protection::Signed => "publish.accepted.signed",
            Protection::Mac => "publish.accepted.mac",
            Protection::Session => "publish.accepted.session",
        });
        tracing::debug!(ep = %checked.ep, seq = checked.seq, "reading stored");
        Ok(Reply::Response(Response {
            code: Code::CHANGED,
            ..Default::default()
        }))
    }

    /// `GET /ps/N/<href>`: the latest reading, or the history with `n` (1 to `max_history`,
    /// default [`DEFAULT_HISTORY`]) and `after` (a sequence number).
    pub fn read_topic(&mut self, b: &Batch<'_>, req: &Request) -> Handled {
        let Some((entry, href)) = self.topic_entry(req) else {
            return Ok(self.reject(Rejection::NotFound, req));
        };
        let ep = entry.reg.ep;
        if let Err(why) = self.may_read(req, &entry) {
            return Ok(self.reject(why, req));
        }
        // A revoked device's readings are no longer served, latest or history: whoever holds
        // its key could have made the last ones (docs/security.md, "Revocation").
        if let Some(r) = self.entry_revoked(&entry) {
            return Ok(self.reject_revoked(Rejection::SensorRevoked, r, req));
        }
        let history = req.query("n").is_some() || req.query("after").is_some();
        if !history {
            self.count("request.latest");
            if req
                .accept
                .is_some_and(|a| Some(a) != entry.content_format(&href))
            {
                return Ok(self.reject(Rejection::NotAcceptable, req));
            }
            let latest = b.latest_reading(&ep)?;
            let tag = latest.as_ref().map(|r| etag(r.seq));
            if !req.conditions.hold(tag.as_deref().map(Some)) {
                return Ok(self.reject(Rejection::PreconditionFailed, req));
            }
            return Ok(match latest {
                Some(r) => Reply::Response(Response {
                    code: Code::CONTENT,
                    content_format: Some(r.content_format),
                    etag: tag,
                    payload: r.raw,
                    ..Default::default()
                }),
                // An observer of a topic with nothing published yet is registered: 2.05
                // without a payload, and the first reading comes as a notification.
                None if req.observe == Some(0) => respond(Code::CONTENT),
                None => diagnostic(Code::NOT_FOUND, "no reading yet"),
            });
        }
        self.count("request.history");
        let max = u64::from(self.svc.config.max_history);
        let n = match req.query_int("n", 1, max) {
            Ok(n) => n.map_or(DEFAULT_HISTORY.min(self.svc.config.max_history), |n| {
                n as u32
            }),
            Err(why) => return Ok(self.reject(why, req)),
        };
        let after = match req.query_int("after", 0, u64::MAX) {
            Ok(a) => a,
            Err(why) => return Ok(self.reject(why, req)),
        };
        if !req.accepts(ContentFormat::CBOR) {
            return Ok(self.reject(Rejection::NotAcceptable, req));
        }
        let latest = b.latest_reading(&ep)?.map(|r| etag(r.seq));
        if !req.conditions.hold(latest.as_deref().map(Some)) {
            return Ok(self.reject(Rejection::PreconditionFailed, req));
        }
        let readings = match after {
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

impl Ctx<'_> {
    /// Whether `req`, the request that registered an observation of a topic, may still be
    /// told about it: the topic is still there, its sensor not revoked, and the reader still
    /// allowed to read it (a withdrawn grant, an expired token or a revoked reader ends the
    /// observation). The refusal is counted and is the observation's last notification.
    pub(crate) fn observe_check(&mut self, req: &Request) -> Result<i64, Box<Reply>> {
        let Some((entry, _)) = self
            .topic_entry(req)
            .filter(|(e, _)| e.is_live(self.secs()))
        else {
            return Err(Box::new(self.reject(Rejection::NotFound, req)));
        };
        if let Err(why) = self.may_read(req, &entry) {
            return Err(Box::new(self.reject(why, req)));
        }
        if let Some(r) = self.entry_revoked(&entry) {
            return Err(Box::new(self.reject_revoked(
                Rejection::SensorRevoked,
                r,
                req,
            )));
        }
        Ok(entry.reg.id)
    }

    /// With `authorize_reads`: whether the request's session may read `entry`'s readings
    /// (the sensor itself, an identity granted the sensor or its kit, or a token's session
    /// whose scope allows it; [`crate::authz`]).
    fn may_read(&self, req: &Request, entry: &Entry) -> Result<(), Rejection> {
        if !self.svc.config.authorize_reads {
            return Ok(());
        }
        self.may_read_sensor(req, &entry.reg.ep, &entry.reg.authorized_by)
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
