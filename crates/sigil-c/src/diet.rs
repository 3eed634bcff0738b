//! The IoT-CryptoDiet scheme (`sigil-diet`) behind C calls: the seed's six operations on P-256
//! (`ECC_GenKeyPair`, `ECDH_GenSharedKey`, `AES_Encrypt`, `AES_Decrypt`, `ECDSA_sign`,
//! `ECDSA_verify`, with HKDF after ECDH and AES-128-CCM-8), and a node running the three phases
//! with its neighbours as sans-IO calls. The node lives in the caller's memory.
//!
//! Neighbours are known to the node by a handle (0 to `SIGIL_DIET_MAX_NEIGHBOURS` - 1) that
//! `sigil_diet_node_add_neighbour` hands out; the caller maps it to an address (a UDP
//! endpoint, a link-layer address). A hello is trusted only when its signing key's identity
//! (RFC 8387 §4, I = h(P)) is the one configured for the handle it came from.

use crate::ffi::{input, out, output, reference, required, status, CResult};
use crate::identity::identity_out;
use crate::status::sigil_status::{self, *};
use core::mem::{align_of, size_of};
use core::time::Duration;
use sigil_crypto::{CryptoError, PublicKey, Rng, RustCrypto, SignatureAlgorithm};
use sigil_diet::{ops, wire, Config, Error, Node, NodeKeys, Phase, Received};
use sigil_identity::{Identity, IDENTITY_LEN};
use sigil_time::Instant;

/// A P-256 secret scalar (big-endian).
pub const SIGIL_DIET_SECRET_KEY_LEN: usize = 32;
/// A P-256 public key: the uncompressed SEC 1 point (`0x04 || x || y`).
pub const SIGIL_DIET_PUBLIC_KEY_LEN: usize = 65;
/// An ECDSA P-256 signature, `r || s`.
pub const SIGIL_DIET_SIGNATURE_LEN: usize = 64;
/// An AES-128 key.
pub const SIGIL_DIET_KEY_LEN: usize = 16;
/// The AES-CCM nonce.
pub const SIGIL_DIET_NONCE_LEN: usize = 12;
/// The AES-CCM-8 tag, appended to the ciphertext.
pub const SIGIL_DIET_TAG_LEN: usize = 8;
/// The most `sigil_diet_shared_key` derives (HKDF-SHA-256, RFC 5869 §2.3: 255 blocks).
pub const SIGIL_DIET_MAX_DERIVED: usize = 8160;
/// A hello's length; `sigil_diet_node_poll_transmit` needs a buffer of at least this.
pub const SIGIL_DIET_HELLO_LEN: usize = 216;
/// Bytes a data message adds to its plaintext (type, sequence number, tag, signature).
pub const SIGIL_DIET_OVERHEAD: usize = 77;
/// Neighbours one node holds.
pub const SIGIL_DIET_MAX_NEIGHBOURS: usize = 8;
/// The handle to give `sigil_diet_node_handle` for a datagram from an address that is no
/// configured neighbour's: its hello is refused as untrusted, its messages as without keys.
pub const SIGIL_DIET_UNKNOWN_NEIGHBOUR: u32 = 0xFFFF_FFFF;
/// Size of [`sigil_diet_node`] in 8-byte words: room for the state on every target the
/// library builds for (checked below at compile time).
pub const SIGIL_DIET_NODE_WORDS: usize = 528;
/// Size of [`sigil_diet_node`] in bytes.
pub const SIGIL_DIET_NODE_SIZE: usize = 8 * SIGIL_DIET_NODE_WORDS;

// The header's values are the cores' (cbindgen copies literals only).
const _: () = assert!(SIGIL_DIET_SECRET_KEY_LEN == ops::SECRET_KEY_LEN);
const _: () = assert!(SIGIL_DIET_PUBLIC_KEY_LEN == ops::PUBLIC_KEY_LEN);
const _: () = assert!(SIGIL_DIET_SIGNATURE_LEN == ops::SIGNATURE_LEN);
const _: () = assert!(SIGIL_DIET_KEY_LEN == ops::KEY_LEN);
const _: () = assert!(SIGIL_DIET_NONCE_LEN == ops::NONCE_LEN);
const _: () = assert!(SIGIL_DIET_TAG_LEN == ops::TAG_LEN);
const _: () = assert!(SIGIL_DIET_MAX_DERIVED == ops::MAX_DERIVED_LEN);
const _: () = assert!(SIGIL_DIET_HELLO_LEN == wire::HELLO_LEN);
const _: () = assert!(SIGIL_DIET_OVERHEAD == wire::DATA_OVERHEAD);

/// The platform's randomness callback (the only service the operations need).
struct PlatformRng<'a>(&'a crate::device::sigil_platform);

impl Rng for PlatformRng<'_> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        let rng = self.0.rng.ok_or(CryptoError::Rng)?;
        // SAFETY: `buf` is writable for its length; the callback is the integrator's.
        match unsafe { rng(self.0.ctx, buf.as_mut_ptr(), buf.len()) } {
            0 => Ok(()),
            _ => Err(CryptoError::Rng),
        }
    }
}

