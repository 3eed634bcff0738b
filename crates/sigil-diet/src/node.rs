//! The node: a neighbour table of fixed size and, per neighbour, the seed's three phases
//! (§5.2): handshake (signed hellos, retransmitted until the neighbour's arrives), shared key
//! (ECDH + HKDF) and secure communication (CCM-8 and ECDSA, a sequence window per direction).
//!
//! Sans-IO in the quinn-proto manner: [`Node::handle`] takes a datagram with the sender's
//! address token and the caller's clock, [`Node::poll_transmit`] gives out what to send and to
//! whom, [`Node::poll_timeout`] says when to call again. The caller owns sockets, clock and
//! table size (`N`); nothing is allocated.
//!
//! One neighbour per signing key, and nothing but a challenge goes to an address before it
//! proved it is live: every hello carries a fresh nonce (ours to that address) and echoes the
//! receiver's latest. Keys are derived, a neighbour is moved to a new address, or re-keyed
//! under a new epoch, only on a signed hello that echoes the nonce sent to the address it
//! came from; a proven hello spends the nonce, so its copy proves nothing. Any other trusted
//! hello is answered with a challenge (our hello with a fresh nonce), within a budget checked
//! before the signature is verified: one per address each `Config::initial` (at an
//! established or configured neighbour's address too), one per known key, at most
//! [`PENDING_PER_KEY`] held for a newcomer's key, and `Config::challenges_per_second` in total.
//! A challenge goes at most `Config::attempts` times and is answerable for `Config::max` after
//! it was issued. So a recorded hello replayed from any address makes no slot, resets no
//! window and draws at most one hello (no data) to that address.
//!
//! An address held by an established neighbour is never given to another key in this run
//! (refused [`Error::TableFull`]): a slot with keys is never freed, so no key's send counter
//! or receive window ever starts over under the same keys.
//!
//! Freshness across restarts: every node runs under an `epoch` the caller keeps in storage and
//! raises at each start (or each key change). Both epochs enter the key derivation, so
//! messages of an earlier run never open under the current keys, and a hello whose epoch is
//! below the one held for that key is refused ([`Error::StaleHello`]).

use crate::ops::{self, PUBLIC_KEY_LEN, SECRET_KEY_LEN};
use crate::wire::{
    self, Data, Hello, HelloBody, DATA_HEADER_LEN, DATA_OVERHEAD, FLAG_ACK, HELLO_LEN, NONCE_LEN,
};
use crate::{Counters, Error, ReplayWindow};
use core::time::Duration;
use sigil_crypto::{CryptoProvider, PublicKey, Rng, SignatureAlgorithm};
use sigil_time::Instant;

/// The label of the key derivation (HKDF `info` prefix).
pub const KDF_LABEL: &[u8] = b"sigil-diet v3";
/// The label of the nonce key: HMAC-SHA-256 under the signing secret.
pub const NONCE_LABEL: &[u8] = b"sigil-diet v3 nonce";
/// Challenges to newcomers held at once (each the size of a key and a few nonces).
pub const PENDING: usize = 8;
/// Challenges held at once for one newcomer's key, each at another address: a replayer of
/// its hello holds one of them, not the key.
pub const PENDING_PER_KEY: usize = 2;
/// Addresses charged for an unverified hello that are remembered at once: each gets one
/// verification per hello interval, and while all are young a hello from any other address
/// waits.
pub const SOURCES: usize = 8;

type Nonce = [u8; NONCE_LEN];
const NO_NONCE: Nonce = [0; NONCE_LEN];

/// A node's two key pairs: ECDH for the shared keys, ECDSA for hellos and messages.
pub struct NodeKeys {
    pub ecdh: ops::KeyPair,
    pub signing: ops::KeyPair,
}

impl NodeKeys {
    /// Both key pairs from the caller's CSPRNG (the seed's `ECC_GenKeyPair`, twice).
    pub fn generate<C: CryptoProvider + ?Sized>(
        crypto: &C,
        rng: &mut dyn Rng,
    ) -> Result<Self, Error> {
        Ok(Self {
            ecdh: ops::generate_ecdh_key_pair(crypto, rng)?,
            signing: ops::generate_key_pair(crypto, rng)?,
        })
    }

    /// From stored secret scalars.
    pub fn from_secrets<C: CryptoProvider + ?Sized>(
        crypto: &C,
        ecdh: &[u8; SECRET_KEY_LEN],
        signing: &[u8; SECRET_KEY_LEN],
    ) -> Result<Self, Error> {
        Ok(Self {
            ecdh: ops::KeyPair {
                secret: *ecdh,
                public: ops::ecdh_public_key(crypto, ecdh)?,
            },
            signing: ops::KeyPair {
                secret: *signing,
                public: ops::public_key(crypto, signing)?,
            },
        })
    }

    /// The signing key, which the neighbours must trust (for Sigil: its identity is listed).
    pub fn signing_key(&self) -> PublicKey {
        PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &self.signing.public)
            .expect("a P-256 public key from the provider")
    }
}

