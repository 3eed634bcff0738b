//! The operating system's randomness and clocks: the edges where the client reads them, so
//! the cores below never do.

use sigil_crypto::{CryptoError, Rng};
use sigil_time::UnixTime;

/// The operating system's CSPRNG.
pub struct OsRng;

impl Rng for OsRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        getrandom::fill(buf).map_err(|_| CryptoError::Rng)
    }
}

/// A random 32-bit value (CoAP message IDs and tokens).
pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    u32::from_be_bytes(b)
}

/// The monotonic clock as the cores take it: the time since `start`.
pub fn since(start: std::time::Instant) -> sigil_time::Instant {
    sigil_time::Instant::ZERO + start.elapsed()
}

/// The wall clock.
pub fn unix_now() -> UnixTime {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    UnixTime::from_secs(i64::try_from(s).unwrap_or(i64::MAX))
}