impl From<Error> for sigil_status {
    fn from(e: Error) -> Self {
        match e {
            Error::Malformed => SIGIL_ERR_INVALID_KEY,
            Error::BadSignature | Error::BadTag => SIGIL_ERR_BAD_SIGNATURE,
            Error::NoSession => SIGIL_ERR_NO_SESSION,
            Error::TableFull => SIGIL_ERR_TABLE_FULL,
            Error::BufferTooSmall => SIGIL_ERR_SHORT_BUFFER,
            Error::Exhausted => SIGIL_ERR_SEQUENCE_EXHAUSTED,
            Error::Crypto(c) => c.into(),
            Error::Untrusted
            | Error::Reflected
            | Error::Replay
            | Error::StaleHello
            | Error::Budget => SIGIL_ERR_BAD_ARGUMENT,
        }
    }
}

unsafe fn secret_in(ptr: *const u8, len: usize) -> CResult<[u8; SIGIL_DIET_SECRET_KEY_LEN]> {
    let s = unsafe {
        required(
            ptr,
            len,
            SIGIL_DIET_SECRET_KEY_LEN,
            SIGIL_DIET_SECRET_KEY_LEN,
        )
    }?;
    s.try_into().map_err(|_| SIGIL_ERR_BAD_LENGTH)
}

// ---- the six operations (iot-cryptodiet.md §4, Algorithms 1-6)

/// `ECC_GenKeyPair` (Algorithm 1): a fresh P-256 key pair from the platform's randomness
/// callback (`platform->rng`; the storage callbacks are not used). Writes the 32-byte secret
/// scalar to `secret` (`secret_len` >= 32) and the 65-byte public key to `public_key`
/// (`public_len` >= 65). The same pair serves ECDH and ECDSA. `SIGIL_ERR_RNG` when the
/// callback fails. The caller stores the secret and wipes its copies.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_gen_key_pair(
    platform: *const crate::device::sigil_platform,
    secret: *mut u8,
    secret_len: usize,
    public_key: *mut u8,
    public_len: usize,
) -> sigil_status {
    status((|| {
        let platform = unsafe { reference(platform) }?;
        if platform.rng.is_none() {
            return Err(SIGIL_ERR_NULL);
        }
        let secret = unsafe { output(secret, secret_len, SIGIL_DIET_SECRET_KEY_LEN) }?;
        let public = unsafe { output(public_key, public_len, SIGIL_DIET_PUBLIC_KEY_LEN) }?;
        let mut pair = ops::generate_key_pair(&RustCrypto, &mut PlatformRng(platform))?;
        secret.copy_from_slice(&pair.secret);
        public.copy_from_slice(&pair.public);
        pair.secret.fill(0);
        Ok(())
    })())
}

/// The public key of a stored secret scalar (`secret_len` = 32), into `public_key`
/// (`public_len` >= 65). `SIGIL_ERR_INVALID_KEY` if the scalar is zero or not below the
/// group order.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_public_key(
    secret: *const u8,
    secret_len: usize,
    public_key: *mut u8,
    public_len: usize,
) -> sigil_status {
    status((|| {
        let mut s = unsafe { secret_in(secret, secret_len) }?;
        let out = unsafe { output(public_key, public_len, SIGIL_DIET_PUBLIC_KEY_LEN) }?;
        let r = ops::public_key(&RustCrypto, &s);
        s.fill(0);
        out.copy_from_slice(&r.map_err(|_| SIGIL_ERR_INVALID_KEY)?);
        Ok(())
    })())
}

/// `ECDH_GenSharedKey` (Algorithm 2) with a key derivation: P-256 ECDH of `secret`
/// (`secret_len` = 32) and the peer's public key (`peer_len` = 65), whose x-coordinate is the
/// input keying material of HKDF-SHA-256 (RFC 5869) with `salt` and `info` (NULL with length
/// 0 for none); fills all `out_len` bytes of `out` (1 to `SIGIL_DIET_MAX_DERIVED`). The raw
/// ECDH output never leaves the library. `SIGIL_ERR_INVALID_KEY` for a point off the curve or
/// a bad scalar.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_shared_key(
    secret: *const u8,
    secret_len: usize,
    peer_public: *const u8,
    peer_len: usize,
    salt: *const u8,
    salt_len: usize,
    info: *const u8,
    info_len: usize,
    out: *mut u8,
    out_len: usize,
) -> sigil_status {
    status((|| {
        let mut s = unsafe { secret_in(secret, secret_len) }?;
        let peer = unsafe {
            required(
                peer_public,
                peer_len,
                SIGIL_DIET_PUBLIC_KEY_LEN,
                SIGIL_DIET_PUBLIC_KEY_LEN,
            )
        }?;
        let salt = unsafe { input(salt, salt_len) }?;
        let info = unsafe { input(info, info_len) }?;
        if out.is_null() {
            return Err(SIGIL_ERR_NULL);
        }
        if out_len == 0 || out_len > SIGIL_DIET_MAX_DERIVED {
            return Err(SIGIL_ERR_BAD_LENGTH);
        }
        let okm = unsafe { output(out, out_len, out_len) }?;
        let r = ops::shared_key(&RustCrypto, &s, peer, salt, info, okm);
        s.fill(0);
        if r.is_err() {
            okm.fill(0);
        }
        Ok(r?)
    })())
}

