//! A DTLS client device, built with one of two carriers for its handshakes (docs/device-costs.md
//! compares their flash and RAM, beside the DTLS-as-CoAP-resource paper's Table I):
//!
//! - feature `dtls-records`: sigil-dtls's record layer ([`sigil_dtls::Connection`]): flights
//!   cut into records, the flight retransmission timer, fragment reassembly (RFC 6347 §4.2);
//! - feature `dtls-coap`: the handshake as a CoAP resource ([`sigil_dtls_coap::Client`] over
//!   [`sigil_dtls::WholeFlights`]): CoAP's Confirmable retransmission and block-wise transfer
//!   instead, and sigil-dtls built without `record-carrier`.
//!
//! Either way the image runs two handshakes with the server the emulator plays (the real
//! sigil-dtls server, eval/sigil-devbench/examples/dtls-peer.rs): TLS_PSK_WITH_AES_128_CCM_8,
//! then TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with the server's raw public key checked against its
//! pinned identity (RFC 7250, RFC 8387 §4). After each, one Confirmable CoAP request travels in
//! an application record (CoAP over DTLS, RFC 7252 §9.1) and its piggybacked 2.04 comes back in
//! one, so both images carry the same CoAP code for their application.
//!
//! The radio is the sensor image's: `sigil_radio_transmit` hands a datagram over, and the
//! `SIGIL_RX` mailbox holds the next received one after `sigil_radio_poll` (a board's receive
//! interrupt fills it; the emulator intercepts the call).
#![no_std]
#![no_main]

#[cfg(all(feature = "dtls-records", feature = "dtls-coap"))]
compile_error!("dtls_client takes one carrier: feature dtls-records or dtls-coap");
#[cfg(not(any(feature = "dtls-records", feature = "dtls-coap")))]
compile_error!("dtls_client needs a carrier: feature dtls-records or dtls-coap");

use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};
use core::time::Duration;
use sigil_coap::message::option;
use sigil_coap::{
    Code, Message, MessageBuilder, MessageType, Retransmission, RetransmitDecision,
    TransmissionParameters,
};
use sigil_crypto::{PublicKey, Rng, SignatureAlgorithm};
use sigil_devbench::{DTLS_PSK, P256_PUBLIC};
use sigil_dtls::{Credentials, PinnedIdentities, Traffic, Trust, MAX_APP_DATA};
use sigil_firmware::{Backend, XorShift, BACKEND};
use sigil_identity::Identity;
use sigil_time::Instant;

/// Largest datagram either carrier builds or accepts.
const MAX_DATAGRAM: usize = sigil_dtls::MAX_DATAGRAM;
/// The PSK identity the server knows `DTLS_PSK` by.
const PSK_IDENTITY: &[u8] = b"sensor";
/// The resource the application request goes to, and what it carries.
const READINGS_PATH: &[u8] = b"r";
const READING: &[u8] = b"21.5";
/// The device's clock advances this much each time it finds nothing to do.
const TICK: Duration = Duration::from_millis(10);
/// Anything still unfinished after this long has failed.
const GIVE_UP: Instant = Instant::from_millis(600_000);

#[no_mangle]
static mut SIGIL_RX: [u8; MAX_DATAGRAM] = [0; MAX_DATAGRAM];
#[no_mangle]
static mut SIGIL_RX_LEN: u32 = 0;
/// Handshakes completed.
#[no_mangle]
static mut SIGIL_HANDSHAKES: u32 = 0;
/// Application requests answered by the server, through the established session.
#[no_mangle]
static mut SIGIL_ANSWERS: u32 = 0;

/// Why the image stopped (its `sigil_halt` code).
#[derive(Clone, Copy)]
#[repr(u32)]
enum Failure {
    /// The pinned server key or its identity could not be built.
    ServerKey = 1,
    /// The first flight could not be built.
    Connect = 2,
    /// The handshake failed (an alert, a failed check, or the carrier gave up).
    Handshake = 3,
    /// The application request could not be built or protected.
    Request = 4,
    /// A record of the established session was refused.
    Record = 5,
    /// No answer to the application request after every retransmission.
    NoAnswer = 6,
    /// The clock passed `GIVE_UP`.
    Timeout = 7,
}

