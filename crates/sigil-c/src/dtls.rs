//! The DTLS 1.2 client of `sigil-dtls` (RFC 6347, RFC 7925 profile) behind C calls, sans-IO
//! like the device: records in through `sigil_dtls_handle_datagram`, records out through
//! `sigil_dtls_poll_transmit`, application datagrams in through `sigil_dtls_send` and out
//! through `sigil_dtls_recv`, time through `sigil_dtls_handle_timeout` and
//! `sigil_dtls_poll_timeout`. The state lives in the caller's memory.
//!
//! A device's CoAP datagrams go through it one record each (RFC 7252 §9.1): device
//! `poll_transmit` → `sigil_dtls_send` → `sigil_dtls_poll_transmit` → socket, and socket →
//! `sigil_dtls_handle_datagram` → `sigil_dtls_recv` → device `handle_datagram`.

use crate::device::{sigil_platform, PlatformRng, SIGIL_NEVER};
use crate::ffi::{out, output, reference, required, status, CResult};
use crate::identity::{algorithm, SIGIL_IDENTITY_LEN, SIGIL_SECRET_KEY_LEN};
use crate::status::sigil_status::{self, *};
use core::mem::{align_of, size_of};
use core::time::Duration;
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey};
use sigil_dtls::{Config, Connection, Credentials, Error, State as DtlsState, Trust};
use sigil_identity::Identity;
use sigil_time::Instant;

/// Largest record datagram the client sends or takes: `sigil_dtls_poll_transmit` needs a
/// buffer of at least this many bytes.
pub const SIGIL_DTLS_MAX_DATAGRAM: usize = 1400;
/// Largest application datagram in one record: `sigil_dtls_send` takes at most this many
/// bytes, and `sigil_dtls_recv` needs a buffer of at least this many.
pub const SIGIL_DTLS_MAX_APP_DATA: usize = 1024;
/// Longest PSK identity (RFC 4279 §5.3 allows 2^16 - 1; the RFC 7925 profile keeps it short).
pub const SIGIL_DTLS_MAX_PSK_IDENTITY: usize = 128;
/// Longest pre-shared key.
pub const SIGIL_DTLS_MAX_PSK: usize = 64;

/// Size of [`sigil_dtls_client`] in 8-byte words: room for the client on every target and in
/// every build of the library (checked below at compile time), including one where a
/// workspace build compiles `sigil-dtls` with X.509 and its larger handshake buffers.
pub const SIGIL_DTLS_CLIENT_WORDS: usize = 2176;
/// Size of [`sigil_dtls_client`] in bytes (17,408): the handshake's transcript, reassembly,
/// flight and send/receive queues are fixed buffers inside it.
pub const SIGIL_DTLS_CLIENT_SIZE: usize = 8 * SIGIL_DTLS_CLIENT_WORDS;
/// Bytes the client needs in the library's own builds (`cargo build -p sigil-c`, any target:
/// `sigil-dtls` without X.509), checked at compile time. A device may give
/// `sigil_dtls_connect` this much 8-byte-aligned memory instead of a whole
/// `sigil_dtls_client`; `sigil_dtls_client_size` says what the linked build needs.
pub const SIGIL_DTLS_CLIENT_COMPACT_SIZE: usize = 8192;

/// The cipher suites the client can offer (one per connection).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sigil_dtls_suite {
    /// TLS_PSK_WITH_AES_128_CCM_8 (RFC 6655; mandatory for CoAP, RFC 7252 §9.1.3.1).
    SIGIL_DTLS_PSK_CCM8 = 1,
    /// TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256 (RFC 8442): the PSK authenticates an
    /// ephemeral P-256 exchange (forward secrecy). Needs the `p256` feature.
    SIGIL_DTLS_ECDHE_PSK_CCM8 = 2,
    /// TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 (RFC 7251) with raw public keys (RFC 7250): the
    /// server's key must hash to the pinned identity; the client authenticates with its own
    /// key when it has one. Needs the `p256` feature.
    SIGIL_DTLS_ECDHE_ECDSA_CCM8 = 3,
}