fn nonce_in(nonce: &[u8]) -> CResult<&[u8; SIGIL_DIET_NONCE_LEN]> {
    nonce.try_into().map_err(|_| SIGIL_ERR_BAD_LENGTH)
}

/// `AES_Encrypt` (Algorithm 3): AES-128-CCM-8 (RFC 3610) of `plain` (`plain_len` bytes,
/// NULL with 0 for none) under `key` (`key_len` = 16) and `nonce` (`nonce_len` = 12; never
/// twice under one key), authenticating `aad` (NULL with 0 for none). Writes the ciphertext
/// and the 8-byte tag, `plain_len` + `SIGIL_DIET_TAG_LEN` bytes, to `out` (`out_cap` at least
/// that) and that length to `out_len`. `out` may be `plain` (in place).
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_encrypt(
    key: *const u8,
    key_len: usize,
    nonce: *const u8,
    nonce_len: usize,
    aad: *const u8,
    aad_len: usize,
    plain: *const u8,
    plain_len: usize,
    out: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
) -> sigil_status {
    status((|| {
        let key: [u8; SIGIL_DIET_KEY_LEN] =
            unsafe { required(key, key_len, SIGIL_DIET_KEY_LEN, SIGIL_DIET_KEY_LEN) }?
                .try_into()
                .map_err(|_| SIGIL_ERR_BAD_LENGTH)?;
        let nonce = *nonce_in(unsafe {
            required(nonce, nonce_len, SIGIL_DIET_NONCE_LEN, SIGIL_DIET_NONCE_LEN)
        }?)?;
        let aad = unsafe { input(aad, aad_len) }?;
        // Checked, not kept: `plain` and `out` may be the same memory.
        let _ = unsafe { input(plain, plain_len) }?;
        let written = unsafe { crate::ffi::out(out_len) }?;
        let need = plain_len
            .checked_add(SIGIL_DIET_TAG_LEN)
            .ok_or(SIGIL_ERR_BAD_LENGTH)?;
        let buf = unsafe { output(out, out_cap, need) }?;
        if plain_len > 0 {
            // SAFETY: both ranges were checked above; `copy` allows them to overlap.
            unsafe { core::ptr::copy(plain, buf.as_mut_ptr(), plain_len) };
        }
        let (body, tag_out) = buf.split_at_mut(plain_len);
        let tag = ops::encrypt(&RustCrypto, &key, &nonce, aad, body)?;
        tag_out.copy_from_slice(&tag);
        *written = need;
        Ok(())
    })())
}

/// `AES_Decrypt` (Algorithm 4): checks the tag of `sealed` (ciphertext then tag,
/// `sealed_len` at least `SIGIL_DIET_TAG_LEN`) under `key`, `nonce` and `aad`, and writes the
/// plaintext,
/// `sealed_len` - `SIGIL_DIET_TAG_LEN` bytes, to `out` (`out_cap` at least that; `out` may be
/// `sealed`), its length to `out_len`. `SIGIL_ERR_BAD_SIGNATURE` when the tag does not
/// authenticate (ciphertext, AAD, nonce or key differ); then `out` holds zeros.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_decrypt(
    key: *const u8,
    key_len: usize,
    nonce: *const u8,
    nonce_len: usize,
    aad: *const u8,
    aad_len: usize,
    sealed: *const u8,
    sealed_len: usize,
    out: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
) -> sigil_status {
    status((|| {
        let key: [u8; SIGIL_DIET_KEY_LEN] =
            unsafe { required(key, key_len, SIGIL_DIET_KEY_LEN, SIGIL_DIET_KEY_LEN) }?
                .try_into()
                .map_err(|_| SIGIL_ERR_BAD_LENGTH)?;
        let nonce = *nonce_in(unsafe {
            required(nonce, nonce_len, SIGIL_DIET_NONCE_LEN, SIGIL_DIET_NONCE_LEN)
        }?)?;
        let aad = unsafe { input(aad, aad_len) }?;
        let sealed_in = unsafe { required(sealed, sealed_len, SIGIL_DIET_TAG_LEN, usize::MAX) }?;
        let n = sealed_len - SIGIL_DIET_TAG_LEN;
        let mut tag = [0u8; SIGIL_DIET_TAG_LEN];
        tag.copy_from_slice(&sealed_in[n..]);
        let written = unsafe { crate::ffi::out(out_len) }?;
        if out.is_null() {
            return Err(SIGIL_ERR_NULL);
        }
        if out_cap < n {
            return Err(SIGIL_ERR_SHORT_BUFFER);
        }
        if n > 0 {
            // SAFETY: both ranges were checked above; `copy` allows them to overlap.
            unsafe { core::ptr::copy(sealed, out, n) };
        }
        let buf = unsafe { output(out, out_cap, n) }?;
        if let Err(e) = ops::decrypt(&RustCrypto, &key, &nonce, aad, buf, &tag) {
            buf.fill(0);
            return Err(e.into());
        }
        *written = n;
        Ok(())
    })())
}

