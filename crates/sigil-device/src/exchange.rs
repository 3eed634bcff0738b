//! What the signing device ([`crate::Device`]) and the PSK-only node ([`crate::PskNode`]) share
//! of a CoAP client endpoint: the message core's table of requests
//! ([`sigil_coap::exchange::client`]) with one request at a time (NSTART 1), the message IDs and
//! tokens (RFC 7252 §5.3.1), the bounded queue of events, the registration with the Resource
//! Directory (its location, refresh and back-off), and the last reading, kept to publish it
//! again ([`Endpoint`]). Each state machine keeps what differs: how it registers, how it
//! protects a reading, and the few rules [`Kind`] names.

use crate::machine::{DeviceStats, PublishOutcome, MAX_DATAGRAM};
use crate::DeviceError;
use core::time::Duration;
use sigil_coap::exchange::client::{self, Client, Incoming, NewRequest, RequestId};
use sigil_coap::exchange::Token;
use sigil_coap::{
    option, Code, ContentFormat, Message, MessageBuilder, MessageType, TransmissionParameters,
};
use sigil_crypto::{CryptoProvider, Rng};
use sigil_objects::answer;
use sigil_time::Instant;

/// Longest registration location kept (`rd/N`).
pub(crate) const MAX_LOCATION: usize = 24;
/// Longest SenML pack a reading carries.
pub(crate) const MAX_SENML: usize = 256;
/// Events kept for the caller; when full, the oldest goes.
const EVENT_QUEUE: usize = 8;
/// Empty messages (ACK, RST) waiting to be sent.
const EMPTY_QUEUE: usize = 4;
/// Confirmable responses remembered to acknowledge them again (RFC 7252 §4.5).
const RECENT_CON: usize = 4;

/// The device's requests: one at a time; `X` says what each is for.
pub(crate) type Requests<X> = Client<X, 1, MAX_DATAGRAM, EMPTY_QUEUE, RECENT_CON>;

/// At most `N` items, oldest first, without allocation.
struct Queue<T: Copy, const N: usize>([Option<T>; N]);

impl<T: Copy, const N: usize> Queue<T, N> {
    pub const fn new() -> Self {
        Self([None; N])
    }

    /// Adds `item`; when full, the oldest is dropped so the newest state stays visible.
    pub fn push_newest(&mut self, item: T) {
        if let Some(slot) = self.0.iter_mut().find(|s| s.is_none()) {
            *slot = Some(item);
        } else if N > 0 {
            self.0.rotate_left(1);
            self.0[N - 1] = Some(item);
        }
    }

    /// Takes the oldest item.
    pub fn pop(&mut self) -> Option<T> {
        let first = self.0.first_mut()?.take();
        if first.is_some() {
            self.0.rotate_left(1);
        }
        first
    }
}

/// The token and the jitter value of request number `counter`: a keyed hash of the boot-time
/// random `seed` (32 bits of token, 32 bits for the caller's retransmission jitter).
fn token<C: CryptoProvider>(crypto: &C, seed: &[u8; 16], counter: u32) -> ([u8; 4], u32) {
    let h = crypto.sha256(&[seed, &counter.to_be_bytes()]);
    (
        [h[0], h[1], h[2], h[3]],
        u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
    )
}

/// Longest wait a 5.03's Max-Age may impose on a deferred reading: an hour, so that a hostile
/// answer cannot park it for days.
const MAX_DEFERRAL_SECS: u32 = 3600;

/// Seconds before a reading the broker answered with a server error (5.xx) is sent again.
/// 5.03 says when (Max-Age, RFC 7252 §5.9.3.4 and §5.10.5; 60 s without one, at most
/// [`MAX_DEFERRAL_SECS`]); any other 5.xx (e.g. 5.00 while the broker's database was busy)
/// backs off 1 s, 2 s, 4 s ... 64 s, counted in `failures` (reset by the caller on success).
fn retry_delay(msg: &Message<'_>, failures: &mut u32) -> u32 {
    if msg.code == Code::SERVICE_UNAVAILABLE {
        return msg
            .uint_option(option::MAX_AGE)
            .unwrap_or(60)
            .min(MAX_DEFERRAL_SECS);
    }
    let secs = 1u32 << (*failures).min(6);
    *failures = failures.saturating_add(1);
    secs
}

