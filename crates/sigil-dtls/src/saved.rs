//! Established associations that survive a reboot: exported from a [`Traffic`], written to
//! the caller's storage, read back and restored, without a handshake and without ever sealing
//! two records under the same (key, nonce).
//!
//! # The write sequence is reserved ahead
//!
//! The record nonce is the epoch and sequence number (see [`crate::protection`]), so a side
//! that restarted from an old copy of its state and wrote from the sequence number it had
//! then would reuse nonces under the same key. The saved association therefore does not hold
//! the next sequence number but a reservation: "numbers below `N` may have been used".
//! [`Traffic::save`] makes one `ahead` records past the next number, the caller persists it,
//! and only [`Traffic::persisted`] lets the connection seal up to `N`; at `N` it refuses with
//! [`Error::ReservationExhausted`] (nothing sent) until the next reservation is persisted.
//! [`Traffic::restore`] writes from `N` on, and only after a new reservation is persisted. A
//! power cut at any point leaves a stored reservation at or above every number used, so no
//! nonce repeats; at most `ahead` numbers are skipped, which the peer's replay window accepts
//! (numbers only need to grow, RFC 6347 §4.1.2.6). A larger `ahead` means fewer storage
//! writes per record and more numbers skipped per restart.
//!
//! # Who vouches for the peer
//!
//! A restored association holds the peer with its proof ([`crate::trust::Peer`]), which
//! otherwise only a handshake makes. Bytes from storage are not a handshake, so the encoding
//! ends in an HMAC-SHA-256 under a storage key only this side holds (`storage_key`, at least
//! 16 bytes, derived by the caller from a secret of its own): [`SavedAssociation::decode`]
//! mints the peer only after that MAC verified, that is, only for bytes this side wrote
//! itself after a handshake it completed. Anything else (a copy from another device, a
//! tampered record) is refused with [`SavedError::Mac`]. The MAC is integrity, not secrecy:
//! the record holds the traffic keys and the master secret in clear, so the storage that
//! holds it must be as protected as the device's own keys.
//!
//! # Read marks
//!
//! Saved with [`Traffic::save`], the read replay window is the one at the last save: a record
//! of the peer received after it and before a power cut can be accepted once more after the
//! restore (a recorded record replayed by anyone). Saved with [`Traffic::save_marking_reads`]
//! the association carries a read mark instead: the peer's records numbered at most the mark
//! may have been accepted, and a restored connection treats every one of them as seen, so it
//! accepts only records above it. The caller keeps the mark at or above every record it acted
//! on: once [`Traffic::read_mark_passed`], it saves and persists again before acting on what
//! the record carried. A crash between the two leaves a record accepted but never acted on,
//! which may then be taken once. The mark may be reserved ahead (`read_ahead`) like the write
//! sequence, to save less often; the peer's records up to it are then dropped after a
//! restore, since the peer does not know it restarted.
//!
//! # Encoding (version 1)
//!
//! ```text
//! "SGDA" | version (1) | suite (u16) | write key (16) | write salt (4) | read key (16)
//! | read salt (4) | own CID (u8 len, <= 16) | peer CID (u8 len, <= 16)
//! | peer: 0 anonymous | 1 PSK: identity (u8 len, <= 128), key check (32)
//!         | 2 key: algorithm (1 Ed25519, 2 P-256), key (u8 len)
//! | master secret (48) | flags (u8: 1 session ID, 2 resumed, 4 replay window not empty,
//!   8 read mark)
//! | session ID (32, with flag 1) | highest read (u64, with flag 4) | read bitmap (u64)
//! | reserved until (u64) | next handshake message_seq expected (u16)
//! | read mark (u64, with flag 8)
//! | HMAC-SHA-256(storage key, "sigil-dtls saved association" | all of the above) (32)
//! ```
//! All integers big-endian. At most [`MAX_ENCODED_LEN`] bytes.

use crate::extensions::MAX_CID;
use crate::record::{ReplayWindow, MAX_SEQUENCE};
use crate::trust::{Peer, SavedPeer};
use crate::wire::CipherSuite;
#[allow(unused_imports)]
use crate::{Error, Traffic};
use crate::{Reader, Writer};
use core::fmt;
use sigil_crypto::{CryptoProvider, PublicKey, SignatureAlgorithm};

