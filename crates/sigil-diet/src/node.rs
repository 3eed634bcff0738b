//! The node: a bounded neighbour table and, per neighbour, the seed's three phases (§5.2):
//! handshake (signed hellos, retransmitted until the neighbour's arrives), shared key (ECDH +
//! HKDF) and secure communication (CCM-8 and ECDSA, a sequence window per direction).
//!
//! Sans-IO in the quinn-proto manner: [`Node::handle`] takes a datagram with the sender's
//! address token, [`Node::poll_transmit`] gives out what to send and to whom,
//! [`Node::poll_timeout`] says when to call again. The caller owns sockets, clock and table
//! size (`N`); nothing is allocated.
//!
//! Freshness across restarts: every node runs under an `epoch` the caller keeps in storage and
//! raises at each start (or each key change). Both epochs enter the key derivation, so
//! messages of an earlier run never open under the current keys, and a hello whose epoch is
//! below the one held for that key is refused ([`Error::StaleHello`]).

use crate::ops::{self, PUBLIC_KEY_LEN, SECRET_KEY_LEN};
use crate::wire::{self, Data, Hello, DATA_HEADER_LEN, DATA_OVERHEAD, FLAG_ACK, HELLO_LEN};
use crate::{Counters, Error, ReplayWindow};
use core::time::Duration;
use sigil_crypto::{CryptoProvider, PublicKey, Rng, SignatureAlgorithm};
use sigil_time::Instant;

/// The label of the key derivation (HKDF `info` prefix).
pub const KDF_LABEL: &[u8] = b"sigil-diet v2";

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
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub initial: Duration,
    pub max: Duration,
    pub attempts: u8,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(32),
            attempts: 8,
        }
    }
}

/// Where a neighbour stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Our hello is out; the neighbour's has not arrived (phase 1).
    Handshake,
    /// Hellos exchanged, keys derived (phases 2 and 3): messages flow.
    Established,
    /// Every hello attempt went unanswered.
    Unreachable,
}

/// What an accepted datagram was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// A verified hello from a trusted key. `new_keys` when it started or replaced the keys.
    Hello { new_keys: bool },
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

struct Neighbour<A> {
    addr: A,
    keys: Option<Keys>,
    /// Hellos sent since the handshake (re)started.
    attempts: u8,
    next_hello: Instant,
    timeout: Duration,
    /// The neighbour's hello asked for ours.
    answer_due: bool,
}

/// One CryptoDiet node with room for `N` neighbours; `A` is the caller's address token.
pub struct Node<C, A, const N: usize> {
    crypto: C,
    keys: NodeKeys,
    epoch: u32,
    config: Config,
    table: [Option<Neighbour<A>>; N],
    counters: Counters,
}

fn nonce(seq: u32) -> [u8; ops::NONCE_LEN] {
    // Each direction has its own key, so the sequence number alone is unique per key.
    let mut n = [0u8; ops::NONCE_LEN];
    n[8..].copy_from_slice(&seq.to_be_bytes());
    n
}

