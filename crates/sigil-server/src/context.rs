//! What every handler works with: the [`Request`] as the message layer hands it up, the
//! [`Reply`] it gets, the one [`Rejection`] type (CoAP code and counter in one place), and the
//! per-batch context `Ctx` that sees the batch's own writes before they are committed.

use crate::auth::PeerAuth;
use crate::rd::Entry;
use crate::service::State;
use crate::store::Ownership;
use sigil_coap::{Code, ContentFormat};
use sigil_identity::Identity;
use sigil_objects::ReadingError;
use sigil_time::UnixTime;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

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
    /// If-Match / If-None-Match (RFC 7252 §5.10.8).
    pub conditions: Preconditions,
    /// `scheme://authority` the request was sent to (Uri-Host and Uri-Port if the client gave
    /// them, RFC 7252 §6.4; otherwise the server's own address), to resolve the links it
    /// answers with (RFC 9176 §6).
    pub origin: String,
    /// The peer the transport authenticated (coaps://), `None` over plain CoAP.
    pub auth: Option<PeerAuth>,
    /// A plain coap:// request asking for signed answers ([`crate::answers`]).
    pub signed_answer: bool,
    /// The Observe option (RFC 7641): 0 registers, 1 deregisters.
    pub observe: Option<u32>,
}

impl Request {
    /// A request with no options and no payload (for answers made below the handlers).
    pub fn new(peer: SocketAddr, code: Code) -> Self {
        Self {
            peer,
            message_id: None,
            code,
            path: vec![],
            query: vec![],
            content_format: None,
            accept: None,
            payload: vec![],
            conditions: Preconditions::default(),
            origin: String::new(),
            auth: None,
            signed_answer: false,
            observe: None,
        }
    }

    pub fn confirmable(&self) -> bool {
        self.message_id.is_some()
    }

    /// The value of query parameter `name` (`name=value`; `name` alone gives "").
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query.iter().find_map(|q| {
            let (k, v) = q.split_once('=').unwrap_or((q.as_str(), ""));
            (k == name).then_some(v)
        })
    }

    /// An integer query parameter within `min..=max`; absent is `Ok(None)`, anything else
    /// that is not such an integer is a [`Rejection::BadQuery`].
    pub fn query_int(
        &self,
        name: &'static str,
        min: u64,
        max: u64,
    ) -> Result<Option<u64>, Rejection> {
        let Some(v) = self.query(name) else {
            return Ok(None);
        };
        // Digits only: `u64::from_str` would also take a leading `+`.
        let n = v
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| v.parse::<u64>().ok())
            .flatten();
        match n {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(Rejection::BadQuery { name, min, max }),
        }
    }

    /// Whether the client accepts `cf` (no Accept option accepts anything, RFC 7252 §5.10.4).
    pub fn accepts(&self, cf: ContentFormat) -> bool {
        self.accept.is_none_or(|a| a == cf.0)
    }
}

/// The conditional-request options of RFC 7252 §5.10.8.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// Every If-Match value, in order; an empty value means "the target exists".
    pub if_match: Vec<Vec<u8>>,
    pub if_none_match: bool,
}