const MAGIC: &[u8; 4] = b"SGDA";
/// The encoding version [`SavedAssociation::encode`] writes and `decode` reads.
pub const VERSION: u8 = 1;
const MAC_LABEL: &[u8] = b"sigil-dtls saved association";
const MAC_LEN: usize = 32;
/// Shortest storage key [`SavedAssociation::encode`] and `decode` accept.
pub const MIN_STORAGE_KEY_LEN: usize = 16;
/// Longest encoding: header 7, keys 40, CIDs 34, a PSK peer 162, master 48, flags 1,
/// session ID 32, replay window 16, reservation 8, message_seq 2, read mark 8, MAC 32.
pub const MAX_ENCODED_LEN: usize =
    7 + 40 + 2 * (1 + MAX_CID) + 162 + 48 + 1 + 32 + 16 + 8 + 2 + 8 + 32;

const FLAG_SESSION_ID: u8 = 1;
const FLAG_RESUMED: u8 = 2;
const FLAG_REPLAY: u8 = 4;
const FLAG_READ_MARK: u8 = 8;

/// Why a saved association could not be encoded or decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SavedError {
    /// The bytes do not start with the saved-association magic.
    Magic,
    /// An encoding version this build does not read.
    Version(u8),
    /// The bytes end inside this field.
    Truncated(&'static str),
    /// A field holds a value no encoder writes (names it).
    Field(&'static str),
    /// A cipher suite this build does not implement.
    UnknownSuite(u16),
    /// Bytes after the MAC.
    TrailingBytes,
    /// The MAC does not verify under this storage key: not written by this side, or altered.
    Mac,
    /// The storage key is shorter than [`MIN_STORAGE_KEY_LEN`].
    StorageKey,
    /// The output buffer is shorter than the encoding.
    BufferTooSmall,
}

impl fmt::Display for SavedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Magic => f.write_str("not a saved DTLS association"),
            Self::Version(v) => write!(f, "saved association version {v} not supported"),
            Self::Truncated(what) => write!(f, "saved association truncated in {what}"),
            Self::Field(what) => write!(f, "saved association has an invalid {what}"),
            Self::UnknownSuite(s) => write!(f, "saved association of unknown suite {s:#06x}"),
            Self::TrailingBytes => f.write_str("bytes after the saved association"),
            Self::Mac => f.write_str("saved association MAC does not verify"),
            Self::StorageKey => f.write_str("storage key shorter than 16 bytes"),
            Self::BufferTooSmall => f.write_str("buffer too small for the saved association"),
        }
    }
}

impl core::error::Error for SavedError {}

/// A connection ID of at most [`MAX_CID`] bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cid {
    bytes: [u8; MAX_CID],
    len: u8,
}

impl Cid {
    /// The record layer keeps at most [`MAX_CID`] bytes; longer is cut (cannot happen).
    pub(crate) fn of(cid: &[u8]) -> Self {
        let n = cid.len().min(MAX_CID);
        let mut bytes = [0u8; MAX_CID];
        bytes[..n].copy_from_slice(&cid[..n]);
        Self {
            bytes,
            len: n as u8,
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// Proof that a saved association came from this side: from an established connection, or
/// from storage with its MAC verified. Only this module makes one.
pub(crate) struct Vouched(());

/// What the established state is saved as (see [`crate::traffic::TrafficCore::export`]).
#[derive(Clone)]
pub(crate) struct Parts {
    pub suite: CipherSuite,
    pub write: Option<([u8; 16], [u8; 4])>,
    pub read: Option<([u8; 16], [u8; 4])>,
    pub own_cid: Cid,
    pub peer_cid: Cid,
    pub peer: Peer,
    pub master: [u8; 48],
    pub session_id: Option<[u8; 32]>,
    pub resumed: bool,
    pub replay: ReplayWindow,
    pub next_write: u64,
    pub next_recv_msg: u16,
    /// The read mark (see the module documentation), if the caller keeps one.
    pub read_mark: Option<u64>,
}

/// An established association as it is stored: keys, connection IDs, the peer, the session
/// for a later resumption, the read replay window and the write reservation. Secret: see the
/// module documentation. Made only by [`Traffic::save`] or by [`SavedAssociation::decode`]
/// of bytes whose MAC verified.
#[derive(Clone)]
pub struct SavedAssociation {
    parts: Parts,
}

impl fmt::Debug for SavedAssociation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SavedAssociation({:?}, reserved until {}, <secret>)",
            self.parts.suite, self.parts.next_write
        )
    }
}

