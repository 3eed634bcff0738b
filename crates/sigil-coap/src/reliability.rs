//! Message transmission parameters and the Confirmable retransmission timer (RFC 7252 §4.2,
//! §4.8). Time is milliseconds on a clock the caller owns.

/// The configurable transmission parameters of RFC 7252 §4.8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransmissionParameters {
    /// ACK_TIMEOUT in milliseconds (default 2000).
    pub ack_timeout_ms: u32,
    /// ACK_RANDOM_FACTOR in thousandths (default 1500, i.e. 1.5); at least 1000.
    pub ack_random_factor_milli: u32,
    /// MAX_RETRANSMIT (default 4).
    pub max_retransmit: u8,
}

impl Default for TransmissionParameters {
    fn default() -> Self {
        Self {
            ack_timeout_ms: 2000,
            ack_random_factor_milli: 1500,
            max_retransmit: 4,
        }
    }
}

impl TransmissionParameters {
    /// MAX_TRANSMIT_SPAN (§4.8.2), ms.
    pub fn max_transmit_span_ms(&self) -> u64 {
        let base = u64::from(self.ack_timeout_ms) * ((1u64 << self.max_retransmit) - 1);
        base * u64::from(self.ack_random_factor_milli) / 1000
    }

    /// MAX_TRANSMIT_WAIT (§4.8.2), ms.
    pub fn max_transmit_wait_ms(&self) -> u64 {
        let base = u64::from(self.ack_timeout_ms) * ((1u64 << (self.max_retransmit + 1)) - 1);
        base * u64::from(self.ack_random_factor_milli) / 1000
    }

    /// EXCHANGE_LIFETIME (§4.8.2) with MAX_LATENCY = 100 s and PROCESSING_DELAY = ACK_TIMEOUT:
    /// how long a message ID must be remembered for deduplication. 247 s with the defaults.
    pub fn exchange_lifetime_ms(&self) -> u64 {
        self.max_transmit_span_ms() + 2 * 100_000 + u64::from(self.ack_timeout_ms)
    }

    /// The initial timeout: random in [ACK_TIMEOUT, ACK_TIMEOUT * ACK_RANDOM_FACTOR] (§4.2).
    /// `random` is any uniformly distributed value from the caller's RNG.
    pub fn initial_timeout_ms(&self, random: u32) -> u64 {
        let lo = u64::from(self.ack_timeout_ms);
        let span = lo * u64::from(self.ack_random_factor_milli.max(1000) - 1000) / 1000;
        lo + if span == 0 {
            0
        } else {
            u64::from(random) % (span + 1)
        }
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
    deadline: u64,
    timeout: u64,
    count: u8,
    max: u8,
}

impl Retransmission {
    pub fn start(now_ms: u64, params: &TransmissionParameters, random: u32) -> Self {
        let timeout = params.initial_timeout_ms(random);
        Self {
            deadline: now_ms + timeout,
            timeout,
            count: 0,
            max: params.max_retransmit,
        }
    }

    /// When the caller must call [`Retransmission::on_timer`] next.
    pub fn deadline(&self) -> u64 {
        self.deadline
    }

    /// Retransmissions sent so far.
    pub fn retransmissions(&self) -> u8 {
        self.count
    }

    pub fn on_timer(&mut self, now_ms: u64) -> RetransmitDecision {
        if now_ms < self.deadline {
            return RetransmitDecision::Wait;
        }
        if self.count >= self.max {
            return RetransmitDecision::GiveUp;
        }
        self.count += 1;
        self.timeout *= 2;
        self.deadline = now_ms + self.timeout;
        RetransmitDecision::Resend
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_constants_match_rfc7252_section_4_8_2() {
        let p = TransmissionParameters::default();
        assert_eq!(p.max_transmit_span_ms(), 45_000);
        assert_eq!(p.max_transmit_wait_ms(), 93_000);
        assert_eq!(p.exchange_lifetime_ms(), 247_000);
        assert_eq!(p.initial_timeout_ms(0), 2000);
        assert_eq!(p.initial_timeout_ms(1000), 3000);
        assert_eq!(p.initial_timeout_ms(1001), 2000);
    }

    #[test]
    fn exponential_backoff_then_give_up() {
        let p = TransmissionParameters::default();
        let mut r = Retransmission::start(0, &p, 0);
        assert_eq!(r.on_timer(1999), RetransmitDecision::Wait);
        let mut t = 2000;
        let mut gaps = std::vec::Vec::new();
        loop {
            match r.on_timer(t) {
                RetransmitDecision::Resend => {
                    gaps.push(r.deadline() - t);
                    t = r.deadline();
                }
                RetransmitDecision::GiveUp => break,
                RetransmitDecision::Wait => unreachable!(),
            }
        }
        assert_eq!(gaps, [4000, 8000, 16000, 32000]);
        assert_eq!(r.retransmissions(), 4);
        assert_eq!(t, 62_000);
    }
    extern crate std;
}
