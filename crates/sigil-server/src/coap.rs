//! The CoAP message layer (RFC 7252 §4, §5) around [`Service`]: parsing, message
//! deduplication (§4.5), block-wise transfer (RFC 7959), piggybacked and Non-confirmable
//! responses (§5.2), and the refusals that need no resource (unknown critical options,
//! proxying, malformed Block options).
//!
//! Transport-free and clock-free: datagrams and the caller's time in, datagrams out, so the
//! socket thread, tests, the emulator and the fuzzers drive the same code. `now` is monotonic
//! ([`Instant`]: dedup and Block1 expiry); `wall` is the wall clock ([`UnixTime`]:
//! registrations' lifetimes and stored timestamps), handed to the service. Every table here
//! has a byte budget per source host and in total ([`crate::budget`]): the dedup cache
//! (entries and the answers they keep), the Block1 reassembly buffers and the addresses
//! verified by Echo. Every answer leaves through [`Dispatcher::send`], which keeps coap://
//! answers to unverified addresses within three times the request ([`crate::echo`]).

use crate::answers::{AnswerSigner, Unsigned};
use crate::budget::{shrink_if_sparse, ByteBudget, Host, TokenBucket, ENTRY_OVERHEAD};
use crate::context::{Preconditions, Rejection, Reply, Request, Response};
use crate::echo::{EchoKey, Verified, AMPLIFICATION_FACTOR};
use crate::service::Service;
use crate::socket::ServerConfig;
use crate::stats::Stats;
use sigil_coap::exchange::dedup::{Dedup, Received};
use sigil_coap::message::{empty, option};
use sigil_coap::{BlockOption, Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{RustCrypto, SecretKey};
use sigil_objects::answer::{self, Answer, RequestDigest, SIGNATURE_OPTION_OVERHEAD};
use sigil_time::{Instant, UnixTime};
use std::collections::HashMap;
use std::net::SocketAddr;

mod block1;
mod dedup;
mod observe;
pub use observe::ObserveConfig;

/// A received datagram and its sender.
pub type Datagram = (SocketAddr, Vec<u8>);

pub use crate::channel::{Channel, Endpoint, Inbound};

struct Assembly {
    body: Vec<u8>,
    /// Where the transfer is (the message core's Block1 sequencing).
    state: sigil_coap::blockwise::Reassembly,
    at: Instant,
    /// Bytes charged to the sender's host: the entry's overhead, its key and the body so far,
    /// and never less than [`BLOCK1_MIN_CHARGE`].
    charged: usize,
}

/// The least a Block1 transfer is charged from its first block on, whatever the block's size:
/// the entry's bookkeeping and 1 KiB. The table is bounded by its bytes alone
/// (`block1_caps`), so tiny first blocks cost what an entry costs: 3 hosts at their 64 KiB
/// share hold at most 3 × 58 transfers of a 4 MiB table.
pub const BLOCK1_MIN_CHARGE: usize = ENTRY_OVERHEAD + 1024;

/// How large an answer to a request may be (RFC 9175 §2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Allowance {
    /// Over DTLS, or from an address verified by Echo.
    Any,
    /// From an unverified coap:// address: [`AMPLIFICATION_FACTOR`] times the datagram.
    AtMost(usize),
}

impl Allowance {
    fn permits(self, len: usize) -> bool {
        match self {
            Allowance::Any => true,
            Allowance::AtMost(n) => len <= n,
        }
    }
}

/// A request waiting for its batch, with what is needed to answer it.
struct Pending {
    from: Endpoint,
    mtype: MessageType,
    mid: u16,
    token: Vec<u8>,
    block2: Option<BlockOption>,
    /// Block1 of the final block, echoed in the response (RFC 7959 §2.3).
    block1: Option<BlockOption>,
    allowance: Allowance,
    /// The digest of a plain coap:// request asking for signed answers ([`crate::answers`]).
    answer_digest: Option<[u8; 32]>,
    request: Request,
}

