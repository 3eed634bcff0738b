//! The IoT-CryptoDiet scheme (`sigil-diet`) through the emulator: the device and a router
//! exchange hellos, then the device sends readings encrypted and signed, unacknowledged (as in
//! the seed's toy protocol).

use crate::energy::{Activity, CycleTable, Metered};
use crate::net::{Emulator, End, LinkConfig};
use crate::scenarios::{self, PerReading};
use crate::SeededRng;
use sigil_crypto::{PublicKey, RustCrypto};
use sigil_diet::{Config, Node, NodeKeys, Phase, Received, HELLO_LEN};
use sigil_time::Instant;
use std::time::Duration;

/// The key exchange's cost to the device, and the readings that followed.
pub struct DietRun {
    pub setup_completed: bool,
    pub setup: Activity,
    pub setup_ms: f64,
    pub readings: PerReading,
    /// Readings the router decrypted and verified.
    pub delivered: u64,
}

/// Address tokens of the two nodes.
const DEVICE: u8 = 0;
const ROUTER: u8 = 1;

/// Hellos both ways (the device retries its hello every `retry_ms` until it has the
/// router's), then `n` readings every `every_ms` with the radio off in between.
pub fn run(link: LinkConfig, table: CycleTable, n: u64, every_ms: u64, seed: u64) -> DietRun {
    let meter = Metered::new(table);
    let mut emu = Emulator::new(link, seed);
    // The device retries its hello every 5 s for up to 600 s.
    let config = Config {
        initial: Duration::from_secs(5),
        max: Duration::from_secs(5),
        attempts: 120,
        ..Config::default()
    };
    let keys = NodeKeys::generate(&meter, &mut SeededRng(seed)).expect("keys");
    let mut device: Node<_, u8, 1> = Node::new(meter.clone(), keys, 1, config);
    let keys = NodeKeys::generate(&RustCrypto, &mut SeededRng(seed ^ 0x77)).expect("keys");
    let mut router: Node<_, u8, 1> = Node::new(RustCrypto, keys, 1, config);
    let (kd, kr) = (device.signing_key(), router.signing_key());
    let trust_d = move |_: &u8, k: &PublicKey| *k == kd;
    let trust_r = move |_: &u8, k: &PublicKey| *k == kr;
    let mut charged = 0;
    let mut charge = |emu: &mut Emulator| {
        emu.compute(End::Device, meter.cycles() - charged);
        charged = meter.cycles();
    };
    charge(&mut emu);
    let now = |emu: &Emulator| Instant::from_millis(emu.now_us() / 1000);
    let mut hello = [0u8; HELLO_LEN];
    let mut delivered = 0;
    let mut out = [0u8; 256];
    let mut plain = [0u8; 64];
    device.add_neighbour(now(&emu), ROUTER).expect("room");
    // Setup: the device says hello until it hears the router's challenge (the router's hello,
    // echoing the device's nonce); the router answers every hello that asks for an answer
    // (it may have been the answer that was lost), and establishes on the device's
    // acknowledgement, which echoes the router's nonce.
    while device.phase(&ROUTER) == Some(Phase::Handshake) {
        while device.poll_transmit(now(&emu), &mut hello).is_some() {
            charge(&mut emu);
            emu.send(End::Device, &hello);
        }
        let Some(wake) = device.poll_timeout() else {
            break;
        };
        // The next hello leaves once the CPU is free again.
        let wake_us = (wake.as_millis() * 1000).max(emu.cpu_free_at_us(End::Device));
        let t = emu.next_arrival_us().unwrap_or(wake_us).min(wake_us);
        for (to, d) in emu.advance(t) {
            match to {
                End::Server => {
                    if router
                        .handle(now(&emu), DEVICE, &d, trust_d, &mut plain)
                        .is_ok()
                    {
                        while router.poll_transmit(now(&emu), &mut hello).is_some() {
                            emu.send(End::Server, &hello);
                        }
                    }
                }
                End::Device => {
                    let _ = device.handle(now(&emu), ROUTER, &d, trust_r, &mut plain);
                    charge(&mut emu);
                }
            }
        }
    }
    // The acknowledgement that proves the device's address to the router.
    while device.poll_transmit(now(&emu), &mut hello).is_some() {
        charge(&mut emu);
        emu.send(End::Device, &hello);
    }
    let setup_completed = device.phase(&ROUTER) == Some(Phase::Established);
    let setup_ms = emu.cpu_free_at_us(End::Device) as f64 / 1000.0;
    // Whatever is still in flight (the acknowledgement, a duplicate hello answer) lands now.
    let until = emu.now_us() + 10_000_000;
    emu.advance(emu.cpu_free_at_us(End::Device));
    while let Some(t) = emu.next_arrival_us().filter(|t| *t <= until) {
        for (to, d) in emu.advance(t) {
            match to {
                End::Device => {
                    let _ = device.handle(now(&emu), ROUTER, &d, trust_r, &mut plain);
                }
                End::Server => {
                    let _ = router.handle(now(&emu), DEVICE, &d, trust_d, &mut plain);
                }
            }
        }
    }
    emu.advance(until);
    charge(&mut emu);
    let setup = emu.device_activity();
    emu.sleep();
    let start = emu.device_activity();
    let udp_start = emu.stats.udp_bytes_from_device;
    let t0 = emu.now_us().div_ceil(1_000_000) * 1_000_000 + every_ms * 1000;
    let mut latencies = vec![];
    for i in 0..n {
        emu.advance(t0 + i * every_ms * 1000);
        emu.wake();
        let start_us = emu.now_us();
        if let Ok(k) = device.seal(&ROUTER, &scenarios::reading_cbor(i), &mut out) {
            charge(&mut emu);
            emu.send(End::Device, &out[..k]);
        }
        emu.sleep();
        while let Some(t) = emu.next_arrival_us() {
            for (to, d) in emu.advance(t) {
                if to == End::Server
                    && matches!(
                        router.handle(now(&emu), DEVICE, &d, trust_d, &mut plain),
                        Ok(Received::Message { .. })
                    )
                {
                    delivered += 1;
                    latencies.push((emu.now_us() - start_us) as f64 / 1000.0);
                }
            }
        }
    }
    emu.advance(t0 + n * every_ms * 1000);
    let activity = scenarios::delta(&emu.device_activity(), &start);
    latencies.sort_by(|a, b| a.total_cmp(b));
    DietRun {
        setup_completed,
        setup,
        setup_ms,
        readings: PerReading {
            readings: n,
            acknowledged: delivered,
            activity,
            udp_bytes_up: (emu.stats.udp_bytes_from_device - udp_start) as f64 / n as f64,
            latency_ms: latencies
                .get(latencies.len() / 2)
                .copied()
                .unwrap_or(f64::NAN),
        },
        delivered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::Loss;
    use crate::energy::CORTEX_M4_PORTABLE;

    #[test]
    fn hellos_then_signed_encrypted_readings() {
        let r = run(LinkConfig::default(), CORTEX_M4_PORTABLE, 5, 60_000, 1);
        assert!(r.setup_completed);
        assert_eq!(r.delivered, 5);
        // Two key pairs, the hello's signature, the router's hello verified, one ECDH.
        assert!(r.setup.cpu_cycles > 6_866_690 * 2 + 14_857_869 + 13_626_516 + 6_873_966);
        // The device sends two hellos (its own, then the acknowledgement of the router's
        // challenge that proves its address), each 216 bytes in three frames; a reading
        // (about 16 + 77 bytes) is one.
        assert_eq!(r.setup.frames_tx, 6);
        assert_eq!(r.readings.activity.frames_tx, 5);
        assert!(r.readings.per_reading().cpu_cycles >= 14_857_869);
    }

    #[test]
    fn a_lost_hello_is_retried() {
        let link = LinkConfig {
            loss: Loss::Bernoulli { p: 0.3 },
            ..Default::default()
        };
        let mut retried = 0;
        for seed in 1..=10 {
            let r = run(link, CORTEX_M4_PORTABLE, 1, 60_000, seed);
            assert!(r.setup_completed, "seed {seed}");
            if r.setup.frames_tx > 6 {
                retried += 1;
            }
        }
        assert!(retried > 0);
    }
}
