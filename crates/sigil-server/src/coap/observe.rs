//! Observe (RFC 7641) on broker topics, over the message core's observer table
//! ([`sigil_coap::exchange::observe`]).
//!
//! - `GET /ps/N/<href>` with Observe 0 and a 2.05 answer registers the observer (keyed by its
//!   endpoint and token); Observe 1, a Reset to a notification, or a Confirmable notification
//!   never acknowledged ends it. A request for the history (`n`, `after`) and every other
//!   resource is answered without Observe: not observable (RFC 7641 §4.1).
//! - Every reading a batch commits is notified to the observers of its registration's topics,
//!   carrying the exact bytes the sensor sent, so each observer verifies it end to end. Before
//!   each notification the registering request is checked again (the topic is still there,
//!   the sensor not revoked, the reader still allowed: grant, token): a refusal is the last
//!   notification (its 4.xx, without Observe) and ends the observation.
//! - A registration from a coap:// address that has not proved it receives (RFC 9175 Echo,
//!   [`crate::echo`]) is answered 4.01 with an Echo value: notifications are unsolicited, so
//!   they go only to addresses that answered one.
//! - Observers count against `max_per_host` and `max_observers`, and their bytes (the
//!   registering request kept for the checks) against the `observe` byte budget per host
//!   and in total.
//! - Nothing sent to an observer for `refresh`: the current state again, checked again.
//!   Notifications carry twice `refresh` as Max-Age: a client that hears nothing for that
//!   long (its server restarted, its registration lost) registers again.

use super::{Dispatcher, Endpoint};
use crate::budget::{ByteBudget, Caps, Host, ENTRY_OVERHEAD};
use crate::context::{Reply, Request, Response};
use crate::stats::Stats;
use sigil_coap::exchange::observe::{Due, Notice, ObserveParams, Observer, ObserverId, Observers};
use sigil_coap::exchange::Token;
use sigil_coap::message::option;
use sigil_coap::{Code, MessageBuilder, MessageType};
use sigil_time::{Instant, UnixTime};
use std::collections::HashMap;
use std::time::Duration;

/// The observers' limits and timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObserveConfig {
    /// Observations in all.
    pub max_observers: usize,
    /// Observations one host (an IPv4 address, an IPv6 /64) may hold.
    pub max_per_host: usize,
    /// The bytes observers hold (the registering request), per host and in total.
    pub caps: Caps,
    /// Every this many notifications, one is Confirmable (and at least one a day).
    pub confirmable_every: u16,
    /// The current state is sent again to an observer nothing was sent to for this long; the
    /// notifications' Max-Age is twice this.
    pub refresh: Duration,
    /// How many observations a second may give way to newcomers when the table is full.
    pub give_way_per_sec: u32,
}

impl Default for ObserveConfig {
    fn default() -> Self {
        Self {
            max_observers: 4096,
            max_per_host: 64,
            caps: Caps {
                total: 4 << 20,
                per_host: 64 << 10,
            },
            confirmable_every: 16,
            refresh: Duration::from_secs(120),
            give_way_per_sec: 20,
        }
    }
}

/// A host holding this many observations or fewer never gives way to a newcomer.
const GIVE_WAY_FLOOR: usize = 4;

type Table = Observers<Endpoint, Host, i64, Vec<Option<Observer<Endpoint, Host, i64>>>>;

/// The registering request of one observation, checked again before each notification.
struct Watch {
    request: Request,
    charged: usize,
    /// The block size the registration asked for (Block2's SZX), kept for its notifications.
    szx: Option<u8>,
    /// The number of the latest reading sent to it (0: none yet).
    last_seq: u64,
    /// Its notifications' message IDs: a random start, one more each (RFC 7252 §4.4: none
    /// repeats within 65,536 to one endpoint; another observer cannot predict them, so it
    /// cannot Reset this one's observation, RFC 7641 §3.6).
    next_mid: u16,
}

/// A notification waiting to be sent.
pub(crate) struct Outgoing {
    pub to: Endpoint,
    pub auth: Option<crate::auth::PeerAuth>,
    pub bytes: Vec<u8>,
    id: Option<ObserverId>,
}