/// Hands a datagram to the radio.
#[no_mangle]
#[inline(never)]
pub extern "C" fn sigil_radio_transmit(datagram: *const u8, len: usize) {
    core::hint::black_box((datagram, len));
}

/// Asks the radio for the next received datagram; returns the mailbox's length (0: none).
#[no_mangle]
#[inline(never)]
pub extern "C" fn sigil_radio_poll() -> u32 {
    // SAFETY: single-threaded; the radio writes the mailbox only within this call.
    unsafe { read_volatile(addr_of!(SIGIL_RX_LEN)) }
}

/// Reached when the image has done its work (or failed, with `code` != 0).
#[no_mangle]
#[inline(never)]
pub extern "C" fn sigil_halt(code: u32) -> ! {
    core::hint::black_box(code);
    loop {
        core::hint::spin_loop();
    }
}

fn transmit(datagram: &[u8]) {
    sigil_radio_transmit(datagram.as_ptr(), datagram.len());
}

/// Takes the next received datagram, if any.
fn receive(buf: &mut [u8; MAX_DATAGRAM]) -> Option<usize> {
    let n = sigil_radio_poll() as usize;
    if n == 0 || n > MAX_DATAGRAM {
        return None;
    }
    // SAFETY: single-threaded; nothing writes the mailbox outside `sigil_radio_poll`.
    unsafe {
        let mailbox = &*addr_of!(SIGIL_RX);
        buf[..n].copy_from_slice(&mailbox[..n]);
        write_volatile(addr_of_mut!(SIGIL_RX_LEN), 0);
    }
    Some(n)
}

/// Lets time pass while waiting.
fn tick(now: &mut Instant) -> Result<(), Failure> {
    *now += TICK;
    if *now > GIVE_UP {
        return Err(Failure::Timeout);
    }
    Ok(())
}

/// The handshake over the record layer: flights as records, retransmitted on the DTLS timer.
/// Out of line (as the CoAP one), so that each carrier's driver is one symbol in the image.
#[cfg(feature = "dtls-records")]
#[inline(never)]
fn handshake<T: Trust>(
    trust: T,
    credentials: Credentials<'_>,
    rng: &mut XorShift,
    now: &mut Instant,
) -> Result<Traffic<Backend>, Failure> {
    use sigil_dtls::{Config, Connection};
    let mut client = Connection::connect(BACKEND, trust, Config::default(), rng, credentials, *now)
        .map_err(|_| Failure::Connect)?;
    let mut buf = [0u8; MAX_DATAGRAM];
    loop {
        while let Some(n) = client.poll_transmit(*now, &mut buf) {
            transmit(&buf[..n]);
        }
        if client.is_established() {
            return client.into_traffic().map_err(|_| Failure::Handshake);
        }
        if let Some(n) = receive(&mut buf) {
            client
                .handle_datagram(*now, &buf[..n])
                .map_err(|_| Failure::Handshake)?;
        } else {
            tick(now)?;
            client
                .handle_timeout(*now)
                .map_err(|_| Failure::Handshake)?;
        }
    }
}

/// The handshake as a CoAP resource: flights as Confirmable request and response payloads.
#[cfg(feature = "dtls-coap")]
#[inline(never)]
fn handshake<T: Trust>(
    trust: T,
    credentials: Credentials<'_>,
    rng: &mut XorShift,
    now: &mut Instant,
) -> Result<Traffic<Backend>, Failure> {
    use sigil_dtls_coap::{CarrierConfig, Client};
    let mut client = Client::connect(
        BACKEND,
        trust,
        CarrierConfig::default(),
        rng,
        credentials,
        *now,
    )
    .map_err(|_| Failure::Connect)?;
    let mut buf = [0u8; MAX_DATAGRAM];
    loop {
        while let Some(n) = client.poll_transmit(*now, &mut buf) {
            transmit(&buf[..n]);
        }
        if client.is_established() {
            return client.into_traffic().map_err(|_| Failure::Handshake);
        }
        if let Some(n) = receive(&mut buf) {
            client
                .handle_datagram(*now, &buf[..n], rng)
                .map_err(|_| Failure::Handshake)?;
        } else {
            tick(now)?;
            client
                .handle_timeout(*now)
                .map_err(|_| Failure::Handshake)?;
        }
    }
}

