//! A sensor with only a pre-shared key: registration with the Resource Directory and
//! Confirmable readings MACed as COSE_Mac0 under the key derived from its PSK, through
//! `sigil-device`'s `PskNode` (with the `psk-session` feature: plain SenML-CBOR readings, for
//! a DTLS-PSK session around the node). No key pair: the image is built without any curve (feature
//! `psk-only`), so it holds no public-key code. The radio is the signing sensor's: the
//! `sigil_radio_transmit` call (the emulator intercepts it and plays the server) and the
//! `SIGIL_RX` mailbox. Identity and PSK are fixed here; a board reads them from the
//! provisioning record in flash.
#![no_std]
#![no_main]

#[cfg(any(feature = "ed25519", feature = "p256", feature = "fast"))]
compile_error!("psk_sensor is the image without public-key code: build it with `--no-default-features --features psk-only`");

use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};
use sigil_devbench::reading_records;
use sigil_device::{
    MemoryStorage, PskConfig, PskEvent, PskMode, PskNode, PublishOutcome, MAX_DATAGRAM,
};
use sigil_firmware::{XorShift, BACKEND};
use sigil_identity::Identity;

/// Number of readings the image publishes before it stops.
const READINGS: u64 = 3;
/// The provisioned identity (random, not derived from a key) and pre-shared key.
const IDENTITY: Identity = Identity::from_bytes(*b"sigil-psk-node01");
const PSK: &[u8; 16] = b"sigil-psk-secret";

#[no_mangle]
static mut SIGIL_RX: [u8; MAX_DATAGRAM] = [0; MAX_DATAGRAM];
#[no_mangle]
static mut SIGIL_RX_LEN: u32 = 0;
/// Readings acknowledged by the server.
#[no_mangle]
static mut SIGIL_ACKED: u32 = 0;

/// Hands a datagram to the radio.
#[no_mangle]
#[inline(never)]
pub extern "C" fn sigil_radio_transmit(datagram: *const u8, len: usize) {
    core::hint::black_box((datagram, len));
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

fn send(node: &mut PskNode<sigil_firmware::Backend>, buf: &mut [u8; MAX_DATAGRAM]) {
    while let Some(n) = node.poll_transmit(buf) {
        sigil_radio_transmit(buf.as_ptr(), n);
    }
}

/// Takes the datagram waiting in the mailbox, if any.
fn receive(buf: &mut [u8; MAX_DATAGRAM]) -> Option<usize> {
    // SAFETY: single-threaded; the mailbox is written between instructions by the radio.
    unsafe {
        let n = read_volatile(addr_of!(SIGIL_RX_LEN)) as usize;
        if n == 0 || n > MAX_DATAGRAM {
            return None;
        }
        let mailbox = &*addr_of!(SIGIL_RX);
        buf[..n].copy_from_slice(&mailbox[..n]);
        write_volatile(addr_of_mut!(SIGIL_RX_LEN), 0);
        Some(n)
    }
}

#[cortex_m_rt::entry]
fn main() -> ! {
    let mut storage = MemoryStorage::default();
    let mut rng = XorShift(0x2545_f491);
    let Ok(mut node) = PskNode::boot(
        BACKEND,
        PskConfig {
            mode: if cfg!(feature = "psk-session") {
                PskMode::Session
            } else {
                PskMode::Mac
            },
            ..PskConfig::default()
        },
        IDENTITY,
        PSK,
        &mut storage,
        &mut rng,
    ) else {
        sigil_halt(1)
    };
    let mut buf = [0u8; MAX_DATAGRAM];
    let mut now = sigil_time::Instant::ZERO;
    if node.handle_timeout(now, &mut storage).is_err() {
        sigil_halt(2);
    }
    send(&mut node, &mut buf);
    let mut published = 0;
    while published < READINGS || !node.can_publish() {
        now += core::time::Duration::from_millis(10);
        if let Some(n) = receive(&mut buf) {
            if node.handle_datagram(now, &mut storage, &buf[..n]).is_err() {
                sigil_halt(3);
            }
            while let Some(e) = node.poll_event() {
                if let PskEvent::Published {
                    outcome: PublishOutcome::Acknowledged,
                    ..
                } = e
                {
                    // SAFETY: single-threaded.
                    unsafe { *addr_of_mut!(SIGIL_ACKED) += 1 };
                }
            }
        } else if node.can_publish() && published < READINGS {
            if node
                .publish(now, &mut storage, &reading_records(), None)
                .is_err()
            {
                sigil_halt(4);
            }
            published += 1;
        } else if node.handle_timeout(now, &mut storage).is_err() {
            sigil_halt(5);
        }
        send(&mut node, &mut buf);
    }
    sigil_halt(0)
}