/// Hello retransmission: the first after `initial`, doubling up to `max`, at most `attempts`
/// hellos, after which the neighbour is [`Phase::Unreachable`] until added again.
///
/// Challenges (our hello to an address that has not proved itself: a newcomer's, or a known
/// key's claimed new address) are budgeted before the hello's signature is verified: one per
/// address each `initial` (at most [`SOURCES`] addresses an interval), one per known key
/// each `initial`, and `challenges_per_second` in total with bursts of `challenge_burst`, of
/// which newcomers may not take the last quarter of the burst (it is kept for known
/// neighbours that moved). A challenge is answerable for `max` after it was issued and goes
/// at most `attempts` times.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub initial: Duration,
    pub max: Duration,
    pub attempts: u8,
    pub challenges_per_second: u16,
    pub challenge_burst: u16,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(32),
            attempts: 8,
            challenges_per_second: 4,
            challenge_burst: 8,
        }
    }
}

/// Where a neighbour stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Our hello is out; the neighbour has not answered it (phase 1).
    Handshake,
    /// Hellos exchanged, keys derived (phases 2 and 3): messages flow.
    Established,
    /// Every hello attempt went unanswered.
    Unreachable,
}

/// What an accepted datagram was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// A verified hello from a trusted key that echoed our challenge, or repeated the hello we
    /// hold. `new_keys` when it started or replaced the keys.
    Hello { new_keys: bool },
    /// A verified hello from a trusted key that proved nothing yet (it did not echo the nonce
    /// we sent to its address): our hello with a challenge goes out to it; nothing else
    /// changed.
    Challenged,
    /// A neighbour answered our challenge from a new address: it moved there, keeping its
    /// keys and window (`new_keys` when it came under a new epoch too).
    Moved { new_keys: bool },
    /// A verified, fresh message: its plaintext is the first `len` bytes of the buffer.
    Message { len: usize },
}

/// A datagram to send: `len` bytes of the caller's buffer, to `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit<A> {
    pub to: A,
    pub len: usize,
}

/// What a node holds for one neighbour after its hello (phases 2 and 3).
struct Keys {
    peer_sig: PublicKey,
    peer_ecdh: [u8; PUBLIC_KEY_LEN],
    epoch: u32,
    send: [u8; 16],
    recv: [u8; 16],
    next_seq: u32,
    window: ReplayWindow,
}

/// A challenge to an address that has not proved itself: our nonce sent there, the nonce its
/// hello carried (echoed in ours), when it was issued, when and how often it went.
#[derive(Clone, Copy)]
struct Challenge<A> {
    addr: A,
    nonce: Nonce,
    peer_nonce: Nonce,
    at: Instant,
    last: Instant,
    sent: u8,
    due: bool,
}

impl<A> Challenge<A> {
    fn new(addr: A, nonce: Nonce, peer_nonce: Nonce, now: Instant) -> Self {
        Self {
            addr,
            nonce,
            peer_nonce,
            at: now,
            last: now,
            sent: 1,
            due: true,
        }
    }
}

struct Neighbour<A> {
    addr: A,
    keys: Option<Keys>,
    /// Our nonce for `addr`: what a hello from there must echo to change anything.
    nonce: Nonce,
    /// The neighbour's latest nonce, echoed in our hellos.
    peer_nonce: Nonce,
    /// Hellos sent since the handshake (re)started.
    attempts: u8,
    next_hello: Instant,
    timeout: Duration,
    /// A hello is due to `addr`; with `ACK` when `answer_ack`.
    answer_due: bool,
    answer_ack: bool,
    /// When we last verified an unproven hello from here (charged before verifying).
    challenged_at: Option<Instant>,
    /// When we last verified a hello for this key from another address (charged before
    /// verifying).
    claimed_at: Option<Instant>,
    /// The neighbour's key claimed another address: our challenge there.
    moving: Option<Challenge<A>>,
}

/// A challenge to a newcomer: a trusted key not in the table, at an address not in it.
struct Pending<A> {
    key: [u8; PUBLIC_KEY_LEN],
    challenge: Challenge<A>,
}

/// The total challenge rate: a token bucket in thousandths of a challenge.
struct Bucket {
    milli: u64,
    at: Instant,
}

impl Bucket {
    /// A token, if more than `keep` thousandths stay.
    fn take(&mut self, now: Instant, per_second: u16, burst: u16, keep: u64) -> bool {
        let cap = u64::from(burst) * 1000;
        if now > self.at {
            let ms = now.saturating_since(self.at).as_millis() as u64;
            self.milli = self
                .milli
                .saturating_add(ms.saturating_mul(u64::from(per_second)))
                .min(cap);
            self.at = now;
        }
        if self.milli >= 1000 + keep {
            self.milli -= 1000;
            true
        } else {
            false
        }
    }
}

/// One CryptoDiet node with room for `N` neighbours; `A` is the caller's address token.
pub struct Node<C, A, const N: usize> {
    crypto: C,
    keys: NodeKeys,
    epoch: u32,
    config: Config,
    table: [Option<Neighbour<A>>; N],
    pending: [Option<Pending<A>>; PENDING],
    sources: [Option<(A, Instant)>; SOURCES],
    bucket: Bucket,
    nonce_key: [u8; 32],
    nonces: u32,
    counters: Counters,
}