/// Everything about CoAP that is not RD or broker logic: parsing, deduplication, Block1
/// reassembly, Block2 slicing and response encoding, around a [`Service`].
pub struct Dispatcher {
    config: ServerConfig,
    service: Service,
    stats: Stats,
    /// Received Confirmable requests (RFC 7252 §4.5): the message core's rules over the
    /// server's budgeted store ([`dedup`]).
    dedup: Dedup<Endpoint, dedup::DedupCache>,
    /// How fast a full Block1 table gives way (a second's worth at once):
    /// `block1_give_way_per_sec`.
    block1_give_way_rate: TokenBucket,
    assemblies: HashMap<(Endpoint, String), Assembly>,
    /// How many transfers each peer has in `assemblies` (no scan per first block).
    assemblies_of: HashMap<Endpoint, usize>,
    block1_budget: ByteBudget,
    echo: EchoKey,
    verified: Verified,
    /// Log lines peers cause here ([`crate::log`]).
    log: crate::log::LogLimiter,
    /// The key and budget of signed answers ([`crate::answers`]).
    answers: AnswerSigner,
    /// Observers of topics and their notifications ([`observe`]).
    observe: observe::ObserveState,
}

impl Dispatcher {
    /// `config.listen` (and the DTLS listen address) name the addresses requests arrive at:
    /// links the server answers with are resolved against them (RFC 9176 §6). `echo_secret`
    /// keys the Echo values ([`crate::echo`]): random, from the caller's RNG, at start.
    pub fn new(
        config: ServerConfig,
        service: Service,
        stats: Stats,
        echo_secret: [u8; 32],
    ) -> Self {
        Self {
            answers: AnswerSigner::new(config.answer_rates),
            dedup: Dedup::with_store(
                &config.transmission,
                dedup::DedupCache::new(
                    config.dedup_caps,
                    config.dedup_capacity,
                    give_way_bucket(config.dedup_give_way_per_sec),
                    stats.clone(),
                ),
            ),
            block1_budget: ByteBudget::new("block1", config.block1_caps),
            verified: Verified::new(config.verified_caps),
            block1_give_way_rate: give_way_bucket(config.block1_give_way_per_sec),
            echo: EchoKey::new(echo_secret),
            observe: observe::ObserveState::new(&config.observe, config.transmission, echo_secret),
            config,
            service,
            stats,
            assemblies: HashMap::new(),
            assemblies_of: HashMap::new(),
            log: crate::log::LogLimiter::default(),
        }
    }

    /// Signs the answers plain coap:// devices ask to have signed with `key`, the server's
    /// long-term key ([`crate::answers`]). Without one they go out unsigned.
    pub fn set_answer_key(&mut self, key: SecretKey) {
        self.answers.set_key(key);
    }

    /// Retention between batches: see [`Service::prune_readings`].
    pub fn prune_readings(
        &mut self,
        before: i64,
        limit: u32,
    ) -> Result<u64, crate::store::StoreError> {
        self.service.prune_readings(before, limit)
    }

    /// The DTLS credentials (active identities and their keys) if they may have changed
    /// since the last call ([`Service::changed_credentials`]), for the DTLS layer.
    pub fn changed_credentials(&mut self) -> Option<crate::auth::Credentials> {
        self.service.changed_credentials()
    }

    /// Forgets exchanges older than EXCHANGE_LIFETIME (RFC 7252 §4.8.2), stale Block1
    /// transfers and expired Echo verifications, gives their memory back, and publishes the
    /// tables' gauges (`mem.dedup.*`, `mem.block1.*`, `mem.verified.*`, and
    /// `mem.dedup.slots`, the dedup map's allocated capacity).
    pub fn handle_timeout(&mut self, now: Instant) {
        let lifetime = self.config.transmission.exchange_lifetime();
        self.dedup.handle_timeout(now);
        // An unfinished Block1 transfer lives `block1_idle` after its last block, not a whole
        // exchange lifetime: a client sends its next block as soon as the last is acknowledged.
        let idle = self.config.block1_idle.min(lifetime);
        let budget = &mut self.block1_budget;
        let mut expired = 0;
        let of = &mut self.assemblies_of;
        self.assemblies.retain(|(from, _), a| {
            let keep = now.saturating_since(a.at) < idle;
            if !keep {
                budget.refund(Host::of(from.addr), a.charged);
                uncount(of, from);
                expired += 1;
            }
            keep
        });
        shrink_if_sparse(&mut self.assemblies_of);
        if expired > 0 {
            self.stats.add("coap.block1.expired", expired);
        }
        shrink_if_sparse(&mut self.assemblies);
        self.verified.expire(now);
        self.dedup.store_mut().publish();
        self.block1_budget.publish(&self.stats);
        self.verified.publish(&self.stats);
        self.answers.publish(&self.stats);
        self.observe_timers(now);
        self.observe.publish_gauges(&self.stats);
    }

