//! The seeds' figures, re-run in the emulator with Sigil's code, written as one JSON document
//! for `tools/evaluation/report.py` (plots and docs/evaluation.md).

use crate::carriers::{handshake_over_coap, Carrier, CoapCarrier, CoapTally};
use crate::channel::{Latency, Loss};
use crate::cryptodiet;
use crate::dtls::{handshake, Handshake, Suite, Timers};
use crate::energy::{
    sha256_blocks, Activity, CycleTable, Platform, AVR, CC2538, CORTEX_M4_PORTABLE, MAGONODE, OPAL,
    PLATFORMS, TWO_AA_JOULES,
};
use crate::lowpan::{self, Datagram, Path};
use crate::net::{Emulator, LinkConfig};
use crate::scenarios::{self, PerReading};
use serde_json::{json, Value};
use std::time::Instant;

/// How much to run: `quick` is the test command's smoke run (few seeds, same code paths).
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub quick: bool,
    pub threads: usize,
}

impl Plan {
    fn seeds(&self) -> u64 {
        if self.quick {
            6
        } else {
            100
        }
    }
}

fn progress(start: Instant, what: &str) {
    eprintln!("[{:>6.1} s] {what}", start.elapsed().as_secs_f64());
}

fn par_map<T: Send, R: Send>(threads: usize, items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let n = items.len();
    let mut slots: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let mut indexed: Vec<(usize, T)> = items.into_iter().enumerate().collect();
    let chunk = n.div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let mut handles = vec![];
        while !indexed.is_empty() {
            let rest = indexed.split_off(chunk.min(indexed.len()));
            let mine = std::mem::replace(&mut indexed, rest);
            let f = &f;
            handles.push(
                s.spawn(move || mine.into_iter().map(|(i, t)| (i, f(t))).collect::<Vec<_>>()),
            );
        }
        for h in handles {
            for (i, r) in h.join().expect("worker") {
                slots[i] = Some(r);
            }
        }
    });
    slots
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn energy_json(a: &Activity, p: &Platform) -> Value {
    let e = a.energy(p);
    json!({
        "cpu_mj": e.cpu_uj / 1000.0, "tx_mj": e.tx_uj / 1000.0, "rx_mj": e.rx_uj / 1000.0,
        "listen_mj": e.listen_uj / 1000.0, "sleep_mj": e.sleep_uj / 1000.0,
        "total_mj": e.total_uj() / 1000.0,
        "active_mj": (e.cpu_uj + e.tx_uj + e.rx_uj) / 1000.0,
        "cpu_cycles": a.cpu_cycles, "frames_tx": a.frames_tx, "frames_rx": a.frames_rx,
        "bytes_tx": a.bytes_tx, "bytes_rx": a.bytes_rx,
    })
}

/// Fig. 5 of the two-way-authentication paper: echo round-trip time against payload size,
/// plain CoAP vs CoAP in DTLS (PSK, AES-128-CCM-8), one hop and four.
pub fn fig5_rtt() -> Value {
    let sizes: Vec<usize> = (8..=256).step_by(8).collect();
    let mut series = vec![];
    for hops in [1u8, 4] {
        let link = LinkConfig {
            hops,
            device_hz: OPAL.hz,
            ..Default::default()
        };
        let (_, s) = handshake(link, CORTEX_M4_PORTABLE, Suite::Psk, 1024, Timers::SEED, 1);
        let mut s = s.expect("clean handshake");
        let mut plain = Emulator::new(link, 1);
        let mut p = vec![];
        let mut d = vec![];
        for &n in &sizes {
            p.push(scenarios::plain_echo_rtt(&mut plain, n).expect("clean link") as f64 / 1000.0);
            d.push(scenarios::dtls_echo_rtt(&mut s, n).expect("clean link") as f64 / 1000.0);
        }
        let inc: Vec<f64> = p.iter().zip(&d).map(|(p, d)| d - p).collect();
        let rel: Vec<f64> = p.iter().zip(&d).map(|(p, d)| d / p - 1.0).collect();
        series.push(json!({
            "hops": hops, "plain_ms": p, "dtls_ms": d,
            "max_increase_ms": inc.iter().cloned().fold(0.0, f64::max),
            "mean_increase": mean(&rel),
        }));
    }
    json!({ "sizes": sizes, "series": series,
        "paper": { "one_hop": { "max_increase_ms_aes": 95, "mean_increase_aes": 0.62,
                                "max_increase_ms_sha1": 75, "mean_increase_sha1": 0.35 },
                   "four_hops": { "max_increase_ms_aes": 163, "mean_increase_aes": 0.74 },
                   "rtt_16_plain_ms": 58, "rtt_16_aes_ms": 90 } })
}

