//! What happens to one frame on one hop: whether it is lost, and how long it occupies the air.

/// SplitMix64: the emulator's only source of chance, seeded, so a run is a function of its
/// seed and configuration.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}

/// Per-frame loss on one hop.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Loss {
    None,
    /// Each frame is lost independently with probability `p`.
    Bernoulli {
        p: f64,
    },
    /// Gilbert-Elliott: a two-state Markov chain stepped once per frame slot (the time one
    /// frame occupies the hop, so a burst is a stretch of time, however few frames cross it);
    /// frames are lost with `loss_good` in the good state and `loss_bad` in the bad one.
    GilbertElliott {
        p_good_to_bad: f64,
        p_bad_to_good: f64,
        loss_good: f64,
        loss_bad: f64,
    },
}

impl Loss {
    /// The long-run fraction of frames lost.
    pub fn mean(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Bernoulli { p } => p,
            Loss::GilbertElliott {
                p_good_to_bad,
                p_bad_to_good,
                loss_good,
                loss_bad,
            } => {
                let bad = p_good_to_bad / (p_good_to_bad + p_bad_to_good);
                bad * loss_bad + (1.0 - bad) * loss_good
            }
        }
    }

    /// A bursty channel with mean loss `mean` and mean burst (bad-state stay) of `burst`
    /// frames, losing every frame in the bad state and none in the good one.
    pub fn bursty(mean: f64, burst: f64) -> Self {
        let p_bad_to_good = 1.0 / burst;
        Loss::GilbertElliott {
            p_good_to_bad: mean * p_bad_to_good / (1.0 - mean),
            p_bad_to_good,
            loss_good: 0.0,
            loss_bad: 1.0,
        }
    }
}

/// The loss process of one hop in one direction.
#[derive(Clone, Debug)]
pub struct Channel {
    pub loss: Loss,
    bad: bool,
    /// Slot of the Gilbert-Elliott chain, µs, and when it was last stepped.
    slot_us: u64,
    last_slot: Option<u64>,
}

impl Channel {
    /// A channel whose Gilbert-Elliott chain (if any) steps once per `slot_us`.
    pub fn new(loss: Loss, slot_us: u64) -> Self {
        Self {
            loss,
            bad: false,
            slot_us: slot_us.max(1),
            last_slot: None,
        }
    }

    /// Is a frame sent at `now_us` lost?
    pub fn lose(&mut self, rng: &mut SplitMix, now_us: u64) -> bool {
        match self.loss {
            Loss::None => false,
            Loss::Bernoulli { p } => rng.chance(p),
            Loss::GilbertElliott {
                p_good_to_bad,
                p_bad_to_good,
                loss_good,
                loss_bad,
            } => {
                // Step the chain over the slots since the last frame, in closed form: after
                // n steps P(bad) = pi + (x0 - pi) * (1 - p_gb - p_bg)^n.
                let slot = now_us / self.slot_us;
                let n = match self.last_slot {
                    Some(last) => slot.saturating_sub(last).max(1),
                    None => 1,
                };
                self.last_slot = Some(slot.max(self.last_slot.unwrap_or(0) + 1));
                let pi = p_good_to_bad / (p_good_to_bad + p_bad_to_good);
                let x0 = if self.bad { 1.0 } else { 0.0 };
                let lambda = 1.0 - p_good_to_bad - p_bad_to_good;
                let p_bad = pi + (x0 - pi) * lambda.powi(n.min(i32::MAX as u64) as i32);
                self.bad = rng.chance(p_bad);
                rng.chance(if self.bad { loss_bad } else { loss_good })
            }
        }
    }
}

/// Time a frame occupies one hop: the two-way-authentication paper's fit
/// c(x) = ceil(x/100)·a + x·b, applied per frame (so the ceiling is the frame count): `a` per
/// frame (medium access, preamble, turnaround, the receiver's processing) and `b` per byte on
/// the air. The paper fitted a = 27.368 ms and b = 0.072 ms/byte to half its measured ping
/// round-trip times over BLIP.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    pub per_frame_us: u64,
    pub per_byte_ns: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            per_frame_us: 27_368,
            per_byte_ns: 72_000,
        }
    }
}

