//! The sensor (`sigil-device`) behind C calls: boot from the caller's storage, then feed it
//! time and datagrams and drain what it sends. The state lives in the caller's memory.

use crate::ffi::{input, out, output, reference, required, status, write_opt, CResult};
use crate::identity::{
    alg_value, algorithm, identity_out, public_keys, sigil_key, SIGIL_MAX_GROUP,
};
use crate::reading::{records, sigil_record};
use crate::status::sigil_status::{self, *};
use ::sigil_device::{Device, DeviceConfig, DeviceStorage, Event, PublishOutcome};
use core::ffi::c_void;
use core::mem::{align_of, size_of};
use core::time::Duration;
use sigil_crypto::{CryptoError, PublicKey, Rng, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_objects::ReadingFormat;
use sigil_time::{Instant, UnixTime};

/// Largest datagram the device sends or accepts; `sigil_device_poll_transmit` needs a
/// buffer of at least this many bytes.
pub const SIGIL_MAX_DATAGRAM: usize = 512;
/// Longest other information O in I = h(P|O) a device takes.
pub const SIGIL_MAX_OTHER_INFO: usize = 32;
/// `sigil_device_poll_timeout` when nothing is scheduled.
pub const SIGIL_NEVER: u64 = 0xFFFF_FFFF_FFFF_FFFF;
/// Storage record: the device key (1 byte algorithm, a `sigil_alg` value, then 32 secret
/// bytes).
pub const SIGIL_SLOT_KEY: u32 = 0;
pub const SIGIL_KEY_RECORD_LEN: usize = 33;
/// Storage record: the end of the sequence numbers reserved so far (8 bytes, big-endian).
pub const SIGIL_SLOT_SEQUENCE: u32 = 1;
pub const SIGIL_SEQUENCE_RECORD_LEN: usize = 8;

/// Size of [`sigil_device`] in 8-byte words: room for the state on every target the library
/// builds for (checked below at compile time).
pub const SIGIL_DEVICE_WORDS: usize = 512;
/// Size of [`sigil_device`] in bytes.
pub const SIGIL_DEVICE_SIZE: usize = 8 * SIGIL_DEVICE_WORDS;

/// Reading formats.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sigil_format {
    /// COSE_Sign1 over SenML-CBOR (RFC 9052, RFC 8428).
    SIGIL_FORMAT_COSE = 1,
    /// JWS over SenML-JSON (RFC 7515); only in builds with the `jws` feature.
    SIGIL_FORMAT_JWS = 2,
}

pub(crate) fn reading_format(f: u32) -> CResult<ReadingFormat> {
    match f {
        1 => Ok(ReadingFormat::Cose),
        2 if cfg!(feature = "jws") => Ok(ReadingFormat::Jws),
        2 => Err(SIGIL_ERR_UNSUPPORTED),
        _ => Err(SIGIL_ERR_BAD_ARGUMENT),
    }
}

/// The platform's services, called back during device calls (never later, never from
/// another thread). Each callback gets `ctx` as its first argument.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sigil_platform {
    /// Fills `buf` with `len` bytes from a cryptographically secure generator. Returns 0,
    /// or non-zero on failure.
    pub rng: Option<unsafe extern "C" fn(ctx: *mut c_void, buf: *mut u8, len: usize) -> i32>,
    /// Reads storage record `slot` (`SIGIL_SLOT_*`) into `buf` (`cap` bytes). Returns the
    /// record's length, 0 when it does not exist, or a negative value on failure.
    pub storage_read:
        Option<unsafe extern "C" fn(ctx: *mut c_void, slot: u32, buf: *mut u8, cap: usize) -> i32>,
    /// Writes storage record `slot` durably (it must be there after a power loss once this
    /// returns); `len` 0 erases it. Returns 0, or non-zero on failure.
    pub storage_write: Option<
        unsafe extern "C" fn(ctx: *mut c_void, slot: u32, buf: *const u8, len: usize) -> i32,
    >,
    /// Passed to every callback.
    pub ctx: *mut c_void,
}