/// Where a connection is, from `sigil_dtls_get_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sigil_dtls_state {
    /// Not connected: never connected, or ended by `sigil_dtls_end`.
    SIGIL_DTLS_IDLE = 0,
    /// The handshake is in progress.
    SIGIL_DTLS_HANDSHAKING = 1,
    /// The handshake completed: application data flows.
    SIGIL_DTLS_ESTABLISHED = 2,
    /// A close_notify was sent (`sigil_dtls_close`) or received: nothing more flows.
    SIGIL_DTLS_CLOSED = 3,
    /// A fatal alert was sent or received, or the handshake timed out.
    SIGIL_DTLS_FAILED = 4,
}

/// How the client connects; start from `sigil_dtls_config_default`. The pointers need to
/// stay valid only during `sigil_dtls_connect` (the client keeps copies).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sigil_dtls_config {
    /// The suite to offer (a `sigil_dtls_suite`).
    pub suite: u32,
    /// PSK suites: the identity (1 to `SIGIL_DTLS_MAX_PSK_IDENTITY` bytes) and the key (1 to
    /// `SIGIL_DTLS_MAX_PSK` bytes). Sigil's server takes the device identity in hex as the
    /// PSK identity (`sigil provision psk`).
    pub psk_identity: *const u8,
    pub psk_identity_len: usize,
    pub psk: *const u8,
    pub psk_len: usize,
    /// ECDHE-ECDSA: the identity (`SIGIL_IDENTITY_LEN` bytes, I = h(P), RFC 8387 §4) the
    /// server's raw public key must hash to, as `sigil server` prints it. Required.
    pub server_identity: *const u8,
    /// ECDHE-ECDSA: this client's own secret key (`own_alg`, a `sigil_alg`, and
    /// `SIGIL_SECRET_KEY_LEN` bytes, e.g. the device key record's), used when the server
    /// asks the client to authenticate. NULL: the client stays anonymous.
    pub own_alg: u32,
    pub own_secret: *const u8,
    /// Initial retransmission timeout in milliseconds (RFC 6347 §4.2.4.1), at least 1.
    pub initial_timeout_ms: u32,
    /// Largest timeout after doubling, in milliseconds, at least `initial_timeout_ms`.
    pub max_timeout_ms: u32,
    /// Retransmissions of a flight before the handshake fails.
    pub max_retransmissions: u32,
    /// Largest record datagram to send (handshake messages are fragmented to it; the
    /// ClientHello goes whole): 256 to `SIGIL_DTLS_MAX_DATAGRAM`.
    pub pmtu: u32,
    /// Offer the connection_id extension (RFC 9146): the server's ID goes into every
    /// protected record, so the session survives an address change.
    pub connection_id: bool,
}

/// The client at a glance, from `sigil_dtls_get_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sigil_dtls_info {
    pub state: sigil_dtls_state,
    /// `state == SIGIL_DTLS_ESTABLISHED`.
    pub established: bool,
    /// The alert description (RFC 5246 §7.2) that ended the connection, or 0 (also
    /// close_notify's own value) when none did.
    pub alert: u8,
    /// The alert came from the server (otherwise this side sent it).
    pub alert_from_peer: bool,
    /// The handshake failed because the server stopped answering.
    pub timed_out: bool,
    /// Records dropped: bad MAC, replays, unknown epochs, malformed, or a full queue.
    pub dropped: u32,
}

/// The DTLS client state: opaque, owned by the caller, `SIGIL_DTLS_CLIENT_SIZE` bytes aligned
/// to 8 (or smaller memory of the size `sigil_dtls_client_size` says, see
/// `SIGIL_DTLS_CLIENT_COMPACT_SIZE`). It may be static or on the stack; it holds no pointers
/// into itself.
#[repr(C)]
pub struct sigil_dtls_client {
    opaque: [u64; SIGIL_DTLS_CLIENT_WORDS],
}

const MAGIC: u64 = 0x5349_4749_4c44_544c; // "SIGILDTL"

/// What the client trusts: the server's raw public key when it hashes to the pinned identity
/// (ECDHE-ECDSA); nothing for PSK suites (the configured key is the trust).
struct PinnedServer(Option<Identity>);

impl Trust for PinnedServer {
    fn trusted_key(&self, key: &PublicKey) -> bool {
        self.0
            .is_some_and(|id| Identity::of_key(&RustCrypto, key, b"").is_ok_and(|k| k == id))
    }
}

/// `repr(C)`: `magic` comes first, where `ffi::live` reads it.
#[repr(C)]
struct State {
    magic: u64,
    conn: Connection<RustCrypto, PinnedServer>,
}