/// `ECDSA_sign` (Algorithm 5): ECDSA P-256 with SHA-256 over `message` (`message_len` bytes,
/// NULL with 0 for none) with `secret` (`secret_len` = 32); the nonce is derived as RFC 6979
/// §3.2 says, so no randomness is needed. Writes `r || s` (64 bytes) to `signature`
/// (`signature_len` >= 64).
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_sign(
    secret: *const u8,
    secret_len: usize,
    message: *const u8,
    message_len: usize,
    signature: *mut u8,
    signature_len: usize,
) -> sigil_status {
    status((|| {
        let mut s = unsafe { secret_in(secret, secret_len) }?;
        let message = unsafe { input(message, message_len) }?;
        let out = unsafe { output(signature, signature_len, SIGIL_DIET_SIGNATURE_LEN) }?;
        let r = ops::sign(&RustCrypto, &s, message);
        s.fill(0);
        out.copy_from_slice(&r.map_err(|_| SIGIL_ERR_INVALID_KEY)?);
        Ok(())
    })())
}

/// `ECDSA_verify` (Algorithm 6): `SIGIL_OK` only if `signature` (`signature_len` = 64,
/// `r || s`) is ECDSA P-256 with SHA-256 over exactly `message` under `public_key`
/// (`public_len` = 65); `SIGIL_ERR_BAD_SIGNATURE` otherwise, `SIGIL_ERR_INVALID_KEY` when
/// the key is not an uncompressed point.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_verify(
    public_key: *const u8,
    public_len: usize,
    message: *const u8,
    message_len: usize,
    signature: *const u8,
    signature_len: usize,
) -> sigil_status {
    status((|| {
        let public = unsafe {
            required(
                public_key,
                public_len,
                SIGIL_DIET_PUBLIC_KEY_LEN,
                SIGIL_DIET_PUBLIC_KEY_LEN,
            )
        }?;
        let message = unsafe { input(message, message_len) }?;
        let sig = unsafe {
            required(
                signature,
                signature_len,
                SIGIL_DIET_SIGNATURE_LEN,
                SIGIL_DIET_SIGNATURE_LEN,
            )
        }?;
        Ok(ops::verify(&RustCrypto, public, message, sig)?)
    })())
}

// ---- the node (iot-cryptodiet.md §5.2: handshake, shared key, secure communication)

/// Hello retransmission; start from `sigil_diet_config_default`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sigil_diet_config {
    /// The first hello is repeated after this many milliseconds (at least 1) ...
    pub hello_initial_ms: u32,
    /// ... the wait doubling up to this (at least `hello_initial_ms`) ...
    pub hello_max_ms: u32,
    /// ... for at most this many hellos (at least 1); then the neighbour is
    /// `SIGIL_DIET_UNREACHABLE` until added again.
    pub hello_attempts: u8,
}

/// The node state: opaque, owned by the caller, `SIGIL_DIET_NODE_SIZE` bytes aligned to 8.
/// It may be static or on the stack; it holds no pointers into itself.
#[repr(C)]
pub struct sigil_diet_node {
    opaque: [u64; SIGIL_DIET_NODE_WORDS],
}

/// Where a neighbour stands.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sigil_diet_phase {
    /// Phase 1: our hello is out, the neighbour's has not arrived.
    SIGIL_DIET_HANDSHAKE = 1,
    /// Phases 2 and 3: hellos exchanged, keys derived; messages flow.
    SIGIL_DIET_ESTABLISHED = 2,
    /// Every hello went unanswered.
    SIGIL_DIET_UNREACHABLE = 3,
}

/// What `sigil_diet_node_handle` made of a datagram.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sigil_diet_outcome {
    /// A verified hello from the neighbour's configured identity.
    SIGIL_DIET_HELLO = 1,
    /// A verified, fresh message; its plaintext is in the caller's buffer.
    SIGIL_DIET_MESSAGE = 2,
    /// Refused and counted; `refusal` says why.
    SIGIL_DIET_REFUSED = 3,
    /// A verified hello from the neighbour's identity that did not echo the nonce our hellos
    /// carry (a new run of the neighbour, or a recorded hello replayed): nothing changed, and
    /// our hello with a challenge goes out at the next `sigil_diet_node_poll_transmit`. Keys
    /// follow only from a hello that echoes it.
    SIGIL_DIET_CHALLENGED = 4,
}