    fn count(&self, key: &str) {
        self.stats.incr(key);
    }

    /// Keeps the answer `sent` to the Confirmable request `key` for its retransmissions
    /// (RFC 7252 §4.5), charged to the sender's host; over its share the exchange is
    /// forgotten instead ([`dedup::DedupCache`]).
    fn remember(&mut self, key: (Endpoint, u16), sent: Option<Vec<u8>>, now: Instant) {
        let Some(answer) = sent else {
            return;
        };
        let proven = key.0.is_protected() || self.verified.contains(key.0.addr, now);
        self.dedup
            .answered_with(&key.0, key.1, &answer, now, proven);
    }

    /// Handles one batch of plain-CoAP datagrams (one database commit) at `now` and `wall`;
    /// returns the datagrams to send.
    pub fn handle_at(
        &mut self,
        batch: Vec<Datagram>,
        now: Instant,
        wall: UnixTime,
    ) -> Vec<Datagram> {
        let batch = batch
            .into_iter()
            .map(|(addr, bytes)| Inbound {
                from: Endpoint::plain(addr),
                to: None,
                auth: None,
                bytes,
            })
            .collect();
        let mut out: Vec<Datagram> = self
            .handle_inbound_at(batch, now, wall)
            .into_iter()
            .map(|(e, b)| (e.addr, b))
            .collect();
        out.extend(self.take_notifications_for(Channel::Plain));
        out
    }

    /// Handles a batch of CoAP messages from plain and secure endpoints; the answers go back
    /// to the endpoint each request came from.
    pub fn handle_inbound_at(
        &mut self,
        batch: Vec<Inbound>,
        now: Instant,
        wall: UnixTime,
    ) -> Vec<(Endpoint, Vec<u8>)> {
        let mut out = Vec::new();
        let mut pending: Vec<Pending> = Vec::new();
        self.observe_clock(now, wall);
        for d in &batch {
            self.stats.incr("coap.received");
            if let Some(p) = self.intake(d, now, &mut out) {
                pending.push(p);
            }
        }
        if pending.is_empty() {
            self.handle_timeout(now);
            return out;
        }
        let requests: Vec<Request> = pending.iter().map(|p| p.request.clone()).collect();
        self.service.set_instant(now);
        let replies = self.service.handle_batch(&requests, wall);
        for (p, reply) in pending.into_iter().zip(replies) {
            let bytes = match reply {
                Reply::Response(mut r) => {
                    self.observe_answer((p.from, &p.token, p.block2), &p.request, &mut r, now);
                    if let (Some(device), Some(digest)) = (r.answer_for, p.answer_digest) {
                        self.sign_answer(&p, &mut r, &device, &digest, now);
                    }
                    encode_response(&p, r, self.szx_for(p.from), &self.stats)
                }
                Reply::Reset => Some(empty(MessageType::Reset, p.mid).to_vec()),
                Reply::Nothing => None,
            };
            let sent = bytes.and_then(|b| self.send(p.from, p.allowance, b, now, &mut out));
            if p.mtype == MessageType::Confirmable {
                self.remember((p.from, p.mid), sent, now);
            }
        }
        self.notify_published(now, wall);
        self.handle_timeout(now);
        out
    }