/// One sweep cell: `seeds` handshakes of `suite` over `link` at `pmtu` with `timers`.
fn cell(
    plan: &Plan,
    link: LinkConfig,
    table: CycleTable,
    suite: Suite,
    pmtu: usize,
    timers: Timers,
) -> Value {
    let runs: Vec<Handshake> = par_map(plan.threads, (1..=plan.seeds()).collect(), |seed| {
        handshake(link, table, suite, pmtu, timers, seed).0
    });
    let done: Vec<f64> = runs
        .iter()
        .filter(|h| h.completed)
        .map(|h| h.time_ms / 1000.0)
        .collect();
    let bytes: Vec<f64> = runs.iter().map(|h| h.net.udp_bytes as f64).collect();
    let frames: Vec<f64> = runs.iter().map(|h| h.net.frames_sent as f64).collect();
    json!({
        "pmtu": pmtu, "loss": link.loss.mean(),
        "completed": done.len(), "runs": runs.len(),
        "median_s": quantile(&done, 0.5), "p90_s": quantile(&done, 0.9), "mean_s": mean(&done),
        "mean_bytes": mean(&bytes), "mean_frames": mean(&frames),
        "timers": [timers.client_initial_ms, timers.server_initial_ms],
    })
}

pub const MTUS: [usize; 5] = [64, 128, 256, 512, 1024];
pub const LOSSES: [f64; 6] = [0.0, 0.02, 0.04, 0.06, 0.08, 0.10];
/// The seed's best MTU (two-way-auth paper §5.2: "512 bytes seems to strike the best
/// balance").
pub const SEED_MTU: usize = 512;

/// Timers calibrated on one clean handshake: each side's longest wait for the peer's next
/// flight (transmission of both flights and the peer's computation), times 1.5. What an
/// implementation learns from its first exchange, as RFC 6298 learns SRTT.
pub fn calibrated_timers(link: LinkConfig, table: CycleTable, suite: Suite, pmtu: usize) -> Timers {
    let clean = LinkConfig {
        loss: Loss::None,
        ..link
    };
    let (h, _) = handshake(clean, table, suite, pmtu, Timers::SEED, 1);
    let [c, s] = h.longest_wait_ms;
    Timers {
        client_initial_ms: (c * 3 / 2).max(100),
        server_initial_ms: (s * 3 / 2).max(100),
        max_ms: 60_000,
    }
}