fn suite_known(s: CipherSuite) -> bool {
    let mut ok = false;
    #[cfg(feature = "psk")]
    {
        ok |= s == CipherSuite::TLS_PSK_WITH_AES_128_CCM_8;
    }
    #[cfg(feature = "ecdhe-psk")]
    {
        ok |= s == CipherSuite::TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256;
    }
    #[cfg(feature = "ecdhe-ecdsa")]
    {
        ok |= s == CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8;
    }
    #[cfg(feature = "gcm")]
    {
        ok |= s == CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256;
    }
    #[cfg(feature = "static-ecdh")]
    {
        ok |= s == CipherSuite::PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8;
    }
    #[cfg(feature = "rsa")]
    {
        ok |= s == CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256;
    }
    #[cfg(feature = "rsa-kx")]
    {
        ok |= s == CipherSuite::TLS_RSA_WITH_AES_128_CCM_8;
    }
    ok
}

fn alg_code(a: SignatureAlgorithm) -> u8 {
    match a {
        SignatureAlgorithm::Ed25519 => 1,
        SignatureAlgorithm::EcdsaP256 => 2,
    }
}

fn mac<C: CryptoProvider + ?Sized>(crypto: &C, key: &[u8], body: &[u8]) -> [u8; MAC_LEN] {
    crypto.hmac_sha256(key, &[MAC_LABEL, body])
}

/// Maps a reader failure to the field it ran out in.
fn t<T>(r: Result<T, crate::Error>, what: &'static str) -> Result<T, SavedError> {
    r.map_err(|_| SavedError::Truncated(what))
}

impl SavedAssociation {
    pub(crate) fn from_parts(parts: Parts) -> Self {
        Self { parts }
    }

    pub(crate) fn into_parts(self) -> (Parts, Vouched) {
        (self.parts, Vouched(()))
    }

    /// Sequence numbers below this may have been used; a restored connection writes from it.
    pub fn reserved_until(&self) -> u64 {
        self.parts.next_write
    }

    /// The read mark: the peer's records numbered at most this may have been accepted, so a
    /// restored connection takes only records above it. `None` for an association saved
    /// without one ([`Traffic::save`]), whose restore keeps the window of the save.
    pub fn read_mark(&self) -> Option<u64> {
        self.parts.read_mark
    }

    pub fn suite(&self) -> CipherSuite {
        self.parts.suite
    }

    /// Who the peer is, with the proof the handshake made before the save.
    pub fn peer(&self) -> &Peer {
        &self.parts.peer
    }

    /// The connection ID the peer puts in its records to this side (RFC 9146), if any: a
    /// server finds the association by it.
    pub fn connection_id(&self) -> &[u8] {
        self.parts.own_cid.as_slice()
    }

    /// The session ID the handshake issued, if any.
    pub fn session_id(&self) -> Option<&[u8; 32]> {
        self.parts.session_id.as_ref()
    }

    /// Whether what the peer authenticated with is still trusted now, as resumption checks
    /// it (a restore is not a handshake, so a revoked identity or a replaced PSK must not
    /// come back with it): the same key for its PSK identity, its public key still trusted,
    /// or, for an anonymous client, `anonymous_allowed`.
    pub fn still_trusted<C: CryptoProvider + ?Sized, T: crate::Trust + ?Sized>(
        &self,
        crypto: &C,
        trust: &T,
        anonymous_allowed: bool,
    ) -> bool {
        match &self.parts.peer {
            Peer::Psk { key, .. } => {
                let mut k = [0u8; crate::keys::MAX_PSK_LEN];
                trust
                    .psk(self.parts.peer.psk_identity(), &mut k)
                    .filter(|n| (1..=crate::keys::MAX_PSK_LEN).contains(n))
                    .is_some_and(|n| crate::trust::PskCheck::of(crypto, &k[..n]) == *key)
            }
            Peer::Key { key, .. } => trust.trusted_key(key),
            // An RSA peer came with a chain, which is not kept.
            #[cfg(feature = "rsa")]
            Peer::RsaKey { .. } => false,
            Peer::Anonymous(_) => anonymous_allowed,
        }
    }

