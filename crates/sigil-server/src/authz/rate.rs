//! How fast `/token` issues: token buckets per subject and per session.

use super::Tokens;
use sigil_identity::Identity;
use sigil_time::UnixTime;

/// A token bucket's size and refill: at most `burst` at once, then one every `every_secs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub burst: u32,
    pub every_secs: u32,
}

impl std::str::FromStr for Rate {
    type Err = String;

    /// `BURST,SECONDS` (`12,5`: 12 at once, then one every 5 s); both at least 1.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("{s:?}: expected BURST,SECONDS (e.g. 12,5: 12 at once, then one every 5 s)");
        let (b, e) = s.split_once(',').ok_or_else(bad)?;
        let burst: u32 = b.trim().parse().map_err(|_| bad())?;
        let e = e.trim();
        let every_secs: u32 = e
            .strip_suffix('s')
            .unwrap_or(e)
            .parse()
            .map_err(|_| bad())?;
        if burst == 0 || every_secs == 0 {
            return Err(bad());
        }
        Ok(Self { burst, every_secs })
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.burst, self.every_secs)
    }
}

/// `/token` requests per subject, by default: 12 at once, then one every 5 s (each may cost
/// an ECDSA signature and, with `req_cnf_pop`, a verification).
pub const SUBJECT_RATE: Rate = Rate {
    burst: 12,
    every_secs: 5,
};
/// `/token` requests per session, by default: 6 at once, then one every 10 s.
pub const SESSION_RATE: Rate = Rate {
    burst: 6,
    every_secs: 10,
};
/// Sessions whose `/token` buckets are kept at once (sessions that have not asked for a while
/// are forgotten first; forgetting one only gives it a full bucket, the subject's stays).
const MAX_SESSION_BUCKETS: usize = 4096;

/// One token bucket, in thousandths of a request, refilled by the seconds passed.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bucket {
    milli: u64,
    at: i64,
    /// What the seconds counted so far gained beyond whole thousandths (in thousandths of a
    /// request × `every_secs`), kept so that asking often loses nothing to rounding.
    carry: u64,
}

impl Bucket {
    pub(super) fn full(rate: Rate, now: i64) -> Self {
        Self {
            milli: u64::from(rate.burst) * 1000,
            at: now,
            carry: 0,
        }
    }

    pub(super) fn refill(&mut self, rate: Rate, now: i64) {
        let secs = u64::try_from(now.saturating_sub(self.at)).unwrap_or(0);
        let every = u64::from(rate.every_secs.max(1));
        let units = secs.saturating_mul(1000).saturating_add(self.carry);
        self.milli = self.milli.saturating_add(units / every);
        self.carry = units % every;
        let cap = u64::from(rate.burst) * 1000;
        if self.milli >= cap {
            self.milli = cap;
            self.carry = 0;
        }
        self.at = now;
    }

    /// Seconds until one request is in the bucket (0: there is one now).
    pub(super) fn wait(&self, rate: Rate) -> u32 {
        if self.milli >= 1000 {
            return 0;
        }
        let missing = 1000 - self.milli;
        let every = u64::from(rate.every_secs.max(1));
        let units = (missing * every).saturating_sub(self.carry);
        u32::try_from(units.div_ceil(1000)).unwrap_or(u32::MAX)
    }

    pub(super) fn is_full(&self, rate: Rate) -> bool {
        self.milli >= u64::from(rate.burst) * 1000
    }
}

/// Why `/token` refused a request for its rate, and when to ask again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimited {
    /// `session` or `subject`: whose bucket is empty.
    pub whose: &'static str,
    pub retry_secs: u32,
}

impl RateLimited {
    pub fn counter(&self) -> &'static str {
        match self.whose {
            "session" => "token.refused.rate_session",
            _ => "token.refused.rate_subject",
        }
    }
}

impl Tokens {
    /// Takes one `/token` request from `subject`'s bucket and from its session's (`peer`) at
    /// `now`, or says whose bucket is empty and when to ask again. Neither bucket is charged
    /// when either is empty. Checked before anything else `/token` does.
    pub fn take_request(
        &mut self,
        subject: &Identity,
        peer: std::net::SocketAddr,
        now: UnixTime,
    ) -> Result<(), RateLimited> {
        let now = now.as_secs();
        let (sr, pr) = (self.caps.subject_rate, self.caps.session_rate);
        if !self.session_buckets.contains_key(&peer)
            && self.session_buckets.len() >= MAX_SESSION_BUCKETS
        {
            // The bucket idle longest goes (it has refilled the most).
            if let Some(oldest) = self
                .session_buckets
                .iter()
                .min_by_key(|(_, b)| b.at)
                .map(|(a, _)| *a)
            {
                self.session_buckets.remove(&oldest);
            }
        }
        let mut session = *self
            .session_buckets
            .entry(peer)
            .or_insert_with(|| Bucket::full(pr, now));
        let mut own = *self
            .subject_buckets
            .entry(*subject)
            .or_insert_with(|| Bucket::full(sr, now));
        session.refill(pr, now);
        own.refill(sr, now);
        let refused = if session.wait(pr) > 0 {
            Some(RateLimited {
                whose: "session",
                retry_secs: session.wait(pr),
            })
        } else if own.wait(sr) > 0 {
            Some(RateLimited {
                whose: "subject",
                retry_secs: own.wait(sr),
            })
        } else {
            session.milli -= 1000;
            own.milli -= 1000;
            None
        };
        self.session_buckets.insert(peer, session);
        self.subject_buckets.insert(*subject, own);
        refused.map_or(Ok(()), Err)
    }