/// What differs between the two state machines in what [`Endpoint`] does for both: their
/// events, what their requests carry, and the rules each follows for a refused or Reset
/// reading and for the topic's name.
pub(crate) trait Kind {
    /// What a registration request carries (the signing device: its Block1 transfer).
    type Register: Copy + Eq;
    /// A reading's sequence number (the PSK node has none in session mode).
    type Seq: Copy + Eq;
    /// What the caller is told.
    type Event: Copy;
    const REGISTERED: Self::Event;
    const REFRESHED: Self::Event;
    const RESYNCHRONISING: Self::Event;
    /// Whether a reading's Reset makes the re-registration back off as such a refusal does
    /// (else it registers again at once, the §8.2 resynchronisation).
    const RESET_BACKS_OFF: bool;
    fn registration_failed(code: Code) -> Self::Event;
    fn published(seq: Self::Seq, outcome: PublishOutcome) -> Self::Event;
    /// Whether a reading refused with `code` means that the broker no longer holds (or
    /// accepts) the registration it was made for: register again, then publish it again.
    fn reregisters(code: Code) -> bool;
    /// The topic's segment N in `ps/N/<href>`, taken from the registration's location.
    fn topic(location: &[u8]) -> Option<&[u8]>;
}

/// What a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exchange<R, S> {
    /// Full registration.
    Register(R),
    /// Registration update (refresh lifetime).
    Update,
    Publish {
        seq: S,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Unregistered { retry_at: Instant },
    Registered { refresh_at: Instant },
}

/// What [`Endpoint::handle_timeout`] found due, for the state machine to start.
pub(crate) enum Due {
    Registration,
    Update,
    /// The kept reading, to be sent again (Confirmable, so that it is known to arrive).
    Republication,
}

/// The registration's location path (`rd/N`) as the Resource Directory gave it.
#[derive(Clone, Copy)]
pub(crate) struct Location {
    bytes: [u8; MAX_LOCATION],
    len: usize,
}

impl Location {
    const NONE: Self = Self {
        bytes: [0; MAX_LOCATION],
        len: 0,
    };

    /// The Location-Path options of `msg` joined with `/`; `None` when they do not fit.
    pub fn of(msg: &Message<'_>) -> Option<Self> {
        let mut loc = Self::NONE;
        let mut n = 0;
        for seg in msg.option_values(option::LOCATION_PATH) {
            let need = seg.len() + usize::from(n > 0);
            if n + need > MAX_LOCATION {
                return None;
            }
            if n > 0 {
                loc.bytes[n] = b'/';
                n += 1;
            }
            loc.bytes[n..n + seg.len()].copy_from_slice(seg);
            n += seg.len();
        }
        loc.len = n;
        Some(loc)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Where a reading goes and how it is sent (see [`Endpoint::send_reading`]).
pub(crate) struct Put<'a> {
    pub href: &'a str,
    pub content_format: u16,
    /// Every n-th reading is Confirmable (1: all; 0: none).
    pub confirm_every: u32,
    /// Ask for signed answers (`sigil_objects::answer`).
    pub require_signed: bool,
}

/// The CoAP client endpoint of a publisher registered with a Resource Directory: its one
/// request at a time, events, registration state and the reading it may publish again.
pub(crate) struct Endpoint<K: Kind> {
    pub requests: Requests<Exchange<K::Register, K::Seq>>,
    events: Queue<K::Event, EVENT_QUEUE>,
    next_mid: u16,
    token_seed: [u8; 16],
    token_counter: u32,
    state: State,
    location: Location,
    publishes: u32,
    reg_failures: u32,
    /// The last reading's SenML and timestamp, kept to publish it again.
    last_senml: [u8; MAX_SENML],
    last_senml_len: usize,
    last_timestamp: Option<u64>,
    republish: bool,
    /// When the pending republication may go (5.03 with Max-Age: not before then).
    republish_at: Instant,
    /// Readings refused for a lost registration ([`Kind::reregisters`]; Reset as well where
    /// [`Kind::RESET_BACKS_OFF`]) since the last acknowledged one: after the first, the
    /// re-registration backs off as a failed registration does.
    refusals: u32,
    /// Server errors (5.xx other than 5.03) in a row for readings, for their back-off.
    server_errors: u32,
}

impl<K: Kind> Endpoint<K> {
    /// An endpoint not registered yet, its first message ID and its token seed from `rng`.
    pub fn new(
        transmission: TransmissionParameters,
        rng: &mut dyn Rng,
    ) -> Result<Self, DeviceError> {
        let mut seed = [0u8; 18];
        rng.fill(&mut seed).map_err(|_| DeviceError::Encoding)?;
        let mut token_seed = [0u8; 16];
        token_seed.copy_from_slice(&seed[..16]);
        Ok(Self {
            requests: Requests::new(transmission),
            events: Queue::new(),
            next_mid: u16::from_be_bytes([seed[16], seed[17]]),
            token_seed,
            token_counter: 0,
            state: State::Unregistered {
                retry_at: Instant::ZERO,
            },
            location: Location::NONE,
            publishes: 0,
            reg_failures: 0,
            last_senml: [0; MAX_SENML],
            last_senml_len: 0,
            last_timestamp: None,
            republish: false,
            republish_at: Instant::ZERO,
            refusals: 0,
            server_errors: 0,
        })
    }