/// How the device behaves; start from `sigil_device_config_default`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sigil_device_config {
    /// Algorithm of the key generated at first boot (a `sigil_alg`); a stored key keeps its
    /// own.
    pub alg: u32,
    /// Reading format (a `sigil_format`).
    pub format: u32,
    /// Registration lifetime in seconds (RFC 9176 `lt`), at least 1.
    pub lifetime_secs: u32,
    /// Send only this many low bits of the sequence number (1 to 32, COSE only); 0 sends it
    /// whole (RFC 8387 §8.2).
    pub lsb_bits: u8,
    /// Publish every n-th reading Confirmable (1: all; 0: none).
    pub confirm_every: u32,
    /// Sequence numbers reserved per storage write (at least 1).
    pub sequence_block: u32,
}

/// The device state: opaque, owned by the caller, `SIGIL_DEVICE_SIZE` bytes aligned to 8.
/// It may be static or on the stack; it holds no pointers into itself.
#[repr(C)]
pub struct sigil_device {
    opaque: [u64; SIGIL_DEVICE_WORDS],
}

/// Kinds of [`sigil_event`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sigil_event_kind {
    /// No event is waiting.
    SIGIL_EVENT_NONE = 0,
    /// Registered (or registered again) with the Resource Directory.
    SIGIL_EVENT_REGISTERED = 1,
    /// The registration's lifetime was refreshed.
    SIGIL_EVENT_REGISTRATION_REFRESHED = 2,
    /// The directory refused the registration with `code`; it is retried later.
    SIGIL_EVENT_REGISTRATION_FAILED = 3,
    /// Reading `seq` was acknowledged (stored by the broker).
    SIGIL_EVENT_ACKNOWLEDGED = 4,
    /// Non-confirmable reading `seq` was sent.
    SIGIL_EVENT_SENT = 5,
    /// The broker refused reading `seq` with `code`.
    SIGIL_EVENT_REJECTED = 6,
    /// The broker answered reading `seq` with Reset; it is published again under a new number.
    SIGIL_EVENT_RESET = 7,
    /// The broker refused reading `seq` with `code` (4.04 or 4.15); the device registers
    /// again and publishes it again.
    SIGIL_EVENT_REPUBLISHING = 8,
    /// The broker could not store reading `seq` now (`code` 5.03, or another server error
    /// such as 5.00); it is published again after `retry_after_secs`.
    SIGIL_EVENT_DEFERRED = 9,
    /// Reading `seq` got no answer after every retransmission.
    SIGIL_EVENT_TIMED_OUT = 10,
    /// The broker answered with Reset: the device registers again with its current number.
    SIGIL_EVENT_RESYNCHRONISING = 11,
}

/// What happened, from `sigil_device_poll_event`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sigil_event {
    pub kind: sigil_event_kind,
    /// The CoAP response code (class << 5 | detail, RFC 7252 §3), or 0.
    pub code: u8,
    pub retry_after_secs: u32,
    /// The reading's sequence number, or 0.
    pub seq: u64,
}

/// The device at a glance, from `sigil_device_get_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct sigil_device_info {
    pub registered: bool,
    /// A new reading can be published now.
    pub can_publish: bool,
    /// A refused reading waits to be published again.
    pub pending_republication: bool,
    /// The sequence number the next signed message carries.
    pub next_sequence: u64,
    pub malformed: u32,
    pub retransmissions: u32,
    pub unexpected: u32,
}

const MAGIC: u64 = 0x5349_4749_4c44_4556; // "SIGILDEV"

/// `repr(C)`: `magic` comes first, where `ffi::live` reads it.
#[repr(C)]
struct State {
    magic: u64,
    platform: sigil_platform,
    device: Device<RustCrypto>,
}

// The header's values are the cores' (cbindgen copies literals only).
const _: () = assert!(SIGIL_MAX_DATAGRAM == ::sigil_device::MAX_DATAGRAM);
const _: () = assert!(SIGIL_MAX_OTHER_INFO == ::sigil_device::MAX_OTHER_INFO);

// The header's size and alignment hold the state on every target.
const _: () = assert!(size_of::<State>() <= size_of::<sigil_device>());
const _: () = assert!(align_of::<State>() <= align_of::<sigil_device>());

/// The platform's storage callbacks as the device's storage.
struct Storage<'a>(&'a sigil_platform);