/// Fig. 7: handshake completion time against link loss for several MTUs, 5 s timers; then
/// the same sweep with calibrated timers, and the best MTU per loss rate.
pub fn fig7_handshake_loss(plan: &Plan, start: Instant) -> Value {
    let suite = Suite::X509Mutual;
    let table = CORTEX_M4_PORTABLE;
    let base = LinkConfig {
        device_hz: OPAL.hz,
        ..Default::default()
    };
    let mut seed_cells = vec![];
    let mut adaptive_cells = vec![];
    for &mtu in &MTUS {
        let timers = calibrated_timers(base, table, suite, mtu);
        for &loss in &LOSSES {
            let link = LinkConfig {
                loss: Loss::Bernoulli { p: loss },
                ..base
            };
            seed_cells.push(cell(plan, link, table, suite, mtu, Timers::SEED));
            adaptive_cells.push(cell(plan, link, table, suite, mtu, timers));
        }
        progress(start, &format!("fig7: MTU {mtu} done"));
    }
    // Best MTU per loss rate for the calibrated timers, among those sending no more bytes
    // than the seed's configuration at that loss.
    let find = |cells: &[Value], mtu: usize, loss: f64| -> Value {
        cells
            .iter()
            .find(|c| c["pmtu"] == mtu && (c["loss"].as_f64().unwrap() - loss).abs() < 1e-9)
            .cloned()
            .expect("cell exists")
    };
    let mut best = vec![];
    for &loss in &LOSSES {
        let seed = find(&seed_cells, SEED_MTU, loss);
        let seed_bytes = seed["mean_bytes"].as_f64().unwrap();
        let choice = MTUS
            .iter()
            .map(|&m| find(&adaptive_cells, m, loss))
            .filter(|c| c["mean_bytes"].as_f64().unwrap() <= seed_bytes)
            .filter(|c| c["completed"] == c["runs"])
            .min_by(|a, b| {
                a["median_s"]
                    .as_f64()
                    .unwrap()
                    .total_cmp(&b["median_s"].as_f64().unwrap())
            });
        best.push(json!({ "loss": loss, "seed": seed, "adaptive": choice }));
    }
    // The same comparison on a bursty channel (Gilbert-Elliott, mean loss 10%, bursts of 3
    // frames on average).
    let bursty = LinkConfig {
        loss: Loss::bursty(0.10, 3.0),
        ..base
    };
    let bursty_seed = cell(plan, bursty, table, suite, SEED_MTU, Timers::SEED);
    let bursty_adaptive: Vec<Value> = MTUS
        .iter()
        .map(|&m| {
            cell(
                plan,
                bursty,
                table,
                suite,
                m,
                calibrated_timers(base, table, suite, m),
            )
        })
        .collect();
    progress(start, "fig7: bursty channel done");
    json!({
        "suite": suite.name(), "platform": OPAL.name, "seeds": plan.seeds(),
        "mtus": MTUS, "losses": LOSSES,
        "seed_timers": seed_cells, "calibrated_timers": adaptive_cells, "best": best,
        "bursty": { "seed": bursty_seed, "calibrated": bursty_adaptive },
    })
}

/// Datagram budgets compared between the carriers: the record carrier's path MTU (the
/// largest datagram of DTLS records) and the CoAP carrier's block size (the largest flight
/// slice per message, CoAP header and options on top).
pub const CARRIER_SIZES: [usize; 5] = [64, 128, 256, 512, 1024];
/// PSK-CCM8, ECDHE-ECDSA-CCM8 with raw public keys, and with certificates (mutual).
pub const CARRIER_SUITES: [Suite; 3] = [Suite::Psk, Suite::RpkMutual, Suite::X509Mutual];
/// A handshake completes in time if the device is established within this.
pub const CARRIER_DEADLINE_MS: u64 = 60_000;
/// The record carrier's timers in the comparison: CoAP's ACK_TIMEOUT (2 s) as the initial
/// value at both ends, doubled per retransmission up to RFC 6347's 60 s, so both carriers
/// wait equally long before their first retransmission.
pub const CARRIER_RECORD_TIMERS: Timers = Timers {
    client_initial_ms: 2_000,
    server_initial_ms: 2_000,
    max_ms: 60_000,
};

/// One handshake over `carrier` at datagram budget `size`.
fn carrier_run(
    carrier: Carrier,
    link: LinkConfig,
    table: CycleTable,
    suite: Suite,
    size: usize,
    seed: u64,
) -> (Handshake, Option<CoapTally>) {
    match carrier {
        Carrier::Records => {
            let (h, _) = handshake(link, table, suite, size, CARRIER_RECORD_TIMERS, seed);
            (h, None)
        }
        Carrier::Coap => {
            let (h, t) = handshake_over_coap(
                link,
                table,
                suite,
                CoapCarrier::with_block(size),
                CARRIER_DEADLINE_MS,
                seed,
            )
            .expect("the carrier's configuration is valid");
            (h, Some(t))
        }
    }
}

/// What one clean handshake put on the air, for the breakdown table.
fn carrier_clean_json(
    carrier: Carrier,
    suite: Suite,
    size: usize,
    h: &Handshake,
    t: Option<&CoapTally>,
) -> Value {
    let coap_bytes = t.map_or(0, |t| t.header_bytes);
    json!({
        "carrier": carrier.name(), "suite": suite.name(), "size": size,
        "completed": h.completed, "time_s": h.time_ms / 1000.0,
        "datagrams": h.net.datagrams_sent, "frames": h.net.frames_sent,
        "frame_bytes": h.net.frame_bytes, "udp_bytes": h.net.udp_bytes,
        "coap_bytes": coap_bytes, "dtls_bytes": h.net.udp_bytes - coap_bytes,
        "device_frames_tx": h.device.frames_tx, "device_frames_rx": h.device.frames_rx,
        "device_cpu_s": h.device.cpu_cycles as f64 / OPAL.hz,
        "requests": t.map(|t| json!({ "put": t.put, "post": t.post, "get": t.get,
                                      "continues": t.continues,
                                      "retransmissions": t.retransmissions,
                                      "longest_wait_ms": h.longest_wait_ms[0] })),
    })
}