    pub fn is_registered(&self) -> bool {
        matches!(self.state, State::Registered { .. })
    }

    /// Registered, no refused reading waiting to go again (it would be overwritten), and no
    /// Confirmable request in flight.
    pub fn can_publish(&self) -> bool {
        self.is_registered()
            && !self.republish
            && self.requests.iter().all(|(_, o)| !o.is_confirmable())
    }

    pub fn check_publish(&self) -> Result<(), DeviceError> {
        if !self.is_registered() {
            return Err(DeviceError::NotRegistered);
        }
        if !self.can_publish() {
            return Err(DeviceError::Busy);
        }
        Ok(())
    }

    pub fn has_pending_republication(&self) -> bool {
        self.republish
    }

    /// Whether a reading waits to be published again and its time has come.
    pub fn republication_due(&self, now: Instant) -> bool {
        self.republish && now >= self.republish_at
    }

    pub fn location(&self) -> Option<&str> {
        if self.location.is_empty() {
            return None;
        }
        core::str::from_utf8(self.location.as_bytes()).ok()
    }

    pub fn push_event(&mut self, e: K::Event) {
        self.events.push_newest(e);
    }

    pub fn poll_event(&mut self) -> Option<K::Event> {
        self.events.pop()
    }

    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.requests.poll_transmit(buf)
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let exchange = self.requests.poll_timeout();
        let state = match (self.state, self.requests.is_empty()) {
            (_, false) => None,
            (State::Unregistered { retry_at }, true) => Some(retry_at),
            // A deferred reading goes out again at its time, not at the next refresh.
            (State::Registered { refresh_at }, true) if self.republish => {
                Some(refresh_at.min(self.republish_at))
            }
            (State::Registered { refresh_at }, true) => Some(refresh_at),
        };
        match (exchange, state) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs the request's timer (retransmissions counted in `retransmissions`; an exchange
    /// that failed is handled), then says what is due with no request in flight: the
    /// registration, its refresh, or a reading published again.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        retransmissions: &mut u32,
        lifetime: Duration,
    ) -> Option<Due> {
        let before = self.requests.stats().retransmissions;
        // The exchange that failed: retransmissions exhausted, or the wait for a separate
        // response over.
        let failed = self.requests.handle_timeout(now);
        let sent_again = self.requests.stats().retransmissions.wrapping_sub(before);
        *retransmissions = retransmissions.saturating_add(sent_again);
        if let Some(x) = failed {
            self.failed(now, x.exchange, None, lifetime);
        }
        if !self.requests.is_empty() {
            return None;
        }
        match self.state {
            State::Unregistered { retry_at } if now >= retry_at => Some(Due::Registration),
            State::Registered { refresh_at } if now >= refresh_at => Some(Due::Update),
            State::Registered { .. } if self.republication_due(now) => {
                self.take_republication().then_some(Due::Republication)
            }
            _ => None,
        }
    }