    /// The encoding's length.
    pub fn encoded_len(&self) -> usize {
        let p = &self.parts;
        let peer = match &p.peer {
            Peer::Psk { .. } => 2 + p.peer.psk_identity().len() + 32,
            Peer::Key { key, .. } => 3 + key.as_bytes().len(),
            // Not saved ([`Self::encode`] refuses it); any length does.
            #[cfg(feature = "rsa")]
            Peer::RsaKey { .. } => 1,
            Peer::Anonymous(_) => 1,
        };
        7 + 40
            + 2
            + p.own_cid.as_slice().len()
            + p.peer_cid.as_slice().len()
            + peer
            + 48
            + 1
            + if p.session_id.is_some() { 32 } else { 0 }
            + if p.replay.highest().is_some() { 8 } else { 0 }
            + 8
            + 8
            + 2
            + if p.read_mark.is_some() { 8 } else { 0 }
            + MAC_LEN
    }

    /// Writes the versioned encoding, MACed under `storage_key`, into `out`; returns its
    /// length (at most [`MAX_ENCODED_LEN`]).
    pub fn encode<C: CryptoProvider + ?Sized>(
        &self,
        crypto: &C,
        storage_key: &[u8],
        out: &mut [u8],
    ) -> Result<usize, SavedError> {
        if storage_key.len() < MIN_STORAGE_KEY_LEN {
            return Err(SavedError::StorageKey);
        }
        let len = self.encoded_len();
        let out = out.get_mut(..len).ok_or(SavedError::BufferTooSmall)?;
        let p = &self.parts;
        let mut w = Writer::new(out);
        let full = |_| SavedError::BufferTooSmall;
        w.bytes(MAGIC).map_err(full)?;
        w.u8(VERSION).map_err(full)?;
        w.u16(p.suite.0).map_err(full)?;
        let (wk, rk) = match (p.write, p.read) {
            (Some(wk), Some(rk)) => (wk, rk),
            _ => return Err(SavedError::Field("keys")),
        };
        for (k, s) in [wk, rk] {
            w.bytes(&k).map_err(full)?;
            w.bytes(&s).map_err(full)?;
        }
        for cid in [&p.own_cid, &p.peer_cid] {
            w.u8(cid.len).map_err(full)?;
            w.bytes(cid.as_slice()).map_err(full)?;
        }
        match &p.peer {
            Peer::Psk { key, .. } => {
                let id = p.peer.psk_identity();
                w.u8(1).map_err(full)?;
                w.u8(id.len() as u8).map_err(full)?;
                w.bytes(id).map_err(full)?;
                w.bytes(key.as_bytes()).map_err(full)?;
            }
            Peer::Key { key, .. } => {
                w.u8(2).map_err(full)?;
                w.u8(alg_code(key.algorithm())).map_err(full)?;
                w.u8(key.as_bytes().len() as u8).map_err(full)?;
                w.bytes(key.as_bytes()).map_err(full)?;
            }
            #[cfg(feature = "rsa")]
            Peer::RsaKey { .. } => return Err(SavedError::Field("peer (RSA keys are not saved)")),
            Peer::Anonymous(_) => w.u8(0).map_err(full)?,
        }
        w.bytes(&p.master).map_err(full)?;
        let (top, seen) = p.replay.parts();
        let flags = if p.session_id.is_some() {
            FLAG_SESSION_ID
        } else {
            0
        } | if p.resumed { FLAG_RESUMED } else { 0 }
            | if top.is_some() { FLAG_REPLAY } else { 0 }
            | if p.read_mark.is_some() {
                FLAG_READ_MARK
            } else {
                0
            };
        w.u8(flags).map_err(full)?;
        if let Some(id) = &p.session_id {
            w.bytes(id).map_err(full)?;
        }
        if let Some(top) = top {
            w.bytes(&top.to_be_bytes()).map_err(full)?;
        }
        w.bytes(&seen.to_be_bytes()).map_err(full)?;
        w.bytes(&p.next_write.to_be_bytes()).map_err(full)?;
        w.u16(p.next_recv_msg).map_err(full)?;
        if let Some(mark) = p.read_mark {
            w.bytes(&mark.to_be_bytes()).map_err(full)?;
        }
        let body = w.len();
        let tag = mac(crypto, storage_key, &out[..body]);
        out[body..body + MAC_LEN].copy_from_slice(&tag);
        Ok(body + MAC_LEN)
    }