/// The DTLS-as-a-CoAP-resource issue's comparison: the handshake over the record carrier
/// and over the CoAP carrier, against frame loss and datagram budget, for PSK, raw public
/// keys and certificates; the device is the OPAL, as in Fig. 7, and every run of a cell
/// uses the same seeds for both carriers.
pub fn carriers_under_loss(plan: &Plan, start: Instant) -> Value {
    let table = CORTEX_M4_PORTABLE;
    let base = LinkConfig {
        device_hz: OPAL.hz,
        ..Default::default()
    };
    let (sizes, losses): (Vec<usize>, Vec<f64>) = if plan.quick {
        (vec![64, 256, 1024], vec![0.0, 0.04, 0.10])
    } else {
        (CARRIER_SIZES.to_vec(), LOSSES.to_vec())
    };
    let mut clean = vec![];
    let mut cells = vec![];
    for &suite in &CARRIER_SUITES {
        for &size in &sizes {
            for carrier in Carrier::BOTH {
                let (h, t) = carrier_run(carrier, base, table, suite, size, 1);
                let mut c = carrier_clean_json(carrier, suite, size, &h, t.as_ref());
                if carrier == Carrier::Records {
                    // The same handshake with Fig. 7's calibrated timers: what the 2 s
                    // timers' spurious retransmissions cost on a clean link.
                    let timers = calibrated_timers(base, table, suite, size);
                    let (h, _) = handshake(base, table, suite, size, timers, 1);
                    c["calibrated"] = json!({
                        "timers_ms": [timers.client_initial_ms, timers.server_initial_ms],
                        "datagrams": h.net.datagrams_sent, "frames": h.net.frames_sent,
                        "udp_bytes": h.net.udp_bytes, "time_s": h.time_ms / 1000.0,
                    });
                }
                clean.push(c);
                for &loss in &losses {
                    let link = LinkConfig {
                        loss: Loss::Bernoulli { p: loss },
                        ..base
                    };
                    let runs = par_map(plan.threads, (1..=plan.seeds()).collect(), |seed| {
                        carrier_run(carrier, link, table, suite, size, seed)
                    });
                    // A run that never completed counts as infinitely slow: the quantiles
                    // are over every run, and a median past the deadline says so.
                    let times: Vec<f64> = runs
                        .iter()
                        .map(|(h, _)| {
                            if h.completed {
                                h.time_ms / 1000.0
                            } else {
                                f64::INFINITY
                            }
                        })
                        .collect();
                    let bytes: Vec<f64> =
                        runs.iter().map(|(h, _)| h.net.udp_bytes as f64).collect();
                    let frames: Vec<f64> =
                        runs.iter().map(|(h, _)| h.net.frames_sent as f64).collect();
                    let datagrams: Vec<f64> = runs
                        .iter()
                        .map(|(h, _)| h.net.datagrams_sent as f64)
                        .collect();
                    let in_time = times
                        .iter()
                        .filter(|&&t| t <= CARRIER_DEADLINE_MS as f64 / 1000.0)
                        .count();
                    let retransmissions: Vec<f64> = runs
                        .iter()
                        .filter_map(|(_, t)| t.as_ref().map(|t| f64::from(t.retransmissions)))
                        .collect();
                    cells.push(json!({
                        "carrier": carrier.name(), "suite": suite.name(), "size": size,
                        "loss": loss, "runs": runs.len(),
                        "completed": runs.iter().filter(|(h, _)| h.completed).count(),
                        "in_time": in_time,
                        "median_s": quantile(&times, 0.5), "p10_s": quantile(&times, 0.1),
                        "p90_s": quantile(&times, 0.9),
                        "mean_bytes": mean(&bytes), "median_bytes": quantile(&bytes, 0.5),
                        "mean_frames": mean(&frames), "median_frames": quantile(&frames, 0.5),
                        "mean_datagrams": mean(&datagrams),
                        "mean_retransmissions": (!retransmissions.is_empty()).then(|| mean(&retransmissions)),
                    }));
                }
            }
        }
        progress(start, &format!("carriers: {} done", suite.name()));
    }
    let t = CoapCarrier::with_block(1024).transmission;
    let coap = json!({
        "ack_timeout_ms": t.ack_timeout.as_millis() as u64,
        "ack_random_factor": f64::from(t.ack_random_factor_milli) / 1000.0,
        "max_retransmit": t.max_retransmit,
    });
    json!({
        "platform": OPAL.name, "seeds": plan.seeds(), "sizes": sizes, "losses": losses,
        "suites": CARRIER_SUITES.map(Suite::name), "carriers": Carrier::BOTH.map(Carrier::name),
        "deadline_s": CARRIER_DEADLINE_MS as f64 / 1000.0,
        "record_timers_ms": [CARRIER_RECORD_TIMERS.client_initial_ms,
                             CARRIER_RECORD_TIMERS.server_initial_ms, CARRIER_RECORD_TIMERS.max_ms],
        "record_max_retransmissions": sigil_dtls::Config::default().max_retransmissions,
        "coap": coap,
        "clean": clean, "cells": cells,
    })
}