impl Preconditions {
    /// Whether the request may be performed on a target whose current representation is
    /// `current` (`None`: the target does not exist; `Some(etag)`: it exists, with that ETag
    /// if it has one). §5.10.8.1: any If-Match value must match (an empty one matches any
    /// existing target); §5.10.8.2: If-None-Match requires that the target does not exist.
    pub fn hold(&self, current: Option<Option<&[u8]>>) -> bool {
        if !self.if_match.is_empty() {
            let Some(etag) = current else {
                return false;
            };
            if !self
                .if_match
                .iter()
                .any(|v| v.is_empty() || etag.is_some_and(|e| e == v.as_slice()))
            {
                return false;
            }
        }
        !(self.if_none_match && current.is_some())
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    pub code: Code,
    pub content_format: Option<u16>,
    pub payload: Vec<u8>,
    pub location_path: Vec<String>,
    pub etag: Option<Vec<u8>>,
    /// Max-Age (RFC 7252 §5.10.5): on a 5.03, when to try again (§5.9.3.4).
    pub max_age: Option<u32>,
    /// The device this answer is signed for if its request asks for signed answers
    /// ([`crate::answers`]): set by a handler that authenticated the device.
    pub answer_for: Option<Identity>,
    /// The signature the message layer put on the answer.
    pub signature: Option<sigil_crypto::Signature>,
    /// The Observe sequence number the message layer put on the answer (RFC 7641 §4.2).
    pub observe: Option<u32>,
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

/// Text a peer chose (an `ep`, a PSK identity), made fit for a log line: control characters
/// dropped, at most [`PEER_TEXT_MAX`] characters. What the peer said, not proof of who it is.
pub(crate) fn peer_text(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(PEER_TEXT_MAX)
        .collect()
}

/// The most characters of peer-chosen text a log line shows ([`peer_text`]).
pub(crate) const PEER_TEXT_MAX: usize = 80;

pub(crate) fn respond(code: Code) -> Reply {
    Reply::Response(Response {
        code,
        ..Default::default()
    })
}

pub(crate) fn diagnostic(code: Code, text: &str) -> Reply {
    Reply::Response(Response {
        code,
        payload: text.as_bytes().to_vec(),
        ..Default::default()
    })
}

pub(crate) fn content(cf: ContentFormat, payload: Vec<u8>) -> Reply {
    Reply::Response(Response {
        code: Code::CONTENT,
        content_format: Some(cf.0),
        payload,
        ..Default::default()
    })
}

/// The operation a refusal belongs to, for the reasons both share (their counters keep the
/// operation's prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Registration, update or removal (RFC 9176 §5).
    Register,
    /// Publication of a signed reading.
    Publish,
}

/// Every reason the server refuses a request. [`Rejection::code`] and
/// [`Rejection::counter`] are the one place each reason meets its CoAP code and its counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rejection {
    // The message layer (RFC 7252 §5.4.1, §5.7.2; RFC 7959).
    /// An unrecognized critical option (§5.4.1).
    UnknownCriticalOption(u16),
    /// Proxy-Uri or Proxy-Scheme: this server is no proxy (§5.7.2, §5.10.2).
    ProxyingNotSupported,
    /// Uri-Path or Uri-Query is not UTF-8 (§5.10.1).
    NotUtf8,
    /// A Block1 or Block2 option that does not decode (RFC 7959 §2.2).
    BadBlockOption,
    /// A Block2 number past the end of the body (RFC 7959 §2.2).
    BlockOutOfRange,
    /// Block1 continuing a transfer that never started (RFC 7959 §2.3).
    Block1NotStarted,
    /// Block1 out of order or with a wrong size (RFC 7959 §2.3).
    Block1OutOfSequence,
    /// A reassembled body over `max_body` (RFC 7959 §2.9.3).
    BodyTooLarge,
    /// The Block1 reassembly table (per peer or in all) is full.
    TooManyTransfers,

    // Any resource.
    NotFound,
    MethodNotAllowed,
    /// The Accept option names a format the resource does not offer (§5.10.4).
    NotAcceptable,
    /// If-Match or If-None-Match does not hold (§5.10.8).
    PreconditionFailed,
    /// A query parameter that is not an integer in `min..=max`.
    BadQuery {
        name: &'static str,
        min: u64,
        max: u64,
    },

    // The Resource Directory (RFC 9176 §5) and the key check of RFC 8387 §7 step 1.
    UnsupportedFormat(Operation),
    MissingEp,
    BadEp,
    MalformedLinkFormat,
    MissingKey,
    BadKey,
    BadGroup,
    /// The announced key does not hash to `ep`.
    KeyMismatch,
    /// The identity (or its kit) is not on the authorized list.
    NotAuthorized(Operation),
    /// The identity (or the kit that authorized it) was revoked (docs/security.md,
    /// "Revocation").
    Revoked(Operation),
    /// The DTLS session does not speak for the entry.
    PeerMismatch(Operation),
    /// `sq`/`ss` that do not parse.
    MalformedResync,
    /// `ss` is not the device's signature over `sq`.
    BadResyncSignature,
    /// A removal with neither `sq`/`ss` nor an authenticated session.
    UnsignedRemoval,
    /// A signed removal whose `sq` is not above the high-water mark (a replayed statement).
    StaleRemoval,
    /// A signed registration or update whose `sq` is not above the high-water mark (a
    /// replayed statement).
    StaleStatement,
    /// A change to a live registration by a request that does not prove the ownership the
    /// entry has (docs/security.md, "Registration ownership"): an unsigned plain request on
    /// a `Signed` entry (4.01: a statement would do), any plain request on a `Session` entry
    /// (4.03: only the device's session may).
    NotOwner(Ownership),
    /// `/rd/N` is not a live registration.
    UnknownRegistration,