/// The latest reading of an observed registration.
struct Latest {
    seq: u64,
    content_format: u16,
    raw: Vec<u8>,
}

/// The dispatcher's observers and the notifications waiting to be sent.
pub(super) struct ObserveState {
    table: Table,
    watches: HashMap<ObserverId, Watch>,
    latest: HashMap<i64, Latest>,
    budget: ByteBudget,
    /// Notification message IDs: the first two bytes of SHA-256(key, counter), so an
    /// observer of the same topic cannot predict another's and reset it (RFC 7641 §3.6).
    mid_key: [u8; 32],
    mid_counter: u64,
    /// How many observations each endpoint holds: an ACK or a Reset from an endpoint holding
    /// none is not looked for in the table.
    per_endpoint: HashMap<Endpoint, usize>,
    /// Notifications to send, to plain and secure endpoints, with the identity the observer's
    /// session authenticated (a notification goes out only in a session of that identity).
    outbox: Vec<Outgoing>,
    /// How fast a full table gives way ([`ObserveConfig::give_way_per_sec`]).
    give_way_rate: crate::budget::TokenBucket,
    /// The latest (monotonic, wall) pair, for the checks a timer makes.
    clock: Option<(Instant, UnixTime)>,
    max_age: u32,
}

impl ObserveState {
    pub(super) fn new(
        config: &ObserveConfig,
        transmission: sigil_coap::TransmissionParameters,
        secret: [u8; 32],
    ) -> Self {
        let params = ObserveParams {
            max_observers: config.max_observers,
            max_per_host: config.max_per_host,
            confirmable_every: config.confirmable_every.max(1),
            confirmable_interval: Duration::from_secs(24 * 3600),
            refresh: Some(config.refresh),
            transmission,
        };
        Self {
            table: Observers::new((0..config.max_observers).map(|_| None).collect(), params),
            watches: HashMap::new(),
            latest: HashMap::new(),
            budget: ByteBudget::new("observe", config.caps),
            mid_key: sigil_crypto::CryptoProvider::sha256(
                &sigil_crypto::RustCrypto,
                &[b"sigil-server notification message IDs", &secret],
            ),
            mid_counter: 0,
            per_endpoint: HashMap::new(),
            outbox: Vec::new(),
            give_way_rate: super::give_way_bucket(config.give_way_per_sec),
            clock: None,
            max_age: u32::try_from(config.refresh.as_secs())
                .unwrap_or(u32::MAX)
                .saturating_mul(2)
                .max(2),
        }
    }

    /// A message ID nobody can predict (a one-off message, or an observation's first).
    fn mid(&mut self) -> u16 {
        self.mid_counter += 1;
        let h = sigil_crypto::CryptoProvider::sha256(
            &sigil_crypto::RustCrypto,
            &[&self.mid_key, &self.mid_counter.to_be_bytes()],
        );
        u16::from_be_bytes([h[0], h[1]])
    }

    /// Ends observation `id` and gives its bytes back.
    fn end(&mut self, id: ObserverId) {
        if let Some(o) = self.table.remove(id) {
            self.forget(id, &o.peer, o.resource);
        }
    }

    /// What an ended observation `id` of `peer` (of registration `reg`) held goes: its
    /// request and bytes, its count, and the topic's latest reading once nobody observes it.
    fn forget(&mut self, id: ObserverId, peer: &Endpoint, reg: i64) {
        if let Some(w) = self.watches.remove(&id) {
            self.budget.refund(Host::of(peer.addr), w.charged);
        }
        if let Some(n) = self.per_endpoint.get_mut(peer) {
            *n -= 1;
            if *n == 0 {
                self.per_endpoint.remove(peer);
            }
        }
        if self.table.of(&reg).next().is_none() {
            self.latest.remove(&reg);
        }
        crate::budget::shrink_if_sparse(&mut self.watches);
        crate::budget::shrink_if_sparse(&mut self.per_endpoint);
    }

    /// The wall clock at `now`, from the last (monotonic, wall) pair a batch gave.
    fn wall_at(&self, now: Instant) -> Option<UnixTime> {
        let (then, wall) = self.clock?;
        Some(UnixTime::from_secs(
            wall.as_secs() + (now.saturating_since(then).as_secs() as i64),
        ))
    }

