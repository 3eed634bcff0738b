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
    dtls_ecdhe_psk_client => sigil_op_dtls_ecdhe_psk_client,
    dtls_rpk_mutual_client => sigil_op_dtls_rpk_mutual_client,
    dtls_static_ecdh_client => sigil_op_dtls_static_ecdh_client,
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

/// The ECC comparison (docs/device-costs.md, beside the DTLS-as-CoAP-resource paper's Tables II
/// and III): `sigil_ecc_<name>`, each writing `SIGIL_OUT` like the operations above. The
/// harness runs `ibpv_setup` first: it fills the table the other `ibpv_*` operations draw from.
#[cfg(feature = "ecc")]
mod ecc {
    use super::{record, SIGIL_OUT};
    use core::mem::MaybeUninit;
    use core::ptr::{addr_of, addr_of_mut};
    use sigil_crypto::ibpv::Ibpv;
    use sigil_crypto::shamir::{verify_prehash, Combine};
    use sigil_crypto::{AgreementAlgorithm, CryptoProvider, SecretKey, SignatureAlgorithm};
    use sigil_devbench::{
        Failure, P256_ECDH_GR, P256_MESSAGE, P256_PUBLIC, P256_SECRET, P256_SIGNATURE,
    };
    use sigil_firmware::{XorShift, BACKEND};

    /// Entries in the table (n); each fresh pair sums `L` of them (l).
    pub const N: usize = 256;
    pub const L: usize = 32;

    /// All-zero bytes, so the table lands in .bss and takes no flash for an initialiser.
    #[no_mangle]
    static mut SIGIL_IBPV_TABLE: MaybeUninit<Ibpv<N>> = MaybeUninit::zeroed();
    /// n, l, serialised table bytes and in-memory table bytes, for the report.
    #[no_mangle]
    #[used]
    static SIGIL_IBPV_PARAMS: [u32; 4] = [
        N as u32,
        L as u32,
        Ibpv::<N>::table_bytes() as u32,
        core::mem::size_of::<Ibpv<N>>() as u32,
    ];

    fn out() -> &'static mut [u8] {
        // SAFETY: single-threaded bare metal; one operation runs at a time.
        unsafe { &mut *addr_of_mut!(SIGIL_OUT) }
    }

    fn table() -> &'static Ibpv<N> {
        // SAFETY: single-threaded, and only `sigil_ecc_ibpv_setup` writes the table. All-zero
        // bytes are a valid `Ibpv` (zero scalars, zero coordinates, a zero flag byte, `filled`
        // false), which refuses to produce pairs until it is filled.
        unsafe { (*addr_of!(SIGIL_IBPV_TABLE)).assume_init_ref() }
    }

    fn verify(how: Combine) -> u32 {
        let digest = BACKEND.sha256(&[P256_MESSAGE]);
        let ok = verify_prehash(&P256_PUBLIC, &digest, &P256_SIGNATURE, how);
        record(if ok {
            put(&[1])
        } else {
            Err(Failure::Rejected)
        })
    }

    fn put(bytes: &[u8]) -> Result<usize, Failure> {
        out()[..bytes.len()].copy_from_slice(bytes);
        Ok(bytes.len())
    }

    /// ECDSA verify of the RFC 6979 vector, u1·G + u2·Q in one joint pass.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_ecc_verify_joint() -> u32 {
        verify(Combine::Joint)
    }

    /// The same, as two scalar multiplications and an addition.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_ecc_verify_separate() -> u32 {
        verify(Combine::Separate)
    }

    /// The one-time setup: n random scalars and their multiples of G.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_ecc_ibpv_setup() -> u32 {
        // SAFETY: as `table`; nothing else holds a reference during an operation.
        let t = unsafe { (*addr_of_mut!(SIGIL_IBPV_TABLE)).assume_init_mut() };
        let r = t.fill(&mut XorShift(0x1bad_5eed)).map_err(Failure::Crypto);
        record(r.and_then(|()| put(&(N as u32).to_le_bytes())))
    }

    fn pair<const K: usize>() -> u32 {
        let r = table()
            .agreement_secret::<K>(&mut XorShift(0x5eed_0001))
            .map_err(Failure::Crypto);
        record(r.map(|(k, big_r)| {
            out()[..32].copy_from_slice(&k.to_bytes());
            out()[32..97].copy_from_slice(big_r.as_bytes());
            97
        }))
    }

    /// A fresh pair (r, r·G) from the table, summing 16, 32 or 64 entries: output r || r·G.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_ecc_ibpv_pair16() -> u32 {
        pair::<16>()
    }
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_ecc_ibpv_pair32() -> u32 {
        pair::<32>()
    }
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_ecc_ibpv_pair64() -> u32 {
        pair::<64>()
    }

    /// ECDSA sign of "sample" with the RFC 6979 A.2.5 key, nonce from the table.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_ecc_ibpv_sign() -> u32 {
        let r = SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &P256_SECRET)
            .and_then(|sk| table().sign::<L>(&mut XorShift(0x5eed_0002), &sk, P256_MESSAGE))
            .map_err(Failure::Crypto);
        record(r.and_then(|sig| put(&sig.0)))
    }

    fn ecdh_output(public: &[u8], shared: &[u8; 32]) -> Result<usize, Failure> {
        out()[..65].copy_from_slice(public);
        out()[65..97].copy_from_slice(shared);
        Ok(97)
    }

    /// Ephemeral ECDH as a handshake does it: a fresh key pair, then the shared secret with the
    /// RFC 5903 responder's public value. Output: our public value || shared secret.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_ecc_ecdh_ephemeral() -> u32 {
        let r = (|| {
            let mut rng = XorShift(0x5eed_0003);
            let sk = BACKEND.generate_agreement(AgreementAlgorithm::P256, &mut rng)?;
            let pk = BACKEND.agreement_public_key(&sk)?;
            let shared = BACKEND.agree(&sk, &P256_ECDH_GR)?;
            Ok((pk, shared))
        })()
        .map_err(Failure::Crypto);
        record(r.and_then(|(pk, shared)| ecdh_output(pk.as_bytes(), &shared)))
    }

    /// The same with the ephemeral key pair summed from the table.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn sigil_ecc_ibpv_ecdh() -> u32 {
        let r = (|| {
            let (sk, pk) = table().agreement_secret::<L>(&mut XorShift(0x5eed_0004))?;
            let shared = BACKEND.agree(&sk, &P256_ECDH_GR)?;
            Ok((pk, shared))
        })()
        .map_err(Failure::Crypto);
        record(r.and_then(|(pk, shared)| ecdh_output(pk.as_bytes(), &shared)))
    }

    /// Keeps the operations in the linked image (nothing calls them on a board).
    #[used]
    static ECC: [extern "C" fn() -> u32; 9] = [
        sigil_ecc_verify_joint,
        sigil_ecc_verify_separate,
        sigil_ecc_ibpv_setup,
        sigil_ecc_ibpv_pair16,
        sigil_ecc_ibpv_pair32,
        sigil_ecc_ibpv_pair64,
        sigil_ecc_ibpv_sign,
        sigil_ecc_ecdh_ephemeral,
        sigil_ecc_ibpv_ecdh,
    ];
}