    // The broker: a publication (RFC 8387 §7, §8.2).
    UnknownTopic,
    KidMismatch,
    BadSignature,
    AlgorithmMismatch,
    SequenceMismatch,
    /// The sequence number is not above the high-water mark (§8.2).
    Replay,
    /// The sequence number is too far ahead (§8.2).
    OutOfWindow,
    MalformedSenml,
    MalformedCose,
    MalformedJws,
    MalformedReading,
    /// A MACed reading whose tag does not verify under the node's reading key.
    BadTag,
    /// A MACed reading from a node with no pre-shared key (so no reading key).
    NoReadingKey,
    /// A MACed or plain SenML reading that did not come over the PSK-only node's own session.
    NodeSessionRequired,

    // Reading (with `authorize_reads`).
    /// A read without a coaps:// session.
    ReadWithoutSession,
    /// A read by a session whose identity has no grant for the sensor or its kit.
    ReadNotGranted,
    /// A read over a token's session whose token is gone, expired, or whose subject was
    /// revoked (RFC 9200 §5.10.1.1: 4.01).
    ReadToken(crate::authz::TokenCheck),
    /// A read of a revoked sensor's readings: they are no longer served as current.
    SensorRevoked,
    /// A lookup (`/rd-lookup`, `/ps`) without a session.
    LookupWithoutSession,
    /// A lookup by a token's session whose scope lacks `rd`.
    LookupNotGranted,

    /// A signature verification over the budget of the source host or in total
    /// ([`crate::verify`]).
    VerifyBudget(crate::budget::Over),
}

impl Rejection {
    /// The CoAP response code (RFC 7252 §5.9). [`Rejection::Replay`] and
    /// [`Rejection::OutOfWindow`] are answered with Reset instead (see [`Rejection::reply`]).
    pub const fn code(&self) -> Code {
        use Rejection::*;
        match self {
            UnknownCriticalOption(_) | BadBlockOption | BlockOutOfRange => Code::BAD_OPTION,
            // 5.05 Proxying Not Supported.
            ProxyingNotSupported => Code::new(5, 5),
            NotUtf8 | BadQuery { .. } => Code::BAD_REQUEST,
            Block1NotStarted | Block1OutOfSequence => Code::REQUEST_ENTITY_INCOMPLETE,
            BodyTooLarge => Code::REQUEST_ENTITY_TOO_LARGE,
            TooManyTransfers => Code::SERVICE_UNAVAILABLE,
            NotFound | UnknownRegistration | UnknownTopic => Code::NOT_FOUND,
            MethodNotAllowed => Code::METHOD_NOT_ALLOWED,
            NotAcceptable => Code::NOT_ACCEPTABLE,
            PreconditionFailed => Code::PRECONDITION_FAILED,
            UnsupportedFormat(_) => Code::UNSUPPORTED_CONTENT_FORMAT,
            MissingEp | BadEp | MalformedLinkFormat | MissingKey | BadKey | BadGroup
            | MalformedResync => Code::BAD_REQUEST,
            MalformedSenml | MalformedCose | MalformedJws | MalformedReading => Code::BAD_REQUEST,
            KeyMismatch | NotAuthorized(_) | PeerMismatch(_) | KidMismatch => Code::FORBIDDEN,
            Revoked(_) | SensorRevoked => Code::FORBIDDEN,
            Replay | OutOfWindow => Code::FORBIDDEN,
            BadResyncSignature | UnsignedRemoval | StaleRemoval | StaleStatement => {
                Code::UNAUTHORIZED
            }
            NotOwner(Ownership::Session) => Code::FORBIDDEN,
            NotOwner(_) => Code::UNAUTHORIZED,
            BadSignature | AlgorithmMismatch | SequenceMismatch | BadTag => Code::UNAUTHORIZED,
            NodeSessionRequired => Code::UNAUTHORIZED,
            NoReadingKey => Code::FORBIDDEN,
            ReadWithoutSession | ReadToken(_) | LookupWithoutSession => Code::UNAUTHORIZED,
            ReadNotGranted | LookupNotGranted => Code::FORBIDDEN,
            VerifyBudget(_) => Code::SERVICE_UNAVAILABLE,
        }
    }