    /// Starts the request for `exchange` with the next message ID and token, in place of an
    /// unsent Non-confirmable one: `build` writes it (given the message ID and token) into the
    /// table's buffer; a Confirmable one starts its retransmission timer with the token's
    /// jitter value.
    pub fn begin<C: CryptoProvider>(
        &mut self,
        crypto: &C,
        now: Instant,
        exchange: Exchange<K::Register, K::Seq>,
        confirmable: bool,
        build: impl FnOnce(&mut [u8; MAX_DATAGRAM], u16, &[u8; 4]) -> Result<usize, DeviceError>,
    ) -> Result<(), DeviceError> {
        self.next_mid = self.next_mid.wrapping_add(1);
        self.token_counter = self.token_counter.wrapping_add(1);
        let (token, random) = token(crypto, &self.token_seed, self.token_counter);
        let mid = self.next_mid;
        self.requests.clear();
        let req = NewRequest {
            exchange,
            confirmable,
            mid,
            token: Token::new(&token).ok_or(DeviceError::Encoding)?,
            random,
        };
        match self.requests.start(now, req, |buf| build(buf, mid, &token)) {
            Ok(_) => Ok(()),
            Err(client::StartError::Build(e)) => Err(e),
            Err(_) => Err(DeviceError::TooLarge),
        }
    }

    /// Empty `POST` to the registration's location, with the `options` the state machine adds:
    /// refreshes its lifetime.
    pub fn start_update<C: CryptoProvider>(
        &mut self,
        crypto: &C,
        now: Instant,
        options: impl FnOnce(&mut MessageBuilder<'_>) -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let location = self.location;
        self.begin(crypto, now, Exchange::Update, true, |buf, mid, token| {
            let mut b = MessageBuilder::new(buf, MessageType::Confirmable, Code::POST, mid, token)
                .map_err(|_| DeviceError::TooLarge)?;
            for seg in location.as_bytes().split(|c| *c == b'/') {
                b.option(option::URI_PATH, seg)
                    .map_err(|_| DeviceError::TooLarge)?;
            }
            options(&mut b)?;
            Ok(b.finish())
        })
    }

    /// Keeps `senml` (with its `timestamp`) as the reading to publish, in place of any
    /// reading waiting to go again.
    pub fn keep_reading(
        &mut self,
        senml: &[u8],
        timestamp: Option<u64>,
    ) -> Result<(), DeviceError> {
        let n = senml.len();
        if n > MAX_SENML {
            return Err(DeviceError::TooLarge);
        }
        self.last_senml[..n].copy_from_slice(senml);
        self.last_senml_len = n;
        self.last_timestamp = timestamp;
        self.republish = false;
        Ok(())
    }

    /// The kept reading's SenML and timestamp.
    pub fn last_reading(&self) -> (&[u8], Option<u64>) {
        (&self.last_senml[..self.last_senml_len], self.last_timestamp)
    }

    /// Ends the wait of a reading to be published again: whether there is one to send
    /// (Confirmable, so that it is known to arrive).
    pub fn take_republication(&mut self) -> bool {
        self.republish = false;
        self.last_senml_len > 0
    }

    /// Starts `PUT /ps/N/<href>` with `body`, the protected reading `seq`: Confirmable when
    /// `confirm` or it is the `confirm_every`-th; a Non-confirmable one is reported sent.
    pub fn send_reading<C: CryptoProvider>(
        &mut self,
        crypto: &C,
        now: Instant,
        seq: K::Seq,
        confirm: bool,
        put: Put<'_>,
        body: &[u8],
    ) -> Result<(), DeviceError> {
        self.publishes = self.publishes.wrapping_add(1);
        let confirmable =
            confirm || (put.confirm_every != 0 && self.publishes % put.confirm_every == 0);
        let location = self.location;
        let mtype = if confirmable {
            MessageType::Confirmable
        } else {
            MessageType::NonConfirmable
        };
        self.begin(
            crypto,
            now,
            Exchange::Publish { seq },
            confirmable,
            |buf, mid, token| {
                let mut b = MessageBuilder::new(buf, mtype, Code::PUT, mid, token)
                    .map_err(|_| DeviceError::TooLarge)?;
                b.option(option::URI_PATH, b"ps")
                    .map_err(|_| DeviceError::TooLarge)?;
                // The topic of registration rd/N is ps/N/<href>.
                if let Some(n) = K::topic(location.as_bytes()) {
                    b.option(option::URI_PATH, n)
                        .map_err(|_| DeviceError::TooLarge)?;
                }
                b.option(option::URI_PATH, put.href.as_bytes())
                    .map_err(|_| DeviceError::TooLarge)?;
                b.uint_option(option::CONTENT_FORMAT, u32::from(put.content_format))
                    .map_err(|_| DeviceError::TooLarge)?;
                require_option(&mut b, put.require_signed)?;
                b.finish_with_payload(body)
                    .map_err(|_| DeviceError::TooLarge)
            },
        )?;
        if !confirmable {
            self.push_event(K::published(seq, PublishOutcome::Sent));
        }
        Ok(())
    }

    /// Parses `datagram` and gives it to the requests: a malformed or unexpected message is
    /// counted in `stats`, a Reset acted on ([`Endpoint::on_reset`]) unless `resets` is off
    /// (then counted refused), and a response returned for the state machine.
    pub fn receive<'a>(
        &mut self,
        now: Instant,
        datagram: &'a [u8],
        stats: &mut DeviceStats,
        resets: bool,
        lifetime: Duration,
    ) -> Option<(Message<'a>, RequestId)> {
        let Ok(msg) = Message::parse(datagram) else {
            stats.malformed += 1;
            return None;
        };
        match self.requests.handle_message(&msg, now) {
            Incoming::Handled => None,
            Incoming::Unexpected => {
                stats.unexpected += 1;
                None
            }
            Incoming::Reset(_) if !resets => {
                stats.resets_refused = stats.resets_refused.saturating_add(1);
                None
            }
            Incoming::Reset(id) => {
                self.on_reset(now, id, lifetime);
                None
            }
            Incoming::Response(id) => Some((msg, id)),
        }
    }