const _: () = assert!(SIGIL_DTLS_MAX_DATAGRAM == sigil_dtls::MAX_DATAGRAM);
const _: () = assert!(SIGIL_DTLS_MAX_APP_DATA == sigil_dtls::MAX_APP_DATA);
const _: () = assert!(SIGIL_DTLS_MAX_PSK == sigil_dtls::keys::MAX_PSK_LEN);
const _: () = assert!(size_of::<State>() <= size_of::<sigil_dtls_client>());
// Without X.509, `sigil-dtls` sizes a handshake message for raw public keys (512 bytes).
const _: () = assert!(
    sigil_dtls::flight::MAX_MESSAGE != 512 || size_of::<State>() <= SIGIL_DTLS_CLIENT_COMPACT_SIZE
);
const _: () = assert!(align_of::<State>() <= align_of::<sigil_dtls_client>());

impl crate::ffi::Tagged for State {
    const MAGIC: u64 = MAGIC;
    const NOT_LIVE: sigil_status = SIGIL_ERR_DTLS_NOT_CONNECTED;
}

unsafe fn state<'a>(c: *mut sigil_dtls_client) -> CResult<&'a mut State> {
    // SAFETY: a `sigil_dtls_client`, or at least the size `sigil_dtls_client_size` says (the C contract), which `sigil_dtls_connect` fills.
    unsafe { crate::ffi::live_mut(c) }
}

unsafe fn state_ref<'a>(c: *const sigil_dtls_client) -> CResult<&'a State> {
    // SAFETY: as for `state`; only read.
    unsafe { crate::ffi::live_ref(c) }
}

/// A connection error as a status: the connection has failed (see `sigil_dtls_get_info`).
fn failed(e: Error) -> sigil_status {
    match e {
        Error::Crypto(c) => c.into(),
        _ => SIGIL_ERR_DTLS_FAILED,
    }
}

/// Fills `cfg` with the defaults: TLS_PSK_WITH_AES_128_CCM_8 with no identity or key yet
/// (set them), a 1 s initial timeout doubling up to 60 s, 7 retransmissions, a PMTU of
/// 1,152 bytes, no connection ID.
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_config_default(cfg: *mut sigil_dtls_config) -> sigil_status {
    status((|| {
        let cfg = unsafe { out(cfg) }?;
        let d = Config::default();
        *cfg = sigil_dtls_config {
            suite: sigil_dtls_suite::SIGIL_DTLS_PSK_CCM8 as u32,
            psk_identity: core::ptr::null(),
            psk_identity_len: 0,
            psk: core::ptr::null(),
            psk_len: 0,
            server_identity: core::ptr::null(),
            own_alg: 0,
            own_secret: core::ptr::null(),
            initial_timeout_ms: d.initial_timeout.as_millis() as u32,
            max_timeout_ms: d.max_timeout.as_millis() as u32,
            max_retransmissions: d.max_retransmissions,
            pmtu: d.pmtu as u32,
            connection_id: false,
        };
        Ok(())
    })())
}

fn dtls_config(c: &sigil_dtls_config) -> CResult<Config> {
    if c.initial_timeout_ms == 0
        || c.max_timeout_ms < c.initial_timeout_ms
        || !(256..=SIGIL_DTLS_MAX_DATAGRAM as u32).contains(&c.pmtu)
    {
        return Err(SIGIL_ERR_CONFIG);
    }
    Ok(Config {
        initial_timeout: Duration::from_millis(u64::from(c.initial_timeout_ms)),
        max_timeout: Duration::from_millis(u64::from(c.max_timeout_ms)),
        max_retransmissions: c.max_retransmissions,
        pmtu: c.pmtu as usize,
        connection_id: c.connection_id,
        ..Config::default()
    })
}

/// The bytes of memory this build of the library needs for a client (at most
/// `SIGIL_DTLS_CLIENT_SIZE`; at most `SIGIL_DTLS_CLIENT_COMPACT_SIZE` in its own builds).
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_client_size(size: *mut usize) -> sigil_status {
    status((|| {
        *unsafe { out(size) }? = size_of::<State>();
        Ok(())
    })())
}

