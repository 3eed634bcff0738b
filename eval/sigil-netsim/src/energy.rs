//! What a node spends: CPU cycles per cryptographic operation (measured), and the seeds'
//! platforms' clocks and currents (datasheets and the papers), turned into time and energy.
//!
//! The protocol cores run unmodified on this machine; [`Metered`] wraps the crypto provider they
//! are given and charges each call the cycles the same operation took in the device-cost
//! harness (`scripts/bench-device`, docs/device-costs.md): instruction-exact emulation of the
//! firmware images, with the Cortex-M4 cycle model, or cycle-exact simavr for the ATmega.

use sigil_crypto::{
    AgreementAlgorithm, AgreementPublicKey, AgreementSecret, CryptoError, CryptoProvider,
    PublicKey, Rng, RustCrypto, SecretKey, Signature, SignatureAlgorithm, CCM8_TAG_LEN,
    CCM_NONCE_LEN, GCM_TAG_LEN,
};
use std::cell::Cell;
use std::rc::Rc;

/// Cycles of each operation on one core, from `scripts/bench-device` (full run, the numbers in
/// docs/device-costs.md and docs/device-cycles.json; `tests/cycle_tables.rs` fails when these
/// drift from that file). `None`: not measured on that core (the emulator then refuses to
/// price it rather than guess).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CycleTable {
    pub name: &'static str,
    pub sign_ed25519: Option<u64>,
    pub verify_ed25519: Option<u64>,
    pub keygen_ed25519: Option<u64>,
    pub sign_p256: Option<u64>,
    pub verify_p256: Option<u64>,
    pub keygen_p256: Option<u64>,
    pub ecdh_p256: Option<u64>,
    pub x25519: Option<u64>,
    /// SHA-256 of 256 bytes (5 compression blocks): per block = this / 5.
    pub sha256_256: u64,
    /// AES-128-CCM-8 over 16 and 256 bytes: a line through both prices any length.
    pub ccm8_16: u64,
    pub ccm8_256: u64,
}

/// Cortex-M4 cycle model, portable Rust backend (RustCrypto, curve25519-dalek, p256). Also
/// used, as a lower bound, for the Cortex-M3 boards (CC2538, SAM3U): see docs/device-costs.md.
pub const CORTEX_M4_PORTABLE: CycleTable = CycleTable {
    name: "Cortex-M4, portable backend",
    sign_ed25519: Some(4_153_764),
    verify_ed25519: Some(2_599_753),
    keygen_ed25519: Some(2_332_655),
    sign_p256: Some(14_857_877),
    verify_p256: Some(13_635_619),
    keygen_p256: Some(6_875_645),
    ecdh_p256: Some(6_885_293),
    x25519: Some(1_770_244),
    sha256_256: 14_547,
    ccm8_16: 29_623,
    ccm8_256: 131_990,
};

/// Cortex-M4 with the fast backend (P-256 in UMAAL assembly; needs ARMv7E-M).
pub const CORTEX_M4_FAST: CycleTable = CycleTable {
    name: "Cortex-M4, fast backend",
    sign_ed25519: Some(4_156_034),
    verify_ed25519: Some(2_596_944),
    keygen_ed25519: Some(2_333_754),
    sign_p256: Some(475_432),
    verify_p256: Some(992_043),
    keygen_p256: Some(330_412),
    ecdh_p256: Some(919_687),
    x25519: Some(987_085),
    sha256_256: 14_549,
    ccm8_16: 29_665,
    ccm8_256: 131_951,
};

/// ATmega2560 under simavr (cycle-exact), opt-level s: SHA-256, CCM-8 and X25519 build for
/// AVR; Ed25519 and P-256 do not (docs/device-costs.md says why), so they are `None`.
pub const AVR: CycleTable = CycleTable {
    name: "AVR (ATmega), portable backend",
    sign_ed25519: None,
    verify_ed25519: None,
    keygen_ed25519: None,
    sign_p256: None,
    verify_p256: None,
    keygen_p256: None,
    ecdh_p256: None,
    x25519: Some(179_537_083),
    sha256_256: 271_691,
    ccm8_16: 222_628,
    ccm8_256: 996_135,
};

impl CycleTable {
    pub fn sha256_blocks(&self, blocks: u64) -> u64 {
        self.sha256_256 * blocks / 5
    }

    pub fn ccm8(&self, len: usize) -> u64 {
        let per_byte = (self.ccm8_256 - self.ccm8_16) as f64 / 240.0;
        (self.ccm8_16 as f64 + per_byte * (len as f64 - 16.0)).max(0.0) as u64
    }
}

/// Blocks SHA-256 compresses for `len` bytes of input (padding included).
pub fn sha256_blocks(len: usize) -> u64 {
    (len as u64 + 9).div_ceil(64)
}