impl Storage<'_> {
    fn read(&mut self, slot: u32, buf: &mut [u8]) -> Result<usize, ()> {
        let read = self.0.storage_read.ok_or(())?;
        // SAFETY: `buf` is writable for its length; the callback is the integrator's.
        let n = unsafe { read(self.0.ctx, slot, buf.as_mut_ptr(), buf.len()) };
        usize::try_from(n).map_err(|_| ())
    }

    fn write(&mut self, slot: u32, buf: &[u8]) -> Result<(), ()> {
        let write = self.0.storage_write.ok_or(())?;
        // SAFETY: as for `read`.
        match unsafe { write(self.0.ctx, slot, buf.as_ptr(), buf.len()) } {
            0 => Ok(()),
            _ => Err(()),
        }
    }
}

impl DeviceStorage for Storage<'_> {
    type Error = ();
    fn load_key(&mut self) -> Result<Option<SecretKey>, ()> {
        let mut buf = [0u8; SIGIL_KEY_RECORD_LEN];
        match self.read(SIGIL_SLOT_KEY, &mut buf)? {
            0 => Ok(None),
            SIGIL_KEY_RECORD_LEN => {
                let alg = algorithm(u32::from(buf[0])).map_err(|_| ())?;
                SecretKey::from_bytes(alg, &buf[1..])
                    .map(Some)
                    .map_err(|_| ())
            }
            _ => Err(()),
        }
    }
    fn store_key(&mut self, key: &SecretKey) -> Result<(), ()> {
        let mut buf = [0u8; SIGIL_KEY_RECORD_LEN];
        buf[0] = alg_value(key.algorithm()) as u8;
        buf[1..].copy_from_slice(&key.to_bytes());
        let r = self.write(SIGIL_SLOT_KEY, &buf);
        buf.fill(0);
        r
    }
    fn load_reservation(&mut self) -> Result<Option<u64>, ()> {
        let mut buf = [0u8; SIGIL_SEQUENCE_RECORD_LEN];
        match self.read(SIGIL_SLOT_SEQUENCE, &mut buf)? {
            0 => Ok(None),
            SIGIL_SEQUENCE_RECORD_LEN => Ok(Some(u64::from_be_bytes(buf))),
            _ => Err(()),
        }
    }
    fn store_reservation(&mut self, v: u64) -> Result<(), ()> {
        self.write(SIGIL_SLOT_SEQUENCE, &v.to_be_bytes())
    }
    fn erase(&mut self) -> Result<(), ()> {
        self.write(SIGIL_SLOT_KEY, &[])?;
        self.write(SIGIL_SLOT_SEQUENCE, &[])
    }
}

pub(crate) struct PlatformRng<'a>(pub(crate) &'a sigil_platform);

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

impl crate::ffi::Tagged for State {
    const MAGIC: u64 = MAGIC;
    const NOT_LIVE: sigil_status = SIGIL_ERR_NOT_BOOTED;
}

unsafe fn state<'a>(dev: *mut sigil_device) -> CResult<&'a mut State> {
    // SAFETY: a `sigil_device` (the C contract), which `sigil_device_boot` fills.
    unsafe { crate::ffi::live_mut(dev) }
}

unsafe fn state_ref<'a>(dev: *const sigil_device) -> CResult<&'a State> {
    // SAFETY: as for `state`; only read.
    unsafe { crate::ffi::live_ref(dev) }
}

/// Fills `cfg` with the defaults: Ed25519, COSE, a 300 s lifetime, whole sequence numbers,
/// every reading Confirmable, 64 numbers reserved per storage write.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_config_default(
    cfg: *mut sigil_device_config,
) -> sigil_status {
    status((|| {
        let cfg = unsafe { out(cfg) }?;
        *cfg = sigil_device_config {
            alg: crate::identity::sigil_alg::SIGIL_ALG_ED25519 as u32,
            format: sigil_format::SIGIL_FORMAT_COSE as u32,
            lifetime_secs: 300,
            lsb_bits: 0,
            confirm_every: 1,
            sequence_block: 64,
        };
        Ok(())
    })())
}

