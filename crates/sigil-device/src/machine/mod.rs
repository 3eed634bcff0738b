//! The device state machine. See the crate documentation for the protocol it speaks.
//!
//! Here: the configuration, events and errors, the device's state, booting, and the
//! caller's side (`poll_*`, `handle_timeout`). Beside it: [`pair`] (applying a pairing
//! message), [`register`] (the registration and its refresh), [`publish`] (signed readings)
//! and [`answers`] (what comes back, and what a failed exchange leads to).

mod answers;
mod pair;
mod publish;
mod register;

use crate::exchange::{self, Due, Endpoint, Kind};
use crate::storage::{DeviceStorage, Reservation};
use core::fmt::{self, Write};
use core::time::Duration;
use sigil_coap::blockwise::Sender;
use sigil_coap::{Code, TransmissionParameters};
use sigil_crypto::{CryptoProvider, PublicKey, Rng, SecretKey, SignatureAlgorithm};
use sigil_freshness::{SequenceCounter, SequenceError};
use sigil_identity::Identity;
use sigil_objects::json::SliceWriter;
use sigil_objects::ReadingFormat;
use sigil_time::Instant;

/// Largest datagram the device sends or accepts.
pub const MAX_DATAGRAM: usize = 512;
/// Most other kit members a device can list (§4.1).
pub const MAX_GROUP_KEYS: usize = 16;
/// Longest "other information" O in I = h(P|O).
pub const MAX_OTHER_INFO: usize = 32;
// Whatever the device accepts, its key announcement can carry.
const _: () = assert!(MAX_OTHER_INFO <= sigil_identity::announce::MAX_OTHER_INFO);
const MAX_REG_PAYLOAD: usize = 2048;
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The resource a sensor registers and publishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resource {
    /// Path segment under the registration, e.g. `m`.
    pub href: &'static str,
    /// Resource type (`rt`), e.g. `sigil.env`.
    pub rt: &'static str,
}

/// How the device behaves. All of it is the integrator's choice.
#[derive(Clone, Copy, Debug)]
pub struct DeviceConfig {
    /// Algorithm for a key generated at first boot (an existing key keeps its own).
    pub algorithm: SignatureAlgorithm,
    pub format: ReadingFormat,
    /// Registration lifetime `lt` (RFC 9176 §5), sent in whole seconds (1 s to 2^32-1 s).
    pub lifetime: Duration,
    /// Send only this many low bits of the sequence number (COSE only).
    pub lsb_bits: Option<u8>,
    /// Publish every n-th reading as Confirmable (1: all; 0: none). Readings in between are
    /// Non-confirmable; §8.2 asks for some Confirmable ones so a lost sync is noticed.
    pub confirm_every: u32,
    pub transmission: TransmissionParameters,
    /// Sequence numbers reserved per storage write.
    pub sequence_block: u64,
    /// Block1 size exponent for registrations longer than one block (RFC 7959).
    pub block_szx: u8,
    pub resource: Resource,
    /// On plain coap:// (no DTLS session authenticating the server), ask for signed answers
    /// (`sigil_objects::answer`) and act on a registration's 2.01, an update's 2.04 and a
    /// publication's resynchronisation only if they are signed by the trusted server's key
    /// (the pairing's, or [`Device::trust_server_key`]). Anything else (an unsigned or badly
    /// signed answer, a bare Reset) is counted in [`DeviceStats`] and treated as no answer:
    /// the retransmissions go on and the exchange fails as one that got no answer. A
    /// publication's 2.04 is taken unsigned (it changes nothing). Off by default.
    pub require_signed_answers: bool,
}

impl DeviceConfig {
    /// The lifetime as RFC 9176's `lt`: whole seconds, at least 1, at most 2^32-1.
    pub fn lifetime_secs(&self) -> u32 {
        exchange::lifetime_secs(self.lifetime)
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            algorithm: SignatureAlgorithm::Ed25519,
            format: ReadingFormat::Cose,
            lifetime: Duration::from_secs(300),
            lsb_bits: None,
            confirm_every: 1,
            transmission: TransmissionParameters::default(),
            sequence_block: 64,
            block_szx: 4,
            resource: Resource {
                href: "m",
                rt: "sigil.env",
            },
            require_signed_answers: false,
        }
    }
}