/// One of the seeds' boards: clock, cycle table and the currents that matter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Platform {
    pub name: &'static str,
    pub cycles: Option<CycleTable>,
    pub hz: f64,
    pub volts: f64,
    /// CPU active (radio off).
    pub cpu_ma: f64,
    pub tx_ma: f64,
    pub rx_ma: f64,
    /// Everything asleep (timer running, RAM retained).
    pub sleep_ua: f64,
    pub source: &'static str,
}

/// Two AA cells of 2,800 mAh at 1.5 V: the two-way-authentication paper's 30,240 J.
pub const TWO_AA_JOULES: f64 = 2.0 * 2.8 * 3600.0 * 1.5;

pub const OPAL: Platform = Platform {
    name: "OPAL (SAM3U + AT86RF231) @ 48 MHz",
    cycles: Some(CORTEX_M4_PORTABLE),
    hz: 48e6,
    volts: 3.998,
    cpu_ma: 30.0,
    tx_ma: 18.0,
    rx_ma: 18.0,
    sleep_ua: 15.0,
    source: "two-way-auth paper Table 2 (computation 30 mA, radio TX 18 mA, radio idle 18 mA, \
             3.998 V) and §5.4 (SAM3U below 15 µA asleep)",
};

pub const CC2538: Platform = Platform {
    name: "CC2538 @ 32 MHz",
    cycles: Some(CORTEX_M4_PORTABLE),
    hz: 32e6,
    volts: 3.0,
    cpu_ma: 13.0,
    tx_ma: 24.0,
    rx_ma: 20.0,
    sleep_ua: 1.3,
    source: "TI CC2538 datasheet (SWRS096): active 32 MHz 13 mA, RX 20 mA, TX 24 mA at 0 dBm, \
             PM2 1.3 µA. IoT-CryptoDiet's Table 3 implies 60 mW while computing (CPU with the \
             radio listening)",
};

pub const MAGONODE: Platform = Platform {
    name: "MagoNode (ATmega128RFA1) @ 16 MHz",
    cycles: Some(AVR),
    hz: 16e6,
    volts: 3.0,
    cpu_ma: 4.7,
    tx_ma: 14.5,
    rx_ma: 12.5,
    sleep_ua: 0.25,
    source: "DTLS-as-CoAP-resource Table II (190.17 mJ over 13,487 ms computing = 14.1 mW, \
             4.7 mA at 3 V); Atmel ATmega128RFA1 datasheet: TX 14.5 mA at 3.5 dBm, RX_ON \
             12.5 mA, deep sleep 250 nA",
};

pub const TELOSB: Platform = Platform {
    name: "TelosB (MSP430F1611 + CC2420) @ 8 MHz",
    cycles: None,
    hz: 8e6,
    volts: 3.0,
    cpu_ma: 1.8,
    tx_ma: 17.4,
    rx_ma: 19.7,
    sleep_ua: 5.1,
    source: "Crossbow TelosB datasheet: MCU on 1.8 mA, sleep 5.1 µA; TI CC2420 datasheet: TX \
             17.4 mA at 0 dBm, RX 19.7 mA. MSP430 cycles are not measured here, so TelosB rows \
             carry radio and sleep energy only",
};

pub const PLATFORMS: [Platform; 4] = [OPAL, CC2538, MAGONODE, TELOSB];

impl Platform {
    pub fn cpu_us(&self, cycles: u64) -> u64 {
        (cycles as f64 / self.hz * 1e6).round() as u64
    }

    /// Microjoules for `us` microseconds at `ma` milliamperes.
    pub fn uj(&self, ma: f64, us: u64) -> f64 {
        ma * self.volts * us as f64 / 1000.0
    }
}

/// What one node's radio and CPU did, in time; [`Activity::energy`] prices it on a platform.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Activity {
    pub cpu_cycles: u64,
    pub tx_us: u64,
    pub rx_us: u64,
    /// Radio on and listening, not receiving a frame addressed here.
    pub listen_us: u64,
    pub sleep_us: u64,
    pub frames_tx: u64,
    pub frames_rx: u64,
    pub bytes_tx: u64,
    pub bytes_rx: u64,
}

/// Energy in microjoules, by component.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Energy {
    pub cpu_uj: f64,
    pub tx_uj: f64,
    pub rx_uj: f64,
    pub listen_uj: f64,
    pub sleep_uj: f64,
}

impl Energy {
    pub fn total_uj(&self) -> f64 {
        self.cpu_uj + self.tx_uj + self.rx_uj + self.listen_uj + self.sleep_uj
    }
    pub fn radio_uj(&self) -> f64 {
        self.tx_uj + self.rx_uj + self.listen_uj
    }
}