fn device_config(c: &sigil_device_config) -> CResult<DeviceConfig> {
    let format = reading_format(c.format)?;
    let alg = algorithm(c.alg)?;
    if c.lifetime_secs == 0 || c.sequence_block == 0 || c.lsb_bits > 32 {
        return Err(SIGIL_ERR_CONFIG);
    }
    if c.lsb_bits > 0 && format != ReadingFormat::Cose {
        return Err(SIGIL_ERR_CONFIG);
    }
    Ok(DeviceConfig {
        algorithm: alg,
        format,
        lifetime: Duration::from_secs(u64::from(c.lifetime_secs)),
        lsb_bits: (c.lsb_bits > 0).then_some(c.lsb_bits),
        confirm_every: c.confirm_every,
        sequence_block: u64::from(c.sequence_block),
        ..DeviceConfig::default()
    })
}

/// Boots a device into `dev` (`dev_size` = `sizeof(sigil_device)`): loads its key from the
/// platform's storage or, on first boot, generates one with the platform's randomness and
/// stores it (RFC 8387 §4); reserves sequence numbers in storage. `group` lists the public
/// keys of the other members of its kit (`group_count`, 0 for none, at most
/// `SIGIL_MAX_GROUP` - 1); `other` is O in I = h(P|O) (`other_len` <= `SIGIL_MAX_OTHER_INFO`).
/// `platform` is copied; its `ctx` must stay valid until `sigil_device_end`.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_boot(
    dev: *mut sigil_device,
    dev_size: usize,
    cfg: *const sigil_device_config,
    platform: *const sigil_platform,
    group: *const sigil_key,
    group_count: usize,
    other: *const u8,
    other_len: usize,
) -> sigil_status {
    status((|| {
        if dev.is_null() {
            return Err(SIGIL_ERR_NULL);
        }
        if dev_size < size_of::<sigil_device>() {
            return Err(SIGIL_ERR_BAD_LENGTH);
        }
        let config = device_config(unsafe { reference(cfg) }?)?;
        let platform = *unsafe { reference(platform) }?;
        if platform.rng.is_none()
            || platform.storage_read.is_none()
            || platform.storage_write.is_none()
        {
            return Err(SIGIL_ERR_NULL);
        }
        let placeholder = PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &[0; 32])
            .map_err(|_| SIGIL_ERR_ENCODING)?;
        let mut slots = [placeholder; SIGIL_MAX_GROUP];
        let group = unsafe { public_keys(group, group_count, &mut slots, 1) }?;
        let other = unsafe { input(other, other_len) }?;
        if other.len() > SIGIL_MAX_OTHER_INFO {
            return Err(SIGIL_ERR_BAD_LENGTH);
        }
        // A state booted before is ended first (its key zeroed).
        unsafe { sigil_device_end(dev) };
        let device = Device::boot(
            RustCrypto,
            config,
            &mut Storage(&platform),
            &mut PlatformRng(&platform),
            group,
            other,
        )
        .map_err(|e| match e {
            ::sigil_device::DeviceError::Encoding if platform_rng_fails(&platform) => SIGIL_ERR_RNG,
            e => e.into(),
        })?;
        let state = State {
            magic: MAGIC,
            platform,
            device,
        };
        // SAFETY: `dev` is non-NULL, large and aligned enough (asserted), and holds no live
        // state (ended above).
        unsafe { dev.cast::<State>().write(state) };
        Ok(())
    })())
}

/// Whether the randomness callback fails now (to tell a failed generator from a failed key
/// generation).
fn platform_rng_fails(p: &sigil_platform) -> bool {
    PlatformRng(p).fill(&mut [0u8; 1]).is_err()
}

/// Ends a booted device: its secret key is zeroed and `dev` no longer counts as booted.
/// Ending a state that is not booted does nothing.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_end(dev: *mut sigil_device) -> sigil_status {
    match unsafe { state(dev) } {
        Ok(state) => {
            state.magic = 0;
            // SAFETY: the state was booted, and is dropped once: its magic is cleared.
            unsafe { core::ptr::drop_in_place(&mut state.device) };
            SIGIL_OK
        }
        Err(SIGIL_ERR_NOT_BOOTED) => SIGIL_OK,
        Err(e) => e,
    }
}