/// Whether `datagram` is the piggybacked 2.04 to the request `message_id` with `token`.
fn answers(datagram: &[u8], message_id: u16, token: &[u8]) -> bool {
    Message::parse(datagram).is_ok_and(|m| {
        m.mtype == MessageType::Acknowledgement
            && m.message_id == message_id
            && m.token == token
            && m.code == Code::CHANGED
    })
}

/// One Confirmable `POST /r` in an application record, retransmitted until its answer arrives
/// in one (RFC 7252 §4.2, §9.1).
#[inline(never)]
fn request(
    traffic: &mut Traffic<Backend>,
    rng: &mut XorShift,
    now: &mut Instant,
) -> Result<(), Failure> {
    let mut random = [0u8; 4];
    rng.fill(&mut random).map_err(|_| Failure::Request)?;
    let message_id = u16::from_be_bytes([random[0], random[1]]);
    let token = random;
    let mut coap = [0u8; 32];
    let mut m = MessageBuilder::new(
        &mut coap,
        MessageType::Confirmable,
        Code::POST,
        message_id,
        &token,
    )
    .map_err(|_| Failure::Request)?;
    m.option(option::URI_PATH, READINGS_PATH)
        .map_err(|_| Failure::Request)?;
    let len = m
        .finish_with_payload(READING)
        .map_err(|_| Failure::Request)?;
    let coap = &coap[..len];
    traffic.send(coap).map_err(|_| Failure::Request)?;
    let mut retransmission = Retransmission::start(
        *now,
        &TransmissionParameters::default(),
        u32::from_be_bytes(random),
    );
    let mut buf = [0u8; MAX_DATAGRAM];
    let mut app = [0u8; MAX_APP_DATA];
    loop {
        while let Some(n) = traffic.poll_transmit(*now, &mut buf) {
            transmit(&buf[..n]);
        }
        if let Some(n) = receive(&mut buf) {
            traffic
                .handle_datagram(*now, &buf[..n])
                .map_err(|_| Failure::Record)?;
            while let Some(k) = traffic.poll_app_data(&mut app) {
                if answers(&app[..k], message_id, &token) {
                    return Ok(());
                }
            }
        } else {
            tick(now)?;
            match retransmission.on_timer(*now) {
                RetransmitDecision::Wait => {}
                RetransmitDecision::Resend => traffic.send(coap).map_err(|_| Failure::Request)?,
                RetransmitDecision::GiveUp => return Err(Failure::NoAnswer),
            }
        }
    }
}

/// A handshake, then one request through the session it established.
fn session<T: Trust>(
    trust: T,
    credentials: Credentials<'_>,
    rng: &mut XorShift,
    now: &mut Instant,
) -> Result<(), Failure> {
    let mut traffic = handshake(trust, credentials, rng, now)?;
    // SAFETY: single-threaded.
    unsafe { *addr_of_mut!(SIGIL_HANDSHAKES) += 1 };
    request(&mut traffic, rng, now)?;
    // SAFETY: single-threaded.
    unsafe { *addr_of_mut!(SIGIL_ANSWERS) += 1 };
    Ok(())
}

fn run() -> Result<(), Failure> {
    let mut rng = XorShift(0x2545_f491);
    let mut now = Instant::ZERO;
    let server = PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &P256_PUBLIC)
        .map_err(|_| Failure::ServerKey)?;
    let pinned = [Identity::of_key(&BACKEND, &server, b"").map_err(|_| Failure::ServerKey)?];
    // One trust store for both handshakes, as a device has (the PSK handshake consults it
    // for nothing: the client's key is in its credentials).
    let trust = PinnedIdentities {
        crypto: BACKEND,
        identities: &pinned,
    };
    session(
        &trust,
        Credentials::Psk {
            identity: PSK_IDENTITY,
            key: &DTLS_PSK,
        },
        &mut rng,
        &mut now,
    )?;
    session(&trust, Credentials::RawPublicKey(None), &mut rng, &mut now)
}

#[cortex_m_rt::entry]
fn main() -> ! {
    match run() {
        Ok(()) => sigil_halt(0),
        Err(f) => sigil_halt(f as u32),
    }
}
