//! DTLS through the emulator: Sigil's own `sigil-dtls` connections, the device as client (its
//! crypto metered at a device's cycle costs), the server as server behind the stateless cookie
//! exchange.

use crate::energy::{Activity, CycleTable, Metered, OpCounts};
use crate::net::{Emulator, End, LinkConfig, NetStats};
use crate::SeededRng;
use sigil_crypto::{PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::{Config, Connection, CookieKey, Credentials, ServerCredentials, Stateless, Trust};
use sigil_time::{Instant, UnixTime};
use std::sync::OnceLock;
use std::time::Duration;

/// Inside the test PKI's validity (2026-01-01).
const NOW_UNIX: UnixTime = UnixTime::from_secs(1_767_225_600);

/// The emulator's clock (milliseconds) as the DTLS cores take it.
pub(crate) fn ms(t: u64) -> Instant {
    Instant::from_millis(t)
}

/// The handshakes the experiments compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Suite {
    Psk,
    EcdhePsk,
    RpkServerOnly,
    RpkMutual,
    X509ServerOnly,
    X509Mutual,
}

impl Suite {
    pub const ALL: [Suite; 6] = [
        Suite::Psk,
        Suite::EcdhePsk,
        Suite::RpkServerOnly,
        Suite::RpkMutual,
        Suite::X509ServerOnly,
        Suite::X509Mutual,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Suite::Psk => "PSK",
            Suite::EcdhePsk => "ECDHE-PSK",
            Suite::RpkServerOnly => "RPK server-only",
            Suite::RpkMutual => "RPK mutual",
            Suite::X509ServerOnly => "X.509 server-only",
            Suite::X509Mutual => "X.509 mutual",
        }
    }
}

struct Pki {
    server_key: SecretKey,
    client_key: SecretKey,
    trusted: Vec<PublicKey>,
    root: Vec<u8>,
    server_chain: Vec<Vec<u8>>,
    server_cert_key: SecretKey,
    client_chain: Vec<Vec<u8>>,
    client_cert_key: SecretKey,
}

fn hex_key(h: &str) -> SecretKey {
    let h = h.trim();
    let bytes: Vec<u8> = (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("test PKI key is hex"))
        .collect();
    SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &bytes).expect("test PKI key")
}

/// sigil-dtls's test PKI (root → intermediate → server/client leaves, P-256) and two raw keys.
fn pki() -> &'static Pki {
    static P: OnceLock<Pki> = OnceLock::new();
    P.get_or_init(|| {
        use sigil_crypto::CryptoProvider;
        macro_rules! pki_file {
            ($f:literal) => {
                include_bytes!(concat!("../../../crates/sigil-dtls/tests/data/x509/", $f))
            };
        }
        let server_key = RustCrypto
            .generate(SignatureAlgorithm::EcdsaP256, &mut SeededRng(1))
            .expect("keygen");
        let client_key = RustCrypto
            .generate(SignatureAlgorithm::EcdsaP256, &mut SeededRng(2))
            .expect("keygen");
        Pki {
            trusted: vec![
                RustCrypto.public_key(&server_key).expect("key"),
                RustCrypto.public_key(&client_key).expect("key"),
            ],
            server_key,
            client_key,
            root: pki_file!("root.der").to_vec(),
            server_chain: vec![
                pki_file!("server.der").to_vec(),
                pki_file!("intermediate.der").to_vec(),
            ],
            server_cert_key: hex_key(std::str::from_utf8(pki_file!("server.key")).expect("hex")),
            client_chain: vec![
                pki_file!("client.der").to_vec(),
                pki_file!("intermediate.der").to_vec(),
            ],
            client_cert_key: hex_key(std::str::from_utf8(pki_file!("client.key")).expect("hex")),
        }
    })
}

/// The test PKI's chains (leaf first) as the handshake cores take them.
pub(crate) struct Chains {
    client: Vec<&'static [u8]>,
    server: Vec<&'static [u8]>,
}