    /// Signs `r`, the answer to `p` for `device`, within the signature budget and the
    /// amplification limit; over either it stays unsigned, counted by why.
    fn sign_answer(
        &mut self,
        p: &Pending,
        r: &mut Response,
        device: &sigil_identity::Identity,
        digest: &[u8; 32],
        now: Instant,
    ) {
        // A 4.09 resynchronisation is signed from its own budget, so replayed publications
        // never spend what registrations' answers need.
        let resync = r.code.0 == answer::RESYNC_CODE;
        let result = (|| {
            if !self.answers.has_key() {
                return Err(Unsigned::NoKey);
            }
            let unsigned = encode_response(p, r.clone(), self.szx_for(p.from), &self.stats)
                .ok_or(Unsigned::Unrepresentable)?;
            if !p
                .allowance
                .permits(unsigned.len() + SIGNATURE_OPTION_OVERHEAD)
            {
                return Err(Unsigned::TooLarge);
            }
            self.answers
                .take(Host::of(p.from.addr), device, now, resync)?;
            let a = Answer {
                device,
                token: &p.token,
                code: r.code.0,
                request: digest,
            };
            self.answers.sign(&a, &r.location_path)
        })();
        match result {
            Ok(sig) => {
                r.signature = Some(sig);
                self.count("answer.signed");
                if resync {
                    self.count("answer.signed.resync");
                }
            }
            Err(why) => {
                self.count(why.counter());
                let secs = (now.as_millis() / 1000) as i64;
                crate::limited!(self.log, secs, why.counter(), debug, peer = %p.from.addr, reason = why.counter(), "answer sent unsigned");
            }
        }
    }

    /// Block2 size for an endpoint: over DTLS at most 512-byte blocks, so a response fits in
    /// one record.
    fn szx_for(&self, from: Endpoint) -> u8 {
        if from.is_protected() {
            self.config.block2_szx.min(5)
        } else {
            self.config.block2_szx
        }
    }

    /// `scheme://authority` a request was sent to: Uri-Host and Uri-Port if given (RFC 7252
    /// §6.4), else the datagram's destination address (or the socket's, when the socket
    /// layer did not report it) and the socket's port.
    fn origin(&self, d: &Inbound, msg: &Message<'_>) -> String {
        let (scheme, mut local) = match (d.from.channel, &self.config.dtls) {
            (Channel::Dtls, Some(d)) => (Channel::Dtls.scheme(), d.listen),
            _ => (Channel::Plain.scheme(), self.config.listen),
        };
        if let Some(to) = d.to {
            local.set_ip(to);
        }
        let host = msg
            .option(option::URI_HOST)
            .and_then(|h| std::str::from_utf8(h).ok())
            // A reg-name or IP literal (RFC 3986 §3.2.2); anything else is ignored so it cannot
            // end up in the link format of the answer.
            .filter(|h| {
                !h.is_empty()
                    && h.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-._~:[]%".contains(c))
            });
        let host = match host {
            Some(h) if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
            Some(h) => h.to_string(),
            None => match local.ip() {
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
                ip => ip.to_string(),
            },
        };
        let port = msg
            .uint_option(option::URI_PORT)
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(local.port());
        format!("{scheme}://{host}:{port}")
    }