/// The device's identity (16 bytes into `out`, `out_len` >= 16).
#[no_mangle]
pub unsafe extern "C" fn sigil_device_identity(
    dev: *const sigil_device,
    out: *mut u8,
    out_len: usize,
) -> sigil_status {
    status((|| {
        let state = unsafe { state_ref(dev) }?;
        unsafe { identity_out(state.device.identity(), out, out_len) }
    })())
}

/// The device's public key: its algorithm to `alg` (a `sigil_alg`) and its bytes to `out`
/// (`out_len` >= the key's length; `SIGIL_MAX_PUBLIC_KEY` always suffices), the length to
/// `written`.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_public_key(
    dev: *const sigil_device,
    alg: *mut u32,
    out: *mut u8,
    out_len: usize,
    written: *mut usize,
) -> sigil_status {
    status((|| {
        let state = unsafe { state_ref(dev) }?;
        if alg.is_null() || written.is_null() {
            return Err(SIGIL_ERR_NULL);
        }
        let key = state.device.public_key().as_bytes();
        unsafe { output(out, out_len, key.len()) }?.copy_from_slice(key);
        unsafe { alg.write(alg_value(state.device.public_key().algorithm())) };
        unsafe { written.write(key.len()) };
        Ok(())
    })())
}

/// Advances the device's timers to `now_ms` (the caller's monotonic clock, in
/// milliseconds): registration, its refresh, retransmissions. Call it when
/// `sigil_device_poll_timeout` says, then drain `sigil_device_poll_transmit`.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_handle_timeout(
    dev: *mut sigil_device,
    now_ms: u64,
) -> sigil_status {
    status((|| {
        let State {
            platform, device, ..
        } = unsafe { state(dev) }?;
        Ok(device.handle_timeout(Instant::from_millis(now_ms), &mut Storage(platform))?)
    })())
}

/// Feeds one datagram received from the server (`len` >= 1 bytes). Malformed or unexpected
/// datagrams are counted (see `sigil_device_get_info`) and ignored: that is still `SIGIL_OK`.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_handle_datagram(
    dev: *mut sigil_device,
    now_ms: u64,
    datagram: *const u8,
    len: usize,
) -> sigil_status {
    status((|| {
        let State {
            platform, device, ..
        } = unsafe { state(dev) }?;
        let data = unsafe { required(datagram, len, 1, usize::MAX) }?;
        Ok(device.handle_datagram(Instant::from_millis(now_ms), &mut Storage(platform), data)?)
    })())
}

/// Takes the next datagram to send to the server into `buf` (`cap` >= `SIGIL_MAX_DATAGRAM`)
/// and its length into `len`; `len` is 0 when there is nothing to send. Call it until it is.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_poll_transmit(
    dev: *mut sigil_device,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> sigil_status {
    status((|| {
        let state = unsafe { state(dev) }?;
        let len = unsafe { out(len) }?;
        let buf = unsafe { output(buf, cap, SIGIL_MAX_DATAGRAM) }?;
        *len = state.device.poll_transmit(buf).unwrap_or(0);
        Ok(())
    })())
}

/// When to call `sigil_device_handle_timeout` next (milliseconds on the caller's clock), or
/// `SIGIL_NEVER`.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_poll_timeout(
    dev: *const sigil_device,
    at_ms: *mut u64,
) -> sigil_status {
    status((|| {
        let state = unsafe { state_ref(dev) }?;
        let at = unsafe { out(at_ms) }?;
        *at = state
            .device
            .poll_timeout()
            .map_or(SIGIL_NEVER, Instant::as_millis);
        Ok(())
    })())
}

