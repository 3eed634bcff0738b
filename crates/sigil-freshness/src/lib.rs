//! Freshness of signed readings (RFC 8387 §8.2).
//!
//! Device side: [`SequenceCounter`] hands out numbers that only go up. Before a number is used
//! it is covered by a reservation written to persistent storage; reservations are made in
//! blocks so flash is written once per block, and a power cut can skip numbers but never reuse
//! one.
//!
//! Receiver side: [`check`] accepts a number only if it is above the highest seen for the
//! identity and not more than a threshold ahead; [`resync`] moves the highest number forward
//! when the device re-registers with its current number; [`reconstruct`] recovers the full
//! number from its low bits (the scheme of Huang cited by §8.2).
#![no_std]
#![forbid(unsafe_code)]

use core::fmt;

/// Persistent storage for the device's sequence reservation. `store` must be durable when it
/// returns (flash written, or file synced).
pub trait SequenceStore {
    type Error;
    /// The highest reserved number (exclusive bound), or `None` on first boot.
    fn load(&mut self) -> Result<Option<u64>, Self::Error>;
    fn store(&mut self, reserved_until: u64) -> Result<(), Self::Error>;
}

/// The device's sequence counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceCounter {
    next: u64,
    reserved_until: u64,
    block: u64,
}

/// Why a number could not be handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceError<E> {
    /// Writing the reservation failed: no number is handed out that is not covered.
    Storage(E),
    /// The 64-bit space is used up (in practice unreachable; the device must regenerate its
    /// identity).
    Exhausted,
}

impl SequenceCounter {
    /// Boots the counter: everything below the stored reservation may have been used before the
    /// restart, so counting resumes at the reservation, and a new block is reserved first.
    pub fn boot<S: SequenceStore>(
        store: &mut S,
        block: u64,
    ) -> Result<Self, SequenceError<S::Error>> {
        let block = block.max(1);
        let start = store
            .load()
            .map_err(SequenceError::Storage)?
            .unwrap_or(1)
            .max(1);
        let reserved_until = start.checked_add(block).ok_or(SequenceError::Exhausted)?;
        store
            .store(reserved_until)
            .map_err(SequenceError::Storage)?;
        Ok(Self {
            next: start,
            reserved_until,
            block,
        })
    }

    /// The next number, reserving a new block in storage first when needed.
    pub fn next<S: SequenceStore>(
        &mut self,
        store: &mut S,
    ) -> Result<u64, SequenceError<S::Error>> {
        if self.next >= self.reserved_until {
            let until = self
                .next
                .checked_add(self.block)
                .ok_or(SequenceError::Exhausted)?;
            store.store(until).map_err(SequenceError::Storage)?;
            self.reserved_until = until;
        }
        let n = self.next;
        self.next += 1;
        Ok(n)
    }

    /// The number the next call to [`SequenceCounter::next`] returns.
    pub fn peek(&self) -> u64 {
        self.next
    }
}

/// The receiver's acceptance threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreshnessPolicy {
    /// Largest accepted jump above the highest number seen ("the preset threshold", §8.2).
    pub max_ahead: u64,
}

impl Default for FreshnessPolicy {
    fn default() -> Self {
        Self { max_ahead: 1000 }
    }
}

/// The outcome of a freshness check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Accept; `seq` becomes the new highest number once the reading is stored.
    Fresh,
    /// The number was seen already or is older: a replay (or a duplicate).
    Replay { highest: u64 },
    /// More than the threshold ahead: the device must resynchronise (§8.2: answer a
    /// Confirmable update with Reset, the device re-registers with its current number).
    TooFarAhead { highest: u64 },
}

impl Verdict {
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Replay { .. } => "replay",
            Self::TooFarAhead { .. } => "out_of_window",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fresh => f.write_str("fresh"),
            Self::Replay { highest } => write!(
                f,
                "replayed or old sequence number (highest seen {highest})"
            ),
            Self::TooFarAhead { highest } => {
                write!(f, "sequence number too far ahead of {highest}")
            }
        }
    }
}

/// Checks `seq` against the highest number seen for the identity (0 when none).
pub fn check(highest: u64, seq: u64, policy: &FreshnessPolicy) -> Verdict {
    if seq <= highest {
        Verdict::Replay { highest }
    } else if seq - highest > policy.max_ahead {
        Verdict::TooFarAhead { highest }
    } else {
        Verdict::Fresh
    }
}

/// Resynchronisation (§8.2): the device announced `current` in an authenticated
/// re-registration. The highest number only ever moves forward, so replaying an old
/// announcement cannot reopen a replay window. Returns the new highest number.
pub fn resync(highest: u64, current: u64) -> u64 {
    highest.max(current)
}