    /// Parses, deduplicates and reassembles one datagram. Returns a request for the service,
    /// or answers it directly (into `out`).
    fn intake(
        &mut self,
        d: &Inbound,
        now: Instant,
        out: &mut Vec<(Endpoint, Vec<u8>)>,
    ) -> Option<Pending> {
        let msg = match Message::parse(&d.bytes) {
            Ok(m) => m,
            Err(e) => {
                self.count("coap.malformed");
                let secs = (now.as_millis() / 1000) as i64;
                crate::limited!(self.log, secs, "coap.malformed", debug, peer = %d.from.addr, error = %e, "malformed datagram");
                // RFC 7252 §4.2: a Confirmable message with a format error is rejected with
                // Reset if its header could be read.
                if d.bytes.len() >= 4 && d.bytes[0] >> 6 == 1 && (d.bytes[0] >> 4) & 3 == 0 {
                    let reset = empty(
                        MessageType::Reset,
                        u16::from_be_bytes([d.bytes[2], d.bytes[3]]),
                    )
                    .to_vec();
                    let allowance = self.allowance(d, None, now);
                    self.send(d.from, allowance, reset, now, out);
                }
                return None;
            }
        };
        let allowance = self.allowance(d, msg.option(option::ECHO), now);
        match msg.mtype {
            MessageType::Acknowledgement | MessageType::Reset => {
                // Only notifications wait for these (the server sends no other Confirmable
                // message).
                let reset = msg.mtype == MessageType::Reset;
                let empty = msg.code == Code::EMPTY;
                if !(empty && self.observe_ack_or_reset(d.from, reset, msg.message_id, now)) {
                    self.count("coap.unexpected_ack_or_reset");
                }
                return None;
            }
            _ => {}
        }
        if msg.code == Code::EMPTY {
            // CoAP ping (§4.3): answer Reset.
            if msg.mtype == MessageType::Confirmable {
                self.count("coap.ping");
                let reset = empty(MessageType::Reset, msg.message_id).to_vec();
                self.send(d.from, allowance, reset, now, out);
            }
            return None;
        }
        if !msg.code.is_request() {
            self.count("coap.unexpected_response");
            if msg.mtype == MessageType::Confirmable {
                let reset = empty(MessageType::Reset, msg.message_id).to_vec();
                self.send(d.from, allowance, reset, now, out);
            }
            return None;
        }
        // Deduplication (§4.5): a retransmitted Confirmable request gets the same answer,
        // within what this copy allows (a duplicate can be shorter than the original).
        if msg.mtype == MessageType::Confirmable {
            // Over the host's share (or with the table full and nothing to give way) the
            // exchange is not remembered: a retransmission is handled again (readings are
            // deduplicated by their sequence number anyway, docs/security.md).
            let proven = d.from.is_protected() || self.verified.contains(d.from.addr, now);
            match self.dedup.receive_with(d.from, msg.message_id, now, proven) {
                Received::New => {}
                Received::NotRemembered(_) => self.count("coap.dedup.not_remembered"),
                Received::Again(answer) => {
                    let answer = answer.to_vec();
                    self.count("coap.duplicate");
                    self.send(d.from, allowance, answer, now, out);
                    return None;
                }
                Received::Seen => {
                    self.count("coap.duplicate");
                    return None;
                }
            }
        }
        // §5.7.2, §5.10.2: a request for a proxy to a server that is none.
        if msg.option(option::PROXY_URI).is_some() || msg.option(option::PROXY_SCHEME).is_some() {
            self.refuse(
                d.from,
                allowance,
                now,
                &msg,
                Rejection::ProxyingNotSupported,
                out,
            );
            return None;
        }
        if let Some(n) = msg.unknown_critical_option() {
            self.refuse(
                d.from,
                allowance,
                now,
                &msg,
                Rejection::UnknownCriticalOption(n),
                out,
            );
            return None;
        }
        let (Ok(path), Ok(query)) = (
            msg.uri_path().collect::<Result<Vec<_>, _>>(),
            msg.uri_query().collect::<Result<Vec<_>, _>>(),
        ) else {
            self.refuse(d.from, allowance, now, &msg, Rejection::NotUtf8, out);
            return None;
        };
        let block2 = match msg.block2() {
            Some(Ok(b)) => Some(b),
            Some(Err(_)) => {
                self.refuse(d.from, allowance, now, &msg, Rejection::BadBlockOption, out);
                return None;
            }
            None => None,
        };
        let mut payload = msg.payload.to_vec();
        let mut block1_echo = None;
        match msg.block1() {
            Some(Err(_)) => {
                self.refuse(d.from, allowance, now, &msg, Rejection::BadBlockOption, out);
                return None;
            }
            Some(Ok(b1)) => {
                let key = (d.from, format!("{}?{}", path.join("/"), query.join("&")));
                match self.reassemble(key, b1, msg.payload, now) {
                    Err(why) => {
                        self.refuse(d.from, allowance, now, &msg, why, out);
                        return None;
                    }
                    Ok(None) => {
                        // RFC 7959 §2.3: acknowledge the block with 2.31 Continue.
                        self.count("coap.block1_continue");
                        let r = Response {
                            code: Code::CONTINUE,
                            ..Default::default()
                        };
                        self.answer_directly(d.from, allowance, now, &msg, Some(b1), r, out);
                        return None;
                    }
                    Ok(Some(body)) => {
                        payload = body;
                        block1_echo = Some(b1);
                    }
                }
            }
            None => {}
        }
        // A plain request asking for signed answers: the digest its answer is bound to (over
        // coaps://, the session authenticates answers already).
        let signed_answer = !d.from.is_protected() && msg.option(answer::REQUIRE_OPTION).is_some();
        let answer_digest = signed_answer.then(|| {
            RequestDigest::of(
                &RustCrypto,
                msg.code.0,
                msg.options().map(|o| (o.number, o.value)),
                &payload,
            )
        });
        Some(Pending {
            from: d.from,
            mtype: msg.mtype,
            mid: msg.message_id,
            token: msg.token.to_vec(),
            block2,
            block1: block1_echo,
            allowance,
            answer_digest,
            request: Request {
                peer: d.from.addr,
                message_id: (msg.mtype == MessageType::Confirmable).then_some(msg.message_id),
                code: msg.code,
                path: path.into_iter().map(str::to_string).collect(),
                query: query.into_iter().map(str::to_string).collect(),
                content_format: msg.content_format().map(|c| c.0),
                accept: msg.accept().map(|c| c.0),
                payload,
                conditions: Preconditions {
                    if_match: msg
                        .option_values(option::IF_MATCH)
                        .map(<[u8]>::to_vec)
                        .collect(),
                    if_none_match: msg.option(option::IF_NONE_MATCH).is_some(),
                },
                origin: self.origin(d, &msg),
                auth: d.auth.clone(),
                signed_answer,
                observe: msg.observe(),
            },
        })
        .filter(|p| {
            // Notifications go only to an address that proves it receives in the registering
            // request itself (RFC 9175 §2.4): an Echo value issued to it, not an earlier
            // verification, which a spoofed registration from the same address would ride.
            let fresh = d.from.is_protected()
                || msg
                    .option(option::ECHO)
                    .is_some_and(|v| self.echo.check(d.from.addr, v, now));
            if !self.observe_needs_echo(&p.request, fresh) {
                return true;
            }
            self.count("observe.echo_first");
            if let Some(b) = self.echo_challenge(&msg, d.from, now) {
                let sent = self.send(d.from, allowance, b, now, out);
                if msg.mtype == MessageType::Confirmable {
                    self.remember((d.from, msg.message_id), sent, now);
                }
            }
            false
        })
    }