/// Why a datagram was refused (each has its counter in `sigil_diet_counters`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sigil_diet_refusal {
    /// Not refused.
    SIGIL_DIET_REFUSED_NONE = 0,
    /// Wrong length, type byte, flags or key encoding.
    SIGIL_DIET_REFUSED_MALFORMED = 1,
    /// A hello whose signing key is not the identity configured for its sender (an unknown
    /// node, or a known one at the wrong address).
    SIGIL_DIET_REFUSED_UNTRUSTED = 2,
    /// Our own hello came back.
    SIGIL_DIET_REFUSED_REFLECTED = 3,
    /// A signature does not verify (altered or forged).
    SIGIL_DIET_REFUSED_BAD_SIGNATURE = 4,
    /// The ciphertext does not authenticate (altered, or sealed under other keys).
    SIGIL_DIET_REFUSED_BAD_TAG = 5,
    /// A message from a neighbour without keys.
    SIGIL_DIET_REFUSED_NO_SESSION = 6,
    /// The sequence number was accepted already, or is older than the 64-message window.
    SIGIL_DIET_REFUSED_REPLAY = 7,
    /// A hello of an earlier epoch than the one held for its key (a replayed hello).
    SIGIL_DIET_REFUSED_STALE_HELLO = 8,
    /// The neighbour table is full.
    SIGIL_DIET_REFUSED_TABLE_FULL = 9,
    /// Anything else.
    SIGIL_DIET_REFUSED_OTHER = 10,
    /// A hello that proved nothing (a recorded, repeated or forged one) within the hello
    /// interval (`hello_initial_ms`) of the last one verified from the same neighbour:
    /// refused before its signature is checked.
    SIGIL_DIET_REFUSED_BUDGET = 11,
}

/// One datagram's outcome, from `sigil_diet_node_handle`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sigil_diet_received {
    pub outcome: sigil_diet_outcome,
    /// With `SIGIL_DIET_HELLO`: the hello started (or replaced) the keys, so the neighbour
    /// just became established (again).
    pub new_keys: bool,
    /// With `SIGIL_DIET_MESSAGE`: the plaintext's length.
    pub len: usize,
    pub refusal: sigil_diet_refusal,
}

/// What a node sent, accepted and refused, by reason (`sigil_diet_node_counters`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct sigil_diet_counters {
    pub hellos_sent: u64,
    pub hellos_accepted: u64,
    pub messages_sent: u64,
    pub messages_accepted: u64,
    pub malformed: u64,
    /// Hellos from unknown nodes (or from known nodes at another neighbour's address).
    pub untrusted: u64,
    pub reflected: u64,
    pub bad_signature: u64,
    pub bad_tag: u64,
    pub no_session: u64,
    pub replayed: u64,
    pub stale_hellos: u64,
    pub table_full: u64,
    pub other: u64,
    /// All refusals together.
    pub refused: u64,
    /// Hellos refused before verification, over the challenge budget.
    pub over_budget: u64,
    /// Verified hellos answered with a challenge (`SIGIL_DIET_CHALLENGED`).
    pub challenged: u64,
    /// Challenges sent to addresses that had not proved themselves (none for this node: it
    /// hears only configured neighbours' handles).
    pub challenges_sent: u64,
    /// Neighbours that moved (none for this node, as above).
    pub moved: u64,
}

const NODE_MAGIC: u64 = 0x5349_4749_4c44_4954; // "SIGILDIT"

/// `repr(C)`: `magic` comes first, where `ffi::live` reads it.
#[repr(C)]
struct NodeState {
    magic: u64,
    node: Node<RustCrypto, u32, SIGIL_DIET_MAX_NEIGHBOURS>,
    /// The identity configured for each handle.
    expected: [Option<Identity>; SIGIL_DIET_MAX_NEIGHBOURS],
}

// The header's size and alignment hold the state on every target.
const _: () = assert!(size_of::<NodeState>() <= size_of::<sigil_diet_node>());
const _: () = assert!(align_of::<NodeState>() <= align_of::<sigil_diet_node>());

impl crate::ffi::Tagged for NodeState {
    const MAGIC: u64 = NODE_MAGIC;
    const NOT_LIVE: sigil_status = SIGIL_ERR_NOT_BOOTED;
}

unsafe fn node_state<'a>(node: *mut sigil_diet_node) -> CResult<&'a mut NodeState> {
    // SAFETY: a `sigil_diet_node` (the C contract), which `sigil_diet_node_init` fills.
    unsafe { crate::ffi::live_mut(node) }
}

unsafe fn node_ref<'a>(node: *const sigil_diet_node) -> CResult<&'a NodeState> {
    // SAFETY: as for `node_state`; only read.
    unsafe { crate::ffi::live_ref(node) }
}

fn handle_of(state: &NodeState, neighbour: u32) -> CResult<u32> {
    match state.expected.get(neighbour as usize) {
        Some(Some(_)) => Ok(neighbour),
        _ => Err(SIGIL_ERR_BAD_ARGUMENT),
    }
}

fn identity_of(key: &PublicKey) -> Option<Identity> {
    Identity::of_key(&RustCrypto, key, b"").ok()
}

/// Fills `cfg` with the defaults: a hello repeated after 1 s, doubling up to 32 s, 8 hellos.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_config_default(cfg: *mut sigil_diet_config) -> sigil_status {
    status((|| {
        let d = Config::default();
        *unsafe { out(cfg) }? = sigil_diet_config {
            hello_initial_ms: d.initial.as_millis() as u32,
            hello_max_ms: d.max.as_millis() as u32,
            hello_attempts: d.attempts,
        };
        Ok(())
    })())
}