impl Activity {
    pub fn energy(&self, p: &Platform) -> Energy {
        Energy {
            cpu_uj: p.uj(p.cpu_ma, p.cpu_us(self.cpu_cycles)),
            tx_uj: p.uj(p.tx_ma, self.tx_us),
            rx_uj: p.uj(p.rx_ma, self.rx_us),
            listen_uj: p.uj(p.rx_ma, self.listen_us),
            sleep_uj: p.uj(p.sleep_ua / 1000.0, self.sleep_us),
        }
    }

    pub fn add(&mut self, o: &Activity) {
        self.cpu_cycles += o.cpu_cycles;
        self.tx_us += o.tx_us;
        self.rx_us += o.rx_us;
        self.listen_us += o.listen_us;
        self.sleep_us += o.sleep_us;
        self.frames_tx += o.frames_tx;
        self.frames_rx += o.frames_rx;
        self.bytes_tx += o.bytes_tx;
        self.bytes_rx += o.bytes_rx;
    }
}

/// Operations a [`Metered`] provider has seen, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    pub sign: u64,
    pub verify: u64,
    pub keygen: u64,
    pub agree: u64,
    pub sha_blocks: u64,
    pub aead_bytes: u64,
    pub aead_calls: u64,
}

#[derive(Debug, Default)]
struct Meter {
    cycles: Cell<u64>,
    unpriced: Cell<u64>,
    ops: Cell<OpCounts>,
}

/// A crypto provider that does the work with [`RustCrypto`] and charges each operation the
/// cycles it costs on `table`'s core. Clones share one meter.
#[derive(Clone)]
pub struct Metered {
    table: CycleTable,
    meter: Rc<Meter>,
}

impl Metered {
    pub fn new(table: CycleTable) -> Self {
        Self {
            table,
            meter: Rc::default(),
        }
    }

    /// Cycles charged so far.
    pub fn cycles(&self) -> u64 {
        self.meter.cycles.get()
    }

    /// Operations the table has no price for (an experiment that sees any is invalid).
    pub fn unpriced(&self) -> u64 {
        self.meter.unpriced.get()
    }

    pub fn ops(&self) -> OpCounts {
        self.meter.ops.get()
    }

    fn charge(&self, c: Option<u64>, f: impl FnOnce(&mut OpCounts)) {
        match c {
            Some(c) => self.meter.cycles.set(self.meter.cycles.get() + c),
            None => self.meter.unpriced.set(self.meter.unpriced.get() + 1),
        }
        let mut o = self.meter.ops.get();
        f(&mut o);
        self.meter.ops.set(o);
    }

    fn charge_sha(&self, blocks: u64) {
        self.charge(Some(self.table.sha256_blocks(blocks)), |o| {
            o.sha_blocks += blocks
        });
    }

    fn charge_aead(&self, len: usize) {
        self.charge(Some(self.table.ccm8(len)), |o| {
            o.aead_bytes += len as u64;
            o.aead_calls += 1;
        });
    }
}

fn total(parts: &[&[u8]]) -> usize {
    parts.iter().map(|p| p.len()).sum()
}

