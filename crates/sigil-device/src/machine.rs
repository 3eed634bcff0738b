//! The device state machine. See the crate documentation for the protocol it speaks.

use crate::exchange::{Incoming, Queue};
use crate::pairing::{PairingRefusal, PairingStorage};
use crate::storage::{DeviceStorage, Reservation};
use base64::Engine;
use core::fmt::{self, Write};
use core::time::Duration;
use sigil_coap::message::option;
use sigil_coap::{
    BlockOption, Code, ContentFormat, Message, MessageBuilder, MessageType, TransmissionParameters,
};
use sigil_crypto::{CryptoProvider, PublicKey, Rng, SecretKey, Signature, SignatureAlgorithm};
use sigil_freshness::{SequenceCounter, SequenceError};
use sigil_identity::{Identity, KeyAnnouncement};
use sigil_objects::answer::{self, Answer, AnswerError, RequestDigest};
use sigil_objects::json::SliceWriter;
use sigil_objects::resync::{self, OperationKind};
use sigil_objects::senml::{self, Record};
use sigil_objects::{reading, Freshness, ReadingFormat};
use sigil_time::{Instant, UnixTime};

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
const EMPTY_QUEUE: usize = 4;
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
    /// Full registration; `block` is the Block1 number in flight.
    Register {
        block: u32,
    },
    /// Registration update (refresh lifetime).
    Update,
    Publish {
        seq: u64,
    },
}

