//! Time as values, never read here.
//!
//! Sigil's cores read no clock: the caller passes time in. Two kinds of time cross the
//! crate boundaries, and mixing them up is a bug the compiler should catch:
//!
//! - [`Instant`]: milliseconds on a monotonic clock with an arbitrary origin (boot, process
//!   start, an emulator's zero). Retransmission timers, lifetimes of handshakes and
//!   deduplication entries, wake-ups. Spans between instants are [`core::time::Duration`].
//! - [`UnixTime`]: seconds since 1970-01-01T00:00:00Z, as a wall clock says. Certificate
//!   validity, token expiry, timestamps stored with readings and registrations.
//!
//! Arithmetic saturates: an instant near `u64::MAX` plus a span stays at the end of time
//! instead of wrapping to a past deadline.
#![no_std]
#![forbid(unsafe_code)]

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point on a monotonic clock, in milliseconds since an origin the caller chose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The origin of the caller's clock.
    pub const ZERO: Instant = Instant(0);
    /// Later than every instant a clock will reach; "never" for deadlines.
    pub const NEVER: Instant = Instant(u64::MAX);

    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms)
    }

    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// The span from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let ms = u64::try_from(d.as_millis()).ok()?;
        self.0.checked_add(ms).map(Instant)
    }

    pub fn saturating_add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant::NEVER)
    }

    pub fn saturating_sub(self, d: Duration) -> Instant {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_sub(ms))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_since(earlier)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", self.0)
    }
}

/// Seconds since the Unix epoch, from a wall clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixTime(i64);

impl UnixTime {
    pub const EPOCH: UnixTime = UnixTime(0);

    pub const fn from_secs(s: i64) -> Self {
        UnixTime(s)
    }

    pub const fn as_secs(self) -> i64 {
        self.0
    }

    pub fn saturating_add(self, d: Duration) -> UnixTime {
        let s = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        UnixTime(self.0.saturating_add(s))
    }

    pub fn saturating_sub(self, d: Duration) -> UnixTime {
        let s = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        UnixTime(self.0.saturating_sub(s))
    }

    /// Whole seconds from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: UnixTime) -> Duration {
        Duration::from_secs(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }
}

impl Add<Duration> for UnixTime {
    type Output = UnixTime;
    fn add(self, d: Duration) -> UnixTime {
        self.saturating_add(d)
    }
}

impl fmt::Display for UnixTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} s since the epoch", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_saturate_instead_of_wrapping() {
        let late = Instant::from_millis(u64::MAX - 5);
        assert_eq!(late + Duration::from_millis(10), Instant::NEVER);
        assert_eq!(
            Instant::from_millis(5).saturating_sub(Duration::from_millis(10)),
            Instant::ZERO
        );
        assert_eq!(
            Instant::from_millis(3) - Instant::from_millis(7),
            Duration::ZERO
        );
        assert_eq!(
            Instant::from_millis(7) - Instant::from_millis(3),
            Duration::from_millis(4)
        );
        assert_eq!(Instant::ZERO.checked_add(Duration::MAX), None);
    }

    #[test]
    fn unix_time_saturates() {
        let t = UnixTime::from_secs(i64::MAX - 1);
        assert_eq!(t + Duration::from_secs(5), UnixTime::from_secs(i64::MAX));
        assert_eq!(
            UnixTime::from_secs(100).saturating_since(UnixTime::from_secs(40)),
            Duration::from_secs(60)
        );
        assert_eq!(
            UnixTime::from_secs(1).saturating_since(UnixTime::from_secs(40)),
            Duration::ZERO
        );
    }
}