impl Latency {
    /// Microseconds one frame of `len` bytes (MAC header and FCS included) takes on one hop.
    pub fn frame_us(&self, len: usize) -> u64 {
        self.per_frame_us + self.per_byte_ns * len as u64 / 1000
    }

    /// The bare 250 kbit/s O-QPSK PHY: 32 µs per byte plus the 6-byte synchronisation header
    /// and PHY header, and a 192 µs turnaround; no medium access. A lower bound.
    pub fn phy_only() -> Self {
        Self {
            per_frame_us: 192 + 6 * 32,
            per_byte_ns: 32_000,
        }
    }
}

/// Air time of one frame of `len` bytes at 250 kbit/s (what the radio spends transmitting or
/// receiving it, SHR and PHR included): the energy model's per-frame radio time.
pub fn air_us(len: usize) -> u64 {
    (len as u64 + 6) * 32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames one slot apart.
    fn measured(loss: Loss, n: usize, seed: u64) -> f64 {
        let mut rng = SplitMix(seed);
        let mut c = Channel::new(loss, 1000);
        (0..n as u64)
            .filter(|&i| c.lose(&mut rng, i * 1000))
            .count() as f64
            / n as f64
    }

    #[test]
    fn bernoulli_loss_matches_its_rate() {
        for p in [0.01, 0.05, 0.1, 0.3] {
            let m = measured(Loss::Bernoulli { p }, 200_000, 1);
            assert!((m - p).abs() < 0.005, "p={p} measured {m}");
        }
        assert_eq!(measured(Loss::None, 1000, 1), 0.0);
    }

    #[test]
    fn gilbert_elliott_matches_its_stationary_loss_and_is_bursty() {
        let loss = Loss::bursty(0.1, 5.0);
        assert!((loss.mean() - 0.1).abs() < 1e-12);
        let m = measured(loss, 400_000, 2);
        assert!((m - 0.1).abs() < 0.01, "measured {m}");
        // Bursts: the chance that a loss follows a loss is far above the mean.
        let mut rng = SplitMix(3);
        let mut c = Channel::new(loss, 1000);
        let seq: Vec<bool> = (0..200_000u64)
            .map(|i| c.lose(&mut rng, i * 1000))
            .collect();
        let after_loss = seq.windows(2).filter(|w| w[0]).count();
        let both = seq.windows(2).filter(|w| w[0] && w[1]).count();
        let cond = both as f64 / after_loss as f64;
        assert!((cond - 0.8).abs() < 0.02, "P(loss | loss) = {cond}");
    }

    #[test]
    fn a_burst_is_a_stretch_of_time_not_of_frames() {
        // Frames 100 slots apart see the stationary loss, independently: a burst of 5 slots
        // has long ended by the next frame.
        let loss = Loss::bursty(0.1, 5.0);
        let mut rng = SplitMix(4);
        let mut c = Channel::new(loss, 1000);
        let seq: Vec<bool> = (0..100_000u64)
            .map(|i| c.lose(&mut rng, i * 100_000))
            .collect();
        let rate = seq.iter().filter(|&&l| l).count() as f64 / seq.len() as f64;
        let after_loss = seq.windows(2).filter(|w| w[0]).count();
        let both = seq.windows(2).filter(|w| w[0] && w[1]).count() as f64 / after_loss as f64;
        assert!((rate - 0.1).abs() < 0.01, "{rate}");
        assert!((both - 0.1).abs() < 0.02, "P(loss | loss) = {both}");
    }

    #[test]
    fn same_seed_same_losses() {
        let a = measured(Loss::bursty(0.05, 3.0), 10_000, 9);
        let b = measured(Loss::bursty(0.05, 3.0), 10_000, 9);
        assert_eq!(a, b);
        assert_ne!(a, measured(Loss::bursty(0.05, 3.0), 10_000, 10));
    }

    #[test]
    fn latency_follows_the_papers_fit() {
        let l = Latency::default();
        // One 100-byte frame: a + 100 b = 27.368 + 7.2 ms.
        assert_eq!(l.frame_us(100), 34_568);
        assert_eq!(air_us(127), 4_256);
    }
}