/// RSA-2048 beside P-256 (docs/device-costs.md, the two-way-authentication seed's Tables 2-4):
/// `sigil_rsa_<name>`, each writing `SIGIL_OUT` like the operations above, on sigil-devbench's
/// fixed test key. The `rsa` crate allocates: its heap is `SIGIL_HEAP` (in .bss, so counted in
/// the image's static RAM), and `SIGIL_HEAP_PEAK` is the most of it in use during the last
/// operation, in bytes (allocator bookkeeping included).
#[cfg(feature = "rsa")]
mod rsa {
    use super::{record, SIGIL_OUT};
    use core::alloc::{GlobalAlloc, Layout};
    use core::mem::MaybeUninit;
    use core::ptr::{addr_of_mut, write_volatile};
    // Links cortex-m's single-core critical section, which embedded-alloc takes.
    use cortex_m as _;
    use embedded_alloc::LlffHeap;
    use sigil_firmware::BACKEND;

    /// The heap's size: the measured peak (the report) with room to spare.
    pub const HEAP_BYTES: usize = 32 * 1024;

    #[no_mangle]
    static mut SIGIL_HEAP: [MaybeUninit<u8>; HEAP_BYTES] = [MaybeUninit::uninit(); HEAP_BYTES];
    #[no_mangle]
    static mut SIGIL_HEAP_PEAK: u32 = 0;
    /// The heap's size, for the report.
    #[no_mangle]
    #[used]
    static SIGIL_HEAP_SIZE: u32 = HEAP_BYTES as u32;

    /// embedded-alloc's heap, with its high-water mark kept.
    struct Peak {
        heap: LlffHeap,
    }

    unsafe impl GlobalAlloc for Peak {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: forwarded as given; single-threaded, so the peak update races nothing.
            let p = unsafe { self.heap.alloc(layout) };
            let used = self.heap.used() as u32;
            unsafe {
                if used > *addr_of_mut!(SIGIL_HEAP_PEAK) {
                    write_volatile(addr_of_mut!(SIGIL_HEAP_PEAK), used);
                }
            }
            p
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: forwarded as given.
            unsafe { self.heap.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static HEAP: Peak = Peak {
        heap: LlffHeap::empty(),
    };
    static mut HEAP_READY: bool = false;

    /// Gives the heap its memory on the first call; zeroes the peak for this operation.
    fn start() {
        // SAFETY: single-threaded bare metal; the heap is handed its region exactly once, and
        // the region is used by nothing else.
        unsafe {
            if !*addr_of_mut!(HEAP_READY) {
                HEAP.heap
                    .init(addr_of_mut!(SIGIL_HEAP) as usize, HEAP_BYTES);
                *addr_of_mut!(HEAP_READY) = true;
            }
            write_volatile(addr_of_mut!(SIGIL_HEAP_PEAK), HEAP.heap.used() as u32);
        }
    }

    macro_rules! rsa_ops {
        ($($name:ident => $sym:ident),* $(,)?) => {
            $(
                #[no_mangle]
                #[inline(never)]
                pub extern "C" fn $sym() -> u32 {
                    start();
                    // SAFETY: see `record`.
                    let out = unsafe { &mut *addr_of_mut!(SIGIL_OUT) };
                    record(sigil_devbench::rsa::$name(&BACKEND, out))
                }
            )*
            /// Keeps the operations in the linked image (nothing calls them on a board).
            #[used]
            static RSA: [extern "C" fn() -> u32; [$(stringify!($sym)),*].len()] = [$($sym),*];
        };
    }

    rsa_ops! {
        rsa2048_public_key => sigil_rsa_rsa2048_public_key,
        rsa2048_sign => sigil_rsa_rsa2048_sign,
        rsa2048_verify => sigil_rsa_rsa2048_verify,
        rsa2048_encrypt => sigil_rsa_rsa2048_encrypt,
        rsa2048_decrypt => sigil_rsa_rsa2048_decrypt,
    }
}
