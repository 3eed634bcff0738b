//! The measured operations on the ATmega2560. `main` runs each selected operation once between
//! two calls of `sigil_mark`, which the simavr harness watches to read the cycle counter; the
//! output lands in `SIGIL_OUT` for the harness to check against vectors/device-kat.json.
#![no_std]
#![no_main]

use core::ptr::{addr_of_mut, write_volatile};
use sigil_crypto::RustCrypto;
use sigil_devbench::MAX_OUTPUT;

#[no_mangle]
static mut SIGIL_OUT: [u8; MAX_OUTPUT] = [0; MAX_OUTPUT];
#[no_mangle]
static mut SIGIL_OUT_LEN: u16 = 0;
/// Index of the operation about to run (or 0xff when all are done).
#[no_mangle]
static mut SIGIL_OP: u8 = 0;

#[no_mangle]
#[inline(never)]
pub extern "C" fn sigil_mark(op: u8) {
    unsafe { write_volatile(addr_of_mut!(SIGIL_OP), op) };
    core::hint::black_box(op);
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    sigil_mark(0xfe);
    loop {}
}

type Op = fn(&RustCrypto, &mut [u8]) -> Result<usize, sigil_devbench::Failure>;

const OPS: &[Op] = &[
    sigil_devbench::sha256_256::<RustCrypto>,
    sigil_devbench::ccm8_16::<RustCrypto>,
    sigil_devbench::ccm8_64::<RustCrypto>,
    sigil_devbench::ccm8_256::<RustCrypto>,
    sigil_devbench::identity::<RustCrypto>,
    #[cfg(feature = "ed25519")]
    sigil_devbench::keygen_ed25519::<RustCrypto>,
    #[cfg(feature = "ed25519")]
    sigil_devbench::sign_ed25519::<RustCrypto>,
    #[cfg(feature = "ed25519")]
    sigil_devbench::verify_ed25519::<RustCrypto>,
    #[cfg(feature = "x25519")]
    sigil_devbench::x25519::<RustCrypto>,
    #[cfg(feature = "p256")]
    sigil_devbench::keygen_p256::<RustCrypto>,
    #[cfg(feature = "p256")]
    sigil_devbench::sign_p256::<RustCrypto>,
    #[cfg(feature = "p256")]
    sigil_devbench::verify_p256::<RustCrypto>,
    #[cfg(feature = "p256")]
    sigil_devbench::ecdh_p256::<RustCrypto>,
];

#[no_mangle]
pub extern "C" fn main() -> ! {
    for (i, op) in OPS.iter().enumerate() {
        sigil_mark(i as u8);
        let out = unsafe { &mut *addr_of_mut!(SIGIL_OUT) };
        let n = op(&RustCrypto, out).unwrap_or(0);
        unsafe { write_volatile(addr_of_mut!(SIGIL_OUT_LEN), n as u16) };
        sigil_mark(0x80 | i as u8);
    }
    sigil_mark(0xff);
    loop {}
}
