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

use crate::exchange::{self, registration, Due, Endpoint, Kind, Location, Put, MAX_SENML};
use crate::machine::{fmt_into, DeviceError, DeviceStats, PublishOutcome, Resource, MAX_DATAGRAM};
use crate::storage::{DeviceStorage, Reservation};
use core::time::Duration;
use sigil_coap::exchange::client::RequestId;
use sigil_coap::{Code, ContentFormat, Message, TransmissionParameters};
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
        exchange::lifetime_secs(self.lifetime)
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

/// A request: a reading carries its number in MAC mode.
type Exchange = exchange::Exchange<(), Option<u64>>;

/// What the PSK node does its own way in what it shares with the signing device
/// ([`Endpoint`]).
enum Psk {}

impl Kind for Psk {
    type Register = ();
    type Seq = Option<u64>;
    type Event = PskEvent;
    const REGISTERED: PskEvent = PskEvent::Registered;
    const REFRESHED: PskEvent = PskEvent::RegistrationRefreshed;
    const RESYNCHRONISING: PskEvent = PskEvent::Resynchronising;
    /// A Reset to a reading (in MAC mode, the broker finds its number out of window) counts as
    /// a refusal: registering again backs off if it repeats.
    const RESET_BACKS_OFF: bool = true;

    fn registration_failed(code: Code) -> PskEvent {
        PskEvent::RegistrationFailed { code }
    }

    fn published(seq: Option<u64>, outcome: PublishOutcome) -> PskEvent {
        PskEvent::Published { seq, outcome }
    }

    /// 4.01 and 4.03 as well as 4.04 and 4.15: the broker does not hold (or no longer
    /// accepts) the registration the reading was made for.
    fn reregisters(code: Code) -> bool {
        code == Code::NOT_FOUND
            || code == Code::UNAUTHORIZED
            || code == Code::FORBIDDEN
            || code == Code::UNSUPPORTED_CONTENT_FORMAT
    }

    fn topic(location: &[u8]) -> Option<&[u8]> {
        location.split(|c| *c == b'/').next_back()
    }
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
    /// Requests, events, the registration and the reading to publish again.
    ep: Endpoint<Psk>,
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
        let ep = Endpoint::new(config.transmission, rng)?;
        Ok(Self {
            crypto,
            config,
            identity,
            key,
            counter,
            ep,
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
        self.ep.is_registered()
    }

    /// True when a new reading can be published now.
    pub fn can_publish(&self) -> bool {
        self.ep.can_publish()
    }

    /// Whether a refused reading waits to be published again.
    pub fn has_pending_republication(&self) -> bool {
        self.ep.has_pending_republication()
    }

    /// The registration's location path (`rd/N`), once registered.
    pub fn location(&self) -> Option<&str> {
        self.ep.location()
    }

    /// The number the next MACed reading will carry (`None` in session mode).
    pub fn next_sequence(&self) -> Option<u64> {
        self.counter.as_ref().map(SequenceCounter::peek)
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<PskEvent> {
        self.ep.poll_event()
    }

    /// Copies the next datagram to send into `buf` and returns its length.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.ep.poll_transmit(buf)
    }

    /// When [`PskNode::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ep.poll_timeout()
    }

    /// Advances timers: retransmissions, registration, its refresh, deferred readings.
    pub fn handle_timeout<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
    ) -> Result<(), DeviceError> {
        let lifetime = self.config.lifetime;
        let retransmissions = &mut self.stats.retransmissions;
        match self.ep.handle_timeout(now, retransmissions, lifetime) {
            Some(Due::Registration) => self.start_registration(now),
            Some(Due::Update) => self.ep.start_update(&self.crypto, now, |_| Ok(())),
            Some(Due::Republication) => self.send_reading(now, storage, true).map(drop),
            None => Ok(()),
        }
    }

    /// `POST /rd?ep=<identity>&lt=<secs>` with `</href>;rt="..";ct=..`.
    fn start_registration(&mut self, now: Instant) -> Result<(), DeviceError> {
        let name = self.identity.hex();
        let lifetime = self.config.lifetime_secs();
        let resource = self.config.resource;
        let ct = self.config.mode.content_format();
        let crypto = &self.crypto;
        let register = Exchange::Register(());
        self.ep
            .begin(crypto, now, register, true, |buf, mid, token| {
                let b = registration(buf, mid, token, &name, lifetime)?;
                let mut payload = [0u8; 160];
                let pn = fmt_into(
                    &mut payload,
                    format_args!("</{}>;rt=\"{}\";ct={}", resource.href, resource.rt, ct),
                )?;
                b.finish_with_payload(&payload[..pn])
                    .map_err(|_| DeviceError::TooLarge)
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
        self.ep.check_publish()?;
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
        self.ep.check_publish()?;
        let timestamp = timestamp.and_then(|t| u64::try_from(t.as_secs()).ok());
        self.ep.keep_reading(senml_cbor, timestamp)?;
        self.send_reading(now, storage, false)
    }

    /// MACs the pending SenML pack into `out` under `seq`. Not inlined, so the COSE buffers
    /// are not part of the caller's frame.
    #[inline(never)]
    fn mac_reading(&self, seq: u64, out: &mut [u8]) -> Result<usize, DeviceError> {
        let key = self.key.as_ref().ok_or(DeviceError::Config)?;
        let (senml, timestamp) = self.ep.last_reading();
        let fresh = Freshness {
            seq,
            lsb_bits: None,
            timestamp,
        };
        mac::mac_reading(&self.crypto, key, &self.identity, &fresh, senml, out)
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
                let senml = self.ep.last_reading().0;
                body[..senml.len()].copy_from_slice(senml);
                (None, senml.len())
            }
        };
        let put = Put {
            href: self.config.resource.href,
            content_format: self.config.mode.content_format(),
            confirm_every: self.config.confirm_every,
            require_signed: false,
        };
        self.ep
            .send_reading(&self.crypto, now, seq, confirm, put, &body[..bn])?;
        Ok(seq)
    }

    /// Feeds one received datagram. Malformed or unexpected input is counted and ignored.
    pub fn handle_datagram<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        datagram: &[u8],
    ) -> Result<(), DeviceError> {
        let lifetime = self.config.lifetime;
        let stats = &mut self.stats;
        match self.ep.receive(now, datagram, stats, true, lifetime) {
            Some((msg, id)) => self.on_response(now, storage, &msg, id),
            None => Ok(()),
        }
    }

    fn on_response<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        msg: &Message<'_>,
        id: RequestId,
    ) -> Result<(), DeviceError> {
        let Some(exchange) = self.ep.requests.get(id).map(|o| o.exchange()) else {
            return Ok(());
        };
        let lifetime = self.config.lifetime;
        match exchange {
            Exchange::Register(()) if msg.code == Code::CREATED => {
                // Without a location (or one too long to keep) there is no topic to publish to.
                let Some(location) = Location::of(msg).filter(|l| !l.is_empty()) else {
                    self.ep
                        .failed_with(now, id, Code::INTERNAL_SERVER_ERROR, lifetime);
                    return Ok(());
                };
                self.ep.requests.remove(id);
                self.ep.registered(now, location, lifetime);
                // A deferred reading goes again at its time, not before.
                if self.ep.republication_due(now) && self.ep.take_republication() {
                    self.send_reading(now, storage, true)?;
                }
                Ok(())
            }
            _ => {
                // An update's 2.04, a reading's acknowledgement or 5.xx, or a failure.
                self.ep.on_answer(now, msg, id, exchange, lifetime);
                Ok(())
            }
        }
    }
}