/// Bytes a DTLS record adds to a plaintext of `x` bytes.
fn cbc_hmac_sha1_record(x: usize) -> usize {
    // RFC 5246 §6.2.3.2 / RFC 6347: 13-byte header, 16-byte explicit IV, then plaintext,
    // 20-byte MAC and 1..16 bytes of padding to the block size.
    13 + 16 + (x + 20 + 1).div_ceil(16) * 16
}

/// Cost of sending `payload` UDP bytes on one hop with the latency model, per the emulator's
/// real framing.
fn framed_cost_us(payload: usize, l: &Latency) -> u64 {
    let d = Datagram {
        src: 1,
        dst: 2,
        src_port: 5684,
        dst_port: 5684,
        payload: vec![0; payload],
    };
    lowpan::fragment(&d, Path { hops: 1 }, 0)
        .expect("fits")
        .iter()
        .map(|p| l.frame_us(lowpan::MAC_HEADER + p.len() + lowpan::FCS))
        .sum()
}

/// The paper's c(x) = ceil(x/100)·a + x·b.
fn paper_cost(x: usize) -> f64 {
    x.div_ceil(100) as f64 * 27.368 + x as f64 * 0.072
}

/// Fig. 9: network energy overhead of the record format against plaintext size.
pub fn fig9_record_overhead() -> Value {
    // The CCM-8 record overhead, measured on a real session.
    let (_, s) = handshake(
        LinkConfig::default(),
        CORTEX_M4_PORTABLE,
        Suite::Psk,
        1024,
        Timers::SEED,
        1,
    );
    let mut s = s.expect("clean handshake");
    s.client.send(&[0u8; 100]).expect("send");
    let mut buf = [0u8; 512];
    let n = s
        .client
        .poll_transmit(sigil_time::Instant::ZERO, &mut buf)
        .expect("a record");
    let ccm8 = n - 100;
    let sizes: Vec<usize> = (1..=1000).collect();
    let l = Latency::default();
    type RecordLen = Box<dyn Fn(usize) -> usize>;
    let formats: [(&str, RecordLen); 4] = [
        ("CBC + HMAC-SHA1 (seed)", Box::new(cbc_hmac_sha1_record)),
        ("AES-CCM-8 (Sigil, measured)", Box::new(move |x| x + ccm8)),
        ("AES-GCM, 16-byte tag", Box::new(|x| x + 13 + 8 + 16)),
        ("compressed header + CCM-8", Box::new(|x| x + 5 + 8 + 8)),
    ];
    let mut series = vec![];
    for (name, f) in &formats {
        let paper: Vec<f64> = sizes
            .iter()
            .map(|&x| 100.0 * (paper_cost(f(x)) / paper_cost(x) - 1.0))
            .collect();
        let framed: Vec<f64> = sizes
            .iter()
            .map(|&x| {
                // Plain: the plaintext as the UDP payload; secured: the record.
                100.0 * (framed_cost_us(f(x), &l) as f64 / framed_cost_us(x, &l) as f64 - 1.0)
            })
            .collect();
        series.push(json!({ "name": name, "overhead_at_16": f(16) - 16,
                            "paper_model_pct": paper, "framed_pct": framed }));
    }
    json!({ "sizes": sizes, "ccm8_overhead": ccm8, "series": series,
            "paper": { "small_plaintext_max_pct": 17, "record_overhead_max": 64,
                       "proposed_overhead": 21 } })
}