    /// When a notification is due to be sent again or refreshed.
    pub(super) fn next_wake(&self) -> Option<Instant> {
        self.table.next_wake()
    }

    pub(super) fn publish_gauges(&self, stats: &Stats) {
        stats.set("observe.observers", self.table.len() as u64);
        self.budget.publish(stats);
    }
}

/// Whether `req` asks to observe a topic's latest reading.
fn observable(req: &Request) -> bool {
    req.code == Code::GET
        && req.path.len() == 3
        && req.path[0] == "ps"
        && req.query("n").is_none()
        && req.query("after").is_none()
}

impl Dispatcher {
    /// A GET with Observe 0 from a coap:// address not yet proven (no Echo): true if it was
    /// answered 4.01 with an Echo value for the client to repeat, instead of registering.
    pub(super) fn observe_needs_echo(&self, req: &Request, proven: bool) -> bool {
        req.observe == Some(0) && !proven && observable(req)
    }

    /// Applies the Observe option of `req`, whose answer is `r`, from `from`: registers (and
    /// puts the sequence number and Max-Age on the answer) or deregisters. `block2` is the
    /// request's Block2 option: the block size it asks for holds for its notifications too.
    pub(super) fn observe_answer(
        &mut self,
        (from, token, block2): (Endpoint, &[u8], Option<sigil_coap::BlockOption>),
        req: &Request,
        r: &mut Response,
        now: Instant,
    ) {
        let (Some(o), Some(token)) = (req.observe, Token::new(token)) else {
            return;
        };
        let o = match o {
            0 if observable(req) && r.code == Code::CONTENT => o,
            0 => {
                if observable(req) {
                    // A refusal: whatever was registered under this token ends (§4.1).
                    if let Some(id) = self.observe.table.find(&from, &token) {
                        self.observe.end(id);
                        self.count("observe.ended.refused");
                    }
                }
                return;
            }
            _ => {
                if let Some(id) = self.observe.table.find(&from, &token) {
                    self.observe.end(id);
                    self.count("observe.deregistered");
                }
                return;
            }
        };
        debug_assert_eq!(o, 0);
        let Some(reg) = req.path.get(1).and_then(|n| n.parse::<i64>().ok()) else {
            return;
        };
        let host = Host::of(from.addr);
        // What is kept of the request for the checks: a GET's payload means nothing and is
        // dropped; the rest is charged.
        let mut kept = req.clone();
        kept.payload = Vec::new();
        let charge = ENTRY_OVERHEAD
            + kept
                .path
                .iter()
                .chain(&kept.query)
                .map(String::len)
                .sum::<usize>()
            + kept.conditions.if_match.iter().map(Vec::len).sum::<usize>()
            + kept.origin.len();
        // The same endpoint and token again: the observation is updated in place (§4.1),
        // keeping its sequence numbers, and charged for what it keeps now.
        if let Some(id) = self.observe.table.find(&from, &token) {
            let old = self.observe.watches.get(&id).map_or(0, |w| w.charged);
            self.observe.budget.refund(host, old);
            if let Err(why) = self.observe.budget.charge(host, charge) {
                // Its old bytes are refunded already.
                if let Some(w) = self.observe.watches.get_mut(&id) {
                    w.charged = 0;
                }
                self.observe.end(id);
                self.count(match why {
                    crate::budget::Over::Host => "observe.refused.host_bytes",
                    crate::budget::Over::Total => "observe.refused.table_bytes",
                });
                self.count("observe.ended.refused");
                return;
            }
            let Ok((id, seq)) = self.observe.table.register(from, host, reg, token, now) else {
                return;
            };
            if let Some(w) = self.observe.watches.get_mut(&id) {
                w.request = kept;
                w.charged = charge;
                w.szx = block2.map(|b| b.szx);
            }
            self.count("observe.reregistered");
            self.observe_registered(id, reg, seq, r);
            return;
        }
        // The requester's own caps first (cheap): nothing gives way for a host at its share.
        if self.observe.table.held_by(&host) >= self.config.observe.max_per_host {
            self.count("observe.refused.host_full");
            return;
        }
        if self.observe.budget.check(host, charge) == Err(crate::budget::Over::Host) {
            self.count("observe.refused.host_bytes");
            return;
        }
        let full = self.observe.table.len() >= self.config.observe.max_observers
            || self.observe.budget.check(host, charge) == Err(crate::budget::Over::Total);
        if full {
            self.observe_give_way(host, charge, now);
        }
        if let Err(why) = self.observe.budget.charge(host, charge) {
            self.count(match why {
                crate::budget::Over::Host => "observe.refused.host_bytes",
                crate::budget::Over::Total => "observe.refused.table_bytes",
            });
            return;
        }
        match self.observe.table.register(from, host, reg, token, now) {
            Ok((id, seq)) => {
                let next_mid = self.observe.mid();
                self.observe.watches.insert(
                    id,
                    Watch {
                        request: kept,
                        charged: charge,
                        szx: block2.map(|b| b.szx),
                        last_seq: 0,
                        next_mid,
                    },
                );
                *self.observe.per_endpoint.entry(from).or_insert(0) += 1;
                self.count("observe.registered");
                self.observe_registered(id, reg, seq, r);
            }
            Err(why) => {
                self.observe.budget.refund(host, charge);
                self.count(match why {
                    sigil_coap::exchange::observe::Refused::Full => "observe.refused.table_full",
                    sigil_coap::exchange::observe::Refused::HostFull => "observe.refused.host_full",
                });
                let secs = (now.as_millis() / 1000) as i64;
                crate::limited!(self.log, secs, "observe.refused", info, peer = %from.addr, reason = ?why, "observation refused; answered once without Observe");
            }
        }
    }