impl CryptoProvider for Metered {
    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        self.charge_sha(sha256_blocks(total(parts)));
        RustCrypto.sha256(parts)
    }

    fn hmac_sha256(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        // Inner hash over key block + message, outer over key block + inner digest.
        self.charge_sha(sha256_blocks(64 + total(parts)) + sha256_blocks(64 + 32));
        RustCrypto.hmac_sha256(key, parts)
    }

    fn generate(
        &self,
        alg: SignatureAlgorithm,
        rng: &mut dyn Rng,
    ) -> Result<SecretKey, CryptoError> {
        let c = match alg {
            SignatureAlgorithm::Ed25519 => self.table.keygen_ed25519,
            SignatureAlgorithm::EcdsaP256 => self.table.keygen_p256,
        };
        self.charge(c, |o| o.keygen += 1);
        RustCrypto.generate(alg, rng)
    }

    fn public_key(&self, key: &SecretKey) -> Result<PublicKey, CryptoError> {
        let c = match key.algorithm() {
            SignatureAlgorithm::Ed25519 => self.table.keygen_ed25519,
            SignatureAlgorithm::EcdsaP256 => self.table.keygen_p256,
        };
        self.charge(c, |o| o.keygen += 1);
        RustCrypto.public_key(key)
    }

    fn sign(&self, key: &SecretKey, message: &[u8]) -> Result<Signature, CryptoError> {
        let c = match key.algorithm() {
            SignatureAlgorithm::Ed25519 => self.table.sign_ed25519,
            SignatureAlgorithm::EcdsaP256 => self.table.sign_p256,
        };
        self.charge(c, |o| o.sign += 1);
        RustCrypto.sign(key, message)
    }

    fn verify(&self, key: &PublicKey, message: &[u8], signature: &[u8]) -> Result<(), CryptoError> {
        let c = match key.algorithm() {
            SignatureAlgorithm::Ed25519 => self.table.verify_ed25519,
            SignatureAlgorithm::EcdsaP256 => self.table.verify_p256,
        };
        self.charge(c, |o| o.verify += 1);
        RustCrypto.verify(key, message, signature)
    }

    fn generate_agreement(
        &self,
        alg: AgreementAlgorithm,
        rng: &mut dyn Rng,
    ) -> Result<AgreementSecret, CryptoError> {
        // Generating the secret is drawing random bytes; the scalar multiplication is charged
        // when the public value is computed.
        RustCrypto.generate_agreement(alg, rng)
    }

    fn agreement_public_key(
        &self,
        secret: &AgreementSecret,
    ) -> Result<AgreementPublicKey, CryptoError> {
        let c = match secret.algorithm() {
            AgreementAlgorithm::X25519 => self.table.x25519,
            AgreementAlgorithm::P256 => self.table.keygen_p256,
        };
        self.charge(c, |o| o.keygen += 1);
        RustCrypto.agreement_public_key(secret)
    }

    fn agree(&self, secret: &AgreementSecret, peer_public: &[u8]) -> Result<[u8; 32], CryptoError> {
        let c = match secret.algorithm() {
            AgreementAlgorithm::X25519 => self.table.x25519,
            AgreementAlgorithm::P256 => self.table.ecdh_p256,
        };
        self.charge(c, |o| o.agree += 1);
        RustCrypto.agree(secret, peer_public)
    }

    fn aes128_ccm8_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; CCM8_TAG_LEN], CryptoError> {
        self.charge_aead(buf.len());
        RustCrypto.aes128_ccm8_seal(key, nonce, aad, buf)
    }

    fn aes128_ccm8_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; CCM8_TAG_LEN],
    ) -> Result<(), CryptoError> {
        self.charge_aead(buf.len());
        RustCrypto.aes128_ccm8_open(key, nonce, aad, buf, tag)
    }

    fn aes128_gcm_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; GCM_TAG_LEN], CryptoError> {
        // GCM is not in the device-cost harness; priced as CCM-8 (both are one AES pass plus
        // a MAC pass per block on a core without carry-less multiply).
        self.charge_aead(buf.len());
        RustCrypto.aes128_gcm_seal(key, nonce, aad, buf)
    }

    fn aes128_gcm_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; GCM_TAG_LEN],
    ) -> Result<(), CryptoError> {
        self.charge_aead(buf.len());
        RustCrypto.aes128_gcm_open(key, nonce, aad, buf, tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_charges_what_the_table_says() {
        let m = Metered::new(CORTEX_M4_PORTABLE);
        let mut rng = crate::SeededRng(1);
        let k = m.generate(SignatureAlgorithm::EcdsaP256, &mut rng).unwrap();
        let s = m.sign(&k, b"x").unwrap();
        let p = RustCrypto.public_key(&k).unwrap();
        m.verify(&p, b"x", &s.0).unwrap();
        let t = CORTEX_M4_PORTABLE;
        assert_eq!(
            m.cycles(),
            t.keygen_p256.unwrap() + t.sign_p256.unwrap() + t.verify_p256.unwrap()
        );
        let o = m.ops();
        assert_eq!((o.keygen, o.sign, o.verify), (1, 1, 1));
        m.sha256(&[&[0; 55]]);
        m.sha256(&[&[0; 56]]);
        assert_eq!(m.ops().sha_blocks, 3);
        assert_eq!(m.unpriced(), 0);
        let avr = Metered::new(AVR);
        avr.sign(&k, b"x").unwrap();
        assert_eq!(avr.unpriced(), 1);
    }

    #[test]
    fn energy_is_current_times_voltage_times_time() {
        let a = Activity {
            cpu_cycles: 48_000_000,
            tx_us: 1_000_000,
            sleep_us: 3_600_000_000,
            ..Default::default()
        };
        let e = a.energy(&OPAL);
        assert!((e.cpu_uj - 30.0 * 3.998 * 1000.0).abs() < 1e-6);
        assert!((e.tx_uj - 18.0 * 3.998 * 1000.0).abs() < 1e-6);
        assert!((e.sleep_uj - 0.015 * 3.998 * 3_600_000.0).abs() < 1e-3);
        assert!((TWO_AA_JOULES - 30_240.0).abs() < 1e-9);
    }

    #[test]
    fn ccm_cost_is_the_line_through_the_measured_points() {
        let t = CORTEX_M4_PORTABLE;
        assert_eq!(t.ccm8(16), t.ccm8_16);
        assert_eq!(t.ccm8(256), t.ccm8_256);
        assert!(t.ccm8(64) > t.ccm8(16));
    }
}