/// Device energy of one clean handshake of each suite on `p`, at `pmtu`.
fn handshake_energy(
    p: &Platform,
    table: CycleTable,
    suite: Suite,
    pmtu: usize,
) -> (Handshake, Value) {
    let link = LinkConfig {
        device_hz: p.hz,
        ..Default::default()
    };
    let (h, _) = handshake(link, table, suite, pmtu, Timers::SEED, 1);
    let e = energy_json(&h.device, p);
    (h, e)
}

/// The two-way-authentication paper's battery estimate: two AA cells, 5% of their energy for
/// one handshake a day.
pub fn battery_life() -> Value {
    let years = |mj: f64| 0.05 * TWO_AA_JOULES / (mj / 1000.0 * 365.0);
    let mut rows = vec![];
    for suite in [
        Suite::Psk,
        Suite::RpkServerOnly,
        Suite::RpkMutual,
        Suite::X509ServerOnly,
        Suite::X509Mutual,
    ] {
        let (h, e) = handshake_energy(&OPAL, CORTEX_M4_PORTABLE, suite, 1024);
        let mj = e["active_mj"].as_f64().unwrap();
        rows.push(
            json!({ "suite": suite.name(), "energy": e, "time_ms": h.time_ms,
                          "years": years(mj) }),
        );
    }
    json!({ "platform": OPAL.name, "battery_j": TWO_AA_JOULES, "rows": rows,
            "paper": [ { "suite": "RSA-2048 + TPM, mutual", "mj": 487.8, "years": years(487.8) },
                       { "suite": "RSA-2048 + TPM, server-only", "mj": 286.4, "years": years(286.4) },
                       { "suite": "ECC secp224r1 software, mutual (Table 4)", "mj": 193.6,
                         "years": years(193.6) } ] })
}

/// The ATmega's costs with X25519 cycles standing in for the P-256 operations an ECDHE
/// handshake needs (P-256 does not build for AVR; X25519 does and is measured).
const AVR_ECDHE_BY_X25519: CycleTable = CycleTable {
    name: "AVR, X25519 cycles for the ephemeral ECDH",
    keygen_p256: AVR.x25519,
    ecdh_p256: AVR.x25519,
    ..AVR
};

/// Erasing and writing one flash page by self-programming, in ms: the ATmega family's
/// typical page erase (about 4.5 ms) plus page write (about 4.5 ms), at CPU-active current.
/// The ATmega128RFA1's own figure was not measured here; this is the assumption.
const FLASH_PAGE_ERASE_WRITE_MS: f64 = 9.0;
/// The ATmega128RFA1's flash page, in bytes.
const FLASH_PAGE_BYTES: usize = 256;

/// What a session costs a device whose association is cached in flash instead of
/// re-handshaking: reading the saved record back (its HMAC-SHA-256 checked over
/// `sigil_dtls::saved::MAX_ENCODED_LEN` bytes), then one new write reservation (the record
/// MACed again and written). An upper bound: the sensor writes once per 64 records, not once
/// per session, and an association still in RAM costs nothing.
struct CachedSession {
    record_bytes: usize,
    hmac_blocks: u64,
    flash_pages: usize,
    cpu_mj: f64,
    flash_mj: f64,
    total_mj: f64,
}

fn cached_association_mj(p: &Platform, table: &CycleTable) -> CachedSession {
    let record_bytes = sigil_dtls::saved::MAX_ENCODED_LEN;
    // HMAC: inner hash over the key block and the record, outer over the key block and the
    // inner digest; once to check the stored record, once to MAC the new reservation.
    let hmac = sha256_blocks(64 + record_bytes) + sha256_blocks(64 + 32);
    let hmac_blocks = 2 * hmac;
    let cycles = table.sha256_blocks(hmac_blocks);
    let cpu_mw = p.volts * p.cpu_ma;
    let cpu_mj = cycles as f64 / p.hz * cpu_mw;
    let flash_pages = record_bytes.div_ceil(FLASH_PAGE_BYTES);
    let flash_mj = flash_pages as f64 * FLASH_PAGE_ERASE_WRITE_MS / 1000.0 * cpu_mw;
    CachedSession {
        record_bytes,
        hmac_blocks,
        flash_pages,
        cpu_mj,
        flash_mj,
        total_mj: cpu_mj + flash_mj,
    }
}