/// Starts a handshake into `client` (`client_size` bytes: `sizeof(sigil_dtls_client)`, or at
/// least what `sigil_dtls_client_size` says, aligned to 8) at
/// `now_ms` (the caller's monotonic clock): the ClientHello is queued, so drain
/// `sigil_dtls_poll_transmit` next. `platform`'s `rng` makes the client random and the
/// ephemeral keys (only `rng` is used; it is not kept). A client connected before is ended
/// first. Refused: a PSK identity or key of the wrong length (`SIGIL_ERR_BAD_LENGTH`), an
/// unknown suite or key algorithm (`SIGIL_ERR_BAD_ARGUMENT`), a suite this build lacks
/// (`SIGIL_ERR_UNSUPPORTED`), bad timers or PMTU (`SIGIL_ERR_CONFIG`), an own key that is not
/// a valid key (`SIGIL_ERR_INVALID_KEY`), a failed generator (`SIGIL_ERR_RNG`).
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_connect(
    client: *mut sigil_dtls_client,
    client_size: usize,
    cfg: *const sigil_dtls_config,
    platform: *const sigil_platform,
    now_ms: u64,
) -> sigil_status {
    status((|| {
        if client.is_null() {
            return Err(SIGIL_ERR_NULL);
        }
        if client_size < size_of::<State>() {
            return Err(SIGIL_ERR_BAD_LENGTH);
        }
        let c = unsafe { reference(cfg) }?;
        let platform = unsafe { reference(platform) }?;
        if platform.rng.is_none() {
            return Err(SIGIL_ERR_NULL);
        }
        let config = dtls_config(c)?;
        let psk = |c: &sigil_dtls_config| -> CResult<(&[u8], &[u8])> {
            let id = unsafe {
                required(
                    c.psk_identity,
                    c.psk_identity_len,
                    1,
                    SIGIL_DTLS_MAX_PSK_IDENTITY,
                )
            }?;
            let key = unsafe { required(c.psk, c.psk_len, 1, SIGIL_DTLS_MAX_PSK) }?;
            Ok((id, key))
        };
        let own: Option<SecretKey>;
        let mut pinned = None;
        let credentials = match c.suite {
            1 => {
                let (identity, key) = psk(c)?;
                Credentials::Psk { identity, key }
            }
            2 | 3 if !cfg!(feature = "p256") => return Err(SIGIL_ERR_UNSUPPORTED),
            2 => {
                let (identity, key) = psk(c)?;
                Credentials::EcdhePsk { identity, key }
            }
            3 => {
                let id = unsafe {
                    required(c.server_identity, SIGIL_IDENTITY_LEN, 1, SIGIL_IDENTITY_LEN)
                }?;
                pinned = Identity::from_slice(id);
                own = match c.own_secret.is_null() {
                    true => None,
                    false => {
                        let alg = algorithm(c.own_alg)?;
                        let bytes = unsafe {
                            required(c.own_secret, SIGIL_SECRET_KEY_LEN, 1, SIGIL_SECRET_KEY_LEN)
                        }?;
                        let key = SecretKey::from_bytes(alg, bytes)?;
                        // A key that cannot sign is refused now, not in the handshake.
                        RustCrypto.public_key(&key)?;
                        Some(key)
                    }
                };
                Credentials::RawPublicKey(own.as_ref())
            }
            _ => return Err(SIGIL_ERR_BAD_ARGUMENT),
        };
        // A client connected before is ended first (its keys zeroed).
        unsafe { sigil_dtls_end(client) };
        let conn = Connection::connect(
            RustCrypto,
            PinnedServer(pinned),
            config,
            &mut PlatformRng(platform),
            credentials,
            Instant::from_millis(now_ms),
        )
        .map_err(|e| match e {
            Error::Crypto(c) => c.into(),
            Error::BufferTooSmall => SIGIL_ERR_CONFIG,
            _ => SIGIL_ERR_BAD_ARGUMENT,
        })?;
        // SAFETY: `client` is non-NULL, holds `client_size` >= `size_of::<State>()` bytes
        // aligned to 8 (the C contract), and no live state (ended above).
        unsafe { client.cast::<State>().write(State { magic: MAGIC, conn }) };
        Ok(())
    })())
}