/// Recovers the full sequence number from its `k` least-significant bits: the smallest number
/// above `highest` with those low bits. Correct as long as fewer than `2^k` numbers were skipped
/// since `highest`; a wrong guess fails signature verification, because the full number is
/// signed.
pub fn reconstruct(highest: u64, k: u8, bits: u64) -> Option<u64> {
    if k == 0 || k > 63 || bits >> k != 0 {
        return None;
    }
    let modulus = 1u64 << k;
    let mask = modulus - 1;
    let base = highest.checked_add(1)?;
    let candidate = (base & !mask) | bits;
    if candidate >= base {
        Some(candidate)
    } else {
        candidate.checked_add(modulus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Storage that can be told to fail, to model a write error or a power cut.
    struct Flash {
        value: Option<u64>,
        writes: u32,
        fail: bool,
    }
    impl SequenceStore for Flash {
        type Error = ();
        fn load(&mut self) -> Result<Option<u64>, ()> {
            Ok(self.value)
        }
        fn store(&mut self, v: u64) -> Result<(), ()> {
            if self.fail {
                return Err(());
            }
            self.writes += 1;
            self.value = Some(v);
            Ok(())
        }
    }

    #[test]
    fn numbers_never_repeat_across_power_cuts() {
        let mut flash = Flash {
            value: None,
            writes: 0,
            fail: false,
        };
        let mut seen = [false; 200];
        let mut last = 0;
        for boot in 0..10 {
            let mut c = SequenceCounter::boot(&mut flash, 8).unwrap();
            // Use a varying number of values before "losing power".
            for _ in 0..(boot * 3 + 1) {
                let n = c.next(&mut flash).unwrap();
                assert!(n > last, "{n} after {last}");
                assert!(!seen[n as usize]);
                seen[n as usize] = true;
                last = n;
            }
        }
        // One write per boot plus one per exhausted block, not one per number.
        assert!(flash.writes < 30, "{}", flash.writes);
    }

    #[test]
    fn storage_failure_hands_out_nothing() {
        let mut flash = Flash {
            value: Some(10),
            writes: 0,
            fail: false,
        };
        let mut c = SequenceCounter::boot(&mut flash, 2).unwrap();
        assert_eq!(c.next(&mut flash), Ok(10));
        assert_eq!(c.next(&mut flash), Ok(11));
        flash.fail = true;
        assert_eq!(c.next(&mut flash), Err(SequenceError::Storage(())));
        flash.fail = false;
        assert_eq!(c.next(&mut flash), Ok(12));
        let mut fresh = Flash {
            value: None,
            writes: 0,
            fail: true,
        };
        assert!(SequenceCounter::boot(&mut fresh, 4).is_err());
    }

    #[test]
    fn receiver_window() {
        let p = FreshnessPolicy { max_ahead: 10 };
        assert_eq!(check(5, 6, &p), Verdict::Fresh);
        assert_eq!(check(5, 15, &p), Verdict::Fresh);
        assert_eq!(check(5, 16, &p), Verdict::TooFarAhead { highest: 5 });
        assert_eq!(check(5, 5, &p), Verdict::Replay { highest: 5 });
        assert_eq!(check(5, 0, &p), Verdict::Replay { highest: 5 });
        assert_eq!(check(0, 1, &p), Verdict::Fresh);
        assert_eq!(
            check(u64::MAX, u64::MAX, &p),
            Verdict::Replay { highest: u64::MAX }
        );
        assert_eq!(resync(50, 40), 50);
        assert_eq!(resync(50, 400), 400);
    }

    #[test]
    fn low_bits_reconstruction() {
        assert_eq!(reconstruct(0x1234, 8, 0x35), Some(0x1235));
        assert_eq!(reconstruct(0x1234, 8, 0x34), Some(0x1334));
        assert_eq!(reconstruct(0x12ff, 8, 0x00), Some(0x1300));
        assert_eq!(reconstruct(0, 4, 0), Some(16));
        assert_eq!(reconstruct(0, 4, 1), Some(1));
        assert_eq!(reconstruct(5, 4, 16), None);
        assert_eq!(reconstruct(5, 0, 0), None);
        assert_eq!(reconstruct(u64::MAX, 8, 0), None);
        // Every number within 2^k of the highest is recovered exactly.
        for highest in [0u64, 1, 250, 255, 256, 1000, 65_535] {
            for ahead in 1..=256u64 {
                let seq = highest + ahead;
                assert_eq!(
                    reconstruct(highest, 8, seq & 0xff),
                    Some(seq),
                    "{highest} {ahead}"
                );
            }
        }
    }
}
