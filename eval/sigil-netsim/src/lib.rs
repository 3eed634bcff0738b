//! `sigil-netsim`: a deterministic emulator of constrained IEEE 802.15.4 links that runs
//! Sigil's real protocol cores (CoAP, DTLS, signed readings, the device state machine) and
//! prices what they do in time and energy on the seeds' platforms.
//!
//! - [`lowpan`]: 802.15.4 frames, 6LoWPAN IPHC/UDP compression, fragmentation, reassembly.
//! - [`channel`]: per-frame loss (independent or Gilbert-Elliott) and the latency model.
//! - [`net`]: the network in virtual time: hops, link-layer retries, a sleeping device.
//! - [`energy`]: cycles per operation (measured), platforms, and a metered crypto provider.
//! - [`dtls`], [`scenarios`], [`cryptodiet`]: the workloads; [`carriers`]: the DTLS handshake
//!   over its CoAP carrier beside the record carrier; [`experiments`]: the seeds' figures,
//!   written as JSON for `tools/evaluation/report.py`.
//!
//! Everything here is a function of its configuration and seed: the same seed gives the same
//! trace.

pub mod carriers;
pub mod channel;
pub mod cryptodiet;
pub mod dtls;
pub mod energy;
pub mod experiments;
pub mod lowpan;
pub mod net;
pub mod scenarios;

/// Seeded test randomness for the emulated nodes' keys and nonces (never for production).
pub struct SeededRng(pub u64);

impl sigil_crypto::Rng for SeededRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), sigil_crypto::CryptoError> {
        let mut s = channel::SplitMix(self.0);
        for b in buf.iter_mut() {
            *b = s.next_u64() as u8;
        }
        self.0 = s.0;
        Ok(())
    }
}