/// Ends the client: its keys and buffers are zeroed and `client` no longer counts as
/// connected (send `sigil_dtls_close` first to tell the server). Ending a client that is
/// not connected does nothing.
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_end(client: *mut sigil_dtls_client) -> sigil_status {
    match unsafe { state(client) } {
        Ok(state) => {
            state.magic = 0;
            // SAFETY: the state was connected, and is dropped once: its magic is cleared.
            unsafe { core::ptr::drop_in_place(&mut state.conn) };
            let bytes = client.cast::<u8>();
            for i in 0..size_of::<State>() {
                // SAFETY: inside the caller's `sigil_dtls_client`; volatile so the zeroing of
                // the key material is not optimised away.
                unsafe { bytes.add(i).write_volatile(0) };
            }
            SIGIL_OK
        }
        Err(SIGIL_ERR_DTLS_NOT_CONNECTED) => SIGIL_OK,
        Err(e) => e,
    }
}

/// Feeds one datagram received from the server (`len` >= 1 bytes). Records that fail their
/// checks (bad MAC, replays, garbage) are dropped and counted: still `SIGIL_OK`. After the
/// call, drain `sigil_dtls_poll_transmit` (handshake flights, alerts) and `sigil_dtls_recv`.
/// `SIGIL_ERR_DTLS_FAILED` when the connection has failed or closed (a fatal alert sent or
/// received, close_notify): `sigil_dtls_get_info` says why.
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_handle_datagram(
    client: *mut sigil_dtls_client,
    now_ms: u64,
    datagram: *const u8,
    len: usize,
) -> sigil_status {
    status((|| {
        let state = unsafe { state(client) }?;
        let data = unsafe { required(datagram, len, 1, usize::MAX) }?;
        let now = Instant::from_millis(now_ms);
        state.conn.handle_datagram(now, data).map_err(failed)?;
        match state.conn.failure() {
            Some(_) => Err(SIGIL_ERR_DTLS_FAILED),
            None => Ok(()),
        }
    })())
}

