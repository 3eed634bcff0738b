//! A publisher with only a pre-shared key: no key pair, no signature, no key agreement.
//!
//! The node is provisioned with a random 16-byte [`Identity`] (not derived from any key) and a
//! PSK of 16 to 64 bytes the server shares. It registers with the Resource Directory and
//! publishes readings like [`crate::Device`], in one of two modes ([`PskMode`]):
//!
//! - [`PskMode::Mac`]: each reading is a COSE_Mac0 (content-format 17) under the node's reading
//!   key, HKDF-derived from the PSK and the identity ([`ReadingKey::derive`]), with a sequence
//!   number reserved ahead in storage as a signed reading's is, so a reboot never reuses one.
//!   Whoever holds the reading key (the server, and the subscribers it discloses the key to)
//!   can check the reading end to end; nobody else can.
//! - [`PskMode::Session`]: the caller carries the node's datagrams over a DTLS-PSK session
//!   whose PSK identity is the identity's text form ([`PskNode::psk_identity`]). Readings are
//!   plain SenML-CBOR (content-format 112) without a sequence number: the session gives
//!   integrity and replay protection, the broker numbers what it stores. A reading is then
//!   authenticated hop by hop only, not verifiable end to end.
//!
//! Registration: `POST /rd?ep=<identity>&lt=<secs>` with the link-format payload
//! `</href>;rt="..";ct=<17|112>` and nothing else (no key, no signed statement); a refresh is
//! an empty `POST` to the registration's location. Readings go to `PUT /ps/<N>/<href>`, where
//! `rd/<N>` is that location. A 4.01, 4.03, 4.04 or 4.15 answer to a reading means the broker
//! lost (or never took) the registration: the node registers again and publishes the reading
//! again. A Reset to a Confirmable reading (in MAC mode, the broker's "number out of window")
//! does the same, the reading going out again under a new number.
//!
//! Nothing here calls a signing, key-generation or key-agreement function of the provider,
//! so an image built around a `PskNode` links no public-key code (firmware `psk_sensor`).

use crate::exchange::{Queue, Requests};
use crate::machine::{fmt_into, DeviceError, DeviceStats, PublishOutcome, Resource, MAX_DATAGRAM};
use crate::storage::{DeviceStorage, Reservation};
use core::time::Duration;
use sigil_coap::exchange::client::{Incoming, RequestId};
use sigil_coap::message::option;
use sigil_coap::{
    Code, ContentFormat, Message, MessageBuilder, MessageType, TransmissionParameters,
};
use sigil_crypto::{CryptoProvider, Rng};
use sigil_freshness::SequenceCounter;
use sigil_identity::Identity;
use sigil_objects::mac::{self, ReadingKey, CONTENT_FORMAT_MAC0};
use sigil_objects::senml::{self, Record};
use sigil_objects::Freshness;
use sigil_time::{Instant, UnixTime};

/// Shortest pre-shared key a node accepts.
pub const MIN_PSK_LEN: usize = 16;
/// Longest pre-shared key a node accepts.
pub const MAX_PSK_LEN: usize = 64;
const MAX_LOCATION: usize = 24;
const MAX_SENML: usize = 256;
const EVENT_QUEUE: usize = 8;

/// How a PSK node authenticates its readings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PskMode {
    /// COSE_Mac0 under the reading key derived from the PSK (content-format 17), with a
    /// persisted sequence number.
    Mac,
    /// Plain SenML-CBOR (content-format 112) inside a DTLS-PSK session the caller runs.
    Session,
}

impl PskMode {
    /// The content-format of a reading in this mode (also the `ct` the node registers).
    pub const fn content_format(self) -> u16 {
        match self {
            Self::Mac => CONTENT_FORMAT_MAC0,
            Self::Session => ContentFormat::SENML_CBOR.0,
        }
    }
}

/// How a PSK node behaves. All of it is the integrator's choice.
#[derive(Clone, Copy, Debug)]
pub struct PskConfig {
    pub mode: PskMode,
    /// Registration lifetime `lt` (RFC 9176 §5), sent in whole seconds (1 s to 2^32-1 s).
    pub lifetime: Duration,
    /// Publish every n-th reading as Confirmable (1: all; 0: none); the others are
    /// Non-confirmable. Readings published again are always Confirmable.
    pub confirm_every: u32,
    pub transmission: TransmissionParameters,
    /// Sequence numbers reserved per storage write (MAC mode).
    pub sequence_block: u64,
    pub resource: Resource,
}