    /// Refuses a request below the service (counted under the refusal's counter).
    fn refuse(
        &mut self,
        peer: Endpoint,
        allowance: Allowance,
        now: Instant,
        msg: &Message<'_>,
        why: Rejection,
        out: &mut Vec<(Endpoint, Vec<u8>)>,
    ) {
        self.count(why.counter());
        let secs = (now.as_millis() / 1000) as i64;
        crate::limited!(self.log, secs, why.counter(), debug, peer = %peer.addr, reason = why.reason(), "request refused");
        let r = Response {
            code: why.code(),
            payload: why.diagnostic().into_bytes(),
            ..Default::default()
        };
        self.answer_directly(peer, allowance, now, msg, None, r, out);
    }

    /// Answers a request without the service (a refusal, or 2.31 Continue), and remembers
    /// the answer for retransmissions of the same message.
    #[allow(clippy::too_many_arguments)]
    fn answer_directly(
        &mut self,
        peer: Endpoint,
        allowance: Allowance,
        now: Instant,
        msg: &Message<'_>,
        block1: Option<BlockOption>,
        response: Response,
        out: &mut Vec<(Endpoint, Vec<u8>)>,
    ) {
        let p = Pending {
            from: peer,
            mtype: msg.mtype,
            mid: msg.message_id,
            token: msg.token.to_vec(),
            block2: None,
            block1,
            allowance,
            answer_digest: None,
            request: Request::new(peer.addr, Code::EMPTY),
        };
        if let Some(b) = encode_response(&p, response, self.szx_for(peer), &self.stats) {
            let sent = self.send(peer, allowance, b, now, out);
            if msg.mtype == MessageType::Confirmable {
                self.remember((peer, msg.message_id), sent, now);
            }
        }
    }