    /// The counter (see [`crate::Stats`]) this refusal is counted under. The names are read
    /// by `sigil demo`, the end-to-end tests and docs/security.md: keep them stable.
    pub const fn counter(&self) -> &'static str {
        use Operation::*;
        use Rejection::*;
        match self {
            UnknownCriticalOption(_)
            | ProxyingNotSupported
            | NotUtf8
            | BadBlockOption
            | BlockOutOfRange
            | Block1NotStarted
            | Block1OutOfSequence
            | BodyTooLarge
            | TooManyTransfers => "coap.rejected_request",
            NotFound => "request.not_found",
            MethodNotAllowed => "request.method_not_allowed",
            NotAcceptable => "request.not_acceptable",
            PreconditionFailed => "request.precondition_failed",
            BadQuery { .. } => "request.rejected.bad_query",
            UnsupportedFormat(Register) => "register.rejected.unsupported_content_format",
            UnsupportedFormat(Publish) => "publish.rejected.unsupported_content_format",
            MissingEp => "register.rejected.missing_ep",
            BadEp => "register.rejected.bad_ep",
            MalformedLinkFormat => "register.rejected.malformed_link_format",
            MissingKey => "register.rejected.missing_key",
            BadKey => "register.rejected.bad_key",
            BadGroup => "register.rejected.bad_group",
            KeyMismatch => "register.rejected.identity_mismatch",
            NotAuthorized(Register) => "register.rejected.unauthorized_identity",
            NotAuthorized(Publish) => "publish.rejected.unauthorized_identity",
            Revoked(Register) => "register.rejected.revoked",
            Revoked(Publish) => "publish.rejected.revoked",
            SensorRevoked => "read.rejected.revoked",
            PeerMismatch(Register) => "register.rejected.dtls_identity_mismatch",
            PeerMismatch(Publish) => "publish.rejected.dtls_identity_mismatch",
            MalformedResync | BadResyncSignature => "register.rejected.bad_resync_signature",
            UnsignedRemoval => "register.rejected.unsigned_removal",
            StaleRemoval => "register.rejected.stale_removal",
            StaleStatement => "register.rejected.stale_statement",
            NotOwner(_) => "register.rejected.not_owner",
            UnknownRegistration => "register.rejected.not_found",
            UnknownTopic => "publish.rejected.unknown_topic",
            KidMismatch => "publish.rejected.kid_mismatch",
            BadSignature => "publish.rejected.bad_signature",
            AlgorithmMismatch => "publish.rejected.algorithm_mismatch",
            SequenceMismatch => "publish.rejected.sequence_mismatch",
            Replay => "publish.rejected.replay",
            OutOfWindow => "publish.rejected.out_of_window",
            MalformedSenml => "publish.rejected.malformed_senml",
            MalformedCose => "publish.rejected.malformed_cose",
            MalformedJws => "publish.rejected.malformed_jws",
            MalformedReading => "publish.rejected.malformed_reading",
            BadTag => "publish.rejected.bad_tag",
            NoReadingKey => "publish.rejected.no_reading_key",
            NodeSessionRequired => "publish.rejected.no_session",
            ReadWithoutSession => "read.rejected.no_session",
            ReadNotGranted => "read.rejected.not_granted",
            ReadToken(crate::authz::TokenCheck::None) => "read.rejected.no_token",
            ReadToken(crate::authz::TokenCheck::Expired) => "read.rejected.token_expired",
            ReadToken(crate::authz::TokenCheck::Revoked) => "read.rejected.token_revoked",
            LookupWithoutSession => "lookup.rejected.no_session",
            LookupNotGranted => "lookup.rejected.not_granted",
            VerifyBudget(crate::budget::Over::Host) => "verify.refused.host_budget",
            VerifyBudget(crate::budget::Over::Total) => "verify.refused.total_budget",
        }
    }

    /// The operation refused, for a registration or publication refusal; `None` for the
    /// refusals any request can get.
    pub const fn operation(&self) -> Option<Operation> {
        use Rejection::*;
        match self {
            UnknownCriticalOption(_)
            | ProxyingNotSupported
            | NotUtf8
            | BadBlockOption
            | BlockOutOfRange
            | Block1NotStarted
            | Block1OutOfSequence
            | BodyTooLarge
            | TooManyTransfers
            | NotFound
            | MethodNotAllowed
            | NotAcceptable
            | PreconditionFailed
            | BadQuery { .. }
            | ReadWithoutSession
            | ReadNotGranted
            | ReadToken(_)
            | SensorRevoked
            | LookupWithoutSession
            | LookupNotGranted
            | VerifyBudget(_) => None,
            UnsupportedFormat(op) | NotAuthorized(op) | Revoked(op) | PeerMismatch(op) => Some(*op),
            MissingEp | BadEp | MalformedLinkFormat | MissingKey | BadKey | BadGroup
            | KeyMismatch | MalformedResync | BadResyncSignature | UnsignedRemoval
            | StaleRemoval | StaleStatement | NotOwner(_) | UnknownRegistration => {
                Some(Operation::Register)
            }
            UnknownTopic | KidMismatch | BadSignature | AlgorithmMismatch | SequenceMismatch
            | Replay | OutOfWindow | MalformedSenml | MalformedCose | MalformedJws
            | MalformedReading | BadTag | NoReadingKey | NodeSessionRequired => {
                Some(Operation::Publish)
            }
        }
    }

    /// The diagnostic payload (RFC 7252 §5.5.2): what the peer did, in a few words.
    pub fn diagnostic(&self) -> String {
        use Rejection::*;
        match self {
            UnknownCriticalOption(n) => format!("unrecognized critical option {n}"),
            ProxyingNotSupported => "this server is not a proxy".into(),
            NotUtf8 => "Uri-Path or Uri-Query is not UTF-8".into(),
            BadBlockOption => "bad Block option".into(),
            BlockOutOfRange => "block out of range".into(),
            Block1NotStarted => "Block1 transfer not started".into(),
            Block1OutOfSequence => "Block1 out of sequence".into(),
            BodyTooLarge => "body too large".into(),
            TooManyTransfers => "too many block-wise transfers".into(),
            NotFound | MethodNotAllowed | NotAcceptable | PreconditionFailed => String::new(),
            BadQuery { name, min, max } => {
                format!("{name} must be an integer from {min} to {max}")
            }
            UnsignedRemoval => "removal must be signed (sq, ss)".into(),
            StaleRemoval => "removal sequence number not above the last one seen".into(),
            // Short: these answer anyone (docs/security.md: answers stay small).
            StaleStatement => "stale sq".into(),
            NotOwner(Ownership::Session) => "owner's session needed".into(),
            NotOwner(_) => "owner's sq, ss needed".into(),
            ReadWithoutSession => "coaps:// session needed".into(),
            ReadNotGranted => "no read grant".into(),
            ReadToken(_) => "token invalid".into(),
            LookupWithoutSession => "coaps:// session needed".into(),
            LookupNotGranted => "no rd scope".into(),
            VerifyBudget(_) => "busy".into(),
            other => other.reason().into(),
        }
    }

    /// The short name logs use (the counter without its prefix).
    pub fn reason(&self) -> &'static str {
        let c = self.counter();
        c.rsplit('.').next().unwrap_or(c)
    }

    /// The answer: a response with [`Rejection::code`] and the diagnostic, except that a
    /// replayed or out-of-window publication is answered with Reset if Confirmable and not
    /// at all otherwise (RFC 8387 §8.2: the device resynchronises by re-registering).
    pub fn reply(&self, confirmable: bool) -> Reply {
        match self {
            Self::Replay | Self::OutOfWindow if confirmable => Reply::Reset,
            Self::Replay | Self::OutOfWindow => Reply::Nothing,
            // Kept by the device, which sends again after Max-Age; nothing for a NON.
            Self::VerifyBudget(_) if confirmable => Reply::Response(Response {
                code: self.code(),
                max_age: Some(crate::verify::RETRY_AFTER_SECS),
                payload: self.diagnostic().into_bytes(),
                ..Default::default()
            }),
            Self::VerifyBudget(_) => Reply::Nothing,
            _ => diagnostic(self.code(), &self.diagnostic()),
        }
    }
}