    /// Reads an encoding this side wrote: magic and version, then the MAC under
    /// `storage_key` (constant time), then every field, length-checked; nothing may follow.
    pub fn decode<C: CryptoProvider + ?Sized>(
        crypto: &C,
        storage_key: &[u8],
        bytes: &[u8],
    ) -> Result<Self, SavedError> {
        if storage_key.len() < MIN_STORAGE_KEY_LEN {
            return Err(SavedError::StorageKey);
        }
        if bytes.len() < MAGIC.len() || &bytes[..4] != MAGIC {
            return Err(SavedError::Magic);
        }
        let version = *bytes.get(4).ok_or(SavedError::Truncated("version"))?;
        if version != VERSION {
            return Err(SavedError::Version(version));
        }
        if bytes.len() > MAX_ENCODED_LEN {
            return Err(SavedError::TrailingBytes);
        }
        if bytes.len() < 5 + MAC_LEN {
            return Err(SavedError::Truncated("MAC"));
        }
        let (body, tag) = bytes.split_at(bytes.len() - MAC_LEN);
        let expected = mac(crypto, storage_key, body);
        if !crate::cookie::constant_time_eq(tag, &expected) {
            return Err(SavedError::Mac);
        }
        let vouched = Vouched(());
        let mut r = Reader::new(&body[5..]);
        let suite = CipherSuite(t(r.u16("suite"), "suite")?);
        if !suite_known(suite) {
            return Err(SavedError::UnknownSuite(suite.0));
        }
        let mut key_pair = || -> Result<([u8; 16], [u8; 4]), SavedError> {
            let k = t(r.take(16, "key"), "key")?;
            let s = t(r.take(4, "salt"), "salt")?;
            Ok((
                k.try_into().unwrap_or([0; 16]),
                s.try_into().unwrap_or([0; 4]),
            ))
        };
        let write = key_pair()?;
        let read = key_pair()?;
        let mut cid = |what| -> Result<Cid, SavedError> {
            let n = usize::from(t(r.u8(what), what)?);
            if n > MAX_CID {
                return Err(SavedError::Field(what));
            }
            Ok(Cid::of(t(r.take(n, what), what)?))
        };
        let own_cid = cid("own connection ID")?;
        let peer_cid = cid("peer connection ID")?;
        let peer = match t(r.u8("peer"), "peer")? {
            0 => SavedPeer::Anonymous,
            1 => {
                let n = usize::from(t(r.u8("PSK identity"), "PSK identity")?);
                if n > 128 {
                    return Err(SavedError::Field("PSK identity"));
                }
                let identity = t(r.take(n, "PSK identity"), "PSK identity")?;
                let check = t(r.take(32, "PSK check"), "PSK check")?;
                SavedPeer::Psk {
                    identity,
                    check: check.try_into().unwrap_or([0; 32]),
                }
            }
            2 => {
                let alg = match t(r.u8("key algorithm"), "key algorithm")? {
                    1 => SignatureAlgorithm::Ed25519,
                    2 => SignatureAlgorithm::EcdsaP256,
                    _ => return Err(SavedError::Field("key algorithm")),
                };
                let n = usize::from(t(r.u8("peer key"), "peer key")?);
                let key = t(r.take(n, "peer key"), "peer key")?;
                SavedPeer::Key(
                    PublicKey::from_bytes(alg, key).map_err(|_| SavedError::Field("peer key"))?,
                )
            }
            _ => return Err(SavedError::Field("peer")),
        };
        let peer = Peer::restored(peer, &vouched).ok_or(SavedError::Field("peer"))?;
        let mut master = [0u8; 48];
        master.copy_from_slice(t(r.take(48, "master secret"), "master secret")?);
        let flags = t(r.u8("flags"), "flags")?;
        if flags & !(FLAG_SESSION_ID | FLAG_RESUMED | FLAG_REPLAY | FLAG_READ_MARK) != 0 {
            return Err(SavedError::Field("flags"));
        }
        let session_id = if flags & FLAG_SESSION_ID != 0 {
            let mut id = [0u8; 32];
            id.copy_from_slice(t(r.take(32, "session ID"), "session ID")?);
            Some(id)
        } else {
            None
        };
        let mut u64_at = |what| -> Result<u64, SavedError> {
            let b = t(r.take(8, what), what)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            Ok(u64::from_be_bytes(a))
        };
        let top = if flags & FLAG_REPLAY != 0 {
            Some(u64_at("highest read")?)
        } else {
            None
        };
        let seen = u64_at("read bitmap")?;
        let replay =
            ReplayWindow::from_parts(top, seen).ok_or(SavedError::Field("replay window"))?;
        let next_write = u64_at("reservation")?;
        if next_write > MAX_SEQUENCE + 1 {
            return Err(SavedError::Field("reservation"));
        }
        let next_recv_msg = t(r.u16("message_seq"), "message_seq")?;
        let read_mark = if flags & FLAG_READ_MARK != 0 {
            let b = t(r.take(8, "read mark"), "read mark")?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            let mark = u64::from_be_bytes(a);
            // At most the largest number, and never below a record already accepted.
            if mark > MAX_SEQUENCE || replay.highest().is_some_and(|top| top > mark) {
                return Err(SavedError::Field("read mark"));
            }
            Some(mark)
        } else {
            None
        };
        if !r.is_empty() {
            return Err(SavedError::Field("length"));
        }
        Ok(Self {
            parts: Parts {
                suite,
                write: Some(write),
                read: Some(read),
                own_cid,
                peer_cid,
                peer,
                master,
                session_id,
                resumed: flags & FLAG_RESUMED != 0,
                replay,
                next_write,
                next_recv_msg,
                read_mark,
            },
        })
    }
}

