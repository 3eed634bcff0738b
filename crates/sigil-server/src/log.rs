//! Rate-limited logging of events a peer can cause (refusals, registrations, handshake
//! failures): a peer that sends a million bad datagrams must not write a million log lines.
//! Each kind of line may be written `burst` times per window; the rest are counted, and the
//! first line of that kind after the window closes (or [`LogLimiter::flush`]) writes one
//! summary with the number suppressed. The counters in [`crate::Stats`] stay exact; only the
//! log is thinned.
//!
//! Budget: at most `(burst + 1)` lines per kind per window. With the server's defaults
//! (20 lines per 10 s window, about 25 kinds a peer can trigger, lines under 300 bytes) that
//! is under 16 KB of log per window whatever the peers send.
//!
//! Clock-free like the rest of the server: the caller passes the time (seconds; the wall clock
//! is good enough for log windows).

use std::collections::BTreeMap;

/// Lines per window and window length of the server's limiter.
pub const DEFAULT_BURST: u32 = 20;
pub const DEFAULT_WINDOW_SECS: i64 = 10;

#[derive(Debug, Default)]
struct Slot {
    window_start: i64,
    written: u32,
    suppressed: u64,
}

/// What to do with one line.
#[derive(Debug, PartialEq, Eq)]
pub struct Permit {
    /// Write the line.
    pub write: bool,
    /// Write a summary first: this many lines of the kind were suppressed in the window
    /// that just closed.
    pub suppressed: Option<u64>,
}

/// Per-kind log budget.
#[derive(Debug)]
pub struct LogLimiter {
    burst: u32,
    window_secs: i64,
    // Keyed by `&'static str`, so the table is as large as the set of kinds in the code.
    slots: BTreeMap<&'static str, Slot>,
}

impl Default for LogLimiter {
    fn default() -> Self {
        Self::new(DEFAULT_BURST, DEFAULT_WINDOW_SECS)
    }
}

impl LogLimiter {
    pub fn new(burst: u32, window_secs: i64) -> Self {
        Self {
            burst,
            window_secs: window_secs.max(1),
            slots: BTreeMap::new(),
        }
    }

    /// Whether a line of `kind` may be written at `now_secs`.
    pub fn permit(&mut self, kind: &'static str, now_secs: i64) -> Permit {
        let slot = self.slots.entry(kind).or_default();
        let mut suppressed = None;
        if now_secs.saturating_sub(slot.window_start) >= self.window_secs
            || now_secs < slot.window_start
        {
            if slot.suppressed > 0 {
                suppressed = Some(slot.suppressed);
            }
            *slot = Slot {
                window_start: now_secs,
                written: 0,
                suppressed: 0,
            };
        }
        if slot.written < self.burst {
            slot.written += 1;
            Permit {
                write: true,
                suppressed,
            }
        } else {
            slot.suppressed += 1;
            Permit {
                write: false,
                suppressed,
            }
        }
    }

    /// Summaries of every kind whose window has closed with lines suppressed (called on a
    /// timer, so a flood that stops still gets its summary).
    pub fn flush(&mut self, now_secs: i64) -> Vec<(&'static str, u64)> {
        let mut out = Vec::new();
        for (kind, slot) in &mut self.slots {
            if slot.suppressed > 0 && now_secs.saturating_sub(slot.window_start) >= self.window_secs
            {
                out.push((*kind, slot.suppressed));
                slot.suppressed = 0;
            }
        }
        out
    }
}

/// Writes a `tracing` event through a [`LogLimiter`]: `limited!(limiter, now_secs, "kind",
/// warn, field = value, ..., "message")`. Suppressed lines are summarised with one
/// `warn!` naming the kind and the count.
#[macro_export]
macro_rules! limited {
    ($limiter:expr, $now:expr, $kind:expr, $level:ident, $($rest:tt)+) => {{
        let p = $limiter.permit($kind, $now);
        if let Some(n) = p.suppressed {
            tracing::warn!(kind = $kind, suppressed = n, "similar log lines suppressed (counters are exact)");
        }
        if p.write {
            tracing::$level!($($rest)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_summary() {
        let mut l = LogLimiter::new(3, 10);
        let written = (0..1000).filter(|_| l.permit("refused", 100).write).count();
        assert_eq!(written, 3);
        // Another kind has its own budget.
        assert!(l.permit("registered", 100).write);
        // The next window starts with the summary of the last.
        let p = l.permit("refused", 110);
        assert_eq!(
            p,
            Permit {
                write: true,
                suppressed: Some(997)
            }
        );
    }

    #[test]
    fn flush_reports_a_flood_that_stopped() {
        let mut l = LogLimiter::new(1, 10);
        for _ in 0..5 {
            l.permit("refused", 0);
        }
        assert!(l.flush(5).is_empty());
        assert_eq!(l.flush(10), vec![("refused", 4)]);
        assert!(l.flush(20).is_empty());
    }
}