/// Starts a node in `node` (`node_size` = `sizeof(sigil_diet_node)`) with its two stored
/// secret scalars (each 32 bytes, from `sigil_diet_gen_key_pair`): `ecdh_secret` for the
/// shared keys, `signing_secret` for hellos and messages. `epoch` must be higher than in any
/// earlier run with these keys: keep it in storage and raise it at each start, so messages
/// of an earlier run never open. `cfg` NULL takes the defaults. A node initialised before
/// is ended first. `SIGIL_ERR_INVALID_KEY` for a scalar that is zero or not below the group
/// order, `SIGIL_ERR_CONFIG` for a zero first timeout or attempt count or a maximum below the
/// first timeout; on any error `node` is left as it was.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_node_init(
    node: *mut sigil_diet_node,
    node_size: usize,
    ecdh_secret: *const u8,
    ecdh_secret_len: usize,
    signing_secret: *const u8,
    signing_secret_len: usize,
    epoch: u32,
    cfg: *const sigil_diet_config,
) -> sigil_status {
    status((|| {
        if node.is_null() {
            return Err(SIGIL_ERR_NULL);
        }
        if node_size < size_of::<sigil_diet_node>() {
            return Err(SIGIL_ERR_BAD_LENGTH);
        }
        let mut ecdh = unsafe { secret_in(ecdh_secret, ecdh_secret_len) }?;
        let mut signing = unsafe { secret_in(signing_secret, signing_secret_len) }?;
        let defaults = Config::default();
        let config = match unsafe { cfg.as_ref() } {
            None => defaults,
            Some(c) => {
                if c.hello_initial_ms == 0 || c.hello_max_ms < c.hello_initial_ms {
                    return Err(SIGIL_ERR_CONFIG);
                }
                if c.hello_attempts == 0 {
                    return Err(SIGIL_ERR_CONFIG);
                }
                Config {
                    initial: Duration::from_millis(u64::from(c.hello_initial_ms)),
                    max: Duration::from_millis(u64::from(c.hello_max_ms)),
                    attempts: c.hello_attempts,
                    ..defaults
                }
            }
        };
        let keys = NodeKeys::from_secrets(&RustCrypto, &ecdh, &signing);
        ecdh.fill(0);
        signing.fill(0);
        let keys = keys.map_err(|_| SIGIL_ERR_INVALID_KEY)?;
        unsafe { sigil_diet_node_end(node) };
        let state = NodeState {
            magic: NODE_MAGIC,
            node: Node::new(RustCrypto, keys, epoch, config),
            expected: [None; SIGIL_DIET_MAX_NEIGHBOURS],
        };
        // SAFETY: `node` is non-NULL, large and aligned enough (asserted), and holds no live
        // state (ended above).
        unsafe { node.cast::<NodeState>().write(state) };
        Ok(())
    })())
}

/// Ends a node: its state, secrets included, is overwritten with zeros and it no longer
/// counts as initialised. Ending a node that is not initialised does nothing.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_node_end(node: *mut sigil_diet_node) -> sigil_status {
    match unsafe { node_state(node) } {
        Ok(state) => {
            let p: *mut NodeState = state;
            // SAFETY: the state was initialised and is dropped once; then its bytes, the
            // caller's memory, are zeroed (the magic with them).
            unsafe {
                core::ptr::drop_in_place(p);
                core::ptr::write_bytes(p.cast::<u8>(), 0, size_of::<NodeState>());
            }
            SIGIL_OK
        }
        Err(SIGIL_ERR_NOT_BOOTED) => SIGIL_OK,
        Err(e) => e,
    }
}

/// The node's identity, I = h(P) of its signing key (RFC 8387 §4): what its neighbours
/// configure for it. 16 bytes into `out` (`out_len` >= 16).
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_node_identity(
    node: *const sigil_diet_node,
    out: *mut u8,
    out_len: usize,
) -> sigil_status {
    status((|| {
        let state = unsafe { node_ref(node) }?;
        let id = identity_of(&state.node.signing_key()).ok_or(SIGIL_ERR_ENCODING)?;
        unsafe { identity_out(&id, out, out_len) }
    })())
}