    /// How large the answers to `d` may be: anything over DTLS, from an address verified
    /// earlier, or with a valid Echo value (which verifies the address); else three times
    /// the datagram (RFC 9175 §2.4).
    fn allowance(&mut self, d: &Inbound, echo: Option<&[u8]>, now: Instant) -> Allowance {
        if d.from.is_protected() {
            return Allowance::Any;
        }
        if let Some(v) = echo {
            if self.echo.check(d.from.addr, v, now) {
                self.count("coap.echo.accepted");
                if !self.verified.insert(d.from.addr, now) {
                    self.count("coap.echo.not_remembered");
                }
                return Allowance::Any;
            }
            self.count("coap.echo.invalid");
        }
        if self.verified.contains(d.from.addr, now) {
            return Allowance::Any;
        }
        Allowance::AtMost(AMPLIFICATION_FACTOR.saturating_mul(d.bytes.len()))
    }

    /// The one way out for every answer (service replies, refusals, 2.31 Continue, Block2
    /// blocks, answers replayed from the dedup cache). An answer larger than `allowance`
    /// becomes, in order: the same error code without its diagnostic payload, or 4.01
    /// Unauthorized with an Echo option for the client to repeat (RFC 9175 §2.4), or nothing
    /// if even that is too large. Returns what was sent.
    fn send(
        &mut self,
        to: Endpoint,
        allowance: Allowance,
        answer: Vec<u8>,
        now: Instant,
        out: &mut Vec<(Endpoint, Vec<u8>)>,
    ) -> Option<Vec<u8>> {
        if allowance.permits(answer.len()) {
            out.push((to, answer.clone()));
            return Some(answer);
        }
        self.count("coap.amplification.limited");
        let msg = Message::parse(&answer).ok()?;
        let bare = (msg.code.class() >= 4 && !msg.payload.is_empty())
            .then(|| answer[..answer.len() - msg.payload.len() - 1].to_vec());
        let smaller = match bare {
            Some(b) if allowance.permits(b.len()) => b,
            _ => self.echo_challenge_as(msg.mtype, msg.message_id, msg.token, to, now)?,
        };
        if !allowance.permits(smaller.len()) {
            self.count("coap.amplification.dropped");
            return None;
        }
        out.push((to, smaller.clone()));
        Some(smaller)
    }

    /// 4.01 Unauthorized with an Echo value for `to` (RFC 9175 §2.4), answering `request`.
    fn echo_challenge(
        &mut self,
        request: &Message<'_>,
        to: Endpoint,
        now: Instant,
    ) -> Option<Vec<u8>> {
        let (mtype, mid) = match request.mtype {
            MessageType::Confirmable => (MessageType::Acknowledgement, request.message_id),
            _ => (
                MessageType::NonConfirmable,
                request.message_id.wrapping_add(0x8000),
            ),
        };
        self.echo_challenge_as(mtype, mid, request.token, to, now)
    }

    fn echo_challenge_as(
        &mut self,
        mtype: MessageType,
        mid: u16,
        token: &[u8],
        to: Endpoint,
        now: Instant,
    ) -> Option<Vec<u8>> {
        let echo = self.echo.issue(to.addr, now);
        let mut buf = vec![0u8; 4 + token.len() + 3 + echo.len()];
        let mut b = MessageBuilder::new(&mut buf, mtype, Code::UNAUTHORIZED, mid, token).ok()?;
        b.option(option::ECHO, &echo).ok()?;
        let n = b.finish();
        buf.truncate(n);
        self.count("coap.echo.issued");
        Some(buf)
    }
}