impl Chains {
    pub(crate) fn new() -> Self {
        let p = pki();
        Self {
            client: p.client_chain.iter().map(Vec::as_slice).collect(),
            server: p.server_chain.iter().map(Vec::as_slice).collect(),
        }
    }
}

impl Suite {
    /// What the device brings to a handshake of this suite.
    pub(crate) fn client_credentials(self, chains: &Chains) -> Credentials<'_> {
        let p = pki();
        match self {
            Suite::Psk => Credentials::Psk {
                identity: b"sensor",
                key: &[7; 16],
            },
            Suite::EcdhePsk => Credentials::EcdhePsk {
                identity: b"sensor",
                key: &[7; 16],
            },
            Suite::RpkServerOnly => Credentials::RawPublicKey(None),
            Suite::RpkMutual => Credentials::RawPublicKey(Some(&p.client_key)),
            Suite::X509ServerOnly => Credentials::Certificate(None),
            Suite::X509Mutual => {
                Credentials::Certificate(Some((&chains.client, &p.client_cert_key)))
            }
        }
    }

    /// What the server offers to a device handshaking with this suite.
    pub(crate) fn server_offer(self, chains: &Chains) -> ServerCredentials<'_> {
        let p = pki();
        let x509 = matches!(self, Suite::X509ServerOnly | Suite::X509Mutual);
        ServerCredentials {
            psk: true,
            key: Some(if x509 {
                &p.server_cert_key
            } else {
                &p.server_key
            }),
            chain: Some(&chains.server),
            require_client_key: matches!(self, Suite::RpkMutual | Suite::X509Mutual),
            ..ServerCredentials::NONE
        }
    }
}

/// Both ends trust the PSK "sensor", the two raw keys, and chains to the test root. The
/// device's copy verifies chains with its metered provider, so certificate checks are priced.
#[derive(Clone)]
pub struct SimTrust(pub Option<Metered>);

impl Trust for SimTrust {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"sensor").then(|| {
            key[..16].copy_from_slice(&[7; 16]);
            16
        })
    }
    fn trusted_key(&self, key: &PublicKey) -> bool {
        pki().trusted.contains(key)
    }
    fn certificate_chain(
        &self,
        chain: &[&[u8]],
        _: sigil_time::UnixTime,
    ) -> Result<PublicKey, sigil_dtls::Error> {
        match &self.0 {
            Some(m) => sigil_dtls::x509::verify_chain(m, chain, &[&pki().root], NOW_UNIX),
            None => sigil_dtls::x509::verify_chain(&RustCrypto, chain, &[&pki().root], NOW_UNIX),
        }
    }
}

/// Retransmission timers of each side (RFC 6347 §4.2.4: initial value, doubled per
/// retransmission up to the maximum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timers {
    pub client_initial_ms: u64,
    pub server_initial_ms: u64,
    pub max_ms: u64,
}

impl Timers {
    /// The two-way-authentication paper's setting: 5 s on both sides.
    pub const SEED: Timers = Timers {
        client_initial_ms: 5_000,
        server_initial_ms: 5_000,
        max_ms: 60_000,
    };
}

/// One handshake's outcome.
#[derive(Clone, Debug)]
pub struct Handshake {
    pub completed: bool,
    /// From the first ClientHello to the client verifying the server's Finished.
    pub time_ms: f64,
    pub device: Activity,
    pub device_ops: OpCounts,
    pub net: NetStats,
    /// The longest wait of each side for the peer's next flight on this run, from sending
    /// its own flight, in ms ([client, server]): what a timer calibrated on a clean run
    /// starts from. Over the CoAP carrier ([`crate::carriers`]), the client's longest wait
    /// from building a request (arming its timer) to the response; the endpoint has no timer.
    pub longest_wait_ms: [u64; 2],
}