/// What happened, for the caller to log or count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Registered (or re-registered) with the Resource Directory.
    Registered,
    /// The registration lifetime was refreshed.
    RegistrationRefreshed,
    /// The Resource Directory refused the registration (retried later).
    RegistrationFailed { code: Code },
    /// A reading's fate.
    Published { seq: u64, outcome: PublishOutcome },
    /// The broker answered with Reset: re-registering with the current sequence number.
    Resynchronising,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublishOutcome {
    /// A Confirmable reading was answered 2.04: the broker stored it.
    Acknowledged,
    /// A Non-confirmable reading left the device.
    Sent,
    /// The broker refused it with this code.
    Rejected(Code),
    /// The broker answered Reset; the reading is published again under a new number.
    Reset,
    /// The broker refused it with 4.04 (it no longer knows the topic) or 4.15 (the topic is
    /// registered with another format): the device registers again in full and publishes the
    /// same reading again, under a new number (the registration's own number moves the
    /// broker's high-water mark past this one, RFC 8387 §8.2; a refused reading was not
    /// stored, so it is not stored twice).
    Republishing(Code),
    /// The broker could not store it for now (`code` is 5.03, e.g. its disk is full, or
    /// another server error such as 5.00, e.g. its database was busy): the device keeps the
    /// reading and publishes it again, under a new number, still registered: after a 5.03
    /// once the answer's Max-Age has passed (RFC 7252 §5.9.3.4; 60 s without one, at most an
    /// hour), after any other 5.xx with a back-off of 1 s doubling to 64 s
    /// (`exchange::retry_delay`).
    Deferred { code: Code, retry_after_secs: u32 },
    /// No answer after MAX_RETRANSMIT retransmissions.
    TimedOut,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// The device holds no registration yet.
    NotRegistered,
    /// A Confirmable exchange is in flight (NSTART = 1, RFC 7252 §4.7).
    Busy,
    /// Persistent storage failed; nothing was sent.
    Storage,
    /// Sequence numbers exhausted: regenerate the identity.
    SequenceExhausted,
    /// A reading or registration does not fit the device's buffers.
    TooLarge,
    /// Encoding or signing failed.
    Encoding,
    /// Too many group keys, or too much other information.
    Config,
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotRegistered => "not registered yet",
            Self::Busy => "a confirmable exchange is in flight",
            Self::Storage => "persistent storage failed",
            Self::SequenceExhausted => "sequence numbers exhausted",
            Self::TooLarge => "message does not fit the device buffers",
            Self::Encoding => "encoding or signing failed",
            Self::Config => "invalid device configuration",
        })
    }
}

impl<E> From<SequenceError<E>> for DeviceError {
    fn from(e: SequenceError<E>) -> Self {
        match e {
            SequenceError::Storage(_) => DeviceError::Storage,
            SequenceError::Exhausted => DeviceError::SequenceExhausted,
        }
    }
}

/// A request: a registration carries where its Block1 transfer is; a reading, its number.
type Exchange = exchange::Exchange<Sender, u64>;

/// What the signing device does its own way in what it shares with the PSK node
/// ([`Endpoint`]).
enum Signing {}

impl Kind for Signing {
    type Register = Sender;
    type Seq = u64;
    type Event = Event;
    const REGISTERED: Event = Event::Registered;
    const REFRESHED: Event = Event::RegistrationRefreshed;
    const RESYNCHRONISING: Event = Event::Resynchronising;
    /// A Reset resynchronises (§8.2): registering again with the current number at once.
    const RESET_BACKS_OFF: bool = false;

    fn registration_failed(code: Code) -> Event {
        Event::RegistrationFailed { code }
    }

    fn published(seq: u64, outcome: PublishOutcome) -> Event {
        Event::Published { seq, outcome }
    }

    /// 4.04: the broker no longer holds the registration (expired); 4.15: its links changed.
    fn reregisters(code: Code) -> bool {
        code == Code::NOT_FOUND || code == Code::UNSUPPORTED_CONTENT_FORMAT
    }

    fn topic(location: &[u8]) -> Option<&[u8]> {
        location.split(|c| *c == b'/').nth(1)
    }
}

/// Counters a device keeps about its link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    pub malformed: u32,
    pub retransmissions: u32,
    pub unexpected: u32,
    /// Pairing messages refused, for any reason ([`PairingRefusal`](crate::PairingRefusal)).
    pub pairings_refused: u32,
    /// Answers that needed a signature and had none (with signed answers required).
    pub unsigned_answers: u32,
    /// Answers whose signature did not verify under the trusted server key, or with no
    /// trusted server key to check it (with signed answers required).
    pub bad_answer_signatures: u32,
    /// Resets not acted on (with signed answers required).
    pub resets_refused: u32,
}

/// The sensor. `C` is the crypto provider.
pub struct Device<C> {
    crypto: C,
    config: DeviceConfig,
    key: SecretKey,
    public: PublicKey,
    identity: Identity,
    group: [Option<PublicKey>; MAX_GROUP_KEYS],
    other: [u8; MAX_OTHER_INFO],
    other_len: usize,
    counter: SequenceCounter,
    /// Requests, events, the registration and the reading to publish again.
    ep: Endpoint<Signing>,
    /// The server, group and default subscriber this device was paired with (§4.1).
    pairing: Option<sigil_ace::Pairing>,
    /// The trusted server's key given by the integrator (else the pairing's is used).
    server_key: Option<PublicKey>,
    pub stats: DeviceStats,
}