/// Adds a neighbour from the routing table: `who` is its identity (`who_len` = 16) or its
/// signing public key (`who_len` = 65, an uncompressed P-256 point, taken as its identity
/// I = h(P)). Its handle goes to `neighbour`; map it to the neighbour's address. Its hello
/// goes out at the next `sigil_diet_node_poll_transmit`. Adding an identity again gives the
/// same handle and, unless established, restarts its hellos. `SIGIL_ERR_TABLE_FULL` past
/// `SIGIL_DIET_MAX_NEIGHBOURS`.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_node_add_neighbour(
    node: *mut sigil_diet_node,
    now_ms: u64,
    who: *const u8,
    who_len: usize,
    neighbour: *mut u32,
) -> sigil_status {
    status((|| {
        let state = unsafe { node_state(node) }?;
        let who = unsafe { required(who, who_len, IDENTITY_LEN, SIGIL_DIET_PUBLIC_KEY_LEN) }?;
        let handle = unsafe { out(neighbour) }?;
        let id = match who.len() {
            IDENTITY_LEN => Identity::from_slice(who).ok_or(SIGIL_ERR_BAD_LENGTH)?,
            SIGIL_DIET_PUBLIC_KEY_LEN => {
                let key = PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, who)?;
                identity_of(&key).ok_or(SIGIL_ERR_INVALID_KEY)?
            }
            _ => return Err(SIGIL_ERR_BAD_LENGTH),
        };
        let slot = match state.expected.iter().position(|e| *e == Some(id)) {
            Some(i) => i,
            None => state
                .expected
                .iter()
                .position(Option::is_none)
                .ok_or(SIGIL_ERR_TABLE_FULL)?,
        };
        state
            .node
            .add_neighbour(Instant::from_millis(now_ms), slot as u32)?;
        state.expected[slot] = Some(id);
        *handle = slot as u32;
        Ok(())
    })())
}

/// Feeds one datagram (`len` >= 1 bytes) that arrived at `now_ms` (the caller's clock, as for
/// `sigil_diet_node_poll_transmit`) from neighbour `from` (a handle, or
/// `SIGIL_DIET_UNKNOWN_NEIGHBOUR` for an address no neighbour has). A message's plaintext
/// goes to `plain` (`plain_cap` bytes; a data datagram of n bytes needs n -
/// `SIGIL_DIET_OVERHEAD`, else `SIGIL_ERR_SHORT_BUFFER` and nothing is done; NULL with 0 when
/// no plaintext is wanted). What it was goes to `received`. A refused datagram (replayed,
/// altered, from an unknown node, ...) is counted and is still `SIGIL_OK`. An answer to a
/// hello goes out at the next `sigil_diet_node_poll_transmit`.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_node_handle(
    node: *mut sigil_diet_node,
    now_ms: u64,
    from: u32,
    datagram: *const u8,
    len: usize,
    plain: *mut u8,
    plain_cap: usize,
    received: *mut sigil_diet_received,
) -> sigil_status {
    status((|| {
        let state = unsafe { node_state(node) }?;
        let data = unsafe { required(datagram, len, 1, usize::MAX) }?;
        let received = unsafe { out(received) }?;
        if from != SIGIL_DIET_UNKNOWN_NEIGHBOUR {
            handle_of(state, from)?;
        }
        let plain: &mut [u8] = if plain_cap == 0 {
            &mut []
        } else {
            unsafe { output(plain, plain_cap, plain_cap) }?
        };
        if data[0] == wire::DATA
            && data.len() >= SIGIL_DIET_OVERHEAD
            && plain.len() < data.len() - SIGIL_DIET_OVERHEAD
        {
            return Err(SIGIL_ERR_SHORT_BUFFER);
        }
        let NodeState { node, expected, .. } = state;
        let trusted = |from: &u32, key: &PublicKey| match expected.get(*from as usize) {
            Some(Some(want)) => identity_of(key) == Some(*want),
            _ => false,
        };
        let r = node.handle(Instant::from_millis(now_ms), from, data, trusted, plain);
        *received = match r {
            Ok(Received::Hello { new_keys } | Received::Moved { new_keys }) => {
                sigil_diet_received {
                    outcome: sigil_diet_outcome::SIGIL_DIET_HELLO,
                    new_keys,
                    len: 0,
                    refusal: sigil_diet_refusal::SIGIL_DIET_REFUSED_NONE,
                }
            }
            Ok(Received::Challenged) => sigil_diet_received {
                outcome: sigil_diet_outcome::SIGIL_DIET_CHALLENGED,
                new_keys: false,
                len: 0,
                refusal: sigil_diet_refusal::SIGIL_DIET_REFUSED_NONE,
            },
            Ok(Received::Message { len }) => sigil_diet_received {
                outcome: sigil_diet_outcome::SIGIL_DIET_MESSAGE,
                new_keys: false,
                len,
                refusal: sigil_diet_refusal::SIGIL_DIET_REFUSED_NONE,
            },
            Err(e) => sigil_diet_received {
                outcome: sigil_diet_outcome::SIGIL_DIET_REFUSED,
                new_keys: false,
                len: 0,
                refusal: refusal(e),
            },
        };
        Ok(())
    })())
}

fn refusal(e: Error) -> sigil_diet_refusal {
    use sigil_diet_refusal::*;
    match e {
        Error::Malformed => SIGIL_DIET_REFUSED_MALFORMED,
        Error::Untrusted => SIGIL_DIET_REFUSED_UNTRUSTED,
        Error::Reflected => SIGIL_DIET_REFUSED_REFLECTED,
        Error::BadSignature => SIGIL_DIET_REFUSED_BAD_SIGNATURE,
        Error::BadTag => SIGIL_DIET_REFUSED_BAD_TAG,
        Error::NoSession => SIGIL_DIET_REFUSED_NO_SESSION,
        Error::Replay => SIGIL_DIET_REFUSED_REPLAY,
        Error::StaleHello => SIGIL_DIET_REFUSED_STALE_HELLO,
        Error::TableFull => SIGIL_DIET_REFUSED_TABLE_FULL,
        Error::Budget => SIGIL_DIET_REFUSED_BUDGET,
        _ => SIGIL_DIET_REFUSED_OTHER,
    }
}