/// Takes the next record datagram to send at `now_ms` into `buf` (`cap` >=
/// `SIGIL_DTLS_MAX_DATAGRAM`) and its length into `len`; `len` is 0 when there is nothing
/// to send. Call it until it is. A flight's retransmission timer starts when its first
/// datagram is taken (RFC 6347 §4.2.4).
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_poll_transmit(
    client: *mut sigil_dtls_client,
    now_ms: u64,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> sigil_status {
    status((|| {
        let state = unsafe { state(client) }?;
        let len = unsafe { out(len) }?;
        let buf = unsafe { output(buf, cap, SIGIL_DTLS_MAX_DATAGRAM) }?;
        *len = state
            .conn
            .poll_transmit(Instant::from_millis(now_ms), buf)
            .unwrap_or(0);
        Ok(())
    })())
}

/// When to call `sigil_dtls_handle_timeout` next (milliseconds on the caller's clock), or
/// `SIGIL_NEVER` (established, or failed).
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_poll_timeout(
    client: *const sigil_dtls_client,
    at_ms: *mut u64,
) -> sigil_status {
    status((|| {
        let state = unsafe { state_ref(client) }?;
        let at = unsafe { out(at_ms) }?;
        *at = state
            .conn
            .poll_timeout()
            .map_or(SIGIL_NEVER, Instant::as_millis);
        Ok(())
    })())
}

/// Advances the handshake's timer to `now_ms`: a flight that got no answer is sent again
/// with a doubled timeout (RFC 6347 §4.2.4.1); drain `sigil_dtls_poll_transmit` after.
/// `SIGIL_ERR_DTLS_FAILED` when the retransmissions are used up (the handshake failed).
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_handle_timeout(
    client: *mut sigil_dtls_client,
    now_ms: u64,
) -> sigil_status {
    status((|| {
        let state = unsafe { state(client) }?;
        state
            .conn
            .handle_timeout(Instant::from_millis(now_ms))
            .map_err(failed)
    })())
}

/// Protects `len` bytes of application data (1 to `SIGIL_DTLS_MAX_APP_DATA`, e.g. one CoAP
/// message) as one record and queues it; drain `sigil_dtls_poll_transmit` after.
/// `SIGIL_ERR_DTLS_NOT_ESTABLISHED` before the handshake completed and after the connection
/// ended; `SIGIL_ERR_BUSY` when the send queue is full (drain it first).
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_send(
    client: *mut sigil_dtls_client,
    data: *const u8,
    len: usize,
) -> sigil_status {
    status((|| {
        let state = unsafe { state(client) }?;
        let data = unsafe { required(data, len, 1, SIGIL_DTLS_MAX_APP_DATA) }?;
        if !state.conn.is_established() {
            return Err(SIGIL_ERR_DTLS_NOT_ESTABLISHED);
        }
        state.conn.send(data).map_err(|e| match e {
            Error::BufferTooSmall => SIGIL_ERR_BUSY,
            Error::NotEstablished => SIGIL_ERR_DTLS_NOT_ESTABLISHED,
            e => failed(e),
        })
    })())
}

/// Takes the next application datagram the server sent (one record, in arrival order) into
/// `buf` (`cap` >= `SIGIL_DTLS_MAX_APP_DATA`) and its length into `len`; `len` is 0 when
/// none waits.
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_recv(
    client: *mut sigil_dtls_client,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> sigil_status {
    status((|| {
        let state = unsafe { state(client) }?;
        let len = unsafe { out(len) }?;
        let buf = unsafe { output(buf, cap, SIGIL_DTLS_MAX_APP_DATA) }?;
        *len = state.conn.poll_app_data(buf).unwrap_or(0);
        Ok(())
    })())
}

/// Ends an established connection with a close_notify alert (RFC 5246 §7.2.1), queued for
/// `sigil_dtls_poll_transmit`; afterwards nothing is sent or accepted. Then
/// `sigil_dtls_end` zeroes the state. `SIGIL_ERR_DTLS_NOT_ESTABLISHED` if the handshake did
/// not complete or the connection already ended.
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_close(client: *mut sigil_dtls_client) -> sigil_status {
    status((|| {
        let state = unsafe { state(client) }?;
        if !state.conn.is_established() {
            return Err(SIGIL_ERR_DTLS_NOT_ESTABLISHED);
        }
        state.conn.close().map_err(|e| match e {
            Error::NotEstablished => SIGIL_ERR_DTLS_NOT_ESTABLISHED,
            e => failed(e),
        })
    })())
}

/// The client's state into `info`; a client that is not connected is `SIGIL_DTLS_IDLE`
/// (and `SIGIL_OK`).
#[no_mangle]
pub unsafe extern "C" fn sigil_dtls_get_info(
    client: *const sigil_dtls_client,
    info: *mut sigil_dtls_info,
) -> sigil_status {
    use sigil_dtls_state::*;
    status((|| {
        let state = match unsafe { state_ref(client) } {
            Ok(s) => Some(s),
            Err(SIGIL_ERR_DTLS_NOT_CONNECTED) => None,
            Err(e) => return Err(e),
        };
        let info = unsafe { out(info) }?;
        let mut i = sigil_dtls_info {
            state: SIGIL_DTLS_IDLE,
            established: false,
            alert: 0,
            alert_from_peer: false,
            timed_out: false,
            dropped: 0,
        };
        if let Some(s) = state {
            i.dropped = s.conn.dropped();
            i.state = match s.conn.state() {
                DtlsState::Established => SIGIL_DTLS_ESTABLISHED,
                DtlsState::Failed(Error::PeerAlert(0)) => SIGIL_DTLS_CLOSED,
                DtlsState::Failed(e) => {
                    match e {
                        Error::PeerAlert(a) => {
                            i.alert = a;
                            i.alert_from_peer = true;
                        }
                        Error::HandshakeTimeout => i.timed_out = true,
                        e => i.alert = e.alert().map_or(0, |a| a.0),
                    }
                    SIGIL_DTLS_FAILED
                }
                _ => SIGIL_DTLS_HANDSHAKING,
            };
            i.established = i.state == SIGIL_DTLS_ESTABLISHED;
        }
        *info = i;
        Ok(())
    })())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    /// The header's size holds the client with every suite and X.509 compiled in (a
    /// workspace build unifies `sigil-dtls`'s features, as this test build does); the real
    /// size is printed for the docs. The compact size is asserted at compile time.
    #[test]
    fn the_client_state_fits_its_header_size() {
        std::println!(
            "sigil_dtls_client: state {} bytes of {SIGIL_DTLS_CLIENT_SIZE}",
            size_of::<State>()
        );
        assert!(size_of::<State>() <= SIGIL_DTLS_CLIENT_SIZE);
    }
}