/// DTLS-as-CoAP-resource Fig. 4: MagoNode lifetime against DTLS sessions per hour.
pub fn fig4_lifetime() -> Value {
    let p = MAGONODE;
    // Between handshakes: asleep with low-power listening, a 1.25 ms channel check every
    // 125 ms (1 %, the level the two-way-authentication paper cites), the same for every
    // curve: an hour of it in the emulator gives the idle power.
    let lpl = LinkConfig {
        device_hz: p.hz,
        device_wake_interval_us: 125_000,
        device_check_us: 1_250,
        ..Default::default()
    };
    let mut idle = Emulator::new(lpl, 1);
    idle.sleep();
    idle.advance(3_600_000_000);
    let idle_w = idle.device_activity().energy(&p).total_uj() / 1e6 / 3600.0;
    let rates: Vec<f64> = vec![0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0];
    let life = |session_mj: f64| -> Vec<f64> {
        rates
            .iter()
            .map(|r| {
                TWO_AA_JOULES / (idle_w + r / 3600.0 * session_mj / 1000.0) / (365.0 * 86400.0)
            })
            .collect()
    };
    let (psk, epsk) = (
        handshake_energy(&p, AVR, Suite::Psk, 1024),
        handshake_energy(&p, AVR_ECDHE_BY_X25519, Suite::EcdhePsk, 1024),
    );
    assert_eq!(psk.0.device_ops.agree, 0);
    let radio = |e: &Value| e["tx_mj"].as_f64().unwrap() + e["rx_mj"].as_f64().unwrap();
    let rpk_radio = radio(&handshake_energy(&p, CORTEX_M4_PORTABLE, Suite::RpkServerOnly, 1024).1);
    let epsk_radio = radio(&epsk.1);
    // The paper's Table III energies for the operations each suite needs, plus the radio
    // energy of the closest Sigil handshake in the emulator.
    let paper = [
        ("paper ECDH_ECDSA, standard", 380.33 + 387.41 + rpk_radio),
        ("paper ECDH_ECDSA, optimised", 15.67 + 15.17 + rpk_radio),
        ("paper ECDHE_PSK, standard", 380.33 + epsk_radio),
        ("paper ECDHE_PSK, optimised", 15.67 + epsk_radio),
    ];
    let mut series = vec![
        json!({ "name": "Sigil PSK (measured on ATmega)", "session_mj": psk.1["active_mj"],
                "years": life(psk.1["active_mj"].as_f64().unwrap()) }),
        json!({ "name": "Sigil ECDHE-PSK, X25519 on ATmega", "session_mj": epsk.1["active_mj"],
                "years": life(epsk.1["active_mj"].as_f64().unwrap()) }),
    ];
    let cached = cached_association_mj(&p, &AVR);
    series.push(
        json!({ "name": "Sigil, association cached in flash (no handshake)",
                        "session_mj": cached.total_mj, "years": life(cached.total_mj) }),
    );
    for (name, mj) in paper {
        series.push(json!({ "name": name, "session_mj": mj, "years": life(mj) }));
    }
    json!({ "platform": p.name, "battery_j": TWO_AA_JOULES, "idle_mw": idle_w * 1000.0,
            "rates_per_hour": rates, "series": series,
            "cached": { "record_bytes": cached.record_bytes, "hmac_blocks": cached.hmac_blocks,
                        "cpu_mj": cached.cpu_mj, "flash_mj": cached.flash_mj,
                        "flash_pages": cached.flash_pages,
                        "flash_page_ms": FLASH_PAGE_ERASE_WRITE_MS },
            "paper": { "improvement_ecdh_ecdsa": [2.8, 6.5], "improvement_ecdhe_psk": [2.0, 4.4] } })
}