/// Takes the next datagram due at `now_ms` (a hello, a repeated hello or the answer to one)
/// into `buf` (`cap` >= `SIGIL_DIET_HELLO_LEN`): its length to `len` (0 when nothing is due)
/// and the neighbour to send it to to `to`. Call it until `len` is 0.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_node_poll_transmit(
    node: *mut sigil_diet_node,
    now_ms: u64,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
    to: *mut u32,
) -> sigil_status {
    status((|| {
        let state = unsafe { node_state(node) }?;
        let len = unsafe { out(len) }?;
        let to = unsafe { out(to) }?;
        let buf = unsafe { output(buf, cap, SIGIL_DIET_HELLO_LEN) }?;
        match state.node.poll_transmit(Instant::from_millis(now_ms), buf) {
            Some(t) => {
                *len = t.len;
                *to = t.to;
            }
            None => *len = 0,
        }
        Ok(())
    })())
}

/// When to call `sigil_diet_node_poll_transmit` next if nothing arrives (milliseconds on the
/// caller's clock), or `SIGIL_NEVER`.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_node_poll_timeout(
    node: *const sigil_diet_node,
    at_ms: *mut u64,
) -> sigil_status {
    status((|| {
        let state = unsafe { node_ref(node) }?;
        *unsafe { out(at_ms) }? = state
            .node
            .poll_timeout()
            .map_or(crate::device::SIGIL_NEVER, Instant::as_millis);
        Ok(())
    })())
}

/// Phase 3, sending: encrypts `plain` (`plain_len` bytes, NULL with 0 for none) for the
/// established neighbour `to` and signs the result into `out` (`out_cap` >= `plain_len` +
/// `SIGIL_DIET_OVERHEAD`); the datagram's length goes to `len`. Send it to `to`'s address.
/// `SIGIL_ERR_NO_SESSION` before the neighbour's hello arrived.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_node_send(
    node: *mut sigil_diet_node,
    to: u32,
    plain: *const u8,
    plain_len: usize,
    out: *mut u8,
    out_cap: usize,
    len: *mut usize,
) -> sigil_status {
    status((|| {
        let state = unsafe { node_state(node) }?;
        let to = handle_of(state, to)?;
        let plain = unsafe { input(plain, plain_len) }?;
        let len = unsafe { crate::ffi::out(len) }?;
        let need = plain
            .len()
            .checked_add(SIGIL_DIET_OVERHEAD)
            .ok_or(SIGIL_ERR_BAD_LENGTH)?;
        let buf = unsafe { output(out, out_cap, need) }?;
        *len = state.node.seal(&to, plain, buf)?;
        Ok(())
    })())
}

/// The phase of neighbour `neighbour` into `phase`.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_node_phase(
    node: *const sigil_diet_node,
    neighbour: u32,
    phase: *mut sigil_diet_phase,
) -> sigil_status {
    status((|| {
        let state = unsafe { node_ref(node) }?;
        let handle = handle_of(state, neighbour)?;
        let phase = unsafe { out(phase) }?;
        *phase = match state.node.phase(&handle) {
            Some(Phase::Established) => sigil_diet_phase::SIGIL_DIET_ESTABLISHED,
            Some(Phase::Unreachable) => sigil_diet_phase::SIGIL_DIET_UNREACHABLE,
            _ => sigil_diet_phase::SIGIL_DIET_HANDSHAKE,
        };
        Ok(())
    })())
}

/// The node's counters into `counters`: what it sent and accepted, and what it refused, by
/// reason.
#[no_mangle]
pub unsafe extern "C" fn sigil_diet_node_counters(
    node: *const sigil_diet_node,
    counters: *mut sigil_diet_counters,
) -> sigil_status {
    status((|| {
        let c = *unsafe { node_ref(node) }?.node.counters();
        *unsafe { out(counters) }? = sigil_diet_counters {
            hellos_sent: c.hellos_sent,
            hellos_accepted: c.hellos_accepted,
            messages_sent: c.messages_sent,
            messages_accepted: c.messages_accepted,
            malformed: c.malformed,
            untrusted: c.untrusted,
            reflected: c.reflected,
            bad_signature: c.bad_signature,
            bad_tag: c.bad_tag,
            no_session: c.no_session,
            replayed: c.replayed,
            stale_hellos: c.stale_hellos,
            table_full: c.table_full,
            other: c.other,
            refused: c.refused(),
            over_budget: c.over_budget,
            challenged: c.challenged,
            challenges_sent: c.challenges_sent,
            moved: c.moved,
        };
        Ok(())
    })())
}