/// Who an association is with, as a cache key: the PSK identity or the public key, tagged so
/// that an identity can never equal a key.
fn same_peer(a: &Peer, b: &Peer) -> bool {
    match (a, b) {
        (Peer::Psk { .. }, Peer::Psk { .. }) => a.psk_identity() == b.psk_identity(),
        (Peer::Key { key: x, .. }, Peer::Key { key: y, .. }) => x == y,
        _ => false,
    }
}

struct CacheEntry {
    saved: SavedAssociation,
    uses: u32,
    last: u64,
}

/// A bounded set of saved associations, at most one per peer, for a device that talks to
/// several peers and keeps the associations worth keeping across reboots (in the seed, the
/// most used ones are cached to flash).
///
/// Eviction: when all `N` slots are full, a new peer's association replaces the one used
/// least often ([`AssociationCache::get`] counts a use); among equally used ones, the one
/// used least recently (by the caller's `tick`, any counter that grows: the library reads no
/// clock). Anonymous peers are never cached (nothing identifies them). Holds no heap: its
/// size is `N` slots of a [`SavedAssociation`] and two counters, stated by
/// [`AssociationCache::BYTES`].
pub struct AssociationCache<const N: usize> {
    slots: [Option<CacheEntry>; N],
}

impl<const N: usize> Default for AssociationCache<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> AssociationCache<N> {
    /// Bytes the cache occupies (all slots, full or empty).
    pub const BYTES: usize = core::mem::size_of::<Self>();

    pub fn new() -> Self {
        Self {
            slots: core::array::from_fn(|_| None),
        }
    }