    /// Observation `id` of registration `reg` is taken: its answer `r` gets its sequence
    /// number and Max-Age, and the reading it carries is what the observer has.
    fn observe_registered(&mut self, id: ObserverId, reg: i64, seq: u32, r: &mut Response) {
        if !r.payload.is_empty() {
            let seq_of = r
                .etag
                .as_deref()
                .and_then(|e| e.try_into().ok())
                .map_or(0, u64::from_be_bytes);
            if let Some(w) = self.observe.watches.get_mut(&id) {
                w.last_seq = seq_of;
            }
            // Only a newer reading replaces what the topic's observers are sent: the answer
            // may carry a reading this very batch stored, whose notification to the others is
            // still to come.
            if self.observe.latest.get(&reg).is_none_or(|l| l.seq < seq_of) {
                self.observe.latest.insert(
                    reg,
                    Latest {
                        seq: seq_of,
                        content_format: r.content_format.unwrap_or(0),
                        raw: r.payload.clone(),
                    },
                );
            }
        }
        r.observe = Some(seq);
        r.max_age = Some(self.observe.max_age);
    }

    /// Makes room in a full observer table for `bytes` more from `host`: the least recently
    /// acknowledged observation of the host holding the most bytes gives way, if that host
    /// would still hold more than `host` and holds more than [`GIVE_WAY_FLOOR`] observations
    /// (`observe.gave_way`), so a reader of a few topics keeps them against many addresses
    /// holding one each. It is told so with a last notification (5.03, Max-Age 60: its client
    /// may register again later). At most `give_way_per_sec` a second, spent only when an
    /// observation does give way (`observe.give_way_rate_limited`), so registrations that
    /// find nothing to push out cannot use the rate up for a newcomer.
    fn observe_give_way(&mut self, host: Host, bytes: usize, now: Instant) -> bool {
        let mine = self.observe.budget.held_by(host).saturating_add(bytes);
        let mut counts: HashMap<Host, usize> = HashMap::new();
        for (_, o) in self.observe.table.iter() {
            *counts.entry(o.host).or_insert(0) += 1;
        }
        let budget = &self.observe.budget;
        let victim = self
            .observe
            .table
            .iter()
            .filter(|(_, o)| counts.get(&o.host).copied().unwrap_or(0) > GIVE_WAY_FLOOR)
            .map(|(id, o)| (id, budget.held_by(o.host), o.last_acknowledged()))
            .filter(|(_, held, _)| *held > mine)
            .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)));
        let Some((id, _, _)) = victim else {
            self.count("observe.refused.no_give_way");
            return false;
        };
        if !self.observe.give_way_rate.take(now) {
            self.count("observe.give_way_rate_limited");
            return false;
        }
        let Some((peer, token, auth)) = self.observe.table.get(id).map(|o| {
            let auth = self
                .observe
                .watches
                .get(&id)
                .and_then(|w| w.request.auth.clone());
            (o.peer, o.token, auth)
        }) else {
            return false;
        };
        self.observe.end(id);
        self.count("observe.gave_way");
        let r = Response {
            code: Code::SERVICE_UNAVAILABLE,
            payload: b"observers full; this host holds the most".to_vec(),
            max_age: Some(60),
            ..Default::default()
        };
        let mid = self.observe.mid();
        if let Some(b) = encode_final(&token, mid, &r) {
            self.observe.outbox.push(Outgoing {
                to: peer,
                auth,
                bytes: b,
                id: None,
            });
        }
        true
    }

    /// Notifies the observers of every reading the service committed since the last call.
    pub(super) fn notify_published(&mut self, now: Instant, wall: UnixTime) {
        self.observe_clock(now, wall);
        for p in self.service.take_published() {
            let ids: Vec<ObserverId> = self.observe.table.of(&p.registration).collect();
            if ids.is_empty() {
                continue;
            }
            let newer = self
                .observe
                .latest
                .get(&p.registration)
                .is_none_or(|l| l.seq < p.seq);
            if newer {
                self.observe.latest.insert(
                    p.registration,
                    Latest {
                        seq: p.seq,
                        content_format: p.content_format,
                        raw: p.raw,
                    },
                );
            }
            for id in ids {
                // Each observer is sent what is newer than what it has.
                self.notify(id, now, wall, false);
            }
        }
    }

    /// Checks observation `id` again and sends it the latest state (`again`: even if it has
    /// it, a refresh), or the refusal that ends it.
    fn notify(&mut self, id: ObserverId, now: Instant, wall: UnixTime, again: bool) {
        let Some(has) = self.observe.watches.get(&id).map(|w| w.last_seq) else {
            return;
        };
        let Some((peer, reg)) = self.observe_recheck(id, wall) else {
            return;
        };
        let newest = self.observe.latest.get(&reg).map_or(0, |l| l.seq);
        if !again && newest <= has {
            return;
        }
        let Some(mid) = self.observe.watches.get_mut(&id).map(|w| {
            w.next_mid = w.next_mid.wrapping_add(1);
            w.next_mid
        }) else {
            return;
        };
        let jitter = u32::from(mid).wrapping_mul(2_654_435_761);
        let Some(n) = self.observe.table.notification(id, now, mid, jitter) else {
            // Held: a Confirmable notification is in flight (one at a time, RFC 7641 §4.5.1).
            self.count("observe.held");
            return;
        };
        self.count(if n.confirmable {
            "observe.notified.con"
        } else {
            "observe.notified.non"
        });
        self.send_notice(id, peer, reg, n);
    }

    /// Checks the request that registered observation `id` again at `wall` (the topic, the
    /// sensor, the reader's right): its endpoint and registration, or `None` after the
    /// refusal was queued as its last notification and the observation ended.
    fn observe_recheck(&mut self, id: ObserverId, wall: UnixTime) -> Option<(Endpoint, i64)> {
        let req = self.observe.watches.get(&id)?.request.clone();
        let (peer, token) = self.observe.table.get(id).map(|o| (o.peer, o.token))?;
        match self.service.observe_check(&req, wall) {
            Ok(reg) => Some((peer, reg)),
            Err(reply) => {
                self.observe.end(id);
                self.count("observe.ended.refused");
                if let Reply::Response(r) = *reply {
                    let mid = self.observe.mid();
                    if let Some(b) = encode_final(&token, mid, &r) {
                        self.observe.outbox.push(Outgoing {
                            to: peer,
                            auth: req.auth.clone(),
                            bytes: b,
                            id: None,
                        });
                    }
                }
                None
            }
        }
    }

    fn send_notice(&mut self, id: ObserverId, peer: Endpoint, reg: i64, n: Notice) {
        let asked = self.observe.watches.get(&id).and_then(|w| w.szx);
        let szx = asked.map_or(self.szx_for(peer), |a| a.min(self.szx_for(peer)));
        let latest = self.observe.latest.get(&reg);
        if let (Some(l), Some(w)) = (latest, self.observe.watches.get_mut(&id)) {
            w.last_seq = w.last_seq.max(l.seq);
        }
        match encode_notification(&n, latest, self.observe.max_age, szx) {
            Some(b) => {
                let auth = self
                    .observe
                    .watches
                    .get(&id)
                    .and_then(|w| w.request.auth.clone());
                self.observe.outbox.push(Outgoing {
                    to: peer,
                    auth,
                    bytes: b,
                    id: Some(id),
                });
            }
            None => self.count("observe.unencodable"),
        }
    }

    /// An ACK or a Reset from `from`: true if it was for a notification.
    pub(super) fn observe_ack_or_reset(
        &mut self,
        from: Endpoint,
        reset: bool,
        mid: u16,
        now: Instant,
    ) -> bool {
        // Most ACKs and Resets come from endpoints that observe nothing: no table scan.
        if !self.observe.per_endpoint.contains_key(&from) {
            return false;
        }
        if reset {
            let Some((id, o)) = self.observe.table.on_reset(&from, mid) else {
                return false;
            };
            self.observe.forget(id, &o.peer, o.resource);
            self.count("observe.cancelled.reset");
            return true;
        }
        if let Some(id) = self.observe.table.on_ack(&from, mid, now) {
            self.count("observe.acknowledged");
            // A change held while the notification was in flight goes now.
            if self.observe.table.take_held(id) {
                if let Some(wall) = self.observe.wall_at(now) {
                    self.count("observe.released");
                    self.notify(id, now, wall, false);
                }
            }
            return true;
        }
        false
    }

    /// Retransmissions, refreshes and observers given up on, at `now`.
    pub(super) fn observe_timers(&mut self, now: Instant) {
        while let Some(due) = self.observe.table.poll(now) {
            match due {
                Due::Resend(id) => {
                    let Some(n) = self.observe.table.last(id) else {
                        continue;
                    };
                    // A retransmission carries the current state: if that is a newer reading
                    // than the observer was checked for, it is checked again first.
                    let (Some(reg), Some(has)) = (
                        self.observe.table.get(id).map(|o| o.resource),
                        self.observe.watches.get(&id).map(|w| w.last_seq),
                    ) else {
                        continue;
                    };
                    let newer = self.observe.latest.get(&reg).is_some_and(|l| l.seq > has);
                    let peer = match (newer, self.observe.wall_at(now)) {
                        (true, Some(wall)) => match self.observe_recheck(id, wall) {
                            Some((peer, _)) => peer,
                            None => continue,
                        },
                        _ => match self.observe.table.get(id) {
                            Some(o) => o.peer,
                            None => continue,
                        },
                    };
                    self.count("observe.retransmitted");
                    self.send_notice(id, peer, reg, n);
                }
                Due::Refresh(id) => {
                    let Some(wall) = self.observe.wall_at(now) else {
                        continue;
                    };
                    self.count("observe.refreshed");
                    self.notify(id, now, wall, true);
                }
                Due::GaveUp { id, peer, resource } => {
                    self.observe.forget(id, &peer, resource);
                    self.count("observe.gave_up");
                    let secs = (now.as_millis() / 1000) as i64;
                    crate::limited!(self.log, secs, "observe.gave_up", debug, peer = %peer.addr, "observer acknowledged no notification; observation ended");
                }
            }
        }
    }

    /// The (monotonic, wall) pair of the batch in hand, for the checks timers and ACKs make.
    pub(super) fn observe_clock(&mut self, now: Instant, wall: UnixTime) {
        self.observe.clock = Some((now, wall));
    }

    /// The notifications waiting for `channel`'s endpoints, as datagrams for its socket (for
    /// [`super::Channel::Dtls`], to be protected by each session; see
    /// [`Dispatcher::take_secure_notifications`], which checks the session first).
    pub fn take_notifications_for(&mut self, channel: super::Channel) -> Vec<super::Datagram> {
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.observe.outbox)
            .into_iter()
            .partition(|o| o.to.channel == channel);
        self.observe.outbox = others;
        mine.into_iter().map(|o| (o.to.addr, o.bytes)).collect()
    }

    /// The notifications for DTLS sessions whose session still authenticates the identity
    /// that registered: `session_auth` says who the session at an address is now. An
    /// observation whose session ended, or now belongs to someone else, ends unsent
    /// (`observe.ended.session`).
    pub fn take_secure_notifications(
        &mut self,
        session_auth: impl Fn(&std::net::SocketAddr) -> Option<crate::auth::PeerAuth>,
    ) -> Vec<super::Datagram> {
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.observe.outbox)
            .into_iter()
            .partition(|o| o.to.channel == super::Channel::Dtls);
        self.observe.outbox = others;
        let mut out = Vec::new();
        for o in mine {
            if session_auth(&o.to.addr) == o.auth && o.auth.is_some() {
                out.push((o.to.addr, o.bytes));
                continue;
            }
            if let Some(id) = o.id {
                if self.observe.table.get(id).is_some() {
                    self.observe.end(id);
                    self.count("observe.ended.session");
                    self.observe.publish_gauges(&self.stats);
                }
            }
        }
        out
    }

    /// When the observers' next timer is due.
    pub fn observe_wake(&self) -> Option<Instant> {
        self.observe.next_wake()
    }
}

