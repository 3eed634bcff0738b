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

use crate::exchange::{Queue, Requests};
use crate::storage::{DeviceStorage, Reservation};
use core::fmt::{self, Write};
use core::time::Duration;
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
const MAX_LOCATION: usize = 24;
const MAX_SENML: usize = 256;
const EVENT_QUEUE: usize = 8;
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
        u32::try_from(self.lifetime.as_secs())
            .unwrap_or(u32::MAX)
            .max(1)
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exchange {
    /// Full registration; `upload` is where its Block1 transfer is.
    Register {
        upload: sigil_coap::blockwise::Sender,
    },
    /// Registration update (refresh lifetime).
    Update,
    Publish {
        seq: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Unregistered { retry_at: Instant },
    Registered { refresh_at: Instant },
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
    state: State,
    location: [u8; MAX_LOCATION],
    location_len: usize,
    requests: Requests<Exchange>,
    events: Queue<Event, EVENT_QUEUE>,
    next_mid: u16,
    token_seed: [u8; 16],
    token_counter: u32,
    publishes: u32,
    reg_failures: u32,
    /// The last reading's SenML and timestamp, kept to publish it again after a resync.
    last_senml: [u8; MAX_SENML],
    last_senml_len: usize,
    last_timestamp: Option<u64>,
    republish: bool,
    /// When the pending republication may go (5.03 with Max-Age: not before then).
    republish_at: Instant,
    /// Publications refused with 4.04 or 4.15 since the last acknowledged one: after the
    /// first, the re-registration backs off as a failed registration does.
    refusals: u32,
    /// Server errors (5.xx other than 5.03) in a row for readings, for their back-off.
    server_errors: u32,
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
        let mut seed = [0u8; 18];
        rng.fill(&mut seed).map_err(|_| DeviceError::Encoding)?;
        let mut token_seed = [0u8; 16];
        token_seed.copy_from_slice(&seed[..16]);
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
        matches!(self.state, State::Registered { .. })
    }

    /// True when a new reading can be published now.
    pub fn can_publish(&self) -> bool {
        // Not while a refused reading waits to be published again: it would be overwritten.
        self.is_registered()
            && !self.republish
            && self.requests.iter().all(|(_, o)| !o.is_confirmable())
    }

    /// Whether a refused reading waits to be published again (after 5.03 with Max-Age, or a
    /// re-registration).
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

    /// The number the next signed message will carry.
    pub fn next_sequence(&self) -> u64 {
        self.counter.peek()
    }

    fn next_token(&mut self) -> ([u8; 4], u32) {
        self.token_counter = self.token_counter.wrapping_add(1);
        crate::exchange::token(&self.crypto, &self.token_seed, self.token_counter)
    }

    fn next_mid(&mut self) -> u16 {
        self.next_mid = self.next_mid.wrapping_add(1);
        self.next_mid
    }

    fn push_event(&mut self, e: Event) {
        self.events.push_newest(e);
    }

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop()
    }

    /// Copies the next datagram to send into `buf` and returns its length.
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.requests.poll_transmit(buf)
    }

    /// When [`Device::handle_timeout`] must be called next.
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

    /// Advances timers: retransmissions, registration and its refresh.
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
                    self.start_registration(now, storage, None)?
                }
                State::Registered { refresh_at } if now >= refresh_at => {
                    self.start_update(now, storage)?
                }
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
}

pub(crate) fn fmt_into(buf: &mut [u8], args: fmt::Arguments<'_>) -> Result<usize, DeviceError> {
    let mut c = SliceWriter::new(buf);
    c.write_fmt(args).map_err(|_| DeviceError::TooLarge)?;
    Ok(c.len())
}

impl core::error::Error for DeviceError {}