fn nonce(seq: u32) -> [u8; ops::NONCE_LEN] {
    // Each direction has its own key, so the sequence number alone is unique per key.
    let mut n = [0u8; ops::NONCE_LEN];
    n[8..].copy_from_slice(&seq.to_be_bytes());
    n
}

fn young(at: Instant, now: Instant, span: Duration) -> bool {
    now < at.saturating_add(span)
}

impl<C: CryptoProvider, A: Copy + Eq, const N: usize> Node<C, A, N> {
    /// A node under `epoch`, which must be higher than in any earlier run with these keys.
    pub fn new(crypto: C, keys: NodeKeys, epoch: u32, config: Config) -> Self {
        let nonce_key = crypto.hmac_sha256(&keys.signing.secret, &[NONCE_LABEL]);
        Self {
            crypto,
            keys,
            epoch,
            config,
            table: core::array::from_fn(|_| None),
            pending: core::array::from_fn(|_| None),
            sources: [None; SOURCES],
            bucket: Bucket {
                milli: u64::from(config.challenge_burst) * 1000,
                at: Instant::ZERO,
            },
            nonce_key,
            nonces: 0,
            counters: Counters::default(),
        }
    }

    pub fn signing_key(&self) -> PublicKey {
        self.keys.signing_key()
    }

    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// A nonce never used before by these keys: HMAC-SHA-256 under the nonce key over the
    /// epoch and a counter, first 8 bytes (never all zeros, which means "none").
    fn fresh_nonce(&mut self) -> Nonce {
        loop {
            let i = self.nonces;
            self.nonces = self.nonces.wrapping_add(1);
            let mac = self.crypto.hmac_sha256(
                &self.nonce_key,
                &[&self.epoch.to_be_bytes(), &i.to_be_bytes()],
            );
            let n: Nonce = mac[..NONCE_LEN].try_into().expect("8 bytes");
            if n != NO_NONCE {
                return n;
            }
        }
    }

    /// A neighbour from the routing table: its hello goes out at the next
    /// [`poll_transmit`](Self::poll_transmit). Adding a known neighbour that is not
    /// established restarts its hellos.
    pub fn add_neighbour(&mut self, now: Instant, addr: A) -> Result<(), Error> {
        let initial = self.config.initial;
        let i = match self.find(&addr) {
            Some(i) => i,
            None => {
                let nonce = self.fresh_nonce();
                self.insert(addr, nonce)?
            }
        };
        let n = self.table[i].as_mut().expect("found");
        if n.keys.is_none() {
            n.attempts = 0;
            n.next_hello = now;
            n.timeout = initial;
        }
        Ok(())
    }

    /// Says hello again to the established neighbour `to`, asking for an answer: for a node
    /// whose own address changed, so that `to` challenges the new one and, answered, moves it
    /// there. Sent once, at the next [`poll_transmit`](Self::poll_transmit).
    pub fn announce(&mut self, to: &A) -> Result<(), Error> {
        let i = self.find(to).ok_or(Error::NoSession)?;
        let n = self.table[i].as_mut().expect("found");
        if n.keys.is_none() {
            return Err(Error::NoSession);
        }
        n.answer_due = true;
        n.answer_ack = false;
        Ok(())
    }

    /// The neighbour's phase, if it is in the table.
    pub fn phase(&self, addr: &A) -> Option<Phase> {
        let n = self.table[self.find(addr)?].as_ref()?;
        Some(self.phase_of(n))
    }

    /// The neighbour's signing key once its hello was accepted.
    pub fn peer_key(&self, addr: &A) -> Option<&PublicKey> {
        let n = self.table[self.find(addr)?].as_ref()?;
        n.keys.as_ref().map(|k| &k.peer_sig)
    }

    /// The address and epoch held for a signing key, and the highest sequence number its
    /// window accepted.
    pub fn held(&self, key: &PublicKey) -> Option<(A, u32, Option<u32>)> {
        let n = self.table[self.find_key(key)?].as_ref()?;
        let k = n.keys.as_ref()?;
        Some((n.addr, k.epoch, k.window.highest()))
    }