    /// Forgets the buckets that are full again (at most once a second).
    pub(super) fn prune_buckets(&mut self, now: UnixTime) {
        let now = now.as_secs();
        if now == self.buckets_pruned {
            return;
        }
        self.buckets_pruned = now;
        let (sr, pr) = (self.caps.subject_rate, self.caps.session_rate);
        self.session_buckets.retain(|_, b| {
            let mut b = *b;
            b.refill(pr, now);
            !b.is_full(pr)
        });
        self.subject_buckets.retain(|_, b| {
            let mut b = *b;
            b.refill(sr, now);
            !b.is_full(sr)
        });
        crate::budget::shrink_if_sparse(&mut self.session_buckets);
        crate::budget::shrink_if_sparse(&mut self.subject_buckets);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_support::*;
    use super::super::TokenCaps;
    use super::*;

    /// A bucket asked every second at a rate slower than one a thousand seconds still refills:
    /// the seconds' fractions are carried, not lost to rounding each time it is asked.
    #[test]
    fn a_slow_bucket_asked_every_second_still_refills() {
        let rate = Rate {
            burst: 1,
            every_secs: 1500,
        };
        let mut b = Bucket::full(rate, 0);
        b.refill(rate, 0);
        b.milli -= 1000;
        let mut waits = Vec::new();
        for now in 1..=1500 {
            b.refill(rate, now);
            waits.push(b.wait(rate));
        }
        assert_eq!(waits[0], 1499, "the wait counts down");
        assert_eq!(waits[999], 500);
        assert_eq!(*waits.last().unwrap(), 0, "full again after 1500 s");
        assert!(b.milli >= 1000);
    }

    #[test]
    fn a_rate_is_burst_comma_seconds() {
        assert_eq!(
            "12,5".parse::<Rate>(),
            Ok(Rate {
                burst: 12,
                every_secs: 5
            })
        );
        assert_eq!("2, 3600s".parse::<Rate>().map(|r| r.every_secs), Ok(3600));
        assert_eq!(SUBJECT_RATE.to_string().parse::<Rate>(), Ok(SUBJECT_RATE));
        for bad in ["12", "0,5", "5,0", "a,b", "", "1,2,3", "1,5ss"] {
            let e = bad.parse::<Rate>().unwrap_err();
            assert!(e.contains("BURST,SECONDS"), "{bad}: {e}");
        }
    }

    /// `/token`'s buckets: a session gets its burst, then one request per its interval; a
    /// subject's bucket holds over all its sessions; a refusal charges neither bucket and says
    /// when to ask again; a full bucket is forgotten.
    #[test]
    fn token_requests_are_limited_per_session_and_per_subject() {
        let caps = TokenCaps {
            subject_rate: Rate {
                burst: 4,
                every_secs: 10,
            },
            session_rate: Rate {
                burst: 3,
                every_secs: 5,
            },
            ..TokenCaps::default()
        };
        let mut t = Tokens::new(caps);
        let peer = |n: u8| std::net::SocketAddr::from(([10, 0, 0, n], 5684));
        let c = client();
        for _ in 0..3 {
            t.take_request(&c, peer(1), now(0)).unwrap();
        }
        let r = t.take_request(&c, peer(1), now(0)).unwrap_err();
        assert_eq!(r.whose, "session");
        assert_eq!(r.retry_secs, 5);
        assert_eq!(r.counter(), "token.refused.rate_session");
        // Another session of the same subject: one left in the subject's bucket.
        t.take_request(&c, peer(2), now(0)).unwrap();
        let r = t.take_request(&c, peer(2), now(0)).unwrap_err();
        assert_eq!((r.whose, r.retry_secs), ("subject", 10));
        // Another subject is not touched.
        let other = Identity::parse("ffeeddccbbaa99887766554433221100").unwrap();
        t.take_request(&other, peer(3), now(0)).unwrap();
        // Ten seconds on: one more for the subject.
        t.take_request(&c, peer(2), now(10)).unwrap();
        assert!(t.take_request(&c, peer(2), now(10)).is_err());
        // Long after, every bucket is full again and forgotten.
        t.expire(now(1000));
        assert!(t.session_buckets.is_empty() && t.subject_buckets.is_empty());
    }
}