impl From<&ReadingError> for Rejection {
    fn from(e: &ReadingError) -> Self {
        match e {
            ReadingError::Cose(_) => Self::MalformedCose,
            ReadingError::Jws(_) => Self::MalformedJws,
            ReadingError::Senml(_) => Self::MalformedSenml,
            ReadingError::KidMismatch => Self::KidMismatch,
            ReadingError::BadSignature => Self::BadSignature,
            ReadingError::AlgorithmMismatch => Self::AlgorithmMismatch,
            ReadingError::SequenceMismatch => Self::SequenceMismatch,
            ReadingError::BadTag => Self::BadTag,
            _ => Self::MalformedReading,
        }
    }
}

impl From<ReadingError> for Rejection {
    fn from(e: ReadingError) -> Self {
        Self::from(&e)
    }
}

/// Per-batch handling context: the service's caches, plus what this batch changed (visible
/// to later requests of the same batch, applied to the caches only after the commit).
pub(crate) struct Ctx<'a> {
    pub svc: &'a State,
    pub now: UnixTime,
    pub new_highest: &'a mut HashMap<Identity, u64>,
    pub new_entries: &'a mut Vec<Entry>,
    pub removed: &'a mut Vec<i64>,
    pub new_authorized: &'a mut Vec<Identity>,
    pub counts: &'a mut BTreeMap<&'static str, u64>,
    /// Log lines peers cause go through this budget ([`crate::log`]).
    pub log: &'a mut crate::log::LogLimiter,
    /// The access-control server, if this server is one ([`crate::authz`]).
    pub authority: Option<&'a mut crate::authz::Authority>,
    /// The access tokens held as a resource server.
    pub tokens: &'a mut crate::authz::Tokens,
    /// The readings this batch stored, for their observers once it commits.
    pub published: &'a mut Vec<crate::broker::Published>,
}