    /// Every neighbour's address and phase.
    pub fn neighbours(&self) -> impl Iterator<Item = (A, Phase)> + '_ {
        self.table
            .iter()
            .flatten()
            .map(|n| (n.addr, self.phase_of(n)))
    }

    /// Challenges to newcomers held now (at most [`PENDING`]).
    pub fn pending(&self) -> usize {
        self.pending.iter().flatten().count()
    }

    fn phase_of(&self, n: &Neighbour<A>) -> Phase {
        if n.keys.is_some() {
            Phase::Established
        } else if n.next_hello == Instant::NEVER {
            Phase::Unreachable
        } else {
            Phase::Handshake
        }
    }

    fn find(&self, addr: &A) -> Option<usize> {
        self.table
            .iter()
            .position(|n| n.as_ref().is_some_and(|n| n.addr == *addr))
    }

    fn find_key(&self, key: &PublicKey) -> Option<usize> {
        self.table.iter().position(|n| {
            n.as_ref()
                .and_then(|n| n.keys.as_ref())
                .is_some_and(|k| k.peer_sig == *key)
        })
    }

    fn insert(&mut self, addr: A, nonce: Nonce) -> Result<usize, Error> {
        let i = self
            .table
            .iter()
            .position(|n| n.is_none())
            .ok_or(Error::TableFull)?;
        self.table[i] = Some(Neighbour {
            addr,
            keys: None,
            nonce,
            peer_nonce: NO_NONCE,
            attempts: 0,
            next_hello: Instant::NEVER,
            timeout: self.config.initial,
            answer_due: false,
            answer_ack: false,
            challenged_at: None,
            claimed_at: None,
            moving: None,
        });
        Ok(i)
    }

    /// When to call [`poll_transmit`](Self::poll_transmit) next if nothing arrives.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let table = self.table.iter().flatten().map(|n| {
            if n.answer_due || n.moving.is_some_and(|m| m.due) {
                Instant::ZERO
            } else if n.keys.is_none() {
                n.next_hello
            } else {
                Instant::NEVER
            }
        });
        let pending = self.pending.iter().flatten().map(|p| {
            if p.challenge.due {
                Instant::ZERO
            } else {
                Instant::NEVER
            }
        });
        table.chain(pending).filter(|t| *t != Instant::NEVER).min()
    }

    /// The next datagram due at `now` (a hello, the answer to one, or a challenge), written
    /// into `buf` (at least [`HELLO_LEN`] bytes). Call until it returns `None`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit<A>> {
        let out: &mut [u8; HELLO_LEN] = buf.get_mut(..HELLO_LEN)?.try_into().ok()?;
        let config = self.config;
        // (to, flags, our nonce, echo, a challenge to an unproven address)
        let mut next = None;
        for n in self.table.iter_mut().flatten() {
            if let Some(m) = n.moving.as_mut().filter(|m| m.due) {
                m.due = false;
                next = Some((m.addr, 0, m.nonce, m.peer_nonce, true));
                break;
            }
            if n.answer_due {
                n.answer_due = false;
                let flags = if n.answer_ack && n.keys.is_some() {
                    FLAG_ACK
                } else {
                    0
                };
                if n.keys.is_none() && n.next_hello <= now && n.attempts < config.attempts {
                    // The answer is the handshake's hello too.
                    n.attempts += 1;
                    n.next_hello = now.saturating_add(n.timeout);
                    n.timeout = (n.timeout * 2).min(config.max);
                }
                next = Some((n.addr, flags, n.nonce, n.peer_nonce, false));
                break;
            }
            if n.keys.is_none() && n.next_hello <= now {
                if n.attempts >= config.attempts {
                    n.next_hello = Instant::NEVER;
                    continue;
                }
                n.attempts += 1;
                n.next_hello = now.saturating_add(n.timeout);
                n.timeout = (n.timeout * 2).min(config.max);
                next = Some((n.addr, 0, n.nonce, n.peer_nonce, false));
                break;
            }
        }
        if next.is_none() {
            if let Some(p) = self.pending.iter_mut().flatten().find(|p| p.challenge.due) {
                let c = &mut p.challenge;
                c.due = false;
                next = Some((c.addr, 0, c.nonce, c.peer_nonce, true));
            }
        }
        let (to, flags, nonce, echo, challenge) = next?;
        self.write_hello(flags, nonce, echo, out).ok()?;
        self.counters.hellos_sent += 1;
        if challenge {
            self.counters.challenges_sent += 1;
        }
        Some(Transmit { to, len: HELLO_LEN })
    }

    fn write_hello(
        &self,
        flags: u8,
        nonce: Nonce,
        echo: Nonce,
        out: &mut [u8; HELLO_LEN],
    ) -> Result<(), Error> {
        wire::emit_hello_body(
            &HelloBody {
                flags,
                epoch: self.epoch,
                nonce,
                echo,
                ecdh_pub: &self.keys.ecdh.public,
                sig_pub: &self.keys.signing.public,
            },
            out,
        );
        let sig = ops::sign(
            &self.crypto,
            &self.keys.signing.secret,
            &out[..wire::HELLO_SIGNED_LEN],
        )?;
        out[wire::HELLO_SIGNED_LEN..].copy_from_slice(&sig);
        Ok(())
    }

    /// Takes one datagram that arrived from `from` at `now` (the caller's clock, as for
    /// [`poll_transmit`](Self::poll_transmit)). `trusted` decides whether a hello's signing
    /// key may speak from that address (for Sigil: its identity is on the list). A message's
    /// plaintext is written into `out`. Every refusal is counted in
    /// [`counters`](Self::counters).
    pub fn handle(
        &mut self,
        now: Instant,
        from: A,
        datagram: &[u8],
        trusted: impl Fn(&A, &PublicKey) -> bool,
        out: &mut [u8],
    ) -> Result<Received, Error> {
        let r = match datagram.first() {
            Some(&wire::HELLO) => self.handle_hello(now, from, datagram, trusted),
            Some(&wire::DATA) => self.open(now, from, datagram, out),
            _ => Err(Error::Malformed),
        };
        self.counters.record(&r);
        r
    }

    fn verify_hello(&self, hello: &Hello<'_>) -> Result<(), Error> {
        ops::verify(
            &self.crypto,
            hello.signing_public(),
            hello.signed(),
            hello.signature(),
        )
    }

    fn handle_hello(
        &mut self,
        now: Instant,
        from: A,
        datagram: &[u8],
        trusted: impl Fn(&A, &PublicKey) -> bool,
    ) -> Result<Received, Error> {
        let hello = Hello::parse(datagram)?;
        if hello.signing_public() == &self.keys.signing.public
            || hello.ecdh_public() == &self.keys.ecdh.public
        {
            return Err(Error::Reflected);
        }
        let peer_sig = PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, hello.signing_public())
            .map_err(|_| Error::Malformed)?;
        if !trusted(&from, &peer_sig) {
            return Err(Error::Untrusted);
        }
        match self.find_key(&peer_sig) {
            Some(i) if self.table[i].as_ref().is_some_and(|n| n.addr == from) => {
                self.hello_at_home(now, i, &hello, peer_sig)
            }
            Some(i) => self.hello_elsewhere(now, i, from, &hello, peer_sig),
            None => match self.find(&from) {
                Some(i) if self.table[i].as_ref().is_some_and(|n| n.keys.is_none()) => {
                    self.hello_configured(now, i, &hello, peer_sig)
                }
                _ => self.hello_newcomer(now, from, &hello, peer_sig),
            },
        }
    }

    /// Is the hello older than the keys held (a lower epoch, or the same epoch with other
    /// ECDH keys), the same run, or a newer one?
    fn compare(k: &Keys, hello: &Hello<'_>) -> Result<bool, Error> {
        let same_keys = k.peer_ecdh == *hello.ecdh_public();
        if hello.epoch() < k.epoch || (hello.epoch() == k.epoch && !same_keys) {
            return Err(Error::StaleHello);
        }
        Ok(hello.epoch() == k.epoch)
    }

    /// A hello from the address its key is held at.
    fn hello_at_home(
        &mut self,
        now: Instant,
        i: usize,
        hello: &Hello<'_>,
        peer_sig: PublicKey,
    ) -> Result<Received, Error> {
        let n = self.table[i].as_ref().expect("found");
        let same_run = Self::compare(n.keys.as_ref().expect("held"), hello)?;
        let proven = hello.echo() == n.nonce;
        // Unproven hellos from here (a repeat of the one we hold, a new run, or a forgery)
        // are verified and answered once per hello interval, charged before the signature is
        // checked: a sender of recorded or forged hellos from this address costs one
        // verification and one hello an interval.
        if !proven {
            self.charge_slot(now, i)?;
        }
        self.verify_hello(hello)?;
        // A proven hello spends our nonce: its copy proves nothing next time.
        let fresh = if proven {
            Some(self.fresh_nonce())
        } else {
            None
        };
        let n = self.table[i].as_mut().expect("found");
        n.peer_nonce = hello.nonce();
        if n.moving.is_some_and(|m| hello.echo() == m.nonce) {
            // Our challenge to a claimed new address came back from here: it has not moved.
            n.moving = None;
        }
        if same_run {
            // The hello we hold, repeated: answered if it asks, nothing else changes.
            if let Some(nonce) = fresh {
                n.nonce = nonce;
            }
            n.answer_due |= !hello.ack();
            n.answer_ack = true;
            return Ok(Received::Hello { new_keys: false });
        }
        // Unproven: a new run of the neighbour, or a replayed hello of one: challenge it.
        self.challenge_or_establish(i, proven, hello, peer_sig)
    }

    /// A hello for a key held at another address: a neighbour that moved, or a replay.
    fn hello_elsewhere(
        &mut self,
        now: Instant,
        i: usize,
        from: A,
        hello: &Hello<'_>,
        peer_sig: PublicKey,
    ) -> Result<Received, Error> {
        let (initial, max) = (self.config.initial, self.config.max);
        let n = self.table[i].as_ref().expect("found");
        let same_run = Self::compare(n.keys.as_ref().expect("held"), hello)?;
        if self.held_by_keys(&from) {
            // Another key is established there: its keys, window and send counter are never
            // given up (set up again, they would start over).
            return Err(Error::TableFull);
        }
        let n = self.table[i].as_ref().expect("found");
        let answered = n
            .moving
            .filter(|m| m.addr == from && hello.echo() == m.nonce && young(m.at, now, max));
        if answered.is_none() {
            // Charged before the signature is checked: the key, the address, the total.
            if n.claimed_at.is_some_and(|t| young(t, now, initial))
                || !self.charge_source(now, from)
                || !self.take_token(now, false)
            {
                return Err(Error::Budget);
            }
            self.table[i].as_mut().expect("found").claimed_at = Some(now);
            self.verify_hello(hello)?;
            let nonce = self.fresh_nonce();
            let n = self.table[i].as_mut().expect("found");
            n.moving = Some(Challenge::new(from, nonce, hello.nonce(), now));
            return Ok(Received::Challenged);
        }
        self.verify_hello(hello)?;
        // Proven live at `from`: a configured neighbour without keys there gives way.
        if let Some(j) = self.find(&from) {
            self.table[j] = None;
        }
        self.drop_pending(&from);
        let n = self.table[i].as_mut().expect("found");
        n.addr = from;
        n.moving = None;
        n.challenged_at = None;
        if same_run {
            n.peer_nonce = hello.nonce();
            n.answer_due = !hello.ack();
            n.answer_ack = true;
            let nonce = self.fresh_nonce();
            self.table[i].as_mut().expect("found").nonce = nonce;
            return Ok(Received::Moved { new_keys: false });
        }
        self.establish(i, hello, peer_sig)?;
        Ok(Received::Moved { new_keys: true })
    }

    /// A hello from a configured neighbour's address before it has keys.
    fn hello_configured(
        &mut self,
        now: Instant,
        i: usize,
        hello: &Hello<'_>,
        peer_sig: PublicKey,
    ) -> Result<Received, Error> {
        let n = self.table[i].as_ref().expect("found");
        let proven = hello.echo() == n.nonce;
        if !proven {
            // Charged before the signature is checked, as at an established neighbour's.
            self.charge_slot(now, i)?;
        }
        self.verify_hello(hello)?;
        let n = self.table[i].as_mut().expect("found");
        n.peer_nonce = hello.nonce();
        self.challenge_or_establish(i, proven, hello, peer_sig)
    }

    /// One verification and one answer per hello interval for a slot's unproven hellos,
    /// charged before the signature is checked.
    fn charge_slot(&mut self, now: Instant, i: usize) -> Result<(), Error> {
        let initial = self.config.initial;
        let n = self.table[i].as_mut().expect("found");
        if n.challenged_at.is_some_and(|t| young(t, now, initial)) {
            return Err(Error::Budget);
        }
        n.challenged_at = Some(now);
        Ok(())
    }

    /// After a verified hello at slot `i`: keys from a proven one, our challenge to any other.
    fn challenge_or_establish(
        &mut self,
        i: usize,
        proven: bool,
        hello: &Hello<'_>,
        peer_sig: PublicKey,
    ) -> Result<Received, Error> {
        if !proven {
            let n = self.table[i].as_mut().expect("found");
            n.answer_due = true;
            n.answer_ack = false;
            return Ok(Received::Challenged);
        }
        self.establish(i, hello, peer_sig)?;
        Ok(Received::Hello { new_keys: true })
    }

    /// A trusted key not in the table, from an address without a neighbour.
    fn hello_newcomer(
        &mut self,
        now: Instant,
        from: A,
        hello: &Hello<'_>,
        peer_sig: PublicKey,
    ) -> Result<Received, Error> {
        let (initial, max) = (self.config.initial, self.config.max);
        if self.held_by_keys(&from) {
            // Another key is established there: it keeps the address (its keys, window and
            // send counter are never given up in this run).
            return Err(Error::TableFull);
        }
        let key = *hello.signing_public();
        let at = self
            .pending
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.challenge.addr == from));
        if let Some(j) = at {
            let p = self.pending[j].as_ref().expect("found");
            if p.key == key && hello.echo() == p.challenge.nonce && young(p.challenge.at, now, max)
            {
                // Our challenge answered from the address it went to.
                if let Err(e) = self.verify_hello(hello) {
                    self.pending[j] = None;
                    return Err(e);
                }
                let nonce = self.fresh_nonce();
                let i = self.insert(from, nonce)?;
                self.pending[j] = None;
                self.table[i].as_mut().expect("inserted").peer_nonce = hello.nonce();
                self.establish(i, hello, peer_sig)?;
                return Ok(Received::Hello { new_keys: true });
            }
        }
        // The same challenge again to an address that has one for this key (its answer was
        // lost), at most `attempts` times while answerable.
        let again = at.filter(|&j| {
            self.pending[j]
                .as_ref()
                .is_some_and(|p| p.key == key && young(p.challenge.at, now, max))
        });
        let slot = match (again, at) {
            (Some(j), _) => {
                if self.pending[j].as_ref().expect("found").challenge.sent >= self.config.attempts {
                    return Err(Error::Budget);
                }
                j
            }
            (None, Some(j)) => {
                // Another key's challenge (or an expired one) here: replaced once it had a
                // hello interval to be answered.
                let c = &self.pending[j].as_ref().expect("found").challenge;
                if young(c.at, now, initial) {
                    return Err(Error::Budget);
                }
                j
            }
            (None, None) => self.free_pending(now, &key).ok_or(Error::Budget)?,
        };
        if !self.charge_source(now, from) || !self.take_token(now, true) {
            return Err(Error::Budget);
        }
        self.verify_hello(hello)?;
        if again.is_some() {
            let c = &mut self.pending[slot].as_mut().expect("found").challenge;
            c.peer_nonce = hello.nonce();
            c.due = true;
            c.last = now;
            c.sent += 1;
            return Ok(Received::Challenged);
        }
        let nonce = self.fresh_nonce();
        self.pending[slot] = Some(Pending {
            key,
            challenge: Challenge::new(from, nonce, hello.nonce(), now),
        });
        Ok(Received::Challenged)
    }

    /// Room for a newcomer's challenge under `key`: never one issued less than a hello
    /// interval ago (so each is answerable for at least that); among this key's, at most
    /// [`PENDING_PER_KEY`], its oldest giving way; otherwise a free entry, an expired one or
    /// the oldest.
    fn free_pending(&self, now: Instant, key: &[u8; PUBLIC_KEY_LEN]) -> Option<usize> {
        let (initial, max) = (self.config.initial, self.config.max);
        let oldest = |only_key: bool| {
            self.pending
                .iter()
                .enumerate()
                .filter_map(|(j, p)| p.as_ref().map(|p| (j, p)))
                .filter(|(_, p)| !only_key || (p.key == *key && young(p.challenge.at, now, max)))
                .min_by_key(|(_, p)| p.challenge.at)
                .map(|(j, p)| (j, p.challenge.at))
        };
        let mine = self
            .pending
            .iter()
            .flatten()
            .filter(|p| p.key == *key && young(p.challenge.at, now, max))
            .count();
        let (j, at) = if mine >= PENDING_PER_KEY {
            oldest(true)?
        } else if let Some(j) = self.pending.iter().position(Option::is_none) {
            return Some(j);
        } else {
            oldest(false)?
        };
        (!young(at, now, initial)).then_some(j)
    }

    /// A message from an address we challenged: its sender holds keys, so our challenge's
    /// answer (its acknowledgement) was lost. The same challenge goes again, at most once a
    /// hello interval, `attempts` times in all and while it is answerable (`max` after it was
    /// issued), each from the total budget: one hello (216 bytes) for a message (77 bytes or
    /// more).
    fn challenge_again(&mut self, now: Instant, from: &A) {
        let (initial, max, attempts) = (self.config.initial, self.config.max, self.config.attempts);
        let Some(j) = self.pending.iter().position(|p| {
            p.as_ref().is_some_and(|p| {
                let c = &p.challenge;
                c.addr == *from
                    && young(c.at, now, max)
                    && c.sent < attempts
                    && !young(c.last, now, initial)
            })
        }) else {
            return;
        };
        if !self.take_token(now, true) {
            return;
        }
        let c = &mut self.pending[j].as_mut().expect("found").challenge;
        c.due = true;
        c.last = now;
        c.sent += 1;
    }

    /// Is `addr` an established neighbour's?
    fn held_by_keys(&self, addr: &A) -> bool {
        self.find(addr)
            .is_some_and(|j| self.table[j].as_ref().is_some_and(|n| n.keys.is_some()))
    }

    /// Charges `from` for one unverified hello: refused if it had one less than a hello
    /// interval ago, or if [`SOURCES`] other addresses had one in that interval.
    fn charge_source(&mut self, now: Instant, from: A) -> bool {
        let initial = self.config.initial;
        if let Some(s) = self.sources.iter_mut().flatten().find(|s| s.0 == from) {
            if young(s.1, now, initial) {
                return false;
            }
            s.1 = now;
            return true;
        }
        let slot = self.sources.iter().position(|s| s.is_none()).or_else(|| {
            self.sources
                .iter()
                .position(|s| s.is_some_and(|s| !young(s.1, now, initial)))
        });
        match slot {
            Some(j) => {
                self.sources[j] = Some((from, now));
                true
            }
            None => false,
        }
    }

    /// A token from the total challenge budget; a newcomer's leaves the last quarter of the
    /// burst to known neighbours that moved.
    fn take_token(&mut self, now: Instant, newcomer: bool) -> bool {
        let (rate, burst) = (
            self.config.challenges_per_second,
            self.config.challenge_burst,
        );
        let keep = if newcomer {
            u64::from(burst / 4) * 1000
        } else {
            0
        };
        self.bucket.take(now, rate, burst, keep)
    }

    fn drop_pending(&mut self, addr: &A) {
        for p in &mut self.pending {
            if p.as_ref().is_some_and(|p| p.challenge.addr == *addr) {
                *p = None;
            }
        }
    }

    /// Keys from a hello that proved itself; our nonce for the slot is spent and replaced.
    fn establish(&mut self, i: usize, hello: &Hello<'_>, peer_sig: PublicKey) -> Result<(), Error> {
        let keys = self.derive(hello, peer_sig)?;
        let nonce = self.fresh_nonce();
        let addr = self.table[i].as_ref().expect("found").addr;
        self.drop_pending(&addr);
        let n = self.table[i].as_mut().expect("found");
        n.keys = Some(keys);
        n.nonce = nonce;
        n.peer_nonce = hello.nonce();
        n.next_hello = Instant::NEVER;
        n.attempts = 0;
        n.answer_due = !hello.ack();
        n.answer_ack = true;
        n.challenged_at = None;
        n.claimed_at = None;
        n.moving = None;
        Ok(())
    }

    /// Phase 2: ECDH, then HKDF-SHA-256 into one key per direction. Salt: both ECDH public
    /// keys, lower first; info: the label and both epochs in the same order.
    fn derive(&self, hello: &Hello<'_>, peer_sig: PublicKey) -> Result<Keys, Error> {
        let own = &self.keys.ecdh.public;
        let peer = hello.ecdh_public();
        let own_low = own.as_slice() < peer.as_slice();
        let (lo, hi, e_lo, e_hi) = if own_low {
            (own, peer, self.epoch, hello.epoch())
        } else {
            (peer, own, hello.epoch(), self.epoch)
        };
        let mut salt = [0u8; 2 * PUBLIC_KEY_LEN];
        salt[..PUBLIC_KEY_LEN].copy_from_slice(lo);
        salt[PUBLIC_KEY_LEN..].copy_from_slice(hi);
        let mut info = [0u8; KDF_LABEL.len() + 8];
        info[..KDF_LABEL.len()].copy_from_slice(KDF_LABEL);
        info[KDF_LABEL.len()..KDF_LABEL.len() + 4].copy_from_slice(&e_lo.to_be_bytes());
        info[KDF_LABEL.len() + 4..].copy_from_slice(&e_hi.to_be_bytes());
        let mut okm = [0u8; 32];
        ops::shared_key(
            &self.crypto,
            &self.keys.ecdh.secret,
            peer,
            &salt,
            &info,
            &mut okm,
        )?;
        // The first half carries what the lower key's owner sends.
        let (a, b) = okm.split_at(16);
        let (send, recv) = if own_low { (a, b) } else { (b, a) };
        Ok(Keys {
            peer_sig,
            peer_ecdh: *peer,
            epoch: hello.epoch(),
            send: send.try_into().expect("16 bytes"),
            recv: recv.try_into().expect("16 bytes"),
            next_seq: 0,
            window: ReplayWindow::default(),
        })
    }

    /// Phase 3, sending: encrypts `plain` for the established neighbour `to` and signs the
    /// result into `out` ([`DATA_OVERHEAD`] + `plain.len()` bytes).
    pub fn seal(&mut self, to: &A, plain: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        let i = self.find(to).ok_or(Error::NoSession)?;
        let len = DATA_OVERHEAD + plain.len();
        let n = self.table[i].as_mut().expect("found");
        let k = n.keys.as_mut().ok_or(Error::NoSession)?;
        if out.len() < len {
            return Err(Error::BufferTooSmall);
        }
        let seq = k.next_seq;
        k.next_seq = seq.checked_add(1).ok_or(Error::Exhausted)?;
        let key = k.send;
        out[0] = wire::DATA;
        out[1..DATA_HEADER_LEN].copy_from_slice(&seq.to_be_bytes());
        let body = DATA_HEADER_LEN + plain.len();
        out[DATA_HEADER_LEN..body].copy_from_slice(plain);
        let (head, rest) = out.split_at_mut(DATA_HEADER_LEN);
        let tag = ops::encrypt(
            &self.crypto,
            &key,
            &nonce(seq),
            head,
            &mut rest[..plain.len()],
        )?;
        out[body..body + ops::TAG_LEN].copy_from_slice(&tag);
        let sig = ops::sign(
            &self.crypto,
            &self.keys.signing.secret,
            &out[..body + ops::TAG_LEN],
        )?;
        out[body + ops::TAG_LEN..len].copy_from_slice(&sig);
        self.counters.messages_sent += 1;
        Ok(len)
    }

    /// Phase 3, receiving: window, tag, then signature; the window moves only after both.
    fn open(
        &mut self,
        now: Instant,
        from: A,
        datagram: &[u8],
        out: &mut [u8],
    ) -> Result<Received, Error> {
        let data = Data::parse(datagram)?;
        let Some(i) = self.find(&from) else {
            self.challenge_again(now, &from);
            return Err(Error::NoSession);
        };
        let n = self.table[i].as_mut().expect("found");
        let k = n.keys.as_mut().ok_or(Error::NoSession)?;
        let seq = data.seq();
        if !k.window.is_fresh(seq) {
            return Err(Error::Replay);
        }
        let ct = data.ciphertext();
        let out = out.get_mut(..ct.len()).ok_or(Error::BufferTooSmall)?;
        out.copy_from_slice(ct);
        ops::decrypt(
            &self.crypto,
            &k.recv,
            &nonce(seq),
            data.header(),
            out,
            data.tag(),
        )?;
        ops::verify(
            &self.crypto,
            k.peer_sig.as_bytes(),
            data.signed(),
            data.signature(),
        )?;
        k.window.accept(seq);
        Ok(Received::Message { len: ct.len() })
    }
}
