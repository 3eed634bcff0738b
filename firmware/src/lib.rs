//! What the two images share: the crypto backend the build selected, the panic handler and a
//! deterministic random source.
#![no_std]

#[cfg(all(feature = "fast", target_arch = "arm"))]
pub type Backend = sigil_crypto::CortexM4;
#[cfg(not(all(feature = "fast", target_arch = "arm")))]
pub type Backend = sigil_crypto::RustCrypto;

#[cfg(all(feature = "fast", target_arch = "arm"))]
pub const BACKEND: Backend = sigil_crypto::CortexM4;
#[cfg(not(all(feature = "fast", target_arch = "arm")))]
pub const BACKEND: Backend = sigil_crypto::RustCrypto;

/// A panic stops the core on an undefined instruction, which the emulator reports.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {
        // SAFETY: `udf` has no operands and only raises UsageFault.
        unsafe { core::arch::asm!("udf #0") };
    }
}

/// A deterministic stand-in for the hardware TRNG, so runs repeat exactly. A real board wires
/// `sigil_crypto::Rng` to its TRNG instead.
pub struct XorShift(pub u32);

impl sigil_crypto::Rng for XorShift {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), sigil_crypto::CryptoError> {
        for b in buf {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 17;
            self.0 ^= self.0 << 5;
            *b = self.0 as u8;
        }
        Ok(())
    }
}