impl<C: CryptoProvider, A: Copy + Eq, const N: usize> Node<C, A, N> {
    /// A node under `epoch`, which must be higher than in any earlier run with these keys.
    pub fn new(crypto: C, keys: NodeKeys, epoch: u32, config: Config) -> Self {
        Self {
            crypto,
            keys,
            epoch,
            config,
            table: core::array::from_fn(|_| None),
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

    /// A neighbour from the routing table: its hello goes out at the next
    /// [`poll_transmit`](Self::poll_transmit). Adding a known neighbour that is not
    /// established restarts its hellos.
    pub fn add_neighbour(&mut self, now: Instant, addr: A) -> Result<(), Error> {
        let initial = self.config.initial;
        let n = match self.find(&addr) {
            Some(i) => self.table[i].as_mut().expect("found"),
            None => self.insert(addr)?,
        };
        if n.keys.is_none() {
            n.attempts = 0;
            n.next_hello = now;
            n.timeout = initial;
        }
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

    /// Every neighbour's address and phase.
    pub fn neighbours(&self) -> impl Iterator<Item = (A, Phase)> + '_ {
        self.table
            .iter()
            .flatten()
            .map(|n| (n.addr, self.phase_of(n)))
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

    fn insert(&mut self, addr: A) -> Result<&mut Neighbour<A>, Error> {
        let slot = self
            .table
            .iter_mut()
            .find(|n| n.is_none())
            .ok_or(Error::TableFull)?;
        Ok(slot.insert(Neighbour {
            addr,
            keys: None,
            attempts: 0,
            next_hello: Instant::NEVER,
            timeout: self.config.initial,
            answer_due: false,
        }))
    }

    /// When to call [`poll_transmit`](Self::poll_transmit) next if nothing arrives.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.table
            .iter()
            .flatten()
            .map(|n| {
                if n.answer_due {
                    Instant::ZERO
                } else if n.keys.is_none() {
                    n.next_hello
                } else {
                    Instant::NEVER
                }
            })
            .filter(|t| *t != Instant::NEVER)
            .min()
    }

    /// The next datagram due at `now` (a hello or the answer to one), written into `buf`
    /// (at least [`HELLO_LEN`] bytes). Call until it returns `None`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit<A>> {
        let out: &mut [u8; HELLO_LEN] = buf.get_mut(..HELLO_LEN)?.try_into().ok()?;
        let config = self.config;
        for i in 0..N {
            let Some(n) = self.table[i].as_mut() else {
                continue;
            };
            let flags = if n.answer_due {
                n.answer_due = false;
                if n.keys.is_some() {
                    FLAG_ACK
                } else {
                    0
                }
            } else if n.keys.is_none() && n.next_hello <= now {
                if n.attempts >= config.attempts {
                    n.next_hello = Instant::NEVER;
                    continue;
                }
                n.attempts += 1;
                n.next_hello = now.saturating_add(n.timeout);
                n.timeout = (n.timeout * 2).min(config.max);
                0
            } else {
                continue;
            };
            let to = n.addr;
            if self.write_hello(flags, out).is_err() {
                return None;
            }
            self.counters.hellos_sent += 1;
            return Some(Transmit { to, len: HELLO_LEN });
        }
        None
    }

    fn write_hello(&self, flags: u8, out: &mut [u8; HELLO_LEN]) -> Result<(), Error> {
        wire::emit_hello_body(
            flags,
            self.epoch,
            &self.keys.ecdh.public,
            &self.keys.signing.public,
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

    /// Takes one datagram from `from`. `trusted` decides whether a hello's signing key may
    /// speak from that address (for Sigil: its identity is on the list). A message's plaintext
    /// is written into `out`. Every refusal is counted in [`counters`](Self::counters).
    pub fn handle(
        &mut self,
        from: A,
        datagram: &[u8],
        trusted: impl Fn(&A, &PublicKey) -> bool,
        out: &mut [u8],
    ) -> Result<Received, Error> {
        let r = match datagram.first() {
            Some(&wire::HELLO) => self.handle_hello(from, datagram, trusted),
            Some(&wire::DATA) => self.open(from, datagram, out),
            _ => Err(Error::Malformed),
        };
        self.counters.record(&r);
        r
    }

    fn handle_hello(
        &mut self,
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
        ops::verify(
            &self.crypto,
            hello.signing_public(),
            hello.signed(),
            hello.signature(),
        )?;
        let i = match self.find(&from) {
            Some(i) => i,
            None => {
                self.insert(from)?;
                self.find(&from).expect("just inserted")
            }
        };
        // Is this the hello we hold already, a stale one, or new keys?
        if let Some(k) = self.table[i].as_ref().and_then(|n| n.keys.as_ref()) {
            if k.peer_sig == peer_sig {
                let same_keys = k.peer_ecdh == *hello.ecdh_public();
                if hello.epoch() < k.epoch || (hello.epoch() == k.epoch && !same_keys) {
                    return Err(Error::StaleHello);
                }
                if hello.epoch() == k.epoch {
                    let n = self.table[i].as_mut().expect("found");
                    n.answer_due |= !hello.ack();
                    return Ok(Received::Hello { new_keys: false });
                }
            }
        }
        let keys = self.derive(&hello, peer_sig)?;
        let n = self.table[i].as_mut().expect("found");
        n.keys = Some(keys);
        n.next_hello = Instant::NEVER;
        n.attempts = 0;
        n.answer_due = !hello.ack();
        Ok(Received::Hello { new_keys: true })
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
    fn open(&mut self, from: A, datagram: &[u8], out: &mut [u8]) -> Result<Received, Error> {
        let data = Data::parse(datagram)?;
        let i = self.find(&from).ok_or(Error::NoSession)?;
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
