//! The measured operations, one exported function each (`sigil_op_<name>`). The emulator calls
//! each function on a painted stack, counts what it executes and reads `SIGIL_OUT` back; on a
//! real board `main` runs them all once.
#![no_std]
#![no_main]

use core::ptr::addr_of_mut;
use sigil_devbench::{Failure, MAX_OUTPUT};
use sigil_firmware::BACKEND;

/// The output of the last operation; its length is in `SIGIL_OUT_LEN`.
#[no_mangle]
static mut SIGIL_OUT: [u8; MAX_OUTPUT] = [0; MAX_OUTPUT];
#[no_mangle]
static mut SIGIL_OUT_LEN: u32 = 0;

fn record(r: Result<usize, Failure>) -> u32 {
    // SAFETY: single-threaded bare metal; nothing else touches these statics during an op.
    unsafe {
        *addr_of_mut!(SIGIL_OUT_LEN) = match r {
            Ok(n) => n as u32,
            Err(_) => 0,
        };
        *addr_of_mut!(SIGIL_OUT_LEN)
    }
}

macro_rules! ops {
    ($($name:ident => $sym:ident),* $(,)?) => {
        $(
            #[no_mangle]
            #[inline(never)]
            pub extern "C" fn $sym() -> u32 {
                // SAFETY: see `record`.
                let out = unsafe { &mut *addr_of_mut!(SIGIL_OUT) };
                record(sigil_devbench::$name(&BACKEND, out))
            }
        )*
        const ALL: &[extern "C" fn() -> u32] = &[$($sym),*];
    };
}

ops! {
    keygen_ed25519 => sigil_op_keygen_ed25519,
    keygen_p256 => sigil_op_keygen_p256,
    sign_ed25519 => sigil_op_sign_ed25519,
    verify_ed25519 => sigil_op_verify_ed25519,
    sign_p256 => sigil_op_sign_p256,
    verify_p256 => sigil_op_verify_p256,
    x25519 => sigil_op_x25519,
    ecdh_p256 => sigil_op_ecdh_p256,
    ccm8_16 => sigil_op_ccm8_16,
    ccm8_64 => sigil_op_ccm8_64,
    ccm8_256 => sigil_op_ccm8_256,
    sha256_256 => sigil_op_sha256_256,
    reading_sign_ed25519 => sigil_op_reading_sign_ed25519,
    reading_sign_p256 => sigil_op_reading_sign_p256,
    reading_verify_ed25519 => sigil_op_reading_verify_ed25519,
    identity => sigil_op_identity,
    dtls_psk_client => sigil_op_dtls_psk_client,
    dtls_rpk_client => sigil_op_dtls_rpk_client,
}

/// Calibration: `p256-cm4`'s own entry points, called exactly as its published cycle counts
/// were measured (fixed scalar, hash and nonce; no RFC 6979, no hashing, no encoding), so the
/// cycle model can be checked against real hardware (docs/device-costs.md).
#[cfg(all(feature = "fast", target_arch = "arm"))]
mod calibration {
    const D: [u32; 8] = [0x120f6721, 0x8a622b12, 0x36e89b12, 0x4e50c3db, 0x57b1d693, 0x6b5c2157, 0xd845ba75, 0xc9afa9d8];
    const K: [u32; 8] = [0x5be2c60, 0x3d8b9bfb, 0x4e0e0fcb, 0x6e30e4d6, 0xc8d6c7bb, 0xbd7c0b8b, 0x09c7ae6b, 0xa6e3c57d];
    const HASH: [u8; 32] = [0xaf; 32];

    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_cal_keygen() -> u32 {
        let (mut x, mut y) = ([0u32; 8], [0u32; 8]);
        let ok = p256_cm4::keygen(&mut x, &mut y, &D);
        unsafe { super::SIGIL_CAL = [x, y] };
        ok as u32
    }

    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_cal_sign() -> u32 {
        let (mut r, mut s) = ([0u32; 8], [0u32; 8]);
        let ok = p256_cm4::sign(&mut r, &mut s, &HASH, &D, &K);
        unsafe { super::SIGIL_CAL = [r, s] };
        ok as u32
    }

    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_cal_verify() -> u32 {
        // Verifies what `sigil_cal_sign` left in SIGIL_CAL under the key `sigil_cal_keygen`
        // computed; the harness runs keygen, sign, verify in that order and saves the key.
        let [r, s] = unsafe { super::SIGIL_CAL };
        let [x, y] = unsafe { super::SIGIL_CAL_KEY };
        p256_cm4::verify(&x, &y, &HASH, &r, &s) as u32
    }

    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_cal_ecdh() -> u32 {
        let [x, y] = unsafe { super::SIGIL_CAL_KEY };
        let mut shared = [0u8; 32];
        p256_cm4::ecdh_calc_shared_secret(&mut shared, &K, &x, &y) as u32
    }
}

/// Keeps the calibration entry points in the linked image (nothing calls them on a board).
#[cfg(all(feature = "fast", target_arch = "arm"))]
#[used]
static CALIBRATION: [extern "C" fn() -> u32; 4] = [
    calibration::sigil_cal_keygen,
    calibration::sigil_cal_sign,
    calibration::sigil_cal_verify,
    calibration::sigil_cal_ecdh,
];

#[no_mangle]
static mut SIGIL_CAL: [[u32; 8]; 2] = [[0; 8]; 2];
#[no_mangle]
static mut SIGIL_CAL_KEY: [[u32; 8]; 2] = [[0; 8]; 2];

#[cortex_m_rt::entry]
fn main() -> ! {
    for op in ALL {
        // Volatile so the calls are not folded away on a board without a debugger.
        let n = op();
        unsafe { core::ptr::write_volatile(addr_of_mut!(SIGIL_OUT_LEN), n) };
    }
    loop {
        core::hint::spin_loop();
    }
}
