//! Deterministic randomness for tests: the same seed gives the same bytes, so a failing
//! scenario can be replayed. None of these is a CSPRNG.

use sigil_crypto::{CryptoError, Rng};

/// A 64-bit linear congruential generator (Knuth's MMIX constants); each byte is taken from
/// the high bits of the state. Different seeds give unrelated-looking streams.
#[derive(Clone, Debug)]
pub struct Seeded(pub u64);

impl Seeded {
    pub fn new(seed: u64) -> Self {
        Seeded(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }

    /// A value in `0..n` (n > 0); slightly biased, which tests do not mind.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `p` (0.0..=1.0).
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }

    fn fill_bytes(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (self.0 >> 33) as u8;
        }
    }
}

impl Rng for Seeded {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        self.fill_bytes(buf);
        Ok(())
    }
}

/// Every byte the same: for tests that need the exact same key or nonce on every call.
#[derive(Clone, Copy, Debug)]
pub struct Fixed(pub u8);

impl Rng for Fixed {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        buf.fill(self.0);
        Ok(())
    }
}

/// Bytes counting up by `step` from `start` (wrapping): distinct keys from distinct starts.
#[derive(Clone, Copy, Debug)]
pub struct Counter {
    pub next: u8,
    pub step: u8,
}

impl Counter {
    pub fn new(start: u8, step: u8) -> Self {
        Counter { next: start, step }
    }
}

impl Rng for Counter {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        for b in buf {
            self.next = self.next.wrapping_add(self.step);
            *b = self.next;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_streams_repeat_and_differ() {
        let (mut a, mut b, mut c) = (Seeded::new(1), Seeded::new(1), Seeded::new(2));
        let (x, y, z) = (a.next_u64(), b.next_u64(), c.next_u64());
        assert_eq!(x, y);
        assert_ne!(x, z);
        let hits = (0..10_000).filter(|_| a.chance(0.1)).count();
        assert!((800..1200).contains(&hits), "{hits}");
        assert!(!a.chance(0.0));
    }

    #[test]
    fn counter_counts() {
        let mut c = Counter::new(0, 29);
        let mut b = [0u8; 3];
        c.fill(&mut b).unwrap();
        assert_eq!(b, [29, 58, 87]);
    }
}