/// An established pair, ready to carry records.
pub struct Secure {
    pub emu: Emulator,
    pub client: Connection<Metered, SimTrust>,
    pub server: Connection<RustCrypto, SimTrust>,
    pub meter: Metered,
}

/// Runs one handshake of `suite` over `link` with the device's crypto priced on `table`.
pub fn handshake(
    link: LinkConfig,
    table: CycleTable,
    suite: Suite,
    pmtu: usize,
    timers: Timers,
    seed: u64,
) -> (Handshake, Option<Secure>) {
    let chains = Chains::new();
    let config = |initial| Config {
        initial_timeout: Duration::from_millis(initial),
        max_timeout: Duration::from_millis(timers.max_ms),
        pmtu,
        ..Config::default()
    };
    let credentials = suite.client_credentials(&chains);
    let offer = suite.server_offer(&chains);
    let cookies = CookieKey::new([seed as u8; 32]);
    let meter = Metered::new(table);
    let mut emu = Emulator::new(link, seed);
    let mut client = Connection::connect(
        meter.clone(),
        SimTrust(Some(meter.clone())),
        config(timers.client_initial_ms),
        &mut SeededRng(seed ^ 0xc1),
        credentials,
        ms(0),
    )
    .expect("client config is valid");
    emu.compute(End::Device, meter.cycles());
    let mut charged = meter.cycles();
    let mut server: Option<Connection<RustCrypto, SimTrust>> = None;
    let mut buf = vec![0u8; 2048];
    // [client, server]: when each last sent a flight, and the longest wait for an answer.
    let mut sent_at = [Some(0u64), None];
    let mut longest = [0u64; 2];
    let deadline_us = 3_600_000_000; // an hour of virtual time
    let mut done_at = None;
    loop {
        // Datagrams leave when the device's CPU is done; each flight's timer runs from then.
        let leave = [emu.cpu_free_at_us(End::Device), emu.now_us()];
        let mut sent = [false; 2];
        while let Some(n) = client.poll_transmit(ms(leave[0] / 1000), &mut buf) {
            emu.send(End::Device, &buf[..n]);
            sent[0] = true;
        }
        if let Some(s) = server.as_mut() {
            while let Some(n) = s.poll_transmit(ms(leave[1] / 1000), &mut buf) {
                emu.send(End::Server, &buf[..n]);
                sent[1] = true;
            }
        }
        for i in 0..2 {
            if sent[i] && sent_at[i].is_none() {
                sent_at[i] = Some(leave[i]);
            }
        }
        if client.is_established() && done_at.is_none() {
            done_at = Some(emu.cpu_free_at_us(End::Device));
        }
        if done_at.is_some() && server.as_ref().is_some_and(|s| s.is_established()) {
            break;
        }
        if client.failure().is_some() || emu.now_us() > deadline_us {
            break;
        }
        let next = [
            emu.next_arrival_us(),
            client.poll_timeout().map(|t| t.as_millis() * 1000),
            server
                .as_ref()
                .and_then(|s| s.poll_timeout())
                .map(|t| t.as_millis() * 1000),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { break };
        let arrived = emu.advance(next.max(emu.now_us()));
        let now_ms = emu.now_ms();
        let _ = client.handle_timeout(ms(now_ms));
        if let Some(s) = server.as_mut() {
            let _ = s.handle_timeout(ms(now_ms));
        }
        for (to, d) in arrived {
            let i = usize::from(to == End::Server);
            if let Some(t) = sent_at[i].take() {
                longest[i] = longest[i].max(emu.now_us().saturating_sub(t) / 1000);
            }
            if to == End::Device {
                let _ = client.handle_datagram(ms(now_ms), &d);
                continue;
            }
            match server.as_mut() {
                Some(s) => {
                    let _ = s.handle_datagram(ms(now_ms), &d);
                }
                None => {
                    let mut out = [0u8; 256];
                    match cookies.respond(&RustCrypto, b"device", &d, &mut out) {
                        Stateless::HelloVerify(n) => {
                            emu.send(End::Server, &out[..n]);
                        }
                        Stateless::Accept(cookie) => {
                            server = Connection::accept(
                                RustCrypto,
                                SimTrust(None),
                                config(timers.server_initial_ms),
                                &offer,
                                &mut SeededRng(seed ^ 0x5e),
                                cookie,
                                &d,
                                ms(now_ms),
                            )
                            .ok();
                        }
                        Stateless::Drop(_) => {}
                    }
                }
            }
        }
        emu.compute(End::Device, meter.cycles() - charged);
        charged = meter.cycles();
    }
    let completed = done_at.is_some();
    let time_ms = done_at.unwrap_or(emu.now_us()) as f64 / 1000.0;
    let result = Handshake {
        completed,
        time_ms,
        device: emu.device_activity(),
        device_ops: meter.ops(),
        net: emu.stats.clone(),
        longest_wait_ms: longest,
    };
    let secure = match (completed, server) {
        (true, Some(server)) if server.is_established() => Some(Secure {
            emu,
            client,
            server,
            meter,
        }),
        _ => None,
    };
    (result, secure)
}

impl Secure {
    /// The device sends `request` as one record; the server answers with `respond(request)`
    /// as one record. Returns the round-trip time in µs, or `None` if either was lost.
    pub fn exchange(
        &mut self,
        request: &[u8],
        respond: impl Fn(&[u8]) -> Vec<u8>,
    ) -> Option<(u64, Vec<u8>)> {
        let start = self.emu.now_us();
        let before = self.meter.cycles();
        self.client.send(request).ok()?;
        self.emu.compute(End::Device, self.meter.cycles() - before);
        let mut buf = vec![0u8; 2048];
        while let Some(n) = self.client.poll_transmit(ms(self.emu.now_ms()), &mut buf) {
            self.emu.send(End::Device, &buf[..n]);
        }
        while let Some(t) = self.emu.next_arrival_us() {
            for (to, d) in self.emu.advance(t) {
                let now_ms = self.emu.now_ms();
                if to == End::Server {
                    let _ = self.server.handle_datagram(ms(now_ms), &d);
                    while let Some(n) = self.server.poll_app_data(&mut buf) {
                        let answer = respond(&buf[..n]);
                        self.server.send(&answer).ok()?;
                    }
                    while let Some(n) = self.server.poll_transmit(ms(now_ms), &mut buf) {
                        self.emu.send(End::Server, &buf[..n]);
                    }
                } else {
                    let before = self.meter.cycles();
                    let _ = self.client.handle_datagram(ms(now_ms), &d);
                    self.emu.compute(End::Device, self.meter.cycles() - before);
                    if let Some(n) = self.client.poll_app_data(&mut buf) {
                        let done = self.emu.cpu_free_at_us(End::Device);
                        return Some((done - start, buf[..n].to_vec()));
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::Loss;
    use crate::energy::CORTEX_M4_PORTABLE;

    #[test]
    fn every_suite_completes_on_a_clean_link_and_the_device_pays_for_its_crypto() {
        let link = LinkConfig::default();
        let mut psk_cycles = 0;
        for suite in Suite::ALL {
            let (h, s) = handshake(link, CORTEX_M4_PORTABLE, suite, 1024, Timers::SEED, 1);
            assert!(h.completed, "{suite:?}");
            assert!(s.is_some(), "{suite:?}");
            assert_eq!(h.net.frames_lost, 0);
            assert!(h.net.frames_sent >= 6, "{suite:?}");
            match suite {
                Suite::Psk => {
                    psk_cycles = h.device.cpu_cycles;
                    assert_eq!(
                        h.device_ops.sign + h.device_ops.verify + h.device_ops.agree,
                        0
                    );
                }
                Suite::RpkMutual => {
                    assert_eq!(h.device_ops.sign, 1, "{:?}", h.device_ops);
                    assert_eq!(h.device_ops.verify, 1);
                    assert_eq!(h.device_ops.agree, 1);
                    assert!(h.device.cpu_cycles > 100 * psk_cycles);
                }
                Suite::X509Mutual => {
                    // Chain of two certificates and the ServerKeyExchange signature.
                    assert_eq!(h.device_ops.verify, 3, "{:?}", h.device_ops);
                    assert_eq!(h.device_ops.sign, 1);
                }
                _ => {}
            }
        }
    }

    #[test]
    fn a_lost_flight_costs_a_retransmission_timeout() {
        let clean = handshake(
            LinkConfig::default(),
            CORTEX_M4_PORTABLE,
            Suite::Psk,
            1024,
            Timers::SEED,
            1,
        )
        .0;
        let lossy = LinkConfig {
            loss: Loss::Bernoulli { p: 0.3 },
            ..Default::default()
        };
        let mut slower = 0;
        for seed in 1..=20 {
            let h = handshake(
                lossy,
                CORTEX_M4_PORTABLE,
                Suite::Psk,
                1024,
                Timers::SEED,
                seed,
            )
            .0;
            assert!(h.completed, "seed {seed}");
            if h.time_ms >= clean.time_ms + 5_000.0 {
                slower += 1;
            }
            assert!(h.net.frames_sent >= clean.net.frames_sent);
        }
        // With 30% frame loss most handshakes lose something and wait at least one timeout.
        assert!(slower >= 10, "{slower}/20");
    }

    #[test]
    fn records_flow_after_the_handshake() {
        let (_, s) = handshake(
            LinkConfig::default(),
            CORTEX_M4_PORTABLE,
            Suite::Psk,
            1024,
            Timers::SEED,
            3,
        );
        let mut s = s.unwrap();
        let (rtt, answer) = s.exchange(b"ping", |r| [r, b"-pong"].concat()).unwrap();
        assert_eq!(answer, b"ping-pong");
        // Two single-frame datagrams of 4 + 29 and 9 + 29 bytes of UDP payload.
        let l = s.emu.config().latency;
        assert!(rtt >= l.frame_us(11 + 9 + 33) + l.frame_us(11 + 9 + 38));
    }

    #[test]
    fn every_mtu_completes_and_smaller_mtus_cost_more_frames() {
        let mut last = 0;
        for mtu in [1024, 512, 256, 128, 64] {
            let (h, s) = handshake(
                LinkConfig::default(),
                CORTEX_M4_PORTABLE,
                Suite::X509Mutual,
                mtu,
                Timers::SEED,
                1,
            );
            assert!(h.completed && s.is_some(), "MTU {mtu}");
            assert!(
                h.net.frames_sent >= last,
                "MTU {mtu}: {}",
                h.net.frames_sent
            );
            last = h.net.frames_sent;
        }
    }

    #[test]
    fn timers_run_from_the_moment_a_flight_leaves_the_device() {
        // On a 48 MHz Cortex-M the mutual X.509 client computes for over a second before
        // its second flight leaves; a 700 ms timer armed when the computation started would
        // fire before the flight was even sent. Armed from the send, it never fires on a
        // clean link: no datagram beyond the handshake's own.
        let link = LinkConfig::default();
        let clean = handshake(
            link,
            CORTEX_M4_PORTABLE,
            Suite::X509Mutual,
            1024,
            Timers::SEED,
            1,
        )
        .0;
        let fast = Timers {
            client_initial_ms: 700,
            server_initial_ms: 3_000,
            max_ms: 60_000,
        };
        let h = handshake(link, CORTEX_M4_PORTABLE, Suite::X509Mutual, 1024, fast, 1).0;
        assert!(h.completed);
        assert_eq!(h.net.datagrams_sent, clean.net.datagrams_sent);
        assert!(h.device.cpu_cycles as f64 / 48e6 > 1.0);
    }
}