impl PskConfig {
    /// The lifetime as RFC 9176's `lt`: whole seconds, at least 1, at most 2^32-1.
    pub fn lifetime_secs(&self) -> u32 {
        u32::try_from(self.lifetime.as_secs())
            .unwrap_or(u32::MAX)
            .max(1)
    }
}

impl Default for PskConfig {
    fn default() -> Self {
        Self {
            mode: PskMode::Mac,
            lifetime: Duration::from_secs(300),
            confirm_every: 1,
            transmission: TransmissionParameters::default(),
            sequence_block: 64,
            resource: Resource {
                href: "m",
                rt: "sigil.env",
            },
        }
    }
}

/// What happened, for the caller to log or count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PskEvent {
    /// Registered (or re-registered) with the Resource Directory.
    Registered,
    /// The registration lifetime was refreshed.
    RegistrationRefreshed,
    /// The Resource Directory refused the registration (retried later).
    RegistrationFailed { code: Code },
    /// A reading's fate; `seq` is its sequence number in MAC mode, `None` in session mode.
    Published {
        seq: Option<u64>,
        outcome: PublishOutcome,
    },
    /// The broker answered a reading with Reset: registering again, then publishing the
    /// reading again (under a new number in MAC mode).
    Resynchronising,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exchange {
    Register,
    Update,
    Publish { seq: Option<u64> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Unregistered { retry_at: Instant },
    Registered { refresh_at: Instant },
}

/// The PSK publisher. `C` is the crypto provider; only its SHA-256 and HMAC are used.
pub struct PskNode<C> {
    crypto: C,
    config: PskConfig,
    identity: Identity,
    /// The reading key (MAC mode only).
    key: Option<ReadingKey>,
    /// The sequence counter (MAC mode only).
    counter: Option<SequenceCounter>,
    state: State,
    location: [u8; MAX_LOCATION],
    location_len: usize,
    requests: Requests<Exchange>,
    events: Queue<PskEvent, EVENT_QUEUE>,
    next_mid: u16,
    token_seed: [u8; 16],
    token_counter: u32,
    publishes: u32,
    reg_failures: u32,
    /// The last reading's SenML-CBOR and timestamp, kept to publish it again.
    last_senml: [u8; MAX_SENML],
    last_senml_len: usize,
    last_timestamp: Option<u64>,
    republish: bool,
    /// When the pending republication may go (5.03 with Max-Age: not before then).
    republish_at: Instant,
    /// Readings refused (or Reset) since the last acknowledged one: after the first, the
    /// re-registration backs off as a failed registration does.
    refusals: u32,
    /// Server errors (5.xx other than 5.03) in a row for readings, for their back-off.
    server_errors: u32,
    pub stats: DeviceStats,
}

impl<C: CryptoProvider> PskNode<C> {
    /// Boots the node with its provisioned `identity` and `psk` (16 to 64 bytes). In MAC mode
    /// it derives the reading key and resumes its sequence numbers above the block reserved in
    /// `storage` (reserving the next block first); in session mode storage is not touched. The
    /// PSK itself is not kept: the DTLS layer holds it in session mode.
    pub fn boot<S: DeviceStorage>(
        crypto: C,
        config: PskConfig,
        identity: Identity,
        psk: &[u8],
        storage: &mut S,
        rng: &mut dyn Rng,
    ) -> Result<Self, DeviceError> {
        if !(MIN_PSK_LEN..=MAX_PSK_LEN).contains(&psk.len()) {
            return Err(DeviceError::Config);
        }
        let (key, counter) = match config.mode {
            PskMode::Mac => (
                Some(ReadingKey::derive(&crypto, psk, &identity)),
                Some(SequenceCounter::boot(
                    &mut Reservation(storage),
                    config.sequence_block,
                )?),
            ),
            PskMode::Session => (None, None),
        };
        let mut seed = [0u8; 18];
        rng.fill(&mut seed).map_err(|_| DeviceError::Encoding)?;
        let mut token_seed = [0u8; 16];
        token_seed.copy_from_slice(&seed[..16]);
        Ok(Self {
            crypto,
            config,
            identity,
            key,
            counter,
            state: State::Unregistered {
                retry_at: Instant::ZERO,
            },
            location: [0; MAX_LOCATION],
            location_len: 0,
            requests: Requests::new(config.transmission),
            events: Queue::new(),
            next_mid: u16::from_be_bytes([seed[16], seed[17]]),
            token_seed,
            token_counter: 0,
            publishes: 0,
            reg_failures: 0,
            last_senml: [0; MAX_SENML],
            last_senml_len: 0,
            last_timestamp: None,
            republish: false,
            republish_at: Instant::ZERO,
            refusals: 0,
            server_errors: 0,
            stats: DeviceStats::default(),
        })
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn mode(&self) -> PskMode {
        self.config.mode
    }

    /// The DTLS PSK identity of the node: its identity's text form (32 lower-case hex digits),
    /// also its endpoint name in the Resource Directory.
    pub fn psk_identity(&self) -> [u8; 32] {
        self.identity.hex()
    }

    pub fn is_registered(&self) -> bool {
        matches!(self.state, State::Registered { .. })
    }

    /// True when a new reading can be published now.
    pub fn can_publish(&self) -> bool {
        self.is_registered()
            && !self.republish
            && self.requests.iter().all(|(_, o)| !o.is_confirmable())
    }

    /// Whether a refused reading waits to be published again.
    pub fn has_pending_republication(&self) -> bool {
        self.republish
    }

    /// The registration's location path (`rd/N`), once registered.
    pub fn location(&self) -> Option<&str> {
        if self.location_len == 0 {
            return None;
        }
        core::str::from_utf8(&self.location[..self.location_len]).ok()
    }

    /// The number the next MACed reading will carry (`None` in session mode).
    pub fn next_sequence(&self) -> Option<u64> {
        self.counter.as_ref().map(SequenceCounter::peek)
    }

    fn next_token(&mut self) -> ([u8; 4], u32) {
        self.token_counter = self.token_counter.wrapping_add(1);
        crate::exchange::token(&self.crypto, &self.token_seed, self.token_counter)
    }

    fn next_mid(&mut self) -> u16 {
        self.next_mid = self.next_mid.wrapping_add(1);
        self.next_mid
    }

    fn push_event(&mut self, e: PskEvent) {
        self.events.push_newest(e);
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<PskEvent> {
        self.events.pop()
    }

    /// Copies the next datagram to send into `buf` and returns its length.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.requests.poll_transmit(buf)
    }

    /// When [`PskNode::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let exchange = self.requests.poll_timeout();
        let state = match (self.state, self.requests.is_empty()) {
            (_, false) => None,
            (State::Unregistered { retry_at }, true) => Some(retry_at),
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

    /// Advances timers: retransmissions, registration, its refresh, deferred readings.
    pub fn handle_timeout<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
    ) -> Result<(), DeviceError> {
        let retransmissions = &mut self.stats.retransmissions;
        if let Some(x) = crate::exchange::on_timer(&mut self.requests, now, retransmissions) {
            self.exchange_failed(now, x, None);
        }
        if self.requests.is_empty() {
            match self.state {
                State::Unregistered { retry_at } if now >= retry_at => {
                    self.start_registration(now)?
                }
                State::Registered { refresh_at } if now >= refresh_at => self.start_update(now)?,
                State::Registered { .. } if self.republish && now >= self.republish_at => {
                    self.publish_again(now, storage)?
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn begin(
        &mut self,
        now: Instant,
        exchange: Exchange,
        confirmable: bool,
        build: impl FnOnce(&mut [u8; MAX_DATAGRAM], u16, &[u8; 4]) -> Result<usize, DeviceError>,
    ) -> Result<(), DeviceError> {
        let mid = self.next_mid();
        let token = self.next_token();
        let requests = &mut self.requests;
        crate::exchange::start(requests, now, (exchange, confirmable), mid, token, build)
    }

    /// `POST /rd?ep=<identity>&lt=<secs>` with `</href>;rt="..";ct=..`.
    fn start_registration(&mut self, now: Instant) -> Result<(), DeviceError> {
        let ep = self.identity.hex();
        let lifetime = self.config.lifetime_secs();
        let resource = self.config.resource;
        let ct = self.config.mode.content_format();
        self.begin(now, Exchange::Register, true, |buf, mid, token| {
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
            q[3..].copy_from_slice(&ep);
            b.option(option::URI_QUERY, &q)
                .map_err(|_| DeviceError::TooLarge)?;
            let n = fmt_into(&mut q, format_args!("lt={lifetime}"))?;
            b.option(option::URI_QUERY, &q[..n])
                .map_err(|_| DeviceError::TooLarge)?;
            let mut payload = [0u8; 160];
            let pn = fmt_into(
                &mut payload,
                format_args!("</{}>;rt=\"{}\";ct={}", resource.href, resource.rt, ct),
            )?;
            b.finish_with_payload(&payload[..pn])
                .map_err(|_| DeviceError::TooLarge)
        })
    }

    /// Empty `POST` to the registration's location: refreshes its lifetime.
    fn start_update(&mut self, now: Instant) -> Result<(), DeviceError> {
        let mut loc = [0u8; MAX_LOCATION];
        let ll = self.location_len;
        loc[..ll].copy_from_slice(&self.location[..ll]);
        self.begin(now, Exchange::Update, true, |buf, mid, token| {
            let mut b = MessageBuilder::new(buf, MessageType::Confirmable, Code::POST, mid, token)
                .map_err(|_| DeviceError::TooLarge)?;
            for seg in loc[..ll].split(|c| *c == b'/') {
                b.option(option::URI_PATH, seg)
                    .map_err(|_| DeviceError::TooLarge)?;
            }
            Ok(b.finish())
        })
    }

    /// Encodes `records` as SenML-CBOR and publishes them as one reading. `timestamp` goes
    /// into the MACed header when the node trusts its clock (MAC mode; a time before 1970 is
    /// left out). Returns the reading's sequence number in MAC mode, `None` in session mode.
    pub fn publish<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        records: &[Record<'_>],
        timestamp: Option<UnixTime>,
    ) -> Result<Option<u64>, DeviceError> {
        self.check_publish()?;
        let mut senml_buf = [0u8; MAX_SENML];
        let n = senml::encode_cbor(records, &mut senml_buf).map_err(|_| DeviceError::TooLarge)?;
        self.publish_senml(now, storage, &senml_buf[..n], timestamp)
    }

    /// Publishes an already encoded SenML-CBOR pack as one reading; otherwise as
    /// [`PskNode::publish`].
    pub fn publish_senml<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        senml_cbor: &[u8],
        timestamp: Option<UnixTime>,
    ) -> Result<Option<u64>, DeviceError> {
        self.check_publish()?;
        let n = senml_cbor.len();
        if n > MAX_SENML {
            return Err(DeviceError::TooLarge);
        }
        self.last_senml[..n].copy_from_slice(senml_cbor);
        self.last_senml_len = n;
        self.last_timestamp = timestamp.and_then(|t| u64::try_from(t.as_secs()).ok());
        self.republish = false;
        self.send_reading(now, storage, false)
    }

    fn check_publish(&self) -> Result<(), DeviceError> {
        if !self.is_registered() {
            return Err(DeviceError::NotRegistered);
        }
        if !self.can_publish() {
            return Err(DeviceError::Busy);
        }
        Ok(())
    }

    fn publish_again<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
    ) -> Result<(), DeviceError> {
        self.republish = false;
        if self.last_senml_len > 0 {
            // Confirmable, so a reading sent again is known to have arrived.
            self.send_reading(now, storage, true)?;
        }
        Ok(())
    }

    /// MACs the pending SenML pack into `out` under `seq`. Not inlined, so the COSE buffers
    /// are not part of the caller's frame.
    #[inline(never)]
    fn mac_reading(&self, seq: u64, out: &mut [u8]) -> Result<usize, DeviceError> {
        let key = self.key.as_ref().ok_or(DeviceError::Config)?;
        let fresh = Freshness {
            seq,
            lsb_bits: None,
            timestamp: self.last_timestamp,
        };
        mac::mac_reading(
            &self.crypto,
            key,
            &self.identity,
            &fresh,
            &self.last_senml[..self.last_senml_len],
            out,
        )
        .map_err(|_| DeviceError::Encoding)
    }

    fn send_reading<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        confirm: bool,
    ) -> Result<Option<u64>, DeviceError> {
        let mut body = [0u8; MAX_DATAGRAM];
        let (seq, bn) = match self.counter.as_mut() {
            Some(counter) => {
                let seq = counter.next(&mut Reservation(storage))?;
                (Some(seq), self.mac_reading(seq, &mut body)?)
            }
            None => {
                let n = self.last_senml_len;
                body[..n].copy_from_slice(&self.last_senml[..n]);
                (None, n)
            }
        };
        self.publishes = self.publishes.wrapping_add(1);
        let confirmable = confirm
            || (self.config.confirm_every != 0 && self.publishes % self.config.confirm_every == 0);
        let mut loc = [0u8; MAX_LOCATION];
        let ll = self.location_len;
        loc[..ll].copy_from_slice(&self.location[..ll]);
        let href = self.config.resource.href;
        let cf = self.config.mode.content_format();
        let mtype = if confirmable {
            MessageType::Confirmable
        } else {
            MessageType::NonConfirmable
        };
        self.begin(
            now,
            Exchange::Publish { seq },
            confirmable,
            |buf, mid, token| {
                let mut b = MessageBuilder::new(buf, mtype, Code::PUT, mid, token)
                    .map_err(|_| DeviceError::TooLarge)?;
                b.option(option::URI_PATH, b"ps")
                    .map_err(|_| DeviceError::TooLarge)?;
                // The topic of registration rd/N is ps/N/<href>.
                if let Some(n) = loc[..ll].split(|c| *c == b'/').next_back() {
                    b.option(option::URI_PATH, n)
                        .map_err(|_| DeviceError::TooLarge)?;
                }
                b.option(option::URI_PATH, href.as_bytes())
                    .map_err(|_| DeviceError::TooLarge)?;
                b.uint_option(option::CONTENT_FORMAT, u32::from(cf))
                    .map_err(|_| DeviceError::TooLarge)?;
                b.finish_with_payload(&body[..bn])
                    .map_err(|_| DeviceError::TooLarge)
            },
        )?;
        if !confirmable {
            self.push_event(PskEvent::Published {
                seq,
                outcome: PublishOutcome::Sent,
            });
        }
        Ok(seq)
    }

    /// Back-off after `failures` failures in a row: 10 s, 20 s, 40 s ... capped at the
    /// lifetime.
    fn backoff(&self, failures: u32) -> Duration {
        (Duration::from_secs(5) * (1u32 << failures.min(10))).min(self.config.lifetime)
    }

    /// Registers again and publishes the pending reading again afterwards: immediately the
    /// first time, backing off if it happens again before a reading is acknowledged.
    fn reregister_and_republish(&mut self, now: Instant) {
        self.republish = true;
        self.republish_at = now;
        let retry_at = if self.refusals == 0 {
            now
        } else {
            now + self.backoff(self.refusals)
        };
        self.refusals = self.refusals.saturating_add(1);
        self.state = State::Unregistered { retry_at };
    }

    fn exchange_failed(&mut self, now: Instant, exchange: Exchange, code: Option<Code>) {
        match exchange {
            Exchange::Publish { seq } => match code {
                Some(c)
                    if c == Code::NOT_FOUND
                        || c == Code::UNAUTHORIZED
                        || c == Code::FORBIDDEN
                        || c == Code::UNSUPPORTED_CONTENT_FORMAT =>
                {
                    // The broker does not hold (or no longer accepts) the registration this
                    // reading was made for: register again, then publish the reading again.
                    self.push_event(PskEvent::Published {
                        seq,
                        outcome: PublishOutcome::Republishing(c),
                    });
                    self.reregister_and_republish(now);
                }
                _ => {
                    let outcome = code.map_or(PublishOutcome::TimedOut, PublishOutcome::Rejected);
                    self.push_event(PskEvent::Published { seq, outcome });
                }
            },
            Exchange::Register | Exchange::Update => {
                if let Some(code) = code {
                    self.push_event(PskEvent::RegistrationFailed { code });
                }
                if exchange == Exchange::Update && code == Some(Code::NOT_FOUND) {
                    self.state = State::Unregistered { retry_at: now };
                    return;
                }
                self.reg_failures = self.reg_failures.saturating_add(1);
                self.state = State::Unregistered {
                    retry_at: now + self.backoff(self.reg_failures),
                };
            }
        }
    }

    /// Feeds one received datagram. Malformed or unexpected input is counted and ignored.
    pub fn handle_datagram<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        datagram: &[u8],
    ) -> Result<(), DeviceError> {
        let Ok(msg) = Message::parse(datagram) else {
            self.stats.malformed += 1;
            return Ok(());
        };
        match self.requests.handle_message(&msg, now) {
            Incoming::Handled => Ok(()),
            Incoming::Unexpected => {
                self.stats.unexpected += 1;
                Ok(())
            }
            Incoming::Reset(id) => {
                self.on_reset(now, id);
                Ok(())
            }
            Incoming::Response(id) => self.on_response(now, storage, &msg, id),
        }
    }

    fn on_reset(&mut self, now: Instant, id: RequestId) {
        match self.requests.remove(id) {
            Some(Exchange::Publish { seq }) => {
                // MAC mode: the broker finds the number out of window. Register again, then
                // publish the reading again under a new number.
                self.push_event(PskEvent::Published {
                    seq,
                    outcome: PublishOutcome::Reset,
                });
                self.push_event(PskEvent::Resynchronising);
                self.reregister_and_republish(now);
            }
            Some(x) => self.exchange_failed(now, x, None),
            None => {}
        }
    }

    fn on_response<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        msg: &Message<'_>,
        id: RequestId,
    ) -> Result<(), DeviceError> {
        let Some(exchange) = self.requests.get(id).map(|o| o.exchange()) else {
            return Ok(());
        };
        match exchange {
            Exchange::Register if msg.code == Code::CREATED => {
                let mut loc = [0u8; MAX_LOCATION];
                let mut n = 0;
                for seg in msg.option_values(option::LOCATION_PATH) {
                    let need = seg.len() + usize::from(n > 0);
                    if n + need > MAX_LOCATION {
                        self.exchange_failed_with(now, id, Code::INTERNAL_SERVER_ERROR);
                        return Ok(());
                    }
                    if n > 0 {
                        loc[n] = b'/';
                        n += 1;
                    }
                    loc[n..n + seg.len()].copy_from_slice(seg);
                    n += seg.len();
                }
                if n == 0 {
                    // Without a location there is no topic to publish to.
                    self.exchange_failed_with(now, id, Code::INTERNAL_SERVER_ERROR);
                    return Ok(());
                }
                self.requests.remove(id);
                self.location = loc;
                self.location_len = n;
                self.reg_failures = 0;
                self.state = State::Registered {
                    refresh_at: now + self.config.lifetime / 5 * 4,
                };
                self.push_event(PskEvent::Registered);
                if self.republish && now >= self.republish_at {
                    self.publish_again(now, storage)?;
                }
                Ok(())
            }
            Exchange::Update if msg.code == Code::CHANGED => {
                self.requests.remove(id);
                self.state = State::Registered {
                    refresh_at: now + self.config.lifetime / 5 * 4,
                };
                self.push_event(PskEvent::RegistrationRefreshed);
                Ok(())
            }
            Exchange::Publish { seq } if msg.code == Code::CHANGED || msg.code == Code::CREATED => {
                self.requests.remove(id);
                self.refusals = 0;
                self.server_errors = 0;
                self.push_event(PskEvent::Published {
                    seq,
                    outcome: PublishOutcome::Acknowledged,
                });
                Ok(())
            }
            Exchange::Publish { seq } if msg.code.class() == 5 => {
                // The broker stored nothing: keep the reading and send it again later.
                self.requests.remove(id);
                let secs = crate::exchange::retry_delay(msg, &mut self.server_errors);
                self.push_event(PskEvent::Published {
                    seq,
                    outcome: PublishOutcome::Deferred {
                        code: msg.code,
                        retry_after_secs: secs,
                    },
                });
                self.republish = true;
                self.republish_at = now + Duration::from_secs(u64::from(secs));
                Ok(())
            }
            _ => {
                self.exchange_failed_with(now, id, msg.code);
                Ok(())
            }
        }
    }

    fn exchange_failed_with(&mut self, now: Instant, id: RequestId, code: Code) {
        if let Some(x) = self.requests.remove(id) {
            self.exchange_failed(now, x, Some(code));
        }
    }
}
