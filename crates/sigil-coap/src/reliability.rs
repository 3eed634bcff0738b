//! Message transmission parameters and the Confirmable retransmission timer (RFC 7252 §4.2,
//! §4.8). Time comes from the caller's clock as [`Instant`]; spans are [`Duration`].

use core::time::Duration;
use sigil_time::Instant;

/// The configurable transmission parameters of RFC 7252 §4.8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransmissionParameters {
    /// ACK_TIMEOUT (default 2 s). Whole milliseconds count; anything finer is ignored.
    pub ack_timeout: Duration,
    /// ACK_RANDOM_FACTOR in thousandths (default 1500, i.e. 1.5); at least 1000.
    pub ack_random_factor_milli: u32,
    /// MAX_RETRANSMIT (default 4).
    pub max_retransmit: u8,
}

impl Default for TransmissionParameters {
    fn default() -> Self {
        Self {
            ack_timeout: Duration::from_secs(2),
            ack_random_factor_milli: 1500,
            max_retransmit: 4,
        }
    }
}

impl TransmissionParameters {
    fn ack_timeout_ms(&self) -> u64 {
        u64::try_from(self.ack_timeout.as_millis()).unwrap_or(u64::MAX)
    }

    fn scaled(&self, doublings: u8) -> Duration {
        let factor = 1u64.checked_shl(u32::from(doublings)).unwrap_or(u64::MAX) - 1;
        let base = self.ack_timeout_ms().saturating_mul(factor);
        Duration::from_millis(base.saturating_mul(u64::from(self.ack_random_factor_milli)) / 1000)
    }

    /// MAX_TRANSMIT_SPAN (§4.8.2): ACK_TIMEOUT * (2^MAX_RETRANSMIT - 1) * ACK_RANDOM_FACTOR.
    pub fn max_transmit_span(&self) -> Duration {
        self.scaled(self.max_retransmit)
    }

    /// MAX_TRANSMIT_WAIT (§4.8.2): ACK_TIMEOUT * (2^(MAX_RETRANSMIT + 1) - 1) * ACK_RANDOM_FACTOR.
    pub fn max_transmit_wait(&self) -> Duration {
        self.scaled(self.max_retransmit.saturating_add(1))
    }

    /// EXCHANGE_LIFETIME (§4.8.2) with MAX_LATENCY = 100 s and PROCESSING_DELAY = ACK_TIMEOUT:
    /// how long a message ID must be remembered for deduplication. 247 s with the defaults.
    pub fn exchange_lifetime(&self) -> Duration {
        self.max_transmit_span() + Duration::from_secs(200) + self.ack_timeout
    }

    /// The initial timeout: random in [ACK_TIMEOUT, ACK_TIMEOUT * ACK_RANDOM_FACTOR] (§4.2).
    /// `random` is any uniformly distributed value from the caller's RNG.
    pub fn initial_timeout(&self, random: u32) -> Duration {
        let lo = self.ack_timeout_ms();
        let span =
            lo.saturating_mul(u64::from(self.ack_random_factor_milli.max(1000) - 1000)) / 1000;
        Duration::from_millis(lo.saturating_add(if span == 0 {
            0
        } else {
            u64::from(random) % (span + 1)
        }))
    }
}

/// What the caller should do when a retransmission timer fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetransmitDecision {
    /// The deadline has not passed yet.
    Wait,
    /// Send the message again; the timer is re-armed with a doubled timeout.
    Resend,
    /// MAX_RETRANSMIT reached and the last timeout expired: give up (§4.2).
    GiveUp,
}

/// The retransmission state of one outstanding Confirmable message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retransmission {
    deadline: Instant,
    timeout: Duration,
    count: u8,
    max: u8,
}

impl Retransmission {
    pub fn start(now: Instant, params: &TransmissionParameters, random: u32) -> Self {
        let timeout = params.initial_timeout(random);
        Self {
            deadline: now + timeout,
            timeout,
            count: 0,
            max: params.max_retransmit,
        }
    }

    /// When the caller must call [`Retransmission::on_timer`] next.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Retransmissions sent so far.
    pub fn retransmissions(&self) -> u8 {
        self.count
    }

    pub fn on_timer(&mut self, now: Instant) -> RetransmitDecision {
        if now < self.deadline {
            return RetransmitDecision::Wait;
        }
        if self.count >= self.max {
            return RetransmitDecision::GiveUp;
        }
        self.count += 1;
        self.timeout = self.timeout.saturating_mul(2);
        self.deadline = now + self.timeout;
        RetransmitDecision::Resend
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn default_constants_match_rfc7252_section_4_8_2() {
        let p = TransmissionParameters::default();
        assert_eq!(p.max_transmit_span(), Duration::from_secs(45));
        assert_eq!(p.max_transmit_wait(), Duration::from_secs(93));
        assert_eq!(p.exchange_lifetime(), Duration::from_secs(247));
        assert_eq!(p.initial_timeout(0), Duration::from_millis(2000));
        assert_eq!(p.initial_timeout(1000), Duration::from_millis(3000));
        assert_eq!(p.initial_timeout(1001), Duration::from_millis(2000));
    }

    #[test]
    fn extreme_parameters_saturate_instead_of_overflowing() {
        let p = TransmissionParameters {
            ack_timeout: Duration::from_secs(u64::MAX / 4),
            ack_random_factor_milli: u32::MAX,
            max_retransmit: u8::MAX,
        };
        assert!(p.exchange_lifetime() >= p.max_transmit_span());
        let mut r = Retransmission::start(at(u64::MAX - 1), &p, u32::MAX);
        assert_eq!(r.deadline(), Instant::NEVER);
        assert_eq!(r.on_timer(Instant::NEVER), RetransmitDecision::Resend);
    }

    #[test]
    fn exponential_backoff_then_give_up() {
        let p = TransmissionParameters::default();
        let mut r = Retransmission::start(at(0), &p, 0);
        assert_eq!(r.on_timer(at(1999)), RetransmitDecision::Wait);
        let mut t = at(2000);
        let mut gaps = std::vec::Vec::new();
        loop {
            match r.on_timer(t) {
                RetransmitDecision::Resend => {
                    gaps.push((r.deadline() - t).as_millis());
                    t = r.deadline();
                }
                RetransmitDecision::GiveUp => break,
                RetransmitDecision::Wait => unreachable!(),
            }
        }
        assert_eq!(gaps, [4000, 8000, 16000, 32000]);
        assert_eq!(r.retransmissions(), 4);
        assert_eq!(t, at(62_000));
    }
    extern crate std;
}