/// The oldest event into `event`; its kind is `SIGIL_EVENT_NONE` when none waits.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_poll_event(
    dev: *mut sigil_device,
    event: *mut sigil_event,
) -> sigil_status {
    use sigil_event_kind::*;
    status((|| {
        let state = unsafe { state(dev) }?;
        let event = unsafe { out(event) }?;
        let mut e = sigil_event {
            kind: SIGIL_EVENT_NONE,
            code: 0,
            retry_after_secs: 0,
            seq: 0,
        };
        match state.device.poll_event() {
            None => {}
            Some(Event::Registered) => e.kind = SIGIL_EVENT_REGISTERED,
            Some(Event::RegistrationRefreshed) => e.kind = SIGIL_EVENT_REGISTRATION_REFRESHED,
            Some(Event::RegistrationFailed { code }) => {
                e.kind = SIGIL_EVENT_REGISTRATION_FAILED;
                e.code = code.0;
            }
            Some(Event::Resynchronising) => e.kind = SIGIL_EVENT_RESYNCHRONISING,
            Some(Event::Published { seq, outcome }) => {
                e.seq = seq;
                e.kind = match outcome {
                    PublishOutcome::Acknowledged => SIGIL_EVENT_ACKNOWLEDGED,
                    PublishOutcome::Sent => SIGIL_EVENT_SENT,
                    PublishOutcome::Rejected(code) => {
                        e.code = code.0;
                        SIGIL_EVENT_REJECTED
                    }
                    PublishOutcome::Reset => SIGIL_EVENT_RESET,
                    PublishOutcome::Republishing(code) => {
                        e.code = code.0;
                        SIGIL_EVENT_REPUBLISHING
                    }
                    PublishOutcome::Deferred {
                        code,
                        retry_after_secs,
                    } => {
                        e.code = code.0;
                        e.retry_after_secs = retry_after_secs;
                        SIGIL_EVENT_DEFERRED
                    }
                    PublishOutcome::TimedOut => SIGIL_EVENT_TIMED_OUT,
                };
            }
        }
        *event = e;
        Ok(())
    })())
}

/// Signs `count` SenML records (1 to `SIGIL_MAX_RECORDS`) as one reading and queues it for
/// the broker (RFC 8387 §7 step 2). `unix_time` (seconds since 1970) goes into the signed
/// header when the device trusts its clock; pass a negative value to leave it out. The
/// reading's sequence number goes to `seq` (may be NULL). Then drain
/// `sigil_device_poll_transmit`.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_publish(
    dev: *mut sigil_device,
    now_ms: u64,
    recs: *const sigil_record,
    count: usize,
    unix_time: i64,
    seq: *mut u64,
) -> sigil_status {
    status((|| {
        let State {
            platform, device, ..
        } = unsafe { state(dev) }?;
        let mut buf = [sigil_objects::senml::Record::default(); crate::reading::SIGIL_MAX_RECORDS];
        let recs = unsafe { records(recs, count, &mut buf) }?;
        let time = (unix_time >= 0).then(|| UnixTime::from_secs(unix_time));
        let n = device.publish(
            Instant::from_millis(now_ms),
            &mut Storage(platform),
            recs,
            time,
        )?;
        unsafe { write_opt(seq, n) };
        Ok(())
    })())
}

/// The device's state and link counters into `info`.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_get_info(
    dev: *const sigil_device,
    info: *mut sigil_device_info,
) -> sigil_status {
    status((|| {
        let d = &unsafe { state_ref(dev) }?.device;
        let info = unsafe { out(info) }?;
        *info = sigil_device_info {
            registered: d.is_registered(),
            can_publish: d.can_publish(),
            pending_republication: d.has_pending_republication(),
            next_sequence: d.next_sequence(),
            malformed: d.stats.malformed,
            retransmissions: d.stats.retransmissions,
            unexpected: d.stats.unexpected,
        };
        Ok(())
    })())
}

/// The registration's location path (e.g. `rd/3`) as a NUL-terminated string into `out`
/// (`out_len` bytes); `SIGIL_ERR_NOT_REGISTERED` before the first registration.
#[no_mangle]
pub unsafe extern "C" fn sigil_device_location(
    dev: *const sigil_device,
    out: *mut core::ffi::c_char,
    out_len: usize,
) -> sigil_status {
    status((|| {
        let d = &unsafe { state_ref(dev) }?.device;
        if out.is_null() {
            return Err(SIGIL_ERR_NULL);
        }
        let loc = d.location().ok_or(SIGIL_ERR_NOT_REGISTERED)?;
        unsafe { crate::ffi::write_c_str(out, out_len, loc.as_bytes()) }
    })())
}