    /// A Reset to request `id`: a reading's means the broker finds its number out of window
    /// ([`Endpoint::resynchronise`]); any other request failed without an answer.
    fn on_reset(&mut self, now: Instant, id: RequestId, lifetime: Duration) {
        match self.requests.remove(id) {
            Some(Exchange::Publish { seq }) => self.resynchronise(now, seq, lifetime),
            Some(x) => self.failed(now, x, None, lifetime),
            None => {}
        }
    }

    /// §8.2: the broker finds the number of reading `seq` out of window. Register again, then
    /// publish the same reading again under a new number.
    pub fn resynchronise(&mut self, now: Instant, seq: K::Seq, lifetime: Duration) {
        self.push_event(K::published(seq, PublishOutcome::Reset));
        self.push_event(K::RESYNCHRONISING);
        if K::RESET_BACKS_OFF {
            self.reregister_and_republish(now, lifetime);
        } else {
            self.republish = true;
            self.republish_at = now;
            self.state = State::Unregistered { retry_at: now };
        }
    }

    /// Registered at `location` (a registration's 2.01, its request already removed).
    pub fn registered(&mut self, now: Instant, location: Location, lifetime: Duration) {
        self.location = location;
        self.reg_failures = 0;
        self.state = State::Registered {
            refresh_at: now + lifetime / 5 * 4,
        };
        self.push_event(K::REGISTERED);
    }

    /// The answers both state machines take alike: an update's 2.04, a reading's 2.04 or 2.01
    /// (acknowledged) and 5.xx (kept and sent again later, still registered); any other
    /// answer fails the exchange with its code.
    pub fn on_answer(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        id: RequestId,
        exchange: Exchange<K::Register, K::Seq>,
        lifetime: Duration,
    ) {
        match exchange {
            Exchange::Update if msg.code == Code::CHANGED => {
                self.requests.remove(id);
                self.state = State::Registered {
                    refresh_at: now + lifetime / 5 * 4,
                };
                self.push_event(K::REFRESHED);
            }
            Exchange::Publish { seq } if msg.code == Code::CHANGED || msg.code == Code::CREATED => {
                self.requests.remove(id);
                self.refusals = 0;
                self.server_errors = 0;
                self.push_event(K::published(seq, PublishOutcome::Acknowledged));
            }
            Exchange::Publish { seq } if msg.code.class() == 5 => {
                // The broker stored nothing (a failed batch commits nothing): keep the
                // reading and send it again later, still registered.
                self.requests.remove(id);
                let secs = retry_delay(msg, &mut self.server_errors);
                let outcome = PublishOutcome::Deferred {
                    code: msg.code,
                    retry_after_secs: secs,
                };
                self.push_event(K::published(seq, outcome));
                self.republish = true;
                self.republish_at = now + Duration::from_secs(u64::from(secs));
            }
            _ => self.failed_with(now, id, msg.code, lifetime),
        }
    }

    /// Removes request `id` and fails its exchange with the answer `code`.
    pub fn failed_with(&mut self, now: Instant, id: RequestId, code: Code, lifetime: Duration) {
        if let Some(x) = self.requests.remove(id) {
            self.failed(now, x, Some(code), lifetime);
        }
    }