/// A notification (RFC 7641 §4.2): 2.05 with the observer's token and sequence number, the
/// latest reading (or no payload before the first), its ETag (the reading's sequence
/// number, as a GET answers) and Max-Age. A reading larger than a block goes as its first
/// block (RFC 7959 §3.4): the client fetches the rest.
fn encode_notification(
    n: &Notice,
    latest: Option<&Latest>,
    max_age: u32,
    szx: u8,
) -> Option<Vec<u8>> {
    let mtype = if n.confirmable {
        MessageType::Confirmable
    } else {
        MessageType::NonConfirmable
    };
    let payload = latest.map_or(&[][..], |l| &l.raw);
    // The first block, from the message core (RFC 7959 §3.4: the client fetches the rest).
    let (range, block2) = sigil_coap::block2_of(None, szx, payload.len()).ok()?;
    let body = &payload[range];
    let mut buf = vec![0u8; body.len() + 64];
    let mut b =
        MessageBuilder::new(&mut buf, mtype, Code::CONTENT, n.mid, n.token.as_bytes()).ok()?;
    if let Some(l) = latest {
        b.option(option::ETAG, &crate::broker::etag(l.seq)).ok()?;
    }
    b.uint_option(option::OBSERVE, n.seq).ok()?;
    if let Some(l) = latest {
        b.uint_option(option::CONTENT_FORMAT, u32::from(l.content_format))
            .ok()?;
    }
    b.uint_option(option::MAX_AGE, max_age).ok()?;
    if let Some(b2) = block2 {
        let (v, len) = b2.encode().ok()?;
        b.option(option::BLOCK2, &v[..len]).ok()?;
        b.uint_option(option::SIZE2, payload.len() as u32).ok()?;
    }
    let len = b.finish_with_payload(body).ok()?;
    buf.truncate(len);
    Some(buf)
}

/// The last notification of an observation that may not go on: the refusal, Non-confirmable,
/// without Observe (§3.2: a notification that is not 2.xx ends it).
fn encode_final(token: &Token, mid: u16, r: &Response) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; r.payload.len() + 32];
    let mut b = MessageBuilder::new(
        &mut buf,
        MessageType::NonConfirmable,
        r.code,
        mid,
        token.as_bytes(),
    )
    .ok()?;
    if let Some(cf) = r.content_format {
        b.uint_option(option::CONTENT_FORMAT, u32::from(cf)).ok()?;
    }
    if let Some(age) = r.max_age {
        b.uint_option(option::MAX_AGE, age).ok()?;
    }
    let len = b.finish_with_payload(&r.payload).ok()?;
    buf.truncate(len);
    Some(buf)
}