type Outstanding = crate::exchange::Outstanding<Exchange>;

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
    /// Pairing messages refused, for any reason ([`PairingRefusal`]).
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
    outstanding: Option<Outstanding>,
    empties: Queue<[u8; 4], EMPTY_QUEUE>,
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
    /// Message IDs of recent Confirmable responses, re-acknowledged if they come again (§4.5).
    recent_con: [Option<u16>; 4],
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
            outstanding: None,
            empties: Queue::new(),
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
            recent_con: [None; 4],
            pairing: None,
            server_key: None,
            stats: DeviceStats::default(),
        })
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The pairing this device applied or restored, if any (RFC 8387 §4.1).
    pub fn pairing(&self) -> Option<&sigil_ace::Pairing> {
        self.pairing.as_ref()
    }

    /// Reads the pairing kept in `storage` (after [`Device::boot`]), so [`Device::pairing`]
    /// answers from the first moment.
    pub fn restore_pairing<S: PairingStorage>(
        &mut self,
        storage: &mut S,
    ) -> Result<Option<sigil_ace::Pairing>, DeviceError> {
        self.pairing = storage.load_pairing().map_err(|_| DeviceError::Storage)?;
        Ok(self.pairing)
    }

    /// Applies a pairing message (RFC 8387 §4.1) exactly once: it must be for this device,
    /// decrypt under its key, and be signed by the server it names; if `configured_server`
    /// is given (the identity fed at installation), by that server. A device already paired
    /// refuses every pairing message, its own as a replay. The pairing is one storage
    /// write; until it returns, nothing was applied.
    pub fn apply_pairing<S: PairingStorage>(
        &mut self,
        storage: &mut S,
        message: &[u8],
        configured_server: Option<&Identity>,
    ) -> Result<sigil_ace::Pairing, PairingRefusal> {
        let result = self.try_pairing(storage, message, configured_server);
        if result.is_err() {
            self.stats.pairings_refused = self.stats.pairings_refused.saturating_add(1);
        }
        result
    }

    fn try_pairing<S: PairingStorage>(
        &mut self,
        storage: &mut S,
        message: &[u8],
        configured_server: Option<&Identity>,
    ) -> Result<sigil_ace::Pairing, PairingRefusal> {
        let stored = storage
            .load_pairing()
            .map_err(|_| PairingRefusal::Storage)?;
        let trusted = stored.as_ref().map(|p| &p.server).or(configured_server);
        let pairing =
            sigil_ace::open_pairing(message, &self.key, &self.identity, trusted, &self.crypto)
                .map_err(PairingRefusal::Invalid)?;
        if let Some(stored) = stored {
            self.pairing = Some(stored);
            return Err(if stored.serial == pairing.serial {
                PairingRefusal::Replayed {
                    serial: pairing.serial,
                }
            } else {
                PairingRefusal::AlreadyPaired {
                    server: stored.server,
                    serial: stored.serial,
                }
            });
        }
        storage
            .store_pairing(&pairing)
            .map_err(|_| PairingRefusal::Storage)?;
        self.pairing = Some(pairing);
        Ok(pairing)
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
            && self.outstanding.as_ref().is_none_or(|o| !o.confirmable)
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
        crate::exchange::transmit(&mut self.empties, &mut self.outstanding, buf)
    }

    /// When [`Device::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let exchange = self.outstanding.as_ref().map(Outstanding::wake_at);
        let state = match (self.state, &self.outstanding) {
            (_, Some(_)) => None,
            (State::Unregistered { retry_at }, None) => Some(retry_at),
            // A deferred reading goes out again at its time, not at the next refresh.
            (State::Registered { refresh_at }, None) if self.republish => {
                Some(refresh_at.min(self.republish_at))
            }
            (State::Registered { refresh_at }, None) => Some(refresh_at),
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
        if crate::exchange::on_timer(&mut self.outstanding, now, &mut self.stats.retransmissions) {
            self.exchange_failed(now, None);
        }
        if self.outstanding.is_none() {
            match self.state {
                State::Unregistered { retry_at } if now >= retry_at => {
                    self.start_registration(now, storage, 0)?
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
        self.outstanding = Some(Outstanding::start(
            now,
            exchange,
            confirmable,
            mid,
            token,
            &self.config.transmission,
            build,
        )?);
        Ok(())
    }

    /// Writes the registration payload (RFC 6690 link format, §7 step 1) into `out`.
    fn registration_payload(&self, out: &mut [u8]) -> Result<usize, DeviceError> {
        let mut w = SliceWriter::new(out);
        let r: fmt::Result = (|| {
            write!(
                w,
                "</{}>;rt=\"{}\";ct={}",
                self.config.resource.href,
                self.config.resource.rt,
                self.config.format.content_format()
            )?;
            // The key announcement (docs/wire-formats.md); `other` is at most MAX_OTHER_INFO.
            KeyAnnouncement::new(self.public, &self.other[..self.other_len])
                .ok_or(fmt::Error)?
                .emit(&mut w, self.group.iter().flatten())?;
            Ok(())
        })();
        r.map_err(|_| DeviceError::TooLarge)?;
        Ok(w.len())
    }

    fn start_registration<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        block: u32,
    ) -> Result<(), DeviceError> {
        // The announced number is consumed, so every later reading is above it (§8.2).
        let seq = if block == 0 {
            self.counter.next(&mut Reservation(storage))?
        } else {
            self.counter.peek().saturating_sub(1)
        };
        // Hashing the payload, signing and building the message are sibling calls, so the
        // signature's stack and the registration buffers are never live at once
        // (docs/device-costs.md: stack depth).
        let digest = self.registration_digest()?;
        let sig = self.sign_statement(seq, &digest)?;
        self.send_registration(now, block, seq, sig)
    }

    /// The operation digest of the registration this device sends (`sigil_objects::resync`).
    #[inline(never)]
    fn registration_digest(&self) -> Result<[u8; 32], DeviceError> {
        let mut payload = [0u8; MAX_REG_PAYLOAD];
        let plen = self.registration_payload(&mut payload)?;
        resync::Operation {
            kind: OperationKind::Register,
            lifetime: Some(self.config.lifetime_secs()),
            base: None,
            payload: &payload[..plen],
        }
        .digest(&self.crypto)
        .ok_or(DeviceError::Encoding)
    }

    /// Signs the registration statement for `seq` and the operation `digest`.
    #[inline(never)]
    fn sign_statement(&self, seq: u64, digest: &[u8; 32]) -> Result<Signature, DeviceError> {
        self.crypto
            .sign(&self.key, &resync::statement(&self.identity, seq, digest))
            .map_err(|_| DeviceError::Encoding)
    }

    #[inline(never)]
    fn send_registration(
        &mut self,
        now: Instant,
        block: u32,
        seq: u64,
        sig: Signature,
    ) -> Result<(), DeviceError> {
        let mut payload = [0u8; MAX_REG_PAYLOAD];
        let plen = self.registration_payload(&mut payload)?;
        let id_hex = self.identity.hex();
        let lifetime = self.config.lifetime_secs();
        let szx = self.config.block_szx.min(6);
        let bsize = 1usize << (szx + 4);
        let format_ct = ContentFormat::LINK_FORMAT.0;
        let signed = self.config.require_signed_answers;
        self.begin(
            now,
            Exchange::Register { block },
            true,
            |buf, mid, token| {
                let mut q = [0u8; 128];
                let mut b =
                    MessageBuilder::new(buf, MessageType::Confirmable, Code::POST, mid, token)
                        .map_err(|_| DeviceError::TooLarge)?;
                b.option(option::URI_PATH, b"rd")
                    .map_err(|_| DeviceError::TooLarge)?;
                b.uint_option(option::CONTENT_FORMAT, u32::from(format_ct))
                    .map_err(|_| DeviceError::TooLarge)?;
                let mut ep = [0u8; 35];
                ep[..3].copy_from_slice(b"ep=");
                ep[3..].copy_from_slice(&id_hex);
                b.option(option::URI_QUERY, &ep)
                    .map_err(|_| DeviceError::TooLarge)?;
                let n = fmt_into(&mut q, format_args!("lt={lifetime}"))?;
                b.option(option::URI_QUERY, &q[..n])
                    .map_err(|_| DeviceError::TooLarge)?;
                statement_options(&mut b, seq, &sig)?;
                if plen > bsize {
                    let blk = BlockOption::new(block, (block as usize + 1) * bsize < plen, szx);
                    let (v, vn) = blk.encode().map_err(|_| DeviceError::TooLarge)?;
                    b.option(option::BLOCK1, &v[..vn])
                        .map_err(|_| DeviceError::TooLarge)?;
                    b.uint_option(option::SIZE1, plen as u32)
                        .map_err(|_| DeviceError::TooLarge)?;
                    require_option(&mut b, signed)?;
                    let (part, _) = blk.slice(&payload[..plen]).ok_or(DeviceError::TooLarge)?;
                    b.finish_with_payload(part)
                        .map_err(|_| DeviceError::TooLarge)
                } else {
                    require_option(&mut b, signed)?;
                    b.finish_with_payload(&payload[..plen])
                        .map_err(|_| DeviceError::TooLarge)
                }
            },
        )
    }

    /// `POST /rd/N?sq=…&ss=…`: the refresh carries a statement of its own (a fresh number,
    /// bound to the update), since only the registration's owner may change it.
    fn start_update<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
    ) -> Result<(), DeviceError> {
        let seq = self.counter.next(&mut Reservation(storage))?;
        let digest = resync::Operation {
            kind: OperationKind::Update,
            lifetime: None,
            base: None,
            payload: &[],
        }
        .digest(&self.crypto)
        .ok_or(DeviceError::Encoding)?;
        let sig = self.sign_statement(seq, &digest)?;
        let mut loc = [0u8; MAX_LOCATION];
        let ll = self.location_len;
        loc[..ll].copy_from_slice(&self.location[..ll]);
        let signed = self.config.require_signed_answers;
        self.begin(now, Exchange::Update, true, |buf, mid, token| {
            let mut b = MessageBuilder::new(buf, MessageType::Confirmable, Code::POST, mid, token)
                .map_err(|_| DeviceError::TooLarge)?;
            for seg in loc[..ll].split(|c| *c == b'/') {
                b.option(option::URI_PATH, seg)
                    .map_err(|_| DeviceError::TooLarge)?;
            }
            statement_options(&mut b, seq, &sig)?;
            require_option(&mut b, signed)?;
            Ok(b.finish())
        })
    }

    /// Signs `records` as one reading and queues it for the broker. `timestamp` goes into the
    /// signed header when the device trusts its clock (a time before 1970 is left out).
    /// Returns the sequence number.
    pub fn publish<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        records: &[Record<'_>],
        timestamp: Option<UnixTime>,
    ) -> Result<u64, DeviceError> {
        let timestamp = timestamp.and_then(|t| u64::try_from(t.as_secs()).ok());
        if !self.is_registered() {
            return Err(DeviceError::NotRegistered);
        }
        if !self.can_publish() {
            return Err(DeviceError::Busy);
        }
        let mut senml_buf = [0u8; MAX_SENML];
        let n = match self.config.format {
            ReadingFormat::Cose => senml::encode_cbor(records, &mut senml_buf),
            #[cfg(feature = "jws")]
            ReadingFormat::Jws => senml::encode_json(records, &mut senml_buf),
            // SenML-JSON needs float formatting (about 10 kB of flash on Cortex-M).
            #[cfg(not(feature = "jws"))]
            ReadingFormat::Jws => return Err(DeviceError::Config),
        }
        .map_err(|_| DeviceError::TooLarge)?;
        self.last_senml[..n].copy_from_slice(&senml_buf[..n]);
        self.last_senml_len = n;
        self.last_timestamp = timestamp;
        self.republish = false;
        self.send_reading(now, storage, false)
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

    /// Signs the pending SenML pack into `out`. Not inlined, so its scratch buffer is not
    /// part of the caller's frame.
    #[inline(never)]
    fn sign_reading(&self, fresh: &Freshness, out: &mut [u8]) -> Result<usize, DeviceError> {
        let mut scratch = [0u8; MAX_SENML + 128];
        reading::sign_reading(
            &self.crypto,
            &self.key,
            &self.identity,
            self.config.format,
            fresh,
            &self.last_senml[..self.last_senml_len],
            &mut scratch,
            out,
        )
        .map_err(|_| DeviceError::Encoding)
    }

    fn send_reading<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        confirm: bool,
    ) -> Result<u64, DeviceError> {
        let seq = self.counter.next(&mut Reservation(storage))?;
        let fresh = Freshness {
            seq,
            lsb_bits: self.config.lsb_bits,
            timestamp: self.last_timestamp,
        };
        let mut reading = [0u8; MAX_DATAGRAM];
        let sn = self.sign_reading(&fresh, &mut reading)?;
        self.publishes = self.publishes.wrapping_add(1);
        let confirmable = confirm
            || (self.config.confirm_every != 0 && self.publishes % self.config.confirm_every == 0);
        let mut loc = [0u8; MAX_LOCATION];
        let ll = self.location_len;
        loc[..ll].copy_from_slice(&self.location[..ll]);
        let href = self.config.resource.href;
        let cf = self.config.format.content_format();
        let signed = self.config.require_signed_answers;
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
                if let Some(n) = loc[..ll].split(|c| *c == b'/').nth(1) {
                    b.option(option::URI_PATH, n)
                        .map_err(|_| DeviceError::TooLarge)?;
                }
                b.option(option::URI_PATH, href.as_bytes())
                    .map_err(|_| DeviceError::TooLarge)?;
                b.uint_option(option::CONTENT_FORMAT, u32::from(cf))
                    .map_err(|_| DeviceError::TooLarge)?;
                require_option(&mut b, signed)?;
                b.finish_with_payload(&reading[..sn])
                    .map_err(|_| DeviceError::TooLarge)
            },
        )?;
        if !confirmable {
            self.push_event(Event::Published {
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

    fn exchange_failed(&mut self, now: Instant, code: Option<Code>) {
        let Some(o) = self.outstanding.take() else {
            return;
        };
        match o.exchange {
            Exchange::Publish { seq } => match code {
                Some(c) if c == Code::NOT_FOUND || c == Code::UNSUPPORTED_CONTENT_FORMAT => {
                    // The broker no longer holds the registration this reading was made for
                    // (expired, or its links changed): register again in full, then publish
                    // the same reading again. Immediately the first time; if it is refused
                    // again after a fresh registration, back off as registration does.
                    self.push_event(Event::Published {
                        seq,
                        outcome: PublishOutcome::Republishing(c),
                    });
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
                _ => {
                    let outcome = code.map_or(PublishOutcome::TimedOut, PublishOutcome::Rejected);
                    self.push_event(Event::Published { seq, outcome });
                }
            },
            Exchange::Register { .. } | Exchange::Update => {
                if let Some(code) = code {
                    self.push_event(Event::RegistrationFailed { code });
                }
                if o.exchange == Exchange::Update && code == Some(Code::NOT_FOUND) {
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
        match crate::exchange::receive(
            &msg,
            now,
            &mut self.outstanding,
            &mut self.recent_con,
            &mut self.empties,
            &self.config.transmission,
            &mut self.stats.unexpected,
        ) {
            Incoming::Handled => Ok(()),
            Incoming::Reset => {
                if self.config.require_signed_answers {
                    // Anyone can send a Reset: only a signed answer resynchronises.
                    self.stats.resets_refused = self.stats.resets_refused.saturating_add(1);
                    return Ok(());
                }
                self.on_reset(now)
            }
            Incoming::Response => self.on_response(now, storage, &msg),
        }
    }

    fn on_reset(&mut self, now: Instant) -> Result<(), DeviceError> {
        let Some(o) = self.outstanding.take() else {
            return Ok(());
        };
        match o.exchange {
            Exchange::Publish { seq } => self.resynchronise(now, seq),
            _ => {
                self.outstanding = Some(o);
                self.exchange_failed(now, None);
            }
        }
        Ok(())
    }

    /// §8.2: the broker finds our number out of window. Re-register with the current number,
    /// then publish the same reading again under a new number.
    fn resynchronise(&mut self, now: Instant, seq: u64) {
        self.push_event(Event::Published {
            seq,
            outcome: PublishOutcome::Reset,
        });
        self.push_event(Event::Resynchronising);
        self.republish = true;
        self.republish_at = now;
        self.state = State::Unregistered { retry_at: now };
    }

    /// Checks the signature of `msg`, an answer to `o`, under the trusted server key.
    #[inline(never)]
    fn check_answer(&self, o: &Outstanding, msg: &Message<'_>) -> Result<(), AnswerError> {
        let key = self.answer_key().ok_or(AnswerError::BadSignature)?;
        let sent = Message::parse(&o.buf[..o.len]).map_err(|_| AnswerError::BadSignature)?;
        let options = sent.options().map(|x| (x.number, x.value));
        let request = if sent.block1().is_some() {
            // The answer to the last block binds the whole body.
            let mut payload = [0u8; MAX_REG_PAYLOAD];
            let n = self
                .registration_payload(&mut payload)
                .map_err(|_| AnswerError::TooLong)?;
            RequestDigest::of(&self.crypto, sent.code.0, options, &payload[..n])
        } else {
            RequestDigest::of(&self.crypto, sent.code.0, options, sent.payload)
        };
        Answer {
            device: &self.identity,
            token: &o.token,
            code: msg.code.0,
            request: &request,
        }
        .verify(
            &self.crypto,
            &key,
            msg.options().map(|x| (x.number, x.value)),
        )
    }

    fn on_response<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        msg: &Message<'_>,
    ) -> Result<(), DeviceError> {
        let Some(o) = self.outstanding.as_ref() else {
            return Ok(());
        };
        if o.token != msg.token {
            self.stats.unexpected += 1;
            return Ok(());
        }
        let exchange = o.exchange;
        if self.config.require_signed_answers && needs_signature(exchange, msg.code) {
            match self.check_answer(o, msg) {
                Ok(()) => {}
                Err(AnswerError::Unsigned) => {
                    self.stats.unsigned_answers = self.stats.unsigned_answers.saturating_add(1);
                    return Ok(());
                }
                Err(_) => {
                    self.stats.bad_answer_signatures =
                        self.stats.bad_answer_signatures.saturating_add(1);
                    return Ok(());
                }
            }
        }
        match exchange {
            Exchange::Register { block } if msg.code == Code::CONTINUE => {
                // 2.31 is only valid for a block we sent with the "more" flag (RFC 7959 §2.3).
                let sent_more = self.outstanding.as_ref().is_some_and(|o| {
                    Message::parse(&o.buf[..o.len])
                        .ok()
                        .and_then(|m| m.block1())
                        .is_some_and(|b| b.is_ok_and(|b| b.more && b.num == block))
                });
                if !sent_more {
                    self.stats.unexpected += 1;
                    self.exchange_failed_with(now, msg.code);
                    return Ok(());
                }
                self.outstanding = None;
                self.start_registration(now, storage, block + 1)
            }
            Exchange::Register { .. } if msg.code == Code::CREATED => {
                self.outstanding = None;
                let mut loc = [0u8; MAX_LOCATION];
                let mut n = 0;
                for seg in msg.option_values(option::LOCATION_PATH) {
                    let need = seg.len() + usize::from(n > 0);
                    if n + need > MAX_LOCATION {
                        self.exchange_failed_with(now, Code::INTERNAL_SERVER_ERROR);
                        return Ok(());
                    }
                    if n > 0 {
                        loc[n] = b'/';
                        n += 1;
                    }
                    loc[n..n + seg.len()].copy_from_slice(seg);
                    n += seg.len();
                }
                self.location = loc;
                self.location_len = n;
                self.reg_failures = 0;
                self.state = State::Registered {
                    refresh_at: now + self.config.lifetime / 5 * 4,
                };
                self.push_event(Event::Registered);
                if self.republish {
                    self.publish_again(now, storage)?;
                }
                Ok(())
            }
            Exchange::Update if msg.code == Code::CHANGED => {
                self.outstanding = None;
                self.state = State::Registered {
                    refresh_at: now + self.config.lifetime / 5 * 4,
                };
                self.push_event(Event::RegistrationRefreshed);
                Ok(())
            }
            Exchange::Publish { seq } if msg.code == Code::CHANGED || msg.code == Code::CREATED => {
                self.outstanding = None;
                self.refusals = 0;
                self.server_errors = 0;
                self.push_event(Event::Published {
                    seq,
                    outcome: PublishOutcome::Acknowledged,
                });
                Ok(())
            }
            Exchange::Publish { seq }
                if self.config.require_signed_answers && msg.code.0 == answer::RESYNC_CODE =>
            {
                // The signed form of the §8.2 Reset (checked above).
                self.outstanding = None;
                self.resynchronise(now, seq);
                Ok(())
            }
            Exchange::Publish { seq } if msg.code.class() == 5 => {
                // The broker stored nothing (a failed batch commits nothing): keep the
                // reading and send it again later, still registered.
                self.outstanding = None;
                let secs = crate::exchange::retry_delay(msg, &mut self.server_errors);
                self.push_event(Event::Published {
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
                self.exchange_failed_with(now, msg.code);
                Ok(())
            }
        }
    }

    fn exchange_failed_with(&mut self, now: Instant, code: Code) {
        self.exchange_failed(now, Some(code));
    }
}

/// Adds `sq=<seq>` and `ss=<base64url signature>` (the registration statement).
fn statement_options(
    b: &mut MessageBuilder<'_>,
    seq: u64,
    sig: &Signature,
) -> Result<(), DeviceError> {
    let mut q = [0u8; 128];
    let n = fmt_into(&mut q, format_args!("sq={seq}"))?;
    b.option(option::URI_QUERY, &q[..n])
        .map_err(|_| DeviceError::TooLarge)?;
    q[..3].copy_from_slice(b"ss=");
    let sn = B64
        .encode_slice(sig.0, &mut q[3..])
        .map_err(|_| DeviceError::TooLarge)?;
    b.option(option::URI_QUERY, &q[..3 + sn])
        .map_err(|_| DeviceError::TooLarge)?;
    Ok(())
}

/// Adds the "signed answers required" option (`sigil_objects::answer`) when `on`.
fn require_option(b: &mut MessageBuilder<'_>, on: bool) -> Result<(), DeviceError> {
    if on {
        b.option(answer::REQUIRE_OPTION, &[])
            .map_err(|_| DeviceError::TooLarge)?;
    }
    Ok(())
}

/// Whether the answer `code` to `exchange` must be signed before the device acts on it, when
/// signed answers are required: all but a publication's acknowledgement (which changes
/// nothing) and 2.31 Continue (the final block's answer binds the whole body).
fn needs_signature(exchange: Exchange, code: Code) -> bool {
    !matches!(
        (exchange, code),
        (Exchange::Publish { .. }, Code::CHANGED | Code::CREATED)
            | (Exchange::Register { .. }, Code::CONTINUE)
    )
}

pub(crate) fn fmt_into(buf: &mut [u8], args: fmt::Arguments<'_>) -> Result<usize, DeviceError> {
    let mut c = SliceWriter::new(buf);
    c.write_fmt(args).map_err(|_| DeviceError::TooLarge)?;
    Ok(c.len())
}

impl core::error::Error for DeviceError {}