impl Ctx<'_> {
    pub fn count(&mut self, key: &'static str) {
        *self.counts.entry(key).or_insert(0) += 1;
    }

    /// Counts and logs a refusal and makes its answer. The line names the identity the
    /// request claims ([`Ctx::claimed`]) beside the address.
    pub fn reject(&mut self, why: Rejection, req: &Request) -> Reply {
        self.count(why.counter());
        let now = self.secs();
        match why.operation() {
            Some(op) => {
                crate::limited!(self.log, now, why.counter(), warn, ?op, reason = why.reason(), claimed = %self.claimed(req), peer = %req.peer, path = req.path.join("/"), "request refused")
            }
            None => {
                crate::limited!(self.log, now, why.counter(), debug, reason = why.reason(), claimed = %self.claimed(req), peer = %req.peer, path = req.path.join("/"), "request refused")
            }
        }
        why.reply(req.confirmable())
    }

    /// The identity a request claims, for the log (never for a decision): the one its DTLS
    /// session authenticated, else the registration's `ep`, else the registration the
    /// `/rd/N` path names, else a reading's kid (parsed, not verified), else `-`.
    pub fn claimed(&self, req: &Request) -> String {
        if let Some(auth) = &req.auth {
            return format!("{} (session)", auth.identity());
        }
        if let Some(ep) = req.query("ep") {
            return format!("{} (ep)", peer_text(ep));
        }
        let path: Vec<&str> = req.path.iter().map(String::as_str).collect();
        if let ["rd", n, ..] = path.as_slice() {
            if let Some(e) = n.parse().ok().and_then(|n| self.entry(n)) {
                return format!("{} (registration {n})", e.reg.ep);
            }
        }
        if path.first() == Some(&"ps") && !req.payload.is_empty() {
            let format = req
                .content_format
                .and_then(sigil_objects::ReadingFormat::from_content_format);
            let kid = match format {
                Some(f) => sigil_objects::SignedReading::parse(f, &req.payload)
                    .ok()
                    .map(|r| r.kid),
                None => sigil_objects::mac::MacedReading::parse(&req.payload)
                    .ok()
                    .map(|r| r.kid),
            };
            if let Some(kid) = kid {
                return format!("{kid} (kid)");
            }
        }
        "-".into()
    }

    /// The wall clock in the seconds the store keeps.
    pub fn secs(&self) -> i64 {
        self.now.as_secs()
    }

    pub fn highest(&self, ep: &Identity) -> u64 {
        self.new_highest
            .get(ep)
            .or_else(|| self.svc.highest.get(ep))
            .copied()
            .unwrap_or(0)
    }

    /// A registration as this batch sees it, live or expired.
    pub fn entry(&self, id: i64) -> Option<&Entry> {
        if self.removed.contains(&id) {
            return None;
        }
        self.new_entries
            .iter()
            .rev()
            .find(|e| e.reg.id == id)
            .or_else(|| self.svc.entries.get(&id))
    }

    pub fn is_authorized(&self, id: &Identity) -> bool {
        self.svc.authorized.contains_key(id) || self.new_authorized.contains(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preconditions_follow_rfc7252_5_10_8() {
        let none = Preconditions::default();
        let exists = Preconditions {
            if_match: vec![vec![]],
            if_none_match: false,
        };
        let tag = Preconditions {
            if_match: vec![vec![9], vec![1, 2]],
            if_none_match: false,
        };
        let absent = Preconditions {
            if_match: vec![],
            if_none_match: true,
        };
        for p in [&none, &exists, &tag, &absent] {
            assert_eq!(p.hold(Some(Some(&[1, 2]))), p != &absent);
        }
        assert!(none.hold(None) && absent.hold(None));
        assert!(!exists.hold(None) && !tag.hold(None));
        assert!(exists.hold(Some(None)));
        assert!(!tag.hold(Some(None)) && !tag.hold(Some(Some(&[3]))));
    }

    #[test]
    fn integer_queries_are_digits_within_their_range() {
        let mut r = Request::new("127.0.0.1:1".parse().unwrap(), Code::GET);
        for (q, ok) in [
            ("n=5", Some(Some(5))),
            ("n=007", Some(Some(7))),
            ("x=1", Some(None)),
            ("n=+5", None),
            ("n=-1", None),
            ("n=", None),
            ("n", None),
            ("n=5 ", None),
            ("n=11", None),
            ("n=0", None),
            ("n=99999999999999999999999", None),
        ] {
            r.query = vec![q.to_string()];
            assert_eq!(r.query_int("n", 1, 10).ok(), ok, "{q}");
        }
    }

    #[test]
    fn every_refusal_has_a_counter_under_its_operation() {
        for (r, c) in [
            (
                Rejection::NotAuthorized(Operation::Register),
                "register.rejected.unauthorized_identity",
            ),
            (
                Rejection::NotAuthorized(Operation::Publish),
                "publish.rejected.unauthorized_identity",
            ),
            (
                Rejection::KeyMismatch,
                "register.rejected.identity_mismatch",
            ),
            (Rejection::Replay, "publish.rejected.replay"),
        ] {
            assert_eq!(r.counter(), c);
        }
        assert_eq!(Rejection::Replay.reply(true), Reply::Reset);
        assert_eq!(Rejection::OutOfWindow.reply(false), Reply::Nothing);
        assert_eq!(Rejection::ProxyingNotSupported.code(), Code::new(5, 5));
        // A statement would do on a signed entry; only the session on a session's entry.
        assert_eq!(
            Rejection::NotOwner(Ownership::Signed).code(),
            Code::UNAUTHORIZED
        );
        assert_eq!(
            Rejection::NotOwner(Ownership::Session).code(),
            Code::FORBIDDEN
        );
        assert_eq!(
            Rejection::NotOwner(Ownership::Session).counter(),
            "register.rejected.not_owner"
        );
    }
}