    /// Associations held.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn position(&self, peer: &Peer) -> Option<usize> {
        self.slots.iter().position(|s| {
            s.as_ref()
                .is_some_and(|e| same_peer(&e.saved.parts.peer, peer))
        })
    }

    /// The association with `peer`, counted as a use at `tick`.
    pub fn get(&mut self, peer: &Peer, tick: u64) -> Option<&SavedAssociation> {
        let i = self.position(peer)?;
        let e = self.slots[i].as_mut()?;
        e.uses = e.uses.saturating_add(1);
        e.last = e.last.max(tick);
        Some(&e.saved)
    }

    /// Keeps `saved` (replacing the peer's older association, whose use count carries over);
    /// returns the association evicted to make room, if any. Anonymous peers are refused
    /// (returned).
    pub fn insert(&mut self, saved: SavedAssociation, tick: u64) -> Option<SavedAssociation> {
        if matches!(saved.parts.peer, Peer::Anonymous(_)) {
            return Some(saved);
        }
        if let Some(i) = self.position(&saved.parts.peer) {
            let e = self.slots[i].as_mut()?;
            e.saved = saved;
            e.last = e.last.max(tick);
            return None;
        }
        let entry = CacheEntry {
            saved,
            uses: 0,
            last: tick,
        };
        if let Some(free) = self.slots.iter_mut().find(|s| s.is_none()) {
            *free = Some(entry);
            return None;
        }
        let victim = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|e| (i, e.uses, e.last)))
            .min_by_key(|&(_, uses, last)| (uses, last))
            .map(|(i, ..)| i)?;
        self.slots[victim].replace(entry).map(|e| e.saved)
    }

    /// Removes and returns the association with `peer` (to restore it, or because the peer
    /// refused it).
    pub fn remove(&mut self, peer: &Peer) -> Option<SavedAssociation> {
        let i = self.position(peer)?;
        self.slots[i].take().map(|e| e.saved)
    }

    /// The associations held, in slot order (to write them to storage).
    pub fn iter(&self) -> impl Iterator<Item = &SavedAssociation> {
        self.slots.iter().flatten().map(|e| &e.saved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(identity: &[u8], reserved: u64) -> SavedAssociation {
        let peer = Peer::restored(
            SavedPeer::Psk {
                identity,
                check: [0; 32],
            },
            &Vouched(()),
        )
        .unwrap();
        SavedAssociation::from_parts(Parts {
            suite: CipherSuite::TLS_PSK_WITH_AES_128_CCM_8,
            write: Some(([1; 16], [2; 4])),
            read: Some(([3; 16], [4; 4])),
            own_cid: Cid::of(&[]),
            peer_cid: Cid::of(&[]),
            peer,
            master: [5; 48],
            session_id: None,
            resumed: false,
            replay: ReplayWindow::new(),
            next_write: reserved,
            next_recv_msg: 0,
            read_mark: None,
        })
    }

    fn held<const N: usize>(c: &AssociationCache<N>) -> [u8; N] {
        let mut ids = [0u8; N];
        for (i, s) in c.iter().enumerate() {
            ids[i] = s.peer().psk_identity()[0];
        }
        ids.sort_unstable();
        ids
    }

    #[test]
    fn the_least_used_then_least_recent_association_is_evicted() {
        let mut c = AssociationCache::<3>::new();
        for (tick, id) in [b"a", b"b", b"c"].into_iter().enumerate() {
            assert!(c.insert(with(id, 1), tick as u64).is_none());
        }
        assert_eq!(c.len(), 3);
        let a = with(b"a", 0).parts.peer;
        let b = with(b"b", 0).parts.peer;
        // a used twice, b once, c never: c goes first.
        c.get(&a, 10);
        c.get(&a, 11);
        c.get(&b, 12);
        let out = c.insert(with(b"d", 1), 13).unwrap();
        assert_eq!(out.peer().psk_identity(), b"c");
        assert_eq!(held(&c), *b"abd");
        // b and d each used once; d more recently: b goes.
        c.get(&with(b"d", 0).parts.peer, 14);
        let out = c.insert(with(b"e", 1), 15).unwrap();
        assert_eq!(out.peer().psk_identity(), b"b");
        assert_eq!(held(&c), *b"ade");
    }

    #[test]
    fn a_peer_has_one_association_and_its_newest_reservation() {
        let mut c = AssociationCache::<2>::new();
        assert!(c.insert(with(b"a", 4), 0).is_none());
        let a = with(b"a", 0).parts.peer;
        c.get(&a, 1);
        assert!(c.insert(with(b"a", 8), 2).is_none());
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(&a, 3).unwrap().reserved_until(), 8);
        assert_eq!(c.remove(&a).unwrap().reserved_until(), 8);
        assert!(c.is_empty());
        let anon = SavedAssociation::from_parts(Parts {
            peer: Peer::restored(SavedPeer::Anonymous, &Vouched(())).unwrap(),
            ..with(b"x", 0).parts
        });
        assert!(
            c.insert(anon, 4).is_some(),
            "anonymous peers are not cached"
        );
        assert!(c.is_empty());
    }

    #[test]
    #[cfg(not(feature = "rsa"))]
    fn the_cache_size_is_as_documented() {
        // docs/security.md states these sizes (x86-64; the device targets are smaller), for
        // builds without `rsa`, whose `Peer` holds an RSA key inline.
        assert_eq!(core::mem::size_of::<SavedAssociation>(), SAVED_BYTES);
        assert_eq!(AssociationCache::<4>::BYTES, CACHE4_BYTES);
    }

    #[cfg(not(feature = "rsa"))]
    const SAVED_BYTES: usize = 376;
    #[cfg(not(feature = "rsa"))]
    const CACHE4_BYTES: usize = 1568;
}