impl<C: CryptoProvider> Device<C> {
    /// Boots the device: loads its key or, on first boot, generates and stores one (§4).
    /// `group_others` are the public keys of the other members of its kit (§4.1), if any;
    /// `other_info` is O in `I = h(P|O)` for a device outside a kit.
    pub fn boot<S: DeviceStorage>(
        crypto: C,
        config: DeviceConfig,
        storage: &mut S,
        rng: &mut dyn Rng,
        group_others: &[PublicKey],
        other_info: &[u8],
    ) -> Result<Self, DeviceError> {
        if group_others.len() > MAX_GROUP_KEYS || other_info.len() > MAX_OTHER_INFO {
            return Err(DeviceError::Config);
        }
        let key = match storage.load_key().map_err(|_| DeviceError::Storage)? {
            Some(k) => k,
            None => {
                let k = crypto
                    .generate(config.algorithm, rng)
                    .map_err(|_| DeviceError::Encoding)?;
                storage.store_key(&k).map_err(|_| DeviceError::Storage)?;
                k
            }
        };
        let public = crypto.public_key(&key).map_err(|_| DeviceError::Encoding)?;
        let identity = if group_others.is_empty() {
            Identity::of_key(&crypto, &public, other_info)
        } else {
            Identity::of_member(&crypto, &public, group_others)
        }
        .map_err(|_| DeviceError::Config)?;
        let counter = SequenceCounter::boot(&mut Reservation(storage), config.sequence_block)?;
        let mut group = [None; MAX_GROUP_KEYS];
        for (slot, k) in group.iter_mut().zip(group_others) {
            *slot = Some(*k);
        }
        let mut other = [0u8; MAX_OTHER_INFO];
        other[..other_info.len()].copy_from_slice(other_info);
        let ep = Endpoint::new(config.transmission, rng)?;
        Ok(Self {
            crypto,
            config,
            key,
            public,
            identity,
            group,
            other,
            other_len: other_info.len(),
            counter,
            ep,
            pairing: None,
            server_key: None,
            stats: DeviceStats::default(),
        })
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// Trusts `key` as the server's (RFC 8387 §4.1) for signed answers, instead of the key
    /// of the pairing (e.g. the key `trusted_ac_key` found for a provisioned identity).
    pub fn trust_server_key(&mut self, key: PublicKey) {
        self.server_key = Some(key);
    }

    /// Turns [`DeviceConfig::require_signed_answers`] on or off (e.g. once the pairing is
    /// known); it applies from the next request.
    pub fn set_require_signed_answers(&mut self, on: bool) {
        self.config.require_signed_answers = on;
    }

    /// Whether signed answers are required ([`DeviceConfig::require_signed_answers`]).
    pub fn requires_signed_answers(&self) -> bool {
        self.config.require_signed_answers
    }

    /// The key signed answers are checked with: the one given to
    /// [`Device::trust_server_key`], else the paired server's. `None`: no answer verifies.
    pub fn answer_key(&self) -> Option<PublicKey> {
        self.server_key
            .or_else(|| self.pairing.as_ref().map(|p| p.server_key))
    }

    pub fn is_registered(&self) -> bool {
        self.ep.is_registered()
    }

    /// True when a new reading can be published now.
    pub fn can_publish(&self) -> bool {
        self.ep.can_publish()
    }

    /// Whether a refused reading waits to be published again (after 5.03 with Max-Age, or a
    /// re-registration).
    pub fn has_pending_republication(&self) -> bool {
        self.ep.has_pending_republication()
    }

    /// The registration's location path (`rd/N`), once registered.
    pub fn location(&self) -> Option<&str> {
        self.ep.location()
    }

    /// The number the next signed message will carry.
    pub fn next_sequence(&self) -> u64 {
        self.counter.peek()
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.ep.poll_event()
    }

    /// Copies the next datagram to send into `buf` and returns its length.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.ep.poll_transmit(buf)
    }

    /// When [`Device::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ep.poll_timeout()
    }

    /// Advances timers: retransmissions, registration and its refresh.
    pub fn handle_timeout<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
    ) -> Result<(), DeviceError> {
        let lifetime = self.config.lifetime;
        let retransmissions = &mut self.stats.retransmissions;
        match self.ep.handle_timeout(now, retransmissions, lifetime) {
            Some(Due::Registration) => self.start_registration(now, storage, None),
            Some(Due::Update) => self.start_update(now, storage),
            Some(Due::Republication) => self.send_reading(now, storage, true).map(drop),
            None => Ok(()),
        }
    }
}

pub(crate) fn fmt_into(buf: &mut [u8], args: fmt::Arguments<'_>) -> Result<usize, DeviceError> {
    let mut c = SliceWriter::new(buf);
    c.write_fmt(args).map_err(|_| DeviceError::TooLarge)?;
    Ok(c.len())
}

impl core::error::Error for DeviceError {}
