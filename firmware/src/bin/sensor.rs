//! A complete signing sensor: first boot (key generation, identity), registration with the
//! Resource Directory, and Confirmable signed readings to the broker, all through the real
//! `sigil-device` state machine. The radio is two symbols: `sigil_radio_transmit` (a board
//! writes its radio FIFO there; the emulator intercepts the call and plays the server) and
//! the `SIGIL_RX` mailbox the answer arrives in. Storage is RAM here; a board backs
//! `DeviceStorage` with flash.
#![no_std]
#![no_main]

use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};
use sigil_device::{Device, DeviceConfig, MemoryStorage, MAX_DATAGRAM};
use sigil_devbench::reading_records;
use sigil_firmware::{XorShift, BACKEND};

/// Number of readings the image publishes before it stops.
const READINGS: u64 = 3;

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

fn send(device: &mut Device<sigil_firmware::Backend>, buf: &mut [u8; MAX_DATAGRAM]) {
    while let Some(n) = device.poll_transmit(buf) {
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
    let Ok(mut device) = Device::boot(
        BACKEND,
        DeviceConfig::default(),
        &mut storage,
        &mut rng,
        &[],
        &[],
    ) else {
        sigil_halt(1)
    };
    let mut buf = [0u8; MAX_DATAGRAM];
    let mut now = sigil_time::Instant::ZERO;
    if device.handle_timeout(now, &mut storage).is_err() {
        sigil_halt(2);
    }
    send(&mut device, &mut buf);
    let mut published = 0;
    while published < READINGS || !device.can_publish() {
        now += core::time::Duration::from_millis(10);
        if let Some(n) = receive(&mut buf) {
            if device.handle_datagram(now, &mut storage, &buf[..n]).is_err() {
                sigil_halt(3);
            }
            while let Some(e) = device.poll_event() {
                if let sigil_device::Event::Published {
                    outcome: sigil_device::PublishOutcome::Acknowledged,
                    ..
                } = e
                {
                    // SAFETY: single-threaded.
                    unsafe { *addr_of_mut!(SIGIL_ACKED) += 1 };
                }
            }
        } else if device.can_publish() && published < READINGS {
            if device
                .publish(now, &mut storage, &reading_records(), None)
                .is_err()
            {
                sigil_halt(4);
            }
            published += 1;
        } else if device.handle_timeout(now, &mut storage).is_err() {
            sigil_halt(5);
        }
        send(&mut device, &mut buf);
    }
    sigil_halt(0)
}