fn per_reading_json(r: &PerReading, p: &Platform) -> Value {
    let a = r.per_reading();
    let mut e = energy_json(&a, p);
    e["latency_ms"] = json!(r.latency_ms);
    e["udp_bytes_up"] = json!(r.udp_bytes_up);
    e["delivered"] = json!(r.acknowledged);
    e["readings"] = json!(r.readings);
    e
}

/// RFC 8387 §8.3/8.4 quantified: per-reading cost of signed objects, of readings in a DTLS
/// session whose handshake is amortised over N readings, and of the CryptoDiet scheme, for a
/// sleepy sensor waking every T.
pub fn crossover(plan: &Plan, start: Instant) -> Value {
    let p = CC2538;
    let table = CORTEX_M4_PORTABLE;
    let link = LinkConfig {
        device_hz: p.hz,
        ..Default::default()
    };
    let n = if plan.quick { 4 } else { 20 };
    let periods_s: [u64; 3] = [10, 60, 600];
    let mut by_period = vec![];
    for &t in &periods_s {
        let every = t * 1000;
        let signed = scenarios::signed_readings(link, table, n, every, 1);
        let mut schemes = vec![
            json!({ "name": "signed objects (COSE, Ed25519)", "setup": Value::Null,
                                        "reading": per_reading_json(&signed, &p) }),
        ];
        for suite in [Suite::Psk, Suite::RpkMutual] {
            let (h, s) = handshake(link, table, suite, 1024, Timers::SEED, 1);
            let r = scenarios::dtls_readings(&mut s.expect("clean handshake"), n, every);
            let mut setup = energy_json(&h.device, &p);
            setup["time_ms"] = json!(h.time_ms);
            schemes.push(
                json!({ "name": format!("DTLS {}", suite.name()), "setup": setup,
                                 "reading": per_reading_json(&r, &p) }),
            );
        }
        let d = cryptodiet::run(link, table, n, every, 1);
        let mut setup = energy_json(&d.setup, &p);
        setup["time_ms"] = json!(d.setup_ms);
        schemes.push(
            json!({ "name": "CryptoDiet-style (ECDH + AES + ECDSA per message)",
                             "setup": setup, "reading": per_reading_json(&d.readings, &p) }),
        );
        // Crossover: the N above which a session scheme's per-reading energy is below the
        // signed objects'.
        let signed_mj = schemes[0]["reading"]["total_mj"].as_f64().unwrap();
        for s in schemes.iter_mut().skip(1) {
            let setup_mj = s["setup"]["active_mj"].as_f64().unwrap();
            let per = s["reading"]["total_mj"].as_f64().unwrap();
            s["crossover_n"] = if per < signed_mj {
                json!((setup_mj / (signed_mj - per)).ceil())
            } else {
                Value::Null
            };
        }
        by_period.push(json!({ "period_s": t, "schemes": schemes }));
        progress(start, &format!("crossover: T = {t} s done"));
    }
    json!({ "platform": p.name, "readings_per_run": n, "periods": by_period })
}

/// Everything, as one JSON document.
pub fn run_all(plan: Plan) -> Value {
    let start = Instant::now();
    let platforms: Vec<Value> = PLATFORMS
        .iter()
        .map(|p| {
            json!({ "name": p.name, "hz": p.hz, "volts": p.volts, "cpu_ma": p.cpu_ma,
                    "tx_ma": p.tx_ma, "rx_ma": p.rx_ma, "sleep_ua": p.sleep_ua,
                    "cycles": p.cycles.map(|c| c.name), "source": p.source })
        })
        .collect();
    let fig5 = fig5_rtt();
    progress(start, "fig5: round-trip times done");
    let fig9 = fig9_record_overhead();
    progress(start, "fig9: record overhead done");
    let battery = battery_life();
    progress(start, "battery estimate done");
    let fig4 = fig4_lifetime();
    progress(start, "fig4: lifetime done");
    let cross = crossover(&plan, start);
    let fig7 = fig7_handshake_loss(&plan, start);
    let carriers = carriers_under_loss(&plan, start);
    json!({
        "quick": plan.quick,
        "latency": { "per_frame_ms": 27.368, "per_byte_ms": 0.072 },
        "platforms": platforms,
        "fig5": fig5, "fig7": fig7, "fig9": fig9, "battery": battery, "fig4": fig4,
        "crossover": cross, "carriers": carriers,
        "elapsed_s": start.elapsed().as_secs_f64(),
    })
}