    /// `exchange` failed: answered with `code`, or (`None`) with no answer.
    fn failed(
        &mut self,
        now: Instant,
        exchange: Exchange<K::Register, K::Seq>,
        code: Option<Code>,
        lifetime: Duration,
    ) {
        match exchange {
            Exchange::Publish { seq } => match code {
                Some(c) if K::reregisters(c) => {
                    self.push_event(K::published(seq, PublishOutcome::Republishing(c)));
                    self.reregister_and_republish(now, lifetime);
                }
                _ => {
                    let outcome = code.map_or(PublishOutcome::TimedOut, PublishOutcome::Rejected);
                    self.push_event(K::published(seq, outcome));
                }
            },
            Exchange::Register(_) | Exchange::Update => {
                if let Some(code) = code {
                    self.push_event(K::registration_failed(code));
                }
                if exchange == Exchange::Update && code == Some(Code::NOT_FOUND) {
                    self.state = State::Unregistered { retry_at: now };
                    return;
                }
                self.reg_failures = self.reg_failures.saturating_add(1);
                self.state = State::Unregistered {
                    retry_at: now + backoff(self.reg_failures, lifetime),
                };
            }
        }
    }

    /// Registers again and publishes the pending reading again afterwards: immediately the
    /// first time, backing off if it happens again before a reading is acknowledged.
    fn reregister_and_republish(&mut self, now: Instant, lifetime: Duration) {
        self.republish = true;
        self.republish_at = now;
        let retry_at = if self.refusals == 0 {
            now
        } else {
            now + backoff(self.refusals, lifetime)
        };
        self.refusals = self.refusals.saturating_add(1);
        self.state = State::Unregistered { retry_at };
    }
}

/// A registration lifetime as RFC 9176's `lt`: whole seconds, at least 1, at most 2^32-1.
pub(crate) fn lifetime_secs(lifetime: Duration) -> u32 {
    u32::try_from(lifetime.as_secs()).unwrap_or(u32::MAX).max(1)
}

/// Back-off after `failures` failures in a row: 10 s, 20 s, 40 s ... capped at the lifetime.
fn backoff(failures: u32, lifetime: Duration) -> Duration {
    (Duration::from_secs(5) * (1u32 << failures.min(10))).min(lifetime)
}

/// The head of a registration (RFC 9176 §5): `POST /rd?ep=<identity>&lt=<lifetime>` in
/// link format, Confirmable; the state machine adds the rest.
pub(crate) fn registration<'b>(
    buf: &'b mut [u8; MAX_DATAGRAM],
    mid: u16,
    token: &[u8; 4],
    ep: &[u8; 32],
    lifetime: u32,
) -> Result<MessageBuilder<'b>, DeviceError> {
    let mut b = MessageBuilder::new(buf, MessageType::Confirmable, Code::POST, mid, token)
        .map_err(|_| DeviceError::TooLarge)?;
    b.option(option::URI_PATH, b"rd")
        .map_err(|_| DeviceError::TooLarge)?;
    b.uint_option(
        option::CONTENT_FORMAT,
        u32::from(ContentFormat::LINK_FORMAT.0),
    )
    .map_err(|_| DeviceError::TooLarge)?;
    let mut q = [0u8; 35];
    q[..3].copy_from_slice(b"ep=");
    q[3..].copy_from_slice(ep);
    b.option(option::URI_QUERY, &q)
        .map_err(|_| DeviceError::TooLarge)?;
    let n = crate::machine::fmt_into(&mut q, format_args!("lt={lifetime}"))?;
    b.option(option::URI_QUERY, &q[..n])
        .map_err(|_| DeviceError::TooLarge)?;
    Ok(b)
}

/// Adds the "signed answers required" option (`sigil_objects::answer`) when `on`.
pub(crate) fn require_option(b: &mut MessageBuilder<'_>, on: bool) -> Result<(), DeviceError> {
    if on {
        b.option(answer::REQUIRE_OPTION, &[])
            .map_err(|_| DeviceError::TooLarge)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_keep_order_and_their_bound() {
        let mut q: Queue<u8, 3> = Queue::new();
        for i in 0..5 {
            q.push_newest(i);
        }
        assert_eq!(
            (q.pop(), q.pop(), q.pop(), q.pop()),
            (Some(2), Some(3), Some(4), None)
        );
    }
}