/// Encodes a response: piggybacked in an ACK for a Confirmable request, Non-confirmable
/// otherwise (§5.2); large bodies are cut into Block2 blocks (RFC 7959 §2.4).
fn encode_response(p: &Pending, r: Response, default_szx: u8, stats: &Stats) -> Option<Vec<u8>> {
    let (mtype, mid) = match p.mtype {
        MessageType::Confirmable => (MessageType::Acknowledgement, p.mid),
        // A response to a NON request is NON with a fresh message ID; derive it from the
        // request's so it is stable for the same request.
        _ => (MessageType::NonConfirmable, p.mid.wrapping_add(0x8000)),
    };
    // The message core picks the block (RFC 7959 §2.4): none when the body fits one and the
    // first was asked for, else the asked-for offset in blocks of at most `default_szx`.
    let (body, block2) = match sigil_coap::block2_of(p.block2, default_szx, r.payload.len()) {
        Ok((range, block2)) => (r.payload[range].to_vec(), block2),
        Err(_) => {
            // Block past the end: 4.02 (RFC 7959 §2.2), answered without Block2.
            let plain = Pending {
                from: p.from,
                mtype: p.mtype,
                mid: p.mid,
                token: p.token.clone(),
                block2: None,
                block1: None,
                allowance: p.allowance,
                answer_digest: None,
                request: Request::new(p.from.addr, Code::EMPTY),
            };
            let why = Rejection::BlockOutOfRange;
            stats.incr(why.counter());
            let refusal = Response {
                code: why.code(),
                payload: why.diagnostic().into_bytes(),
                ..Default::default()
            };
            return encode_response(&plain, refusal, default_szx, stats);
        }
    };
    let mut buf =
        vec![0u8; body.len() + 256 + r.location_path.iter().map(|s| s.len() + 3).sum::<usize>()];
    let mut b = MessageBuilder::new(&mut buf, mtype, r.code, mid, &p.token).ok()?;
    if let Some(etag) = &r.etag {
        b.option(option::ETAG, etag).ok()?;
    }
    if let Some(seq) = r.observe {
        b.uint_option(option::OBSERVE, seq).ok()?;
    }
    for seg in &r.location_path {
        b.option(option::LOCATION_PATH, seg.as_bytes()).ok()?;
    }
    if let Some(cf) = r.content_format {
        b.uint_option(option::CONTENT_FORMAT, u32::from(cf)).ok()?;
    }
    if let Some(age) = r.max_age {
        b.uint_option(option::MAX_AGE, age).ok()?;
    }
    if let Some(b2) = block2 {
        let (v, n) = b2.encode().ok()?;
        b.option(option::BLOCK2, &v[..n]).ok()?;
    }
    if let Some(b1) = p.block1 {
        let (v, n) = b1.encode().ok()?;
        b.option(option::BLOCK1, &v[..n]).ok()?;
    }
    if block2.is_some_and(|b| b.num == 0) {
        b.uint_option(option::SIZE2, r.payload.len() as u32).ok()?;
    }
    if let Some(sig) = &r.signature {
        // The highest option number of any answer: always last.
        b.option(answer::SIGNATURE_OPTION, &sig.0).ok()?;
    }
    let n = b.finish_with_payload(&body).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// One transfer fewer for `peer` in a per-peer count (the entry goes at zero).
fn uncount(of: &mut HashMap<Endpoint, usize>, peer: &Endpoint) {
    if let Some(n) = of.get_mut(peer) {
        *n -= 1;
        if *n == 0 {
            of.remove(peer);
        }
    }
}

/// The bucket of a give-way rate of `per_sec` (at least 1): a second's worth at once.
fn give_way_bucket(per_sec: u32) -> TokenBucket {
    let r = f64::from(per_sec.max(1));
    TokenBucket::new(r, r)
}
